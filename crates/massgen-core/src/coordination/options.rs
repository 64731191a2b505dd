use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `lenient` / `balanced` / `strict`, as in MassGen's `voting_sensitivity` and
/// `answer_novelty_requirement`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strictness {
    #[default]
    Lenient,
    Balanced,
    Strict,
}

/// The orchestrator options of one session (MassGen's `orchestrator:` section plus the
/// timeouts).
#[derive(Debug, Clone, PartialEq)]
pub struct OrchestratorOptions {
    pub voting_sensitivity: Strictness,
    pub answer_novelty_requirement: Strictness,
    pub max_new_answers_per_agent: Option<u32>,
    pub skip_coordination_rounds: bool,
    pub skip_final_presentation: bool,
    pub min_live_agents: usize,
    /// The whole session (`timeout_settings.orchestrator_timeout_seconds`).
    pub session_timeout: Duration,
    /// One agent turn, all its attempts included.
    pub agent_turn_timeout: Duration,
    /// The final presentation call.
    pub presentation_timeout: Duration,
    /// Attempts per turn before the agent fails (docs/protocol.md, "Validating a turn": 3).
    pub max_attempts_per_turn: u32,
    /// A winning answer that is a set of client tool calls goes to the client as it stands
    /// unless this is set: then the winner gets a presentation call with the client's tools
    /// and may restate (or correct) the calls.
    pub present_tool_calls: bool,
    /// An agent that answered waits until every live agent has its first answer (or has
    /// failed), so everybody's first vote sees every first answer. `false`: it takes its
    /// next turn at once.
    pub defer_voting_until_all_answered: bool,
}

impl Default for OrchestratorOptions {
    fn default() -> Self {
        Self {
            voting_sensitivity: Strictness::Lenient,
            answer_novelty_requirement: Strictness::Lenient,
            max_new_answers_per_agent: None,
            skip_coordination_rounds: false,
            skip_final_presentation: false,
            min_live_agents: 1,
            session_timeout: Duration::from_secs(1800),
            agent_turn_timeout: Duration::from_secs(300),
            presentation_timeout: Duration::from_secs(300),
            max_attempts_per_turn: 3,
            present_tool_calls: false,
            defer_voting_until_all_answered: true,
        }
    }
}
