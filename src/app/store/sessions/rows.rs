//! A session's row: what one batch writes of a session ([`SessionWrite`], gathered in a
//! [`Batch`]), and its JSON columns, what the request said (`info`) and the running
//! summary (`summary`), in a shape of their own so the in-memory types can change without
//! a migration of stored rows.

use std::borrow::Cow;
use std::sync::Arc;

use massgen_core::coordination::{AgentRef, EventKind, SessionEvent};
use massgen_core::provider::Usage;
use serde::{Deserialize, Serialize};

use super::live::{SessionInfo, Summary};

/// One session's part of a batch.
pub(in crate::app::store) struct SessionWrite {
    pub id: Arc<str>,
    pub owner: String,
    /// Written with the session's first batch only (the row's `info` never changes).
    pub(super) info: Option<StoredInfo>,
    pub door: String,
    pub model: String,
    pub panel: String,
    pub created_ms: u64,
    pub summary: Summary,
    pub dropped: u64,
    pub events: Vec<Arc<SessionEvent>>,
}

impl SessionWrite {
    pub fn new(
        id: Arc<str>,
        owner: &str,
        info: &SessionInfo,
        first: bool,
        summary: Summary,
        dropped: u64,
        events: Vec<Arc<SessionEvent>>,
    ) -> Self {
        Self {
            id,
            owner: owner.to_string(),
            info: first.then(|| StoredInfo::of(info)),
            door: text_column(&info.door),
            model: text_column(&info.model),
            panel: text_column(&info.panel),
            created_ms: info.created_ms,
            summary,
            dropped,
            events,
        }
    }
}

/// Text a merged row grows to at most: a row that reached it takes no more deltas (the
/// next starts a row of its own), so a reader's page of rows stays small.
pub(in crate::app::store) const MERGED_TEXT_BYTES: usize = 4 * 1024;

