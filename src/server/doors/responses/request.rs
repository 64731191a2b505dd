//! Parsing a Responses API request (`POST /v1/responses`). Lenient where OpenAI's own
//! clients send more than a panel can use (Codex's hosted and grammar tools, echoed
//! reasoning items, item ids, sampling settings), strict where ignoring a field would
//! change the answer (background mode, stored prompts, log probabilities).

use massgen_core::coordination::ClientTools;
use massgen_core::provider::{Image, Message, OutputFormat, Role, Sampling, ToolCall, ToolChoice};
use serde_json::{Map, Value, json};

use crate::app::Overrides;
use crate::server::doors::narrate::Deliberation;
use crate::server::doors::parse::{
    self, optional_bool, optional_count, optional_str, type_error, unsupported,
};
use crate::server::doors::tools::{self, ToolAt, choice_error, tools_error};
use crate::server::doors::{images, structured};
use crate::server::error::ApiError;

/// Tool types Codex sends with every request that a panel cannot offer: OpenAI-hosted
/// search (`web_search`), deferred tool loading (`tool_search`), grammar-constrained
/// free-form tools (`custom`) and groups of Codex's own multi-agent tools (`namespace`).
/// Codex works without them (it falls back to its function tools), so they are left out
/// of what the panel sees instead of failing every Codex request.
const IGNORED_TOOL_TYPES: [&str; 4] = ["web_search", "tool_search", "custom", "namespace"];

/// OpenAI's limits on `metadata`.
const METADATA_MAX_KEYS: usize = 16;
const METADATA_KEY_CHARS: usize = 64;
const METADATA_VALUE_CHARS: usize = 512;

/// The parts of a request the server uses.
#[derive(Debug, Clone)]
pub struct ResponsesRequest {
    /// As sent (echoed); `massgen` when absent.
    pub model: String,
    pub stream: bool,
    /// Keep the response for `GET /v1/responses/{id}` and `previous_response_id`.
    pub store: bool,
    pub deliberation: Deliberation,
    pub overrides: Overrides,
    /// For this request only (not carried to the next one, as in OpenAI's API).
    pub instructions: Option<String>,
    /// System and developer messages of `input`.
    pub system: Vec<String>,
    /// The other items of `input`, as neutral messages.
    pub messages: Vec<Message>,
    pub tools: ClientTools,
    /// The function tools as sent, echoed in the response.
    pub tools_json: Vec<Value>,
    pub tool_choice_json: Value,
    pub max_output_tokens: Option<u64>,
    /// `text.format` when it asks for JSON.
    pub output: Option<OutputFormat>,
    /// The `text` object echoed in the response.
    pub text: Value,
    pub sampling: Sampling,
    pub previous_response_id: Option<String>,
    pub metadata: Map<String, Value>,
}

pub fn parse(body: &[u8]) -> Result<ResponsesRequest, ApiError> {
    let obj = parse::object(body)?;
    refuse_unsupported(&obj)?;
    let (tools, tools_json) = parse_tools(&obj)?;
    let (system, messages) = parse_input(obj.get("input"))?;
    let (output, text) = text_format(&obj)?;
    Ok(ResponsesRequest {
        output,
        text,
        sampling: parse::sampling(&obj)?,
        model: parse::model(&obj)?,
        stream: optional_bool(&obj, "stream")?.unwrap_or(false),
        store: optional_bool(&obj, "store")?.unwrap_or(true),
        deliberation: parse::native_deliberation(&obj, "reasoning items")?,
        overrides: parse::overrides(&obj)?,
        instructions: optional_str(&obj, "instructions")?.map(str::to_string),
        system,
        messages,
        tool_choice_json: obj.get("tool_choice").cloned().unwrap_or("auto".into()),
        tools,
        tools_json,
        max_output_tokens: optional_count(&obj, "max_output_tokens")?,
        previous_response_id: optional_str(&obj, "previous_response_id")?.map(str::to_string),
        metadata: parse_metadata(obj.get("metadata"))?,
    })
}

