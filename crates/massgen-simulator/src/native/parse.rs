//! Reading Responses, Anthropic Messages and Gemini requests into the simulator's
//! format-neutral [`Request`], so the same model-name behaviour applies to every format.
//!
//! Prompt tokens are ceil(characters / 4) of every text the request carries (system
//! prompt, messages, tool-call arguments, tool results), as for Chat Completions.

use serde_json::Value;

use crate::forced::Forced;
use crate::plan::{BadRequest, Offered, Request};

fn bad(message: &str, param: Option<&'static str>) -> BadRequest {
    BadRequest {
        message: message.to_string(),
        param,
    }
}

/// What every native format fills the same way: usage is always reported (none of them has
/// an opt-in like `stream_options`), tool results come from the prompt's block, and a
/// forced tool call is read from the body `v`.
fn native_request(
    v: &Value,
    model: impl Into<String>,
    stream: bool,
    offered: Offered,
    chars: usize,
    last_user: String,
) -> Result<Request, BadRequest> {
    let forced = Forced::from_body(v);
    if let Some(forced) = &forced {
        forced.check(&offered)?;
    }
    let call_args = crate::plan::call_args(&last_user)?;
    Ok(Request {
        forced,
        answered: crate::plan::prompt_answered(&last_user),
        call_args,
        model: model.into(),
        stream,
        include_usage: true,
        offered,
        prompt_tokens: chars.div_ceil(4) as u64,
        tool_results: crate::plan::prompt_tool_results(&last_user),
        last_user,
        json: None,
    })
}

fn json(body: &[u8]) -> Result<Value, BadRequest> {
    serde_json::from_slice(body)
        .map_err(|e| bad(&format!("request body is not valid JSON: {e}"), None))
}

fn chars(text: &str) -> usize {
    text.chars().count()
}

fn str_of(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or_default()
}

/// Text of a content that is a string or a list of parts with `text`.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The offered tools, from `(name, parameters)` pairs.
fn offered<'a>(tools: impl Iterator<Item = (&'a str, Option<&'a Value>)>) -> Offered {
    let mut o = Offered::default();
    for (name, parameters) in tools {
        o.add(name, parameters);
    }
    o
}

fn model_of(v: &Value) -> Result<String, BadRequest> {
    v.get("model")
        .and_then(Value::as_str)
        .map(String::from)
        .ok_or_else(|| bad("'model' is a required string property", Some("model")))
}

/// `POST /v1/responses`.
pub fn responses(body: &[u8]) -> Result<Request, BadRequest> {
    let v = json(body)?;
    let model = model_of(&v)?;
    let mut total = chars(str_of(v.get("instructions")));
    let mut last_user = String::new();
    match v.get("input") {
        Some(Value::String(text)) => {
            total += chars(text);
            last_user = text.clone();
        }
        Some(Value::Array(items)) => {
            for item in items {
                let text = content_text(item.get("content"));
                total += chars(&text)
                    + chars(str_of(item.get("arguments")))
                    + chars(str_of(item.get("output")));
                if item.get("role").and_then(Value::as_str) == Some("user") {
                    last_user = text;
                }
            }
        }
        _ => return Err(bad("'input' is a required property", Some("input"))),
    }
    let tools = v.get("tools").and_then(Value::as_array);
    native_request(
        &v,
        model,
        v.get("stream").and_then(Value::as_bool).unwrap_or(false),
        offered(
            tools
                .into_iter()
                .flatten()
                .map(|t| (str_of(t.get("name")), t.get("parameters"))),
        ),
        total,
        last_user,
    )
}

/// `POST /v1/messages`.
pub fn anthropic(body: &[u8]) -> Result<Request, BadRequest> {
    let v = json(body)?;
    let model = model_of(&v)?;
    if v.get("max_tokens").and_then(Value::as_u64).is_none() {
        return Err(bad("max_tokens: Field required", Some("max_tokens")));
    }
    let messages = v
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("messages: Field required", Some("messages")))?;
    let mut total = chars(&content_text(v.get("system")));
    let mut last_user = String::new();
    for message in messages {
        let mut user_text = Vec::new();
        match message.get("content") {
            Some(Value::String(text)) => {
                total += chars(text);
                user_text.push(text.clone());
            }
            Some(Value::Array(blocks)) => {
                for block in blocks {
                    match str_of(block.get("type")) {
                        "text" => {
                            let text = str_of(block.get("text"));
                            total += chars(text);
                            user_text.push(text.to_string());
                        }
                        "tool_use" => {
                            total += block.get("input").map_or(0, |i| chars(&i.to_string()));
                        }
                        "tool_result" => total += chars(&content_text(block.get("content"))),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        if str_of(message.get("role")) == "user" && !user_text.is_empty() {
            last_user = user_text.join("\n");
        }
    }
    let tools = v.get("tools").and_then(Value::as_array);
    native_request(
        &v,
        model,
        v.get("stream").and_then(Value::as_bool).unwrap_or(false),
        offered(
            tools
                .into_iter()
                .flatten()
                .map(|t| (str_of(t.get("name")), t.get("input_schema"))),
        ),
        total,
        last_user,
    )
}

/// `POST /v1beta/models/{model}:streamGenerateContent` or `:generateContent`.
pub fn gemini(model: &str, stream: bool, body: &[u8]) -> Result<Request, BadRequest> {
    let v = json(body)?;
    let contents = v
        .get("contents")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("contents is required", Some("contents")))?;
    let parts_text = |parts: Option<&Value>| -> (usize, Vec<String>) {
        let mut total = 0;
        let mut texts = Vec::new();
        for part in parts.and_then(Value::as_array).into_iter().flatten() {
            if let Some(text) = part.get("text").and_then(Value::as_str) {
                total += chars(text);
                texts.push(text.to_string());
            }
            if let Some(args) = part.pointer("/functionCall/args") {
                total += chars(&args.to_string());
            }
            if let Some(response) = part.pointer("/functionResponse/response") {
                total += match response.get("result") {
                    Some(Value::String(text)) => chars(text),
                    _ => chars(&response.to_string()),
                };
            }
        }
        (total, texts)
    };
    let (mut total, _) = parts_text(v.pointer("/systemInstruction/parts"));
    let mut last_user = String::new();
    for content in contents {
        let (n, texts) = parts_text(content.get("parts"));
        total += n;
        if str_of(content.get("role")) != "model" && !texts.is_empty() {
            last_user = texts.join("\n");
        }
    }
    let declarations = v
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("functionDeclarations").and_then(Value::as_array))
        .flatten();
    native_request(
        &v,
        model,
        stream,
        offered(declarations.map(|d| {
            // Newer clients send a full JSON Schema as `parametersJsonSchema`.
            let schema = d
                .get("parameters")
                .or_else(|| d.get("parametersJsonSchema"));
            (str_of(d.get("name")), schema)
        })),
        total,
        last_user,
    )
}
