//! Tool names massgen reserves for itself: the two workflow tools every coordination turn
//! offers, and the prefix of the agents' own MCP tools. A client tool may take none of them
//! (the HTTP edge refuses it), and the MCP toolbox names its tools with the prefix.

/// The workflow tool that submits (or replaces) the agent's answer.
pub const NEW_ANSWER: &str = "new_answer";

/// The workflow tool that votes for an answer.
pub const VOTE: &str = "vote";

/// Both workflow tools.
pub const WORKFLOW_TOOLS: [&str; 2] = [NEW_ANSWER, VOTE];

/// Prefix of every MCP tool name offered to a model (`mcp__{server}__{tool}`).
pub const MCP_PREFIX: &str = "mcp__";

/// Whether a client tool named `name` would collide with a workflow or MCP tool.
pub fn is_reserved(name: &str) -> bool {
    WORKFLOW_TOOLS.contains(&name) || name.starts_with(MCP_PREFIX)
}
