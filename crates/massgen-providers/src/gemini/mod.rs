//! The Google Gemini wire format
//! (`POST {base_url}/models/{model}:streamGenerateContent?alt=sse`, or `:generateContent`
//! for one whole response, `x-goog-api-key`), serving `gemini`.

mod decode;
mod errors;
pub(crate) mod request;
mod schema;
mod wire;

use http::HeaderMap;
use serde_json::Value;

pub use schema::sanitize as sanitize_schema;

use super::model_name::{gemini_model, path_segment};
use super::transport;
use super::upstream::{EndpointParts, base};
use super::{HttpProvider, ProviderError, ProviderRequest, UpstreamConfig, WireFormat};

/// A Gemini upstream. Cheap to clone; share it as `Arc<dyn Provider>`.
pub type GeminiProvider = HttpProvider<Gemini>;

/// Gemini: `POST {base_url}/models/{model}:streamGenerateContent?alt=sse` (`base_url` e.g.
/// `https://generativelanguage.googleapis.com/v1beta`), `x-goog-api-key`; a whole response
/// from `:generateContent` (the same body).
#[derive(Debug)]
pub enum Gemini {}

impl WireFormat for Gemini {
    const NAME: &'static str = "GeminiProvider";
    type Decoder = decode::Decoder;

    fn endpoint(config: &UpstreamConfig, _: Option<&str>) -> Result<EndpointParts, String> {
        // Google's own clients accept `models/gemini-…` too.
        let model = path_segment(gemini_model(&config.model))?;
        let base = base(config);
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            headers.insert("x-goog-api-key", transport::secret_header(key.expose())?);
        }
        Ok(EndpointParts {
            url: format!("{base}/models/{model}:streamGenerateContent?alt=sse"),
            whole_url: format!("{base}/models/{model}:generateContent"),
            headers,
        })
    }

    // The model travels in the URL, not the body.
    fn build_body(config: &UpstreamConfig, request: &ProviderRequest) -> Value {
        request::build_body(&config.params, request)
    }

    fn http_error(provider: &str, status: u16, headers: &HeaderMap, body: &str) -> ProviderError {
        errors::http_error(provider, status, headers, body)
    }
}
