//! Panel files: read, parse each section (one file per section: `agents.rs`, `backend.rs`,
//! `tools.rs`, `orchestrator.rs`, `retry.rs`), log the warnings, and the catalog of a
//! configs directory.
//!
//! Decisions (documented in docs/configuration.md):
//! - `backend.type` is required (MassGen's guessing the type from the model name is not done).
//! - `${VAR}` is expanded in the values the server uses only, so a `${VAR}` in `ui:` or in
//!   an ignored MassGen-only key never fails a load; inside `mcp_servers` an unset one makes
//!   only that server unavailable.
//! - Typed fields (timeouts, counts, flags) also accept strings, because `${VAR}` yields text.
//!   Backend params are passed on exactly as written (after expansion).
//! - MassGen keys this server does not implement are warnings; keys MassGen does not know
//!   either are errors (a typo must not pass silently).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::massgen_keys::V1_TOP_LEVEL_KEYS;
use super::read::{ConfigWarning, Cx, log_once};
use super::{ConfigError, Env, PanelCatalog, PanelConfig, yaml};

/// The top-level sections this server reads; MassGen's others (`ui`, `memory`, …) are
/// ignored, as MassGen ignores keys it does not know.
const SECTIONS: &[&str] = &[
    "agents",
    "agent",
    "orchestrator",
    "timeout_settings",
    "retry",
];

/// Everything wrong with one config file: its errors (empty when it loads) and warnings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigCheck {
    pub errors: Vec<ConfigError>,
    pub warnings: Vec<ConfigWarning>,
}

/// Reads and validates one panel file; its name is the file stem.
pub fn load_panel(path: &Path, env: &Env) -> Result<PanelConfig, ConfigError> {
    let (name, yaml) = read_file(path)?;
    parse_panel(&name, path, &yaml, env)
}

/// Validates panel YAML that came from `source` (used in messages only). Its warnings are
/// logged (once per process and key); the first error is returned.
pub fn parse_panel(
    name: &str,
    source: &Path,
    yaml: &str,
    env: &Env,
) -> Result<PanelConfig, ConfigError> {
    let (panel, check) = read_panel(name, source, yaml, env);
    let file = source.display().to_string();
    for warning in &check.warnings {
        log_once(&file, warning);
    }
    match (panel, check.errors.into_iter().next()) {
        (Some(panel), None) => Ok(panel),
        (_, Some(error)) => Err(error),
        (None, None) => Err(ConfigError::new(file, "", "cannot be read")),
    }
}

/// Every error and warning of one panel file, without loading it (`massgen check-config`).
pub fn check_panel(path: &Path, env: &Env) -> ConfigCheck {
    match read_file(path) {
        Ok((name, yaml)) => read_panel(&name, path, &yaml, env).1,
        Err(error) => ConfigCheck {
            errors: vec![error],
            warnings: Vec::new(),
        },
    }
}

fn read_file(path: &Path) -> Result<(String, String), ConfigError> {
    let yaml = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new(
            path.display().to_string(),
            "",
            format!("cannot read file: {e}"),
        )
    })?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok((name, yaml))
}

/// Reads every section, so that each one's problems are found; the panel only when there
/// is no error.
fn read_panel(
    name: &str,
    source: &Path,
    yaml: &str,
    env: &Env,
) -> (Option<PanelConfig>, ConfigCheck) {
    let cx = Cx::new(source.display().to_string(), env);
    let panel = cx
        .keep(yaml::parse(yaml).map_err(|problem| cx.err("", problem)))
        .and_then(|root| sections(&cx, name, source, &root));
    let (errors, warnings) = cx.finish();
    let panel = panel.filter(|_| errors.is_empty());
    (panel, ConfigCheck { errors, warnings })
}

fn sections(
    cx: &Cx<'_>,
    name: &str,
    source: &Path,
    root: &Map<String, Value>,
) -> Option<PanelConfig> {
    for key in root.keys() {
        if V1_TOP_LEVEL_KEYS.contains(&key.as_str()) {
            cx.keep::<()>(Err(cx.err(
                key,
                "a key of MassGen's first config format, which MassGen rejects too: \
                 use `agents:` and `orchestrator:`",
            )));
        } else if !SECTIONS.contains(&key.as_str()) {
            tracing::debug!(file = %cx.file, section = %key, "config section not used by massgen serve");
        }
    }
    let (agents, count) = cx.keep(cx.agents(root))?;
    let orchestrator = cx.keep(cx.orchestrator(root, count));
    let call_policy = cx.keep(cx.retry(root.get("retry")));
    Some(PanelConfig {
        name: name.to_string(),
        source: PathBuf::from(source),
        agents,
        orchestrator: orchestrator?,
        call_policy: call_policy?,
    })
}

/// The default panel (a bad file is an error) plus every loadable `*.yaml`/`*.yml` of
/// `configs_dir` (a bad one is listed in `unavailable` and logged, the others still load).
pub fn load_catalog(
    default_config: Option<&Path>,
    configs_dir: Option<&Path>,
    env: &Env,
) -> Result<PanelCatalog, ConfigError> {
    let mut catalog = PanelCatalog {
        default: default_config
            .map(|path| load_panel(path, env).map(Arc::new))
            .transpose()?,
        configs_dir: configs_dir.map(Path::to_path_buf),
        ..PanelCatalog::default()
    };
    let Some(dir) = configs_dir else {
        return Ok(catalog);
    };
    let read_err = |e: std::io::Error| {
        ConfigError::new(
            dir.display().to_string(),
            "",
            format!("cannot read configs directory: {e}"),
        )
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_err)? {
        let path = entry.map_err(read_err)?.path();
        let is_yaml = path
            .extension()
            .is_some_and(|ext| ext == "yaml" || ext == "yml");
        if is_yaml && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    for path in files {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !valid_panel_name(&name) {
            tracing::warn!(file = %path.display(), "config skipped: name must match ^[A-Za-z0-9_.-]+$");
            continue;
        }
        if catalog.named.contains_key(&name) || catalog.unavailable.contains_key(&name) {
            tracing::warn!(file = %path.display(), name = %name, "config skipped: another file has the same name");
            continue;
        }
        match load_panel(&path, env) {
            Ok(panel) => {
                catalog.named.insert(name, Arc::new(panel));
            }
            Err(e) => {
                tracing::warn!(name = %name, error = %e, "config unavailable");
                catalog.unavailable.insert(name, e.to_string());
            }
        }
    }
    Ok(catalog)
}

/// Whether `name` may be used as `massgen/<name>`.
pub fn valid_panel_name(name: &str) -> bool {
    // No path syntax: clients send these names as `massgen/<name>`.
    !name.is_empty()
        && !name.starts_with('.')
        && !name.contains("..")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}
