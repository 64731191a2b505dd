//! The `agents:` list (or a single `agent:`) → [`AgentConfig`]s: id, system message, and
//! the backend and tools read by `backend.rs` and `tools.rs`.
//!
//! An agent without `id` gets `agent<N>` (1-based position), as MassGen does; a clash with
//! an explicit id is a duplicate-id error.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::expand::join;
use super::read::Cx;
use super::{AgentConfig, ConfigError};

const AGENT_KEYS: &[&str] = &["id", "backend", "system_message"];

impl Cx<'_> {
    /// The agents that read without error and the number of entries; each agent's error is
    /// recorded (`Cx::keep`) and the others are still read.
    pub(super) fn agents(
        &self,
        root: &Map<String, Value>,
    ) -> Result<(Vec<AgentConfig>, usize), ConfigError> {
        let entries: Vec<(String, &Value)> = match (root.get("agents"), root.get("agent")) {
            (Some(_), Some(_)) => {
                return Err(self.err("agent", "use either `agent:` or `agents:`, not both"));
            }
            (None | Some(Value::Null), None) | (None, Some(Value::Null)) => vec![],
            (Some(Value::Array(list)), None) => list
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("agents[{i}]"), v))
                .collect(),
            (Some(_), None) => return Err(self.err("agents", "must be a list of agents")),
            (None, Some(single)) => vec![("agent".to_string(), single)],
        };
        if entries.is_empty() {
            return Err(self.err(
                "agents",
                "no agents: add an `agents:` list (or a single `agent:` mapping)",
            ));
        }
        let count = entries.len();
        let mut agents: Vec<AgentConfig> = Vec::with_capacity(count);
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for (i, (path, entry)) in entries.into_iter().enumerate() {
            let Some(agent) = self.keep(self.agent(&path, entry, i + 1)) else {
                continue;
            };
            if let Some(first) = seen.insert(agent.id.clone(), path.clone()) {
                self.keep::<()>(Err(self.err(
                    &join(&path, "id"),
                    format!("duplicate agent id '{}' (also used by {first})", agent.id),
                )));
                continue;
            }
            agents.push(agent);
        }
        Ok((agents, count))
    }

    fn agent(
        &self,
        path: &str,
        entry: &Value,
        position: usize,
    ) -> Result<AgentConfig, ConfigError> {
        let Value::Object(map) = entry else {
            return Err(self.err(path, "must be a mapping (id, backend, system_message)"));
        };
        for key in map.keys() {
            if !AGENT_KEYS.contains(&key.as_str()) {
                self.warn(&join(path, key), "agent key not used by massgen serve");
            }
        }
        let id_key = join(path, "id");
        let id = match self.string(map.get("id"), &id_key)? {
            None => format!("agent{position}"),
            Some(id) if id.trim().is_empty() => return Err(self.err(&id_key, "empty agent id")),
            Some(id) => id.trim().to_string(),
        };
        let system_message =
            self.string(map.get("system_message"), &join(path, "system_message"))?;
        let backend_key = join(path, "backend");
        let (backend, tools) = match self.section(map.get("backend"), &backend_key)? {
            Some(backend) => (
                self.backend(&backend_key, backend)?,
                self.agent_tools(&backend_key, backend)?,
            ),
            None => {
                return Err(self.err(
                    &backend_key,
                    "missing backend (a mapping with type and model)",
                ));
            }
        };
        // A name that would leave its URL path segment never reaches a provider.
        if let Err(why) = massgen_providers::check_model(&backend.backend_type, &backend.model) {
            return Err(self.err(&join(&backend_key, "model"), format!("agent '{id}': {why}")));
        }
        Ok(AgentConfig {
            id,
            system_message,
            backend,
            tools,
        })
    }
}
