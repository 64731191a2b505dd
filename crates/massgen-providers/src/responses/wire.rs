//! Serde shapes of the OpenAI Responses stream events (`POST /responses`, stream=true) and
//! of a whole response (without `stream`).
//!
//! One flat struct for every event: the `type` names the event and each event fills a few
//! of the optional fields. Items stay raw JSON because reasoning items are replayed as
//! they came.

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Default, Deserialize)]
pub(crate) struct EventWire {
    #[serde(default, rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub delta: Option<String>,
    #[serde(default)]
    pub output_index: Option<u32>,
    #[serde(default)]
    pub item_id: Option<String>,
    #[serde(default)]
    pub item: Option<Value>,
    #[serde(default)]
    pub arguments: Option<String>,
    #[serde(default)]
    pub response: Option<ResponseWire>,
    /// `error` events: `{"type":"error","code","message","param"}`.
    #[serde(default)]
    pub code: Option<Value>,
    #[serde(default)]
    pub message: Option<String>,
    /// Some servers nest the error instead: `{"type":"error","error":{…}}`.
    #[serde(default)]
    pub error: Option<ErrorWire>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ResponseWire {
    #[serde(default)]
    pub usage: Option<UsageWire>,
    #[serde(default)]
    pub incomplete_details: Option<IncompleteWire>,
    #[serde(default)]
    pub error: Option<ErrorWire>,
}

/// A whole (non-streamed) `response`: what `response.completed` would carry, with its
/// output items.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WholeWire {
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub output: Option<Vec<Value>>,
    #[serde(flatten)]
    pub response: ResponseWire,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct IncompleteWire {
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ErrorWire {
    #[serde(default)]
    pub code: Option<Value>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default, rename = "type")]
    pub error_type: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct UsageWire {
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub total_tokens: Option<u64>,
    #[serde(default)]
    pub input_tokens_details: Option<InputDetailsWire>,
    #[serde(default)]
    pub output_tokens_details: Option<OutputDetailsWire>,
}

#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct InputDetailsWire {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct OutputDetailsWire {
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
}
