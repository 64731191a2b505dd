//! The arms of a run, as panels the session machinery runs: each panel (and its
//! variants) as configured, and for each of its agents a one-agent panel that makes one
//! upstream call (`skip_coordination_rounds` + `skip_final_presentation`: the server's
//! pass-through), asked once (the agent alone) or k times (self-consistency). The agent's
//! first sample is its "alone" answer, so both baselines cost k calls, not k + 1.

use std::sync::Arc;

use massgen_core::coordination::{FinalAnswerStrategy, Quorum};

use crate::app::evals::{ArmInfo, ArmKind};
use crate::config::PanelConfig;

/// What to compare the panels with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Baselines {
    /// Each agent alone.
    pub agents: bool,
    /// Self-consistency of each agent with this many samples (≥ 2).
    pub self_consistency: Option<u32>,
}

/// A setting of the panel a user may compare with its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// `voting_quorum: majority`.
    Majority,
    /// `final_answer_strategy: synthesize`.
    Synthesize,
}

impl Variant {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "majority" => Ok(Self::Majority),
            "synthesize" => Ok(Self::Synthesize),
            other => Err(format!(
                "--variants: unknown variant '{other}' (majority, synthesize)"
            )),
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            Self::Majority => "majority",
            Self::Synthesize => "synthesize",
        }
    }

    fn apply(self, panel: &mut PanelConfig) {
        match self {
            Self::Majority => panel.orchestrator.voting_quorum = Quorum::Majority,
            Self::Synthesize => {
                panel.orchestrator.final_answer_strategy = Some(FinalAnswerStrategy::Synthesize);
            }
        }
    }
}

/// A panel arm: one session per item.
#[derive(Debug, Clone)]
pub struct PanelArm {
    pub info: ArmInfo,
    pub panel: Arc<PanelConfig>,
}

/// One agent's baselines: `samples` one-call sessions per item, reported as the agent
/// alone (the first sample) and/or as self-consistency (the majority of all).
#[derive(Debug, Clone)]
pub struct AgentArms {
    pub alone: Option<ArmInfo>,
    pub consistency: Option<ArmInfo>,
    pub samples: u32,
    pub panel: Arc<PanelConfig>,
}

#[derive(Debug, Clone)]
pub struct Arms {
    pub panels: Vec<PanelArm>,
    pub agents: Vec<AgentArms>,
}

impl Arms {
    /// Every arm in report order: panels first (the first is the reference), then each
    /// agent alone and its self-consistency.
    pub fn infos(&self) -> Vec<ArmInfo> {
        let mut out: Vec<ArmInfo> = self.panels.iter().map(|p| p.info.clone()).collect();
        for agent in &self.agents {
            out.extend(agent.alone.iter().cloned());
            out.extend(agent.consistency.iter().cloned());
        }
        out
    }
}

/// The arms for `panels` (named as given), their `variants` and the `baselines` of their
/// agents.
pub fn arms(
    panels: &[Arc<PanelConfig>],
    variants: &[Variant],
    baselines: Baselines,
) -> Result<Arms, String> {
    let mut out = Arms {
        panels: Vec::new(),
        agents: Vec::new(),
    };
    let several = panels.len() > 1;
    for panel in panels {
        let models = models_of(panel);
        out.panels.push(PanelArm {
            info: ArmInfo {
                name: panel.name.clone(),
                kind: ArmKind::Panel,
                samples: 1,
                models: models.clone(),
            },
            panel: Arc::clone(panel),
        });
        for variant in variants {
            let mut changed = PanelConfig::clone(panel);
            variant.apply(&mut changed);
            out.panels.push(PanelArm {
                info: ArmInfo {
                    name: format!("{}+{}", panel.name, variant.suffix()),
                    kind: ArmKind::Panel,
                    samples: 1,
                    models: models.clone(),
                },
                panel: Arc::new(changed),
            });
        }
        if !baselines.agents && baselines.self_consistency.is_none() {
            continue;
        }
        for (index, agent) in panel.agents.iter().enumerate() {
            let who = if several {
                format!("{}/{}", panel.name, agent.id)
            } else {
                agent.id.clone()
            };
            let model = models[index].clone();
            let samples = baselines.self_consistency.unwrap_or(1);
            out.agents.push(AgentArms {
                alone: baselines.agents.then(|| ArmInfo {
                    name: format!("agent:{who}"),
                    kind: ArmKind::Agent,
                    samples: 1,
                    models: vec![model.clone()],
                }),
                consistency: baselines.self_consistency.map(|k| ArmInfo {
                    name: format!("sc{k}:{who}"),
                    kind: ArmKind::SelfConsistency,
                    samples: k,
                    models: vec![model.clone()],
                }),
                samples,
                panel: Arc::new(alone(panel, index)),
            });
        }
    }
    let mut names: Vec<&str> = Vec::new();
    for info in out.panels.iter().map(|p| &p.info).chain(
        out.agents
            .iter()
            .flat_map(|a| a.alone.iter().chain(a.consistency.iter())),
    ) {
        if names.contains(&info.name.as_str()) {
            return Err(format!(
                "two arms would be named '{}': give each panel (and each agent of a panel) its own name",
                info.name
            ));
        }
        names.push(&info.name);
    }
    Ok(out)
}

