//! The agent's own tools in its `backend:` section: `mcp_servers` (a mapping of name →
//! server, or a list of servers with `name`), `allowed_tools`, `exclude_tools` and the
//! tool-loop limits.
//!
//! A server's `read_only_tools` lists its tools (as the server names them) that only read,
//! overriding the server's `readOnlyHint` annotations: under
//! `orchestrator.coordination.enable_planning_mode` only those are offered during
//! coordination.
//!
//! `${VAR}` is expanded per server: an unset variable makes only that server unavailable
//! (logged), as MassGen's MCP client does, so the panel still runs without it.

use std::collections::BTreeMap;

use massgen_core::coordination::ToolLimits;
use massgen_tools::{AgentToolsConfig, McpServerConfig, McpTransport, SecretText};
use serde_json::{Map, Value};

use super::ConfigError;
use super::expand::{ExpandError, expand_value, join};
use super::read::Cx;

/// Server name → its `read_only_tools`.
type ReadOnlyLists = BTreeMap<String, Vec<String>>;

/// Backend keys of the agent's own tools (parsed into `AgentConfig::tools`).
pub(super) const TOOL_KEYS: &[&str] = &[
    "mcp_servers",
    "allowed_tools",
    "exclude_tools",
    "max_tool_rounds",
    "tool_timeout_seconds",
    "tool_result_max_bytes",
];

impl Cx<'_> {
    /// `mcp_servers` (a mapping of name → server, or a list of servers with `name`),
    /// `allowed_tools`, `exclude_tools` and the tool-loop limits of one backend section.
    pub(super) fn agent_tools(
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
        let (servers, read_only) = match map.get("mcp_servers") {
            None | Some(Value::Null) => (Vec::new(), BTreeMap::new()),
            Some(v) => {
                let k = key("mcp_servers");
                self.mcp_servers(&k, v)?
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
            read_only,
            limits,
        }))
    }

    /// The servers, and each one's `read_only_tools` where given.
    fn mcp_servers(
        &self,
        key: &str,
        value: &Value,
    ) -> Result<(Vec<McpServerConfig>, ReadOnlyLists), ConfigError> {
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
        let mut read_only = ReadOnlyLists::new();
        let mut names: Vec<String> = Vec::new();
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
            if names.contains(&name) {
                return Err(self.err(&at, format!("duplicate server name '{name}'")));
            }
            names.push(name.clone());
            let mut spec = Value::Object(spec.clone());
            match expand_value(&mut spec, &at, self.env) {
                Ok(()) => {}
                Err((_, ExpandError::Unset(var))) => {
                    self.warn(
                        &at,
                        format!(
                            "MCP server '{name}' unavailable: environment variable {var} is not set"
                        ),
                    );
                    continue;
                }
                Err((path, error)) => return Err(self.err(&path, error.to_string())),
            }
            let Value::Object(spec) = spec else {
                continue;
            };
            let transport = self.mcp_transport(&at, &spec)?;
            let listed = join(&at, "read_only_tools");
            if let Some(tools) = self.string_list(spec.get("read_only_tools"), &listed)? {
                read_only.insert(name.clone(), tools);
            }
            servers.push(McpServerConfig { name, transport });
        }
        Ok((servers, read_only))
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
