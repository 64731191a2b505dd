//! `massgen_metadata`: the session's outcome as every door attaches it to its response
//! (winner, tally, votes, answers, per-agent usage and errors, duration).

use massgen_core::coordination::{ConsensusReason, SessionSummary};
use serde_json::{Value, json};

pub fn metadata_json(session_id: &str, s: &SessionSummary) -> Value {
    let failed: Vec<Value> = s
        .agents
        .iter()
        .filter_map(|a| a.error.as_ref())
        .map(|e| serde_json::to_value(e).unwrap_or(Value::Null))
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
