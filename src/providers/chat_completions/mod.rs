//! The OpenAI Chat Completions wire format (`POST {base_url}/chat/completions`), serving
//! `chatcompletion`, every OpenAI-compatible preset and (at the deployment URL)
//! `azure_openai`.
//!
//! We always stream upstream (with `stream_options.include_usage`). Retries happen before
//! the first byte of a successful response only (the shared `providers::transport` loop).

mod decode;
pub(crate) mod errors;
mod request;
mod tool_calls;
mod wire;

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::{Map, Value};

pub use decode::decode_stream;

use http::HeaderMap;

use super::retry::CallPolicy;
use super::transport::{self, Body, Endpoint, WireFns};
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
    /// Sent as `Authorization: Bearer …` when present (Azure: `api-key`; Anthropic:
    /// `x-api-key`; Gemini: `x-goog-api-key`).
    pub api_key: Option<Secret>,
    /// Config passthrough (temperature, max_tokens, reasoning_effort, …) merged into the body.
    pub params: Map<String, Value>,
    pub policy: CallPolicy,
}

/// A Chat Completions upstream. Cheap to clone; share it as `Arc<dyn Provider>`.
#[derive(Clone)]
pub struct ChatCompletionsProvider {
    config: Arc<ChatCompletionsConfig>,
    endpoint: Arc<Endpoint>,
}

/// The Chat Completions parts of the shared retry loop.
pub(crate) const WIRE: WireFns = WireFns {
    http_error,
    decode: decode_body,
};

fn http_error(provider: &str, status: u16, headers: &HeaderMap, body: &str) -> ProviderError {
    errors::http_error(
        provider,
        status,
        body,
        transport::header_retry_after(headers),
    )
}

fn decode_body(provider: String, body: Body, idle_timeout: Duration) -> ChunkStream {
    decode_stream(provider, body, idle_timeout)
}

impl ChatCompletionsProvider {
    /// `POST {base_url}/chat/completions` with `Authorization: Bearer` when a key is set.
    pub fn new(config: ChatCompletionsConfig, http: reqwest::Client) -> Self {
        let url = format!("{}/chat/completions", config.base_url.trim_end_matches('/'));
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key
            && let Ok(value) = transport::secret_header(&format!("Bearer {}", key.expose()))
        {
            headers.insert(http::header::AUTHORIZATION, value);
        }
        Self::with_endpoint(config, url, headers, http)
    }

    /// Azure OpenAI: the deployment URL
    /// `{endpoint}/openai/deployments/{model}/chat/completions?api-version=…` and the key in
    /// an `api-key` header. `model` is the deployment name. A `base_url` that already names
    /// a deployment (`…/openai/deployments/<name>`) is used as it is.
    pub fn azure(
        config: ChatCompletionsConfig,
        api_version: &str,
        http: reqwest::Client,
    ) -> Result<Self, String> {
        let base = config.base_url.trim_end_matches('/');
        let deployment_url = if base.contains("/openai/deployments/") {
            base.to_owned()
        } else {
            format!("{base}/openai/deployments/{}", config.model)
        };
        let url = format!(
            "{deployment_url}/chat/completions?api-version={}",
            api_version.trim()
        );
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            headers.insert("api-key", transport::secret_header(key.expose())?);
        }
        Ok(Self::with_endpoint(config, url, headers, http))
    }

    fn with_endpoint(
        config: ChatCompletionsConfig,
        url: String,
        headers: HeaderMap,
        http: reqwest::Client,
    ) -> Self {
        let endpoint = Endpoint {
            provider: config.provider_name.clone(),
            model: config.model.clone(),
            url,
            headers,
            key: config.api_key.clone(),
            policy: config.policy.clone(),
            http,
            wire: WIRE,
        };
        Self {
            config: Arc::new(config),
            endpoint: Arc::new(endpoint),
        }
    }
}

impl fmt::Debug for ChatCompletionsProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatCompletionsProvider")
            .field("provider", &self.config.provider_name)
            .field("model", &self.config.model)
            .field("url", &self.endpoint.url)
            .finish_non_exhaustive()
    }
}

impl Provider for ChatCompletionsProvider {
    fn provider_name(&self) -> &str {
        &self.config.provider_name
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    fn stream(&self, request: ProviderRequest) -> ChunkStream {
        let body = request::build_body(&self.config.model, &self.config.params, &request);
        transport::call(Arc::clone(&self.endpoint), body)
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
                    super::sse::error_chain(&error)
                ),
            )
        })?;
    // A concurrent first call may have won the race; either client is fine, keep one.
    Ok(CLIENT.get_or_init(|| client).clone())
}
