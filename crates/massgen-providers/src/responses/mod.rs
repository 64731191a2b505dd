//! The OpenAI Responses wire format (`POST {base_url}/responses`, streamed events),
//! serving `openai`. Errors have the OpenAI shape and are read like Chat Completions ones.
//!
//! Config params pass through (`reasoning: {effort, summary}`, `max_output_tokens`,
//! `store`, `include`, `text`, …); `max_tokens` and `reasoning_effort` are renamed to
//! their Responses spellings.

mod decode;
mod request;
mod wire;

use http::HeaderMap;
use serde_json::Value;

pub use decode::decode_stream;

use super::chat_completions::WIRE as CHAT_WIRE;
use super::transport::WireFns;
use super::upstream::{base, bearer};
use super::{HttpProvider, ProviderRequest, UpstreamConfig, WireFormat};

/// A Responses API upstream. Cheap to clone; share it as `Arc<dyn Provider>`.
pub type ResponsesProvider = HttpProvider<Responses>;

/// Marks [`HttpProvider`] as speaking the Responses API.
#[derive(Debug)]
pub enum Responses {}

impl WireFormat for Responses {
    const DEBUG_NAME: &'static str = "ResponsesProvider";

    fn build_body(config: &UpstreamConfig, request: &ProviderRequest) -> Value {
        request::build_body(&config.model, &config.params, request)
    }
}

const WIRE: WireFns = WireFns {
    http_error: CHAT_WIRE.http_error,
    decode: |provider, body, idle_timeout| decode_stream(provider, body, idle_timeout),
};

impl HttpProvider<Responses> {
    /// `base_url` is e.g. `https://api.openai.com/v1` (without `/responses`).
    pub fn new(config: UpstreamConfig, http: reqwest::Client) -> Result<Self, String> {
        let url = format!("{}/responses", base(&config));
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            headers.insert(http::header::AUTHORIZATION, bearer(key)?);
        }
        Ok(Self::with_endpoint(config, url, headers, http, WIRE))
    }
}
