//! A non-streamed answer is the streamed one gathered, in every format the simulator
//! speaks: the same request sent with and without a stream (Gemini: `:generateContent`
//! and `:streamGenerateContent?alt=sse`) gives the same text, reasoning (with its
//! signature, where the format has one), tool calls, usage and finish, each read the way
//! that format's clients read it. Over HTTP/1.1 on loopback.

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What one answer says, gathered from a stream or read from a whole response.
#[derive(Debug, Default, PartialEq)]
struct Answer {
    text: String,
    reasoning: String,
    /// Whether the reasoning came with a signature to send back (Anthropic).
    signed: bool,
    /// Name and arguments of each call, in order.
    calls: Vec<(String, Value)>,
    /// Input and output tokens, as the format reports them.
    usage: (u64, u64),
    finish: String,
}

/// POSTs `body` over HTTP/1.1: the status, the `content-type` and the body (de-chunked).
async fn post(addr: std::net::SocketAddr, path: &str, body: &Value) -> (u16, String, String) {
    let body = body.to_string();
    let exchange = async {
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        conn.write_all(body.as_bytes()).await.unwrap();
        let mut response = String::new();
        conn.read_to_string(&mut response).await.unwrap();
        response
    };
    let response = tokio::time::timeout(std::time::Duration::from_secs(10), exchange)
        .await
        .unwrap();
    let (head, rest) = response.split_once("\r\n\r\n").unwrap();
    let head = head.to_ascii_lowercase();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("content-type:"))
        .unwrap_or_default()
        .trim()
        .to_string();
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (status, content_type, body)
}

/// A chunked body's data (RFC 9112 §7.1), in at most 100,000 chunks.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    for _ in 0..100_000 {
        let (size, after) = rest.split_once("\r\n").unwrap();
        let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.push_str(&after[..size]);
        rest = after[size..].strip_prefix("\r\n").unwrap();
    }
    panic!("more than 100,000 chunks");
}

/// The JSON payloads of an SSE body's `data:` lines (`[DONE]` left out).
fn payloads(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|line| line.trim_end_matches('\r').strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).unwrap())
        .collect()
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn tokens(v: &Value) -> u64 {
    v.as_u64().unwrap_or_default()
}

fn args(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("arguments not JSON ({e}): {text}"))
}

fn chat_streamed(body: &str) -> Answer {
    let mut a = Answer::default();
    let mut calls: Vec<(String, String)> = Vec::new();
    for p in payloads(body) {
        if let Some(u) = p.get("usage").filter(|u| !u.is_null()) {
            a.usage = (tokens(&u["prompt_tokens"]), tokens(&u["completion_tokens"]));
        }
        let Some(choice) = p["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        a.text.push_str(str_of(&delta["content"]));
        a.reasoning.push_str(str_of(&delta["reasoning_content"]));
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let i = usize::try_from(tokens(&call["index"])).unwrap();
            if calls.len() <= i {
                calls.resize(i + 1, Default::default());
            }
            calls[i].0.push_str(str_of(&call["function"]["name"]));
            calls[i].1.push_str(str_of(&call["function"]["arguments"]));
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            a.finish = reason.to_string();
        }
    }
    a.calls = calls.into_iter().map(|(n, t)| (n, args(&t))).collect();
    a
}

fn chat_whole(body: &str) -> Answer {
    let v: Value = serde_json::from_str(body).unwrap();
    let message = &v["choices"][0]["message"];
    Answer {
        text: str_of(&message["content"]).to_string(),
        reasoning: str_of(&message["reasoning_content"]).to_string(),
        signed: false,
        calls: message["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let f = &c["function"];
                (
                    str_of(&f["name"]).to_string(),
                    args(str_of(&f["arguments"])),
                )
            })
            .collect(),
        usage: (
            tokens(&v["usage"]["prompt_tokens"]),
            tokens(&v["usage"]["completion_tokens"]),
        ),
        finish: str_of(&v["choices"][0]["finish_reason"]).to_string(),
    }
}

/// A Response's usage and status into `a`.
fn responses_end(a: &mut Answer, response: &Value) {
    let u = &response["usage"];
    a.usage = (tokens(&u["input_tokens"]), tokens(&u["output_tokens"]));
    a.finish = str_of(&response["status"]).to_string();
}

/// A function-call item as a call.
fn responses_call(item: &Value) -> (String, Value) {
    (
        str_of(&item["name"]).to_string(),
        args(str_of(&item["arguments"])),
    )
}

