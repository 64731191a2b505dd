//! The client's own function tools (`tools`, `tool_choice`, `parallel_tool_calls` of the
//! request). Calling them is an answer like any other: the panel votes on the proposed
//! calls, and a winning set of calls goes back to the client (see docs/doors.md, "Client
//! tools").

use std::sync::Arc;

use serde_json::Value;

use crate::provider::{ToolCall, ToolChoice, ToolSpec};

/// What the client offered. `choice: None` means the client sent no `tool_choice` (auto).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientTools {
    /// Shared: every agent's request of every turn offers them, and a client's tools can be
    /// tens of KiB of schemas (coding agents send dozens).
    pub tools: Vec<Arc<ToolSpec>>,
    pub choice: Option<ToolChoice>,
    /// `parallel_tool_calls` as sent; `Some(false)` allows one call per answer.
    pub parallel: Option<bool>,
}

impl ClientTools {
    /// The tools agents may call (`tool_choice: none` hides them all; a named function
    /// offers only that one).
    pub fn offered(&self) -> Vec<Arc<ToolSpec>> {
        match &self.choice {
            Some(ToolChoice::None) => Vec::new(),
            Some(ToolChoice::Function(name)) => self
                .tools
                .iter()
                .filter(|t| &t.name == name)
                .cloned()
                .collect(),
            _ => self.tools.clone(),
        }
    }

    /// `required` or a named function: the answer must be a set of calls, so text answers
    /// (`new_answer`) are not offered.
    pub fn call_required(&self) -> bool {
        matches!(
            self.choice,
            Some(ToolChoice::Required | ToolChoice::Function(_))
        ) && !self.offered().is_empty()
    }

    /// The `tool_choice` sent upstream for a coordination turn that offers client tools:
    /// `required` when the client demanded a call (every valid turn ends in a tool call
    /// anyway), else `auto` as for every coordination turn.
    pub fn upstream_choice(&self) -> ToolChoice {
        if self.call_required() {
            ToolChoice::Required
        } else {
            ToolChoice::Auto
        }
    }

    pub fn one_call_only(&self) -> bool {
        self.parallel == Some(false)
    }
}

/// `get_weather({"city":"Paris"})`, one call per line.
pub fn describe_calls(calls: &[ToolCall]) -> String {
    calls
        .iter()
        .map(|c| format!("{}({})", c.name, compact_args(&c.arguments)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The arguments as compact JSON when they parse, else as sent.
fn compact_args(arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v) => v.to_string(),
        Err(_) => arguments.trim().to_string(),
    }
}

/// Two proposals are the same when they call the same tools with the same arguments (as
/// JSON values, so key order and spacing do not matter), in any order; ids are ignored.
pub fn same_calls(a: &[ToolCall], b: &[ToolCall]) -> bool {
    fn key(calls: &[ToolCall]) -> Vec<(String, String)> {
        let mut k: Vec<(String, String)> = calls
            .iter()
            .map(|c| (c.name.clone(), canonical(&c.arguments)))
            .collect();
        k.sort();
        k
    }
    !a.is_empty() && a.len() == b.len() && key(a) == key(b)
}

/// serde_json's `Value` keeps object keys sorted, so its text is canonical.
fn canonical(arguments: &str) -> String {
    if arguments.trim().is_empty() {
        return "{}".into();
    }
    serde_json::from_str::<Value>(arguments)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| arguments.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall {
            id: format!("id-{args}"),
            name: name.into(),
            arguments: args.into(),
            opaque: None,
        }
    }

    #[test]
    fn same_calls_ignores_order_ids_and_spacing() {
        let a = [call("w", r#"{"city": "Paris", "u": 1}"#), call("t", "{}")];
        let b = [call("t", ""), call("w", r#"{"u":1,"city":"Paris"}"#)];
        assert!(same_calls(&a, &b));
        assert!(!same_calls(
            &a[..1],
            &[call("w", r#"{"city":"Rome","u":1}"#)]
        ));
        assert!(!same_calls(&a, &a[..1]));
        assert_eq!(describe_calls(&a[..1]), r#"w({"city":"Paris","u":1})"#);
    }

    #[test]
    fn choice_shapes_the_offer() {
        let spec = |n: &str| ToolSpec {
            name: n.into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
        };
        let mut t = ClientTools {
            tools: vec![Arc::new(spec("a")), Arc::new(spec("b"))],
            ..Default::default()
        };
        assert_eq!(t.offered().len(), 2);
        assert!(!t.call_required());
        t.choice = Some(ToolChoice::None);
        assert!(t.offered().is_empty() && !t.call_required());
        t.choice = Some(ToolChoice::Function("b".into()));
        assert_eq!(t.offered()[0].name, "b");
        assert!(t.call_required());
        assert_eq!(t.upstream_choice(), ToolChoice::Required);
    }
}
