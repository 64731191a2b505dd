//! The record of one session as JSON, rebuilt from its events (so a running session's
//! record shows what happened so far).

use std::collections::BTreeMap;

use massgen_core::coordination::{AgentRef, EventKind, SessionEvent};
use massgen_core::provider::Usage;
use serde_json::{Value, json};

use super::SessionRecord;

/// USD of a run of calls: `None` once one call with tokens had no known price.
#[derive(Clone, Copy)]
struct Cost(Option<f64>);

impl Default for Cost {
    fn default() -> Self {
        Self(Some(0.0))
    }
}

impl Cost {
    fn add(&mut self, call: Option<f64>, usage: &Usage) {
        self.0 = match (self.0, call) {
            (Some(sum), Some(c)) => Some(sum + c),
            // A call that used nothing costs nothing, priced or not.
            (sum, None) if usage.total_tokens == 0 && usage.input_tokens == 0 => sum,
            _ => None,
        };
    }
}

#[derive(Default)]
struct AgentView {
    label: String,
    usage: Usage,
    cost: Cost,
    turns: u32,
    answers: u32,
    errors: Vec<Value>,
    invalid_turns: u32,
    /// Turns cancelled because a newer answer made them stale.
    restarts: u32,
    tool_calls: Vec<Value>,
}

