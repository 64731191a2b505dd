//! The one provider type every HTTP wire format shares ([`HttpProvider`]), and the one
//! trait a wire format implements ([`WireFormat`]): its name, response decoder (streamed
//! and whole), endpoints and headers, body and HTTP error reading. A format is a module implementing the trait plus
//! one line in the registry ([`crate::connect`]'s `wire_formats!`).

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use http::{HeaderMap, HeaderValue};
use massgen_core::Secret;
use serde_json::{Map, Value};

use super::client::HttpClient;
use super::retry::{CallPolicy, RetryObserver};
use super::sse::{self, EventDecoder};
use super::transport::{self, Endpoint, Place};
use super::upstream_http::UpstreamHttp;
use super::whole;
use super::{ChunkStream, Provider, ProviderChunk, ProviderError, ProviderRequest};

/// Everything one configured HTTP upstream needs, whatever its wire format.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// Preset/type name for errors and logs (`openai`, `groq`, `mock`, …).
    pub provider_name: String,
    pub model: String,
    /// E.g. `https://api.openai.com/v1` (without `/chat/completions`; a trailing `/` is fine).
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when present (Azure: `api-key`; Anthropic:
    /// `x-api-key`; Gemini: `x-goog-api-key`).
    pub api_key: Option<Secret>,
    /// Config passthrough (temperature, max_tokens, reasoning_effort, …) merged into the body.
    pub params: Map<String, Value>,
    pub policy: CallPolicy,
}

/// Where a configured upstream is called: the URLs and the headers (authentication,
/// version) every request carries.
pub struct EndpointParts {
    /// Where a streamed response is asked for.
    pub url: String,
    /// Where a whole (non-streamed) response is asked for ([`ProviderRequest::whole`]): the
    /// same URL in every format whose body says whether to stream; Gemini's is another
    /// method (`:generateContent`).
    pub whole_url: String,
    /// Values holding the key are marked sensitive (never printed).
    pub headers: HeaderMap,
}

/// One upstream wire format. Implemented by an uninhabited marker type in the format's
/// module; [`HttpProvider`] does the rest (retries, streaming, redaction).
pub trait WireFormat: Send + Sync + 'static {
    /// The provider's type name as `Debug` prints it (`AnthropicProvider`, …).
    const NAME: &'static str;

    /// The state of one response: SSE events (or a whole body) in, provider-neutral chunks
    /// out.
    type Decoder: EventDecoder;

    /// The URL and headers for `config`. `api_version` is the `api-version` query parameter
    /// of the formats that take one (Azure); the others ignore it.
    fn endpoint(
        config: &UpstreamConfig,
        api_version: Option<&str>,
    ) -> Result<EndpointParts, String>;

    /// The JSON body sent upstream for `request`: asking for a stream, or for one whole
    /// response when [`ProviderRequest::whole`] is set.
    fn build_body(config: &UpstreamConfig, request: &ProviderRequest) -> Value;

    /// A non-2xx response (status, headers for retry hints, body text) as an error.
    fn http_error(provider: &str, status: u16, headers: &HeaderMap, body: &str) -> ProviderError;
}

/// Decodes a streamed (SSE) response body of wire format `W` into provider-neutral chunks.
///
/// `idle_timeout` bounds the wait between two events with data (SSE comments do not count),
/// and the answer is bounded in bytes ([`crate::MAX_ANSWER_BYTES`]). The stream ends after a
/// `Finish` chunk or after the first error.
pub fn decode_stream<W: WireFormat>(
    provider_name: String,
    body: impl Stream<Item = Result<Bytes, impl std::error::Error + Send + Sync + 'static>>
    + Send
    + 'static,
    idle_timeout: Duration,
) -> ChunkStream {
    sse::decode_events(W::Decoder::new(provider_name), body, idle_timeout)
}

/// Decodes a whole (non-streamed) response body of wire format `W` into the chunks the
/// same answer streamed would give ([`WireFormat::Decoder`]'s `on_whole_body`), bounded
/// as a stream's answer is ([`crate::MAX_ANSWER_BYTES`]).
pub fn decode_whole<W: WireFormat>(
    provider: &str,
    body: &[u8],
) -> Result<Vec<ProviderChunk>, ProviderError> {
    whole::decode(W::Decoder::new(provider.to_owned()), body)
}

