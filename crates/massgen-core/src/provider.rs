//! The provider-neutral seam between the engine and upstream models: the request, chunk,
//! usage and error types every wire format translates to and from, and the [`Provider`]
//! trait the engine calls. Wire formats live in `massgen-providers`; nothing here knows
//! HTTP.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message of the conversation sent upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One message of a provider-neutral conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    /// Text content; may be empty for an assistant message that only calls tools.
    pub content: String,
    /// Tool calls made by an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `Role::Tool`: the id of the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Images attached to a user message, shown after its text (wire formats send them
    /// in their native form; only models that can see images get them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
}

/// An image the client attached. Doors check it (scheme, media type, size) before it gets
/// here, so wire formats render it as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    pub source: ImageSource,
    /// OpenAI's `detail` (`low`, `high`, `auto`); the other wire formats have no such
    /// setting and leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ImageSource {
    /// The image's bytes, base64 (standard alphabet, padded). Shared: every agent's turn
    /// carries the same images, and a copy per turn would multiply the largest part of a
    /// request.
    Base64 {
        media_type: String,
        data: std::sync::Arc<str>,
    },
    /// An `https` URL the upstream fetches itself.
    Url { url: String },
}

impl Image {
    /// The image as a URL: a `data:` URL for bytes (OpenAI's formats take both kinds).
    pub fn url(&self) -> String {
        match &self.source {
            ImageSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
            ImageSource::Url { url } => url.clone(),
        }
    }

    /// Bytes this image holds in memory (its base64 text or its URL).
    pub fn size(&self) -> usize {
        match &self.source {
            ImageSource::Base64 { media_type, data } => media_type.len() + data.len(),
            ImageSource::Url { url } => url.len(),
        }
    }
}

impl Message {
    pub fn system(content: impl Into<String>) -> Self {
        Self::text(Role::System, content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::text(Role::User, content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::text(Role::Assistant, content)
    }
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: Role::Tool,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
            images: Vec::new(),
        }
    }
    fn text(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            images: Vec::new(),
        }
    }
}

/// A function tool offered to the model (JSON Schema parameters).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// A complete tool call as the model made it. `arguments` is the raw JSON text the
/// model produced (it may be invalid JSON: validation is the caller's business).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
    /// What the wire format that produced the call needs back verbatim when the call is
    /// replayed in a later request (Anthropic thinking blocks with their signatures, a
    /// Gemini `thoughtSignature`, Responses reasoning items), keyed by wire format:
    /// `{"anthropic": …}`, `{"gemini": …}`, `{"responses": …}`. Opaque to everyone else,
    /// and process-internal: never serialized (so never in metadata shown to clients).
    #[serde(skip)]
    pub opaque: Option<Value>,
}

/// How the model may use the offered tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolChoice {
    Auto,
    Required,
    None,
    Function(String),
}

/// A provider-neutral request for one upstream call. Backend parameters from the config
/// (temperature, max_tokens, …) are the provider's own business; the fields below the
/// tools are what the client's request asks of this call, which each wire format puts
/// over the config's values in its own spelling (or leaves out where it has none).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProviderRequest {
    /// Shared with the turn, so an upstream call does not copy a prompt it only reads.
    pub messages: Arc<Vec<Message>>,
    /// Shared: the same schemas go out with every agent's call of a session (the workflow
    /// tools with every call of the process).
    pub tools: Vec<Arc<ToolSpec>>,
    pub tool_choice: Option<ToolChoice>,
    pub parallel_tool_calls: Option<bool>,
    /// The shape the reply must have, in the provider's native structured-output form.
    pub output_format: Option<OutputFormat>,
    /// At most this many output tokens (the smaller of this and the config's limit).
    pub max_output_tokens: Option<u64>,
    /// Stop before any of these.
    pub stop: Vec<String>,
    pub sampling: Sampling,
    /// Ask the upstream for one whole response instead of a stream: the wire format makes
    /// its non-streaming call (no `stream` flag; Gemini's `:generateContent`) and hands the
    /// answer on as the same chunks a stream of it would give, all at once when the whole
    /// body has arrived. False (the default): the call streams, chunks as they come. For a
    /// client that did not ask for a stream, so the upstream sees the call it would make.
    pub whole: bool,
}

/// Structured output: the reply must be JSON of this kind.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputFormat {
    /// Any JSON object (OpenAI's JSON mode).
    JsonObject,
    /// JSON valid against `schema`.
    JsonSchema {
        name: String,
        description: Option<String>,
        schema: Value,
        /// OpenAI's strict mode (the schema follows its strict subset).
        strict: bool,
    },
}

/// Sampling settings a client's request sets for every call (when the operator lets
/// requests override the config).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sampling {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: Option<i64>,
}

impl Sampling {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Token usage of one upstream call, in provider-neutral form.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    #[serde(default)]
    pub cached_input_tokens: u64,
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.total_tokens += other.total_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

/// What one model costs, in USD per million tokens. Usage counts cached input tokens inside
/// the input and reasoning tokens inside the output (see [`Usage`]), so cached tokens are
/// priced at the cached rate instead of the input rate, and reasoning tokens at the output
/// rate, each exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Price {
    pub input_per_million: f64,
    pub output_per_million: f64,
    pub cached_input_per_million: f64,
}

