//! Serde shapes of the Anthropic Messages stream events, whole messages and error bodies.
//!
//! Only the fields we use are named. Events are dispatched on the payload `type` (the
//! `event:` line always agrees with it).

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum EventWire {
    MessageStart {
        message: MessageStartWire,
    },
    ContentBlockStart {
        index: u32,
        content_block: BlockWire,
    },
    ContentBlockDelta {
        index: u32,
        delta: DeltaWire,
    },
    ContentBlockStop {
        index: u32,
    },
    MessageDelta {
        #[serde(default)]
        delta: MessageDeltaWire,
        #[serde(default)]
        usage: Option<UsageWire>,
    },
    MessageStop,
    Ping,
    Error {
        error: ErrorWire,
    },
    /// Event types added after this was written are ignored, as the SDKs do.
    #[serde(other)]
    Unknown,
}

/// A whole (non-streamed) response: a `message` with all its content blocks, or the
/// `{"type":"error","error":{…}}` body some proxies send with a 200.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WholeWire {
    #[serde(default)]
    pub content: Option<Vec<BlockWire>>,
    #[serde(default)]
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub usage: Option<UsageWire>,
    #[serde(default)]
    pub error: Option<ErrorWire>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct MessageStartWire {
    #[serde(default)]
    pub usage: Option<UsageWire>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum BlockWire {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: String,
    },
    RedactedThinking {
        #[serde(default)]
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        /// `{}` at the start of a streamed block; the real input follows as JSON deltas.
        #[serde(default)]
        input: Option<Value>,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum DeltaWire {
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct MessageDeltaWire {
    #[serde(default)]
    pub stop_reason: Option<String>,
}

/// Usage as `message_start` reports it, and cumulatively again in `message_delta`
/// (newer models repeat the input and cache counts there; older ones only output).
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub(crate) struct UsageWire {
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
}

/// `{"type":"error","error":{"type","message"},"request_id"}` (HTTP) or the `error`
/// member of an in-stream `error` event.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ErrorBodyWire {
    #[serde(default)]
    pub error: Option<ErrorWire>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ErrorWire {
    #[serde(default, rename = "type")]
    pub error_type: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}
