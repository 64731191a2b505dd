//! Parsing an Anthropic Messages request (`POST /v1/messages`) from its serde-derived wire
//! types, read through [`json::read`] so a misshapen field is a 400 naming its JSON path
//! (`messages[1].content[0].type`). Lenient where Claude Code and the SDK send more than a
//! panel can use (`cache_control` anywhere, echoed `thinking` and `redacted_thinking`
//! blocks, `thinking`, `context_management`, `output_config.effort`, `top_k`, sampling
//! settings), strict where ignoring a field would change the answer (documents in user
//! turns, Anthropic's own server and client tool types, MCP connectors) or where a thinking
//! block's `signature` says it was made elsewhere. A `tool_result` takes every block type
//! Anthropic documents for it (`results`); tools with `defer_loading` are offered once a
//! `tool_reference` in the conversation loads them (Claude Code's tool search).

use std::collections::HashSet;

use massgen_core::coordination::ClientTools;
use massgen_core::provider::{
    Image, Message, OutputFormat, Sampling, ToolCall, ToolChoice, ToolSpec,
};
use serde_json::Value;

use crate::app::Overrides;
use crate::server::doors::limit::estimate_tokens;
use crate::server::doors::narrate::Deliberation;
use crate::server::doors::parse::WithShared;
use crate::server::doors::parse::shape::Obj;
use crate::server::doors::reasoning::Signer;
use crate::server::doors::tools::{self, ToolAt, choice_error, tools_error};
use crate::server::doors::{images, json, parse, structured};
use crate::server::error::ApiError;
use results::Loaded;
use wire::{
    Block, Body, Bounds, ChoiceKind, Format, ImageSource, Metadata, Role, Tool, Turn,
    WireToolChoice,
};

mod results;
mod wire;

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
    /// The request's own prompt as `count_tokens` counts it ([`prompt_tokens`]), measured
    /// at parse time because the session takes the messages.
    pub prompt_tokens: u64,
}

/// `count_tokens` takes the same body without `max_tokens` (`needs_max_tokens: false`).
/// `signer` checks the signatures of thinking blocks sent back.
pub fn parse(
    body: &[u8],
    needs_max_tokens: bool,
    signer: &Signer,
) -> Result<MessagesRequest, ApiError> {
    let WithShared {
        door: mut wire,
        shared,
    } = json::read::<WithShared<Body, Bounds>>(body)?;
    if wire.mcp_servers.0.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(parse::unsupported(
            "mcp_servers",
            "'mcp_servers' (the MCP connector) is not supported: the panel's agents use the MCP servers of their own config",
        ));
    }
    let config_format = wire.output_config.take().and_then(|c| c.0.format);
    let output = output_format(
        config_format.map(|f| f.0),
        wire.output_format.take().map(|f| f.0),
    )?;
    let max_tokens = match shared.bounds.max_tokens {
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
    let mut system = wire.system.take().map_or_else(Vec::new, wire::texts);
    let Turns {
        system: in_messages,
        messages,
        loaded,
    } = turns(wire.messages.take(), signer)?;
    let tools = client_tools(wire.tools.take(), wire.tool_choice.take(), &loaded)?;
    system.extend(in_messages);
    let prompt_tokens = prompt_tokens(&system, &messages, &tools);
    let sampling = shared.sampling();
    Ok(MessagesRequest {
        model: wire
            .model
            .as_deref()
            .map_or("massgen", str::trim)
            .to_string(),
        stream: wire.stream.unwrap_or(false),
        deliberation: shared.massgen.native_deliberation("thinking blocks")?,
        overrides: shared.massgen.overrides(),
        system,
        messages,
        tools,
        max_tokens,
        stop_sequences: shared.bounds.stop_sequences,
        user_id: user_id(wire.metadata)?,
        output,
        sampling,
        prompt_tokens,
    })
}

