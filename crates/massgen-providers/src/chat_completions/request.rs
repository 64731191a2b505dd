//! Building the `POST /chat/completions` body from a provider-neutral request.

use serde_json::{Map, Value, json};

use crate::settings::{SamplingNames, cap_tokens, put_sampling};
use crate::{Image, Message, OutputFormat, ProviderRequest, Role, ToolChoice};

/// Config passthrough first, then our fields on top: the engine's conversation, tools
/// and streaming flags are not the config's to change.
pub(crate) fn build_body(
    model: &str,
    params: &Map<String, Value>,
    request: &ProviderRequest,
) -> Value {
    let mut body = params.clone();
    body.insert("model".into(), Value::String(model.to_owned()));
    body.insert(
        "messages".into(),
        Value::Array(request.messages.iter().map(message).collect()),
    );
    if request.tools.is_empty() {
        // OpenAI rejects tool_choice / parallel_tool_calls without tools.
        for key in ["tools", "tool_choice", "parallel_tool_calls"] {
            body.remove(key);
        }
    } else {
        let tools = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    }
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = &request.tool_choice {
            body.insert("tool_choice".into(), tool_choice(choice));
        }
        if let Some(parallel) = request.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), Value::Bool(parallel));
        }
    }
    if let Some(format) = &request.output_format {
        body.insert("response_format".into(), response_format(format));
    }
    // Newer OpenAI models take only `max_completion_tokens`; compatible servers often only
    // `max_tokens`: the config's spelling wins.
    let key = if body.contains_key("max_completion_tokens") {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    cap_tokens(&mut body, key, request.max_output_tokens);
    if !request.stop.is_empty() {
        body.insert("stop".into(), json!(request.stop));
    }
    put_sampling(&mut body, &request.sampling, &SamplingNames::OPENAI);
    let stream_options = body.remove("stream_options");
    if request.whole {
        // Not streaming is the default; OpenAI refuses `stream_options` without a stream.
        body.remove("stream");
        return Value::Object(body);
    }
    body.insert("stream".into(), Value::Bool(true));
    let mut stream_options = match stream_options {
        Some(Value::Object(options)) => options,
        _ => Map::new(),
    };
    stream_options.insert("include_usage".into(), Value::Bool(true));
    body.insert("stream_options".into(), Value::Object(stream_options));
    Value::Object(body)
}

/// `response_format` as OpenAI spells it.
pub(crate) fn response_format(format: &OutputFormat) -> Value {
    match format {
        OutputFormat::JsonObject => json!({"type": "json_object"}),
        OutputFormat::JsonSchema {
            name,
            description,
            schema,
            strict,
        } => {
            let mut spec = json!({"name": name, "schema": schema, "strict": strict});
            if let (Some(d), Some(o)) = (description, spec.as_object_mut()) {
                o.insert("description".into(), json!(d));
            }
            json!({"type": "json_schema", "json_schema": spec})
        }
    }
}

fn message(message: &Message) -> Value {
    let role = match message.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut out = Map::new();
    out.insert("role".into(), role.into());
    let only_tool_calls = message.content.is_empty() && !message.tool_calls.is_empty();
    let content = if only_tool_calls {
        Value::Null
    } else if message.images.is_empty() {
        Value::String(message.content.clone())
    } else {
        let mut parts = vec![json!({"type": "text", "text": message.content})];
        parts.extend(message.images.iter().map(image_part));
        Value::Array(parts)
    };
    out.insert("content".into(), content);
    if !message.tool_calls.is_empty() {
        let calls = message
            .tool_calls
            .iter()
            .map(|call| {
                // Strict servers reject an empty arguments string on replay.
                let arguments = if call.arguments.trim().is_empty() {
                    "{}"
                } else {
                    call.arguments.as_str()
                };
                json!({
                    "id": call.id,
                    "type": "function",
                    "function": { "name": call.name, "arguments": arguments },
                })
            })
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(call_id) = &message.tool_call_id {
        out.insert("tool_call_id".into(), Value::String(call_id.clone()));
    }
    Value::Object(out)
}

/// An `image_url` part: https and `data:` URLs alike, with OpenAI's `detail` when set.
fn image_part(image: &Image) -> Value {
    let mut url = json!({"url": image.url()});
    if let Some(detail) = &image.detail {
        url["detail"] = Value::String(detail.clone());
    }
    json!({"type": "image_url", "image_url": url})
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => "auto".into(),
        ToolChoice::Required => "required".into(),
        ToolChoice::None => "none".into(),
        ToolChoice::Function(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{ToolCall, ToolSpec};

    #[test]
    fn body_shape() {
        let mut params = Map::new();
        params.insert("temperature".into(), json!(0.2));
        params.insert("model".into(), json!("overridden"));
        params.insert("stream".into(), json!(false));
        params.insert(
            "stream_options".into(),
            json!({"include_obfuscation": false}),
        );
        let request = ProviderRequest {
            messages: Arc::new(vec![
                Message::system("s"),
                Message {
                    role: Role::Assistant,
                    content: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "vote".into(),
                        arguments: "".into(),
                        opaque: None,
                    }],
                    tool_call_id: None,
                    images: Vec::new(),
                },
                Message::tool_result("c1", "ok"),
            ]),
            tools: vec![std::sync::Arc::new(ToolSpec {
                name: "vote".into(),
                description: "Vote".into(),
                parameters: json!({"type": "object"}),
            })],
            tool_choice: Some(ToolChoice::Function("vote".into())),
            parallel_tool_calls: Some(false),
            ..ProviderRequest::default()
        };
        let body = build_body("gpt-x", &params, &request);
        assert_eq!(
            body,
            json!({
                "temperature": 0.2,
                "model": "gpt-x",
                "messages": [
                    {"role": "system", "content": "s"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "vote", "arguments": "{}"}}
                    ]},
                    {"role": "tool", "content": "ok", "tool_call_id": "c1"},
                ],
                "tools": [{"type": "function", "function": {
                    "name": "vote", "description": "Vote", "parameters": {"type": "object"}}}],
                "tool_choice": {"type": "function", "function": {"name": "vote"}},
                "parallel_tool_calls": false,
                "stream": true,
                "stream_options": {"include_obfuscation": false, "include_usage": true},
            })
        );
    }

    #[test]
    fn no_tools_means_no_tool_fields() {
        let mut params = Map::new();
        params.insert("parallel_tool_calls".into(), json!(true));
        let request = ProviderRequest {
            messages: Arc::new(vec![Message::user("hi")]),
            tool_choice: Some(ToolChoice::Auto),
            ..ProviderRequest::default()
        };
        let body = build_body("m", &params, &request);
        assert!(body.get("tools").is_none());
        assert!(body.get("tool_choice").is_none());
        assert!(body.get("parallel_tool_calls").is_none());
        assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
    }
}
