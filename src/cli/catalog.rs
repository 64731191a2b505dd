//! Where `serve`'s panels come from: the default config (given, found as MassGen's CLI
//! finds it, or the automatic panel of the keys present), the configs dir, and `--demo`.

use std::path::Path;
use std::sync::Arc;

use super::fatal::Fatal;
use super::resolve::ServePlan;
use crate::config::{
    AUTO_SOURCE, Env, PanelCatalog, PanelConfig, auto_panel, auto_panel_yaml, demo_panel,
    find_default_config, load_catalog,
};

pub const NO_CONFIG_HINT: &str = "no panel config: pass --config FILE (or set MASSGEN_SERVER_DEFAULT_CONFIG), \
     write .massgen/config.yaml or ~/.config/massgen/config.yaml, set a provider key for an automatic \
     panel (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY or GOOGLE_API_KEY, XAI_API_KEY, \
     GROQ_API_KEY, OPENROUTER_API_KEY, CEREBRAS_API_KEY; environment or .env), pass --configs-dir DIR \
     with *.yaml files, or --demo to try it with simulated agents";

/// Loads the panels of `plan` and, with `--demo`, adds the demo panel on `mock_base_url`:
/// as the default when no `--config` was given, else as the named config `demo`.
///
/// Without `--config` and `--demo` the default panel is looked up as MassGen's CLI does
/// ([`find_default_config`] from the working directory); failing that, and without
/// `--configs-dir`, it is the automatic panel of the keys in `env` ([`auto_panel`]).
pub fn build_catalog(
    plan: &ServePlan,
    mock_base_url: Option<&str>,
    env: &Env,
) -> Result<PanelCatalog, Fatal> {
    let lookup = plan.default_config.is_none() && !plan.demo;
    let found = lookup
        .then(|| find_default_config(Path::new(""), env))
        .flatten();
    let default_config = plan.default_config.as_deref().or(found.as_deref());
    let mut catalog = load_catalog(default_config, plan.configs_dir.as_deref(), env)?;
    if lookup
        && catalog.default.is_none()
        && plan.configs_dir.is_none()
        && let Some(panel) = auto_panel(env)
    {
        catalog.default = Some(Arc::new(panel?));
    }
    if let Some(url) = mock_base_url {
        let demo = Arc::new(demo_panel(url));
        if catalog.default.is_none() {
            catalog.default = Some(demo);
        } else {
            if catalog.named.contains_key("demo") {
                tracing::warn!("the built-in demo panel replaces configs dir's demo.yaml");
            }
            catalog.named.insert("demo".to_string(), demo);
        }
    }
    if catalog.default.is_none() && catalog.named.is_empty() {
        return Err(Fatal::usage(NO_CONFIG_HINT));
    }
    Ok(catalog)
}

/// What `--print-config` prints: the automatic panel's YAML, or the default config file as
/// it is (both load back to the panel that would be served).
pub fn printed_config(catalog: &PanelCatalog, env: &Env) -> Result<String, Fatal> {
    let Some(panel) = &catalog.default else {
        return Err(Fatal::usage(
            "--print-config: there is no default panel (only --configs-dir panels)",
        ));
    };
    if panel.source == Path::new(AUTO_SOURCE) {
        return auto_panel_yaml(env)
            .ok_or_else(|| Fatal::runtime("the API keys changed while reading them"));
    }
    std::fs::read_to_string(&panel.source)
        .map_err(|e| Fatal::runtime(format!("cannot read {}: {e}", panel.source.display())))
}

/// `--default-model` becomes every default agent's model: it must stay one URL path
/// segment for each that puts it into its upstream URL, as a configured model must.
pub(super) fn check_default_model(
    catalog: &PanelCatalog,
    model: Option<&str>,
) -> Result<(), Fatal> {
    let (Some(model), Some(panel)) = (model, &catalog.default) else {
        return Ok(());
    };
    for agent in &panel.agents {
        massgen_providers::check_model(&agent.backend.backend_type, model)
            .map_err(|why| Fatal::usage(format!("--default-model: agent '{}': {why}", agent.id)))?;
    }
    Ok(())
}

/// `gpt(openai/gpt-4o-mini), …`: ids, types and models only, never keys or URLs.
pub fn describe_agents(panel: &PanelConfig) -> String {
    let list: Vec<String> = panel
        .agents
        .iter()
        .map(|a| format!("{}({}/{})", a.id, a.backend.backend_type, a.backend.model))
        .collect();
    format!("[{}]", list.join(", "))
}