/// The rows one write stores of a session's `events`: each call's token deltas
/// (`agent_delta`, `reasoning_delta` of one agent, `final_delta`) in this write are one
/// row, with the first delta's `seq` and time and the text of all of them in order (up to
/// [`MERGED_TEXT_BYTES`] a row), so a 200-token answer is one row per flush window (about
/// 100 ms), not 200 rows, each a JSON body and four bound parameters. Any other event ends every open run: text is never
/// moved across an answer, a vote or a restart, only across another call's deltas (whose
/// own order is kept too). A later write starts new rows, so a row once committed never
/// changes, and every seq of a later write is above every seq of this one: a reader that
/// goes on from the last row's `seq + 1` misses nothing.
pub(in crate::app::store) fn merged_deltas(events: &[Arc<SessionEvent>]) -> Vec<Arc<SessionEvent>> {
    let mut rows: Vec<Arc<SessionEvent>> = Vec::with_capacity(events.len());
    // The open runs of this write: which call, and its row. A handful at once (one per
    // agent streaming), so a scan beats a map.
    let mut open: Vec<(DeltaOf<'_>, usize)> = Vec::new();
    for event in events {
        let Some((of, text)) = delta_of(&event.kind) else {
            open.clear();
            rows.push(Arc::clone(event));
            continue;
        };
        let run = open.iter().position(|(o, _)| *o == of);
        let full = run.is_some_and(|r| {
            delta_of(&rows[open[r].1].kind).is_some_and(|(_, t)| t.len() >= MERGED_TEXT_BYTES)
        });
        match run {
            Some(r) if !full => {
                // Only rows this function built are extended (`make_mut` clones a shared
                // event once, the first time its run grows).
                let row = open[r].1;
                if let Some(into) = delta_text(&mut Arc::make_mut(&mut rows[row]).kind) {
                    into.push_str(text);
                }
            }
            Some(r) => {
                open[r].1 = rows.len();
                rows.push(Arc::clone(event));
            }
            None => {
                open.push((of, rows.len()));
                rows.push(Arc::clone(event));
            }
        }
    }
    rows
}

/// Which call a token delta belongs to.
#[derive(PartialEq, Eq, Clone, Copy)]
enum DeltaOf<'a> {
    Agent(&'a str),
    Reasoning(&'a str),
    Final,
}

fn delta_of(kind: &EventKind) -> Option<(DeltaOf<'_>, &str)> {
    match kind {
        EventKind::AgentDelta { agent, text } => Some((DeltaOf::Agent(&agent.agent_id), text)),
        EventKind::ReasoningDelta { agent, text } => {
            Some((DeltaOf::Reasoning(&agent.agent_id), text))
        }
        EventKind::FinalDelta { text } => Some((DeltaOf::Final, text)),
        _ => None,
    }
}

fn delta_text(kind: &mut EventKind) -> Option<&mut String> {
    match kind {
        EventKind::AgentDelta { text, .. }
        | EventKind::ReasoningDelta { text, .. }
        | EventKind::FinalDelta { text } => Some(text),
        _ => None,
    }
}

/// A value for a plain TEXT column. PostgreSQL refuses NUL in text (SQLite takes it), and
/// `model` is whatever the client sent: one such request would fail its batch on every
/// retry and stop the replica's records. (JSON columns escape it as `\u0000`.)
fn text_column(value: &str) -> String {
    value.replace('\0', "\u{FFFD}")
}

/// What one transaction writes.
#[derive(Default)]
pub(in crate::app::store) struct Batch {
    pub sessions: Vec<SessionWrite>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
pub(super) struct StoredInfo {
    question: String,
    question_bytes: usize,
    question_sha256: String,
    metadata: serde_json::Map<String, serde_json::Value>,
}

impl StoredInfo {
    pub(super) fn of(info: &SessionInfo) -> Self {
        Self {
            question: info.question.clone(),
            question_bytes: info.question_bytes,
            question_sha256: info.question_sha256.clone(),
            metadata: info.metadata.clone(),
        }
    }

    pub(super) fn into_info(
        self,
        model: String,
        door: String,
        panel: String,
        created_ms: u64,
    ) -> SessionInfo {
        SessionInfo {
            model,
            door: Cow::Owned(door),
            panel,
            question: self.question,
            question_bytes: self.question_bytes,
            question_sha256: self.question_sha256,
            metadata: self.metadata,
            created_ms,
        }
    }
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
pub(super) struct StoredSummary {
    agents: Vec<AgentRef>,
    winner: Option<AgentRef>,
    usage: Usage,
    answers: u32,
    votes: u32,
    /// Events past the per-session cap, counted only.
    dropped: u64,
}

impl StoredSummary {
    pub(super) fn of(summary: &Summary, dropped: u64) -> Self {
        Self {
            agents: summary.agents.clone(),
            winner: summary.winner.clone(),
            usage: summary.usage,
            answers: summary.answers,
            votes: summary.votes,
            dropped,
        }
    }

    /// The summary and the dropped-event count.
    pub(super) fn into_summary(
        self,
        status: &str,
        started_ms: Option<u64>,
        ended_ms: Option<u64>,
    ) -> (Summary, u64) {
        let summary = Summary {
            status: status_name(status),
            agents: self.agents,
            winner: self.winner,
            usage: self.usage,
            answers: self.answers,
            votes: self.votes,
            started_ms,
            ended_ms,
        };
        (summary, self.dropped)
    }
}

/// The stored status as one of the four the API knows; a value written by a newer
/// version reads as `interrupted` (ended, outcome unknown here) rather than `running`.
pub(super) fn status_name(status: &str) -> &'static str {
    match status {
        "running" => "running",
        "completed" => "completed",
        "failed" => "failed",
        _ => "interrupted",
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use massgen_core::coordination::{AgentRef, EventKind, SessionEvent};

    use super::merged_deltas;

    fn agent(i: u8) -> AgentRef {
        AgentRef {
            agent_id: format!("agent{i}"),
            label: format!("agent{i}"),
        }
    }

    fn events(kinds: Vec<EventKind>) -> Vec<Arc<SessionEvent>> {
        kinds
            .into_iter()
            .enumerate()
            .map(|(seq, kind)| {
                Arc::new(SessionEvent {
                    seq: seq as u64,
                    at_ms: 1_000 + seq as u64,
                    session_id: "s".into(),
                    kind,
                })
            })
            .collect()
    }

    fn said(i: u8, text: &str) -> EventKind {
        EventKind::AgentDelta {
            agent: agent(i),
            text: text.into(),
        }
    }

    fn rows(events: &[Arc<SessionEvent>]) -> Vec<(u64, u64, String)> {
        merged_deltas(events)
            .iter()
            .map(|e| {
                let v = serde_json::to_value(&**e).unwrap();
                let what = match &e.kind {
                    EventKind::AgentDelta { agent, text } => format!("{}:{text}", agent.agent_id),
                    EventKind::FinalDelta { text } => format!("final:{text}"),
                    EventKind::ReasoningDelta { agent, text } => {
                        format!("think {}:{text}", agent.agent_id)
                    }
                    _ => v["type"].as_str().unwrap().to_string(),
                };
                (e.seq, e.at_ms, what)
            })
            .collect()
    }

    #[test]
    fn a_calls_deltas_are_one_row_with_the_first_seq_and_every_text_in_order() {
        let log = events(vec![
            said(1, "The "),
            said(2, "Sky "),
            said(1, "sky "),
            said(2, "is "),
            said(1, "is blue."),
            EventKind::FinalDelta { text: "A".into() },
            EventKind::FinalDelta { text: "B".into() },
        ]);
        assert_eq!(
            rows(&log),
            vec![
                (0, 1_000, "agent1:The sky is blue.".into()),
                (1, 1_001, "agent2:Sky is ".into()),
                (5, 1_005, "final:AB".into()),
            ]
        );
        // The log's own events are not changed (live readers share them).
        assert!(matches!(&log[0].kind, EventKind::AgentDelta { text, .. } if text == "The "));
    }

    #[test]
    fn a_full_row_takes_no_more_text() {
        let word = "w".repeat(1000);
        let log = events((0..10).map(|_| said(1, &word)).collect());
        let merged = merged_deltas(&log);
        let sizes: Vec<(u64, usize)> = merged
            .iter()
            .map(|e| match &e.kind {
                EventKind::AgentDelta { text, .. } => (e.seq, text.len()),
                _ => unreachable!(),
            })
            .collect();
        // 4 KiB reached after five words: the sixth starts the next row.
        assert_eq!(sizes, vec![(0, 5000), (5, 5000)]);
    }

    #[test]
    fn any_other_event_ends_every_run_so_no_text_moves_across_it() {
        let log = events(vec![
            said(1, "a"),
            said(2, "x"),
            EventKind::Answer {
                answer: massgen_core::coordination::Answer {
                    answer_label: "agent2.1".into(),
                    agent: agent(2),
                    content: massgen_core::coordination::AnswerContent::Text { text: "x".into() },
                },
            },
            said(1, "b"),
            EventKind::ReasoningDelta {
                agent: agent(1),
                text: "hm".into(),
            },
            said(1, "c"),
        ]);
        assert_eq!(
            rows(&log),
            vec![
                (0, 1_000, "agent1:a".into()),
                (1, 1_001, "agent2:x".into()),
                (2, 1_002, "answer".into()),
                (3, 1_003, "agent1:bc".into()),
                (4, 1_004, "think agent1:hm".into()),
            ]
        );
    }

    #[test]
    fn text_columns_never_carry_nul() {
        assert_eq!(super::text_column("gpt\0x"), "gpt\u{FFFD}x");
        assert_eq!(super::text_column("massgen/team"), "massgen/team");
    }
}
