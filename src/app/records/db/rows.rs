//! A session row's JSON columns: what the request said (`info`) and the running summary
//! (`summary`), in a shape of their own so the in-memory types can change without a
//! migration of stored rows.

use std::borrow::Cow;

use massgen_core::coordination::AgentRef;
use massgen_core::provider::Usage;
use serde::{Deserialize, Serialize};

use super::super::{SessionInfo, Summary};

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

/// Database integers are signed; our times and counts are not.
pub(super) fn to_db(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(super) fn from_db(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
