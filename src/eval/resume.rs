//! What a run still has to do. Each (item, arm) answer has a fingerprint (what it was asked
//! from: the question, the arm's panel, the instruction, the structured output asked
//! for), and each item a grading fingerprint (the grader's settings and the reference).
//! A result in `items.jsonl` whose answer fingerprint matches is asked no more: when its
//! grading fingerprint matches too (and its grading did not fail) it is done, else its
//! stored answer is graded again, without an upstream call (the judge's apart). Anything
//! else (new, its question or panel changed, its sessions failed) runs.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use super::arms::Arms;
use super::data::{Item, Prompt};
use crate::app::evals::{ArmInfo, ItemResult};
use crate::config::PanelConfig;

/// One unit of work: an item on a panel arm, an item on an agent's baselines (which of
/// the two it still needs), or a stored answer to grade again.
#[derive(Debug, Clone, PartialEq)]
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
    Regrade {
        item: usize,
        result: Box<ItemResult>,
    },
}

impl Job {
    pub fn item(&self) -> usize {
        match self {
            Self::Panel { item, .. } | Self::Agent { item, .. } | Self::Regrade { item, .. } => {
                *item
            }
        }
    }
}

/// What an earlier result of the run is worth now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Earlier {
    /// Asked and graded from what the run holds now: kept as it is.
    Done,
    /// Asked from what the run holds now, graded otherwise (or its grading failed): its
    /// stored answer is graded again.
    Regrade,
    /// Its question or panel changed, or its sessions failed: asked again.
    Stale,
}

/// The fingerprints of every (item id, arm name) answer of the run, and of every item's
/// grading.
pub struct Fingerprints {
    answers: Option<HashMap<(String, String), String>>,
    grading: HashMap<String, String>,
}

impl Fingerprints {
    /// `asked` describes what every session is sent besides the item (the instruction,
    /// the structured output); `grading` the grader's settings.
    pub fn new(items: &[Item], arms: &Arms, asked: &str, grading: &str) -> Self {
        // Each arm's and each item's parts are written once, not once per pair.
        let mut arm_parts: Vec<(&str, [String; 3])> = Vec::new();
        for arm in &arms.panels {
            arm_parts.push((&arm.info.name, arm_part(&arm.info, &arm.panel, asked)));
        }
        for agent in &arms.agents {
            for info in agent.alone.iter().chain(agent.consistency.iter()) {
                arm_parts.push((&info.name, arm_part(info, &agent.panel, asked)));
            }
        }
        let mut map = HashMap::with_capacity(items.len() * arm_parts.len());
        for item in items {
            let prompt = prompt_part(item);
            for (name, arm_part) in &arm_parts {
                let parts = std::iter::once(&prompt).chain(arm_part.iter());
                map.insert((item.id.clone(), (*name).to_string()), fingerprint(parts));
            }
        }
        Self {
            answers: Some(map),
            grading: Self::gradings(items, grading),
        }
    }

    /// For grading stored answers again only (`--regrade`): every stored answer is taken
    /// as asked from what the run holds.
    pub fn grading_only(items: &[Item], grading: &str) -> Self {
        Self {
            answers: None,
            grading: Self::gradings(items, grading),
        }
    }

    fn gradings(items: &[Item], grading: &str) -> HashMap<String, String> {
        let settings = grading.to_string();
        items
            .iter()
            .map(|item| {
                let reference = reference_part(item);
                (
                    item.id.clone(),
                    fingerprint([&settings, &reference].into_iter()),
                )
            })
            .collect()
    }

    /// The answer's fingerprint (empty when grading only: the stored one stands).
    pub fn answer(&self, item: &str, arm: &str) -> String {
        self.answers
            .as_ref()
            .and_then(|map| map.get(&(item.to_string(), arm.to_string())))
            .cloned()
            .unwrap_or_default()
    }

    pub fn grading(&self, item: &str) -> String {
        self.grading.get(item).cloned().unwrap_or_default()
    }

    /// What `result`, one of this run's earlier lines, is worth now.
    pub fn earlier(&self, result: &ItemResult) -> Earlier {
        let asked_so = match &self.answers {
            Some(map) => map
                .get(&(result.item.clone(), result.arm.clone()))
                .is_some_and(|f| *f == result.fingerprint),
            None => self.grading.contains_key(&result.item),
        };
        if !asked_so || !result.answered() {
            return Earlier::Stale;
        }
        if result.failed.is_none() && result.grading == self.grading(&result.item) {
            Earlier::Done
        } else {
            Earlier::Regrade
        }
    }
}