/// Fields whose meaning a panel cannot honour.
fn refuse_unsupported(obj: &Map<String, Value>) -> Result<(), ApiError> {
    if optional_bool(obj, "background")? == Some(true) {
        return Err(unsupported(
            "background",
            "'background' mode is not supported; stream the response or wait for it",
        ));
    }
    for (key, why) in [
        (
            "conversation",
            "'conversation' is not supported; continue with 'previous_response_id'",
        ),
        (
            "prompt",
            "stored prompt templates ('prompt') are not supported",
        ),
    ] {
        if obj.get(key).is_some_and(|v| !v.is_null()) {
            return Err(unsupported(key, why));
        }
    }
    // Log probabilities: the answer comes from several models (Chat Completions refuses
    // `logprobs` alike). Other `include` values (Codex's `reasoning.encrypted_content`)
    // only ask for what this server may leave out.
    let logprobs_included = obj
        .get("include")
        .and_then(Value::as_array)
        .is_some_and(|i| {
            i.iter()
                .any(|v| v.as_str() == Some("message.output_text.logprobs"))
        });
    if logprobs_included || obj.get("top_logprobs").is_some_and(|v| !v.is_null()) {
        return Err(unsupported(
            "top_logprobs",
            "log probabilities are not supported: the answer comes from several models",
        ));
    }
    Ok(())
}

/// `text.format`: `text` (or none), `json_object`, or `json_schema` with `name`,
/// `description`, `schema` and `strict` beside `type`. Returns the format and the `text`
/// object to echo.
fn text_format(obj: &Map<String, Value>) -> Result<(Option<OutputFormat>, Value), ApiError> {
    const PARAM: &str = "text.format";
    let plain = json!({"format": {"type": "text"}});
    let format = match obj.get("text") {
        None | Some(Value::Null) => return Ok((None, plain)),
        Some(Value::Object(text)) => match text.get("format") {
            None | Some(Value::Null) => return Ok((None, plain)),
            Some(Value::Object(format)) => format,
            Some(_) => return Err(type_error(PARAM, "an object")),
        },
        Some(_) => return Err(type_error("text", "an object")),
    };
    let parsed = match format.get("type").and_then(Value::as_str) {
        Some("text") => None,
        Some("json_object") => Some(OutputFormat::JsonObject),
        Some("json_schema") => Some(structured::openai_spec(format, PARAM)?),
        _ => {
            return Err(ApiError::invalid(
                "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\"",
                Some(PARAM),
                "invalid_value",
            ));
        }
    };
    Ok((parsed, json!({"format": format})))
}

/// `tools`, `tool_choice` and `parallel_tool_calls`: function tools in the Responses shape
/// (`{"type":"function","name",…}`).
fn parse_tools(obj: &Map<String, Value>) -> Result<(ClientTools, Vec<Value>), ApiError> {
    let mut echoed = Vec::new();
    let specs = tools::parse_list(obj, |i, tool| {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or_default();
        if IGNORED_TOOL_TYPES.contains(&kind) {
            return Ok(None);
        }
        if kind != "function" {
            return Err(tools_error(
                format!(
                    "tools[{i}]: tools of type '{kind}' are not supported (function tools only)"
                ),
                "invalid_value",
            ));
        }
        let spec = tools::tool_spec(
            tool.get("name").and_then(Value::as_str).unwrap_or_default(),
            tool.get("description").and_then(Value::as_str),
            tool.get("parameters"),
            &ToolAt {
                at: &format!("tools[{i}]"),
                schema_field: "parameters",
            },
        )?;
        echoed.push(tool.clone());
        Ok(Some(spec))
    })?;
    let choice = match obj.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            _ => return Err(choice_error(CHOICE_FORMS.into())),
        }),
        Some(Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| choice_error("'tool_choice' needs 'name'".into()))?;
            Some(ToolChoice::Function(name.to_string()))
        }
        Some(Value::Object(_)) => return Err(choice_error(CHOICE_FORMS.into())),
        Some(_) => return Err(type_error("tool_choice", "a string or an object")),
    };
    let parallel = optional_bool(obj, "parallel_tool_calls")?;
    Ok((
        tools::client_tools(specs, choice, parallel, "required")?,
        echoed,
    ))
}

