//! The process's MCP servers and each agent's filtered view of their tools.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::{BoxFuture, join_all};
use massgen_core::coordination::{AgentTools, OwnTool, ToolLimits};
use massgen_core::provider::ToolSpec;
use massgen_core::tool_names::MCP_PREFIX;
use serde_json::{Map, Value};

use super::{
    AgentToolsConfig, McpClient, McpConnector, McpError, McpServerConfig, RemoteTool, ToolOutput,
};

/// Every MCP server of the process, one per distinct server config.
#[derive(Debug)]
pub struct ToolRegistry {
    connector: Arc<dyn McpConnector>,
    servers: Mutex<HashMap<McpServerConfig, Arc<ServerHandle>>>,
}

impl ToolRegistry {
    pub fn new(connector: Arc<dyn McpConnector>) -> Self {
        Self {
            connector,
            servers: Mutex::default(),
        }
    }

    /// The shared handle of `server` (created, not yet started, on first request).
    pub fn server(&self, server: &McpServerConfig) -> Arc<ServerHandle> {
        let mut servers = match self.servers.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        servers
            .entry(server.clone())
            .or_insert_with(|| {
                Arc::new(ServerHandle {
                    config: server.clone(),
                    connector: self.connector.clone(),
                    client: tokio::sync::Mutex::new(None),
                    starts: AtomicU32::new(0),
                })
            })
            .clone()
    }

    /// One agent's tools for one session.
    pub fn toolbox(&self, config: &AgentToolsConfig) -> Toolbox {
        Toolbox {
            servers: config.servers.iter().map(|s| self.server(s)).collect(),
            config: config.clone(),
            routes: Arc::default(),
        }
    }

    /// Starts every given server now (start-up), logging the ones that fail; they are
    /// tried again on first use.
    pub async fn start_all(&self, servers: impl IntoIterator<Item = McpServerConfig>) {
        let handles: Vec<Arc<ServerHandle>> =
            servers.into_iter().map(|s| self.server(&s)).collect();
        join_all(handles.iter().map(|h| async move {
            if let Err(e) = h.client().await {
                tracing::warn!(server = %h.config.name, error = %e, "MCP server did not start; will retry on first use");
            }
        }))
        .await;
    }

    /// Stops every running server (shutdown).
    pub async fn shutdown(&self) {
        let handles: Vec<Arc<ServerHandle>> = match self.servers.lock() {
            Ok(mut s) => s.drain().map(|(_, h)| h).collect(),
            Err(poisoned) => poisoned.into_inner().drain().map(|(_, h)| h).collect(),
        };
        join_all(handles.iter().map(|h| h.stop())).await;
    }
}

/// One MCP server, connected lazily and reconnected when its connection died.
#[derive(Debug)]
pub struct ServerHandle {
    config: McpServerConfig,
    connector: Arc<dyn McpConnector>,
    /// Held while connecting, so concurrent first uses start one server, not several.
    client: tokio::sync::Mutex<Option<Arc<dyn McpClient>>>,
    starts: AtomicU32,
}

impl ServerHandle {
    /// How many times the server was started (1 + restarts).
    pub fn starts(&self) -> u32 {
        self.starts.load(Ordering::SeqCst)
    }

    async fn client(&self) -> Result<Arc<dyn McpClient>, McpError> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            if !client.is_closed() {
                return Ok(client.clone());
            }
            tracing::warn!(server = %self.config.name, "MCP server connection is gone; restarting it");
            client.shutdown().await;
            *slot = None;
        }
        let client = self.connector.connect(&self.config).await?;
        self.starts.fetch_add(1, Ordering::SeqCst);
        tracing::info!(server = %self.config.name, "MCP server started");
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Forgets `dead` (if it is still the current client) so the next use reconnects.
    async fn drop_client(&self, dead: &Arc<dyn McpClient>) {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, dead)) {
            dead.shutdown().await;
            *slot = None;
        }
    }

    /// Runs `op` on the client; a disconnection restarts the server and tries once more
    /// (for requests without effects, such as listing tools).
    async fn with_client<T>(
        &self,
        op: impl Fn(Arc<dyn McpClient>) -> BoxFuture<'static, Result<T, McpError>>,
    ) -> Result<T, McpError> {
        let client = self.client().await?;
        match op(client.clone()).await {
            Err(McpError::Disconnected(why)) => {
                tracing::warn!(server = %self.config.name, error = %why, "MCP server disconnected; restarting it");
                self.drop_client(&client).await;
                op(self.client().await?).await
            }
            other => other,
        }
    }

    pub async fn list_tools(&self) -> Result<Vec<RemoteTool>, McpError> {
        self.with_client(|c| Box::pin(async move { c.list_tools().await }))
            .await
    }

    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<ToolOutput, McpError> {
        // Not retried: the call may have had effects (or killed the server) already.
        let client = self.client().await?;
        let result = client.call_tool(name.to_string(), arguments).await;
        if matches!(result, Err(McpError::Disconnected(_))) || client.is_closed() {
            self.drop_client(&client).await;
        }
        result
    }

    async fn stop(&self) {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.take() {
            client.shutdown().await;
        }
    }
}

