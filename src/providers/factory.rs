//! Which wire format serves which backend `type`, and the one pooled HTTP client they share.

use std::sync::Arc;

use super::Provider;
use super::chat_completions::{ChatCompletionsConfig, ChatCompletionsProvider};
use super::presets;
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
        if presets::find(&backend.backend_type).is_none() {
            return Err(format!("unknown backend type '{}'", backend.backend_type));
        }
        Ok(Arc::new(ChatCompletionsProvider::new(
            ChatCompletionsConfig {
                provider_name: backend.backend_type.clone(),
                model: backend.model.clone(),
                base_url: backend.base_url.clone(),
                api_key: backend.api_key.clone(),
                params: backend.params.clone(),
                policy: policy.clone(),
            },
            self.http.clone(),
        )))
    }
}
