//! Parsing a Responses API request (`POST /v1/responses`). Lenient where OpenAI's own
//! clients send more than a panel can use (Codex's hosted and grammar tools, echoed
//! reasoning items, item ids, sampling settings), strict where ignoring a field would
//! change the answer (background mode, stored prompts, log probabilities).
//!
//! The body is read into serde-derived wire types ([`Body`], the items in [`input`])
//! through the one extractor every door uses, so a fault names its JSON path
//! (`input[2].content[0].text`); what they mean is checked here. `item_reference`s and
//! `encrypted_content` are kept as sent: resolving and verifying them needs the server
//! (see `history`).

mod input;

pub use input::{Entry, InputItem, Item, conversation};

use std::sync::Arc;

use massgen_core::coordination::ClientTools;
use massgen_core::provider::{OutputFormat, Sampling, ToolChoice, ToolSpec};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value, json};

use super::namespaces::{Namespaced, Namespaces, flat_name};
use crate::app::Overrides;
use crate::server::doors::narrate::Deliberation;
use crate::server::doors::parse::{self, WithShared, type_error, unsupported};
use crate::server::doors::tools::{self, ToolAt, choice_error, tools_error};
use crate::server::doors::{json, structured};
use crate::server::error::ApiError;

/// Tool types Codex sends with every request that a panel cannot offer: OpenAI-hosted
/// search (`web_search`), deferred tool loading (`tool_search`: the panel has no tool
/// search, so deferred functions are offered from the start) and grammar-constrained
/// free-form tools (`custom`, also inside a namespace). Codex works without them (it falls
/// back to its function tools), so they are left out of what the panel sees instead of
/// failing every Codex request. `namespace` tools are flattened (see `namespaces`).
const IGNORED_TOOL_TYPES: [&str; 3] = ["web_search", "tool_search", "custom"];

/// OpenAI's limits on `metadata`.
const METADATA_MAX_KEYS: usize = 16;
const METADATA_KEY_CHARS: usize = 64;
const METADATA_VALUE_CHARS: usize = 512;

/// The `include` value that asks for reasoning items' `encrypted_content`.
const ENCRYPTED_REASONING: &str = "reasoning.encrypted_content";
/// The `include` value that asks for log probabilities (refused).
const LOGPROBS: &str = "message.output_text.logprobs";

/// The parts of a request the server uses.
#[derive(Debug, Clone)]
pub struct ResponsesRequest {
    /// As sent (echoed); `massgen` when absent.
    pub model: String,
    pub stream: bool,
    /// Keep the response for `GET /v1/responses/{id}`, `previous_response_id` and
    /// `item_reference`.
    pub store: bool,
    pub deliberation: Deliberation,
    pub overrides: Overrides,
    /// For this request only (not carried to the next one, as in OpenAI's API).
    pub instructions: Option<String>,
    /// `input`, item by item (a string is one user message), references unresolved.
    pub input: Vec<InputItem>,
    /// `include` holds `reasoning.encrypted_content`: reasoning items carry one.
    pub encrypted_reasoning: bool,
    pub tools: ClientTools,
    /// The function and namespace tools as sent, echoed in the response.
    pub tools_json: Vec<Value>,
    /// The namespaced tools, by the flat names the agents know them by.
    pub namespaces: Arc<Namespaces>,
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

/// The request body. Fields not named here are accepted and ignored (see the module's
/// comment); those every door shares are read beside it (`parse::Shared`).
#[derive(Debug, Deserialize)]
struct Body {
    model: Option<String>,
    input: Option<input::TextOr<input::WireItem>>,
    instructions: Option<String>,
    stream: Option<bool>,
    store: Option<bool>,
    background: Option<bool>,
    conversation: Option<Value>,
    prompt: Option<Value>,
    include: Option<Vec<String>>,
    top_logprobs: Option<Value>,
    tools: Option<Vec<WireTool>>,
    /// Echoed as sent, so read as JSON.
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    text: Option<WireText>,
    metadata: Option<Map<String, Value>>,
    previous_response_id: Option<String>,
}

/// The answer's bound as the Responses API names it (it has no stop sequences).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Bounds {
    #[serde(deserialize_with = "max_output_tokens")]
    max_output_tokens: Option<u64>,
}

fn max_output_tokens<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    parse::count(d, "max_output_tokens")
}

