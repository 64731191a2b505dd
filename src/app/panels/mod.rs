//! Choosing the panel configuration from the request's `model` (docs/protocol.md,
//! "Choosing the panel per request"), or from its `massgen.models` ([`request_panel`]).

pub mod request_panel;

use std::sync::Arc;

use crate::app::Refusal;
use crate::config::{
    Env, PanelCatalog, PanelConfig, PathRefused, ServerSettings, valid_panel_name,
};

/// Model names clients can list.
pub fn model_ids(catalog: &PanelCatalog) -> Vec<String> {
    let mut ids = Vec::with_capacity(catalog.named.len() + 1);
    if catalog.default.is_some() {
        ids.push("massgen".to_string());
    }
    ids.extend(catalog.named.keys().map(|n| format!("massgen/{n}")));
    ids
}

fn available(catalog: &PanelCatalog) -> Vec<String> {
    model_ids(catalog)
}

/// The request names the agents' model itself (`massgen/model:<name>`), a value no
/// operator chose.
pub fn model_chosen(model: &str) -> bool {
    model.starts_with("massgen/model:")
}

/// Resolves `model` to a panel. `default_model` replaces every agent's model of the
/// default panel when set (`MASSGEN_SERVER_DEFAULT_MODEL`).
pub fn resolve(
    model: &str,
    catalog: &PanelCatalog,
    settings: &ServerSettings,
    allow_model_override: bool,
    default_model: Option<&str>,
    env: &Env,
) -> Result<Arc<PanelConfig>, Refusal> {
    let default = || {
        catalog
            .default
            .clone()
            .ok_or_else(|| Refusal::NoDefaultConfig {
                available: available(catalog),
            })
    };
    let Some(rest) = model.strip_prefix("massgen/") else {
        let panel = default()?;
        return Ok(match default_model {
            Some(m) => Arc::new(with_model(&panel, m)),
            None => panel,
        });
    };

    if let Some(m) = rest.strip_prefix("model:") {
        if !allow_model_override {
            return Err(Refusal::invalid(
                "'massgen/model:' is disabled on this server (the operator turned it off with --allow-model-override=false)",
                Some("model"),
                "model_override_disabled",
            ));
        }
        let m = m.trim();
        if m.is_empty() {
            return Err(Refusal::invalid(
                "'massgen/model:' needs a model name after the colon",
                Some("model"),
                "invalid_model",
            ));
        }
        let panel = default()?;
        for agent in &panel.agents {
            request_panel::check_chosen_model(&agent.backend, m)?;
        }
        return Ok(Arc::new(with_model(panel.as_ref(), m)));
    }

    if let Some(path) = rest.strip_prefix("path:") {
        if !settings.allow_config_paths {
            return Err(Refusal::invalid(
                "'massgen/path:' is disabled on this server (the operator can enable it with --allow-config-paths)",
                Some("model"),
                "config_paths_disabled",
            ));
        }
        return crate::config::load_request_panel(path, settings, env)
            .map(Arc::new)
            .map_err(|refused| path_refused(path, refused));
    }

    if !valid_panel_name(rest) {
        return Err(Refusal::invalid(
            format!(
                "'{rest}' is not a valid configuration name (letters, digits, '-', '_' and '.' only, no path syntax)"
            ),
            Some("model"),
            "invalid_model",
        ));
    }
    if let Some(panel) = catalog.named.get(rest) {
        return Ok(panel.clone());
    }
    if let Some(reason) = catalog.unavailable.get(rest) {
        return Err(Refusal::ConfigUnavailable {
            name: rest.to_string(),
            reason: reason.clone(),
        });
    }
    Err(Refusal::ConfigNotFound {
        name: rest.to_string(),
        available: available(catalog),
    })
}

/// A `massgen/path:` refusal in the API's terms (the caller chose the path: a 400, except
/// a missing file and one that fails to load, as for `massgen/<name>`).
fn path_refused(path: &str, refused: PathRefused) -> Refusal {
    match refused {
        PathRefused::NotAllowed(why) => Refusal::invalid(
            format!("'massgen/path:{path}' is not loaded: {why}"),
            Some("model"),
            "config_path_not_allowed",
        ),
        PathRefused::NotFound => Refusal::ConfigNotFound {
            name: format!("path:{path}"),
            available: Vec::new(),
        },
        PathRefused::Variable(message) => {
            Refusal::invalid(message, Some("model"), "config_variable_not_allowed")
        }
        PathRefused::Load(e) => Refusal::ConfigUnavailable {
            name: path.to_string(),
            reason: format!(
                "{e} (a massgen/path: config reads only the environment variables --config-paths-env lists)"
            ),
        },
    }
}

/// The panel with every agent's model replaced; a configured `pricing` and `vision` were
/// for the old model, so the price is the new model's list price (or unknown) and whether
/// it sees images is the vision table's answer.
fn with_model(panel: &PanelConfig, model: &str) -> PanelConfig {
    let mut panel = panel.clone();
    for agent in &mut panel.agents {
        agent.backend.model = model.to_string();
        agent.backend.price = massgen_providers::pricing::list_price(model);
        // A configured `vision` was said of the old model too.
        agent.backend.vision = crate::config::default_vision(model);
    }
    panel
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_syntax_is_not_a_name() {
        for bad in ["../etc", "a/b", "..", ".hidden", "a b", ""] {
            assert!(!valid_panel_name(bad), "{bad}");
        }
        for good in ["team", "team-2", "local_panel", "v1.2"] {
            assert!(valid_panel_name(good), "{good}");
        }
    }
}
