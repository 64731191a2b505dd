//! Parsing a Chat Completions request: lenient where clients differ (unknown fields,
//! string or content-part messages, sampling settings the panel config owns), strict where
//! a mistake or an ignored field would change the answer (several choices, log
//! probabilities, audio, hosted web search).

use massgen_core::coordination::{AnswerBounds, ClientTools, SessionInput};
use massgen_core::provider::{Image, Message, OutputFormat, ToolCall, ToolChoice, ToolSpec};
use serde_json::{Map, Value};

use crate::app::Overrides;
use crate::config::DeliberationFormat;
use crate::server::doors::narrate::Deliberation;
use crate::server::doors::parse::{self, optional_bool, optional_count, type_error, unsupported};
use crate::server::doors::tools::{self, ToolAt, choice_error, tools_error};
use crate::server::doors::{conversation, images, limit, structured};
use crate::server::error::ApiError;

/// The parts of a request the server uses.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// As sent (echoed in responses); `massgen` when absent.
    pub model: String,
    pub stream: bool,
    pub include_usage: bool,
    pub deliberation: Deliberation,
    pub overrides: Overrides,
    /// `massgen.deliberation_format`, when sent.
    pub deliberation_format: Option<DeliberationFormat>,
    pub input: SessionInput,
    /// Bounds the final answer (estimated tokens): `max_completion_tokens`, or the older
    /// `max_tokens`.
    pub max_tokens: Option<u64>,
    /// The answer stops before the first of these.
    pub stop: Vec<String>,
}

/// OpenAI's bound on `stop`.
const MAX_STOPS: usize = 4;

pub fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let obj = parse::object(body)?;
    refuse_unsupported(&obj)?;
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
    let overrides = parse::overrides(&obj)?;
    let tools = parse_client_tools(&obj)?;
    let (system, messages) = parse_messages(obj.get("messages"))?;
    let mut input = conversation::session_input(system, messages, tools, "messages")?;
    let max_tokens = match optional_count(&obj, "max_completion_tokens")? {
        Some(n) => Some(n),
        None => optional_count(&obj, "max_tokens")?,
    };
    let stop = parse::stops(&obj, "stop", MAX_STOPS, true)?;
    input.answer_bounds = AnswerBounds {
        max_output_tokens: limit::upstream_cap(max_tokens),
        stop: stop.clone(),
    };
    input.sampling = parse::sampling(&obj)?;
    input.output = response_format(&obj)?
        .map(|format| structured::output(format, stream))
        .transpose()?;

    Ok(ChatRequest {
        model,
        stream,
        include_usage,
        deliberation,
        overrides,
        deliberation_format: parse::deliberation_format(&obj)?,
        input,
        max_tokens,
        stop,
    })
}

/// `response_format`: `text` (or none), `json_object`, or `json_schema` with
/// `json_schema.{name, description, schema, strict}`.
fn response_format(obj: &Map<String, Value>) -> Result<Option<OutputFormat>, ApiError> {
    const PARAM: &str = "response_format";
    let format = match obj.get(PARAM) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(f)) => f,
        Some(_) => return Err(type_error(PARAM, "an object")),
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(OutputFormat::JsonObject)),
        Some("json_schema") => {
            let Some(Value::Object(spec)) = format.get("json_schema") else {
                return Err(type_error("response_format.json_schema", "an object"));
            };
            structured::openai_spec(spec, PARAM).map(Some)
        }
        _ => Err(ApiError::invalid(
            "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"",
            Some(PARAM),
            "invalid_value",
        )),
    }
}

