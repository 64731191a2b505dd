//! Parsing an Anthropic Messages request (`POST /v1/messages`). Lenient where Claude Code
//! and the SDK send more than a panel can use (`cache_control` anywhere, echoed `thinking`
//! blocks, `thinking`, `context_management`, `output_config`, sampling settings), strict
//! where ignoring a field would change the answer (images and documents, Anthropic's own
//! server and client tool types, MCP connectors).

use massgen_core::coordination::ClientTools;
use massgen_core::provider::{Image, Message, OutputFormat, Sampling, ToolCall, ToolChoice};
use serde_json::{Map, Value};

use crate::app::Overrides;
use crate::server::doors::narrate::Deliberation;
use crate::server::doors::parse::{self, optional_bool, optional_count, type_error};
use crate::server::doors::tools::{self, ToolAt, choice_error, tools_error};
use crate::server::doors::{images, structured};
use crate::server::error::ApiError;

/// Anthropic's bound on `stop_sequences`.
const MAX_STOP_SEQUENCES: usize = 16;
/// Longest `metadata.user_id` kept with the session record.
const MAX_USER_ID_CHARS: usize = 512;

/// The parts of a request the server uses.
#[derive(Debug, Clone)]
pub struct MessagesRequest {
    /// As sent (echoed; routed, or mapped to the operator's panel).
    pub model: String,
    pub stream: bool,
    pub deliberation: Deliberation,
    pub overrides: Overrides,
    pub system: Vec<String>,
    pub messages: Vec<Message>,
    pub tools: ClientTools,
    /// Bounds the final answer (estimated tokens).
    pub max_tokens: u64,
    pub stop_sequences: Vec<String>,
    /// `metadata.user_id`, kept with the session record.
    pub user_id: Option<String>,
    /// Structured outputs (`output_config.format`).
    pub output: Option<OutputFormat>,
    pub sampling: Sampling,
}

/// `count_tokens` takes the same body without `max_tokens` (`needs_max_tokens: false`).
pub fn parse(body: &[u8], needs_max_tokens: bool) -> Result<MessagesRequest, ApiError> {
    let obj = parse::object(body)?;
    if obj
        .get("mcp_servers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        return Err(parse::unsupported(
            "mcp_servers",
            "'mcp_servers' (the MCP connector) is not supported: the panel's agents use the MCP servers of their own config",
        ));
    }
    let output = output_format(&obj)?;
    let max_tokens = match optional_count(&obj, "max_tokens")? {
        Some(n) => n,
        None if !needs_max_tokens => u64::MAX,
        None => {
            return Err(ApiError::invalid(
                "'max_tokens' is required",
                Some("max_tokens"),
                "missing_required_parameter",
            ));
        }
    };
    let tools = parse_tools(&obj)?;
    let mut system = parse_system(obj.get("system"))?;
    let (in_messages, messages) = parse_messages(obj.get("messages"))?;
    system.extend(in_messages);
    Ok(MessagesRequest {
        model: parse::model(&obj)?,
        stream: optional_bool(&obj, "stream")?.unwrap_or(false),
        deliberation: parse::native_deliberation(&obj, "thinking blocks")?,
        overrides: parse::overrides(&obj)?,
        system,
        messages,
        tools,
        max_tokens,
        stop_sequences: parse::stops(&obj, "stop_sequences", MAX_STOP_SEQUENCES, false)?,
        user_id: parse_user_id(obj.get("metadata"))?,
        output,
        sampling: parse::sampling(&obj)?,
    })
}

