//! Which wire format serves which backend `type`, and the one pooled HTTP client they share.

use std::sync::Arc;

use super::Provider;
use super::anthropic::AnthropicProvider;
use super::chat_completions::{ChatCompletionsConfig, ChatCompletionsProvider};
use super::gemini::GeminiProvider;
use super::presets::{self, AZURE_DEFAULT_API_VERSION, Wire};
use super::responses::ResponsesProvider;
use super::retry::CallPolicy;
use crate::config::BackendConfig;

/// Builds the provider for one agent's backend. The seam lets tests run the whole HTTP
/// layer over scripted providers.
pub trait ProviderFactory: Send + Sync {
    fn build(
        &self,
        backend: &BackendConfig,
        policy: &CallPolicy,
    ) -> Result<Arc<dyn Provider>, String>;
}

/// The real providers, over one shared connection pool.
#[derive(Debug, Clone)]
pub struct HttpProviders {
    http: reqwest::Client,
}

impl HttpProviders {
    pub fn new(http: reqwest::Client) -> Self {
        Self { http }
    }
}

impl ProviderFactory for HttpProviders {
    fn build(
        &self,
        backend: &BackendConfig,
        policy: &CallPolicy,
    ) -> Result<Arc<dyn Provider>, String> {
        let Some(preset) = presets::find(&backend.backend_type) else {
            return Err(format!("unknown backend type '{}'", backend.backend_type));
        };
        let config = ChatCompletionsConfig {
            provider_name: backend.backend_type.clone(),
            model: backend.model.clone(),
            base_url: backend.base_url.clone(),
            api_key: backend.api_key.clone(),
            params: backend.params.clone(),
            policy: policy.clone(),
        };
        let http = self.http.clone();
        Ok(match preset.wire {
            Wire::ChatCompletions => Arc::new(ChatCompletionsProvider::new(config, http)),
            Wire::Responses => Arc::new(ResponsesProvider::new(config, http)?),
            Wire::Anthropic => Arc::new(AnthropicProvider::new(config, http)?),
            Wire::Gemini => Arc::new(GeminiProvider::new(config, http)?),
            Wire::AzureChatCompletions => {
                let version = backend
                    .api_version
                    .as_deref()
                    .unwrap_or(AZURE_DEFAULT_API_VERSION);
                Arc::new(ChatCompletionsProvider::azure(config, version, http)?)
            }
        })
    }
}