/// `panel` with only its agent at `index`, making one upstream call: its answer is final.
pub fn alone(panel: &PanelConfig, index: usize) -> PanelConfig {
    let mut one = panel.clone();
    one.agents = panel.agents.get(index).cloned().into_iter().collect();
    one.orchestrator.skip_coordination_rounds = true;
    one.orchestrator.skip_final_presentation = true;
    one.orchestrator.final_answer_strategy = None;
    one.orchestrator.max_orchestration_restarts = 0;
    one
}

fn models_of(panel: &PanelConfig) -> Vec<String> {
    panel.agents.iter().map(model_of).collect()
}

/// How the report names an agent's model: `provider/model`.
pub fn model_of(agent: &crate::config::AgentConfig) -> String {
    format!("{}/{}", agent.backend.backend_type, agent.backend.model)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;

    fn panel(name: &str, agents: &[&str]) -> Arc<PanelConfig> {
        let mut panel = crate::config::demo_panel("http://127.0.0.1:9/v1");
        let template = panel.agents[0].clone();
        panel.name = name.into();
        panel.agents = agents
            .iter()
            .map(|id| {
                let mut agent = template.clone();
                agent.id = (*id).into();
                agent.backend.model = format!("m-{id}");
                agent
            })
            .collect();
        Arc::new(panel)
    }

    #[test]
    fn panels_variants_agents_and_self_consistency() {
        let arms = arms(
            &[panel("trio", &["a", "b", "c"])],
            &[Variant::Majority],
            Baselines {
                agents: true,
                self_consistency: Some(5),
            },
        )
        .unwrap();
        let names: Vec<String> = arms.infos().into_iter().map(|i| i.name).collect();
        assert_eq!(
            names,
            [
                "trio",
                "trio+majority",
                "agent:a",
                "sc5:a",
                "agent:b",
                "sc5:b",
                "agent:c",
                "sc5:c"
            ]
        );
        assert_eq!(
            arms.panels[1].panel.orchestrator.voting_quorum,
            Quorum::Majority
        );
        let b = &arms.agents[1];
        assert_eq!(b.samples, 5);
        assert_eq!(b.panel.agents.len(), 1);
        assert_eq!(b.panel.agents[0].id, "b");
        assert!(b.panel.orchestrator.skip_coordination_rounds);
        assert_eq!(arms.infos()[2].models, ["chatcompletion/m-a"]);
    }

    #[test]
    fn agents_of_several_panels_are_named_by_panel_and_clashes_refused() {
        let two = arms(
            &[panel("p", &["a"]), panel("q", &["a"])],
            &[],
            Baselines {
                agents: true,
                self_consistency: None,
            },
        )
        .unwrap();
        let names: Vec<String> = two.infos().into_iter().map(|i| i.name).collect();
        assert_eq!(names, ["p", "q", "agent:p/a", "agent:q/a"]);
        let clash = arms(
            &[panel("p", &["a"]), panel("p", &["b"])],
            &[],
            Baselines {
                agents: false,
                self_consistency: None,
            },
        );
        assert!(clash.unwrap_err().contains("two arms would be named 'p'"));
    }
}