/// Structured outputs: `output_config.format` (GA), or the beta's top-level
/// `output_format` (with `anthropic-beta: structured-outputs-2025-11-13`, which, like
/// every beta header, is accepted and not needed), `{"type": "json_schema", "schema"}`.
/// The rest of `output_config` (Claude Code's `effort`) is a model setting, owned by the
/// panel config.
fn output_format(obj: &Map<String, Value>) -> Result<Option<OutputFormat>, ApiError> {
    let (param, format) = match obj.get("output_config").and_then(|c| c.get("format")) {
        Some(f) if !f.is_null() => ("output_config.format", f),
        _ => match obj.get("output_format") {
            Some(f) if !f.is_null() => ("output_format", f),
            _ => return Ok(None),
        },
    };
    let Value::Object(format) = format else {
        return Err(type_error(param, "an object"));
    };
    if format.get("type").and_then(Value::as_str) != Some("json_schema") {
        return Err(ApiError::invalid(
            format!("'{param}.type' must be \"json_schema\""),
            Some(param),
            "invalid_value",
        ));
    }
    // Anthropic's format has no name: the schema's title, if any, names it upstream.
    let name = format
        .get("schema")
        .and_then(|s| s.get("title"))
        .and_then(Value::as_str)
        .filter(|t| {
            !t.is_empty()
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        });
    structured::json_schema(name, None, format.get("schema"), false, param).map(Some)
}

/// `system`: a string or text blocks.
fn parse_system(value: Option<&Value>) -> Result<Vec<String>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .enumerate()
            .map(|(i, b)| match b.get("type").and_then(Value::as_str) {
                Some("text") => text_of(b).ok_or_else(|| {
                    ApiError::invalid(
                        format!("system[{i}]: {TEXT_NOT_A_STRING}"),
                        Some("system"),
                        "invalid_type",
                    )
                }),
                _ => Err(ApiError::invalid(
                    format!("system[{i}]: only text blocks are supported"),
                    Some("system"),
                    "invalid_value",
                )),
            })
            .collect(),
        Some(_) => Err(type_error("system", "a string or an array of text blocks")),
    }
}

const TEXT_NOT_A_STRING: &str = "a text block's 'text' must be a string";

/// A text block's `text`; a missing or non-string one is refused, not read as empty.
fn text_of(block: &Value) -> Option<String> {
    block
        .get("text")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// [`text_of`] for the `index`th message.
fn message_text(index: usize, block: &Value) -> Result<String, ApiError> {
    text_of(block).ok_or_else(|| message_error(index, TEXT_NOT_A_STRING))
}

/// `messages` as neutral messages; `role: "system"` entries (Claude Code's
/// mid-conversation system messages) come back apart.
fn parse_messages(value: Option<&Value>) -> Result<(Vec<String>, Vec<Message>), ApiError> {
    let list = parse::required_list(value, "messages")?;
    let mut system = Vec::new();
    let mut messages = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let role = m
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| message_error(i, "needs a 'role' string"))?;
        let blocks = blocks(i, m.get("content"))?;
        match role {
            "system" => system.push(plain_text(i, &blocks)?),
            "user" => user_turn(i, &blocks, &mut messages)?,
            "assistant" => messages.push(assistant_turn(i, &blocks)?),
            other => {
                return Err(message_error(
                    i,
                    &format!("has unknown role '{other}' (expected user or assistant)"),
                ));
            }
        }
    }
    Ok((system, messages))
}

/// The content as blocks (a string is one text block).
fn blocks(index: usize, content: Option<&Value>) -> Result<Vec<Value>, ApiError> {
    match content {
        Some(Value::String(s)) => Ok(vec![serde_json::json!({"type": "text", "text": s})]),
        Some(Value::Array(b)) => Ok(b.clone()),
        _ => Err(message_error(
            index,
            "'content' must be a string or an array of blocks",
        )),
    }
}