pub fn record_json(record: &SessionRecord) -> Value {
    let events = record.events();
    let mut agents: BTreeMap<String, AgentView> = BTreeMap::new();
    let agent = |agents: &mut BTreeMap<String, AgentView>, a: &AgentRef| {
        let view = agents.entry(a.agent_id.clone()).or_default();
        view.label.clone_from(&a.label);
    };
    let mut answers = Vec::new();
    let mut votes = Vec::new();
    let mut ignored_votes = Vec::new();
    let mut consensus = Value::Null;
    let mut outcome = Value::Null;
    let mut status = "running";
    let mut usage = Usage::default();
    let mut cost = Cost::default();
    let mut first_answer_ms = None;
    let mut budget = Value::Null;
    let mut images = Value::Null;
    for event in &events {
        let SessionEvent { at_ms, kind, .. } = &**event;
        match kind {
            EventKind::SessionStarted { agents: list } => {
                for a in list {
                    agent(&mut agents, a);
                }
            }
            EventKind::TurnStarted { agent: a, .. } => {
                agent(&mut agents, a);
                agents.entry(a.agent_id.clone()).or_default().turns += 1;
            }
            EventKind::Answer { answer } => {
                first_answer_ms.get_or_insert(*at_ms);
                agents
                    .entry(answer.agent.agent_id.clone())
                    .or_default()
                    .answers += 1;
                answers.push(json!({"at_ms": at_ms, "answer": answer}));
            }
            EventKind::Vote { vote } => votes.push(json!({"at_ms": at_ms, "vote": vote})),
            EventKind::VoteIgnored { vote, why } => {
                ignored_votes.push(json!({"at_ms": at_ms, "vote": vote, "why": why}));
            }
            EventKind::TurnInvalid { agent: a, .. } => {
                agents.entry(a.agent_id.clone()).or_default().invalid_turns += 1;
            }
            EventKind::AgentFailed { error } => {
                agents
                    .entry(error.agent.agent_id.clone())
                    .or_default()
                    .errors
                    .push(json!(error));
            }
            EventKind::PresentationFailed { agent: a, message } => {
                agents
                    .entry(a.agent_id.clone())
                    .or_default()
                    .errors
                    .push(json!({"kind": "presentation", "message": message}));
            }
            EventKind::Usage {
                agent: a,
                usage: u,
                cost_usd,
                ..
            } => {
                let view = agents.entry(a.agent_id.clone()).or_default();
                view.usage.add(u);
                view.cost.add(*cost_usd, u);
                usage.add(u);
                cost.add(*cost_usd, u);
            }
            EventKind::Consensus {
                winner,
                reason,
                tally,
                votes,
                cut,
            } => {
                consensus = json!({"winner": winner, "reason": reason, "tally": tally, "votes": votes, "cut": cut, "at_ms": at_ms});
            }
            EventKind::TurnRestarted { agent: a, .. } => {
                agents.entry(a.agent_id.clone()).or_default().restarts += 1;
            }
            EventKind::SessionCompleted { summary } => {
                status = "completed";
                outcome = json!(summary);
            }
            EventKind::SessionFailed { error } => {
                status = "failed";
                outcome = json!(error);
            }
            EventKind::ToolCalled {
                agent: a,
                tool,
                round,
                duration_ms,
                error,
            } => {
                agents
                    .entry(a.agent_id.clone())
                    .or_default()
                    .tool_calls
                    .push(json!({
                        "at_ms": at_ms, "tool": tool, "round": round,
                        "duration_ms": duration_ms, "error": error,
                    }));
            }
            EventKind::ImagesShown {
                images: count,
                seen_by,
                not_seen_by,
            } => {
                images = json!({"count": count, "seen_by": seen_by, "not_seen_by": not_seen_by});
            }
            EventKind::BudgetExhausted {
                spent_usd,
                max_cost_usd,
            } => {
                budget =
                    json!({"at_ms": at_ms, "spent_usd": spent_usd, "max_cost_usd": max_cost_usd});
            }
            EventKind::AgentDelta { .. }
            | EventKind::FinalDelta { .. }
            | EventKind::ReasoningDelta { .. }
            | EventKind::FinalToolCalls { .. }
            | EventKind::PresentationStarted { .. }
            | EventKind::PostEvaluation { .. } => {}
        }
    }
    // A session whose process stopped: its events end early, the store says why.
    if status == "running" && record.summary().status == "interrupted" {
        status = "interrupted";
    }
    let started_ms = events.first().map(|e| e.at_ms);
    let ended_ms = (status != "running")
        .then(|| events.last().map(|e| e.at_ms))
        .flatten();
    let agents: Vec<Value> = agents
        .into_iter()
        .map(|(id, a)| {
            json!({
                "agent_id": id, "label": a.label, "usage": a.usage, "cost_usd": a.cost.0,
                "turns": a.turns,
                "answers": a.answers, "invalid_turns": a.invalid_turns, "restarts": a.restarts,
                "failed": !a.errors.is_empty(), "errors": a.errors, "tool_calls": a.tool_calls,
            })
        })
        .collect();
    let (winner, final_answer) = match status {
        "completed" => (outcome["winner"].clone(), outcome["final_answer"].clone()),
        _ => (
            consensus.get("winner").cloned().unwrap_or(Value::Null),
            Value::Null,
        ),
    };
    json!({
        "id": &*record.id,
        "object": "massgen.session",
        "door": record.info.door,
        "model": record.info.model,
        "panel": record.info.panel,
        "question": record.info.question,
        "question_bytes": record.info.question_bytes,
        "question_sha256": record.info.question_sha256,
        "question_truncated": record.info.question.len() < record.info.question_bytes,
        "metadata": record.info.metadata,
        "created_at_ms": record.info.created_ms,
        "status": status,
        "winner": winner,
        "final_answer": final_answer,
        "answers": answers,
        "votes": votes,
        "ignored_votes": ignored_votes,
        "consensus": consensus,
        "agents": agents,
        "usage": usage,
        "cost_usd": cost.0,
        "budget_exhausted": budget,
        "images": images,
        "timings": {
            "started_at_ms": started_ms,
            "first_answer_at_ms": first_answer_ms,
            "ended_at_ms": ended_ms,
            "duration_ms": started_ms.zip(ended_ms).map(|(s, e)| e.saturating_sub(s)),
        },
        "outcome": outcome,
        "events": events.len() as u64 + record.dropped(),
        "events_dropped": record.dropped(),
        "stored": record.is_saved(),
    })
}

/// Longest question shown in the session list (characters); the record has all of it.
const LIST_QUESTION_CHARS: usize = 200;

/// One line of `GET /v1/sessions`, from the record's running summary (no event scan).
pub fn list_entry_json(record: &SessionRecord) -> Value {
    let s = record.summary();
    let info = &record.info;
    let mut question: String = info.question.chars().take(LIST_QUESTION_CHARS).collect();
    if info.question.chars().nth(LIST_QUESTION_CHARS).is_some() {
        question.push('…');
    }
    json!({
        "id": &*record.id,
        "object": "massgen.session.summary",
        "door": info.door,
        "model": info.model,
        "panel": info.panel,
        "question": question,
        "created_at_ms": info.created_ms,
        "status": s.status,
        "agents": s.agents,
        "winner": s.winner,
        "answers": s.answers,
        "votes": s.votes,
        "usage": s.usage,
        "duration_ms": s.started_ms.zip(s.ended_ms).map(|(a, b)| b.saturating_sub(a)),
        "stored": record.is_saved(),
    })
}
