//! `namespace` tools: Codex sends the tools of its MCP servers grouped by server
//! (`{"type": "namespace", "name": "mcp__github", "tools": [{"type": "function", …}]}`).
//! The agents take function tools, so each is flattened to one named
//! `{namespace}__{tool}` (`mcp__github__search_issues`, as Claude Code names the same
//! tool); a call of it goes back as OpenAI's SDK models it, a `function_call` with the
//! tool's own `name` and its `namespace`, which is what Codex runs. The same flattening
//! reads the calls a client echoes (`function_call` items with a `namespace`) and a
//! `tool_choice` naming one.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// The longest tool name every provider takes.
const MAX_NAME_CHARS: usize = 64;

/// A namespaced tool's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespaced {
    pub namespace: String,
    pub name: String,
}

/// The request's namespaced tools, by the name the agents know them by.
pub type Namespaces = HashMap<String, Namespaced>;

/// The name the agents know `name` of `namespace` by: `{namespace}__{name}` (one `__`
/// between them even when the namespace ends with it, as Codex's `mcp__weather__` may),
/// or, where that is not a valid tool name (other characters, more than 64 of them), its
/// valid characters cut to 55 and a hash of both parts, so it stays the same in every
/// request.
pub fn flat_name(namespace: &str, name: &str) -> String {
    let joined = if namespace.ends_with("__") {
        format!("{namespace}{name}")
    } else {
        format!("{namespace}__{name}")
    };
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if joined.len() <= MAX_NAME_CHARS && joined.chars().all(valid) {
        return joined;
    }
    let cut: String = joined
        .chars()
        .map(|c| if valid(c) { c } else { '_' })
        .take(MAX_NAME_CHARS - 9)
        .collect();
    format!("{cut}_{:08x}", fnv1a(namespace, name) as u32)
}

/// FNV-1a over both parts with a separator no name holds.
fn fnv1a(namespace: &str, name: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in namespace.bytes().chain([0]).chain(name.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Writes `name` (as the agents know it) into a `function_call` item or event: the tool's
/// own name and its namespace when it is a namespaced tool's, else `name` as it is.
pub fn name_fields(object: &mut Map<String, Value>, name: &str, namespaces: &Namespaces) {
    match namespaces.get(name) {
        Some(n) => {
            object.insert("name".into(), n.name.clone().into());
            object.insert("namespace".into(), n.namespace.clone().into());
        }
        None => {
            object.insert("name".into(), name.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_joined_once_and_long_or_odd_ones_are_hashed_stably() {
        assert_eq!(flat_name("mcp__github", "search"), "mcp__github__search");
        assert_eq!(flat_name("mcp__weather__", "get"), "mcp__weather__get");
        let long = flat_name(
            "mcp__a_very_long_server_name_for_tests",
            "and_a_long_tool_name_too",
        );
        assert_eq!(long.len(), 64);
        assert!(long.starts_with("mcp__a_very_long_server_name_for_tests__and_a_lon"));
        assert_eq!(
            long,
            flat_name(
                "mcp__a_very_long_server_name_for_tests",
                "and_a_long_tool_name_too"
            )
        );
        let odd = flat_name("mcp__my.server", "do it");
        assert!(odd.starts_with("mcp__my_server__do_it_"), "{odd}");
        assert_ne!(odd, flat_name("mcp__my_server", "do_it"));
    }

    #[test]
    fn a_namespaced_call_is_written_with_its_parts() {
        let namespaces = Namespaces::from([(
            "mcp__github__search".to_string(),
            Namespaced {
                namespace: "mcp__github".into(),
                name: "search".into(),
            },
        )]);
        let mut item = Map::new();
        name_fields(&mut item, "mcp__github__search", &namespaces);
        assert_eq!(
            Value::Object(item),
            serde_json::json!({"name": "search", "namespace": "mcp__github"})
        );
        let mut plain = Map::new();
        name_fields(&mut plain, "exec_command", &namespaces);
        assert_eq!(
            Value::Object(plain),
            serde_json::json!({"name": "exec_command"})
        );
    }
}
