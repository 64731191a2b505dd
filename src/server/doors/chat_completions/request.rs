//! Reading a Chat Completions request from its serde-derived wire types, through
//! [`json::read`], so a misshapen field is a 400 naming its JSON path
//! (`messages[2].content[0].image_url`). Lenient where clients differ (unknown fields,
//! string or content-part messages, sampling settings the panel config owns, odd values
//! in fields nothing depends on), strict where a mistake or an ignored field would change
//! the answer (several choices, log probabilities, audio, hosted web search, the legacy
//! function fields).

use massgen_core::coordination::{AnswerBounds, ClientTools, SessionInput};
use massgen_core::provider::{Image, Message, OutputFormat, ToolCall, ToolChoice, ToolSpec};
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use crate::app::Overrides;
use crate::config::DeliberationFormat;
use crate::server::doors::narrate::Deliberation;
use crate::server::doors::parse::shape::{Loose, Obj, TextOrList, TextOrObject};
use crate::server::doors::parse::{self, WithShared, type_error, unsupported};
use crate::server::doors::tools::{self, ToolAt, choice_error, tools_error};
use crate::server::doors::{conversation, images, json, limit, structured};
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

// ---------------------------------------------------------------------------------------
// The wire types. Fields not named are accepted and ignored (penalties, `user`, `store`,
// `metadata`, `reasoning_effort`, `service_tier`, …: each agent's model settings come from
// its panel config).

#[derive(Deserialize, Default)]
#[serde(default)]
struct Body {
    model: Option<String>,
    messages: Option<Vec<Obj<WireMessage>>>,
    stream: Option<bool>,
    stream_options: Option<Obj<StreamOptions>>,
    tools: Option<Vec<Obj<Tool>>>,
    tool_choice: Option<TextOrObject<NamedChoice>>,
    parallel_tool_calls: Option<bool>,
    response_format: Option<Obj<ResponseFormat>>,
    // Refused when they ask for what a panel cannot give ([`refuse_unsupported`]).
    n: Loose<u64>,
    logprobs: Option<bool>,
    top_logprobs: Option<IgnoredAny>,
    modalities: Loose<Vec<Loose<String>>>,
    audio: Option<IgnoredAny>,
    functions: Option<IgnoredAny>,
    function_call: Option<IgnoredAny>,
    web_search_options: Option<IgnoredAny>,
}

/// The body: the door's fields and those every door shares, with this door's bounds.
type Wire = WithShared<Body, Bounds>;

/// The answer's bounds as Chat Completions names them: `max_completion_tokens`, or the
/// older `max_tokens` when it is absent (only the one used is checked), and `stop`.
#[derive(Default, Deserialize)]
#[serde(try_from = "WireBounds")]
struct Bounds {
    max_tokens: Option<u64>,
    stop: Vec<String>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct WireBounds {
    #[serde(deserialize_with = "max_completion_tokens")]
    max_completion_tokens: Option<u64>,
    max_tokens: Option<Value>,
    /// A string, or a list of at most [`MAX_STOPS`].
    #[serde(deserialize_with = "stop")]
    stop: Vec<String>,
}

impl TryFrom<WireBounds> for Bounds {
    type Error = json::Fault;

    fn try_from(wire: WireBounds) -> Result<Self, json::Fault> {
        let max_tokens = match (wire.max_completion_tokens, wire.max_tokens) {
            (Some(n), _) => Some(n),
            (None, None) => None,
            (None, Some(v)) => Some(parse::count_of(&v, "max_tokens").map_err(json::Fault)?),
        };
        Ok(Self {
            max_tokens,
            stop: wire.stop,
        })
    }
}

fn max_completion_tokens<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    parse::count(d, "max_completion_tokens")
}

fn stop<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    parse::stops(d, "stop", MAX_STOPS, true)
}

#[derive(Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
struct WireMessage {
    /// Matched by the mapping rather than read as an enum: serde_json reads a derived enum
    /// from a number or `null` as a syntax error, whose 400 would say the body is not JSON.
    role: String,
    content: Option<TextOrList<Obj<Part>>>,
    tool_calls: Option<Vec<Obj<WireToolCall>>>,
    #[serde(default)]
    tool_call_id: Loose<String>,
}

