//! MCP tools that agents use themselves inside their turns.
//!
//! Knows MCP and the engine's tool seam, not the server's config: which agent gets which
//! servers is decided by the application (`massgen::app`).
//!
//! - [`McpClient`] is the project's own seam over one connected MCP server; [`rmcp_client`]
//!   implements it with the official Rust SDK (`rmcp`) for stdio and streamable HTTP.
//! - [`ToolRegistry`] owns the servers of the process: each distinct server config is
//!   started once (at start-up or first use), shared by every session, reconnected when
//!   it died, and stopped at shutdown. The application creates one and holds it in its
//!   state.
//! - [`Toolbox`] is one agent's view: its servers' tools named `mcp__{server}__{tool}`,
//!   filtered by `allowed_tools` / `exclude_tools`, each marked read-only or not (the
//!   config's `read_only_tools`, else the server's `readOnlyHint`), behind the engine's
//!   [`AgentTools`](massgen_core::coordination::AgentTools) trait.

pub mod config;
mod registry;
pub mod rmcp_client;

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value};

pub use config::{AgentToolsConfig, McpServerConfig, McpTransport, SecretText};
pub use registry::{ToolRegistry, Toolbox};

/// A tool as an MCP server lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteTool {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
    /// The server's `readOnlyHint` annotation (`None`: not given).
    pub read_only_hint: Option<bool>,
}

/// Why a server could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// The connection is gone (process exited, HTTP session lost): reconnecting may help.
    #[error("MCP server disconnected: {0}")]
    Disconnected(String),
    /// Anything else (protocol error, server-side failure of the request).
    #[error("{0}")]
    Failed(String),
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
