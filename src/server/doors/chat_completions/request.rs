//! Parsing a Chat Completions request: lenient where clients differ (unknown fields,
//! string or content-part messages), strict where a mistake would change the answer.

use massgen_core::coordination::{ClientTools, SessionInput};
use massgen_core::provider::{Message, ToolCall, ToolChoice, ToolSpec};
use serde_json::{Map, Value};

use crate::server::doors::conversation;
use crate::server::doors::narrate::Deliberation;
use crate::server::doors::parse::{self, optional_bool, type_error};
use crate::server::doors::tools::{self, ToolAt, choice_error, tools_error};
use crate::server::error::ApiError;

/// The parts of a request the server uses.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// As sent (echoed in responses); `massgen` when absent.
    pub model: String,
    pub stream: bool,
    pub include_usage: bool,
    pub deliberation: Deliberation,
    pub input: SessionInput,
}

pub fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let obj = parse::object(body)?;
    let model = parse::model(&obj)?;
    let stream = optional_bool(&obj, "stream")?.unwrap_or(false);
    let include_usage = match obj.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => optional_bool(o, "include_usage")
            .map_err(|_| type_error("stream_options.include_usage", "a boolean"))?
            .unwrap_or(false),
        Some(_) => return Err(type_error("stream_options", "an object")),
    };
    let deliberation = parse::deliberation(&obj)?;
    let tools = parse_client_tools(&obj)?;
    let (system, messages) = parse_messages(obj.get("messages"))?;
    let input = conversation::session_input(system, messages, tools, "messages")?;

    Ok(ChatRequest {
        model,
        stream,
        include_usage,
        deliberation,
        input,
    })
}

/// `tools`, `tool_choice` and `parallel_tool_calls`. Only function tools exist here.
fn parse_client_tools(obj: &Map<String, Value>) -> Result<ClientTools, ApiError> {
    let tools = tools::parse_list(obj, |i, tool| client_tool(i, tool).map(Some))?;
    let choice = match obj.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            _ => {
                return Err(choice_error(
                    "'tool_choice' must be \"none\", \"auto\", \"required\" or a function".into(),
                ));
            }
        }),
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| choice_error("'tool_choice' needs function.name".into()))?;
            Some(ToolChoice::Function(name.to_string()))
        }
        Some(_) => return Err(type_error("tool_choice", "a string or an object")),
    };
    let parallel = optional_bool(obj, "parallel_tool_calls")?;
    tools::client_tools(tools, choice, parallel, "required")
}

fn client_tool(i: usize, tool: &Value) -> Result<ToolSpec, ApiError> {
    let kind = tool
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("function");
    if kind != "function" {
        return Err(tools_error(
            format!("tools[{i}]: only function tools are supported (got type '{kind}')"),
            "invalid_value",
        ));
    }
    let function = tool.get("function").and_then(Value::as_object);
    let field = |key: &str| function.and_then(|f| f.get(key));
    tools::tool_spec(
        field("name").and_then(Value::as_str).unwrap_or_default(),
        field("description").and_then(Value::as_str),
        field("parameters"),
        &ToolAt {
            at: &format!("tools[{i}].function"),
            schema_field: "parameters",
        },
    )
}

/// The system texts and the other messages, in order.
fn parse_messages(value: Option<&Value>) -> Result<(Vec<String>, Vec<Message>), ApiError> {
    let messages = parse::required_list(value, "messages")?;

    let mut system = Vec::new();
    let mut rest = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let Value::Object(m) = m else {
            return Err(message_error(i, "must be an object"));
        };
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| message_error(i, "needs a 'role' string"))?;
        let content = content_text(i, m.get("content"))?;
        match role {
            "system" | "developer" => system.push(content),
            "user" => rest.push(Message::user(content)),
            "assistant" => {
                let mut msg = Message::assistant(content);
                msg.tool_calls = tool_calls(i, m.get("tool_calls"))?;
                rest.push(msg);
            }
            "tool" => {
                let id = m
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                rest.push(Message::tool_result(id, content));
            }
            other => {
                return Err(message_error(
                    i,
                    &format!(
                        "has unknown role '{other}' (expected system, developer, user, assistant or tool)"
                    ),
                ));
            }
        }
    }

    Ok((system, rest))
}

fn message_error(index: usize, problem: &str) -> ApiError {
    parse::entry_error("messages", index, problem)
}

