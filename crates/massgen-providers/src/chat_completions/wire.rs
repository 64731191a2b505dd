//! Serde shapes of what OpenAI-compatible servers send: stream chunks, whole responses
//! (a `chat.completion` is a chunk whose choices hold a `message`) and error bodies.
//!
//! Only the fields we use are named; everything else (obfuscation, service_tier,
//! reasoning_details, x_groq.id, …) is ignored. Every field is optional because some
//! compatible server omits each of them.

use serde::Deserialize;
use serde_json::Value;

/// One `data:` payload of a `chat.completion.chunk` stream.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ChunkWire {
    #[serde(default)]
    pub choices: Option<Vec<ChoiceWire>>,
    #[serde(default)]
    pub usage: Option<UsageWire>,
    #[serde(default)]
    pub x_groq: Option<XGroqWire>,
    /// OpenRouter puts an error next to normal `choices`; vLLM sends it alone.
    #[serde(default)]
    pub error: Option<ErrorField>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ChoiceWire {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub delta: Option<DeltaWire>,
    /// A whole (non-streamed) `chat.completion`'s answer: the same fields as a delta, all
    /// of them at once.
    #[serde(default)]
    pub message: Option<DeltaWire>,
    /// Absent (xAI), `null` or a string.
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct DeltaWire {
    #[serde(default)]
    pub content: Option<String>,
    /// DeepSeek, xAI, older vLLM.
    #[serde(default)]
    pub reasoning_content: Option<String>,
    /// OpenRouter, Groq (gpt-oss), Ollama, newer vLLM.
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub refusal: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCallDeltaWire>>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ToolCallDeltaWire {
    #[serde(default)]
    pub index: Option<u32>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<FunctionDeltaWire>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct FunctionDeltaWire {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct XGroqWire {
    #[serde(default)]
    pub usage: Option<UsageWire>,
}

#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct UsageWire {
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    #[serde(default)]
    pub completion_tokens: Option<u64>,
    #[serde(default)]
    pub total_tokens: Option<u64>,
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptDetailsWire>,
    #[serde(default)]
    pub completion_tokens_details: Option<CompletionDetailsWire>,
}

#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct PromptDetailsWire {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct CompletionDetailsWire {
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
}

/// An `error` member: an object almost everywhere, a bare string on a few proxies.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum ErrorField {
    Detail(ErrorWire),
    Text(String),
}

/// The error object of OpenAI (`{message,type,param,code}`), Groq (`+failed_generation,
/// status_code`), OpenRouter (numeric `code`, `metadata.raw`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ErrorWire {
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default, rename = "type")]
    pub error_type: Option<String>,
    /// A string (OpenAI) or a number (OpenRouter, vLLM).
    #[serde(default)]
    pub code: Option<Value>,
    #[serde(default)]
    pub status_code: Option<u16>,
    #[serde(default)]
    pub metadata: Option<ErrorMetadataWire>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ErrorMetadataWire {
    /// The routed provider's own error text (OpenRouter); may also be an object.
    #[serde(default)]
    pub raw: Option<Value>,
}

/// A whole error response body: `{"error": …}` or vLLM's older flat
/// `{"object":"error","message",…,"code":400}`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ErrorBodyWire {
    #[serde(default)]
    pub error: Option<ErrorField>,
    #[serde(default)]
    pub object: Option<String>,
    #[serde(flatten)]
    pub flat: ErrorWire,
}
