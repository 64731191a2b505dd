//! Building the provider for a wire format: the registry of wire formats ([`Wire`]) and the
//! one constructor the application calls, with what every upstream of the process shares
//! (the connection pools, the retry hook).

use std::fmt;
use std::sync::Arc;

use crate::Provider;
use crate::client::HttpClient;
use crate::retry::RetryObserver;
use crate::upstream::{HttpProvider, UpstreamConfig, WireFormat};
use crate::upstream_http::UpstreamHttp;

/// The registry: one line per wire format, `Variant => format type`. It makes the [`Wire`]
/// enum the presets name, and its dispatch to the format's [`WireFormat`] implementation.
macro_rules! wire_formats {
    ($($(#[$doc:meta])* $variant:ident => $format:ty,)*) => {
        /// The wire format a backend type speaks.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Wire {
            $($(#[$doc])* $variant,)*
        }

        impl Wire {
            /// The provider type's name (`ResponsesProvider`, …).
            pub fn name(self) -> &'static str {
                match self {
                    $(Wire::$variant => <$format as WireFormat>::NAME,)*
                }
            }

            fn build(
                self,
                upstreams: &Upstreams,
                config: UpstreamConfig,
                api_version: Option<&str>,
                http: UpstreamHttp,
            ) -> Result<Arc<dyn Provider>, String> {
                match self {
                    $(Wire::$variant => upstreams.finish::<$format>(config, api_version, http),)*
                }
            }
        }
    };
}

wire_formats! {
    /// `POST {base_url}/chat/completions`, bearer key.
    ChatCompletions => crate::chat_completions::ChatCompletions,
    /// `POST {base_url}/responses`, bearer key.
    Responses => crate::responses::Responses,
    /// `POST {base_url}/messages`, `x-api-key`.
    Anthropic => crate::anthropic::Anthropic,
    /// `POST {base_url}/models/{model}:streamGenerateContent?alt=sse`, `x-goog-api-key`.
    Gemini => crate::gemini::Gemini,
    /// Chat Completions at `{endpoint}/openai/deployments/{model}/…?api-version=…`, `api-key`.
    AzureChatCompletions => crate::chat_completions::AzureChatCompletions,
}

/// Builds HTTP providers over the shared connection pools, each telling the same
/// [`RetryObserver`] (when set) of its retries. Cheap to clone.
#[derive(Clone)]
pub struct Upstreams {
    http: HttpClient,
    on_retry: Option<RetryObserver>,
}

impl Upstreams {
    pub fn new(http: HttpClient) -> Self {
        Self {
            http,
            on_retry: None,
        }
    }

    /// Every provider built from now on tells `observer` of each retry.
    pub fn on_retry(mut self, observer: RetryObserver) -> Self {
        self.on_retry = Some(observer);
        self
    }

    /// The provider for `config` speaking `wire` over `http`. `api_version` is used by the
    /// formats that take one ([`Wire::AzureChatCompletions`], default
    /// [`crate::chat_completions::AZURE_DEFAULT_API_VERSION`]). [`UpstreamHttp::H2c`] on an
    /// `https://` base URL is an error: TLS negotiates HTTP/2 there already.
    pub fn build(
        &self,
        wire: Wire,
        config: UpstreamConfig,
        api_version: Option<&str>,
        http: UpstreamHttp,
    ) -> Result<Arc<dyn Provider>, String> {
        wire.build(self, config, api_version, http)
    }

    fn finish<W: WireFormat>(
        &self,
        config: UpstreamConfig,
        api_version: Option<&str>,
        mode: UpstreamHttp,
    ) -> Result<Arc<dyn Provider>, String> {
        let provider = HttpProvider::<W>::connect(config, api_version, &self.http, mode)?;
        Ok(match &self.on_retry {
            Some(observer) => Arc::new(provider.on_retry(Arc::clone(observer))),
            None => Arc::new(provider),
        })
    }
}

impl fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstreams")
            .field("on_retry", &self.on_retry.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;
    use crate::upstream_http::H2C_NEEDS_HTTP;

    fn config(base_url: &str) -> UpstreamConfig {
        UpstreamConfig {
            provider_name: "chatcompletion".into(),
            model: "m".into(),
            base_url: base_url.into(),
            api_key: None,
            params: serde_json::Map::new(),
            policy: crate::CallPolicy::default(),
        }
    }

    /// The application's config check refuses it first; a caller that skipped it is still
    /// told, instead of h2c being spoken to a TLS port.
    #[test]
    fn h2c_is_built_for_http_only() {
        let upstreams = Upstreams::new(crate::http_client().unwrap());
        let build = |url: &str, http| {
            upstreams
                .build(Wire::ChatCompletions, config(url), None, http)
                .map(|provider| provider.model().to_string())
        };
        assert_eq!(
            build("http://127.0.0.1:9/v1", UpstreamHttp::H2c).unwrap(),
            "m"
        );
        assert_eq!(
            build("https://llm.example/v1", UpstreamHttp::H2c).unwrap_err(),
            H2C_NEEDS_HTTP
        );
        assert!(build("https://llm.example/v1", UpstreamHttp::Negotiated).is_ok());
    }
}