fn kind(block: &Value) -> &str {
    block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn plain_text(index: usize, blocks: &[Value]) -> Result<String, ApiError> {
    let mut texts = Vec::with_capacity(blocks.len());
    for block in blocks {
        match kind(block) {
            "text" => texts.push(message_text(index, block)?),
            other => return Err(unsupported_block(index, other)),
        }
    }
    Ok(texts.join("\n"))
}

/// A user turn: its tool results (each a neutral tool message), then its text and images.
fn user_turn(index: usize, blocks: &[Value], out: &mut Vec<Message>) -> Result<(), ApiError> {
    let mut texts = Vec::new();
    let mut pictures = Vec::new();
    for block in blocks {
        match kind(block) {
            "text" => texts.push(message_text(index, block)?),
            "image" => pictures.push(image_block(index, block)?),
            "tool_result" => {
                let id = block
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        message_error(index, "has a tool_result without 'tool_use_id'")
                    })?;
                let content = match block.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => plain_text(index, parts)?,
                    Some(_) => {
                        return Err(message_error(
                            index,
                            "has a tool_result whose 'content' is neither a string nor blocks",
                        ));
                    }
                };
                // The neutral message has no error flag: the agents read it in the text.
                let content = if optional_bool_in(block, "is_error") {
                    format!("[error] {content}")
                } else {
                    content
                };
                out.push(Message::tool_result(id, content));
            }
            other => return Err(unsupported_block(index, other)),
        }
    }
    if !texts.is_empty() || !pictures.is_empty() {
        let mut message = Message::user(texts.join("\n"));
        message.images = pictures;
        out.push(message);
    }
    Ok(())
}

/// An `image` block: a `base64` source (`media_type`, `data`) or a `url` source (https).
fn image_block(index: usize, block: &Value) -> Result<Image, ApiError> {
    let source = block.get("source");
    let field = |key: &str| source.and_then(|s| s.get(key)).and_then(Value::as_str);
    let read = match field("type") {
        Some("base64") => match (field("media_type"), field("data")) {
            (Some(media_type), Some(data)) => images::from_base64(media_type, data),
            _ => {
                return Err(message_error(
                    index,
                    "has an image whose base64 source needs 'media_type' and 'data' strings",
                ));
            }
        },
        Some("url") => match field("url") {
            Some(url) => images::from_https(url),
            None => {
                return Err(message_error(
                    index,
                    "has an image whose url source needs a 'url' string",
                ));
            }
        },
        other => {
            return Err(message_error(
                index,
                &format!(
                    "has an image with source type '{}'; only base64 and url sources are supported (uploaded files are not)",
                    other.unwrap_or("(none)")
                ),
            ));
        }
    };
    read.map_err(|r| r.at("messages", &format!("messages[{index}]")))
}

