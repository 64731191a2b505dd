//! An agent's own tools renamed where a client tool has their name. The client's tool names
//! are the client's: Claude Code names its MCP tools `mcp__{server}__{tool}`, as the
//! toolbox names the agents' own, and both may reach the same server. A client tool wins
//! its name (calling it ends the turn and goes back to the client); the own tool it
//! shadows is offered as `own_{name}` (`own2_…` while that is taken too, cut to 64
//! characters), and [`Renamed`] hands calls of the alias to the source under the own
//! tool's name.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::agent_tools::{AgentTools, OwnTool, ToolLimits};
use crate::tool_names::OWN_ALIAS_PREFIX;

/// The longest tool name every provider takes.
const MAX_NAME_CHARS: usize = 64;

/// `tools` with every one whose name is in `client` renamed to a free alias, and the
/// aliases (alias → own name); empty when nothing collides.
pub fn rename(
    mut tools: Vec<OwnTool>,
    client: &HashSet<&str>,
) -> (Vec<OwnTool>, HashMap<String, String>) {
    let mut aliases = HashMap::new();
    if !tools.iter().any(|t| client.contains(t.spec.name.as_str())) {
        return (tools, aliases);
    }
    let mut taken: HashSet<String> = client.iter().map(|n| n.to_string()).collect();
    taken.extend(tools.iter().map(|t| t.spec.name.clone()));
    for tool in &mut tools {
        if !client.contains(tool.spec.name.as_str()) {
            continue;
        }
        let alias = free_alias(&tool.spec.name, &taken);
        taken.insert(alias.clone());
        let own = std::mem::replace(&mut tool.spec.name, alias.clone());
        aliases.insert(alias, own);
    }
    (tools, aliases)
}

/// The first of `own_{name}`, `own2_{name}`, … (each cut to [`MAX_NAME_CHARS`]) not in
/// `taken`. Their prefixes differ, so they are distinct, and one of the first
/// `taken.len() + 1` is free.
fn free_alias(name: &str, taken: &HashSet<String>) -> String {
    let mut n = 1usize;
    loop {
        let prefix = match n {
            1 => format!("{OWN_ALIAS_PREFIX}_"),
            n => format!("{OWN_ALIAS_PREFIX}{n}_"),
        };
        let alias: String = prefix
            .chars()
            .chain(name.chars())
            .take(MAX_NAME_CHARS)
            .collect();
        if !taken.contains(&alias) || n > taken.len() {
            return alias;
        }
        n += 1;
    }
}

/// An agent's own tools offered under aliases where the client's tools took their names.
pub struct Renamed {
    inner: Arc<dyn AgentTools>,
    /// Alias → the own tool's name.
    own: HashMap<String, String>,
}

impl Renamed {
    pub fn new(inner: Arc<dyn AgentTools>, aliases: HashMap<String, String>) -> Self {
        Self {
            inner,
            own: aliases,
        }
    }
}

impl fmt::Debug for Renamed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Renamed")
            .field("inner", &self.inner)
            .field("aliases", &self.own)
            .finish()
    }
}

impl AgentTools for Renamed {
    fn discover(&self) -> BoxFuture<'static, Vec<OwnTool>> {
        let found = self.inner.discover();
        let by_own: HashMap<String, String> = self
            .own
            .iter()
            .map(|(alias, own)| (own.clone(), alias.clone()))
            .collect();
        Box::pin(async move {
            let mut tools = found.await;
            for tool in &mut tools {
                if let Some(alias) = by_own.get(&tool.spec.name) {
                    tool.spec.name = alias.clone();
                }
            }
            tools
        })
    }

    fn call(&self, name: String, arguments: String) -> BoxFuture<'static, Result<String, String>> {
        let name = self.own.get(&name).cloned().unwrap_or(name);
        self.inner.call(name, arguments)
    }

    fn limits(&self) -> ToolLimits {
        self.inner.limits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolSpec;
    use std::sync::Mutex;

    fn tool(name: &str) -> OwnTool {
        OwnTool {
            spec: ToolSpec {
                name: name.into(),
                description: String::new(),
                parameters: serde_json::json!({"type": "object"}),
            },
            read_only: true,
        }
    }

    fn names(tools: &[OwnTool]) -> Vec<&str> {
        tools.iter().map(|t| t.spec.name.as_str()).collect()
    }

    #[test]
    fn only_shadowed_tools_take_a_free_alias() {
        let tools = vec![tool("mcp__gh__search"), tool("mcp__gh__read")];
        let (same, aliases) = rename(tools.clone(), &HashSet::from(["Bash"]));
        assert_eq!(names(&same), ["mcp__gh__search", "mcp__gh__read"]);
        assert!(aliases.is_empty());

        let client = HashSet::from(["mcp__gh__search", "own_mcp__gh__search"]);
        let (renamed, aliases) = rename(tools, &client);
        assert_eq!(names(&renamed), ["own2_mcp__gh__search", "mcp__gh__read"]);
        assert_eq!(aliases["own2_mcp__gh__search"], "mcp__gh__search");

        let long = "mcp__".to_string() + &"x".repeat(59);
        let (renamed, _) = rename(vec![tool(&long)], &HashSet::from([long.as_str()]));
        assert_eq!(renamed[0].spec.name.len(), 64);
        assert!(renamed[0].spec.name.starts_with("own_mcp__x"));
    }

    #[derive(Debug, Default)]
    struct Source(Mutex<Vec<String>>);

    impl AgentTools for Source {
        fn discover(&self) -> BoxFuture<'static, Vec<OwnTool>> {
            Box::pin(async { vec![tool("mcp__gh__search")] })
        }
        fn call(&self, name: String, _: String) -> BoxFuture<'static, Result<String, String>> {
            self.0.lock().unwrap().push(name.clone());
            Box::pin(async move { Ok(name) })
        }
        fn limits(&self) -> ToolLimits {
            ToolLimits::default()
        }
    }

    #[tokio::test]
    async fn calls_of_an_alias_reach_the_own_tool() {
        let source = Arc::new(Source::default());
        let renamed = Renamed::new(
            source.clone(),
            HashMap::from([("own_mcp__gh__search".into(), "mcp__gh__search".into())]),
        );
        assert_eq!(names(&renamed.discover().await), ["own_mcp__gh__search"]);
        let out = renamed
            .call("own_mcp__gh__search".into(), "{}".into())
            .await;
        assert_eq!(out.as_deref(), Ok("mcp__gh__search"));
        assert_eq!(*source.0.lock().unwrap(), ["mcp__gh__search"]);
    }
}
