//! Building the `streamGenerateContent` body from a provider-neutral request.
//!
//! - System messages become `systemInstruction`; the assistant role is `model`.
//! - An assistant's tool calls become `functionCall` parts (arguments as an object) with
//!   the `thoughtSignature` they came with; tool results become `functionResponse` parts
//!   named after the call they answer (`{"result": text}`), in a `user` turn. Call ids go
//!   upstream only when Gemini gave them (ours are synthesized `call_<n>`).
//! - Consecutive turns of one role are merged.
//! - Config params in OpenAI/MassGen spelling (`temperature`, `top_p`, `max_tokens`,
//!   `stop`, `thinking_config`, …) go into `generationConfig` under their Gemini names;
//!   anything else (e.g. `safetySettings`, `generationConfig` itself) is passed as given.

use serde_json::{Map, Value, json};

use super::schema::sanitize;
use crate::anthropic::arguments_object;
use crate::settings::{SamplingNames, cap_tokens, has_refs, put_sampling};
use crate::turns::{joined_system, merge_turns};
use crate::{
    Image, ImageSource, Message, OutputFormat, ProviderRequest, Role, ToolCall, ToolChoice,
};

/// Key of this format's data in [`ToolCall::opaque`].
pub(crate) const OPAQUE_KEY: &str = "gemini";

/// Config keys that belong in `generationConfig`, with their Gemini names.
const GENERATION_KEYS: &[(&str, &str)] = &[
    ("temperature", "temperature"),
    ("top_p", "topP"),
    ("topP", "topP"),
    ("top_k", "topK"),
    ("topK", "topK"),
    ("max_tokens", "maxOutputTokens"),
    ("max_output_tokens", "maxOutputTokens"),
    ("maxOutputTokens", "maxOutputTokens"),
    ("stop", "stopSequences"),
    ("stop_sequences", "stopSequences"),
    ("stopSequences", "stopSequences"),
    ("seed", "seed"),
    ("presence_penalty", "presencePenalty"),
    ("frequency_penalty", "frequencyPenalty"),
    ("candidate_count", "candidateCount"),
    ("response_mime_type", "responseMimeType"),
    ("responseMimeType", "responseMimeType"),
    ("thinking_config", "thinkingConfig"),
    ("thinkingConfig", "thinkingConfig"),
];

pub(crate) fn build_body(params: &Map<String, Value>, request: &ProviderRequest) -> Value {
    let mut body = Map::new();
    let mut generation = Map::new();
    for (key, value) in params {
        if key == "generationConfig" || key == "generation_config" {
            if let Value::Object(given) = value {
                generation.extend(given.clone());
            }
        } else if let Some((_, gemini)) = GENERATION_KEYS.iter().find(|(k, _)| k == key) {
            let value = match (*gemini, value) {
                ("stopSequences", Value::String(one)) => json!([one]),
                ("thinkingConfig", Value::Object(config)) => Value::Object(camel_keys(config)),
                _ => value.clone(),
            };
            generation.insert((*gemini).to_owned(), value);
        } else if !matches!(
            key.as_str(),
            "contents"
                | "tools"
                | "toolConfig"
                | "tool_choice"
                | "parallel_tool_calls"
                | "systemInstruction"
                | "model"
        ) {
            body.insert(key.clone(), value.clone());
        }
    }
    body.insert("contents".into(), Value::Array(contents(&request.messages)));
    if let Some(system) = joined_system(&request.messages) {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system}]}),
        );
    }
    if !request.tools.is_empty() {
        let declarations: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({"name": t.name, "description": t.description,
                    "parameters": sanitize(&t.parameters)})
            })
            .collect();
        body.insert(
            "tools".into(),
            json!([{ "functionDeclarations": declarations }]),
        );
        if let Some(choice) = &request.tool_choice {
            let config = match choice {
                ToolChoice::Auto => json!({"mode": "AUTO"}),
                ToolChoice::Required => json!({"mode": "ANY"}),
                ToolChoice::None => json!({"mode": "NONE"}),
                ToolChoice::Function(name) => {
                    json!({"mode": "ANY", "allowedFunctionNames": [name]})
                }
            };
            body.insert(
                "toolConfig".into(),
                json!({ "functionCallingConfig": config }),
            );
        }
    }
    request_settings(&mut generation, request);
    if !generation.is_empty() {
        body.insert("generationConfig".into(), Value::Object(generation));
    }
    Value::Object(body)
}

/// Gemini's most stop sequences.
const MAX_STOPS: usize = 5;

/// What the client's request asks of this call, in `generationConfig`. Structured output
/// is `responseMimeType: application/json` plus `responseSchema` in Gemini's schema subset
/// ([`sanitize`]); a schema with `$ref`s, which the subset cannot express, goes in words
/// only (the answer is still checked against the whole schema).
fn request_settings(generation: &mut Map<String, Value>, request: &ProviderRequest) {
    if let Some(format) = &request.output_format {
        generation.insert("responseMimeType".into(), json!("application/json"));
        if let OutputFormat::JsonSchema { schema, .. } = format
            && !has_refs(schema)
        {
            generation.insert("responseSchema".into(), sanitize(schema));
        }
    }
    cap_tokens(generation, "maxOutputTokens", request.max_output_tokens);
    if !request.stop.is_empty() {
        let stops: Vec<&String> = request.stop.iter().take(MAX_STOPS).collect();
        generation.insert("stopSequences".into(), json!(stops));
    }
    put_sampling(
        generation,
        &request.sampling,
        &SamplingNames {
            temperature: "temperature",
            top_p: "topP",
            seed: Some("seed"),
        },
    );
}

