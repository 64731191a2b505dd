//! The OpenAI Chat Completions wire format (`POST {base_url}/chat/completions`), serving
//! `openai`, `chatcompletion` and every OpenAI-compatible preset.
//!
//! We always stream upstream (with `stream_options.include_usage`). Retries happen before
//! the first byte of a successful response only; see [`transport`].

mod decode;
mod errors;
mod request;
mod tool_calls;
mod transport;
mod wire;

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::{Map, Value};

pub use decode::decode_stream;

use super::retry::CallPolicy;
use super::{ChunkStream, Provider, ProviderError, ProviderErrorKind, ProviderRequest};
use crate::secret::Secret;

/// Everything one configured Chat Completions upstream needs.
#[derive(Debug, Clone)]
pub struct ChatCompletionsConfig {
    /// Preset/type name for errors and logs (`openai`, `groq`, `mock`, …).
    pub provider_name: String,
    pub model: String,
    /// E.g. `https://api.openai.com/v1` (without `/chat/completions`; a trailing `/` is fine).
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when present.
    pub api_key: Option<Secret>,
    /// Config passthrough (temperature, max_tokens, reasoning_effort, …) merged into the body.
    pub params: Map<String, Value>,
    pub policy: CallPolicy,
}

/// A Chat Completions upstream. Cheap to clone; share it as `Arc<dyn Provider>`.
#[derive(Clone)]
pub struct ChatCompletionsProvider {
    inner: Arc<Inner>,
}

struct Inner {
    config: ChatCompletionsConfig,
    url: String,
    http: reqwest::Client,
}

impl ChatCompletionsProvider {
    pub fn new(config: ChatCompletionsConfig, http: reqwest::Client) -> Self {
        let url = format!("{}/chat/completions", config.base_url.trim_end_matches('/'));
        Self {
            inner: Arc::new(Inner { config, url, http }),
        }
    }
}

impl fmt::Debug for ChatCompletionsProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatCompletionsProvider")
            .field("provider", &self.inner.config.provider_name)
            .field("model", &self.inner.config.model)
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

impl Provider for ChatCompletionsProvider {
    fn provider_name(&self) -> &str {
        &self.inner.config.provider_name
    }

    fn model(&self) -> &str {
        &self.inner.config.model
    }

    fn stream(&self, request: ProviderRequest) -> ChunkStream {
        let inner = Arc::clone(&self.inner);
        let body = request::build_body(&inner.config.model, &inner.config.params, &request);
        transport::call(inner, body)
    }
}

/// How long an idle pooled connection is kept for reuse.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The process-wide HTTP client (one connection pool for every upstream).
///
/// Its connect timeout is [`CallPolicy::default`]'s: reqwest sets it per client, not per
/// request. A per-call policy still bounds connecting through `first_byte_timeout`.
pub fn http_client() -> Result<reqwest::Client, ProviderError> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    if let Some(client) = CLIENT.get() {
        return Ok(client.clone());
    }
    let client = reqwest::Client::builder()
        .connect_timeout(CallPolicy::default().connect_timeout)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .tcp_keepalive(Duration::from_secs(30))
        .user_agent(concat!("massgen/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|error| {
            ProviderError::new(
                ProviderErrorKind::Connection,
                "http",
                format!(
                    "cannot build the HTTP client: {}",
                    decode::error_chain(&error)
                ),
            )
        })?;
    // A concurrent first call may have won the race; either client is fine, keep one.
    Ok(CLIENT.get_or_init(|| client).clone())
}