const CHOICE_FORMS: &str = "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": …}";

/// `input`: a string (one user message) or a list of items. System and developer
/// messages come back apart; reasoning items (a reasoning summary this server sent, as
/// clients echo it) carry nothing the panel needs.
fn parse_input(value: Option<&Value>) -> Result<(Vec<String>, Vec<Message>), ApiError> {
    let items = match value {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid(
                "'input' is required",
                Some("input"),
                "missing_required_parameter",
            ));
        }
        Some(Value::String(s)) => return Ok((Vec::new(), vec![Message::user(s.clone())])),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(type_error("input", "a string or an array of items")),
    };
    let mut system = Vec::new();
    let mut messages: Vec<Message> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(item) = item else {
            return Err(item_error(i, "must be an object"));
        };
        let kind = match item.get("type").and_then(Value::as_str) {
            Some(kind) => kind,
            // EasyInputMessage (the Agents SDK's form) has a role and no type.
            None if item.contains_key("role") => "message",
            None => return Err(item_error(i, "needs a 'type'")),
        };
        match kind {
            "message" => {
                let role = item
                    .get("role")
                    .and_then(Value::as_str)
                    .ok_or_else(|| item_error(i, "needs a 'role' string"))?;
                // `input_image` parts are images, accepted in user messages only.
                let (text, images) = parse::text_and_images(
                    item.get("content"),
                    text_field,
                    |kind, part| {
                        (kind == "input_image").then(|| input_image(i, part, role == "user"))
                    },
                    |problem| item_error(i, problem),
                )?;
                match role {
                    "system" | "developer" => system.push(text),
                    "user" => {
                        let mut message = Message::user(text);
                        message.images = images;
                        messages.push(message);
                    }
                    "assistant" => messages.push(Message::assistant(text)),
                    other => {
                        return Err(item_error(
                            i,
                            &format!(
                                "has unknown role '{other}' (expected system, developer, user or assistant)"
                            ),
                        ));
                    }
                }
            }
            "function_call" => {
                let text = |key: &str| {
                    item.get(key)
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .ok_or_else(|| item_error(i, &format!("needs a '{key}' string")))
                };
                let call = ToolCall {
                    id: text("call_id")?,
                    name: text("name")?,
                    arguments: text("arguments")?,
                    opaque: None,
                };
                // Calls of one turn follow each other (after the turn's text, if any).
                match messages.last_mut() {
                    Some(last) if last.role == Role::Assistant => last.tool_calls.push(call),
                    _ => {
                        let mut turn = Message::assistant(String::new());
                        turn.tool_calls.push(call);
                        messages.push(turn);
                    }
                }
            }
            "function_call_output" => {
                let id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| item_error(i, "needs a 'call_id' string"))?;
                let output = content_text(i, item.get("output"))?;
                messages.push(Message::tool_result(id, output));
            }
            "reasoning" => {}
            "item_reference" => {
                return Err(item_error(
                    i,
                    "is an item_reference; items are not stored one by one, continue with 'previous_response_id'",
                ));
            }
            other => {
                return Err(item_error(
                    i,
                    &format!(
                        "has type '{other}'; only message, function_call, function_call_output and reasoning items are supported"
                    ),
                ));
            }
        }
    }
    Ok((system, messages))
}

fn item_error(index: usize, problem: &str) -> ApiError {
    parse::entry_error("input", index, problem)
}

/// A string, or a list of text parts (`input_text`, `output_text`, `text`, an assistant's
/// `refusal`) joined by line breaks.
fn content_text(index: usize, content: Option<&Value>) -> Result<String, ApiError> {
    parse::joined_text(content, text_field, |problem| item_error(index, problem))
}

