//! The OpenAI Chat Completions wire format (`POST {base_url}/chat/completions`), serving
//! `chatcompletion`, every OpenAI-compatible preset and (at the deployment URL)
//! `azure_openai`.
//!
//! We always stream upstream (with `stream_options.include_usage`). Retries happen before
//! the first byte of a successful response only (the shared `transport` loop).

mod decode;
pub(crate) mod errors;
mod request;
mod tool_calls;
mod wire;

use serde_json::Value;

pub use decode::decode_stream;

use http::HeaderMap;

use super::transport::{self, WireFns};
use super::upstream::{base, bearer};
use super::{HttpProvider, ProviderError, ProviderRequest, WireFormat};

/// The config type predates the other wire formats; it is the shared one under its old name.
pub use super::UpstreamConfig as ChatCompletionsConfig;

/// A Chat Completions upstream. Cheap to clone; share it as `Arc<dyn Provider>`.
pub type ChatCompletionsProvider = HttpProvider<ChatCompletions>;

/// Marks [`HttpProvider`] as speaking Chat Completions.
#[derive(Debug)]
pub enum ChatCompletions {}

impl WireFormat for ChatCompletions {
    const DEBUG_NAME: &'static str = "ChatCompletionsProvider";

    fn build_body(config: &ChatCompletionsConfig, request: &ProviderRequest) -> Value {
        request::build_body(&config.model, &config.params, request)
    }
}

/// The Chat Completions parts of the shared retry loop.
pub(crate) const WIRE: WireFns = WireFns {
    http_error,
    decode: |provider, body, idle_timeout| decode_stream(provider, body, idle_timeout),
};

fn http_error(provider: &str, status: u16, headers: &HeaderMap, body: &str) -> ProviderError {
    errors::http_error(
        provider,
        status,
        body,
        transport::header_retry_after(headers),
    )
}

impl HttpProvider<ChatCompletions> {
    /// `POST {base_url}/chat/completions` with `Authorization: Bearer` when a key is set.
    pub fn new(config: ChatCompletionsConfig, http: reqwest::Client) -> Self {
        let url = format!("{}/chat/completions", base(&config));
        let mut headers = HeaderMap::new();
        // Infallible by signature: a key that cannot be a header is simply not sent (the
        // upstream then answers 401), unlike the other wire formats which refuse it.
        if let Some(key) = &config.api_key
            && let Ok(value) = bearer(key)
        {
            headers.insert(http::header::AUTHORIZATION, value);
        }
        Self::with_endpoint(config, url, headers, http, WIRE)
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
        let base = base(&config);
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
        Ok(Self::with_endpoint(config, url, headers, http, WIRE))
    }
}