/// The estimate `count_tokens` answers and `message_start` carries: one token per four
/// characters of the system text, the messages (their text, tool calls and results) and
/// the tool definitions. Not a model's tokenizer: the panel's models do not share one.
fn prompt_tokens(system: &[String], messages: &[Message], tools: &ClientTools) -> u64 {
    let mut text: String = system.join("\n");
    for m in messages {
        text.push_str(&m.content);
        for call in &m.tool_calls {
            text.push_str(&call.name);
            text.push_str(&call.arguments);
        }
    }
    for tool in &tools.tools {
        text.push_str(&tool.name);
        text.push_str(&tool.description);
        text.push_str(&tool.parameters.to_string());
    }
    estimate_tokens(&text)
}

/// Structured outputs: `output_config.format` (GA), or the beta's top-level
/// `output_format` (with `anthropic-beta: structured-outputs-2025-11-13`, which, like
/// every beta header, is accepted and not needed), `{"type": "json_schema", "schema"}`.
fn output_format(
    config: Option<Format>,
    beta: Option<Format>,
) -> Result<Option<OutputFormat>, ApiError> {
    let (param, format) = match (config, beta) {
        (Some(format), _) => ("output_config.format", format),
        (None, Some(format)) => ("output_format", format),
        (None, None) => return Ok(None),
    };
    if format.kind.0.as_deref() != Some("json_schema") {
        return Err(ApiError::invalid(
            format!("'{param}.type' must be \"json_schema\""),
            Some(param),
            "invalid_value",
        ));
    }
    // Anthropic's format has no name: the schema's title, if any, names it upstream.
    let name = format
        .schema
        .as_ref()
        .and_then(|s| s.get("title"))
        .and_then(Value::as_str)
        .filter(|t| {
            !t.is_empty()
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        });
    structured::json_schema(name, None, format.schema.as_ref(), false, param).map(Some)
}

/// `messages` read: the neutral messages, and apart from them the `role: "system"`
/// entries' texts and the tools the tool results load.
struct Turns {
    system: Vec<String>,
    messages: Vec<Message>,
    loaded: Vec<Loaded>,
}

/// `messages` as [`Turns`].
fn turns(list: Option<Vec<Obj<Turn>>>, signer: &Signer) -> Result<Turns, ApiError> {
    let Some(list) = list else {
        return Err(ApiError::invalid(
            "'messages' is required",
            Some("messages"),
            "missing_required_parameter",
        ));
    };
    if list.is_empty() {
        return Err(ApiError::invalid(
            "'messages' must contain at least one message",
            Some("messages"),
            "empty_array",
        ));
    }
    let mut system = Vec::new();
    let mut messages = Vec::with_capacity(list.len());
    let mut loaded = Vec::new();
    for (i, Obj(turn)) in list.into_iter().enumerate() {
        let role = turn.role;
        let blocks = turn.blocks();
        let at = |j: usize| format!("messages[{i}].content[{j}]");
        match role {
            Role::System => system.push(system_turn(blocks, at)?),
            Role::User => user_turn(blocks, at, &mut messages, &mut loaded)?,
            Role::Assistant => messages.push(assistant_turn(blocks, at, signer)?),
        }
    }
    Ok(Turns {
        system,
        messages,
        loaded,
    })
}

/// A block of a kind the turn's role cannot hold.
fn misplaced(path: String, block: &Block, role: &str, allowed: &str) -> ApiError {
    ApiError::invalid_at(
        format!(
            "'{path}': a '{}' block is not supported in {role} turns (only {allowed})",
            block.kind()
        ),
        path,
        "invalid_message",
    )
}

fn system_turn(blocks: Vec<Block>, at: impl Fn(usize) -> String) -> Result<String, ApiError> {
    let mut texts = Vec::with_capacity(blocks.len());
    for (j, block) in blocks.into_iter().enumerate() {
        match block {
            Block::Text { text } => texts.push(text),
            other => return Err(misplaced(at(j), &other, "system", "text")),
        }
    }
    Ok(texts.join("\n"))
}

