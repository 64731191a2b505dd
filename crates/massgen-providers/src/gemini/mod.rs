//! The Google Gemini wire format
//! (`POST {base_url}/models/{model}:streamGenerateContent?alt=sse`, `x-goog-api-key`),
//! serving `gemini`.

mod decode;
mod errors;
mod request;
mod schema;
mod wire;

use http::HeaderMap;
use serde_json::Value;

pub use decode::decode_stream;
pub use schema::sanitize as sanitize_schema;

use super::transport::{self, WireFns};
use super::upstream::base;
use super::{HttpProvider, ProviderRequest, UpstreamConfig, WireFormat};

/// A Gemini upstream. Cheap to clone; share it as `Arc<dyn Provider>`.
pub type GeminiProvider = HttpProvider<Gemini>;

/// Marks [`HttpProvider`] as speaking Gemini.
#[derive(Debug)]
pub enum Gemini {}

impl WireFormat for Gemini {
    const DEBUG_NAME: &'static str = "GeminiProvider";

    // The model travels in the URL, not the body.
    fn build_body(config: &UpstreamConfig, request: &ProviderRequest) -> Value {
        request::build_body(&config.params, request)
    }
}

const WIRE: WireFns = WireFns {
    http_error: errors::http_error,
    decode: |provider, body, idle_timeout| decode_stream(provider, body, idle_timeout),
};

impl HttpProvider<Gemini> {
    /// `base_url` is e.g. `https://generativelanguage.googleapis.com/v1beta`.
    pub fn new(config: UpstreamConfig, http: reqwest::Client) -> Result<Self, String> {
        let url = format!(
            "{}/models/{}:streamGenerateContent?alt=sse",
            base(&config),
            // Google's own clients accept `models/gemini-…` too.
            config.model.trim_start_matches("models/")
        );
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            headers.insert("x-goog-api-key", transport::secret_header(key.expose())?);
        }
        Ok(Self::with_endpoint(config, url, headers, http, WIRE))
    }
}
