//! Which MCP servers the panels name, and each agent's toolbox from the process's registry.

use std::sync::Arc;

use massgen_core::coordination::AgentTools;
use massgen_tools::{McpServerConfig, ToolRegistry};

use crate::config::{AgentConfig, PanelCatalog};

/// The agent's own tools for a session, from the process's registry; `None` when the
/// agent has no `mcp_servers`.
pub fn agent_tools(registry: &ToolRegistry, agent: &AgentConfig) -> Option<Arc<dyn AgentTools>> {
    let config = agent.tools.as_ref()?;
    if config.servers.is_empty() {
        return None;
    }
    Some(Arc::new(registry.toolbox(config)))
}

/// Every distinct MCP server named by the panels of `catalog`.
pub fn servers_of(catalog: &PanelCatalog) -> Vec<McpServerConfig> {
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