/// A user turn: its tool results (each a neutral tool message), then its text and images.
fn user_turn(
    blocks: Vec<Block>,
    at: impl Fn(usize) -> String,
    out: &mut Vec<Message>,
    loaded: &mut Vec<Loaded>,
) -> Result<(), ApiError> {
    let mut texts = Vec::new();
    let mut pictures = Vec::new();
    for (j, block) in blocks.into_iter().enumerate() {
        match block {
            Block::Text { text } => texts.push(text),
            Block::Image { source } => pictures.push(image(source.0, &at(j))?),
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => out.push(results::tool_result(
                tool_use_id,
                content,
                is_error.0 == Some(true),
                &at(j),
                loaded,
            )?),
            other => {
                return Err(misplaced(
                    at(j),
                    &other,
                    "user",
                    "text, image and tool_result",
                ));
            }
        }
    }
    if !texts.is_empty() || !pictures.is_empty() {
        let mut message = Message::user(texts.join("\n"));
        message.images = pictures;
        out.push(message);
    }
    Ok(())
}

/// An `image` block at `path`: a `base64` source (`media_type`, `data`) or a `url` source
/// (https).
fn image(source: ImageSource, path: &str) -> Result<Image, ApiError> {
    let refused = |problem: String| {
        ApiError::invalid_at(
            format!("'{path}.source': {problem}"),
            format!("{path}.source"),
            "invalid_message",
        )
    };
    let read = match source.kind.0.as_deref() {
        Some("base64") => match (source.media_type.0, source.data.0) {
            (Some(media_type), Some(data)) => images::from_base64(&media_type, &data),
            _ => {
                return Err(refused(
                    "a base64 source needs 'media_type' and 'data' strings".into(),
                ));
            }
        },
        Some("url") => match source.url.0 {
            Some(url) => images::from_https(&url),
            None => return Err(refused("a url source needs a 'url' string".into())),
        },
        other => {
            return Err(refused(format!(
                "source type '{}' is not supported; only base64 and url sources are (uploaded files are not)",
                other.unwrap_or("(none)")
            )));
        }
    };
    read.map_err(|r| r.at("messages", path))
}

/// An assistant turn: its text and its tool calls. Thinking blocks (the deliberation this
/// server sent, as Claude Code echoes it) carry nothing the agents take, and are dropped;
/// one signed elsewhere is refused, as Anthropic refuses a signature it did not make.
fn assistant_turn(
    blocks: Vec<Block>,
    at: impl Fn(usize) -> String,
    signer: &Signer,
) -> Result<Message, ApiError> {
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for (j, block) in blocks.into_iter().enumerate() {
        match block {
            Block::Text { text } => texts.push(text),
            Block::Thinking {
                thinking,
                signature,
            } => check_signature(
                thinking.0.as_deref().unwrap_or_default(),
                signature.0.as_deref().unwrap_or_default(),
                &at(j),
                signer,
            )?,
            Block::RedactedThinking {} => {}
            Block::ToolUse { id, name, input } => calls.push(ToolCall {
                id,
                name,
                arguments: input.map_or_else(|| "{}".to_string(), |v| v.to_string()),
                opaque: None,
            }),
            other => {
                return Err(misplaced(
                    at(j),
                    &other,
                    "assistant",
                    "text, tool_use, thinking and redacted_thinking",
                ));
            }
        }
    }
    let mut message = Message::assistant(texts.join("\n"));
    message.tool_calls = calls;
    Ok(message)
}

/// A thinking block's `signature` is ours for its text, or empty (clients that kept no
/// signature, and this server's earlier versions, send `""`). Without `--reasoning-secret`
/// any is taken: see [`Signer::accepts_thinking`].
fn check_signature(
    thinking: &str,
    signature: &str,
    path: &str,
    signer: &Signer,
) -> Result<(), ApiError> {
    if signature.is_empty() || signer.accepts_thinking(thinking, signature) {
        return Ok(());
    }
    let path = format!("{path}.signature");
    Err(ApiError::invalid_at(
        format!(
            "'{path}': Invalid `signature` in `thinking` block: it was not made by this deployment (thinking blocks can only be sent back to the server that made them; set --reasoning-secret alike on every replica)"
        ),
        path,
        "invalid_signature",
    ))
}

