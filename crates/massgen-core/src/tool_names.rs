//! Tool names massgen gives its own tools: the two workflow tools every coordination turn
//! offers, the prefix of the agents' own MCP tools, and the alias an own tool takes when a
//! client tool has its name. Only the workflow tools are reserved: the client's tool names
//! are the client's (Claude Code names its MCP tools `mcp__{server}__{tool}` too), so an
//! own tool a client tool shadows is offered under an alias instead (see
//! `coordination::own_names`).

/// The workflow tool that submits (or replaces) the agent's answer.
pub const NEW_ANSWER: &str = "new_answer";

/// The workflow tool that votes for an answer.
pub const VOTE: &str = "vote";

/// Both workflow tools.
pub const WORKFLOW_TOOLS: [&str; 2] = [NEW_ANSWER, VOTE];

/// Prefix of every MCP tool name offered to a model (`mcp__{server}__{tool}`).
pub const MCP_PREFIX: &str = "mcp__";

/// What an own tool's alias starts with (`own_mcp__github__search`), then `own2_`,
/// `own3_`… while the name is taken.
pub const OWN_ALIAS_PREFIX: &str = "own";

/// Whether a client tool named `name` would collide with a tool every panel offers.
pub fn is_reserved(name: &str) -> bool {
    WORKFLOW_TOOLS.contains(&name)
}
