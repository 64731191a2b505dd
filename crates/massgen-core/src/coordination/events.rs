//! Everything that happens in a session is a [`SessionEvent`]. The HTTP edge renders them
//! (reasoning lines, content deltas, metadata); the engine does not know how.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::provider::{FinishReason, ToolCall, Usage};

/// An event with its place in the session.
/// Deserialize: the server stores events and reads them back (a record outlives the
/// process); a stored event must come back equal (`tests::every_kind_round_trips`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEvent {
    /// 0, 1, 2, … within the session.
    pub seq: u64,
    /// Unix time in milliseconds.
    pub at_ms: u64,
    pub session_id: Arc<str>,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// An agent as the session record names it: real id (never shown to other agents) and
/// anonymous label (`agent1` …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRef {
    pub agent_id: String,
    pub label: String,
}

/// What an agent proposed: text, or a set of calls to the client's tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AnswerContent {
    Text { text: String },
    ToolCalls { calls: Vec<ToolCall> },
}

impl AnswerContent {
    /// The answer as other agents and the client read it.
    pub fn as_text(&self) -> String {
        match self {
            Self::Text { text } => text.clone(),
            Self::ToolCalls { calls } => calls
                .iter()
                .map(|c| format!("{}({})", c.name, c.arguments))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// One stored answer: `answer_label` is `agent2.1`, `agent2.2`, …
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    #[serde(flatten)]
    pub agent: AgentRef,
    pub answer_label: String,
    pub content: AnswerContent,
}

/// A counted vote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VoteRecord {
    pub voter: AgentRef,
    /// The label voted for (`agent2`).
    pub target_label: String,
    pub target_agent_id: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TallyEntry {
    pub label: String,
    pub agent_id: String,
    pub votes: u32,
}

/// Why the session stopped deliberating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsensusReason {
    /// Every live agent voted.
    Converged,
    /// Single agent, or `skip_coordination_rounds`.
    SingleAgent,
    /// The session timed out; the winner comes from the votes counted so far.
    Timeout,
    /// One answer reached `voting_quorum` before every live agent voted; the running
    /// turns were cut.
    Quorum,
    /// The session's spend reached `max_cost_usd`: no new turn started, the running ones
    /// were cut, and the best answer so far is returned without a presentation call.
    Budget,
    /// Every live agent answered and no vote was asked for (`skip_voting`, or a quick
    /// `synthesize`).
    AllAnswered,
}

/// Why an agent failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentError {
    #[serde(flatten)]
    pub agent: AgentRef,
    /// `upstream`, `invalid_turns` or `turn_timeout`.
    pub kind: AgentErrorKind,
    pub message: String,
    /// For upstream errors: provider, status and the provider's error kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_kind: Option<crate::provider::ProviderErrorKind>,
    /// How long the upstream asked us to wait (rate limits), in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// For upstream errors: whether the same call may succeed if made again (false for a
    /// spent quota, a bad key, a prompt too long, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_can_help: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentErrorKind {
    Upstream,
    InvalidTurns,
    TurnTimeout,
}

/// Which agent call spent the tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallPhase {
    Coordination,
    Presentation,
    /// The winner's check of the winning answer (`max_orchestration_restarts`).
    PostEvaluation,
}

/// How the final answer was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PresentationMode {
    /// The winner wrote it in a final call.
    Presented,
    /// `skip_final_presentation`: the stored winning answer as it stands.
    Skipped,
    /// The presentation call failed; the stored winning answer was used.
    Fallback,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSummary {
    #[serde(flatten)]
    pub agent: AgentRef,
    pub provider: String,
    pub model: String,
    pub usage: Usage,
    /// Upstream calls made (cancelled ones and the presentation included).
    pub calls: u32,
    /// Turns cancelled because a newer answer made them stale.
    pub restarts: u32,
    /// USD; `None` when the model's price is unknown.
    pub cost_usd: Option<f64>,
    pub answers: u32,
    pub failed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<AgentError>,
}