/// What is left of a run: the earlier results kept as they are, and the jobs, item-major
/// (so a budget or failure stop leaves whole items behind it).
pub struct Work {
    pub kept: Vec<ItemResult>,
    pub jobs: Vec<Job>,
}

/// The work of `items` on `infos` (every arm reported, in order) given the run's `earlier`
/// lines (the newest of each item and arm counts). An arm that `arms` cannot run (none can,
/// when grading only) keeps its earlier result whatever it is worth.
pub fn work(
    items: &[Item],
    arms: &Arms,
    infos: &[ArmInfo],
    earlier: Vec<ItemResult>,
    fingerprints: &Fingerprints,
) -> Work {
    let mut newest: HashMap<(String, String), ItemResult> = HashMap::new();
    for result in earlier {
        newest.insert((result.item.clone(), result.arm.clone()), result);
    }
    let runnable = |name: &str| {
        arms.panels.iter().any(|p| p.info.name == name)
            || arms.agents.iter().any(|a| {
                a.alone
                    .iter()
                    .chain(a.consistency.iter())
                    .any(|i| i.name == name)
            })
    };
    let mut work = Work {
        kept: Vec::new(),
        jobs: Vec::new(),
    };
    for (index, item) in items.iter().enumerate() {
        // Whether the arm must be asked again; a stored result is kept or graded again.
        let mut ask = |info: &ArmInfo| -> bool {
            let Some(result) = newest.remove(&(item.id.clone(), info.name.clone())) else {
                return runnable(&info.name);
            };
            match fingerprints.earlier(&result) {
                Earlier::Done => work.kept.push(result),
                Earlier::Regrade => work.jobs.push(Job::Regrade {
                    item: index,
                    result: Box::new(result),
                }),
                Earlier::Stale if runnable(&info.name) => return true,
                Earlier::Stale => work.kept.push(result),
            }
            false
        };
        let mut runs = Vec::new();
        for info in infos {
            if ask(info) {
                runs.push(info.name.clone());
            }
        }
        for (arm, panel) in arms.panels.iter().enumerate() {
            if runs.contains(&panel.info.name) {
                work.jobs.push(Job::Panel { item: index, arm });
            }
        }
        for (agent, its) in arms.agents.iter().enumerate() {
            let wanted = |info: &Option<ArmInfo>| {
                info.as_ref().is_some_and(|info| runs.contains(&info.name))
            };
            let (alone, consistency) = (wanted(&its.alone), wanted(&its.consistency));
            if alone || consistency {
                work.jobs.push(Job::Agent {
                    item: index,
                    agent,
                    alone,
                    consistency,
                });
            }
        }
    }
    work
}

/// The panel as loaded (agents, models, options, retry policy), without the path it was
/// read from (`team.yaml` and `./team.yaml` are one panel). Secrets print redacted, and a
/// hash of them reveals nothing either way.
pub fn comparable(panel: &PanelConfig) -> String {
    let mut panel = panel.clone();
    panel.source = std::path::PathBuf::new();
    format!("{panel:?}")
}

/// What an item asks: its question (or messages).
fn prompt_part(item: &Item) -> String {
    match &item.prompt {
        Prompt::Question(q) => serde_json::Value::String(q.clone()).to_string(),
        Prompt::Messages(m) => serde_json::to_string(m).unwrap_or_default(),
    }
}

/// What an item is graded against: its reference.
fn reference_part(item: &Item) -> String {
    item.answer
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default()
}