fn contents(messages: &[Message]) -> Vec<Value> {
    let turns = messages.iter().enumerate().filter_map(|(at, message)| {
        Some(match message.role {
            Role::System => return None,
            Role::User => {
                let mut parts = text_part(&message.content);
                parts.extend(message.images.iter().map(image_part));
                ("user", parts)
            }
            Role::Assistant => ("model", model_parts(message)),
            Role::Tool => {
                let id = message.tool_call_id.as_deref().unwrap_or_default();
                let call = answered_call(&messages[..at], id);
                let name = call.map_or(id, |c| c.name.as_str());
                let mut response = json!({"name": name, "response": {"result": message.content}});
                if call.is_some_and(has_upstream_id) {
                    response["id"] = Value::String(id.to_owned());
                }
                ("user", vec![json!({ "functionResponse": response })])
            }
        })
    });
    merge_turns(turns)
        .into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect()
}

/// Bytes go inline (`inlineData`); an https URL goes as `fileData`, which the Gemini API
/// fetches itself (public and signed URLs are accepted there since its external-URL
/// support). The URL's media type is read from its file extension when it has a known
/// one, and left for the API to detect otherwise.
fn image_part(image: &Image) -> Value {
    match &image.source {
        ImageSource::Base64 { media_type, data } => {
            json!({"inlineData": {"mimeType": media_type, "data": &**data}})
        }
        ImageSource::Url { url } => {
            let mut file = json!({"fileUri": url});
            if let Some(media_type) = media_type_of_url(url) {
                file["mimeType"] = Value::String(media_type.to_owned());
            }
            json!({ "fileData": file })
        }
    }
}

fn media_type_of_url(url: &str) -> Option<&'static str> {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let extension = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match extension.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "heic" => "image/heic",
        "heif" => "image/heif",
        _ => return None,
    })
}

fn text_part(text: &str) -> Vec<Value> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![json!({"text": text})]
    }
}

fn model_parts(message: &Message) -> Vec<Value> {
    let mut parts = text_part(&message.content);
    for call in &message.tool_calls {
        let mut part = json!({"functionCall": {
            "name": call.name, "args": arguments_object(&call.arguments)}});
        if has_upstream_id(call) {
            part["functionCall"]["id"] = Value::String(call.id.clone());
        }
        if let (Some(signature), Some(object)) = (signature_of(call), part.as_object_mut()) {
            object.insert("thoughtSignature".into(), signature);
        }
        parts.push(part);
    }
    parts
}

fn signature_of(call: &ToolCall) -> Option<Value> {
    call.opaque
        .as_ref()?
        .get(OPAQUE_KEY)?
        .get("thought_signature")
        .cloned()
}

/// Whether Gemini itself named the call (ids we synthesized never go upstream).
fn has_upstream_id(call: &ToolCall) -> bool {
    call.opaque
        .as_ref()
        .and_then(|o| o.get(OPAQUE_KEY))
        .and_then(|o| o.get("upstream_id"))
        == Some(&Value::Bool(true))
}

/// The call `id` answers: Gemini matches responses to calls by name (and id, when it
/// gave one).
fn answered_call<'m>(earlier: &'m [Message], id: &str) -> Option<&'m ToolCall> {
    earlier
        .iter()
        .rev()
        .flat_map(|m| m.tool_calls.iter())
        .find(|c| c.id == id)
}

fn camel_keys(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter()
        .map(|(key, value)| {
            let mut camel = String::new();
            let mut upper = false;
            for c in key.chars() {
                if c == '_' {
                    upper = true;
                } else if upper {
                    camel.extend(c.to_uppercase());
                    upper = false;
                } else {
                    camel.push(c);
                }
            }
            (camel, value.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ToolSpec;

    #[test]
    fn params_go_where_gemini_wants_them() {
        let mut params = Map::new();
        params.insert("stop".into(), json!("END"));
        params.insert("top_p".into(), json!(0.9));
        params.insert("generationConfig".into(), json!({"candidateCount": 1}));
        params.insert("safetySettings".into(), json!([{"category": "x"}]));
        params.insert("model".into(), json!("ignored"));
        let request = ProviderRequest {
            messages: Arc::new(vec![Message::user("q")]),
            tools: vec![std::sync::Arc::new(ToolSpec {
                name: "vote".into(),
                description: "d".into(),
                parameters: json!({"type": "object", "additionalProperties": false}),
            })],
            tool_choice: Some(ToolChoice::Function("vote".into())),
            parallel_tool_calls: None,
            ..ProviderRequest::default()
        };
        let body = build_body(&params, &request);
        assert_eq!(
            body["generationConfig"],
            json!({"candidateCount": 1, "stopSequences": ["END"], "topP": 0.9})
        );
        assert_eq!(body["safetySettings"], json!([{"category": "x"}]));
        assert!(body.get("model").is_none());
        assert_eq!(
            body["toolConfig"],
            json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["vote"]}})
        );
        assert_eq!(
            body["tools"][0]["functionDeclarations"][0]["parameters"],
            json!({"type": "object"})
        );
    }
}