/// A tool, whatever its type: function tools are offered to the panel (and echoed with
/// whatever else they hold), the types Codex sends are left out, others refused.
#[derive(Debug, Deserialize)]
struct WireTool {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    name: String,
    description: Option<String>,
    parameters: Option<Value>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

/// `text`: its `format` (a JSON Schema format is read by `structured`); `verbosity` and
/// the like are ignored.
#[derive(Debug, Deserialize)]
struct WireText {
    format: Option<Map<String, Value>>,
}

pub fn parse(body: &[u8]) -> Result<ResponsesRequest, ApiError> {
    let WithShared { door: body, shared } =
        json::read_in::<WithShared<Body, Bounds>>(body, "input")?;
    refuse_unsupported(&body)?;
    let tool_choice_json = body.tool_choice.clone().unwrap_or("auto".into());
    let Tools {
        tools,
        echoed: tools_json,
        namespaces,
    } = parse_tools(body.tools, body.tool_choice, body.parallel_tool_calls)?;
    let input = match body.input {
        Some(input) => input::read(input)?,
        None => {
            return Err(ApiError::invalid(
                "'input' is required",
                Some("input"),
                "missing_required_parameter",
            ));
        }
    };
    let (output, text) = text_format(body.text)?;
    Ok(ResponsesRequest {
        output,
        text,
        sampling: shared.sampling(),
        model: body
            .model
            .as_deref()
            .map_or("massgen", str::trim)
            .to_string(),
        stream: body.stream.unwrap_or(false),
        store: body.store.unwrap_or(true),
        deliberation: shared.massgen.native_deliberation("reasoning items")?,
        overrides: shared.massgen.overrides(),
        instructions: body.instructions,
        input,
        encrypted_reasoning: body
            .include
            .iter()
            .flatten()
            .any(|i| i == ENCRYPTED_REASONING),
        tool_choice_json,
        tools,
        tools_json,
        namespaces: Arc::new(namespaces),
        max_output_tokens: shared.bounds.max_output_tokens,
        previous_response_id: body.previous_response_id,
        metadata: check_metadata(body.metadata)?,
    })
}

/// Fields whose meaning a panel cannot honour.
fn refuse_unsupported(body: &Body) -> Result<(), ApiError> {
    if body.background == Some(true) {
        return Err(unsupported(
            "background",
            "'background' mode is not supported; stream the response or wait for it",
        ));
    }
    if body.conversation.is_some() {
        return Err(unsupported(
            "conversation",
            "'conversation' is not supported; continue with 'previous_response_id'",
        ));
    }
    if body.prompt.is_some() {
        return Err(unsupported(
            "prompt",
            "stored prompt templates ('prompt') are not supported",
        ));
    }
    // Log probabilities: the answer comes from several models (Chat Completions refuses
    // `logprobs` alike). Other `include` values only ask for what this server may leave
    // out (or gives: `reasoning.encrypted_content`).
    let logprobs_included = body.include.iter().flatten().any(|i| i == LOGPROBS);
    if logprobs_included || body.top_logprobs.is_some() {
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
fn text_format(text: Option<WireText>) -> Result<(Option<OutputFormat>, Value), ApiError> {
    const PARAM: &str = "text.format";
    let Some(format) = text.and_then(|t| t.format) else {
        return Ok((None, json!({"format": {"type": "text"}})));
    };
    let parsed = match format.get("type").and_then(Value::as_str) {
        Some("text") => None,
        Some("json_object") => Some(OutputFormat::JsonObject),
        Some("json_schema") => Some(structured::openai_spec(&format, PARAM)?),
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

/// The request's tools read: what the agents are offered, what the response echoes, and
/// the namespaced ones by their flat names.
struct Tools {
    tools: ClientTools,
    echoed: Vec<Value>,
    namespaces: Namespaces,
}

/// `tools`, `tool_choice` and `parallel_tool_calls`: function tools in the Responses shape
/// (`{"type":"function","name",…}`) and `namespace` tools holding them, flattened; no
/// name twice, at most [`tools::MAX_TOOLS`] tools in all, a namespace's counted.
fn parse_tools(
    list: Option<Vec<WireTool>>,
    choice: Option<Value>,
    parallel: Option<bool>,
) -> Result<Tools, ApiError> {
    let mut specs: Vec<ToolSpec> = Vec::new();
    let mut echoed = Vec::new();
    let mut namespaces = Namespaces::new();
    let list = list.unwrap_or_default();
    tools::check_count(list.len())?;
    for (i, tool) in list.into_iter().enumerate() {
        if IGNORED_TOOL_TYPES.contains(&tool.kind.as_str()) {
            continue;
        }
        if tool.kind == "namespace" {
            namespace(i, &tool, &mut specs, &mut namespaces)?;
            echoed.push(echo(tool));
            continue;
        }
        if tool.kind != "function" {
            return Err(tools_error(
                format!(
                    "tools[{i}]: tools of type '{}' are not supported (function and namespace tools only)",
                    tool.kind
                ),
                "invalid_value",
            ));
        }
        let spec = tools::tool_spec(
            &tool.name,
            tool.description.as_deref(),
            tool.parameters.as_ref(),
            &ToolAt {
                at: &format!("tools[{i}]"),
                schema_field: "parameters",
            },
        )?;
        tools::push_unique(&mut specs, i, spec)?;
        echoed.push(echo(tool));
    }
    let choice = match choice {
        None => None,
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
            Some(ToolChoice::Function(
                match o.get("namespace").and_then(Value::as_str) {
                    Some(ns) => flat_name(ns, name),
                    None => name.to_string(),
                },
            ))
        }
        Some(Value::Object(_)) => return Err(choice_error(CHOICE_FORMS.into())),
        Some(_) => return Err(type_error("tool_choice", "a string or an object")),
    };
    Ok(Tools {
        tools: tools::client_tools(specs, choice, parallel, "required")?,
        echoed,
        namespaces,
    })
}

/// The function tools of the `namespace` tool `tools[i]`, flattened into `specs` (see
/// `namespaces`); its `custom` tools are left out as at the top level.
fn namespace(
    i: usize,
    tool: &WireTool,
    specs: &mut Vec<ToolSpec>,
    namespaces: &mut Namespaces,
) -> Result<(), ApiError> {
    if tool.name.is_empty() {
        return Err(tools_error(
            format!("tools[{i}]: a namespace tool needs a 'name'"),
            "invalid_value",
        ));
    }
    let Some(Value::Array(inner)) = tool.rest.get("tools") else {
        return Err(tools_error(
            format!("tools[{i}].tools must be an array of function tools"),
            "invalid_type",
        ));
    };
    // Before reading them: a namespace's tools count against the bound like the others.
    tools::check_count(specs.len() + inner.len())?;
    for (j, item) in inner.iter().enumerate() {
        let at = format!("tools[{i}].tools[{j}]");
        let kind = item.get("type").and_then(Value::as_str).unwrap_or_default();
        if kind == "custom" {
            continue;
        }
        let name = item.get("name").and_then(Value::as_str).unwrap_or_default();
        if kind != "function" || name.is_empty() {
            return Err(tools_error(
                format!(
                    "{at}: a namespace holds function tools with a 'name' (and custom tools, left out)"
                ),
                "invalid_value",
            ));
        }
        let flat = flat_name(&tool.name, name);
        let spec = tools::tool_spec(
            &flat,
            item.get("description").and_then(Value::as_str),
            item.get("parameters"),
            &ToolAt {
                at: &at,
                schema_field: "parameters",
            },
        )?;
        tools::push_unique(specs, i, spec)?;
        namespaces.insert(
            flat,
            Namespaced {
                namespace: tool.name.clone(),
                name: name.to_string(),
            },
        );
    }
    Ok(())
}

const CHOICE_FORMS: &str = "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": …}";

/// A function tool as the client sent it, for the response's `tools`.
fn echo(tool: WireTool) -> Value {
    let mut object = tool.rest;
    object.insert("type".into(), tool.kind.into());
    object.insert("name".into(), tool.name.into());
    if let Some(description) = tool.description {
        object.insert("description".into(), description.into());
    }
    if let Some(parameters) = tool.parameters {
        object.insert("parameters".into(), parameters);
    }
    Value::Object(object)
}

/// Up to 16 string values, keys of at most 64 characters, values of at most 512.
fn check_metadata(map: Option<Map<String, Value>>) -> Result<Map<String, Value>, ApiError> {
    let map = map.unwrap_or_default();
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
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use massgen_core::provider::{Message, Role};
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

    /// The input as a conversation, references left out.
    fn flat(req: &ResponsesRequest) -> (Vec<String>, Vec<Message>) {
        conversation(req.input.iter().filter_map(|i| match &i.entry {
            Entry::Item(item) => Some(item.clone()),
            _ => None,
        }))
    }

    #[test]
    fn the_shared_fields_are_not_the_doors_own() {
        assert!(parse::overlap::<Body, Bounds>().is_empty());
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
        assert!(req.stream && !req.store && req.encrypted_reasoning);
        let (system, messages) = flat(&req);
        assert_eq!(system, ["You are Codex."]);
        assert_eq!(req.tools.tools.len(), 1);
        assert_eq!(
            req.tools_json,
            [
                json!({"type": "function", "name": "exec_command", "strict": false,
                "parameters": {"type": "object"}}),
                json!({"type": "namespace", "name": "multi_agent_v1", "tools": []})
            ]
        );
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1].tool_calls[0].id, "call_1");
        assert_eq!(messages[2].tool_call_id.as_deref(), Some("call_1"));
        let ids: Vec<_> = req.input.iter().map(|i| i.id.as_deref()).collect();
        assert_eq!(
            ids,
            [
                Some("msg_1"),
                None,
                Some("rs_1"),
                Some("fc_1"),
                Some("fco_1")
            ]
        );
        assert!(matches!(req.input[2].entry, Entry::Reasoning(None)));
    }

    #[test]
    fn namespace_tools_are_flattened_for_the_agents() {
        // Codex 0.169's MCP tools, a call it echoes and a choice naming one.
        let req = parse_json(json!({
            "input": [
                {"role": "user", "content": "Find the issue"},
                {"type": "function_call", "call_id": "c1", "name": "search_issues",
                 "namespace": "mcp__github", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "none"}
            ],
            "tools": [
                {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
                {"type": "namespace", "name": "mcp__github", "description": "GitHub MCP tools",
                 "tools": [
                    {"type": "function", "name": "search_issues", "description": "Search issues",
                     "strict": false, "defer_loading": true,
                     "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
                    {"type": "custom", "name": "patch", "format": {"type": "grammar"}}]}
            ],
            "tool_choice": {"type": "function", "namespace": "mcp__github", "name": "search_issues"}
        }))
        .unwrap();
        let names: Vec<&str> = req.tools.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["exec_command", "mcp__github__search_issues"]);
        assert_eq!(req.tools.tools[1].description, "Search issues");
        assert_eq!(
            req.tools.choice,
            Some(ToolChoice::Function("mcp__github__search_issues".into()))
        );
        assert_eq!(
            req.namespaces["mcp__github__search_issues"],
            Namespaced {
                namespace: "mcp__github".into(),
                name: "search_issues".into()
            }
        );
        assert_eq!(req.tools_json[1]["type"], "namespace");
        let (_, messages) = flat(&req);
        assert_eq!(messages[1].tool_calls[0].name, "mcp__github__search_issues");

        for (tools, problem) in [
            (
                json!([{"type": "namespace", "name": "ns"}]),
                "tools[0].tools must be an array",
            ),
            (
                json!([{"type": "namespace", "name": "ns", "tools": [{"type": "mcp"}]}]),
                "tools[0].tools[0]: a namespace holds function tools",
            ),
            (
                json!([{"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "f"}]},
                    {"type": "function", "name": "ns__f"}]),
                "the name 'ns__f' is used twice",
            ),
            (
                json!([{"type": "namespace", "name": "ns",
                    "tools": [{"type": "function", "name": "new", "parameters": 3}]}]),
                "tools[0].tools[0].parameters must be a JSON Schema object",
            ),
        ] {
            let e = parse_json(json!({"input": "x", "tools": tools})).unwrap_err();
            assert_eq!(e.param(), Some("tools"));
            assert!(e.message().contains(problem), "{}", e.message());
        }
        // A namespace's tools count against the bound.
        let many: Vec<Value> = (0..tools::MAX_TOOLS)
            .map(|n| json!({"type": "function", "name": format!("f{n}")}))
            .collect();
        let e = parse_json(json!({"input": "x", "tools": [
            {"type": "function", "name": "g"},
            {"type": "namespace", "name": "ns", "tools": many}]}))
        .unwrap_err();
        assert!(e.message().contains("at most 256"), "{}", e.message());
    }

    #[test]
    fn agents_sdk_messages_without_type_and_a_string_input() {
        let req = parse_json(
            json!({"input": [{"role": "user", "content": "What is 6*7?"}],
            "instructions": "Use the tool."}),
        )
        .unwrap();
        assert_eq!(flat(&req).1[0].content, "What is 6*7?");
        assert_eq!(req.instructions.as_deref(), Some("Use the tool."));
        assert!(!req.encrypted_reasoning);
        let req = parse_json(json!({"input": "hi"})).unwrap();
        assert_eq!(flat(&req).1[0].role, Role::User);
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
            code(
                json!({"input": "x", "background": false, "conversation": null,
                "text": {"format": {"type": "text"}}})
            ),
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
            code(
                json!({"input": "x", "tools": [{"type": "function", "name": "f"},
                {"type": "function", "name": "f"}]})
            ),
            "invalid_value"
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
        let (_, messages) = flat(&req);
        assert_eq!(messages[0].images.len(), 1);
        assert_eq!(messages[0].images[0].detail.as_deref(), Some("low"));
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
        assert_eq!(
            code(json!({"input": "x", "tool_choice": 3})),
            "invalid_type"
        );
        assert_eq!(code(json!([1])), "invalid_json");
        assert_eq!(code(json!("x")), "invalid_json");
    }
}