/// A string, null, or an array of content parts whose text parts are joined.
fn content_text(index: usize, content: Option<&Value>) -> Result<String, ApiError> {
    parse::joined_text(
        content,
        |kind| matches!(kind, "text" | "input_text").then_some("text"),
        |problem| message_error(index, problem),
    )
}

fn tool_calls(index: usize, value: Option<&Value>) -> Result<Vec<ToolCall>, ApiError> {
    let calls = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(c)) => c,
        Some(_) => return Err(message_error(index, "'tool_calls' must be an array")),
    };
    Ok(calls
        .iter()
        .map(|c| {
            let function = c.get("function");
            let text =
                |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
            ToolCall {
                id: text(c.get("id")),
                name: text(function.and_then(|f| f.get("name"))),
                arguments: text(function.and_then(|f| f.get("arguments"))),
                opaque: None,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_json(v: Value) -> Result<ChatRequest, ApiError> {
        parse(v.to_string().as_bytes())
    }

    #[test]
    fn splits_system_history_and_question() {
        let req = parse_json(serde_json::json!({
            "model": "massgen",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"},
                {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}
            ],
            "unknown_field": 1
        }))
        .unwrap();
        assert_eq!(req.input.question, "What is 2+2?");
        assert_eq!(req.input.extra_system.as_deref(), Some("Be brief."));
        assert_eq!(req.input.history.len(), 2);
        assert!(!req.stream);
    }

    #[test]
    fn rejects_bad_inputs_with_codes() {
        let code = |v: Value| match parse_json(v) {
            Err(e) => e.code(),
            Ok(_) => "ok",
        };
        assert_eq!(
            code(serde_json::json!({"model": "massgen"})),
            "missing_required_parameter"
        );
        assert_eq!(code(serde_json::json!({"messages": []})), "empty_array");
        assert_eq!(
            code(serde_json::json!({"messages": [{"role": "assistant", "content": "x"}]})),
            "missing_user_message"
        );
        assert_eq!(
            code(
                serde_json::json!({"messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function", "function": {"name": "vote"}}]})
            ),
            "tool_name_collision"
        );
        assert_eq!(
            code(
                serde_json::json!({"messages": [{"role": "user", "content": "x"}], "massgen": {"deliberation": "loud"}})
            ),
            "invalid_value"
        );
        assert_eq!(
            parse(b"{not json").err().map(|e| e.code()),
            Some("invalid_json")
        );
    }

    #[test]
    fn client_tools_choice_and_followup() {
        let tool = |n: &str| serde_json::json!({"type": "function", "function": {"name": n, "parameters": {"type": "object"}}});
        let req = parse_json(serde_json::json!({
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "18C"}
            ],
            "tools": [tool("get_weather")],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": false
        }))
        .unwrap();
        assert_eq!(req.input.question, "Weather in Paris?");
        assert!(req.input.history.is_empty());
        assert_eq!(req.input.followup.len(), 2);
        assert_eq!(req.input.tools.tools[0].name, "get_weather");
        assert_eq!(
            req.input.tools.choice,
            Some(ToolChoice::Function("get_weather".into()))
        );
        assert_eq!(req.input.tools.parallel, Some(false));
        let code = |v: Value| match parse_json(v) {
            Err(e) => e.code(),
            Ok(_) => "ok",
        };
        let msgs = serde_json::json!([{"role": "user", "content": "x"}]);
        assert_eq!(
            code(serde_json::json!({"messages": msgs, "tools": [tool("mcp__a__b")]})),
            "tool_name_collision"
        );
        assert_eq!(
            code(serde_json::json!({"messages": msgs, "tools": [tool("a"), tool("a")]})),
            "invalid_value"
        );
        assert_eq!(
            code(serde_json::json!({"messages": msgs, "tools": [tool("a b")]})),
            "invalid_value"
        );
        assert_eq!(
            code(serde_json::json!({"messages": msgs, "tools": [tool("a")],
                "tool_choice": {"type": "function", "function": {"name": "b"}}})),
            "invalid_value"
        );
        assert_eq!(
            code(serde_json::json!({"messages": msgs, "tool_choice": "required"})),
            "invalid_value"
        );
        assert_eq!(
            code(
                serde_json::json!({"messages": msgs, "tools": [tool("a")], "tool_choice": "none"})
            ),
            "ok"
        );
    }
}
