//! The OpenAI Responses wire format (`POST {base_url}/responses`, streamed events),
//! serving `openai`. Errors have the OpenAI shape and are read like Chat Completions ones.
//!
//! Config params pass through (`reasoning: {effort, summary}`, `max_output_tokens`,
//! `store`, `include`, `text`, …); `max_tokens` and `reasoning_effort` are renamed to
//! their Responses spellings.

mod decode;
mod request;
mod wire;

use std::fmt;
use std::sync::Arc;

use http::HeaderMap;

pub use decode::decode_stream;

use super::chat_completions::WIRE as CHAT_WIRE;
use super::transport::{self, Body, Endpoint, WireFns};
use super::{ChunkStream, Provider, ProviderRequest, UpstreamConfig};

/// A Responses API upstream. Cheap to clone; share it as `Arc<dyn Provider>`.
#[derive(Clone)]
pub struct ResponsesProvider {
    config: Arc<UpstreamConfig>,
    endpoint: Arc<Endpoint>,
}

const WIRE: WireFns = WireFns {
    http_error: CHAT_WIRE.http_error,
    decode: decode_body,
};

fn decode_body(provider: String, body: Body, idle_timeout: std::time::Duration) -> ChunkStream {
    decode_stream(provider, body, idle_timeout)
}

impl ResponsesProvider {
    /// `base_url` is e.g. `https://api.openai.com/v1` (without `/responses`).
    pub fn new(config: UpstreamConfig, http: reqwest::Client) -> Result<Self, String> {
        let url = format!("{}/responses", config.base_url.trim_end_matches('/'));
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            headers.insert(
                http::header::AUTHORIZATION,
                transport::secret_header(&format!("Bearer {}", key.expose()))?,
            );
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

impl fmt::Debug for ResponsesProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponsesProvider")
            .field("provider", &self.config.provider_name)
            .field("model", &self.config.model)
            .field("url", &self.endpoint.url)
            .finish_non_exhaustive()
    }
}

impl Provider for ResponsesProvider {
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
