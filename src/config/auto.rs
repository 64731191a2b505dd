//! What `massgen serve` serves without `--config`: the config file it finds (MassGen's CLI
//! lookup), else an automatic panel from the API keys present. The automatic panel is
//! written as YAML and loaded like any file, so `--print-config` prints exactly what is
//! served and its output loads back unchanged.

use std::path::{Path, PathBuf};

use massgen_providers::presets;

use super::{ConfigError, Env, PanelConfig, parse_panel};

/// `PanelConfig::source` of the automatic panel.
pub const AUTO_SOURCE: &str = "<automatic panel>";

/// The providers of the automatic panel, in this order, with their default model: capable
/// models, not each provider's most expensive one (docs/configuration.md, "Where the default
/// panel comes from", dated table).
pub const AUTO_MODELS: &[(&str, &str)] = &[
    ("openai", "gpt-5-mini"),
    ("claude", "claude-sonnet-4-5"),
    ("gemini", "gemini-2.5-flash"),
    ("grok", "grok-4-1-fast-reasoning"),
    ("groq", "llama-3.3-70b-versatile"),
    ("openrouter", "openai/gpt-5-mini"),
    ("cerebras", "llama-3.3-70b"),
];

/// The angles of the three agents of a single-provider panel: one model three times does
/// well when the prompts differ (Self-MoA).
const PERSPECTIVES: &[(&str, &str)] = &[
    (
        "analyst",
        "Reason step by step from first principles and state your assumptions before you \
         answer.",
    ),
    (
        "skeptic",
        "Look for what could be wrong: edge cases, counter-examples and unstated assumptions. \
         Claim only what you can justify.",
    ),
    (
        "pragmatist",
        "Give the answer most useful to the person asking: concrete, complete, and no longer \
         than it needs to be.",
    ),
];

/// The default config MassGen's CLI would find: `.massgen/config.yaml` under `dir` (the
/// working directory), then `$XDG_CONFIG_HOME/massgen/config.yaml`, else
/// `$HOME/.config/massgen/config.yaml`.
pub fn find_default_config(dir: &Path, env: &Env) -> Option<PathBuf> {
    let var = |name: &str| {
        env(name)
            .filter(|v| !v.trim().is_empty())
            .map(PathBuf::from)
    };
    let user_dir = var("XDG_CONFIG_HOME")
        .filter(|p| p.is_absolute())
        .or_else(|| var("HOME").map(|home| home.join(".config")));
    [
        Some(dir.join(".massgen").join("config.yaml")),
        user_dir.map(|d| d.join("massgen").join("config.yaml")),
    ]
    .into_iter()
    .flatten()
    .find(|path| path.is_file())
}

/// Every variable whose key enables a provider of the automatic panel, in order.
pub fn auto_key_variables() -> Vec<&'static str> {
    AUTO_MODELS
        .iter()
        .filter_map(|(backend_type, _)| presets::find(backend_type))
        .flat_map(|preset| preset.key_vars.iter().copied())
        .collect()
}

/// The automatic panel for the keys in `env` as YAML; `None` when no key is set.
pub fn auto_panel_yaml(env: &Env) -> Option<String> {
    let has_key = |backend_type: &str| {
        presets::find(backend_type).is_some_and(|preset| {
            preset
                .key_vars
                .iter()
                .any(|var| env(var).is_some_and(|v| !v.trim().is_empty()))
        })
    };
    let found: Vec<(&str, &str)> = AUTO_MODELS
        .iter()
        .copied()
        .filter(|(backend_type, _)| has_key(backend_type))
        .collect();
    let mut yaml = String::from(
        "# The automatic panel of `massgen serve` (one agent per provider key found; three\n\
         # differently prompted agents for a single provider). Save it as\n\
         # .massgen/config.yaml and edit it to choose your own.\n\
         agents:\n",
    );
    match found.as_slice() {
        [] => return None,
        [(backend_type, model)] => {
            for (id, prompt) in PERSPECTIVES {
                yaml.push_str(&agent_yaml(id, backend_type, model, Some(prompt)));
            }
        }
        several => {
            for (backend_type, model) in several {
                yaml.push_str(&agent_yaml(backend_type, backend_type, model, None));
            }
        }
    }
    Some(yaml)
}

/// One `agents:` entry. Strings are written JSON-quoted, which YAML reads as they are.
fn agent_yaml(id: &str, backend_type: &str, model: &str, prompt: Option<&str>) -> String {
    let quoted = |text: &str| serde_json::Value::String(text.to_string()).to_string();
    let mut entry = format!(
        "  - id: {}\n    backend: {{type: {}, model: {}}}\n",
        quoted(id),
        quoted(backend_type),
        quoted(model)
    );
    if let Some(prompt) = prompt {
        entry.push_str(&format!("    system_message: {}\n", quoted(prompt)));
    }
    entry
}

/// The automatic panel, loaded; `None` when no key is set.
pub fn auto_panel(env: &Env) -> Option<Result<PanelConfig, ConfigError>> {
    let yaml = auto_panel_yaml(env)?;
    Some(parse_panel("auto", Path::new(AUTO_SOURCE), &yaml, env))
}
