//! The deliberation as door-neutral text: one line per answer, vote, failure and
//! consensus (and, in `full` mode, the agents' own streamed text). Every door shows these
//! lines in its own idiom (`reasoning_content`, a reasoning summary, a thinking block).

use massgen_core::coordination::client_tools::describe_calls;
use massgen_core::coordination::{AgentRef, AnswerContent, ConsensusReason, EventKind};

pub use crate::app::Deliberation;

/// Turns events into reasoning text, remembering whose streamed text came last so that
/// `full` deliberation gets one header per speaker change instead of one per token.
#[derive(Debug)]
pub struct Narrator {
    mode: Deliberation,
    last_speaker: Option<String>,
    /// A plain call (a panel of one): no deliberation, only the model's own reasoning.
    plain: bool,
}

impl Narrator {
    pub fn new(mode: Deliberation) -> Self {
        Self {
            mode,
            last_speaker: None,
            plain: false,
        }
    }

    /// The narrator of a plain call: the model's reasoning as it streamed, nothing else.
    pub fn plain(mode: Deliberation) -> Self {
        Self {
            plain: true,
            ..Self::new(mode)
        }
    }

    /// The reasoning text for one event, if it has any.
    pub fn line(&mut self, event: &EventKind) -> Option<String> {
        if self.mode == Deliberation::Off {
            return None;
        }
        if self.plain {
            return match event {
                EventKind::ReasoningDelta { text, .. } if !text.is_empty() => Some(text.clone()),
                _ => None,
            };
        }
        if let EventKind::AgentDelta { agent, text } = event {
            if self.mode != Deliberation::Full || text.is_empty() {
                return None;
            }
            if self.last_speaker.as_deref() == Some(agent.label.as_str()) {
                return Some(text.clone());
            }
            self.last_speaker = Some(agent.label.clone());
            return Some(format!("\n[{}] {}", agent.label, text));
        }
        let line = summary_line(event)?;
        // A summary line after streamed agent text starts on its own line.
        let prefix = if self.last_speaker.take().is_some() {
            "\n"
        } else {
            ""
        };
        Some(format!("{prefix}{line}\n"))
    }
}

