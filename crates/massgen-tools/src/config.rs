//! The `mcp_servers`, `allowed_tools`, `exclude_tools` and tool-loop keys of an agent's
//! `backend:` section, after validation (parsed in `config/load.rs`).

use std::collections::BTreeMap;

use massgen_core::Secret;
use massgen_core::coordination::ToolLimits;

/// How to reach one MCP server. Only a config file can name these: nothing in a request
/// can start a process or reach a new URL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum McpTransport {
    /// A child process speaking MCP over stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Added to the server's environment (values may be secrets: never printed).
        env: BTreeMap<String, SecretText>,
        cwd: Option<String>,
    },
    /// MCP over streamable HTTP.
    StreamableHttp {
        url: String,
        headers: BTreeMap<String, SecretText>,
    },
}

/// A config string that may hold a secret (`Authorization: Bearer …`, an API key):
/// comparable and hashable so equal server configs share one server, never printed.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SecretText(String);

impl SecretText {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&Secret::new(""), f)
    }
}

/// One named server of an agent's `mcp_servers`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct McpServerConfig {
    /// The `{server}` of `mcp__{server}__{tool}`.
    pub name: String,
    pub transport: McpTransport,
}

/// An agent's own tools.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentToolsConfig {
    pub servers: Vec<McpServerConfig>,
    /// `allowed_tools`: when set, only these full names (`mcp__search__query`) are offered.
    pub allowed: Option<Vec<String>>,
    /// `exclude_tools`: full names never offered.
    pub exclude: Vec<String>,
    /// A server's `read_only_tools` (server name → its own tool names): exactly these of
    /// its tools are read-only, whatever their `readOnlyHint` says. Kept apart from
    /// [`McpServerConfig`] so agents that differ only in this list share one server.
    pub read_only: BTreeMap<String, Vec<String>>,
    pub limits: ToolLimits,
}
