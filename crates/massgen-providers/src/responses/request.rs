//! Building the `POST /responses` body from a provider-neutral request.
//!
//! - System messages become `instructions`.
//! - User and assistant text become input messages; an assistant's tool calls become
//!   `function_call` items and tool results `function_call_output` items.
//! - Reasoning items that preceded a call are replayed before it (with the call's item
//!   id) when the upstream can resolve them: `store` not false, or the item carries
//!   `encrypted_content`. Otherwise the call goes alone, without an item id, which the
//!   API accepts.
//! - Function tools are sent with `strict: false`: the Responses API defaults to strict
//!   schemas, which the workflow tools are not written for.

use serde_json::{Map, Value, json};

use crate::chat_completions::request::response_format;
use crate::settings::{SamplingNames, cap_tokens, put_sampling};
use crate::turns::joined_system;
use crate::{Message, ProviderRequest, Role, ToolCall, ToolChoice};

/// Key of this format's data in [`ToolCall::opaque`].
pub(crate) const OPAQUE_KEY: &str = "responses";

pub(crate) fn build_body(
    model: &str,
    params: &Map<String, Value>,
    request: &ProviderRequest,
) -> Value {
    let mut body = params.clone();
    // Chat Completions spellings from MassGen configs, mapped to their Responses names.
    if let Some(max) = body.remove("max_tokens") {
        body.entry("max_output_tokens").or_insert(max);
    }
    if let Some(effort) = body.remove("reasoning_effort")
        && !body.contains_key("reasoning")
    {
        body.insert("reasoning".into(), json!({ "effort": effort }));
    }
    let stateless = body.get("store") == Some(&Value::Bool(false));
    body.insert("model".into(), Value::String(model.to_owned()));
    match joined_system(&request.messages) {
        Some(system) => body.insert("instructions".into(), Value::String(system)),
        None => body.remove("instructions"),
    };
    let mut input = Vec::new();
    for message in request.messages.iter() {
        push_items(message, stateless, &mut input);
    }
    body.insert("input".into(), Value::Array(input));
    for key in ["tools", "tool_choice", "parallel_tool_calls"] {
        body.remove(key);
    }
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                    "parameters": t.parameters, "strict": false})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = &request.tool_choice {
            let choice = match choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::Required => json!("required"),
                ToolChoice::None => json!("none"),
                ToolChoice::Function(name) => json!({"type": "function", "name": name}),
            };
            body.insert("tool_choice".into(), choice);
        }
        if let Some(parallel) = request.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), Value::Bool(parallel));
        }
    }
    if let Some(format) = &request.output_format {
        // Chat Completions' shape with the `json_schema` object flattened into it.
        let mut format = response_format(format);
        if let Some(Value::Object(spec)) =
            format.as_object_mut().and_then(|f| f.remove("json_schema"))
            && let Some(f) = format.as_object_mut()
        {
            f.extend(spec);
        }
        let mut text = match body.remove("text") {
            Some(Value::Object(text)) => text,
            _ => Map::new(),
        };
        text.insert("format".into(), format);
        body.insert("text".into(), Value::Object(text));
    }
    cap_tokens(&mut body, "max_output_tokens", request.max_output_tokens);
    // No stop sequences and no seed in the Responses API: the server cuts the answer at
    // the client's stop sequences itself.
    put_sampling(&mut body, &request.sampling, &SamplingNames::NO_SEED);
    // Not streaming is the default; `stream_options` is refused without a stream.
    if request.whole {
        body.remove("stream");
        body.remove("stream_options");
    } else {
        body.insert("stream".into(), Value::Bool(true));
    }
    Value::Object(body)
}

fn push_items(message: &Message, stateless: bool, input: &mut Vec<Value>) {
    match message.role {
        Role::System => {}
        Role::User if message.images.is_empty() => {
            input.push(json!({"role": "user", "content": message.content}));
        }
        Role::User => {
            let mut parts = vec![json!({"type": "input_text", "text": message.content})];
            // `detail` is a required field of `input_image` in OpenAI's schema.
            parts.extend(message.images.iter().map(|image| {
                json!({"type": "input_image", "image_url": image.url(),
                    "detail": image.detail.as_deref().unwrap_or("auto")})
            }));
            input.push(json!({"role": "user", "content": parts}));
        }
        Role::Assistant => {
            if !message.content.is_empty() {
                input.push(json!({"role": "assistant", "content": message.content}));
            }
            for call in &message.tool_calls {
                push_call(call, stateless, input);
            }
        }
        Role::Tool => input.push(json!({
            "type": "function_call_output",
            "call_id": message.tool_call_id.clone().unwrap_or_default(),
            "output": message.content,
        })),
    }
}

fn push_call(call: &ToolCall, stateless: bool, input: &mut Vec<Value>) {
    let opaque = call.opaque.as_ref().and_then(|o| o.get(OPAQUE_KEY));
    let reasoning: Vec<Value> = opaque
        .and_then(|o| o.get("reasoning"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let replayable = !reasoning.is_empty()
        && reasoning
            .iter()
            .all(|item| !stateless || item.get("encrypted_content").is_some());
    let arguments = if call.arguments.trim().is_empty() {
        "{}"
    } else {
        call.arguments.as_str()
    };
    let mut item = json!({
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": arguments,
    });
    if replayable {
        input.extend(reasoning);
        if let (Some(id), Some(object)) = (
            opaque.and_then(|o| o.get("item_id")).cloned(),
            item.as_object_mut(),
        ) {
            object.insert("id".into(), id);
        }
    }
    input.push(item);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ToolSpec;

    #[test]
    fn forced_function_no_tools_and_renames() {
        let mut params = Map::new();
        params.insert("max_tokens".into(), json!(10));
        params.insert("max_output_tokens".into(), json!(99));
        params.insert("tool_choice".into(), json!("required"));
        let plain = ProviderRequest {
            messages: Arc::new(vec![Message::user("q")]),
            tool_choice: Some(ToolChoice::Auto),
            ..ProviderRequest::default()
        };
        let body = build_body("m", &params, &plain);
        assert_eq!(body["max_output_tokens"], json!(99), "explicit value wins");
        assert!(body.get("max_tokens").is_none());
        assert!(body.get("tool_choice").is_none() && body.get("tools").is_none());
        let forced = ProviderRequest {
            tools: vec![std::sync::Arc::new(ToolSpec {
                name: "vote".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            })],
            tool_choice: Some(ToolChoice::Function("vote".into())),
            parallel_tool_calls: Some(false),
            ..plain
        };
        let body = build_body("m", &Map::new(), &forced);
        assert_eq!(
            body["tool_choice"],
            json!({"type": "function", "name": "vote"})
        );
        assert_eq!(body["parallel_tool_calls"], json!(false));
        assert_eq!(body["tools"][0]["strict"], json!(false));
    }
}
