//! The one provider type every HTTP wire format shares: a configured upstream, its
//! endpoint and a body builder. Each wire format's module only says what differs (URL,
//! headers, body, decoder, error reading) and names its provider as an alias of
//! [`HttpProvider`].

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use http::{HeaderMap, HeaderValue};
use massgen_core::Secret;
use serde_json::{Map, Value};

use super::retry::{CallPolicy, RetryObserver};
use super::transport::{self, Endpoint, WireFns};
use super::{ChunkStream, Provider, ProviderRequest};

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

/// What a wire format adds to [`HttpProvider`]: its name in `Debug` output and its body.
/// Implemented by an uninhabited marker type in each wire format's module.
pub trait WireFormat: Send + Sync + 'static {
    /// The provider's type name as `Debug` prints it (`AnthropicProvider`, …).
    const DEBUG_NAME: &'static str;

    /// The JSON body sent upstream for `request`.
    fn build_body(config: &UpstreamConfig, request: &ProviderRequest) -> Value;
}

/// An HTTP upstream speaking wire format `W`. Cheap to clone; share it as
/// `Arc<dyn Provider>`.
pub struct HttpProvider<W> {
    config: Arc<UpstreamConfig>,
    endpoint: Arc<Endpoint>,
    // `fn() -> W` keeps the provider `Send + Sync` and `Clone` whatever the marker is.
    wire: PhantomData<fn() -> W>,
}

impl<W> HttpProvider<W> {
    /// Wraps `config` with the endpoint a wire format worked out (URL, headers, wire fns).
    pub(crate) fn with_endpoint(
        config: UpstreamConfig,
        url: String,
        headers: HeaderMap,
        http: reqwest::Client,
        wire: WireFns,
    ) -> Self {
        let endpoint = Endpoint {
            provider: config.provider_name.clone(),
            model: config.model.clone(),
            url,
            headers,
            key: config.api_key.clone(),
            policy: config.policy.clone(),
            http,
            wire,
            on_retry: None,
        };
        Self {
            config: Arc::new(config),
            endpoint: Arc::new(endpoint),
            wire: PhantomData,
        }
    }

    /// Tells `observer` of every retry of this provider's calls.
    pub fn on_retry(mut self, observer: RetryObserver) -> Self {
        Arc::make_mut(&mut self.endpoint).on_retry = Some(observer);
        self
    }
}

impl<W: WireFormat> HttpProvider<W> {
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
        f.debug_struct(W::DEBUG_NAME)
            .field("provider", &self.config.provider_name)
            .field("model", &self.config.model)
            .field("url", &self.endpoint.url)
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
        transport::call(Arc::clone(&self.endpoint), self.request_body(&request))
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