fn summary_line(event: &EventKind) -> Option<String> {
    Some(match event {
        EventKind::SessionStarted { agents } => format!(
            "[massgen] {} agents deliberating: {}",
            agents.len(),
            agents
                .iter()
                .map(|a| a.label.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        EventKind::ImagesShown {
            images,
            seen_by,
            not_seen_by,
        } => {
            let labels = |list: &[AgentRef]| {
                list.iter()
                    .map(|a| a.label.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let plural = if *images == 1 { "image" } else { "images" };
            match (seen_by.is_empty(), not_seen_by.is_empty()) {
                (_, true) => format!("[massgen] {images} {plural} shown to every agent"),
                (true, _) => format!(
                    "[massgen] {images} {plural} attached, but no agent can see images: they were told an image was there"
                ),
                _ => format!(
                    "[massgen] {images} {plural} shown to {}; {} cannot see images and were told an image was there",
                    labels(seen_by),
                    labels(not_seen_by)
                ),
            }
        }
        EventKind::Answer { answer } => match &answer.content {
            AnswerContent::ToolCalls { calls } => format!(
                "[{}] proposes calling {} ({})",
                answer.agent.label,
                one_line(&describe_calls(calls).replace('\n', ", ")),
                answer.answer_label
            ),
            AnswerContent::Text { .. } => format!(
                "[{}] answered ({})",
                answer.agent.label, answer.answer_label
            ),
        },
        EventKind::Vote { vote } => format!(
            "[{}] voted for {}: {}",
            vote.voter.label,
            vote.target_label,
            one_line(&vote.reason)
        ),
        EventKind::VoteIgnored { vote, why } => format!(
            "[{}] vote for {} ignored: {}",
            vote.voter.label,
            vote.target_label,
            one_line(why)
        ),
        EventKind::TurnRestarted {
            agent,
            turn,
            newest,
        } => format!(
            "[{}] restarting to see {newest} (turn {turn} cancelled before it answered)",
            agent.label
        ),
        EventKind::BudgetExhausted {
            spent_usd,
            max_cost_usd,
        } => format!(
            "[massgen] budget exhausted: ${spent_usd:.6} spent of ${max_cost_usd}; no new turns"
        ),
        EventKind::TurnInvalid {
            agent,
            attempt,
            message,
            ..
        } => format!(
            "[{}] invalid turn (attempt {attempt}): {}",
            agent.label,
            one_line(message)
        ),
        EventKind::AgentFailed { error } => {
            format!(
                "[{}] failed: {}",
                error.agent.label,
                one_line(&error.message)
            )
        }
        EventKind::Consensus {
            winner,
            tally,
            reason,
            cut,
            ..
        } => {
            let votes: Vec<String> = tally
                .iter()
                .filter(|t| t.votes > 0)
                .map(|t| format!("{}={}", t.label, t.votes))
                .collect();
            let head = match reason {
                ConsensusReason::Quorum => "quorum",
                ConsensusReason::Budget => "budget",
                _ => "consensus",
            };
            let line = if votes.is_empty() {
                format!("[massgen] {} selected (no votes)", winner.label)
            } else {
                format!(
                    "[massgen] {head}: {} wins ({})",
                    winner.label,
                    votes.join(", ")
                )
            };
            if cut.is_empty() {
                line
            } else {
                let cut: Vec<&str> = cut.iter().map(|a| a.label.as_str()).collect();
                format!("{line}; cut: {}", cut.join(", "))
            }
        }
        EventKind::ToolCalled {
            agent,
            tool,
            duration_ms,
            error,
            ..
        } => match error {
            None => format!("[{}] used {tool} ({duration_ms} ms)", agent.label),
            Some(e) => format!(
                "[{}] used {tool}: failed after {duration_ms} ms: {}",
                agent.label,
                one_line(e)
            ),
        },
        EventKind::PresentationStarted { agent } => {
            format!("[{}] presenting the final answer", agent.label)
        }
        EventKind::PostEvaluation {
            agent,
            restart,
            reason,
            ..
        } => {
            if *restart {
                format!(
                    "[{}] post-evaluation: starting over ({})",
                    agent.label,
                    one_line(reason)
                )
            } else {
                format!("[{}] post-evaluation: the answer stands", agent.label)
            }
        }
        EventKind::PresentationFailed { agent, message } => format!(
            "[{}] presentation failed ({}); using its stored answer",
            agent.label,
            one_line(message)
        ),
        _ => return None,
    })
}

/// Keeps a reason or error on one line so each event stays one line.
fn one_line(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > 300 {
        let cut: String = flat.chars().take(300).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use massgen_core::coordination::{AgentRef, VoteRecord};

    fn agent(label: &str) -> AgentRef {
        AgentRef {
            agent_id: format!("id-{label}"),
            label: label.to_string(),
        }
    }

    #[test]
    fn summary_lines_read_as_the_protocol_shows() {
        let mut n = Narrator::new(Deliberation::Summary);
        let vote = EventKind::Vote {
            vote: VoteRecord {
                voter: agent("agent3"),
                target_label: "agent2".into(),
                target_agent_id: "id-agent2".into(),
                reason: "clearer\nderivation".into(),
            },
        };
        assert_eq!(
            n.line(&vote).as_deref(),
            Some("[agent3] voted for agent2: clearer derivation\n")
        );
        let delta = EventKind::AgentDelta {
            agent: agent("agent1"),
            text: "tok".into(),
        };
        assert_eq!(n.line(&delta), None);
        assert_eq!(Narrator::new(Deliberation::Off).line(&vote), None);
        let restarted = EventKind::TurnRestarted {
            agent: agent("agent2"),
            turn: 2,
            newest: "agent1.2".into(),
        };
        assert_eq!(
            n.line(&restarted).as_deref(),
            Some("[agent2] restarting to see agent1.2 (turn 2 cancelled before it answered)\n")
        );
        let consensus = |reason, cut: Vec<AgentRef>| EventKind::Consensus {
            winner: agent("agent1"),
            reason,
            tally: vec![massgen_core::coordination::TallyEntry {
                label: "agent1".into(),
                agent_id: "id-agent1".into(),
                votes: 2,
            }],
            votes: Vec::new(),
            cut,
        };
        assert_eq!(
            n.line(&consensus(ConsensusReason::Converged, Vec::new()))
                .as_deref(),
            Some("[massgen] consensus: agent1 wins (agent1=2)\n")
        );
        assert_eq!(
            n.line(&consensus(ConsensusReason::Timeout, vec![agent("agent3")]))
                .as_deref(),
            Some("[massgen] consensus: agent1 wins (agent1=2); cut: agent3\n")
        );
        assert_eq!(
            n.line(&consensus(ConsensusReason::Quorum, vec![agent("agent3")]))
                .as_deref(),
            Some("[massgen] quorum: agent1 wins (agent1=2); cut: agent3\n")
        );
    }

    #[test]
    fn full_mode_heads_each_speaker_change_once() {
        let mut n = Narrator::new(Deliberation::Full);
        let d = |l: &str, t: &str| EventKind::AgentDelta {
            agent: agent(l),
            text: t.into(),
        };
        assert_eq!(n.line(&d("agent1", "a")).as_deref(), Some("\n[agent1] a"));
        assert_eq!(n.line(&d("agent1", "b")).as_deref(), Some("b"));
        assert_eq!(n.line(&d("agent2", "c")).as_deref(), Some("\n[agent2] c"));
    }
}