/// What an arm contributes: its name and kind, its panel, what every session is sent.
fn arm_part(arm: &ArmInfo, panel: &PanelConfig, asked: &str) -> [String; 3] {
    [format!("{arm:?}"), comparable(panel), asked.to_string()]
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
            metadata: serde_json::Map::new(),
        }
    }

    fn trio() -> Arms {
        let panel = Arc::new(crate::config::demo_panel("http://127.0.0.1:9/v1"));
        let both = Baselines {
            agents: true,
            self_consistency: Some(3),
        };
        arms(&[panel], &[], both).unwrap()
    }

    #[test]
    fn a_change_of_question_panel_or_instruction_changes_the_answers_fingerprint() {
        let panel = Arc::new(crate::config::demo_panel("http://127.0.0.1:9/v1"));
        let both = Baselines {
            agents: true,
            self_consistency: Some(3),
        };
        let trio = trio();
        let items = vec![item("1", "2+2?")];
        let base = Fingerprints::new(&items, &trio, "asked", "exact");
        let of = |f: &Fingerprints| f.answer("1", "demo");
        assert_eq!(of(&base).len(), 24);
        assert_eq!(
            of(&Fingerprints::new(&items, &trio, "asked", "exact")),
            of(&base)
        );
        assert_ne!(
            of(&Fingerprints::new(&items, &trio, "other", "exact")),
            of(&base)
        );
        // The grader is not part of it: another grader grades the same answers.
        let numeric = Fingerprints::new(&items, &trio, "asked", "numeric");
        assert_eq!(of(&numeric), of(&base));
        assert_ne!(numeric.grading("1"), base.grading("1"));
        let changed = vec![item("1", "2+3?")];
        let moved_question = Fingerprints::new(&changed, &trio, "asked", "exact");
        assert_ne!(of(&moved_question), of(&base));
        assert_eq!(moved_question.grading("1"), base.grading("1"));
        // A new reference is graded again, not asked again.
        let mut other_reference = items.clone();
        other_reference[0].answer = Some(json!("5"));
        let regraded = Fingerprints::new(&other_reference, &trio, "asked", "exact");
        assert_eq!(of(&regraded), of(&base));
        assert_ne!(regraded.grading("1"), base.grading("1"));
        let mut other = (*panel).clone();
        other.orchestrator.max_attempts_per_turn = 1;
        let other = arms(&[Arc::new(other)], &[], both).unwrap();
        assert_ne!(
            of(&Fingerprints::new(&items, &other, "asked", "exact")),
            of(&base)
        );
        // Where the config was read from is not part of it.
        let mut moved = (*panel).clone();
        moved.source = "./elsewhere/demo.yaml".into();
        let moved = arms(&[Arc::new(moved)], &[], both).unwrap();
        assert_eq!(
            of(&Fingerprints::new(&items, &moved, "asked", "exact")),
            of(&base)
        );
        // The alone and self-consistency arms of one agent differ too.
        assert_ne!(
            base.answer("1", "agent:sim-analyst"),
            base.answer("1", "sc3:sim-analyst")
        );
    }

    /// A result of `arm` on `item` as the run's fingerprints make it, answered or not.
    fn result(f: &Fingerprints, item: &str, arm: &str, answered: bool) -> ItemResult {
        let sc = arm.starts_with("sc");
        ItemResult {
            item: item.into(),
            arm: arm.into(),
            kind: if sc {
                crate::app::evals::ArmKind::SelfConsistency
            } else {
                crate::app::evals::ArmKind::Panel
            },
            answer: (answered && !sc).then(|| "Answer: 4".to_string()),
            sample_answers: if sc && answered {
                vec![None, Some("Answer: 4".into())]
            } else {
                Vec::new()
            },
            failed: (!answered).then(|| "upstream down".to_string()),
            fingerprint: f.answer(item, arm),
            grading: f.grading(item),
            ..ItemResult::default()
        }
    }

    #[test]
    fn only_what_is_missing_runs_and_only_what_was_graded_otherwise_is_graded_again() {
        let arms = trio();
        let infos = arms.infos();
        let items = vec![item("1", "a?"), item("2", "b?")];
        let f = Fingerprints::new(&items, &arms, "asked", "exact");
        let mut earlier: Vec<ItemResult> = infos
            .iter()
            .map(|info| result(&f, "1", &info.name, true))
            .collect();
        // Item 2: the panel and every agent's self-consistency answered; each agent alone
        // failed.
        for info in &infos {
            let answered = info.name == "demo" || info.name.starts_with("sc3:");
            earlier.push(result(&f, "2", &info.name, answered));
        }
        let work = work(&items, &arms, &infos, earlier.clone(), &f);
        assert_eq!(work.kept.len(), infos.len() + 4);
        assert_eq!(work.jobs.len(), 3);
        assert!(work.jobs.iter().all(|j| matches!(
            j,
            Job::Agent {
                item: 1,
                alone: true,
                consistency: false,
                ..
            }
        )));
        // Another grader: every answered result is graded again, the failed ones asked.
        let g = Fingerprints::new(&items, &arms, "asked", "numeric");
        let again = super::work(&items, &arms, &infos, earlier.clone(), &g);
        assert!(again.kept.is_empty());
        let regrades = again
            .jobs
            .iter()
            .filter(|j| matches!(j, Job::Regrade { .. }))
            .count();
        assert_eq!(regrades, infos.len() + 4);
        assert_eq!(again.jobs.len(), regrades + 3);
        // Grading only (no panel to ask): the failed ones are kept as they are.
        let none = Arms {
            panels: Vec::new(),
            agents: Vec::new(),
        };
        let only = Fingerprints::grading_only(&items, "numeric");
        let regrade = super::work(&items, &none, &infos, earlier, &only);
        assert_eq!(regrade.kept.len(), 3);
        assert_eq!(regrade.jobs.len(), infos.len() + 4);
    }
}