impl Price {
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_input_tokens.min(usage.input_tokens);
        let uncached = usage.input_tokens - cached;
        // Token counts stay far below 2^53: the conversions are exact.
        let per_token = |n: u64, per_million: f64| n as f64 * per_million / 1e6;
        per_token(uncached, self.input_per_million)
            + per_token(cached, self.cached_input_per_million)
            + per_token(usage.output_tokens, self.output_per_million)
    }
}

/// Why the upstream model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
}

/// One piece of an upstream stream, in provider-neutral form.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderChunk {
    /// Answer text, as it arrives.
    Text(String),
    /// Reasoning / thinking text, as it arrives.
    Reasoning(String),
    /// The model has begun a tool call: sent once per call, as soon as its name is known
    /// (before its arguments). The engine lets a turn that has begun `new_answer` finish
    /// instead of restarting it.
    ToolCallStarted { name: String },
    /// A tool call, emitted once it is complete (arguments fully assembled).
    ToolCall(ToolCall),
    /// Usage of the call; may come more than once (the last one wins).
    Usage(Usage),
    /// The stream's end, with the upstream's finish reason.
    Finish(FinishReason),
}

/// What went wrong with an upstream call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderErrorKind {
    /// 429 or a quota error.
    RateLimited,
    /// 401/403: bad or missing key.
    Authentication,
    /// 400/404/422 the upstream would reject again.
    InvalidRequest,
    /// The prompt did not fit the model's context window.
    ContextLength,
    /// 5xx or 529 overloaded.
    Server,
    /// Could not connect, or the connection broke.
    Connection,
    /// No byte for too long, or the call took too long.
    Timeout,
    /// The upstream sent something we could not parse.
    InvalidResponse,
    /// The upstream reported an error inside an HTTP 200 stream.
    Stream,
}

impl ProviderErrorKind {
    /// Whether a new attempt may succeed (used before the first byte only).
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::RateLimited | Self::Server | Self::Connection)
    }
}

/// An upstream failure, with what the upstream said preserved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{provider}{http} {kind:?}: {message}", http = http_status(.status))]
pub struct ProviderError {
    pub kind: ProviderErrorKind,
    /// Provider name (preset or wire type), e.g. `openai`, `groq`.
    pub provider: String,
    /// HTTP status, when the failure came with one.
    pub status: Option<u16>,
    /// The upstream's message (never containing our API key).
    pub message: String,
    /// The upstream's error `type`, when it sent one.
    pub error_type: Option<String>,
    /// The upstream's error `code`, when it sent one (numbers become strings).
    pub code: Option<String>,
    /// How long the upstream asked us to wait.
    pub retry_after: Option<Duration>,
}

impl ProviderError {
    pub fn new(
        kind: ProviderErrorKind,
        provider: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            provider: provider.into(),
            status: None,
            message: message.into(),
            error_type: None,
            code: None,
            retry_after: None,
        }
    }
}

impl ProviderError {
    /// Whether the same call may succeed if made again: transient kinds (rate limits,
    /// server and connection errors, timeouts), except a spent quota (`insufficient_quota`),
    /// a 429 that no wait fixes.
    pub fn retry_can_help(&self) -> bool {
        let quota = |v: &Option<String>| v.as_deref() == Some("insufficient_quota");
        if quota(&self.code) || quota(&self.error_type) {
            return false;
        }
        self.kind.is_retryable() || self.kind == ProviderErrorKind::Timeout
    }
}

/// ` HTTP 429` in [`ProviderError`]'s message, when the failure came with a status.
fn http_status(status: &Option<u16>) -> String {
    status.map(|s| format!(" HTTP {s}")).unwrap_or_default()
}

pub type ChunkStream = Pin<Box<dyn Stream<Item = Result<ProviderChunk, ProviderError>> + Send>>;

/// One configured upstream model. Cheap to share (`Arc<dyn Provider>`).
///
/// `stream` starts the call lazily when the returned stream is first polled; dropping the
/// stream cancels the call. Retries before the first byte happen inside the stream. A
/// request with [`ProviderRequest::whole`] set is still answered as a [`ChunkStream`]: its
/// chunks come together once the whole response is in (and retries may happen until then).
pub trait Provider: Send + Sync + fmt::Debug {
    /// Provider name for logs, metrics and errors (`openai`, `groq`, `mock`, …).
    fn provider_name(&self) -> &str;
    /// Model name sent upstream.
    fn model(&self) -> &str;
    fn stream(&self, request: ProviderRequest) -> ChunkStream;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_provider_status_and_kind() {
        let mut e = ProviderError::new(ProviderErrorKind::RateLimited, "groq", "slow down");
        assert_eq!(e.to_string(), "groq RateLimited: slow down");
        e.status = Some(429);
        assert_eq!(e.to_string(), "groq HTTP 429 RateLimited: slow down");
    }

    #[test]
    fn cached_input_is_priced_at_its_rate_and_reasoning_as_output() {
        let price = Price {
            input_per_million: 2.0,
            output_per_million: 8.0,
            cached_input_per_million: 0.5,
        };
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 500_000,
            total_tokens: 1_500_000,
            cached_input_tokens: 400_000,
            // Inside output_tokens already: not charged a second time.
            reasoning_tokens: 300_000,
        };
        // 600k uncached × 2 + 400k cached × 0.5 + 500k output × 8, per million.
        assert!((price.cost(&usage) - (1.2 + 0.2 + 4.0)).abs() < 1e-12);
        assert_eq!(price.cost(&Usage::default()), 0.0);
    }
}