fn text_field(kind: &str) -> Option<&'static str> {
    match kind {
        "input_text" | "output_text" | "text" => Some("text"),
        "refusal" => Some("refusal"),
        _ => None,
    }
}

/// `{"type": "input_image", "image_url": …, "detail": …}`; a `file_id` (OpenAI's file
/// store, which this server does not have) is refused.
fn input_image(index: usize, part: &Value, user: bool) -> Result<Image, ApiError> {
    if !user {
        return Err(item_error(
            index,
            "has an image part; images are accepted in user messages only",
        ));
    }
    let Some(url) = part.get("image_url").and_then(Value::as_str) else {
        let problem = if part.get("file_id").is_some_and(|f| !f.is_null()) {
            "has an 'input_image' with a 'file_id'; uploaded files are not supported, send 'image_url' (https or data: URL)"
        } else {
            "has an 'input_image' part without an 'image_url' string"
        };
        return Err(item_error(index, problem));
    };
    let detail = part.get("detail").and_then(Value::as_str);
    images::from_url(url, detail).map_err(|r| r.at("input", &format!("input[{index}]")))
}

/// Up to 16 string values, keys of at most 64 characters, values of at most 512.
fn parse_metadata(value: Option<&Value>) -> Result<Map<String, Value>, ApiError> {
    let map = match value {
        None | Some(Value::Null) => return Ok(Map::new()),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(type_error("metadata", "an object")),
    };
    let fits = map.len() <= METADATA_MAX_KEYS
        && map.iter().all(|(k, v)| {
            k.chars().count() <= METADATA_KEY_CHARS
                && v.as_str()
                    .is_some_and(|s| s.chars().count() <= METADATA_VALUE_CHARS)
        });
    if !fits {
        return Err(ApiError::invalid(
            format!(
                "'metadata' holds at most {METADATA_MAX_KEYS} string values, keys of at most {METADATA_KEY_CHARS} characters and values of at most {METADATA_VALUE_CHARS}"
            ),
            Some("metadata"),
            "invalid_value",
        ));
    }
    Ok(map.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_json(v: Value) -> Result<ResponsesRequest, ApiError> {
        parse(v.to_string().as_bytes())
    }

    fn code(v: Value) -> &'static str {
        match parse_json(v) {
            Err(e) => e.code(),
            Ok(_) => "ok",
        }
    }

    #[test]
    fn codex_shaped_requests_parse_and_keep_only_function_tools() {
        let req = parse_json(json!({
            "model": "massgen", "stream": true, "store": false,
            "input": [
                {"type": "message", "id": "msg_1", "role": "developer",
                 "content": [{"type": "input_text", "text": "You are Codex."}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say pong"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "x"}],
                 "content": null, "encrypted_content": null},
                {"type": "function_call", "status": "completed", "id": "fc_1", "name": "exec_command",
                 "arguments": "{}", "call_id": "call_1"},
                {"type": "function_call_output", "id": "fco_1", "call_id": "call_1", "output": "ok"}
            ],
            "tools": [
                {"type": "function", "name": "exec_command", "strict": false, "parameters": {"type": "object"}},
                {"type": "namespace", "name": "multi_agent_v1", "tools": []},
                {"type": "web_search", "external_web_access": false},
                {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
                {"type": "tool_search", "execution": "client"}
            ],
            "tool_choice": "auto", "parallel_tool_calls": true,
            "reasoning": {"summary": "auto"}, "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "k", "client_metadata": {"a": "b"}, "text": {"verbosity": "low"}
        }))
        .unwrap();
        assert!(req.stream && !req.store);
        assert_eq!(req.system, ["You are Codex."]);
        assert_eq!(req.tools.tools.len(), 1);
        assert_eq!(req.tools_json.len(), 1);
        assert_eq!(req.messages.len(), 3);
        assert_eq!(req.messages[1].tool_calls[0].id, "call_1");
        assert_eq!(req.messages[2].tool_call_id.as_deref(), Some("call_1"));
    }

    #[test]
    fn agents_sdk_messages_without_type_and_a_string_input() {
        let req = parse_json(
            json!({"input": [{"role": "user", "content": "What is 6*7?"}],
            "instructions": "Use the tool."}),
        )
        .unwrap();
        assert_eq!(req.messages[0].content, "What is 6*7?");
        assert_eq!(req.instructions.as_deref(), Some("Use the tool."));
        let req = parse_json(json!({"input": "hi"})).unwrap();
        assert_eq!(req.messages[0].role, Role::User);
    }

    #[test]
    fn what_a_panel_cannot_honour_is_refused() {
        assert_eq!(
            code(json!({"model": "massgen"})),
            "missing_required_parameter"
        );
        assert_eq!(
            code(json!({"input": "x", "background": true})),
            "unsupported_parameter"
        );
        assert_eq!(
            code(json!({"input": "x", "prompt": {"id": "p"}})),
            "unsupported_parameter"
        );
        assert_eq!(
            code(json!({"input": "x", "conversation": "conv_1"})),
            "unsupported_parameter"
        );
        assert_eq!(
            code(json!({"input": "x", "top_logprobs": 3})),
            "unsupported_parameter"
        );
        assert_eq!(
            code(json!({"input": "x", "include": ["message.output_text.logprobs"]})),
            "unsupported_parameter"
        );
        assert_eq!(
            code(json!({"input": "x", "background": false, "text": {"format": {"type": "text"}}})),
            "ok"
        );
        assert_eq!(
            code(json!({"input": "x", "text": {"format": {"type": "json_schema"}}})),
            "invalid_value"
        );
        let req = parse_json(json!({"input": "x", "text": {"verbosity": "low",
            "format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}}}))
        .unwrap();
        assert!(matches!(req.output, Some(OutputFormat::JsonSchema { .. })));
        assert_eq!(req.text["format"]["name"], "n");
        assert_eq!(
            code(json!({"input": "x", "tools": [{"type": "file_search"}]})),
            "invalid_value"
        );
        assert_eq!(
            code(json!({"input": "x", "tools": [{"type": "function", "name": "vote"}]})),
            "tool_name_collision"
        );
        assert_eq!(
            code(json!({"input": [{"type": "message", "role": "user",
                "content": [{"type": "input_image", "image_url": "x"}]}]})),
            "invalid_image_url"
        );
        assert_eq!(
            code(json!({"input": [{"type": "message", "role": "user",
                "content": [{"type": "input_image", "file_id": "file_1"}]}]})),
            "invalid_message"
        );
        assert_eq!(
            code(json!({"input": [{"role": "assistant",
                "content": [{"type": "input_image", "image_url": "https://example.com/a.png"}]},
                {"role": "user", "content": "x"}]})),
            "invalid_message"
        );
        let req = parse_json(json!({"input": [{"role": "user", "content": [
            {"type": "input_text", "text": "What is it?"},
            {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"}]}]}))
        .unwrap();
        assert_eq!(req.messages[0].images.len(), 1);
        assert_eq!(req.messages[0].images[0].detail.as_deref(), Some("low"));
        assert_eq!(
            code(json!({"input": [{"type": "item_reference", "id": "msg_1"}]})),
            "invalid_message"
        );
        assert_eq!(
            code(json!({"input": "x", "metadata": {"k": 1}})),
            "invalid_value"
        );
        assert_eq!(
            code(json!({"input": "x", "max_output_tokens": 0})),
            "invalid_value"
        );
        assert_eq!(
            code(json!({"input": "x", "tool_choice": {"type": "function", "name": "nope"}})),
            "invalid_value"
        );
        assert_eq!(
            code(json!({"input": "x", "tool_choice": "required"})),
            "invalid_value"
        );
    }
}
