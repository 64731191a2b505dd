//! The Google Gemini wire format
//! (`POST {base_url}/models/{model}:streamGenerateContent?alt=sse`, `x-goog-api-key`),
//! serving `gemini`.

mod decode;
mod errors;
mod request;
mod schema;
mod wire;

use std::fmt;
use std::sync::Arc;

use http::HeaderMap;

pub use decode::decode_stream;
pub use schema::sanitize as sanitize_schema;

use super::transport::{self, Body, Endpoint, WireFns};
use super::{ChunkStream, Provider, ProviderRequest, UpstreamConfig};

/// A Gemini upstream. Cheap to clone; share it as `Arc<dyn Provider>`.
#[derive(Clone)]
pub struct GeminiProvider {
    config: Arc<UpstreamConfig>,
    endpoint: Arc<Endpoint>,
}

const WIRE: WireFns = WireFns {
    http_error: errors::http_error,
    decode: decode_body,
};

fn decode_body(provider: String, body: Body, idle_timeout: std::time::Duration) -> ChunkStream {
    decode_stream(provider, body, idle_timeout)
}

impl GeminiProvider {
    /// `base_url` is e.g. `https://generativelanguage.googleapis.com/v1beta`.
    pub fn new(config: UpstreamConfig, http: reqwest::Client) -> Result<Self, String> {
        let url = format!(
            "{}/models/{}:streamGenerateContent?alt=sse",
            config.base_url.trim_end_matches('/'),
            // Google's own clients accept `models/gemini-…` too.
            config.model.trim_start_matches("models/")
        );
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            headers.insert("x-goog-api-key", transport::secret_header(key.expose())?);
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
        request::build_body(&self.config.params, request)
    }
}

impl fmt::Debug for GeminiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GeminiProvider")
            .field("provider", &self.config.provider_name)
            .field("model", &self.config.model)
            .field("url", &self.endpoint.url)
            .finish_non_exhaustive()
    }
}

impl Provider for GeminiProvider {
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