/// The outcome of a completed session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    pub winner: AgentRef,
    pub consensus_reason: ConsensusReason,
    /// The final answer as sent to the client (empty when it is a set of tool calls).
    pub final_answer: String,
    /// The client tool calls returned instead of text (`finish_reason: tool_calls`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub final_tool_calls: Vec<ToolCall>,
    pub finish_reason: FinishReason,
    pub presentation: PresentationMode,
    /// Every answer of the session, in order (`agent1.1`, `agent2.1`, `agent1.2`, …).
    pub answers: Vec<Answer>,
    /// The counted votes at consensus.
    pub votes: Vec<VoteRecord>,
    pub tally: Vec<TallyEntry>,
    /// Agents whose running turn was cancelled to end the deliberation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cut: Vec<AgentRef>,
    pub agents: Vec<AgentSummary>,
    /// Sum over every upstream call of the session.
    pub usage: Usage,
    /// USD over every upstream call; `None` when an agent without a known price used
    /// tokens.
    pub cost_usd: Option<f64>,
    /// The session's spending limit, if it had one.
    pub max_cost_usd: Option<f64>,
    pub duration_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionErrorKind {
    /// Every agent failed (or fewer than `min_live_agents` remain) and at least one failure
    /// came from an upstream.
    UpstreamFailed,
    /// No agent could take part, or every agent failed to follow the protocol.
    NoUsableAgent,
    /// The session timed out before any answer existed.
    Timeout,
    /// The client went away.
    Cancelled,
    /// The session's spend reached `max_cost_usd` before any agent answered.
    BudgetExhausted,
    /// The final answer is not in the format the client asked for (structured output),
    /// after one corrective presentation call.
    InvalidOutput,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionError {
    pub kind: SessionErrorKind,
    pub message: String,
    pub agent_errors: Vec<AgentError>,
    /// Usage spent before the failure.
    pub usage: Usage,
    /// What that usage cost, when every agent that used tokens has a price.
    pub cost_usd: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    SessionStarted {
        agents: Vec<AgentRef>,
    },
    /// The client's messages hold images (sent right after `SessionStarted`): which agents
    /// are shown them and which get a note that they cannot see them (`backend.vision`).
    ImagesShown {
        images: usize,
        seen_by: Vec<AgentRef>,
        not_seen_by: Vec<AgentRef>,
    },
    TurnStarted {
        agent: AgentRef,
        /// 1-based turn number of this agent.
        turn: u32,
        /// The answer labels (`agent2.1`, …) this turn sees.
        answers_seen: Vec<String>,
    },
    AgentDelta {
        agent: AgentRef,
        text: String,
    },
    Answer {
        answer: Answer,
    },
    Vote {
        vote: VoteRecord,
    },
    VoteIgnored {
        vote: VoteRecord,
        /// Why the vote did not count (it was cast against an older answer set).
        why: String,
    },
    /// A running turn was cancelled because a newer answer made it stale (it had not begun
    /// an answer of its own); a fresh turn that shows the newer answer follows at once.
    TurnRestarted {
        agent: AgentRef,
        /// The cancelled turn's number.
        turn: u32,
        /// The answer it had not seen (`agent3.1`).
        newest: String,
    },
    /// The session's spend reached its limit (`max_cost_usd`): no new turn starts.
    BudgetExhausted {
        spent_usd: f64,
        max_cost_usd: f64,
    },
    TurnInvalid {
        agent: AgentRef,
        attempt: u32,
        /// Which check failed (`no_workflow_tool`, `multiple_workflow_tools`, …).
        check: String,
        message: String,
    },
    AgentFailed {
        error: AgentError,
    },
    /// An agent called one of its own (MCP) tools inside its turn. The hook for tool
    /// metrics and traces: name, round, duration and outcome.
    ToolCalled {
        agent: AgentRef,
        tool: String,
        /// 1-based tool round of the turn.
        round: u32,
        duration_ms: u64,
        /// Set when the call failed (the model got the error as the tool result).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    Consensus {
        winner: AgentRef,
        reason: ConsensusReason,
        tally: Vec<TallyEntry>,
        votes: Vec<VoteRecord>,
        /// Agents whose running turn was cancelled to end the deliberation (quorum, budget,
        /// session timeout).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        cut: Vec<AgentRef>,
    },
    /// The winner checked the winning answer (`max_orchestration_restarts`): with
    /// `restart` the deliberation starts over, every agent seeing `reason` and
    /// `instructions`; else the answer stands and the presentation follows.
    PostEvaluation {
        agent: AgentRef,
        restart: bool,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        reason: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        instructions: String,
    },
    PresentationStarted {
        agent: AgentRef,
    },
    FinalDelta {
        text: String,
    },
    /// The model's own reasoning, as it streams, in a plain call (a panel of one,
    /// `plain.rs`): shown to the client as reasoning.
    ReasoningDelta {
        agent: AgentRef,
        text: String,
    },
    /// The final answer is this set of client tool calls (sent once, after any text).
    FinalToolCalls {
        calls: Vec<ToolCall>,
    },
    /// The presentation call failed; the stored winning answer is used instead.
    PresentationFailed {
        agent: AgentRef,
        message: String,
    },
    Usage {
        agent: AgentRef,
        phase: CallPhase,
        usage: Usage,
        /// What the call cost in USD; `None` when the agent's price is unknown.
        cost_usd: Option<f64>,
    },
    SessionCompleted {
        summary: Box<SessionSummary>,
    },
    SessionFailed {
        error: SessionError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ProviderErrorKind;

    fn agent(n: u32) -> AgentRef {
        AgentRef {
            agent_id: format!("id{n}"),
            label: format!("agent{n}"),
        }
    }

    fn vote() -> VoteRecord {
        VoteRecord {
            voter: agent(1),
            target_label: "agent2".into(),
            target_agent_id: "id2".into(),
            reason: "clearer".into(),
        }
    }

    fn call() -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: "get_weather".into(),
            arguments: r#"{"city":"Paris"}"#.into(),
            opaque: None,
        }
    }

    fn usage() -> Usage {
        Usage {
            input_tokens: 10,
            output_tokens: 5,
            total_tokens: 15,
            cached_input_tokens: 2,
            reasoning_tokens: 1,
        }
    }

    fn agent_error(optional: bool) -> AgentError {
        AgentError {
            agent: agent(1),
            kind: AgentErrorKind::Upstream,
            message: "overloaded".into(),
            provider: optional.then(|| "openai".into()),
            status: optional.then_some(529),
            upstream_kind: optional.then_some(ProviderErrorKind::Server),
            retry_after_ms: optional.then_some(1500),
            retry_can_help: optional.then_some(true),
        }
    }

    fn summary() -> SessionSummary {
        SessionSummary {
            winner: agent(2),
            consensus_reason: ConsensusReason::Quorum,
            final_answer: "42".into(),
            final_tool_calls: vec![call()],
            finish_reason: FinishReason::ToolCalls,
            presentation: PresentationMode::Fallback,
            answers: vec![
                Answer {
                    agent: agent(1),
                    answer_label: "agent1.1".into(),
                    content: AnswerContent::Text { text: "41".into() },
                },
                Answer {
                    agent: agent(2),
                    answer_label: "agent2.1".into(),
                    content: AnswerContent::ToolCalls {
                        calls: vec![call()],
                    },
                },
            ],
            votes: vec![vote()],
            tally: vec![TallyEntry {
                label: "agent2".into(),
                agent_id: "id2".into(),
                votes: 1,
            }],
            cut: vec![agent(3)],
            agents: vec![AgentSummary {
                agent: agent(1),
                provider: "openai".into(),
                model: "gpt".into(),
                usage: usage(),
                calls: 2,
                restarts: 1,
                cost_usd: Some(0.25),
                answers: 1,
                failed: true,
                error: Some(agent_error(false)),
            }],
            usage: usage(),
            cost_usd: None,
            max_cost_usd: Some(1.5),
            duration_ms: 1234,
        }
    }

    /// One of each kind; the match below fails to compile when a kind is added, so a new
    /// kind cannot skip the round trip.
    fn every_kind() -> Vec<EventKind> {
        let kinds = vec![
            EventKind::SessionStarted {
                agents: vec![agent(1), agent(2)],
            },
            EventKind::ImagesShown {
                images: 2,
                seen_by: vec![agent(1)],
                not_seen_by: vec![agent(2)],
            },
            EventKind::TurnStarted {
                agent: agent(1),
                turn: 2,
                answers_seen: vec!["agent2.1".into()],
            },
            EventKind::AgentDelta {
                agent: agent(1),
                text: "thinking…".into(),
            },
            EventKind::Answer {
                answer: summary().answers[1].clone(),
            },
            EventKind::Vote { vote: vote() },
            EventKind::VoteIgnored {
                vote: vote(),
                why: "stale".into(),
            },
            EventKind::TurnRestarted {
                agent: agent(3),
                turn: 1,
                newest: "agent2.1".into(),
            },
            EventKind::BudgetExhausted {
                spent_usd: 0.75,
                max_cost_usd: 0.5,
            },
            EventKind::TurnInvalid {
                agent: agent(1),
                attempt: 1,
                check: "no_workflow_tool".into(),
                message: "no tool".into(),
            },
            EventKind::AgentFailed {
                error: agent_error(true),
            },
            EventKind::ToolCalled {
                agent: agent(1),
                tool: "search".into(),
                round: 1,
                duration_ms: 12,
                error: Some("timeout".into()),
            },
            EventKind::ToolCalled {
                agent: agent(1),
                tool: "search".into(),
                round: 2,
                duration_ms: 3,
                error: None,
            },
            EventKind::Consensus {
                winner: agent(2),
                reason: ConsensusReason::Converged,
                tally: summary().tally,
                votes: vec![vote()],
                cut: vec![],
            },
            EventKind::PostEvaluation {
                agent: agent(2),
                restart: true,
                reason: "incomplete".into(),
                instructions: "add units".into(),
            },
            EventKind::PostEvaluation {
                agent: agent(2),
                restart: false,
                reason: String::new(),
                instructions: String::new(),
            },
            EventKind::PresentationStarted { agent: agent(2) },
            EventKind::FinalDelta { text: "4".into() },
            EventKind::FinalToolCalls {
                calls: vec![call()],
            },
            EventKind::PresentationFailed {
                agent: agent(2),
                message: "500".into(),
            },
            EventKind::Usage {
                agent: agent(1),
                phase: CallPhase::PostEvaluation,
                usage: usage(),
                cost_usd: Some(0.125),
            },
            EventKind::SessionCompleted {
                summary: Box::new(summary()),
            },
            EventKind::SessionFailed {
                error: SessionError {
                    kind: SessionErrorKind::BudgetExhausted,
                    message: "spent".into(),
                    agent_errors: vec![agent_error(true), agent_error(false)],
                    usage: usage(),
                    cost_usd: Some(2.0),
                },
            },
        ];
        let mut seen = [false; 21];
        for kind in &kinds {
            let i = match kind {
                EventKind::SessionStarted { .. } => 0,
                EventKind::ImagesShown { .. } => 1,
                EventKind::TurnStarted { .. } => 2,
                EventKind::AgentDelta { .. } => 3,
                EventKind::Answer { .. } => 4,
                EventKind::Vote { .. } => 5,
                EventKind::VoteIgnored { .. } => 6,
                EventKind::TurnRestarted { .. } => 7,
                EventKind::BudgetExhausted { .. } => 8,
                EventKind::TurnInvalid { .. } => 9,
                EventKind::AgentFailed { .. } => 10,
                EventKind::ToolCalled { .. } => 11,
                EventKind::Consensus { .. } => 12,
                EventKind::PostEvaluation { .. } => 13,
                EventKind::PresentationStarted { .. } => 14,
                EventKind::FinalDelta { .. } | EventKind::ReasoningDelta { .. } => 15,
                EventKind::FinalToolCalls { .. } => 16,
                EventKind::PresentationFailed { .. } => 17,
                EventKind::Usage { .. } => 18,
                EventKind::SessionCompleted { .. } => 19,
                EventKind::SessionFailed { .. } => 20,
            };
            seen[i] = true;
        }
        assert!(seen.iter().all(|s| *s), "a kind is missing: {seen:?}");
        kinds
    }

    #[test]
    fn every_kind_round_trips() {
        for (seq, kind) in every_kind().into_iter().enumerate() {
            let event = SessionEvent {
                seq: seq as u64,
                at_ms: 1_700_000_000_000 + seq as u64,
                session_id: "sess_1".into(),
                kind,
            };
            let json = serde_json::to_string(&event).unwrap();
            let back: SessionEvent = serde_json::from_str(&json).unwrap();
            assert_eq!(back, event, "{json}");
            // And the stored text itself is stable (what a second round trip would write).
            assert_eq!(serde_json::to_string(&back).unwrap(), json);
        }
    }
}
