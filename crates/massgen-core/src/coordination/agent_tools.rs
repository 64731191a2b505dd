//! Tools an agent uses itself inside its turn (MCP tools, see the `massgen-tools` crate). The engine
//! only sees this seam: what to offer, how to call, and the loop's limits.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::provider::ToolSpec;

/// Limits of the in-turn tool loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimits {
    /// Model calls that may use tools in one turn, before the model must finish without them.
    pub max_rounds: u32,
    /// One tool call, from start to result.
    pub call_timeout: Duration,
    /// Longer results are cut to this many bytes (with a note) before the model sees them.
    pub max_result_bytes: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self {
            max_rounds: 10,
            call_timeout: Duration::from_secs(60),
            max_result_bytes: 64 * 1024,
        }
    }
}

/// One of an agent's own tools, as its source lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnTool {
    pub spec: ToolSpec,
    /// It only reads (MCP's `readOnlyHint`, or the config's list): under planning mode
    /// the only kind offered during coordination.
    pub read_only: bool,
}

/// One agent's own tools.
pub trait AgentTools: Send + Sync + fmt::Debug {
    /// The tools to offer for this session (resolved once, when the session starts; a
    /// source that cannot be reached contributes nothing and says why in the logs).
    fn discover(&self) -> BoxFuture<'static, Vec<OwnTool>>;
    /// Calls `name` with `arguments` (JSON text). `Err` holds a message for the model: a
    /// failing tool is a tool result, never a session failure.
    fn call(&self, name: String, arguments: String) -> BoxFuture<'static, Result<String, String>>;
    fn limits(&self) -> ToolLimits;
}

/// One finished tool call, as the session records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallRecord {
    pub tool: String,
    /// 1-based tool round of the turn.
    pub round: u32,
    pub duration_ms: u64,
    /// `None` when the call succeeded.
    pub error: Option<String>,
}

/// An agent's tools split for one session: `turns` are offered during coordination;
/// `held` (planning mode: every tool that is not read-only) only to the winner's
/// presentation, which gets both.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SplitTools {
    pub turns: Vec<Arc<ToolSpec>>,
    pub held: Vec<Arc<ToolSpec>>,
}

impl SplitTools {
    /// Without planning mode every tool is used in turns (and none in the presentation).
    pub fn new(tools: Vec<OwnTool>, planning_mode: bool) -> Self {
        let (turns, held): (Vec<OwnTool>, Vec<OwnTool>) = tools
            .into_iter()
            .partition(|t| !planning_mode || t.read_only);
        let specs = |v: Vec<OwnTool>| v.into_iter().map(|t| Arc::new(t.spec)).collect();
        Self {
            turns: specs(turns),
            held: specs(held),
        }
    }

    pub fn held_names(&self) -> Vec<String> {
        self.held.iter().map(|t| t.name.clone()).collect()
    }
}

/// Cuts `text` to at most `max` bytes (at a character boundary) with a note saying so.
pub fn cap_result(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[truncated: the result had {} bytes; the first {end} are shown]",
        &text[..end],
        text.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_keeps_short_results_and_cuts_at_a_char_boundary() {
        assert_eq!(cap_result("abc".into(), 3), "abc");
        let cut = cap_result("aé".repeat(10), 4);
        assert!(
            cut.starts_with("aéa\n[truncated: the result had 30 bytes"),
            "{cut}"
        );
    }
}
