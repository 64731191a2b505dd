//! Building the provider for a wire format: the one constructor the application calls,
//! with what every upstream of the process shares (the connection pool, the retry hook).

use std::fmt;
use std::sync::Arc;

use crate::anthropic::AnthropicProvider;
use crate::chat_completions::ChatCompletionsProvider;
use crate::gemini::GeminiProvider;
use crate::presets::{AZURE_DEFAULT_API_VERSION, Wire};
use crate::responses::ResponsesProvider;
use crate::retry::RetryObserver;
use crate::{HttpProvider, Provider, UpstreamConfig, WireFormat};

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

    /// The provider for `config` speaking `wire`. `azure_api_version` is used by
    /// [`Wire::AzureChatCompletions`] only (default [`AZURE_DEFAULT_API_VERSION`]).
    pub fn build(
        &self,
        wire: Wire,
        config: UpstreamConfig,
        azure_api_version: Option<&str>,
    ) -> Result<Arc<dyn Provider>, String> {
        let http = self.http.clone();
        Ok(match wire {
            Wire::ChatCompletions => self.finish(ChatCompletionsProvider::new(config, http)),
            Wire::Responses => self.finish(ResponsesProvider::new(config, http)?),
            Wire::Anthropic => self.finish(AnthropicProvider::new(config, http)?),
            Wire::Gemini => self.finish(GeminiProvider::new(config, http)?),
            Wire::AzureChatCompletions => {
                let version = azure_api_version.unwrap_or(AZURE_DEFAULT_API_VERSION);
                self.finish(ChatCompletionsProvider::azure(config, version, http)?)
            }
        })
    }

    fn finish<W: WireFormat>(&self, provider: HttpProvider<W>) -> Arc<dyn Provider> {
        match &self.on_retry {
            Some(observer) => Arc::new(provider.on_retry(Arc::clone(observer))),
            None => Arc::new(provider),
        }
    }
}

impl fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstreams")
            .field("on_retry", &self.on_retry.is_some())
            .finish_non_exhaustive()
    }
}
