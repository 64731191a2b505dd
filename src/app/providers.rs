//! Which provider serves an agent's backend: the [`ProviderFactory`] seam, and the real
//! factory over HTTP whose retries count in the metrics.

use std::sync::Arc;

use massgen_core::provider::Provider;
use massgen_providers::presets;
use massgen_providers::retry::CallPolicy;
use massgen_providers::{UpstreamConfig, Upstreams};

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
    upstreams: Upstreams,
}

impl HttpProviders {
    pub fn new(http: massgen_providers::HttpClient) -> Self {
        let upstreams = Upstreams::new(http).on_retry(Arc::new(crate::telemetry::record_retry));
        Self { upstreams }
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
        let config = UpstreamConfig {
            provider_name: backend.backend_type.clone(),
            model: backend.model.clone(),
            base_url: backend.base_url.clone(),
            api_key: backend.api_key.clone(),
            params: backend.params.clone(),
            policy: policy.clone(),
        };
        self.upstreams.build(
            preset.wire,
            config,
            backend.api_version.as_deref(),
            backend.http,
        )
    }
}
