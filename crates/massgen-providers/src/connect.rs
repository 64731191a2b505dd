//! Building the provider for a wire format: the registry of wire formats ([`Wire`]) and the
//! one constructor the application calls, with what every upstream of the process shares
//! (the connection pool, the retry hook).

use std::fmt;
use std::sync::Arc;

use crate::retry::RetryObserver;
use crate::{HttpProvider, Provider, UpstreamConfig, WireFormat};

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
            ) -> Result<Arc<dyn Provider>, String> {
                match self {
                    $(Wire::$variant => upstreams.finish::<$format>(config, api_version),)*
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

/// Builds HTTP providers over one shared connection pool, each telling the same
/// [`RetryObserver`] (when set) of its retries. Cheap to clone.
#[derive(Clone)]
pub struct Upstreams {
    http: reqwest::Client,
    on_retry: Option<RetryObserver>,
}

impl Upstreams {
    pub fn new(http: reqwest::Client) -> Self {
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

    /// The provider for `config` speaking `wire`. `api_version` is used by the formats that
    /// take one ([`Wire::AzureChatCompletions`], default
    /// [`crate::chat_completions::AZURE_DEFAULT_API_VERSION`]).
    pub fn build(
        &self,
        wire: Wire,
        config: UpstreamConfig,
        api_version: Option<&str>,
    ) -> Result<Arc<dyn Provider>, String> {
        wire.build(self, config, api_version)
    }

    fn finish<W: WireFormat>(
        &self,
        config: UpstreamConfig,
        api_version: Option<&str>,
    ) -> Result<Arc<dyn Provider>, String> {
        let provider = match api_version {
            Some(version) => {
                HttpProvider::<W>::with_api_version(config, version, self.http.clone())
            }
            None => HttpProvider::<W>::new(config, self.http.clone()),
        }?;
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
