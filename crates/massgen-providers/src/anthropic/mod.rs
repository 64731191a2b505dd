//! The Anthropic Messages wire format (`POST {base_url}/messages`, `x-api-key`,
//! `anthropic-version`), serving `claude` and `anthropic`.
//!
//! Streamed, unless a request asks for one whole response (then no `stream` is sent).
//! `max_tokens` defaults to [`DEFAULT_MAX_TOKENS`] (plus the thinking
//! budget, when `thinking.budget_tokens` is configured). Retries go through the shared
//! loop (`retry-after`, `x-should-retry` and 529 `overloaded_error` included).

mod decode;
mod errors;
pub(crate) mod request;
mod wire;

use http::{HeaderMap, HeaderValue};
use serde_json::Value;

pub use request::DEFAULT_MAX_TOKENS;
pub(crate) use request::arguments_object;

use super::transport;
use super::upstream::{EndpointParts, base};
use super::{HttpProvider, ProviderError, ProviderRequest, UpstreamConfig, WireFormat};

/// The API version header every request carries.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// An Anthropic Messages upstream. Cheap to clone; share it as `Arc<dyn Provider>`.
pub type AnthropicProvider = HttpProvider<Anthropic>;

/// Anthropic Messages: `POST {base_url}/messages` (`base_url` e.g.
/// `https://api.anthropic.com/v1`), `x-api-key`, `anthropic-version`.
#[derive(Debug)]
pub enum Anthropic {}

impl WireFormat for Anthropic {
    const NAME: &'static str = "AnthropicProvider";
    type Decoder = decode::Decoder;

    fn endpoint(config: &UpstreamConfig, _: Option<&str>) -> Result<EndpointParts, String> {
        let url = format!("{}/messages", base(config));
        let mut headers = HeaderMap::new();
        headers.insert(
            "anthropic-version",
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        if let Some(key) = &config.api_key {
            headers.insert("x-api-key", transport::secret_header(key.expose())?);
        }
        if let Some(betas) = betas(&config.params)? {
            headers.insert("anthropic-beta", betas);
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
        errors::http_error(provider, status, headers, body)
    }
}

/// A `betas` param (a list, or one comma-separated string) as the `anthropic-beta` header,
/// which is where the SDKs put it; it never goes into the body.
fn betas(params: &serde_json::Map<String, Value>) -> Result<Option<HeaderValue>, String> {
    let names: Vec<&str> = match params.get("betas") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(list)) => list.split(',').collect(),
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        Some(_) => return Err("betas must be a list of beta names".to_string()),
    };
    let names: Vec<&str> = names
        .iter()
        .map(|n| n.trim())
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() {
        return Ok(None);
    }
    HeaderValue::from_str(&names.join(","))
        .map(Some)
        .map_err(|_| "betas contains characters not allowed in a header".to_string())
}
