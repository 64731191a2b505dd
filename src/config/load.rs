//! Panel files: read, expand `${VAR}`, validate, resolve keys and base URLs.
//!
//! Decisions (documented in the README section on configs):
//! - An agent without `id` gets `agent<N>` (1-based position), as MassGen does; a clash with an
//!   explicit id is a duplicate-id error.
//! - `backend.type` is required (MassGen's guessing the type from the model name is not done).
//! - Only the sections we use are expanded, so `${VAR}` in `ui:` or in an ignored MassGen-only
//!   backend key (e.g. an `mcp_servers` token) never fails a load.
//! - Typed fields (timeouts, counts, flags) also accept strings, because `${VAR}` yields text.
//!   Backend params are passed on exactly as written (after expansion).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use massgen_core::Secret;
use massgen_core::coordination::{OrchestratorOptions, Strictness, ToolLimits};
use massgen_providers::presets::{self, PRESETS, Preset, Wire};
use massgen_providers::retry::CallPolicy;
use massgen_tools::{AgentToolsConfig, McpServerConfig, McpTransport, SecretText};
use serde_json::{Map, Value};

use super::expand::{expand_value, join};
use super::{AgentConfig, BackendConfig, ConfigError, Env, PanelCatalog, PanelConfig, yaml};

/// Backend keys the server itself interprets; everything else may become a param.
const SERVER_KEYS: &[&str] = &["type", "model", "api_key", "base_url"];

/// MassGen backend keys that configure MassGen features, not the upstream request.
const MASSGEN_ONLY_KEYS: &[&str] = &[
    "enable_web_search",
    "enable_code_interpreter",
    "enable_code_execution",
    "enable_mcp_command_line",
    "command_line_execution_mode",
    "command_line_docker_image",
    "cwd",
    "disallowed_tools",
    "custom_tools",
    "context_paths",
    "agent_temporary_workspace",
    "enable_image_generation",
    "enable_audio_generation",
    "enable_video_generation",
    "enable_file_generation",
    "use_multimodal_tools",
    "permission_mode",
    "upload_files",
];

/// Request fields the server sets itself: a config value would break the protocol.
const REQUEST_OWNED_KEYS: &[&str] = &[
    "messages",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "n",
];

const AGENT_KEYS: &[&str] = &["id", "backend", "system_message"];

/// Backend keys of the agent's own tools (parsed into `AgentConfig::tools`).
const TOOL_KEYS: &[&str] = &[
    "mcp_servers",
    "allowed_tools",
    "exclude_tools",
    "max_tool_rounds",
    "tool_timeout_seconds",
    "tool_result_max_bytes",
];

const ORCHESTRATOR_KEYS: &[&str] = &[
    "voting_sensitivity",
    "answer_novelty_requirement",
    "max_new_answers_per_agent",
    "skip_coordination_rounds",
    "skip_final_presentation",
    "min_live_agents",
    "agent_turn_timeout_seconds",
    "presentation_timeout_seconds",
    "present_tool_calls",
];

/// MassGen `orchestrator:` keys for features we don't have: ignored with a warning, so real
/// MassGen configs load, while typos of the keys above still fail.
const ORCHESTRATOR_IGNORED_KEYS: &[&str] = &[
    "snapshot_storage",
    "agent_temporary_workspace",
    "session_storage",
    "context_paths",
    "coordination",
    "debug_final_answer",
    "enable_agent_context_sharing",
];

const TIMEOUT_KEYS: &[&str] = &[
    "orchestrator_timeout_seconds",
    "agent_turn_timeout_seconds",
    "presentation_timeout_seconds",
];

const RETRY_KEYS: &[&str] = &[
    "max_attempts",
    "initial_backoff_ms",
    "max_backoff_ms",
    "max_retry_after_seconds",
    "connect_timeout_seconds",
    "first_byte_timeout_seconds",
    "idle_timeout_seconds",
];

/// Reads and validates one panel file; its name is the file stem.
pub fn load_panel(path: &Path, env: &Env) -> Result<PanelConfig, ConfigError> {
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
    parse_panel(&name, path, &yaml, env)
}

