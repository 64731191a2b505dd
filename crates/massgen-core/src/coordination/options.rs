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

/// When the votes are enough (`voting_quorum`): MassGen waits for every live agent's
/// vote; a quorum stops as soon as one answer holds that many counted votes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Quorum {
    /// Every live agent has voted.
    #[default]
    All,
    /// More than half of the live agents voted for one answer.
    Majority,
    /// This many votes for one answer (at or above the number of live agents it is `All`).
    Votes(u32),
}

impl Quorum {
    /// `"all"`, `"majority"` or a whole number of votes from 1 (as a number or a string);
    /// the error says what is accepted.
    pub fn parse(value: &serde_json::Value) -> Result<Self, String> {
        let expected = "must be \"all\", \"majority\" or a whole number of votes (1 or more)";
        let count = |n: Option<u64>| match n.and_then(|n| u32::try_from(n).ok()) {
            Some(k) if k >= 1 => Ok(Self::Votes(k)),
            _ => Err(format!("{expected}, got {value}")),
        };
        match value {
            serde_json::Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
                "all" => Ok(Self::All),
                "majority" => Ok(Self::Majority),
                other => count(other.parse().ok()),
            },
            serde_json::Value::Number(n) => count(n.as_u64()),
            _ => Err(format!("{expected}, got {value}")),
        }
    }

    /// Votes one answer needs to end the deliberation early, with `live` agents left;
    /// `None` when only every agent's vote does.
    pub fn needed(self, live: usize) -> Option<usize> {
        let needed = match self {
            Self::All => return None,
            Self::Majority => live / 2 + 1,
            Self::Votes(k) => usize::try_from(k).unwrap_or(usize::MAX),
        };
        (needed < live).then_some(needed)
    }
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
    /// Converge as soon as one answer holds this many counted votes.
    pub voting_quorum: Quorum,
    /// USD the session may spend; once reached no new turn starts (every agent needs a
    /// price, which the caller checks).
    pub max_cost_usd: Option<f64>,
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
            voting_quorum: Quorum::All,
            max_cost_usd: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quorum_below_every_live_agent_needs_fewer_votes() {
        assert_eq!(Quorum::All.needed(3), None);
        assert_eq!(Quorum::Majority.needed(3), Some(2));
        assert_eq!(Quorum::Majority.needed(4), Some(3));
        assert_eq!(Quorum::Majority.needed(5), Some(3));
        // Two agents: a majority is both of them, i.e. all.
        assert_eq!(Quorum::Majority.needed(2), None);
        assert_eq!(Quorum::Votes(2).needed(5), Some(2));
        assert_eq!(Quorum::Votes(3).needed(3), None);
        assert_eq!(Quorum::Votes(9).needed(3), None);
    }

    #[test]
    fn quorum_values() {
        use serde_json::json;
        assert_eq!(Quorum::parse(&json!("all")), Ok(Quorum::All));
        assert_eq!(Quorum::parse(&json!("Majority")), Ok(Quorum::Majority));
        assert_eq!(Quorum::parse(&json!(2)), Ok(Quorum::Votes(2)));
        assert_eq!(Quorum::parse(&json!("3")), Ok(Quorum::Votes(3)));
        for bad in [json!(0), json!(-1), json!(1.5), json!("most"), json!(true)] {
            let e = Quorum::parse(&bad).unwrap_err();
            assert!(e.starts_with("must be \"all\", \"majority\""), "{e}");
        }
    }
}