fn responses_streamed(body: &str) -> Answer {
    let mut a = Answer::default();
    for p in payloads(body) {
        match str_of(&p["type"]) {
            "response.output_text.delta" => a.text.push_str(str_of(&p["delta"])),
            "response.reasoning_summary_text.delta" => a.reasoning.push_str(str_of(&p["delta"])),
            "response.output_item.done" if p["item"]["type"] == "function_call" => {
                a.calls.push(responses_call(&p["item"]));
            }
            "response.completed" => responses_end(&mut a, &p["response"]),
            _ => {}
        }
    }
    a
}

fn responses_whole(body: &str) -> Answer {
    let v: Value = serde_json::from_str(body).unwrap();
    let mut a = Answer::default();
    for item in v["output"].as_array().into_iter().flatten() {
        let parts = |key: &str| item[key].as_array().cloned().unwrap_or_default();
        match str_of(&item["type"]) {
            "function_call" => a.calls.push(responses_call(item)),
            "message" => {
                for part in parts("content") {
                    a.text.push_str(str_of(&part["text"]));
                }
            }
            "reasoning" => {
                for part in parts("summary") {
                    a.reasoning.push_str(str_of(&part["text"]));
                }
            }
            _ => {}
        }
    }
    responses_end(&mut a, &v);
    a
}