/// Validates panel YAML that came from `source` (used in messages only).
pub fn parse_panel(
    name: &str,
    source: &Path,
    yaml: &str,
    env: &Env,
) -> Result<PanelConfig, ConfigError> {
    let cx = Cx {
        file: source.display().to_string(),
        env,
    };
    let root = yaml::parse(yaml).map_err(|problem| cx.err("", problem))?;
    let agents = cx.agents(&root)?;
    let orchestrator = cx.orchestrator(&root, agents.len())?;
    let call_policy = cx.retry(root.get("retry"))?;
    for key in root.keys() {
        if ![
            "agents",
            "agent",
            "orchestrator",
            "timeout_settings",
            "retry",
        ]
        .contains(&key.as_str())
        {
            tracing::debug!(file = %cx.file, section = %key, "config section not used by massgen serve");
        }
    }
    Ok(PanelConfig {
        name: name.to_string(),
        source: source.to_path_buf(),
        agents,
        orchestrator,
        call_policy,
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

/// Warns once per process about a config key that is accepted but has no effect.
fn warn_ignored_once(key: &str, why: &str) {
    static SEEN: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Mutex::default);
    let first = match seen.lock() {
        Ok(mut set) => set.insert(key.to_string()),
        Err(_) => true,
    };
    if first {
        tracing::warn!(key = %key, "config key ignored: {why}");
    }
}

fn known_list(keys: &[&str]) -> String {
    keys.join(", ")
}

/// One file's parsing context: turns problems into [`ConfigError`]s naming the file.
struct Cx<'a> {
    file: String,
    env: &'a Env,
}

impl Cx<'_> {
    fn err(&self, key: &str, problem: impl Into<String>) -> ConfigError {
        ConfigError::new(self.file.clone(), key, problem)
    }

    /// A copy of `value` with every `${…}` expanded.
    fn expanded(&self, value: &Value, key: &str) -> Result<Value, ConfigError> {
        let mut value = value.clone();
        expand_value(&mut value, key, self.env).map_err(|(at, e)| self.err(&at, e.to_string()))?;
        Ok(value)
    }

    /// A mapping section, `None` when absent or null.
    fn section<'v>(
        &self,
        value: Option<&'v Value>,
        key: &str,
    ) -> Result<Option<&'v Map<String, Value>>, ConfigError> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(_) => Err(self.err(key, "must be a mapping")),
        }
    }

    fn check_keys(
        &self,
        map: &Map<String, Value>,
        path: &str,
        known: &[&str],
        ignored: &[&str],
    ) -> Result<(), ConfigError> {
        for key in map.keys() {
            if ignored.contains(&key.as_str()) {
                warn_ignored_once(
                    &join(path, key),
                    "MassGen feature not supported by massgen serve",
                );
            } else if !known.contains(&key.as_str()) {
                return Err(self.err(
                    &join(path, key),
                    format!("unknown key (known: {})", known_list(known)),
                ));
            }
        }
        Ok(())
    }

    /// A string (numbers are accepted as their text), expanded; `None` when absent or null.
    fn string(&self, value: Option<&Value>, key: &str) -> Result<Option<String>, ConfigError> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(v @ Value::String(_)) => match self.expanded(v, key)? {
                Value::String(s) => Ok(Some(s)),
                _ => Err(self.err(key, "must be a string")),
            },
            Some(_) => Err(self.err(key, "must be a string")),
        }
    }

    fn number(&self, value: Option<&Value>, key: &str) -> Result<Option<f64>, ConfigError> {
        let bad = || self.err(key, "must be a number");
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n.as_f64().map(Some).ok_or_else(bad),
            Some(Value::String(_)) => {
                let text = self.string(value, key)?.unwrap_or_default();
                text.trim().parse::<f64>().map(Some).map_err(|_| bad())
            }
            Some(_) => Err(bad()),
        }
    }

    fn integer(&self, value: Option<&Value>, key: &str) -> Result<Option<i64>, ConfigError> {
        let bad = || self.err(key, "must be a whole number");
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(bad),
            Some(Value::String(_)) => {
                let text = self.string(value, key)?.unwrap_or_default();
                text.trim().parse::<i64>().map(Some).map_err(|_| bad())
            }
            Some(_) => Err(bad()),
        }
    }

    fn boolean(&self, value: Option<&Value>, key: &str) -> Result<Option<bool>, ConfigError> {
        let bad = || self.err(key, "must be true or false");
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(_)) => {
                let text = self.string(value, key)?.unwrap_or_default();
                match text.trim().to_ascii_lowercase().as_str() {
                    "true" => Ok(Some(true)),
                    "false" => Ok(Some(false)),
                    _ => Err(bad()),
                }
            }
            Some(_) => Err(bad()),
        }
    }

    /// A count in `min..=max`.
    fn count(
        &self,
        value: Option<&Value>,
        key: &str,
        min: i64,
        max: i64,
    ) -> Result<Option<i64>, ConfigError> {
        match self.integer(value, key)? {
            Some(n) if n < min || n > max => {
                Err(self.err(key, format!("must be between {min} and {max} (got {n})")))
            }
            other => Ok(other),
        }
    }

    /// Seconds (or, with `unit_ms`, milliseconds) as a duration; must be > 0 unless `allow_zero`.
    fn duration(
        &self,
        value: Option<&Value>,
        key: &str,
        unit_ms: bool,
        allow_zero: bool,
    ) -> Result<Option<Duration>, ConfigError> {
        let Some(n) = self.number(value, key)? else {
            return Ok(None);
        };
        let unit = if unit_ms { "milliseconds" } else { "seconds" };
        let ok = n.is_finite() && (n > 0.0 || (allow_zero && n == 0.0));
        let secs = if unit_ms { n / 1000.0 } else { n };
        match Duration::try_from_secs_f64(secs) {
            Ok(d) if ok => Ok(Some(d)),
            _ => Err(self.err(
                key,
                if allow_zero {
                    format!("must be zero or a positive number of {unit} (got {n})")
                } else {
                    format!("must be a positive number of {unit} (got {n})")
                },
            )),
        }
    }

    fn strictness(
        &self,
        value: Option<&Value>,
        key: &str,
    ) -> Result<Option<Strictness>, ConfigError> {
        let Some(text) = self.string(value, key)? else {
            return Ok(None);
        };
        match text.trim().to_ascii_lowercase().as_str() {
            "lenient" => Ok(Some(Strictness::Lenient)),
            "balanced" => Ok(Some(Strictness::Balanced)),
            "strict" => Ok(Some(Strictness::Strict)),
            _ => Err(self.err(
                key,
                format!("unknown value '{text}' (known: lenient, balanced, strict)"),
            )),
        }
    }

    fn agents(&self, root: &Map<String, Value>) -> Result<Vec<AgentConfig>, ConfigError> {
        let entries: Vec<(String, &Value)> = match (root.get("agents"), root.get("agent")) {
            (Some(_), Some(_)) => {
                return Err(self.err("agent", "use either `agent:` or `agents:`, not both"));
            }
            (None | Some(Value::Null), None) | (None, Some(Value::Null)) => vec![],
            (Some(Value::Array(list)), None) => list
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("agents[{i}]"), v))
                .collect(),
            (Some(_), None) => return Err(self.err("agents", "must be a list of agents")),
            (None, Some(single)) => vec![("agent".to_string(), single)],
        };
        if entries.is_empty() {
            return Err(self.err(
                "agents",
                "no agents: add an `agents:` list (or a single `agent:` mapping)",
            ));
        }
        let mut agents: Vec<AgentConfig> = Vec::with_capacity(entries.len());
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for (i, (path, entry)) in entries.into_iter().enumerate() {
            let agent = self.agent(&path, entry, i + 1)?;
            if let Some(first) = seen.insert(agent.id.clone(), path.clone()) {
                return Err(self.err(
                    &join(&path, "id"),
                    format!("duplicate agent id '{}' (also used by {first})", agent.id),
                ));
            }
            agents.push(agent);
        }
        Ok(agents)
    }

    fn agent(
        &self,
        path: &str,
        entry: &Value,
        position: usize,
    ) -> Result<AgentConfig, ConfigError> {
        let Value::Object(map) = entry else {
            return Err(self.err(path, "must be a mapping (id, backend, system_message)"));
        };
        for key in map.keys() {
            if !AGENT_KEYS.contains(&key.as_str()) {
                warn_ignored_once(&join(path, key), "agent key not used by massgen serve");
            }
        }
        let id_key = join(path, "id");
        let id = match self.string(map.get("id"), &id_key)? {
            None => format!("agent{position}"),
            Some(id) if id.trim().is_empty() => return Err(self.err(&id_key, "empty agent id")),
            Some(id) => id.trim().to_string(),
        };
        let system_message =
            self.string(map.get("system_message"), &join(path, "system_message"))?;
        let backend_key = join(path, "backend");
        let (backend, tools) = match self.section(map.get("backend"), &backend_key)? {
            Some(backend) => (
                self.backend(&backend_key, backend)?,
                self.agent_tools(&backend_key, backend)?,
            ),
            None => {
                return Err(self.err(
                    &backend_key,
                    "missing backend (a mapping with type and model)",
                ));
            }
        };
        Ok(AgentConfig {
            id,
            system_message,
            backend,
            tools,
        })
    }

    fn backend(&self, path: &str, map: &Map<String, Value>) -> Result<BackendConfig, ConfigError> {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        let type_key = join(path, "type");
        let preset: &Preset = match self.string(map.get("type"), &type_key)? {
            None => {
                return Err(self.err(
                    &type_key,
                    format!("missing backend type (known: {})", names.join(", ")),
                ));
            }
            Some(t) => presets::find(t.trim()).ok_or_else(|| {
                self.err(
                    &type_key,
                    format!("unknown backend type '{t}' (known: {})", names.join(", ")),
                )
            })?,
        };
        let model_key = join(path, "model");
        let model = match self.string(map.get("model"), &model_key)? {
            Some(m) if !m.trim().is_empty() => m.trim().to_string(),
            _ => return Err(self.err(&model_key, "missing model")),
        };
        let base_url_key = join(path, "base_url");
        let from_env = || {
            preset.base_url_vars.iter().find_map(|(var, path)| {
                let url = (self.env)(var).filter(|v| !v.trim().is_empty())?;
                Some(format!("{}{path}", url.trim().trim_end_matches('/')))
            })
        };
        let base_url = match self.string(map.get("base_url"), &base_url_key)? {
            Some(url) if !url.trim().is_empty() => url.trim().to_string(),
            _ => match from_env().or(preset.default_base_url.map(str::to_string)) {
                Some(url) => url.trim().to_string(),
                None => {
                    let vars: Vec<&str> = preset.base_url_vars.iter().map(|(v, _)| *v).collect();
                    let vars = vars.join(" or ");
                    let hint = if vars.is_empty() {
                        String::new()
                    } else {
                        format!(" (or set {vars})")
                    };
                    return Err(self.err(
                        &base_url_key,
                        format!(
                            "base_url is required for backend type '{}'{hint}",
                            preset.name
                        ),
                    ));
                }
            },
        };
        if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
            return Err(self.err(&base_url_key, "must start with http:// or https://"));
        }
        let base_url = base_url.trim_end_matches('/').to_string();
        let api_key = self.api_key(path, map, preset)?;
        let azure = preset.wire == Wire::AzureChatCompletions;
        let api_version = if azure {
            let key = join(path, "api_version");
            let configured = self
                .string(map.get("api_version"), &key)?
                .filter(|v| !v.trim().is_empty())
                .or_else(|| {
                    (self.env)("AZURE_OPENAI_API_VERSION").filter(|v| !v.trim().is_empty())
                });
            Some(
                configured
                    .map(|v| v.trim().to_string())
                    .unwrap_or_else(|| presets::AZURE_DEFAULT_API_VERSION.to_string()),
            )
        } else {
            None
        };
        let mut params = Map::new();
        for (key, value) in map {
            let key_path = join(path, key);
            if SERVER_KEYS.contains(&key.as_str())
                || TOOL_KEYS.contains(&key.as_str())
                || (azure && key == "api_version")
            {
                continue;
            } else if MASSGEN_ONLY_KEYS.contains(&key.as_str()) {
                warn_ignored_once(&key_path, "MassGen-only backend feature, ignored for now");
            } else if REQUEST_OWNED_KEYS.contains(&key.as_str()) {
                warn_ignored_once(&key_path, "set by massgen itself for every request");
            } else {
                params.insert(key.clone(), self.expanded(value, &key_path)?);
            }
        }
        Ok(BackendConfig {
            backend_type: preset.name.to_string(),
            model,
            api_key,
            base_url,
            params,
            api_version,
        })
    }

    /// `backend.api_key` (after expansion; empty counts as absent), else the preset's key
    /// variables in order.
    fn api_key(
        &self,
        path: &str,
        map: &Map<String, Value>,
        preset: &Preset,
    ) -> Result<Option<Secret>, ConfigError> {
        let from_config = self
            .string(map.get("api_key"), &join(path, "api_key"))?
            .filter(|k| !k.trim().is_empty());
        let key = from_config.or_else(|| {
            preset
                .key_vars
                .iter()
                .find_map(|var| (self.env)(var).filter(|v| !v.trim().is_empty()))
        });
        match key {
            Some(key) => Ok(Some(Secret::new(key.trim()))),
            None if preset.key_required => {
                let vars = preset.key_vars.join(" or ");
                Err(self.err(
                    path,
                    format!("no API key: set {vars} (environment or .env) or backend.api_key"),
                ))
            }
            None => Ok(None),
        }
    }

    fn orchestrator(
        &self,
        root: &Map<String, Value>,
        agent_count: usize,
    ) -> Result<OrchestratorOptions, ConfigError> {
        let mut options = OrchestratorOptions::default();
        let empty = Map::new();
        let orch = self
            .section(root.get("orchestrator"), "orchestrator")?
            .unwrap_or(&empty);
        let timeouts = self
            .section(root.get("timeout_settings"), "timeout_settings")?
            .unwrap_or(&empty);
        self.check_keys(
            orch,
            "orchestrator",
            ORCHESTRATOR_KEYS,
            ORCHESTRATOR_IGNORED_KEYS,
        )?;
        self.check_keys(timeouts, "timeout_settings", TIMEOUT_KEYS, &[])?;

        let key = |k: &str| join("orchestrator", k);
        if let Some(s) =
            self.strictness(orch.get("voting_sensitivity"), &key("voting_sensitivity"))?
        {
            options.voting_sensitivity = s;
        }
        let novelty = "answer_novelty_requirement";
        if let Some(s) = self.strictness(orch.get(novelty), &key(novelty))? {
            options.answer_novelty_requirement = s;
        }
        let cap = "max_new_answers_per_agent";
        options.max_new_answers_per_agent = self
            .count(orch.get(cap), &key(cap), 1, i64::from(u32::MAX))?
            .and_then(|n| u32::try_from(n).ok());
        if let Some(b) = self.boolean(
            orch.get("skip_coordination_rounds"),
            &key("skip_coordination_rounds"),
        )? {
            options.skip_coordination_rounds = b;
        }
        if let Some(b) = self.boolean(
            orch.get("skip_final_presentation"),
            &key("skip_final_presentation"),
        )? {
            options.skip_final_presentation = b;
        }
        if let Some(b) = self.boolean(orch.get("present_tool_calls"), &key("present_tool_calls"))? {
            options.present_tool_calls = b;
        }
        let max_live = i64::try_from(agent_count).unwrap_or(i64::MAX);
        let min_live_key = key("min_live_agents");
        if let Some(n) = self.integer(orch.get("min_live_agents"), &min_live_key)? {
            if n < 1 || n > max_live {
                return Err(self.err(
                    &min_live_key,
                    format!("must be between 1 and the number of agents ({agent_count}), got {n}"),
                ));
            }
            options.min_live_agents = usize::try_from(n).unwrap_or(1);
        }

        let session = "orchestrator_timeout_seconds";
        if let Some(d) = self.duration(
            timeouts.get(session),
            &join("timeout_settings", session),
            false,
            false,
        )? {
            options.session_timeout = d;
        }
        if let Some(d) = self.timeout_either(orch, timeouts, "agent_turn_timeout_seconds")? {
            options.agent_turn_timeout = d;
        }
        if let Some(d) = self.timeout_either(orch, timeouts, "presentation_timeout_seconds")? {
            options.presentation_timeout = d;
        }
        Ok(options)
    }

    /// A timeout that may be under `orchestrator:` or `timeout_settings:`; both with different
    /// values is an error rather than a silent pick.
    fn timeout_either(
        &self,
        orch: &Map<String, Value>,
        timeouts: &Map<String, Value>,
        name: &str,
    ) -> Result<Option<Duration>, ConfigError> {
        let in_orch = self.duration(orch.get(name), &join("orchestrator", name), false, false)?;
        let ts_key = join("timeout_settings", name);
        let in_ts = self.duration(timeouts.get(name), &ts_key, false, false)?;
        match (in_orch, in_ts) {
            (Some(a), Some(b)) if a != b => Err(self.err(
                &ts_key,
                format!("conflicts with orchestrator.{name}; give it in one place"),
            )),
            (a, b) => Ok(a.or(b)),
        }
    }

    fn retry(&self, value: Option<&Value>) -> Result<CallPolicy, ConfigError> {
        let mut policy = CallPolicy::default();
        let Some(map) = self.section(value, "retry")? else {
            return Ok(policy);
        };
        self.check_keys(map, "retry", RETRY_KEYS, &[])?;
        let key = |k: &str| join("retry", k);
        if let Some(n) = self.count(map.get("max_attempts"), &key("max_attempts"), 1, 100)? {
            policy.max_attempts = u32::try_from(n).unwrap_or(1);
        }
        let ms = |k: &str, allow_zero| self.duration(map.get(k), &key(k), true, allow_zero);
        let secs = |k: &str, allow_zero| self.duration(map.get(k), &key(k), false, allow_zero);
        if let Some(d) = ms("initial_backoff_ms", true)? {
            policy.initial_backoff = d;
        }
        if let Some(d) = ms("max_backoff_ms", true)? {
            policy.max_backoff = d;
        }
        if let Some(d) = secs("max_retry_after_seconds", true)? {
            policy.max_retry_after = d;
        }
        if let Some(d) = secs("connect_timeout_seconds", false)? {
            policy.connect_timeout = d;
        }
        if let Some(d) = secs("first_byte_timeout_seconds", false)? {
            policy.first_byte_timeout = d;
        }
        if let Some(d) = secs("idle_timeout_seconds", false)? {
            policy.idle_timeout = d;
        }
        if policy.max_backoff < policy.initial_backoff {
            return Err(self.err(
                &key("max_backoff_ms"),
                "must not be less than initial_backoff_ms",
            ));
        }
        Ok(policy)
    }
}

