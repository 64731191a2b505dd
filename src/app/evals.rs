//! What an eval run is made of, for every part that keeps or shows one: the arms compared
//! and one graded outcome per item and arm (a line of `items.jsonl`, a row of the records'
//! `eval_items`). `massgen eval` makes them; the records store them; the HTTP edge lists
//! them. Plain data here, so none of those depends on another.

use serde::{Deserialize, Serialize};

/// How an arm answers an item.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArmKind {
    /// A coordination session on a panel (its own options, or a variant of them).
    #[default]
    Panel,
    /// One agent of the panel alone: one upstream call, no other answers, no votes.
    Agent,
    /// One agent asked `samples` times; the answer most of the samples give wins.
    SelfConsistency,
}

impl ArmKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Panel => "panel",
            Self::Agent => "agent",
            Self::SelfConsistency => "self_consistency",
        }
    }
}

/// One arm of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ArmInfo {
    /// Unique in the run: `panel`, `panel+majority`, `agent:gpt`, `sc5:gpt`, …
    pub name: String,
    pub kind: ArmKind,
    /// Sessions per item (self-consistency: k; otherwise 1).
    pub samples: u32,
    /// `provider/model` of each agent the arm calls, in config order.
    pub models: Vec<String>,
}

/// One item graded on one arm. Fields added after the first version read as their default
/// from an older `items.jsonl` line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ItemResult {
    /// The item's `id` (its line number, from 1, when the data gives none).
    pub item: String,
    pub arm: String,
    pub kind: ArmKind,
    /// The grader accepted the arm's answer. A failed item is not correct.
    pub correct: bool,
    /// Why the arm gave no gradable answer (every session failed, or the judge did);
    /// `None` when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// The arm's final answer as the user would have read it (self-consistency: the
    /// text of the first sample that gave the chosen value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// What the grader compared (the extracted answer, normalised).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extracted: Option<String>,
    /// Self-consistency: each sample's extracted answer, in order (a failed sample: null).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<Option<String>>,
    /// Self-consistency: each sample's whole answer, in order (a failed sample: null), so
    /// another grader can count the majority again without asking again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sample_answers: Vec<Option<String>>,
    /// A panel arm: what each agent answered last and whom it voted for, in config order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<Member>,
    /// The item's question (a conversation's last user message), as the judge is shown it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The item's reference answer as the data gives it; absent when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<serde_json::Value>,
    /// The item's own keys beyond those eval reads (a category, a source, a difficulty).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// USD the arm's sessions cost; `None` when a call had no price.
    pub cost_usd: Option<f64>,
    /// USD the judge's sessions cost (the `judge` grader), apart from the arm's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_cost_usd: Option<f64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Wall time of the arm on this item (self-consistency: its samples run at once).
    pub latency_s: f64,
    /// The records' ids of the arm's sessions (`GET /v1/sessions/{id}`).
    pub session_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judge_session_ids: Vec<String>,
    /// What the answer was asked from: a hash of the item's question (or messages), the
    /// arm's panel, the instruction and the structured output asked for. A rerun asks
    /// again when it no longer matches (the question or a config changed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fingerprint: String,
    /// What the answer was graded with: a hash of the grader's settings and the item's
    /// reference. A rerun grades the stored answer again when it no longer matches, with
    /// no upstream call (the judge's apart).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub grading: String,
}

impl ItemResult {
    /// The arm gave an answer a grader can read again: its text (self-consistency: a
    /// sample's) is kept. `false` when its sessions failed.
    pub fn answered(&self) -> bool {
        match self.kind {
            ArmKind::SelfConsistency => self.sample_answers.iter().any(Option::is_some),
            ArmKind::Panel | ArmKind::Agent => self.answer.is_some(),
        }
    }
}

/// One agent of a panel arm's session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Member {
    /// The agent's id in the panel's config.
    pub agent: String,
    /// `provider/model`, as the arm's `models` name it.
    pub model: String,
    /// Its last answer's key, as the grader extracts it; null when it never answered.
    pub key: Option<String>,
    /// The agent id its last counted vote went to; null when it did not vote.
    pub vote: Option<String>,
    /// Its last answer, whole (what `key` is extracted from again when the grader
    /// changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}
