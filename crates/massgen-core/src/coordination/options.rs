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

/// How the final answer is made once a winner is chosen (MassGen's
/// `final_answer_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinalAnswerStrategy {
    /// The winner's stored answer is the final answer: no presentation call.
    WinnerReuse,
    /// The winner writes the final answer from its own, with the others' help.
    WinnerPresent,
    /// The winner combines the strongest parts of every current answer into one.
    Synthesize,
}

impl FinalAnswerStrategy {
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "winner_reuse" => Some(Self::WinnerReuse),
            "winner_present" => Some(Self::WinnerPresent),
            "synthesize" => Some(Self::Synthesize),
            _ => None,
        }
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
    /// `single_agent_coordination`: a session of one agent runs the coordination protocol
    /// (its answer through `new_answer`, then a presentation) instead of being a plain call
    /// to its model (`plain.rs`).
    pub single_agent_coordination: bool,
    /// Without `final_answer_strategy`, the same as `winner_reuse` (else `winner_present`).
    pub skip_final_presentation: bool,
    /// `None`: follows `skip_final_presentation`, as in MassGen; see [`Self::final_answer`].
    pub final_answer_strategy: Option<FinalAnswerStrategy>,
    /// New answers the whole panel may write (`max_new_answers_global`); after that every
    /// agent may only vote.
    pub max_new_answers_global: Option<u32>,
    /// MassGen's `skip_voting`: the deliberation ends once every live agent has an answer;
    /// nobody votes (the first agent with an answer, in config order, wins).
    pub skip_voting: bool,
    /// `fairness_enabled` + `fairness_lead_cap_answers`: an agent whose next answer would
    /// put it more than this many answers ahead of the slowest live agent still deliberating
    /// waits for it. `None`: no fairness hold.
    pub fairness_lead_cap: Option<u32>,
    /// MassGen's `max_orchestration_restarts`: how many times the winner may reject the
    /// winning answer and start the deliberation again (0: it is not asked).
    pub max_orchestration_restarts: u32,
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
    /// MassGen's `coordination.enable_planning_mode`: during coordination agents are
    /// offered only their read-only tools, and the winner runs the others (once) while
    /// presenting. `false`: every tool in every turn, none in the presentation.
    pub planning_mode: bool,
}

impl Default for OrchestratorOptions {
    fn default() -> Self {
        Self {
            voting_sensitivity: Strictness::Lenient,
            answer_novelty_requirement: Strictness::Lenient,
            max_new_answers_per_agent: None,
            skip_coordination_rounds: false,
            single_agent_coordination: false,
            skip_final_presentation: false,
            final_answer_strategy: None,
            max_new_answers_global: None,
            skip_voting: false,
            // MassGen's defaults: fairness on, a lead of at most 2 answers.
            fairness_lead_cap: Some(2),
            max_orchestration_restarts: 0,
            min_live_agents: 1,
            session_timeout: Duration::from_secs(1800),
            agent_turn_timeout: Duration::from_secs(300),
            presentation_timeout: Duration::from_secs(300),
            max_attempts_per_turn: 3,
            present_tool_calls: false,
            defer_voting_until_all_answered: true,
            voting_quorum: Quorum::All,
            max_cost_usd: None,
            planning_mode: false,
        }
    }
}

impl OrchestratorOptions {
    /// The strategy in effect: the configured one, else `winner_reuse` under
    /// `skip_final_presentation`, else `winner_present` (MassGen's resolution). MassGen
    /// never presents under `skip_final_presentation` with `skip_voting`, whatever the
    /// strategy.
    pub fn final_answer(&self) -> FinalAnswerStrategy {
        if self.skip_final_presentation && self.skip_voting {
            return FinalAnswerStrategy::WinnerReuse;
        }
        match self.final_answer_strategy {
            Some(strategy) => strategy,
            None if self.skip_final_presentation => FinalAnswerStrategy::WinnerReuse,
            None => FinalAnswerStrategy::WinnerPresent,
        }
    }

    /// The deliberation ends once every live agent has answered, without votes:
    /// `skip_voting`, or MassGen's quick synthesis (`synthesize` with one answer per agent
    /// and no deferred voting, where a vote round would add nothing the synthesis does not).
    pub fn ends_when_all_answered(&self) -> bool {
        self.skip_voting
            || (self.final_answer() == FinalAnswerStrategy::Synthesize
                && !self.defer_voting_until_all_answered
                && self.max_new_answers_per_agent == Some(1))
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
    fn the_strategy_follows_skip_final_presentation_unless_set() {
        let mut o = OrchestratorOptions::default();
        assert_eq!(o.final_answer(), FinalAnswerStrategy::WinnerPresent);
        o.skip_final_presentation = true;
        assert_eq!(o.final_answer(), FinalAnswerStrategy::WinnerReuse);
        o.final_answer_strategy = Some(FinalAnswerStrategy::Synthesize);
        assert_eq!(o.final_answer(), FinalAnswerStrategy::Synthesize);
        o.skip_voting = true;
        assert_eq!(o.final_answer(), FinalAnswerStrategy::WinnerReuse);
        o.skip_voting = false;
        assert!(!o.ends_when_all_answered());
        o.defer_voting_until_all_answered = false;
        o.max_new_answers_per_agent = Some(1);
        assert!(o.ends_when_all_answered());
        assert_eq!(
            FinalAnswerStrategy::parse(" Winner_Reuse"),
            Some(FinalAnswerStrategy::WinnerReuse)
        );
        assert_eq!(FinalAnswerStrategy::parse("best"), None);
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