fn optional_bool_in(block: &Value, key: &str) -> bool {
    block.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// An assistant turn: its text and its tool calls. Thinking blocks (the deliberation this
/// server sent, as Claude Code echoes it) carry nothing the panel needs.
fn assistant_turn(index: usize, blocks: &[Value]) -> Result<Message, ApiError> {
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for block in blocks {
        match kind(block) {
            "text" => texts.push(message_text(index, block)?),
            "thinking" | "redacted_thinking" => {}
            "tool_use" => {
                let text = |key: &str| {
                    block
                        .get(key)
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .ok_or_else(|| {
                            message_error(index, &format!("has a tool_use without '{key}'"))
                        })
                };
                calls.push(ToolCall {
                    id: text("id")?,
                    name: text("name")?,
                    arguments: block
                        .get("input")
                        .map_or_else(|| "{}".to_string(), Value::to_string),
                    opaque: None,
                });
            }
            other => return Err(unsupported_block(index, other)),
        }
    }
    let mut message = Message::assistant(texts.join("\n"));
    message.tool_calls = calls;
    Ok(message)
}

fn unsupported_block(index: usize, kind: &str) -> ApiError {
    message_error(
        index,
        &format!(
            "has a '{kind}' block; only text, image (in user turns), tool_use, tool_result and thinking blocks are supported"
        ),
    )
}

fn message_error(index: usize, problem: &str) -> ApiError {
    parse::entry_error("messages", index, problem)
}

/// `tools` (`name`, `description`, `input_schema`; `type` absent or `custom`) and
/// `tool_choice` (`auto`, `any`, `tool`, `none`, `disable_parallel_tool_use`).
fn parse_tools(obj: &Map<String, Value>) -> Result<ClientTools, ApiError> {
    let specs = tools::parse_list(obj, |i, tool| {
        match tool.get("type").and_then(Value::as_str) {
            None | Some("custom") => {}
            Some(other) => {
                return Err(tools_error(
                    format!(
                        "tools[{i}]: Anthropic-defined tools (type '{other}') are not supported; send custom tools with input_schema"
                    ),
                    "invalid_value",
                ));
            }
        }
        tools::tool_spec(
            tool.get("name").and_then(Value::as_str).unwrap_or_default(),
            tool.get("description").and_then(Value::as_str),
            tool.get("input_schema"),
            &ToolAt {
                at: &format!("tools[{i}]"),
                schema_field: "input_schema",
            },
        )
        .map(Some)
    })?;
    let (choice, parallel) = match obj.get("tool_choice") {
        None | Some(Value::Null) => (None, None),
        Some(Value::Object(o)) => {
            let parallel = match o.get("disable_parallel_tool_use") {
                None | Some(Value::Null) => None,
                Some(Value::Bool(disable)) => Some(!disable),
                Some(_) => {
                    return Err(type_error(
                        "tool_choice",
                        "an object with a boolean 'disable_parallel_tool_use'",
                    ));
                }
            };
            let choice = match o.get("type").and_then(Value::as_str) {
                Some("auto") => ToolChoice::Auto,
                Some("any") => ToolChoice::Required,
                Some("none") => ToolChoice::None,
                Some("tool") => ToolChoice::Function(
                    o.get("name")
                        .and_then(Value::as_str)
                        .ok_or_else(|| {
                            choice_error("'tool_choice' of type \"tool\" needs 'name'".into())
                        })?
                        .to_string(),
                ),
                _ => {
                    return Err(choice_error(
                        "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\"".into(),
                    ));
                }
            };
            (Some(choice), parallel)
        }
        Some(_) => return Err(type_error("tool_choice", "an object")),
    };
    tools::client_tools(specs, choice, parallel, "any")
}

fn parse_user_id(value: Option<&Value>) -> Result<Option<String>, ApiError> {
    let bad = || {
        ApiError::invalid(
            format!(
                "'metadata' may hold 'user_id', a string of at most {MAX_USER_ID_CHARS} characters"
            ),
            Some("metadata"),
            "invalid_value",
        )
    };
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => match m.get("user_id") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.chars().count() <= MAX_USER_ID_CHARS => Ok(Some(s.clone())),
            Some(_) => Err(bad()),
        },
        Some(_) => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use massgen_core::provider::Role;
    use serde_json::json;

    fn parse_json(v: Value) -> Result<MessagesRequest, ApiError> {
        parse(v.to_string().as_bytes(), true)
    }

    fn code(v: Value) -> &'static str {
        match parse_json(v) {
            Err(e) => e.code(),
            Ok(_) => "ok",
        }
    }

    #[test]
    fn claude_code_shaped_requests_parse() {
        let req = parse_json(json!({
            "model": "claude-opus-4-8", "max_tokens": 32000, "stream": true,
            "system": [{"type": "text", "text": "x-anthropic-billing-header: cc"},
                       {"type": "text", "text": "You are Claude.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "<system-reminder>r</system-reminder>"},
                    {"type": "text", "text": "Say pong", "cache_control": {"type": "ephemeral"}}]},
                {"role": "system", "content": "Available agent types"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "…", "signature": ""},
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "echo hi"}}]},
                {"role": "user", "content": [{"tool_use_id": "toolu_1", "type": "tool_result", "content": "hi",
                    "is_error": false, "cache_control": {"type": "ephemeral"}}]}
            ],
            "tools": [{"name": "Bash", "description": "Run", "input_schema": {"type": "object"}}],
            "metadata": {"user_id": "{\"device_id\":\"d\"}"},
            "thinking": {"type": "adaptive"}, "context_management": {"edits": []},
            "output_config": {"effort": "high"}
        }))
        .unwrap();
        assert_eq!(req.system.len(), 3);
        assert_eq!(req.messages.len(), 3);
        assert_eq!(
            req.messages[0].content,
            "<system-reminder>r</system-reminder>\nSay pong"
        );
        assert_eq!(
            req.messages[1].tool_calls[0].arguments,
            r#"{"command":"echo hi"}"#
        );
        assert_eq!(req.messages[2].role, Role::Tool);
        assert_eq!(req.tools.tools[0].name, "Bash");
        assert_eq!(req.user_id.as_deref(), Some("{\"device_id\":\"d\"}"));
    }

    #[test]
    fn what_a_panel_cannot_honour_is_refused() {
        let msgs = json!([{"role": "user", "content": "x"}]);
        assert_eq!(
            code(json!({"messages": msgs})),
            "missing_required_parameter"
        );
        assert_eq!(
            code(json!({"max_tokens": 10, "messages": []})),
            "empty_array"
        );
        assert_eq!(
            code(
                json!({"max_tokens": 10, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "data": ""}}]}]})
            ),
            "invalid_message"
        );
        let image = |source: Value| {
            code(
                json!({"max_tokens": 10, "messages": [{"role": "user", "content": [
                {"type": "image", "source": source}]}]}),
            )
        };
        assert_eq!(
            image(json!({"type": "url", "url": "http://example.com/a.png"})),
            "invalid_image_url"
        );
        assert_eq!(
            image(json!({"type": "base64", "media_type": "image/gif", "data": "R0lGODlh"})),
            "unsupported_image_type"
        );
        assert_eq!(
            image(json!({"type": "file", "file_id": "file_1"})),
            "invalid_message"
        );
        assert_eq!(
            code(
                json!({"max_tokens": 10, "messages": [{"role": "user", "content": "x"},
                {"role": "assistant", "content": [{"type": "image",
                "source": {"type": "url", "url": "https://example.com/a.png"}}]},
                {"role": "user", "content": "y"}]})
            ),
            "invalid_message"
        );
        let req = parse_json(
            json!({"max_tokens": 10, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            {"type": "text", "text": "What is it?"}]}]}),
        )
        .unwrap();
        assert_eq!(req.messages[0].images.len(), 1);
        assert_eq!(req.messages[0].content, "What is it?");
        assert_eq!(
            code(json!({"max_tokens": 10, "messages": msgs,
                "tools": [{"type": "web_search_20250305", "name": "web_search"}]})),
            "invalid_value"
        );
        assert_eq!(
            code(
                json!({"max_tokens": 10, "messages": msgs, "tools": [{"name": "vote", "input_schema": {}}]})
            ),
            "tool_name_collision"
        );
        assert_eq!(
            code(json!({"max_tokens": 10, "messages": msgs, "tool_choice": {"type": "any"}})),
            "invalid_value"
        );
        assert_eq!(
            code(json!({"max_tokens": 10, "messages": msgs,
                "output_config": {"format": {"type": "json_schema", "schema": {}}}})),
            "ok"
        );
        assert_eq!(
            code(json!({"max_tokens": 10, "messages": msgs,
                "output_format": {"type": "json_schema", "schema": {"type": 3}}})),
            "invalid_value"
        );
        assert_eq!(
            code(json!({"max_tokens": 10, "messages": msgs,
                "output_config": {"format": {"type": "json_object"}}})),
            "invalid_value"
        );
        assert_eq!(
            code(json!({"max_tokens": 10, "messages": msgs, "stop_sequences": [""]})),
            "invalid_value"
        );
        assert_eq!(
            code(json!({"max_tokens": 10, "messages": msgs, "mcp_servers": [{"url": "x"}]})),
            "unsupported_parameter"
        );
        assert_eq!(
            code(json!({"max_tokens": 10, "messages": msgs, "metadata": {"user_id": 7}})),
            "invalid_value"
        );
        let req = parse_json(json!({"max_tokens": 10, "messages": msgs,
            "tools": [{"name": "a", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "tool", "name": "a", "disable_parallel_tool_use": true}}))
        .unwrap();
        assert_eq!(req.tools.choice, Some(ToolChoice::Function("a".into())));
        assert_eq!(req.tools.parallel, Some(false));
    }
}