fn anthropic_streamed(body: &str) -> Answer {
    let mut a = Answer::default();
    let mut inputs: Vec<(String, String)> = Vec::new();
    let mut input = 0;
    for p in payloads(body) {
        match str_of(&p["type"]) {
            "message_start" => input = tokens(&p["message"]["usage"]["input_tokens"]),
            "content_block_start" if p["content_block"]["type"] == "tool_use" => {
                let name = str_of(&p["content_block"]["name"]).to_string();
                inputs.push((name, String::new()));
            }
            "content_block_delta" => {
                let d = &p["delta"];
                match str_of(&d["type"]) {
                    "text_delta" => a.text.push_str(str_of(&d["text"])),
                    "thinking_delta" => a.reasoning.push_str(str_of(&d["thinking"])),
                    "signature_delta" => a.signed |= !str_of(&d["signature"]).is_empty(),
                    "input_json_delta" => {
                        inputs
                            .last_mut()
                            .unwrap()
                            .1
                            .push_str(str_of(&d["partial_json"]));
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                a.usage = (input, tokens(&p["usage"]["output_tokens"]));
                a.finish = str_of(&p["delta"]["stop_reason"]).to_string();
            }
            _ => {}
        }
    }
    a.calls = inputs.into_iter().map(|(n, t)| (n, args(&t))).collect();
    a
}

fn anthropic_whole(body: &str) -> Answer {
    let v: Value = serde_json::from_str(body).unwrap();
    let mut a = Answer::default();
    for block in v["content"].as_array().into_iter().flatten() {
        match str_of(&block["type"]) {
            "text" => a.text.push_str(str_of(&block["text"])),
            "thinking" => {
                a.reasoning.push_str(str_of(&block["thinking"]));
                a.signed |= !str_of(&block["signature"]).is_empty();
            }
            "tool_use" => a
                .calls
                .push((str_of(&block["name"]).to_string(), block["input"].clone())),
            _ => {}
        }
    }
    let u = &v["usage"];
    a.usage = (tokens(&u["input_tokens"]), tokens(&u["output_tokens"]));
    a.finish = str_of(&v["stop_reason"]).to_string();
    a
}

/// One `GenerateContentResponse` (a whole response, or a chunk of a stream) into `a`.
fn gemini_chunk(a: &mut Answer, chunk: &Value) {
    let candidate = &chunk["candidates"][0];
    for part in candidate["content"]["parts"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(call) = part.get("functionCall") {
            a.calls
                .push((str_of(&call["name"]).to_string(), call["args"].clone()));
        } else if part["thought"] == true {
            a.reasoning.push_str(str_of(&part["text"]));
        } else {
            a.text.push_str(str_of(&part["text"]));
        }
    }
    if let Some(u) = chunk.get("usageMetadata") {
        let output = tokens(&u["candidatesTokenCount"]) + tokens(&u["thoughtsTokenCount"]);
        a.usage = (tokens(&u["promptTokenCount"]), output);
    }
    if let Some(reason) = candidate["finishReason"].as_str() {
        a.finish = reason.to_string();
    }
}

fn gemini_streamed(body: &str) -> Answer {
    let mut a = Answer::default();
    for chunk in payloads(body) {
        gemini_chunk(&mut a, &chunk);
    }
    a
}

fn gemini_whole(body: &str) -> Answer {
    let mut a = Answer::default();
    gemini_chunk(&mut a, &serde_json::from_str(body).unwrap());
    a
}

const SCHEMA: &str = r#"{"type": "object", "properties": {"city": {"type": "string"}},
    "required": ["city"]}"#;

/// One format's request for `model` (with a `lookup` tool when `tool`), streamed or not:
/// the path and the body.
fn request(format: &str, model: &str, tool: bool, stream: bool) -> (String, Value) {
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    let question = "Where is the Louvre?";
    let (path, mut body) = match format {
        "chat" => (
            "/v1/chat/completions".to_string(),
            json!({"model": model, "messages": [{"role": "user", "content": question}]}),
        ),
        "responses" => (
            "/v1/responses".to_string(),
            json!({"model": model, "input": [{"role": "user", "content": question}]}),
        ),
        "anthropic" => (
            "/v1/messages".to_string(),
            json!({"model": model, "max_tokens": 200,
                "messages": [{"role": "user", "content": question}]}),
        ),
        _ => {
            let method = if stream {
                "streamGenerateContent?alt=sse"
            } else {
                "generateContent"
            };
            (
                format!("/v1beta/models/{model}:{method}"),
                json!({"contents": [{"role": "user", "parts": [{"text": question}]}]}),
            )
        }
    };
    if tool {
        body["tools"] = match format {
            "chat" => json!([{"type": "function", "function": {"name": "lookup",
                "description": "Look a place up.", "parameters": schema}}]),
            "responses" => json!([{"type": "function", "name": "lookup",
                "description": "Look a place up.", "parameters": schema}]),
            "anthropic" => json!([{"name": "lookup", "description": "Look a place up.",
                "input_schema": schema}]),
            _ => json!([{"functionDeclarations": [{"name": "lookup",
                "description": "Look a place up.", "parameters": schema}]}]),
        };
    }
    if stream && format != "gemini" {
        body["stream"] = json!(true);
        if format == "chat" {
            body["stream_options"] = json!({"include_usage": true});
        }
    }
    (path, body)
}

#[tokio::test]
async fn a_non_streamed_answer_is_the_streamed_one_gathered_in_every_format() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(super::serve(listener, std::future::pending()));
    type Read = fn(&str) -> Answer;
    let formats: [(&str, Read, Read); 4] = [
        ("chat", chat_streamed, chat_whole),
        ("responses", responses_streamed, responses_whole),
        ("anthropic", anthropic_streamed, anthropic_whole),
        ("gemini", gemini_streamed, gemini_whole),
    ];
    for (format, streamed, whole) in formats {
        for (model, tool) in [
            ("sim-a:ttft_ms=0,token_ms=0,reasoning=on,words=12", false),
            (
                "sim-a:ttft_ms=0,token_ms=0,reasoning=on,policy=client_tool",
                true,
            ),
        ] {
            let label = format!("{format} {model}");
            let (path, body) = request(format, model, tool, true);
            let (status, kind, text) = post(addr, &path, &body).await;
            assert_eq!(status, 200, "{label}: {text}");
            assert!(kind.starts_with("text/event-stream"), "{label}: {kind}");
            let s = streamed(&text);
            let (path, body) = request(format, model, tool, false);
            let (status, kind, text) = post(addr, &path, &body).await;
            assert_eq!(status, 200, "{label}: {text}");
            assert_eq!(kind, "application/json", "{label}");
            let w = whole(&text);
            assert_eq!(w, s, "{label}");
            // Something to compare: the answer, its reasoning, its usage.
            assert!(w.usage.0 > 0 && w.usage.1 > 0, "{label}: {w:?}");
            assert!(!w.reasoning.is_empty(), "{label}: {w:?}");
            assert_eq!(w.signed, format == "anthropic", "{label}: {w:?}");
            if tool {
                assert_eq!(
                    w.calls,
                    [("lookup".to_string(), json!({"city": "simulated"}))]
                );
            } else {
                assert!(w.text.starts_with("[simulated"), "{label}: {w:?}");
                assert!(w.calls.is_empty(), "{label}: {w:?}");
            }
        }
    }
    server.abort();
}