/// Fields whose meaning a panel cannot honour: ignoring them would hand the client
/// something other than what it asked for.
fn refuse_unsupported(obj: &Map<String, Value>) -> Result<(), ApiError> {
    let present = |key: &str| obj.get(key).is_some_and(|v| !v.is_null());
    if obj.get("n").and_then(Value::as_u64).is_some_and(|n| n != 1) {
        return Err(unsupported(
            "n",
            "'n' other than 1 is not supported: a panel gives one answer",
        ));
    }
    if optional_bool(obj, "logprobs")? == Some(true) || present("top_logprobs") {
        return Err(unsupported(
            "logprobs",
            "log probabilities are not supported: the answer comes from several models",
        ));
    }
    let audio_out = obj
        .get("modalities")
        .and_then(Value::as_array)
        .is_some_and(|m| m.iter().any(|m| m.as_str() == Some("audio")));
    if audio_out || present("audio") {
        return Err(unsupported("audio", "audio output is not supported"));
    }
    for legacy in ["functions", "function_call"] {
        if present(legacy) {
            return Err(unsupported(
                legacy,
                &format!(
                    "the legacy '{legacy}' field is not supported: send 'tools' and 'tool_choice'"
                ),
            ));
        }
    }
    if present("web_search_options") {
        return Err(unsupported(
            "web_search_options",
            "hosted web search is not supported: agents use the tools of their own config",
        ));
    }
    Ok(())
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
        let (content, images) = content_parts(i, m.get("content"), role == "user")?;
        match role {
            "system" | "developer" => system.push(content),
            "user" => {
                let mut message = Message::user(content);
                message.images = images;
                rest.push(message);
            }
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

/// A string, null, or an array of content parts whose text parts are joined; `image_url`
/// parts are images, accepted in user messages only.
fn content_parts(
    index: usize,
    content: Option<&Value>,
    user: bool,
) -> Result<(String, Vec<Image>), ApiError> {
    parse::text_and_images(
        content,
        |kind| matches!(kind, "text" | "input_text").then_some("text"),
        |kind, part| (kind == "image_url").then(|| image_part(index, part, user)),
        |problem| message_error(index, problem),
    )
}

/// `{"type": "image_url", "image_url": {"url": …, "detail": …}}` (or the older bare
/// string `image_url`).
fn image_part(index: usize, part: &Value, user: bool) -> Result<Image, ApiError> {
    let place = format!("messages[{index}]");
    if !user {
        return Err(message_error(
            index,
            "has an image part; images are accepted in user messages only",
        ));
    }
    let (url, detail) = match part.get("image_url") {
        Some(Value::String(url)) => (Some(url.as_str()), None),
        Some(Value::Object(o)) => (
            o.get("url").and_then(Value::as_str),
            o.get("detail").and_then(Value::as_str),
        ),
        _ => (None, None),
    };
    let Some(url) = url else {
        return Err(message_error(
            index,
            "has an 'image_url' part without 'image_url.url'",
        ));
    };
    images::from_url(url, detail).map_err(|r| r.at("messages", &place))
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

    /// Each row of the README's Chat Completions request table that refuses or bounds.
    #[test]
    fn what_a_panel_cannot_honour_is_refused_and_bounds_are_read() {
        let with = |extra: Value| {
            let mut body = serde_json::json!({"messages": [{"role": "user", "content": "x"}]});
            if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
                b.extend(e);
            }
            parse_json(body)
        };
        let code = |extra: Value| match with(extra) {
            Err(e) => e.code(),
            Ok(_) => "ok",
        };
        use serde_json::json;
        for refused in [
            json!({"n": 2}),
            json!({"logprobs": true}),
            json!({"top_logprobs": 2}),
            json!({"modalities": ["text", "audio"]}),
            json!({"audio": {"voice": "alloy", "format": "wav"}}),
            json!({"web_search_options": {}}),
            json!({"functions": [{"name": "f", "parameters": {}}]}),
            json!({"function_call": "auto"}),
        ] {
            assert_eq!(code(refused.clone()), "unsupported_parameter", "{refused}");
        }
        // What the panel config owns, and the neutral values of the refused fields.
        assert_eq!(
            code(
                json!({"response_format": {"type": "text"}, "n": 1, "logprobs": false,
                "modalities": ["text"], "temperature": 0.2, "top_p": 0.9, "seed": 7,
                "presence_penalty": 0.1, "frequency_penalty": 0.1, "reasoning_effort": "low",
                "service_tier": "auto", "user": "u", "store": true, "metadata": {"a": "b"}})
            ),
            "ok"
        );
        let req = with(json!({"max_tokens": 7, "stop": "END"})).unwrap();
        assert_eq!(
            (req.max_tokens, req.stop),
            (Some(7), vec!["END".to_string()])
        );
        let req =
            with(json!({"max_completion_tokens": 5, "max_tokens": 7, "stop": ["a", "b"]})).unwrap();
        assert_eq!((req.max_tokens, req.stop.len()), (Some(5), 2));
        assert_eq!(code(json!({"max_completion_tokens": 0})), "invalid_value");
        assert_eq!(
            code(json!({"stop": ["a", "b", "c", "d", "e"]})),
            "invalid_value"
        );
        assert_eq!(code(json!({"stop": [""]})), "invalid_value");
        assert_eq!(code(json!({"stop": 3})), "invalid_type");
    }

    #[test]
    fn image_parts_of_user_messages_become_images() {
        use massgen_core::provider::ImageSource;
        use serde_json::json;
        let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
        let image =
            |url: &str| json!({"type": "image_url", "image_url": {"url": url, "detail": "high"}});
        let req = parse_json(json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                image(&format!("data:image/png;base64,{png}"))]},
            {"role": "assistant", "content": "A dot."},
            {"role": "user", "content": [image("https://example.com/b.jpg"),
                {"type": "image_url", "image_url": "https://example.com/c.webp"}]}
        ]}))
        .unwrap();
        assert_eq!(req.input.history[0].images.len(), 1);
        assert_eq!(
            req.input.history[0].images[0].detail.as_deref(),
            Some("high")
        );
        assert_eq!(req.input.question, "", "an image alone is a question");
        assert_eq!(
            req.input.question_images[1].source,
            ImageSource::Url {
                url: "https://example.com/c.webp".into()
            }
        );
        let refused = |messages: Value| match parse_json(json!({"messages": messages})) {
            Err(e) => (e.code(), e.message()),
            Ok(_) => ("ok", String::new()),
        };
        let (code, message) =
            refused(json!([{"role": "user", "content": [image("http://example.com/a.png")]}]));
        assert_eq!(code, "invalid_image_url");
        assert!(
            message.contains("messages[0]") && message.contains("https"),
            "{message}"
        );
        let (code, _) = refused(
            json!([{"role": "system", "content": [image("https://example.com/a.png")]},
            {"role": "user", "content": "x"}]),
        );
        assert_eq!(code, "invalid_message");
        let many: Vec<Value> = (0..=images::MAX_IMAGES)
            .map(|_| image("https://example.com/a.png"))
            .collect();
        let (code, message) = refused(json!([{"role": "user", "content": many}]));
        assert_eq!(code, "too_many_images");
        assert!(
            message.contains(&images::MAX_IMAGES.to_string()),
            "{message}"
        );
        let (code, _) = refused(json!([{"role": "user", "content": [{"type": "image_url"}]}]));
        assert_eq!(code, "invalid_message");
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