impl Cx<'_> {
    /// `mcp_servers` (a mapping of name → server, or a list of servers with `name`),
    /// `allowed_tools`, `exclude_tools` and the tool-loop limits of one backend section.
    fn agent_tools(
        &self,
        path: &str,
        map: &Map<String, Value>,
    ) -> Result<Option<AgentToolsConfig>, ConfigError> {
        if !TOOL_KEYS
            .iter()
            .any(|k| map.get(*k).is_some_and(|v| !v.is_null()))
        {
            return Ok(None);
        }
        let key = |k: &str| join(path, k);
        let servers = match map.get("mcp_servers") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => {
                let k = key("mcp_servers");
                self.mcp_servers(&k, &self.expanded(v, &k)?)?
            }
        };
        let mut limits = ToolLimits::default();
        if let Some(n) = self.count(map.get("max_tool_rounds"), &key("max_tool_rounds"), 0, 1000)? {
            limits.max_rounds = u32::try_from(n).unwrap_or(0);
        }
        if let Some(d) = self.duration(
            map.get("tool_timeout_seconds"),
            &key("tool_timeout_seconds"),
            false,
            false,
        )? {
            limits.call_timeout = d;
        }
        if let Some(n) = self.count(
            map.get("tool_result_max_bytes"),
            &key("tool_result_max_bytes"),
            256,
            i64::from(u32::MAX),
        )? {
            limits.max_result_bytes = usize::try_from(n).unwrap_or(usize::MAX);
        }
        Ok(Some(AgentToolsConfig {
            servers,
            allowed: self.string_list(map.get("allowed_tools"), &key("allowed_tools"))?,
            exclude: self
                .string_list(map.get("exclude_tools"), &key("exclude_tools"))?
                .unwrap_or_default(),
            limits,
        }))
    }

    fn string_list(
        &self,
        value: Option<&Value>,
        key: &str,
    ) -> Result<Option<Vec<String>>, ConfigError> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let k = format!("{key}[{i}]");
                    self.string(Some(v), &k)?
                        .ok_or_else(|| self.err(&k, "must be a string"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(self.err(key, "must be a list of strings")),
        }
    }

    fn mcp_servers(&self, key: &str, value: &Value) -> Result<Vec<McpServerConfig>, ConfigError> {
        let entries: Vec<(String, String, &Map<String, Value>)> = match value {
            Value::Object(servers) => servers
                .iter()
                .map(|(name, spec)| match spec {
                    Value::Object(spec) => Ok((join(key, name), name.clone(), spec)),
                    _ => Err(self.err(&join(key, name), "must be a mapping")),
                })
                .collect::<Result<_, _>>()?,
            Value::Array(list) => list
                .iter()
                .enumerate()
                .map(|(i, spec)| {
                    let at = format!("{key}[{i}]");
                    let Value::Object(spec) = spec else {
                        return Err(self.err(&at, "must be a mapping"));
                    };
                    match spec.get("name").and_then(Value::as_str) {
                        Some(name) => Ok((at, name.to_string(), spec)),
                        None => Err(self.err(&join(&at, "name"), "missing server name")),
                    }
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(self.err(key, "must be a mapping of server name to server")),
        };
        let mut servers: Vec<McpServerConfig> = Vec::new();
        for (at, name, spec) in entries {
            let valid = !name.is_empty()
                && !name.contains("__")
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid {
                return Err(self.err(
                    &at,
                    format!(
                        "server name '{name}' must use letters, digits, '-' and single '_' only"
                    ),
                ));
            }
            if servers.iter().any(|s| s.name == name) {
                return Err(self.err(&at, format!("duplicate server name '{name}'")));
            }
            servers.push(McpServerConfig {
                name,
                transport: self.mcp_transport(&at, spec)?,
            });
        }
        Ok(servers)
    }

    fn mcp_transport(
        &self,
        at: &str,
        spec: &Map<String, Value>,
    ) -> Result<McpTransport, ConfigError> {
        let text = |k: &str| match spec.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(_) => Err(self.err(&join(at, k), "must be a string")),
        };
        let pairs = |k: &str| -> Result<BTreeMap<String, SecretText>, ConfigError> {
            match spec.get(k) {
                None | Some(Value::Null) => Ok(BTreeMap::new()),
                Some(Value::Object(m)) => m
                    .iter()
                    .map(|(name, v)| match v {
                        Value::String(s) => Ok((name.clone(), SecretText::new(s.clone()))),
                        Value::Number(n) => Ok((name.clone(), SecretText::new(n.to_string()))),
                        _ => Err(self.err(&join(&join(at, k), name), "must be a string")),
                    })
                    .collect(),
                Some(_) => Err(self.err(&join(at, k), "must be a mapping")),
            }
        };
        let kind = text("type")?.unwrap_or_else(|| {
            if spec.contains_key("url") {
                "streamable-http".into()
            } else {
                "stdio".into()
            }
        });
        match kind.as_str() {
            "stdio" => {
                let command = text("command")?
                    .filter(|c| !c.trim().is_empty())
                    .ok_or_else(|| self.err(&join(at, "command"), "missing command"))?;
                let args = match spec.get("args") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(items)) => items
                        .iter()
                        .enumerate()
                        .map(|(i, v)| match v {
                            Value::String(s) => Ok(s.clone()),
                            Value::Number(n) => Ok(n.to_string()),
                            _ => {
                                Err(self
                                    .err(&format!("{}[{i}]", join(at, "args")), "must be a string"))
                            }
                        })
                        .collect::<Result<_, _>>()?,
                    Some(_) => return Err(self.err(&join(at, "args"), "must be a list")),
                };
                Ok(McpTransport::Stdio {
                    command,
                    args,
                    env: pairs("env")?,
                    cwd: text("cwd")?,
                })
            }
            "streamable-http" | "http" => {
                let url = text("url")?.ok_or_else(|| self.err(&join(at, "url"), "missing url"))?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(self.err(&join(at, "url"), "must start with http:// or https://"));
                }
                Ok(McpTransport::StreamableHttp {
                    url,
                    headers: pairs("headers")?,
                })
            }
            other => Err(self.err(
                &join(at, "type"),
                format!("unknown MCP transport '{other}' (known: stdio, streamable-http)"),
            )),
        }
    }
}
