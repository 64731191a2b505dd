//! MCP tools that agents use themselves inside their turns.
//!
//! - [`McpClient`] is the project's own seam over one connected MCP server; [`rmcp_client`]
//!   implements it with the official Rust SDK (`rmcp`) for stdio and streamable HTTP.
//! - [`ToolRegistry`] owns the servers of the process: each distinct server config is
//!   started once (at start-up or first use), shared by every session, reconnected when
//!   it died, and stopped at shutdown.
//! - [`Toolbox`] is one agent's view: its servers' tools named `mcp__{server}__{tool}`,
//!   filtered by `allowed_tools` / `exclude_tools`, behind the engine's
//!   [`AgentTools`](massgen_core::coordination::AgentTools) trait.

pub mod config;
mod registry;
pub mod rmcp_client;

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value};

pub use config::{AgentToolsConfig, McpServerConfig, McpTransport, SecretText};
use massgen_core::coordination::AgentTools;
pub use registry::{ToolRegistry, Toolbox};

use crate::config::AgentConfig;

/// A tool as an MCP server lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteTool {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
}

/// Why a server could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpError {
    /// The connection is gone (process exited, HTTP session lost): reconnecting may help.
    Disconnected(String),
    /// Anything else (protocol error, server-side failure of the request).
    Failed(String),
}

impl fmt::Display for McpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Disconnected(m) => write!(f, "MCP server disconnected: {m}"),
            Self::Failed(m) => write!(f, "{m}"),
        }
    }
}

/// A tool's result: its text, and whether the tool reported an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub text: String,
    pub is_error: bool,
}

/// One live connection to an MCP server.
pub trait McpClient: Send + Sync + fmt::Debug {
    fn list_tools(&self) -> BoxFuture<'_, Result<Vec<RemoteTool>, McpError>>;
    fn call_tool(
        &self,
        name: String,
        arguments: Map<String, Value>,
    ) -> BoxFuture<'_, Result<ToolOutput, McpError>>;
    /// The connection is known to be gone.
    fn is_closed(&self) -> bool;
    /// Stops the server (child process) or ends the HTTP session.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

/// Connects to a server described by a config (the seam tests replace).
pub trait McpConnector: Send + Sync + fmt::Debug {
    fn connect(
        &self,
        server: &McpServerConfig,
    ) -> BoxFuture<'static, Result<Arc<dyn McpClient>, McpError>>;
}

/// The agent's own tools for a session, from the process-wide registry; `None` when the
/// agent has no `mcp_servers`.
pub fn agent_tools(agent: &AgentConfig) -> Option<Arc<dyn AgentTools>> {
    let config = agent.tools.as_ref()?;
    if config.servers.is_empty() {
        return None;
    }
    Some(Arc::new(ToolRegistry::global().toolbox(config)))
}

/// Every distinct MCP server named by the panels of `catalog`.
pub fn servers_of(catalog: &crate::config::PanelCatalog) -> Vec<McpServerConfig> {
    let mut servers: Vec<McpServerConfig> = catalog
        .default
        .iter()
        .chain(catalog.named.values())
        .flat_map(|panel| panel.agents.iter())
        .filter_map(|agent| agent.tools.as_ref())
        .flat_map(|tools| tools.servers.iter().cloned())
        .collect();
    servers.sort();
    servers.dedup();
    servers
}