/// One content part. Its type decides which other field is read, so each is optional here
/// and required by the mapping.
#[derive(Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    /// A URL string (older clients) or `{"url", "detail"}`.
    image_url: Option<TextOrObject<ImageUrl>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ImageUrl {
    url: Option<String>,
    detail: Loose<String>,
}

/// An assistant's earlier call. Its fields have always been read leniently (an odd one is
/// empty): clients echo calls back in many shapes.
#[derive(Deserialize, Default)]
#[serde(default)]
struct WireToolCall {
    id: Loose<String>,
    function: Option<Obj<CalledFunction>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CalledFunction {
    name: Loose<String>,
    arguments: Loose<String>,
}

/// A client tool: an absent `type` is a function; a missing or odd name is refused by
/// the name check.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Tool {
    #[serde(rename = "type")]
    kind: Loose<String>,
    function: Option<Obj<ToolFunction>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ToolFunction {
    name: Loose<String>,
    description: Loose<String>,
    /// A JSON Schema: any JSON here, checked by [`tools::tool_spec`].
    parameters: Option<Value>,
}

/// `tool_choice` as an object: `{"type": "function", "function": {"name": …}}`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct NamedChoice {
    function: Loose<Map<String, Value>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ResponseFormat {
    #[serde(rename = "type")]
    kind: Loose<String>,
    /// OpenAI's keys (`name`, `description`, `schema`, `strict`), read by
    /// [`structured::openai_spec`] as the Responses door reads its `text.format`.
    json_schema: Loose<Map<String, Value>>,
}

// ---------------------------------------------------------------------------------------
// The mapping into the neutral request.

pub fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
    read(json::read_in(body, "messages")?)
}

/// The door's typed entry for another edge (`massgen eval`): a request built as JSON, read
/// as a body is, with the same checks and the same session input.
pub fn from_value(body: Value) -> Result<ChatRequest, ApiError> {
    read(json::read_value_in(body, "messages")?)
}

fn read(WithShared { door: wire, shared }: Wire) -> Result<ChatRequest, ApiError> {
    refuse_unsupported(&wire)?;
    let include_usage = wire
        .stream_options
        .and_then(|Obj(o)| o.include_usage)
        .unwrap_or(false);
    let tools = client_tools(wire.tools, wire.tool_choice, wire.parallel_tool_calls)?;
    let (system, messages) = messages(wire.messages)?;
    let mut input = conversation::session_input(system, messages, tools, "messages")?;
    input.sampling = shared.sampling();
    let Bounds { max_tokens, stop } = shared.bounds;
    let stream = wire.stream.unwrap_or(false);
    input.answer_bounds = AnswerBounds {
        max_output_tokens: limit::upstream_cap(max_tokens),
        stop: stop.clone(),
    };
    input.streamed = stream;
    input.output = response_format(wire.response_format.map(|Obj(f)| f))?
        .map(|format| structured::output(format, stream))
        .transpose()?;

    Ok(ChatRequest {
        model: wire
            .model
            .as_deref()
            .map_or("massgen", str::trim)
            .to_string(),
        stream,
        include_usage,
        deliberation: shared.massgen.deliberation,
        overrides: shared.massgen.overrides(),
        deliberation_format: shared.massgen.deliberation_format,
        input,
        max_tokens,
        stop,
    })
}