/// `tools` (`name`, `description`, `input_schema`, `defer_loading`; `type` absent or
/// `custom`) and `tool_choice` (`auto`, `any`, `tool`, `none`,
/// `disable_parallel_tool_use`). A deferred tool is offered once `loaded` names it; a
/// reference to a tool `tools` does not hold is refused, as Anthropic refuses it.
fn client_tools(
    list: Option<Vec<Obj<Tool>>>,
    choice: Option<Obj<WireToolChoice>>,
    loaded: &[Loaded],
) -> Result<ClientTools, ApiError> {
    let mut specs: Vec<ToolSpec> = Vec::new();
    let mut deferred: HashSet<String> = HashSet::new();
    let list = list.unwrap_or_default();
    tools::check_count(list.len())?;
    for (i, Obj(tool)) in list.into_iter().enumerate() {
        let defer = tool.defer_loading.0 == Some(true);
        if let Some(kind) = tool.kind.0.as_deref().filter(|k| *k != "custom") {
            return Err(tools_error(
                format!(
                    "tools[{i}]: Anthropic-defined tools (type '{kind}') are not supported; send custom tools with input_schema"
                ),
                "invalid_value",
            ));
        }
        let spec = tools::tool_spec(
            tool.name.0.as_deref().unwrap_or_default(),
            tool.description.0.as_deref(),
            tool.input_schema.as_ref(),
            &ToolAt {
                at: &format!("tools[{i}]"),
                schema_field: "input_schema",
            },
        )?;
        if defer {
            deferred.insert(spec.name.clone());
        }
        tools::push_unique(&mut specs, i, spec)?;
    }
    // Sets: a body may hold many references, and `tools` up to 256 names.
    let names: HashSet<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    if let Some(unknown) = loaded.iter().find(|l| !names.contains(l.name.as_str())) {
        return Err(ApiError::invalid_at(
            format!(
                "'{}': the tool_reference names '{}', which is not in 'tools'",
                unknown.path, unknown.name
            ),
            unknown.path.clone(),
            "invalid_message",
        ));
    }
    // Deferred tools wait for a reference: until then the agents are not offered them.
    for l in loaded {
        deferred.remove(&l.name);
    }
    specs.retain(|s| !deferred.contains(&s.name));
    let (choice, parallel) = match choice {
        None => (None, None),
        Some(Obj(c)) => {
            let choice = match c.kind {
                ChoiceKind::Auto => ToolChoice::Auto,
                ChoiceKind::Any => ToolChoice::Required,
                ChoiceKind::None => ToolChoice::None,
                ChoiceKind::Tool => ToolChoice::Function(c.name.ok_or_else(|| {
                    choice_error("'tool_choice' of type \"tool\" needs 'name'".into())
                })?),
            };
            (Some(choice), c.disable_parallel_tool_use.map(|d| !d))
        }
    };
    if let Some(ToolChoice::Function(name)) = &choice
        && deferred.contains(name)
    {
        return Err(choice_error(format!(
            "'tool_choice' names the tool '{name}', which has 'defer_loading' and is not loaded yet (no tool_reference names it)"
        )));
    }
    tools::client_tools(specs, choice, parallel, "any")
}

fn user_id(metadata: Option<Obj<Metadata>>) -> Result<Option<String>, ApiError> {
    match metadata.and_then(|m| m.0.user_id) {
        Some(id) if id.chars().count() > MAX_USER_ID_CHARS => Err(ApiError::invalid(
            format!(
                "'metadata.user_id' must be a string of at most {MAX_USER_ID_CHARS} characters"
            ),
            Some("metadata.user_id"),
            "invalid_value",
        )),
        id => Ok(id),
    }
}

#[cfg(test)]
mod tests;
