//! The OpenAI Responses wire format (`POST {base_url}/responses`, streamed events, or one
//! whole response when a request asks for it), serving `openai`. Errors have the OpenAI shape and are read like Chat Completions ones.
//!
//! Config params pass through (`reasoning: {effort, summary}`, `max_output_tokens`,
//! `store`, `include`, `text`, …); `max_tokens` and `reasoning_effort` are renamed to
//! their Responses spellings.

mod decode;
pub(crate) mod request;
mod wire;

use http::HeaderMap;
use serde_json::Value;

use super::chat_completions::ChatCompletions;
use super::upstream::{EndpointParts, base, bearer};
use super::{HttpProvider, ProviderError, ProviderRequest, UpstreamConfig, WireFormat};

/// A Responses API upstream. Cheap to clone; share it as `Arc<dyn Provider>`.
pub type ResponsesProvider = HttpProvider<Responses>;

/// The Responses API: `POST {base_url}/responses` (`base_url` e.g.
/// `https://api.openai.com/v1`), bearer key.
#[derive(Debug)]
pub enum Responses {}

impl WireFormat for Responses {
    const NAME: &'static str = "ResponsesProvider";
    type Decoder = decode::Decoder;

    fn endpoint(config: &UpstreamConfig, _: Option<&str>) -> Result<EndpointParts, String> {
        let url = format!("{}/responses", base(config));
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            headers.insert(http::header::AUTHORIZATION, bearer(key)?);
        }
        Ok(EndpointParts {
            whole_url: url.clone(),
            url,
            headers,
        })
    }

    fn build_body(config: &UpstreamConfig, request: &ProviderRequest) -> Value {
        request::build_body(&config.model, &config.params, request)
    }

    fn http_error(provider: &str, status: u16, headers: &HeaderMap, body: &str) -> ProviderError {
        ChatCompletions::http_error(provider, status, headers, body)
    }
}