/// Fields whose meaning a panel cannot honour: ignoring them would hand the client
/// something other than what it asked for. Their neutral values (`n: 1`,
/// `logprobs: false`, `modalities: ["text"]`, nulls) are what OpenAI's clients send.
fn refuse_unsupported(wire: &Body) -> Result<(), ApiError> {
    if wire.n.0.is_some_and(|n| n != 1) {
        return Err(unsupported(
            "n",
            "'n' other than 1 is not supported: a panel gives one answer",
        ));
    }
    if wire.logprobs == Some(true) || wire.top_logprobs.is_some() {
        return Err(unsupported(
            "logprobs",
            "log probabilities are not supported: the answer comes from several models",
        ));
    }
    let audio_out = wire
        .modalities
        .0
        .iter()
        .flatten()
        .any(|m| m.0.as_deref() == Some("audio"));
    if audio_out || wire.audio.is_some() {
        return Err(unsupported("audio", "audio output is not supported"));
    }
    for (legacy, sent) in [
        ("functions", wire.functions.is_some()),
        ("function_call", wire.function_call.is_some()),
    ] {
        if sent {
            return Err(unsupported(
                legacy,
                &format!(
                    "the legacy '{legacy}' field is not supported: send 'tools' and 'tool_choice'"
                ),
            ));
        }
    }
    if wire.web_search_options.is_some() {
        return Err(unsupported(
            "web_search_options",
            "hosted web search is not supported: agents use the tools of their own config",
        ));
    }
    Ok(())
}

/// `response_format`: `text` (or none), `json_object`, or `json_schema` with
/// `json_schema.{name, description, schema, strict}`.
fn response_format(format: Option<ResponseFormat>) -> Result<Option<OutputFormat>, ApiError> {
    const PARAM: &str = "response_format";
    let Some(format) = format else {
        return Ok(None);
    };
    match format.kind.0.as_deref() {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(OutputFormat::JsonObject)),
        Some("json_schema") => match format.json_schema.0 {
            Some(spec) => structured::openai_spec(&spec, PARAM).map(Some),
            None => Err(type_error("response_format.json_schema", "an object")),
        },
        _ => Err(ApiError::invalid(
            "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"",
            Some(PARAM),
            "invalid_value",
        )),
    }
}

/// `tools`, `tool_choice` and `parallel_tool_calls`. Only function tools exist here.
fn client_tools(
    list: Option<Vec<Obj<Tool>>>,
    choice: Option<TextOrObject<NamedChoice>>,
    parallel: Option<bool>,
) -> Result<ClientTools, ApiError> {
    let mut specs: Vec<ToolSpec> = Vec::new();
    let list = list.unwrap_or_default();
    tools::check_count(list.len())?;
    for (i, Obj(tool)) in list.into_iter().enumerate() {
        let spec = client_tool(i, tool)?;
        tools::push_unique(&mut specs, i, spec)?;
    }
    let choice = match choice {
        None => None,
        Some(TextOrObject::Text(mode)) => Some(match mode.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            _ => {
                return Err(choice_error(
                    "'tool_choice' must be \"none\", \"auto\", \"required\" or a function".into(),
                ));
            }
        }),
        Some(TextOrObject::Object(named)) => {
            let name = named
                .function
                .0
                .and_then(|f| f.get("name").and_then(Value::as_str).map(str::to_string))
                .ok_or_else(|| choice_error("'tool_choice' needs function.name".into()))?;
            Some(ToolChoice::Function(name))
        }
    };
    tools::client_tools(specs, choice, parallel, "required")
}

fn client_tool(i: usize, tool: Tool) -> Result<ToolSpec, ApiError> {
    let kind = tool.kind.0.as_deref().unwrap_or("function");
    if kind != "function" {
        return Err(tools_error(
            format!("tools[{i}]: only function tools are supported (got type '{kind}')"),
            "invalid_value",
        ));
    }
    let (name, description, parameters) = match tool.function {
        Some(Obj(f)) => (f.name.0, f.description.0, f.parameters),
        None => (None, None, None),
    };
    tools::tool_spec(
        name.as_deref().unwrap_or_default(),
        description.as_deref(),
        parameters.as_ref(),
        &ToolAt {
            at: &format!("tools[{i}].function"),
            schema_field: "parameters",
        },
    )
}

