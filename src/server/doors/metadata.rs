//! `massgen_metadata`: the session's outcome as every door attaches it to its response
//! (winner, tally, votes, answers, per-agent usage and errors, duration).

use massgen_core::coordination::{
    AgentError, AgentRef, AgentSummary, Answer, ConsensusReason, PresentationMode, SessionSummary,
    TallyEntry, VoteRecord,
};
use serde::Serialize;
use serde_json::Value;

/// `massgen_metadata`, borrowed from the summary and serialized straight into a response:
/// no `Value` tree is built and sorted first (with the finish and usage chunks, that was a
/// twentieth of a streamed one-agent request's instructions).
#[derive(Debug, Serialize)]
pub struct Metadata<'a> {
    session_id: &'a str,
    winner: &'a AgentRef,
    consensus_reason: ConsensusReason,
    cut_agents: &'a [AgentRef],
    presentation: PresentationMode,
    tally: &'a [TallyEntry],
    votes: &'a [VoteRecord],
    answers: &'a [Answer],
    agents: &'a [AgentSummary],
    cost_usd: Option<f64>,
    max_cost_usd: Option<f64>,
    budget_exhausted: bool,
    failed_agents: Vec<&'a AgentError>,
    duration_ms: u64,
}

impl<'a> Metadata<'a> {
    pub fn new(session_id: &'a str, s: &'a SessionSummary) -> Self {
        Self {
            session_id,
            winner: &s.winner,
            consensus_reason: s.consensus_reason,
            cut_agents: &s.cut,
            presentation: s.presentation,
            tally: &s.tally,
            votes: &s.votes,
            answers: &s.answers,
            agents: &s.agents,
            cost_usd: s.cost_usd,
            max_cost_usd: s.max_cost_usd,
            budget_exhausted: s.consensus_reason == ConsensusReason::Budget,
            failed_agents: s.agents.iter().filter_map(|a| a.error.as_ref()).collect(),
            duration_ms: s.duration_ms,
        }
    }
}

/// [`Metadata`] as a `Value`, for the responses that are built as one.
pub fn metadata_json(session_id: &str, s: &SessionSummary) -> Value {
    // Our own types, with string keys: serializing them cannot fail.
    serde_json::to_value(Metadata::new(session_id, s)).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// What `metadata_json` built by hand before it was typed, field by field.
    fn by_hand(session_id: &str, s: &SessionSummary) -> Value {
        let failed: Vec<Value> = s
            .agents
            .iter()
            .filter_map(|a| a.error.as_ref())
            .map(|e| serde_json::to_value(e).unwrap())
            .collect();
        json!({
            "session_id": session_id,
            "winner": {"agent_id": s.winner.agent_id, "label": s.winner.label},
            "consensus_reason": s.consensus_reason,
            "cut_agents": s.cut,
            "presentation": s.presentation,
            "tally": s.tally,
            "votes": s.votes,
            "answers": s.answers,
            "agents": s.agents,
            "cost_usd": s.cost_usd,
            "max_cost_usd": s.max_cost_usd,
            "budget_exhausted": s.consensus_reason == ConsensusReason::Budget,
            "failed_agents": failed,
            "duration_ms": s.duration_ms,
        })
    }

    #[test]
    fn the_typed_metadata_is_the_hand_built_one() {
        let agent = |n: u32, error: Value| {
            let mut a = json!({"agent_id": format!("a{n}"), "label": format!("agent{n}"),
                "provider": "openai", "model": "m", "calls": 2, "restarts": 0,
                "cost_usd": 0.5, "answers": 1, "failed": !error.is_null(),
                "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7,
                    "cached_input_tokens": 0, "reasoning_tokens": 0}});
            if !error.is_null() {
                a["error"] = error;
            }
            a
        };
        let summary: SessionSummary = serde_json::from_value(json!({
            "winner": {"agent_id": "a1", "label": "agent1"},
            "consensus_reason": "budget",
            "final_answer": "x",
            "finish_reason": "stop",
            "presentation": "skipped",
            "answers": [],
            "votes": [],
            "tally": [],
            "cut": [{"agent_id": "a3", "label": "agent3"}],
            "agents": [
                agent(1, Value::Null),
                agent(2, json!({"agent_id": "a2", "label": "agent2", "kind": "upstream",
                    "message": "overloaded", "provider": "openai", "status": 529})),
            ],
            "usage": {"input_tokens": 6, "output_tokens": 8, "total_tokens": 14,
                "cached_input_tokens": 0, "reasoning_tokens": 0},
            "cost_usd": null,
            "max_cost_usd": 1.0,
            "duration_ms": 12,
        }))
        .unwrap();
        let typed = metadata_json("sess_1", &summary);
        assert_eq!(typed, by_hand("sess_1", &summary));
        assert_eq!(typed["budget_exhausted"], true);
        assert_eq!(typed["failed_agents"][0]["status"], 529);
        assert_eq!(typed["cut_agents"][0]["label"], "agent3");
    }
}
