//! Building the `POST /messages` body from a provider-neutral request.
//!
//! - System messages go into the top-level `system` field (joined by blank lines).
//! - Tool results become `tool_result` blocks of a user message; consecutive messages of
//!   one role are merged, since tool results must sit together right after the
//!   assistant's `tool_use` blocks.
//! - An assistant's tool calls become `tool_use` blocks, each preceded by the thinking
//!   blocks (with signatures) that came before it, so a replay with thinking on is valid.

use serde_json::{Map, Value, json};

use crate::settings::{SamplingNames, cap_tokens, put_sampling};
use crate::turns::{joined_system, merge_turns};
use crate::{
    Image, ImageSource, Message, OutputFormat, ProviderRequest, Role, ToolCall, ToolChoice,
};

/// `max_tokens` is required by the Messages API; used when the config sets none.
pub const DEFAULT_MAX_TOKENS: u64 = 8192;

/// Key of this format's data in [`ToolCall::opaque`].
pub(crate) const OPAQUE_KEY: &str = "anthropic";

pub(crate) fn build_body(
    model: &str,
    params: &Map<String, Value>,
    request: &ProviderRequest,
) -> Value {
    let mut body = params.clone();
    body.insert("model".into(), Value::String(model.to_owned()));
    if !body.contains_key("max_tokens") {
        // With extended thinking the budget counts against max_tokens: leave room for it.
        let budget = params
            .get("thinking")
            .and_then(|t| t.get("budget_tokens"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        body.insert("max_tokens".into(), json!(DEFAULT_MAX_TOKENS + budget));
    }
    match joined_system(&request.messages) {
        Some(system) => body.insert("system".into(), Value::String(system)),
        None => body.remove("system"),
    };
    body.insert("messages".into(), Value::Array(messages(&request.messages)));
    body.remove("tool_choice");
    body.remove("parallel_tool_calls");
    // Sent as the `anthropic-beta` header (see the endpoint).
    body.remove("betas");
    if request.tools.is_empty() {
        body.remove("tools");
    } else {
        let tools = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let mut choice = match &request.tool_choice {
            None | Some(ToolChoice::Auto) => json!({"type": "auto"}),
            Some(ToolChoice::Required) => json!({"type": "any"}),
            Some(ToolChoice::None) => json!({"type": "none"}),
            Some(ToolChoice::Function(name)) => json!({"type": "tool", "name": name}),
        };
        // Only meaningful (and accepted) when the model may call tools.
        if request.parallel_tool_calls == Some(false)
            && request.tool_choice != Some(ToolChoice::None)
            && let Some(object) = choice.as_object_mut()
        {
            object.insert("disable_parallel_tool_use".into(), Value::Bool(true));
        }
        body.insert("tool_choice".into(), choice);
    }
    // Structured outputs (GA, no beta header): `output_config.format`. Anthropic has no
    // JSON mode without a schema: a JSON object is asked for in words only.
    if let Some(OutputFormat::JsonSchema { schema, .. }) = &request.output_format {
        let mut config = match body.remove("output_config") {
            Some(Value::Object(config)) => config,
            _ => Map::new(),
        };
        config.insert(
            "format".into(),
            json!({"type": "json_schema", "schema": schema}),
        );
        body.insert("output_config".into(), Value::Object(config));
    }
    cap_tokens(&mut body, "max_tokens", request.max_output_tokens);
    if !request.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(request.stop));
    }
    put_sampling(&mut body, &request.sampling, &SamplingNames::NO_SEED);
    // Not streaming is the default.
    if request.whole {
        body.remove("stream");
    } else {
        body.insert("stream".into(), Value::Bool(true));
    }
    Value::Object(body)
}

fn messages(messages: &[Message]) -> Vec<Value> {
    let turns = messages.iter().filter_map(|message| {
        Some(match message.role {
            Role::System => return None,
            Role::User => {
                let mut blocks = text_block(&message.content);
                blocks.extend(message.images.iter().map(image_block));
                ("user", blocks)
            }
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id.clone().unwrap_or_default(),
                    "content": message.content,
                })],
            ),
            Role::Assistant => ("assistant", assistant_blocks(message)),
        })
    });
    merge_turns(turns)
        .into_iter()
        .map(|(role, blocks)| json!({"role": role, "content": blocks}))
        .collect()
}

fn text_block(text: &str) -> Vec<Value> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![json!({"type": "text", "text": text})]
    }
}

/// An `image` block: bytes as a `base64` source, an https URL as a `url` source (the API
/// fetches it).
fn image_block(image: &Image) -> Value {
    let source = match &image.source {
        ImageSource::Base64 { media_type, data } => {
            json!({"type": "base64", "media_type": media_type, "data": &**data})
        }
        ImageSource::Url { url } => json!({"type": "url", "url": url}),
    };
    json!({"type": "image", "source": source})
}

fn assistant_blocks(message: &Message) -> Vec<Value> {
    let mut blocks = Vec::new();
    // Thinking must come first in an assistant turn; text then tool calls.
    for call in &message.tool_calls {
        blocks.extend(thinking_of(call));
    }
    blocks.extend(text_block(&message.content));
    for call in &message.tool_calls {
        blocks.push(json!({
            "type": "tool_use",
            "id": call.id,
            "name": call.name,
            "input": arguments_object(&call.arguments),
        }));
    }
    blocks
}

fn thinking_of(call: &ToolCall) -> Vec<Value> {
    call.opaque
        .as_ref()
        .and_then(|o| o.get(OPAQUE_KEY))
        .and_then(|o| o.get("thinking"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The model's argument text as an object; invalid JSON (which the engine answers with an
/// error tool result) is replayed as `{}` since Anthropic only accepts an object.
pub(crate) fn arguments_object(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(value @ Value::Object(_)) => value,
        _ => json!({}),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ToolSpec;

    fn with_tools(choice: Option<ToolChoice>, parallel: Option<bool>) -> ProviderRequest {
        ProviderRequest {
            messages: Arc::new(vec![Message::user("q")]),
            tools: vec![std::sync::Arc::new(ToolSpec {
                name: "vote".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            })],
            tool_choice: choice,
            parallel_tool_calls: parallel,
            ..ProviderRequest::default()
        }
    }

    #[test]
    fn tool_choice_forms() {
        let params = Map::new();
        let choice = |c, p| build_body("m", &params, &with_tools(c, p))["tool_choice"].clone();
        assert_eq!(
            choice(Some(ToolChoice::Required), None),
            json!({"type": "any"})
        );
        assert_eq!(
            choice(Some(ToolChoice::Function("vote".into())), Some(false)),
            json!({"type": "tool", "name": "vote", "disable_parallel_tool_use": true})
        );
        assert_eq!(
            choice(Some(ToolChoice::None), Some(false)),
            json!({"type": "none"})
        );
        assert_eq!(choice(None, None), json!({"type": "auto"}));
    }

    #[test]
    fn config_cannot_set_tools_without_tools_and_empty_system_is_left_out() {
        let mut params = Map::new();
        params.insert("tool_choice".into(), json!({"type": "any"}));
        params.insert("system".into(), json!("from config"));
        let body = build_body(
            "m",
            &params,
            &ProviderRequest {
                messages: Arc::new(vec![Message::user("q")]),
                ..ProviderRequest::default()
            },
        );
        assert!(body.get("tool_choice").is_none());
        assert!(body.get("tools").is_none());
        assert!(body.get("system").is_none());
    }
}