/// The system texts and the other messages, in order.
fn messages(list: Option<Vec<Obj<WireMessage>>>) -> Result<(Vec<String>, Vec<Message>), ApiError> {
    let list = match list {
        None => {
            return Err(ApiError::invalid(
                "'messages' is required",
                Some("messages"),
                "missing_required_parameter",
            ));
        }
        Some(list) if list.is_empty() => {
            return Err(ApiError::invalid(
                "'messages' must contain at least one message",
                Some("messages"),
                "empty_array",
            ));
        }
        Some(list) => list,
    };
    let mut system = Vec::new();
    let mut rest = Vec::with_capacity(list.len());
    for (i, Obj(m)) in list.into_iter().enumerate() {
        // Images come in user messages and in tool results (a screenshot a tool returned).
        let (content, images) = content(i, m.content, m.role == "user" || m.role == "tool")?;
        match m.role.as_str() {
            "system" | "developer" => system.push(content),
            "user" => {
                let mut message = Message::user(content);
                message.images = images;
                rest.push(message);
            }
            "assistant" => {
                let mut message = Message::assistant(content);
                let calls = m.tool_calls.unwrap_or_default();
                message.tool_calls = calls.into_iter().map(|Obj(c)| tool_call(c)).collect();
                rest.push(message);
            }
            "tool" => {
                let id = m.tool_call_id.0.unwrap_or_default();
                let mut message = Message::tool_result(id, content);
                message.images = images;
                rest.push(message);
            }
            other => {
                return Err(message_error(
                    format!("messages[{i}].role"),
                    &format!(
                        "unknown role '{other}' (expected system, developer, user, assistant or tool)"
                    ),
                ));
            }
        }
    }
    Ok((system, rest))
}

fn tool_call(call: WireToolCall) -> ToolCall {
    let (name, arguments) = match call.function {
        Some(Obj(f)) => (f.name.0, f.arguments.0),
        None => (None, None),
    };
    ToolCall {
        id: call.id.0.unwrap_or_default(),
        name: name.unwrap_or_default(),
        arguments: arguments.unwrap_or_default(),
        opaque: None,
    }
}

/// A message's text (its text parts joined by line breaks) and, in user and tool
/// messages (`with_images`), its images.
fn content(
    index: usize,
    content: Option<TextOrList<Obj<Part>>>,
    with_images: bool,
) -> Result<(String, Vec<Image>), ApiError> {
    let parts = match content {
        None => return Ok((String::new(), Vec::new())),
        Some(TextOrList::Text(text)) => return Ok((text, Vec::new())),
        Some(TextOrList::List(parts)) => parts,
    };
    let mut texts = Vec::with_capacity(parts.len());
    let mut images = Vec::new();
    for (j, Obj(part)) in parts.into_iter().enumerate() {
        let at = || format!("messages[{index}].content[{j}]");
        match part.kind.as_str() {
            "text" | "input_text" => match part.text {
                Some(text) => texts.push(text),
                // A missing text is the client's mistake, not an empty text.
                None => {
                    return Err(message_error(
                        at(),
                        &format!("a '{}' part needs a 'text' string", part.kind),
                    ));
                }
            },
            "image_url" if !with_images => {
                return Err(message_error(
                    at(),
                    "an image part; images are accepted in user and tool messages only",
                ));
            }
            "image_url" => images.push(image(part.image_url, &at())?),
            other => {
                return Err(message_error(
                    at(),
                    &format!("a '{other}' part; only text and image parts are supported"),
                ));
            }
        }
    }
    Ok((texts.join("\n"), images))
}

/// `{"type": "image_url", "image_url": {"url": …, "detail": …}}` (or the older bare
/// string `image_url`).
fn image(image_url: Option<TextOrObject<ImageUrl>>, at: &str) -> Result<Image, ApiError> {
    let (url, detail) = match image_url {
        Some(TextOrObject::Text(url)) => (Some(url), None),
        Some(TextOrObject::Object(o)) => (o.url, o.detail.0),
        None => (None, None),
    };
    let Some(url) = url else {
        return Err(message_error(
            format!("{at}.image_url.url"),
            "required: an https or data: URL",
        ));
    };
    // The param stays `messages`, as for every image refused.
    images::from_url(&url, detail.as_deref()).map_err(|r| r.at("messages", at))
}

fn message_error(path: String, problem: &str) -> ApiError {
    ApiError::invalid_at(format!("'{path}': {problem}"), path, "invalid_message")
}

#[cfg(test)]
mod tests;
