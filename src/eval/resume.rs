//! What a run still has to do: each (item, arm) has a fingerprint (what its result was
//! graded from), a result in `items.jsonl` with the same fingerprint is done, anything else
//! (new, or its question, reference, panel, grader settings or instruction changed) runs.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use super::arms::Arms;
use super::data::{Item, Prompt};
use crate::app::evals::{ArmInfo, ItemResult};
use crate::config::PanelConfig;

/// One unit of work: an item on a panel arm, or an item on an agent's baselines (which of
/// the two it still needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Job {
    Panel {
        item: usize,
        arm: usize,
    },
    Agent {
        item: usize,
        agent: usize,
        alone: bool,
        consistency: bool,
    },
}

impl Job {
    pub fn item(self) -> usize {
        match self {
            Self::Panel { item, .. } | Self::Agent { item, .. } => item,
        }
    }
}

/// The fingerprints of every (item id, arm name) of the run.
pub struct Fingerprints(HashMap<(String, String), String>);

impl Fingerprints {
    /// `settings` describes the grader's settings and the instruction.
    pub fn new(items: &[Item], arms: &Arms, settings: &str) -> Self {
        // Each arm's and each item's parts are written once, not once per pair.
        let mut arm_parts: Vec<(&str, [String; 3])> = Vec::new();
        for arm in &arms.panels {
            arm_parts.push((&arm.info.name, arm_part(&arm.info, &arm.panel, settings)));
        }
        for agent in &arms.agents {
            for info in agent.alone.iter().chain(agent.consistency.iter()) {
                arm_parts.push((&info.name, arm_part(info, &agent.panel, settings)));
            }
        }
        let mut map = HashMap::with_capacity(items.len() * arm_parts.len());
        for item in items {
            let item_part = item_part(item);
            for (name, arm_part) in &arm_parts {
                let parts = item_part.iter().chain(arm_part.iter());
                map.insert((item.id.clone(), (*name).to_string()), fingerprint(parts));
            }
        }
        Self(map)
    }

    pub fn of(&self, item: &str, arm: &str) -> String {
        self.0
            .get(&(item.to_string(), arm.to_string()))
            .cloned()
            .unwrap_or_default()
    }

    /// `result` is one of this run's, graded from what the run holds now.
    pub fn current(&self, result: &ItemResult) -> bool {
        self.0
            .get(&(result.item.clone(), result.arm.clone()))
            .is_some_and(|f| *f == result.fingerprint)
    }
}

/// The jobs left, item-major (so a budget stop leaves whole items behind it).
pub fn jobs(items: &[Item], arms: &Arms, done: &dyn Fn(&Item, &ArmInfo) -> bool) -> Vec<Job> {
    let mut jobs = Vec::new();
    for (index, item) in items.iter().enumerate() {
        for (arm, panel) in arms.panels.iter().enumerate() {
            if !done(item, &panel.info) {
                jobs.push(Job::Panel { item: index, arm });
            }
        }
        for (agent, its) in arms.agents.iter().enumerate() {
            let alone = its.alone.as_ref().is_some_and(|info| !done(item, info));
            let consistency = its
                .consistency
                .as_ref()
                .is_some_and(|info| !done(item, info));
            if alone || consistency {
                jobs.push(Job::Agent {
                    item: index,
                    agent,
                    alone,
                    consistency,
                });
            }
        }
    }
    jobs
}

/// The panel as loaded (agents, models, options, retry policy), without the path it was
/// read from (`team.yaml` and `./team.yaml` are one panel). Secrets print redacted, and a
/// hash of them reveals nothing either way.
pub fn comparable(panel: &PanelConfig) -> String {
    let mut panel = panel.clone();
    panel.source = std::path::PathBuf::new();
    format!("{panel:?}")
}

/// What an item contributes: its question (or messages) and its reference.
fn item_part(item: &Item) -> [String; 2] {
    let prompt = match &item.prompt {
        Prompt::Question(q) => serde_json::Value::String(q.clone()).to_string(),
        Prompt::Messages(m) => serde_json::to_string(m).unwrap_or_default(),
    };
    let answer = item
        .answer
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    [prompt, answer]
}

/// What an arm contributes: its name and kind, its panel, the grader's settings.
fn arm_part(arm: &ArmInfo, panel: &PanelConfig, settings: &str) -> [String; 3] {
    [format!("{arm:?}"), comparable(panel), settings.to_string()]
}

fn fingerprint<'a>(parts: impl Iterator<Item = &'a String>) -> String {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize()
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::eval::arms::{Baselines, arms};
    use serde_json::json;

    fn item(id: &str, question: &str) -> Item {
        Item {
            id: id.into(),
            line: 1,
            prompt: Prompt::Question(question.into()),
            answer: Some(json!("4")),
        }
    }

    #[test]
    fn a_change_of_question_panel_or_settings_changes_the_fingerprint() {
        let panel = Arc::new(crate::config::demo_panel("http://127.0.0.1:9/v1"));
        let both = Baselines {
            agents: true,
            self_consistency: Some(3),
        };
        let trio = arms(&[Arc::clone(&panel)], &[], both).unwrap();
        let items = vec![item("1", "2+2?")];
        let base = Fingerprints::new(&items, &trio, "exact");
        let of = |f: &Fingerprints| f.of("1", "demo");
        assert_eq!(of(&base).len(), 24);
        assert_eq!(of(&Fingerprints::new(&items, &trio, "exact")), of(&base));
        assert_ne!(of(&Fingerprints::new(&items, &trio, "numeric")), of(&base));
        let changed = vec![item("1", "2+3?")];
        assert_ne!(of(&Fingerprints::new(&changed, &trio, "exact")), of(&base));
        let mut other = (*panel).clone();
        other.orchestrator.max_attempts_per_turn = 1;
        let other = arms(&[Arc::new(other)], &[], both).unwrap();
        assert_ne!(of(&Fingerprints::new(&items, &other, "exact")), of(&base));
        // Where the config was read from is not part of it.
        let mut moved = (*panel).clone();
        moved.source = "./elsewhere/demo.yaml".into();
        let moved = arms(&[Arc::new(moved)], &[], both).unwrap();
        assert_eq!(of(&Fingerprints::new(&items, &moved, "exact")), of(&base));
        // The alone and self-consistency arms of one agent differ too.
        assert_ne!(
            base.of("1", "agent:sim-analyst"),
            base.of("1", "sc3:sim-analyst")
        );
    }

    #[test]
    fn only_what_is_missing_runs() {
        let panel = Arc::new(crate::config::demo_panel("http://127.0.0.1:9/v1"));
        let arms = arms(
            &[panel],
            &[],
            Baselines {
                agents: true,
                self_consistency: Some(3),
            },
        )
        .unwrap();
        let items = vec![item("1", "a?"), item("2", "b?")];
        let done = |item: &Item, info: &ArmInfo| {
            item.id == "1" || (info.name == "demo") || info.name.starts_with("sc3:")
        };
        let jobs = jobs(&items, &arms, &done);
        // Item 2: the panel and every agent's self-consistency are done; each agent alone
        // is not.
        assert_eq!(jobs.len(), 3);
        assert!(jobs.iter().all(|j| matches!(
            j,
            Job::Agent {
                item: 1,
                alone: true,
                consistency: false,
                ..
            }
        )));
    }
}
