//! The Anthropic Messages wire format (`POST {base_url}/messages`, `x-api-key`,
//! `anthropic-version`), serving `claude` and `anthropic`.
//!
//! Always streamed. `max_tokens` defaults to [`DEFAULT_MAX_TOKENS`] (plus the thinking
//! budget, when `thinking.budget_tokens` is configured). Retries go through the shared
//! loop (`retry-after`, `x-should-retry` and 529 `overloaded_error` included).

mod decode;
mod errors;
mod request;
mod wire;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue};

pub use decode::decode_stream;
pub use request::DEFAULT_MAX_TOKENS;
pub(crate) use request::arguments_object;

use super::transport::{self, Body, Endpoint, WireFns};
use super::{ChunkStream, Provider, ProviderRequest, UpstreamConfig};

/// The API version header every request carries.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// An Anthropic Messages upstream. Cheap to clone; share it as `Arc<dyn Provider>`.
#[derive(Clone)]
pub struct AnthropicProvider {
    config: Arc<UpstreamConfig>,
    endpoint: Arc<Endpoint>,
}

const WIRE: WireFns = WireFns {
    http_error: errors::http_error,
    decode: decode_body,
};

fn decode_body(provider: String, body: Body, idle_timeout: Duration) -> ChunkStream {
    decode_stream(provider, body, idle_timeout)
}

impl AnthropicProvider {
    /// `base_url` is e.g. `https://api.anthropic.com/v1` (without `/messages`).
    pub fn new(config: UpstreamConfig, http: reqwest::Client) -> Result<Self, String> {
        let url = format!("{}/messages", config.base_url.trim_end_matches('/'));
        let mut headers = HeaderMap::new();
        headers.insert(
            "anthropic-version",
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        if let Some(key) = &config.api_key {
            headers.insert("x-api-key", transport::secret_header(key.expose())?);
        }
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
        Ok(Self {
            config: Arc::new(config),
            endpoint: Arc::new(endpoint),
        })
    }

    /// The exact body this provider sends for `request` (for tests and debugging).
    pub fn request_body(&self, request: &ProviderRequest) -> serde_json::Value {
        request::build_body(&self.config.model, &self.config.params, request)
    }
}

impl fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicProvider")
            .field("provider", &self.config.provider_name)
            .field("model", &self.config.model)
            .field("url", &self.endpoint.url)
            .finish_non_exhaustive()
    }
}

impl Provider for AnthropicProvider {
    fn provider_name(&self) -> &str {
        &self.config.provider_name
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    fn stream(&self, request: ProviderRequest) -> ChunkStream {
        transport::call(Arc::clone(&self.endpoint), self.request_body(&request))
    }
}
