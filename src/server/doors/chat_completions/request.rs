//! Parsing a Chat Completions request: lenient where clients differ (unknown fields,
//! string or content-part messages), strict where a mistake would change the answer.

use massgen_core::coordination::{ClientTools, SessionInput};
use massgen_core::provider::{Message, Role, ToolCall, ToolChoice, ToolSpec};
use massgen_core::tool_names::{self, MCP_PREFIX, WORKFLOW_TOOLS};
use serde_json::{Map, Value};

use crate::server::doors::narrate::Deliberation;
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
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(
            format!("The request body is not valid JSON: {e}"),
            None,
            "invalid_json",
        )
    })?;
    let Value::Object(obj) = value else {
        return Err(ApiError::invalid(
            "The request body must be a JSON object",
            None,
            "invalid_json",
        ));
    };

    let model = match obj.get("model") {
        None | Some(Value::Null) => "massgen".to_string(),
        Some(Value::String(s)) => s.trim().to_string(),
        Some(_) => return Err(type_error("model", "a string")),
    };
    let stream = optional_bool(&obj, "stream")?.unwrap_or(false);
    let include_usage = match obj.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => optional_bool(o, "include_usage")
            .map_err(|_| type_error("stream_options.include_usage", "a boolean"))?
            .unwrap_or(false),
        Some(_) => return Err(type_error("stream_options", "an object")),
    };
    let deliberation = parse_deliberation(&obj)?;
    let tools = parse_client_tools(&obj)?;
    let mut input = parse_messages(obj.get("messages"))?;
    input.tools = tools;

    Ok(ChatRequest {
        model,
        stream,
        include_usage,
        deliberation,
        input,
    })
}

fn type_error(param: &'static str, expected: &str) -> ApiError {
    ApiError::invalid(
        format!("'{param}' must be {expected}"),
        Some(param),
        "invalid_type",
    )
}

fn optional_bool(obj: &Map<String, Value>, key: &'static str) -> Result<Option<bool>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(type_error(key, "a boolean")),
    }
}

fn parse_deliberation(obj: &Map<String, Value>) -> Result<Deliberation, ApiError> {
    let Some(massgen) = obj.get("massgen") else {
        return Ok(Deliberation::default());
    };
    let value = match massgen {
        Value::Null => return Ok(Deliberation::default()),
        Value::Object(m) => m.get("deliberation"),
        _ => return Err(type_error("massgen", "an object")),
    };
    match value.and_then(Value::as_str) {
        None if value.is_none_or(Value::is_null) => Ok(Deliberation::default()),
        Some("summary") => Ok(Deliberation::Summary),
        Some("full") => Ok(Deliberation::Full),
        Some("off") => Ok(Deliberation::Off),
        _ => Err(ApiError::invalid(
            "'massgen.deliberation' must be one of \"summary\", \"full\", \"off\"",
            Some("massgen.deliberation"),
            "invalid_value",
        )),
    }
}