/// One agent's MCP tools for one session.
#[derive(Debug, Clone)]
pub struct Toolbox {
    servers: Vec<Arc<ServerHandle>>,
    config: AgentToolsConfig,
    /// Offered name → (server index, the server's own tool name), filled by `discover`.
    routes: Arc<Mutex<HashMap<String, (usize, String)>>>,
}

/// `mcp__{server}__{tool}` with characters OpenAI does not accept in function names
/// replaced by `_`; `None` when the result is longer than the 64 characters allowed.
pub fn offered_name(server: &str, tool: &str) -> Option<String> {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = format!("{MCP_PREFIX}{server}__{clean}");
    (name.len() <= 64).then_some(name)
}

impl Toolbox {
    fn allowed(&self, name: &str) -> bool {
        let listed = self
            .config
            .allowed
            .as_ref()
            .is_none_or(|allowed| allowed.iter().any(|a| a == name));
        listed && !self.config.exclude.iter().any(|e| e == name)
    }

    /// Whether `tool` of `server` only reads: the config's `read_only_tools` for that
    /// server when given (either way), else the server's `readOnlyHint`.
    fn read_only(&self, server: &str, tool: &RemoteTool) -> bool {
        match self.config.read_only.get(server) {
            Some(listed) => listed.contains(&tool.name),
            None => tool.read_only_hint == Some(true),
        }
    }

    /// The filtered tools of every server that answers.
    pub async fn specs(&self) -> Vec<ToolSpec> {
        self.tools().await.into_iter().map(|t| t.spec).collect()
    }

    /// The filtered tools of every server that answers, each marked read-only or not; a
    /// failing server is logged and left out of this session.
    pub async fn tools(&self) -> Vec<OwnTool> {
        let lists = join_all(self.servers.iter().map(|s| s.list_tools())).await;
        let mut specs = Vec::new();
        let mut routes = HashMap::new();
        for (index, (server, list)) in self.servers.iter().zip(lists).enumerate() {
            let tools = match list {
                Ok(tools) => tools,
                Err(e) => {
                    tracing::warn!(server = %server.config.name, error = %e, "MCP server unavailable; its tools are not offered");
                    continue;
                }
            };
            for tool in tools {
                let Some(name) = offered_name(&server.config.name, &tool.name) else {
                    tracing::warn!(server = %server.config.name, tool = %tool.name, "MCP tool skipped: name longer than 64 characters");
                    continue;
                };
                if !self.allowed(&name) || routes.contains_key(&name) {
                    continue;
                }
                routes.insert(name.clone(), (index, tool.name.clone()));
                let read_only = self.read_only(&server.config.name, &tool);
                specs.push(OwnTool {
                    spec: ToolSpec {
                        name,
                        description: tool.description,
                        parameters: tool.input_schema,
                    },
                    read_only,
                });
            }
        }
        if let Ok(mut r) = self.routes.lock() {
            *r = routes;
        }
        specs
    }

    pub async fn call(&self, name: &str, arguments: &str) -> Result<String, String> {
        let route = self.routes.lock().ok().and_then(|r| r.get(name).cloned());
        let Some((index, tool)) = route else {
            return Err(format!("unknown tool `{name}`"));
        };
        let arguments = match arguments.trim() {
            "" => Map::new(),
            text => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(map)) => map,
                _ => return Err("the arguments must be a JSON object".to_string()),
            },
        };
        let server = &self.servers[index];
        match server.call_tool(&tool, arguments).await {
            Ok(out) if out.is_error => Err(out.text),
            Ok(out) => Ok(out.text),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl AgentTools for Toolbox {
    fn discover(&self) -> BoxFuture<'static, Vec<OwnTool>> {
        let this = self.clone();
        Box::pin(async move { this.tools().await })
    }

    fn call(&self, name: String, arguments: String) -> BoxFuture<'static, Result<String, String>> {
        let this = self.clone();
        Box::pin(async move { Toolbox::call(&this, &name, &arguments).await })
    }

    fn limits(&self) -> ToolLimits {
        self.config.limits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offered_names_are_openai_function_names() {
        assert_eq!(
            offered_name("search", "web.query v2").as_deref(),
            Some("mcp__search__web_query_v2")
        );
        assert_eq!(offered_name("s", &"x".repeat(60)), None);
    }
}
