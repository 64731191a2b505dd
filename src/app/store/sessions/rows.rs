//! A session's row: what one batch writes of a session ([`SessionWrite`], gathered in a
//! [`Batch`]), and its JSON columns, what the request said (`info`) and the running
//! summary (`summary`), in a shape of their own so the in-memory types can change without
//! a migration of stored rows.

use std::borrow::Cow;
use std::sync::Arc;

use massgen_core::coordination::{AgentRef, SessionEvent};
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
    #[test]
    fn text_columns_never_carry_nul() {
        assert_eq!(super::text_column("gpt\0x"), "gpt\u{FFFD}x");
        assert_eq!(super::text_column("massgen/team"), "massgen/team");
    }
}