/// An HTTP upstream speaking wire format `W`. Cheap to clone; share it as
/// `Arc<dyn Provider>`.
pub struct HttpProvider<W> {
    config: Arc<UpstreamConfig>,
    endpoint: Arc<Endpoint>,
    // `fn() -> W` keeps the provider `Send + Sync` and `Clone` whatever the marker is.
    wire: PhantomData<fn() -> W>,
}

impl<W: WireFormat> HttpProvider<W> {
    /// The provider for `config`; an error when the key cannot be sent as a header.
    pub fn new(config: UpstreamConfig, http: HttpClient) -> Result<Self, String> {
        Self::connect(config, None, &http, UpstreamHttp::default())
    }

    /// As [`Self::new`], with the `api-version` of the formats that take one (Azure).
    pub fn with_api_version(
        config: UpstreamConfig,
        api_version: &str,
        http: HttpClient,
    ) -> Result<Self, String> {
        Self::connect(config, Some(api_version), &http, UpstreamHttp::default())
    }

    /// The provider for `config`, called over `http` as `mode` says.
    pub(crate) fn connect(
        config: UpstreamConfig,
        api_version: Option<&str>,
        http: &HttpClient,
        mode: UpstreamHttp,
    ) -> Result<Self, String> {
        let EndpointParts {
            url,
            whole_url,
            headers,
        } = W::endpoint(&config, api_version)?;
        let mut whole_headers = headers.clone();
        // Every client lets a given header replace its default `Accept: text/event-stream`.
        whole_headers.insert(
            http::header::ACCEPT,
            HeaderValue::from_static("application/json"),
        );
        let endpoint = Endpoint {
            provider: config.provider_name.clone(),
            model: config.model.clone(),
            streamed: Place {
                http: http.route(&url, mode)?,
                url,
                headers,
            },
            whole: Place {
                http: http.route(&whole_url, mode)?,
                url: whole_url,
                headers: whole_headers,
            },
            hidden: OnceLock::new(),
            key: config.api_key.clone(),
            policy: config.policy.clone(),
            http_error: W::http_error,
            decode: |provider, body, idle_timeout| decode_stream::<W>(provider, body, idle_timeout),
            decode_whole: decode_whole::<W>,
            on_retry: None,
        };
        Ok(Self {
            config: Arc::new(config),
            endpoint: Arc::new(endpoint),
            wire: PhantomData,
        })
    }

    /// Tells `observer` of every retry of this provider's calls.
    pub fn on_retry(mut self, observer: RetryObserver) -> Self {
        Arc::make_mut(&mut self.endpoint).on_retry = Some(observer);
        self
    }

    /// The exact body this provider sends for `request` (for tests and debugging).
    pub fn request_body(&self, request: &ProviderRequest) -> Value {
        W::build_body(&self.config, request)
    }
}

// Written out because a derive would require `W: Clone` of the marker type.
impl<W> Clone for HttpProvider<W> {
    fn clone(&self) -> Self {
        Self {
            config: Arc::clone(&self.config),
            endpoint: Arc::clone(&self.endpoint),
            wire: PhantomData,
        }
    }
}

impl<W: WireFormat> fmt::Debug for HttpProvider<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(W::NAME)
            .field("provider", &self.config.provider_name)
            .field("model", &self.config.model)
            .field("url", &self.endpoint.streamed.url)
            .finish_non_exhaustive()
    }
}

impl<W: WireFormat> Provider for HttpProvider<W> {
    fn provider_name(&self) -> &str {
        &self.config.provider_name
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    fn stream(&self, request: ProviderRequest) -> ChunkStream {
        let body = self.request_body(&request);
        transport::call(Arc::clone(&self.endpoint), body, request.whole)
    }
}

/// `Authorization: Bearer <key>`, marked sensitive.
pub(crate) fn bearer(key: &Secret) -> Result<HeaderValue, String> {
    transport::secret_header(&format!("Bearer {}", key.expose()))
}

/// `base_url` without trailing slashes, ready for a path to be appended.
pub(crate) fn base(config: &UpstreamConfig) -> &str {
    config.base_url.trim_end_matches('/')
}
