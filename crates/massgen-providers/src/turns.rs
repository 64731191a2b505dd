//! What the request builders of the formats with a separate system field and strict turn
//! alternation (Anthropic, Gemini, Responses) share.

use serde_json::Value;

use crate::{Message, Role};

/// The non-empty system messages joined by blank lines; `None` when there are none.
pub(crate) fn joined_system(messages: &[Message]) -> Option<String> {
    let system: Vec<&str> = messages
        .iter()
        .filter(|m| m.role == Role::System && !m.content.is_empty())
        .map(|m| m.content.as_str())
        .collect();
    (!system.is_empty()).then(|| system.join("\n\n"))
}

/// Turns as `(role, parts)`, with empty turns left out and consecutive turns of one role
/// merged into one (parts kept in order): the APIs that want alternating roles reject
/// two user turns in a row, and tool results must sit together.
pub(crate) fn merge_turns(
    turns: impl IntoIterator<Item = (&'static str, Vec<Value>)>,
) -> Vec<(&'static str, Vec<Value>)> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for (role, parts) in turns {
        if parts.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(parts),
            _ => out.push((role, parts)),
        }
    }
    out
}