/// `tools`, `tool_choice` and `parallel_tool_calls`. Only function tools exist here; a
/// name that collides with a coordination tool (or takes the MCP prefix) would make the
/// agents' turns ambiguous.
fn parse_client_tools(obj: &Map<String, Value>) -> Result<ClientTools, ApiError> {
    let list = match obj.get("tools") {
        None | Some(Value::Null) => &Vec::new(),
        Some(Value::Array(t)) => t,
        Some(_) => return Err(type_error("tools", "an array")),
    };
    let mut tools: Vec<ToolSpec> = Vec::with_capacity(list.len());
    for (i, tool) in list.iter().enumerate() {
        let spec = client_tool(i, tool)?;
        if tools.iter().any(|t| t.name == spec.name) {
            return Err(tools_error(
                format!("tools[{i}]: the name '{}' is used twice", spec.name),
                "invalid_value",
            ));
        }
        tools.push(spec);
    }
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
            if !tools.iter().any(|t| t.name == name) {
                return Err(choice_error(format!(
                    "'tool_choice' names the function '{name}', which is not in 'tools'"
                )));
            }
            Some(ToolChoice::Function(name.to_string()))
        }
        Some(_) => return Err(type_error("tool_choice", "a string or an object")),
    };
    if tools.is_empty() && matches!(choice, Some(ToolChoice::Required)) {
        return Err(choice_error(
            "'tool_choice' \"required\" needs at least one tool in 'tools'".into(),
        ));
    }
    let parallel = optional_bool(obj, "parallel_tool_calls")?;
    Ok(ClientTools {
        tools,
        choice,
        parallel,
    })
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
    let name = function
        .and_then(|f| f.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if tool_names::is_reserved(name) {
        return Err(tools_error(
            format!(
                "The client tool '{name}' collides with a massgen coordination tool ({}) or the reserved prefix '{MCP_PREFIX}'; rename it",
                WORKFLOW_TOOLS.join(", ")
            ),
            "tool_name_collision",
        ));
    }
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid_name {
        return Err(tools_error(
            format!("tools[{i}].function.name must match ^[a-zA-Z0-9_-]{{1,64}}$"),
            "invalid_value",
        ));
    }
    let description = function
        .and_then(|f| f.get("description"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let parameters = match function.and_then(|f| f.get("parameters")) {
        None | Some(Value::Null) => serde_json::json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(tools_error(
                format!("tools[{i}].function.parameters must be a JSON Schema object"),
                "invalid_type",
            ));
        }
    };
    Ok(ToolSpec {
        name: name.to_string(),
        description,
        parameters,
    })
}

fn tools_error(message: String, code: &'static str) -> ApiError {
    ApiError::invalid(message, Some("tools"), code)
}

fn choice_error(message: String) -> ApiError {
    ApiError::invalid(message, Some("tool_choice"), "invalid_value")
}

fn parse_messages(value: Option<&Value>) -> Result<SessionInput, ApiError> {
    let messages = match value {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid(
                "'messages' is required",
                Some("messages"),
                "missing_required_parameter",
            ));
        }
        Some(Value::Array(m)) => m,
        Some(_) => return Err(type_error("messages", "an array")),
    };
    if messages.is_empty() {
        return Err(ApiError::invalid(
            "'messages' must contain at least one message",
            Some("messages"),
            "empty_array",
        ));
    }

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

    let Some(last_user) = rest.iter().rposition(|m| m.role == Role::User) else {
        return Err(ApiError::invalid(
            "'messages' must contain a user message",
            Some("messages"),
            "missing_user_message",
        ));
    };
    // What follows the question (an assistant's tool calls and the client's results) is
    // shown apart from the earlier conversation; anything else stays in the history.
    let after: Vec<Message> = rest.split_off(last_user + 1);
    let followup = if after
        .iter()
        .any(|m| m.role == Role::Tool || !m.tool_calls.is_empty())
    {
        after
    } else {
        rest.extend(after);
        Vec::new()
    };
    let question = rest.remove(last_user).content;
    if question.trim().is_empty() {
        return Err(ApiError::invalid(
            "The last user message is empty",
            Some("messages"),
            "empty_message",
        ));
    }
    let extra_system = (!system.is_empty()).then(|| system.join("\n\n"));
    Ok(SessionInput {
        history: rest,
        question,
        extra_system,
        followup,
        tools: ClientTools::default(),
    })
}

fn message_error(index: usize, problem: &str) -> ApiError {
    ApiError::invalid(
        format!("messages[{index}] {problem}"),
        Some("messages"),
        "invalid_message",
    )
}

/// A string, null, or an array of content parts whose text parts are joined.
fn content_text(index: usize, content: Option<&Value>) -> Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for part in parts {
                match part.get("type").and_then(Value::as_str) {
                    Some("text") | Some("input_text") => texts.push(
                        part.get("text")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                    ),
                    Some(other) => {
                        return Err(message_error(
                            index,
                            &format!("has a '{other}' content part; only text parts are supported"),
                        ));
                    }
                    None => return Err(message_error(index, "has a content part without 'type'")),
                }
            }
            Ok(texts.join("\n"))
        }
        Some(_) => Err(message_error(
            index,
            "'content' must be a string or an array of parts",
        )),
    }
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
