//! What an eval run is made of, for every part that keeps or shows one: the arms compared
//! and one graded outcome per item and arm (a line of `items.jsonl`, a row of the records'
//! `eval_items`). `massgen eval` makes them; the records store them; the HTTP edge lists
//! them. Plain data here, so none of those depends on another.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How an arm answers an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArmKind {
    /// A coordination session on a panel (its own options, or a variant of them).
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmInfo {
    /// Unique in the run: `panel`, `panel+majority`, `agent:gpt`, `sc5:gpt`, …
    pub name: String,
    pub kind: ArmKind,
    /// Sessions per item (self-consistency: k; otherwise 1).
    pub samples: u32,
    /// `provider/model` of each agent the arm calls, in config order.
    pub models: Vec<String>,
}

/// One item graded on one arm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// The item's question as a person reads it (a `messages` item: its last user
    /// message); empty in lines of earlier versions.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub question: String,
    /// The item's reference answer (its `answer`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Value>,
    /// The item's `metadata` object from the data (what `--group-by` groups by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Panel arms: each agent of the panel, with the key of its answer and its vote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<Member>,
    /// What the result was graded from: a hash of the item's question and reference, the
    /// arm's panel, the grader's settings and the instruction. A rerun redoes a result
    /// whose fingerprint no longer matches (the data or a config changed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fingerprint: String,
}

/// One agent of a panel arm's session, as it ended: what its answer said and whom it
/// voted for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Member {
    /// The agent's id in the panel's config.
    pub agent: String,
    /// `provider/model`.
    pub model: String,
    /// Its answer's key, as the grader reads a key; `None` when it gave none.
    pub key: Option<String>,
    /// The answer it voted for; `None` when it did not vote.
    pub vote: Option<String>,
}
