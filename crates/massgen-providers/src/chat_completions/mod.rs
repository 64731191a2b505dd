//! The OpenAI Chat Completions wire format (`POST {base_url}/chat/completions`), serving
//! `chatcompletion`, every OpenAI-compatible preset and (at the deployment URL)
//! `azure_openai`.
//!
//! Streamed upstream (with `stream_options.include_usage`), unless a request asks for one
//! whole response (then neither `stream` nor `stream_options` is sent). Retries happen
//! before the first byte of a successful response only (the shared `transport` loop).

mod decode;
pub(crate) mod errors;
pub(crate) mod request;
mod tool_calls;
mod wire;

use http::HeaderMap;
use serde_json::Value;

use super::model_name::{path_segment, percent_encode};
use super::transport;
use super::upstream::{EndpointParts, base, bearer};
use super::{HttpProvider, ProviderError, ProviderRequest, WireFormat};

/// The config type predates the other wire formats; it is the shared one under its old name.
pub use super::UpstreamConfig as ChatCompletionsConfig;

/// A Chat Completions upstream. Cheap to clone; share it as `Arc<dyn Provider>`.
pub type ChatCompletionsProvider = HttpProvider<ChatCompletions>;

/// An Azure OpenAI upstream (Chat Completions at a deployment URL).
pub type AzureChatCompletionsProvider = HttpProvider<AzureChatCompletions>;

/// Chat Completions: `POST {base_url}/chat/completions` with `Authorization: Bearer` when a
/// key is set.
#[derive(Debug)]
pub enum ChatCompletions {}

impl WireFormat for ChatCompletions {
    const NAME: &'static str = "ChatCompletionsProvider";
    type Decoder = decode::Decoder;

    fn endpoint(config: &ChatCompletionsConfig, _: Option<&str>) -> Result<EndpointParts, String> {
        let url = format!("{}/chat/completions", base(config));
        let mut headers = HeaderMap::new();
        // A key that cannot be a header is simply not sent (the upstream then answers 401),
        // unlike the other wire formats which refuse it.
        if let Some(key) = &config.api_key
            && let Ok(value) = bearer(key)
        {
            headers.insert(http::header::AUTHORIZATION, value);
        }
        Ok(EndpointParts {
            whole_url: url.clone(),
            url,
            headers,
        })
    }

    fn build_body(config: &ChatCompletionsConfig, request: &ProviderRequest) -> Value {
        request::build_body(&config.model, &config.params, request)
    }

    fn http_error(provider: &str, status: u16, headers: &HeaderMap, body: &str) -> ProviderError {
        errors::http_error(
            provider,
            status,
            body,
            transport::header_retry_after(headers),
        )
    }
}

/// Azure's API version when neither `api_version` nor `AZURE_OPENAI_API_VERSION` is set.
pub const AZURE_DEFAULT_API_VERSION: &str = "2024-10-21";

/// Azure OpenAI: the deployment URL
/// `{endpoint}/openai/deployments/{model}/chat/completions?api-version=…` (default
/// [`AZURE_DEFAULT_API_VERSION`]) and the key in an `api-key` header. `model` is the
/// deployment name, one path segment (see [`crate::model_name`]). A `base_url` that
/// already names a deployment (`…/openai/deployments/<name>`) is used as it is. Body,
/// stream and errors are Chat Completions'.
#[derive(Debug)]
pub enum AzureChatCompletions {}

impl WireFormat for AzureChatCompletions {
    const NAME: &'static str = "AzureChatCompletionsProvider";
    type Decoder = decode::Decoder;

    fn endpoint(
        config: &ChatCompletionsConfig,
        api_version: Option<&str>,
    ) -> Result<EndpointParts, String> {
        let base = base(config);
        let deployment_url = if base.contains("/openai/deployments/") {
            base.to_owned()
        } else {
            format!("{base}/openai/deployments/{}", path_segment(&config.model)?)
        };
        let url = format!(
            "{deployment_url}/chat/completions?api-version={}",
            percent_encode(api_version.unwrap_or(AZURE_DEFAULT_API_VERSION).trim())
        );
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            headers.insert("api-key", transport::secret_header(key.expose())?);
        }
        Ok(EndpointParts {
            whole_url: url.clone(),
            url,
            headers,
        })
    }

    fn build_body(config: &ChatCompletionsConfig, request: &ProviderRequest) -> Value {
        ChatCompletions::build_body(config, request)
    }

    fn http_error(provider: &str, status: u16, headers: &HeaderMap, body: &str) -> ProviderError {
        ChatCompletions::http_error(provider, status, headers, body)
    }
}
