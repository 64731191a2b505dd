//! A panel chosen by the request (`"massgen": {"models": ["openai/gpt-4o-mini", …]}`, as
//! MassGen's LiteLLM provider allows): one agent per entry, each on a backend the server's
//! configs already use for that provider: its key and base URL, never new ones. Off unless
//! the operator allows it (`--allow-request-panels`). The orchestrator options, retry policy
//! and timeouts stay those of the panel the request's `model` chose.

use crate::app::Refusal;
use crate::config::{AgentConfig, BackendConfig, PanelCatalog, PanelConfig};

/// The same upstream under two names (MassGen's LiteLLM names and this server's types).
fn canonical(provider: &str) -> String {
    let lower = provider.trim().to_ascii_lowercase();
    match lower.as_str() {
        "anthropic" => "claude".to_string(),
        "xai" => "grok".to_string(),
        "google" => "gemini".to_string(),
        _ => lower,
    }
}

/// The backends of every configured panel (the default first, then the named ones by
/// name): the first of each provider serves the requests that name it.
fn configured(catalog: &PanelCatalog) -> Vec<&BackendConfig> {
    catalog
        .default
        .iter()
        .chain(catalog.named.values())
        .flat_map(|panel| panel.agents.iter().map(|a| &a.backend))
        .collect()
}

/// Providers a request may name, sorted, for the error message.
fn providers(catalog: &PanelCatalog) -> Vec<String> {
    let mut names: Vec<String> = configured(catalog)
        .iter()
        .map(|b| canonical(&b.backend_type))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// `base` with its agents replaced by one per `models` entry (`provider/model`, already
/// checked for shape and count by the door's parser).
pub fn request_panel(
    base: &PanelConfig,
    models: &[String],
    catalog: &PanelCatalog,
    allowed: bool,
) -> Result<PanelConfig, Refusal> {
    if !allowed {
        return Err(Refusal::invalid(
            "'massgen.models' is disabled on this server (the operator can allow it with --allow-request-panels)",
            Some("massgen.models"),
            "request_panels_disabled",
        ));
    }
    let backends = configured(catalog);
    let mut agents: Vec<AgentConfig> = Vec::with_capacity(models.len());
    for entry in models {
        let Some((provider, model)) = entry.split_once('/') else {
            return Err(Refusal::invalid(
                format!("'{entry}' is not \"provider/model\""),
                Some("massgen.models"),
                "invalid_value",
            ));
        };
        let wanted = canonical(provider);
        let Some(backend) = backends
            .iter()
            .find(|b| canonical(&b.backend_type) == wanted)
        else {
            return Err(Refusal::invalid(
                format!(
                    "'massgen.models': this server has no backend for provider '{}' (available: {})",
                    provider.trim(),
                    providers(catalog).join(", ")
                ),
                Some("massgen.models"),
                "unknown_provider",
            ));
        };
        let model = model.trim();
        check_chosen_model(backend, model)?;
        let backend = BackendConfig {
            model: model.to_string(),
            // The configured body parameters were chosen for another model.
            params: serde_json::Map::new(),
            price: massgen_providers::pricing::list_price(model),
            // As for a configured agent without `vision`: the borrowed agent's was said of
            // its own model.
            vision: crate::config::default_vision(model),
            ..(*backend).clone()
        };
        // Ids name the entry; a repeated entry gets `#2`, `#3`, …
        let seen = agents
            .iter()
            .filter(|a| a.id == entry.trim() || a.id.starts_with(&format!("{}#", entry.trim())))
            .count();
        let id = match seen {
            0 => entry.trim().to_string(),
            n => format!("{}#{}", entry.trim(), n + 1),
        };
        agents.push(AgentConfig {
            id,
            system_message: None,
            backend,
            tools: None,
        });
    }
    Ok(PanelConfig {
        agents,
        ..base.clone()
    })
}

/// A model name the request chose (`massgen/model:`, `massgen.models`) for `backend`: a
/// 400 on `model` when it would not stay one path segment of the upstream URL
/// ([`massgen_providers::model_name`]).
pub fn check_chosen_model(backend: &BackendConfig, model: &str) -> Result<(), Refusal> {
    massgen_providers::check_model(&backend.backend_type, model).map_err(|why| {
        Refusal::invalid(
            format!("backend type '{}': {why}", backend.backend_type),
            Some("model"),
            "invalid_value",
        )
    })
}
