//! Whole (non-streamed) responses in every wire format (`ProviderRequest::whole`): the
//! request a whole call sends (the streamed call's body without `stream`, Gemini's
//! `:generateContent`, a JSON `Accept`); every recorded non-streamed response of the shared
//! fixtures through its provider on loopback (what it must decode to, and the same answer as
//! the recorded stream of the same conversation where there is one); the project's own
//! whole bodies against its streams of the same answers, opaque data included; the bounds
//! of a whole body and what is retried.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use massgen_providers::retry::CallPolicy;
use massgen_providers::{
    FinishReason, MAX_ANSWER_BYTES, MAX_WHOLE_BYTES, Provider, ProviderErrorKind, ProviderRequest,
    ToolCall, UpstreamConfig, UpstreamHttp, Upstreams, Wire, http_client,
};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

/// The wire format of a folder of the shared recordings, or of this crate's fixtures.
fn wire(dir: &str) -> Wire {
    match dir {
        "openai-chat" | "ollama" | "chat" => Wire::ChatCompletions,
        "azure" => Wire::AzureChatCompletions,
        "openai-responses" | "responses" => Wire::Responses,
        "anthropic" => Wire::Anthropic,
        "gemini" => Wire::Gemini,
        other => panic!("no wire format for {other}"),
    }
}

fn provider(
    dir: &str,
    base_url: &str,
    params: Map<String, Value>,
    policy: CallPolicy,
) -> Arc<dyn Provider> {
    let config = UpstreamConfig {
        provider_name: dir.into(),
        model: "m".into(),
        base_url: base_url.into(),
        api_key: None,
        params,
        policy,
    };
    let version = (dir == "azure").then_some("2024-10-21");
    Upstreams::new(http_client().unwrap())
        .build(wire(dir), config, version, UpstreamHttp::default())
        .unwrap()
}

fn whole(request: ProviderRequest) -> ProviderRequest {
    ProviderRequest {
        whole: true,
        ..request
    }
}

fn json_reply(status: u16, body: impl Into<String>) -> Reply {
    Reply::Status(
        status,
        vec![("content-type", "application/json".into())],
        body.into(),
    )
}

/// `body` served as a whole 200 response to a whole call of wire format `dir`: what the
/// call gave and the request the upstream saw.
async fn whole_call(dir: &str, body: String) -> (Outcome, Seen) {
    let (url, upstream) = serve(vec![json_reply(200, body)]).await;
    let p = provider(dir, &format!("{url}/v1"), Map::new(), fast_policy(1));
    let (chunks, error) = collect(p.stream(whole(coordination_turn()))).await;
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1, "{dir}: one request");
    (outcome(chunks, error), requests[0].clone())
}

/// The request of a whole call asks for no stream, where the format says so.
fn assert_asks_for_whole(dir: &str, seen: &Seen) {
    assert_eq!(seen.headers["accept"], "application/json", "{dir}");
    assert!(seen.body.get("stream").is_none(), "{dir}: {}", seen.body);
    assert!(seen.body.get("stream_options").is_none(), "{dir}");
    let path = match wire(dir) {
        Wire::ChatCompletions => "/v1/chat/completions",
        Wire::Responses => "/v1/responses",
        Wire::Anthropic => "/v1/messages",
        Wire::Gemini => "/v1/models/m:generateContent",
        Wire::AzureChatCompletions => {
            "/v1/openai/deployments/m/chat/completions?api-version=2024-10-21"
        }
    };
    assert_eq!(seen.uri, path, "{dir}");
}

/// Arguments as JSON: a whole response's are an object in two formats (Anthropic's
/// `input`, Gemini's `args`), written out again, where a stream brings the model's text.
fn parsed_args(call: &ToolCall) -> Value {
    serde_json::from_str(&call.arguments)
        .unwrap_or_else(|e| panic!("arguments of {} are not JSON ({e})", call.name))
}

/// Two outcomes say the same answer: the same text, reasoning, announcements, calls (name
/// and arguments; with `ids` also the ids and what goes back with them), usage and finish.
fn assert_same_answer(label: &str, whole: &Outcome, streamed: &Outcome, ids: bool) {
    assert_eq!(whole.error, streamed.error, "{label}: error");
    assert_eq!(whole.text, streamed.text, "{label}: text");
    assert_eq!(whole.reasoning, streamed.reasoning, "{label}: reasoning");
    assert_eq!(whole.started, streamed.started, "{label}: announcements");
    assert_eq!(whole.calls.len(), streamed.calls.len(), "{label}: calls");
    for (w, s) in whole.calls.iter().zip(&streamed.calls) {
        assert_eq!(w.name, s.name, "{label}");
        assert_eq!(parsed_args(w), parsed_args(s), "{label}: {}", w.name);
        if ids {
            assert_eq!(
                (&w.id, &w.opaque),
                (&s.id, &s.opaque),
                "{label}: {}",
                w.name
            );
        }
    }
    assert_eq!(whole.usage, streamed.usage, "{label}: usage");
    assert_eq!(whole.finish, streamed.finish, "{label}: finish");
}

/// A recorded stream of the shared fixtures, decoded (cut at several sizes).
async fn recorded_stream(root: &Path, dir: &str, file: &str) -> Outcome {
    let format = match wire(dir) {
        Wire::Responses => RESPONSES,
        Wire::Anthropic => ANTHROPIC,
        Wire::Gemini => GEMINI,
        _ => CHAT,
    };
    let bytes = std::fs::read(root.join(dir).join(file)).unwrap();
    let (chunks, error) = decode_bytes(file, bytes, format.decoder).await;
    outcome(chunks, error)
}

fn call(id: &str, name: &str, args: Value) -> (String, String, Value) {
    (id.into(), name.into(), args)
}

fn calls_of(o: &Outcome) -> Vec<(String, String, Value)> {
    o.calls
        .iter()
        .map(|c| (c.id.clone(), c.name.clone(), parsed_args(c)))
        .collect()
}

/// What each recorded whole response must decode to (`fixture`: its JSON, for the texts).
fn check(name: &str, o: &Outcome, fixture: &Value) {
    assert!(o.error.is_none(), "{name}: {:?}", o.error);
    let names: Vec<&str> = o.calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        o.started, names,
        "{name}: every call announced once, in order"
    );
    let message = &fixture["choices"][0]["message"];
    match name {
        "openai-chat/nonstream_text.json" => {
            assert_eq!(o.text, message["content"].as_str().unwrap());
            assert!(o.text.starts_with("**Holiday Name:** Galaxy Day"));
            assert_eq!(o.reasoning, "");
            assert_eq!(o.usage, Some(usage(16, 363, 379, 0, 0)));
            assert_eq!(o.finish, Some(FinishReason::Stop));
        }
        "openai-chat/nonstream_parallel_tool_calls.json" => {
            assert_eq!(o.text, "", "content null");
            assert_eq!(
                calls_of(o),
                [
                    call(
                        "call_fdNz3vOBKYgOIpMdWotB9MjY",
                        "GetWeatherArgs",
                        json!({"city": "Edinburgh", "country": "GB", "units": "c"})
                    ),
                    call(
                        "call_h1DWI1POMJLb0KwIyQHWXD4p",
                        "get_stock_price",
                        json!({"ticker": "AAPL", "exchange": "NASDAQ"})
                    ),
                ]
            );
            assert_eq!(o.usage, Some(usage(149, 60, 209, 0, 0)));
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        "ollama/nonstream_reasoning.json" => {
            assert_eq!(o.reasoning, message["reasoning"].as_str().unwrap());
            assert!(o.reasoning.starts_with("Okay, the user is asking"));
            assert_eq!(o.text, r#"{ "city": "Paris", "country": "France" }"#);
            assert_eq!(o.usage, Some(usage(136, 15, 151, 0, 0)));
            assert_eq!(o.finish, Some(FinishReason::Stop));
        }
        "ollama/nonstream_tool_call_reasoning.json" => {
            assert_eq!(o.reasoning, message["reasoning"].as_str().unwrap());
            assert_eq!(o.text, "", "content \"\"");
            assert_eq!(
                calls_of(o),
                [call(
                    "call_o2vnpxrw",
                    "final_result",
                    json!({"city": "Paris", "country": "France"})
                )]
            );
            assert_eq!(o.usage, Some(usage(206, 194, 400, 0, 0)));
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        "openai-responses/nonstream_text.json" => {
            assert_eq!(o.text, "pong");
            assert_eq!(o.usage, Some(usage(11, 5, 16, 0, 0)));
            assert_eq!(o.finish, Some(FinishReason::Stop));
        }
        "openai-responses/nonstream_function_call.json" => {
            assert_eq!(
                calls_of(o),
                [call(
                    "call_nJmCK7SJe3ajdYYplIbH0KgL",
                    "multiply",
                    json!({"a": 1231, "b": 2331})
                )]
            );
            // The item's id goes back with the call, as on the streamed path.
            assert_eq!(
                o.calls[0].opaque,
                Some(json!({"responses": {
                    "item_id": "fc_05c01d5dceb461c50169fab1bc6a208196a8f7957526d1ef99"}}))
            );
            assert_eq!(o.usage, Some(usage(58, 23, 81, 0, 0)));
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        "anthropic/nonstream_text.json" => {
            assert_eq!(
                o.text,
                "Hello! I'm doing well, thanks for asking. How are you doing today? Is there \
                 anything I can help you with?"
            );
            assert_eq!(o.usage, Some(usage(12, 29, 41, 0, 0)));
            assert_eq!(o.finish, Some(FinishReason::Stop));
        }
        "anthropic/nonstream_parallel_tool_use.json" => {
            assert!(
                o.text
                    .starts_with("I'll help you find out who is the youngest")
            );
            let people: Vec<Value> = o
                .calls
                .iter()
                .map(|c| parsed_args(c)["name"].clone())
                .collect();
            assert_eq!(
                people,
                [
                    json!("Alice"),
                    json!("Bob"),
                    json!("Charlie"),
                    json!("Daisy")
                ]
            );
            assert!(o.calls.iter().all(|c| c.name == "retrieve_entity_info"));
            assert_eq!(o.calls[0].id, "toolu_0167cfEnoQaPviGdVXA95zcu");
            assert_eq!(o.calls[3].id, "toolu_013mnQZbgtK2oe3Mo3XKJsx3");
            assert!(o.calls.iter().all(|c| c.opaque.is_none()), "no thinking");
            assert_eq!(o.usage, Some(usage(423, 202, 625, 0, 0)));
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        "gemini/nonstream_text.json" => {
            assert_eq!(
                o.text,
                "There are **3** r's in strawberry.\n\nHere is the breakdown: st**r**awbe**rr**y."
            );
            // Thought tokens are output, and reported apart.
            assert_eq!(o.usage, Some(usage(9, 272, 281, 0, 244)));
            assert_eq!(o.finish, Some(FinishReason::Stop));
        }
        "gemini/nonstream_function_call.json" => {
            assert_eq!(
                calls_of(o),
                [call(
                    "call_0",
                    "weather",
                    json!({"location": "San Francisco"})
                )]
            );
            let signature = fixture["candidates"][0]["content"]["parts"][0]["thoughtSignature"]
                .as_str()
                .unwrap();
            assert_eq!(
                o.calls[0].opaque,
                Some(json!({"gemini": {"thought_signature": signature}}))
            );
            assert_eq!(o.usage, Some(usage(29, 908, 937, 0, 893)));
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        other => panic!("{other}: no expectation written for this recording"),
    }
}

/// The recorded stream of the same conversation as a recorded whole response, where the
/// recordings hold one (a separate call of the same request: the ids differ).
fn same_conversation(name: &str) -> Option<&'static str> {
    match name {
        "openai-chat/nonstream_parallel_tool_calls.json" => Some("stream_parallel_tool_calls.sse"),
        "openai-responses/nonstream_text.json" => Some("stream_text.sse"),
        "openai-responses/nonstream_function_call.json" => Some("stream_function_call.sse"),
        _ => None,
    }
}

#[tokio::test]
async fn every_recorded_whole_response_decodes_as_its_stream_would() {
    let Some(root) = upstream_dir() else { return };
    let (mut seen, mut paired) = (0, 0);
    for dir in [
        "openai-chat",
        "ollama",
        "openai-responses",
        "anthropic",
        "gemini",
    ] {
        for path in files(&root, dir, ".json") {
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            if !file.starts_with("nonstream_") {
                continue;
            }
            let name = format!("{dir}/{file}");
            let text = std::fs::read_to_string(&path).unwrap();
            let (o, request) = whole_call(dir, text.clone()).await;
            assert_asks_for_whole(dir, &request);
            check(&name, &o, &serde_json::from_str(&text).unwrap());
            if let Some(stream) = same_conversation(&name) {
                let streamed = recorded_stream(&root, dir, stream).await;
                assert_same_answer(&name, &o, &streamed, false);
                paired += 1;
            }
            seen += 1;
        }
    }
    assert_eq!((seen, paired), (10, 3), "recordings found");
}

/// This crate's whole bodies of the answers its streamed fixtures hold: the same chunks
/// added up, ids and what goes back with the calls (thinking blocks and signatures, thought
/// signatures, reasoning items, item ids) included.
#[tokio::test]
async fn a_whole_response_gives_what_the_stream_of_the_same_answer_gives() {
    for (format, whole, streamed) in [
        (
            CHAT,
            "whole_parallel_tool_calls.json",
            "parallel_tool_calls.sse",
        ),
        (
            CHAT,
            "whole_reasoning_content_usage.json",
            "reasoning_content_usage_on_finish.sse",
        ),
        (ANTHROPIC, "whole_thinking_tools.json", "thinking_tools.sse"),
        (ANTHROPIC, "whole_max_tokens.json", "max_tokens.sse"),
        (
            GEMINI,
            "whole_thoughts_parallel_calls.json",
            "thoughts_parallel_calls.sse",
        ),
        (GEMINI, "whole_safety.json", "safety.sse"),
        (
            RESPONSES,
            "whole_reasoning_tool_calls.json",
            "reasoning_tool_calls.sse",
        ),
        (
            RESPONSES,
            "whole_incomplete_max_output.json",
            "incomplete_max_output.sse",
        ),
    ] {
        let label = format!("{}/{whole}", format.dir);
        let w = format.decode_whole(whole);
        let s = format.decode(streamed).await;
        assert!(w.finish.is_some(), "{label}: {w:?}");
        assert_same_answer(&label, &w, &s, true);
    }
    // What goes back with the calls is really there (not two empty sides).
    let o = ANTHROPIC.decode_whole("whole_thinking_tools.json");
    assert_eq!(
        o.calls[0].opaque.as_ref().unwrap()["anthropic"]["thinking"][0]["signature"],
        "EqQBCgIYAhIM1gbcDa9GJwZA"
    );
    let o = RESPONSES.decode_whole("whole_reasoning_tool_calls.json");
    assert_eq!(
        o.calls[0].opaque.as_ref().unwrap()["responses"]["reasoning"][0]["encrypted_content"],
        "gAAAAB-opaque"
    );
    assert_eq!(o.reasoning, "**Weighing** both.\n\nAgent2 is clearer.");
}

/// A whole call sends what the streamed call sends, less the stream flags, in every wire
/// format (Azure's deployment URL included); flags the config sets go too.
#[tokio::test]
async fn a_whole_call_is_the_streamed_call_without_its_stream() {
    for (dir, fixture) in [
        ("chat", "whole_parallel_tool_calls.json"),
        ("azure", "whole_parallel_tool_calls.json"),
        ("responses", "whole_reasoning_tool_calls.json"),
        ("anthropic", "whole_thinking_tools.json"),
        ("gemini", "whole_thoughts_parallel_calls.json"),
    ] {
        let format_dir = if dir == "azure" { "chat" } else { dir };
        let body = std::fs::read_to_string(fixture_path(format_dir, fixture)).unwrap();
        let (url, upstream) = serve(vec![json_reply(200, body)]).await;
        let mut params = Map::new();
        params.insert("temperature".into(), json!(0.3));
        // The OpenAI formats' flags, and Anthropic's: a config that sets them does not
        // make a whole call stream.
        if dir != "gemini" {
            params.insert("stream".into(), json!(true));
        }
        if !matches!(dir, "gemini" | "anthropic") {
            params.insert(
                "stream_options".into(),
                json!({"include_obfuscation": false}),
            );
        }
        let p = provider(dir, &format!("{url}/v1"), params, fast_policy(1));
        let (chunks, error) = collect(p.stream(whole(coordination_turn()))).await;
        assert!(error.is_none(), "{dir}: {error:?}");
        assert_eq!(outcome(chunks, None).calls.len(), 2, "{dir}");
        // The same request streamed, for comparison.
        collect(p.stream(coordination_turn())).await;
        let requests = upstream.requests();
        let (whole_seen, streamed) = (&requests[0], &requests[1]);
        assert_asks_for_whole(dir, whole_seen);
        assert_eq!(streamed.headers["accept"], "text/event-stream", "{dir}");
        let mut expected = streamed.body.clone();
        let fields = expected.as_object_mut().unwrap();
        if dir != "gemini" {
            assert_eq!(fields.remove("stream"), Some(json!(true)), "{dir}");
        }
        fields.remove("stream_options");
        assert_eq!(whole_seen.body, expected, "{dir}");
        let temperature = match dir {
            "gemini" => &whole_seen.body["generationConfig"]["temperature"],
            _ => &whole_seen.body["temperature"],
        };
        assert_eq!(temperature, &json!(0.3), "{dir}");
    }
}

/// A loopback upstream speaking raw HTTP/1.1: connection n (counted) gets `answers[n]`
/// (the last one repeats) once its request has been read, then is held open for a minute
/// or closed, as `hold` says.
async fn raw_upstream(answers: Vec<Vec<u8>>, hold: bool) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&count);
    tokio::spawn(async move {
        for _ in 0..16 {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let answer = answers[n.min(answers.len() - 1)].clone();
            tokio::spawn(async move {
                read_request(&mut conn).await;
                conn.write_all(&answer).await.unwrap();
                if hold {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
            });
        }
    });
    (format!("http://{addr}"), count)
}

/// Reads one request (head, then its `content-length` of body), within 5 s.
async fn read_request(conn: &mut tokio::net::TcpStream) {
    let read = async {
        let mut bytes = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "the request ended early");
            bytes.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&bytes).to_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let length: usize = text[..end]
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                if bytes.len() >= end + 4 + length {
                    return;
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .unwrap();
}

fn head(length: usize) -> String {
    format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n")
}

const CHAT_WHOLE: &str = r#"{"choices":[{"index":0,"message":{"content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;

/// Until its body is complete nothing of a whole call has gone out: a body that breaks off
/// is retried like a call that got no response; the call's chunks are the complete body's.
#[tokio::test]
async fn a_whole_body_that_breaks_off_is_retried() {
    let broken = format!("{}{}", head(CHAT_WHOLE.len()), &CHAT_WHOLE[..20]);
    let complete = format!("{}{CHAT_WHOLE}", head(CHAT_WHOLE.len()));
    let (url, connections) =
        raw_upstream(vec![broken.into_bytes(), complete.into_bytes()], false).await;
    let p = provider("chat", &url, Map::new(), fast_policy(2));
    let (chunks, error) = collect(p.stream(whole(presentation_turn()))).await;
    assert!(error.is_none(), "{error:?}");
    let o = outcome(chunks, None);
    assert_eq!(
        (o.text.as_str(), o.usage),
        ("Hi", Some(usage(3, 1, 4, 0, 0)))
    );
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    // With no attempt left, the broken body is the call's error.
    let broken = format!("{}{}", head(CHAT_WHOLE.len()), &CHAT_WHOLE[..20]);
    let (url, connections) = raw_upstream(vec![broken.into_bytes()], false).await;
    let p = provider("chat", &url, Map::new(), fast_policy(1));
    let (chunks, error) = collect(p.stream(whole(presentation_turn()))).await;
    assert!(chunks.is_empty(), "{chunks:?}");
    let error = error.unwrap();
    assert_eq!(error.kind, ProviderErrorKind::Connection, "{error:?}");
    assert!(error.message.contains("response body broken"), "{error:?}");
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

/// A body that stops coming fails at its deadline (the idle limit, for the whole body),
/// however the head came; each attempt gets its own.
#[tokio::test]
async fn a_whole_body_that_stalls_fails_at_its_deadline() {
    let stalled = format!("{}{}", head(CHAT_WHOLE.len()), &CHAT_WHOLE[..20]);
    let (url, connections) = raw_upstream(vec![stalled.into_bytes()], true).await;
    let policy = CallPolicy {
        idle_timeout: Duration::from_secs(1),
        ..fast_policy(2)
    };
    let p = provider("chat", &url, Map::new(), policy);
    let start = std::time::Instant::now();
    let (chunks, error) = collect(p.stream(whole(presentation_turn()))).await;
    let elapsed = start.elapsed();
    assert!(chunks.is_empty(), "{chunks:?}");
    let error = error.unwrap();
    assert_eq!(error.kind, ProviderErrorKind::Timeout, "{error:?}");
    assert!(error.message.contains("within 1s of its head"), "{error:?}");
    assert!(error.message.contains("20 bytes came"), "{error:?}");
    assert_eq!(connections.load(Ordering::SeqCst), 2, "retried once");
    // Two deadlines, not the minute the upstream holds each connection.
    assert!(elapsed >= Duration::from_secs(2), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(30), "{elapsed:?}");
}

/// Errors as a stream's: a retryable status is retried, an error the 200 body reports is the
/// call's answer (once), a body that is not JSON or holds no answer is an invalid response.
#[tokio::test]
async fn errors_of_a_whole_call() {
    let (url, upstream) = serve(vec![
        json_reply(503, r#"{"error":{"message":"busy","type":"server_error"}}"#),
        json_reply(200, CHAT_WHOLE),
    ])
    .await;
    let p = provider("chat", &url, Map::new(), fast_policy(3));
    let (chunks, error) = collect(p.stream(whole(presentation_turn()))).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(outcome(chunks, None).text, "Hi");
    assert_eq!(upstream.count.load(Ordering::SeqCst), 2);
    for (dir, body, kind, words) in [
        // OpenRouter reports a failed route in a 200 body.
        (
            "chat",
            r#"{"error":{"message":"Provider returned error","code":502}}"#,
            ProviderErrorKind::Stream,
            "Provider returned error",
        ),
        (
            "chat",
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens"}}"#,
            ProviderErrorKind::ContextLength,
            "maximum context length",
        ),
        (
            "chat",
            "data: {\"choices\":[]}\n\n",
            ProviderErrorKind::InvalidResponse,
            "malformed response body",
        ),
        (
            "chat",
            r#"{"id":"x","choices":[]}"#,
            ProviderErrorKind::InvalidResponse,
            "has no choices",
        ),
        (
            "responses",
            r#"{"id":"r","status":"queued","output":[]}"#,
            ProviderErrorKind::InvalidResponse,
            "still queued",
        ),
        (
            "responses",
            r#"{"id":"r","status":"failed","error":{"code":"server_error","message":"went wrong"}}"#,
            ProviderErrorKind::Stream,
            "went wrong",
        ),
        (
            "anthropic",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ProviderErrorKind::Stream,
            "Overloaded",
        ),
        (
            "gemini",
            "{}",
            ProviderErrorKind::InvalidResponse,
            "has no candidates",
        ),
    ] {
        let (url, upstream) = serve(vec![json_reply(200, body)]).await;
        let p = provider(dir, &url, Map::new(), fast_policy(3));
        let (chunks, error) = collect(p.stream(whole(presentation_turn()))).await;
        assert!(chunks.is_empty(), "{dir} {body}: {chunks:?}");
        let error = error.unwrap_or_else(|| panic!("{dir} {body}: no error"));
        assert_eq!(error.kind, kind, "{dir} {body}: {error:?}");
        assert!(error.message.contains(words), "{dir} {body}: {error:?}");
        assert_eq!(upstream.count.load(Ordering::SeqCst), 1, "{dir} {body}");
    }
}

/// The bounds of a whole response: its body (16 MiB), and its answer (8 MiB, as a stream's:
/// text, reasoning and tool calls together).
#[tokio::test]
async fn a_whole_response_is_bounded_like_a_stream() {
    let padded = format!("{}{CHAT_WHOLE}", " ".repeat(MAX_WHOLE_BYTES));
    let (url, upstream) = serve(vec![json_reply(200, padded)]).await;
    let p = provider("chat", &url, Map::new(), fast_policy(2));
    let (chunks, error) = collect(p.stream(whole(presentation_turn()))).await;
    assert!(chunks.is_empty());
    let error = error.unwrap();
    assert_eq!(error.kind, ProviderErrorKind::InvalidResponse, "{error:?}");
    assert!(error.message.contains("16 MiB"), "{error:?}");
    assert_eq!(upstream.count.load(Ordering::SeqCst), 1, "not retried");
    // Just under the answer's cap: a whole answer; over it, in text or in a call's
    // arguments: the error a stream gives.
    let big = |n: usize| "x".repeat(n);
    let text = |n: usize| json!({"choices": [{"index": 0, "message": {"content": big(n)}, "finish_reason": "stop"}]});
    let args = |n: usize| {
        json!({"choices": [{"index": 0, "message": {"tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "f", "arguments": big(n)}}]}, "finish_reason": "tool_calls"}]})
    };
    let decode = |body: Value| (CHAT.whole)("test", body.to_string().as_bytes());
    assert!(decode(text(MAX_ANSWER_BYTES)).is_ok());
    assert!(decode(args(MAX_ANSWER_BYTES - 2048)).is_ok());
    for body in [text(MAX_ANSWER_BYTES + 1), args(MAX_ANSWER_BYTES)] {
        let error = decode(body).unwrap_err();
        assert_eq!(error.kind, ProviderErrorKind::InvalidResponse);
        assert!(error.message.contains("8 MiB"), "{error:?}");
    }
}

/// A whole call's head comes once the answer is generated: it waits `whole_timeout` for
/// it, not the streamed call's `first_byte_timeout`; and one that ran out of it is not
/// asked again (the upstream may have generated and billed it).
#[tokio::test]
async fn a_whole_call_waits_for_its_generation_and_is_not_asked_twice() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&connections);
    let answer = format!("{}{CHAT_WHOLE}", head(CHAT_WHOLE.len()));
    tokio::spawn(async move {
        for _ in 0..8 {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let answer = answer.clone();
            tokio::spawn(async move {
                read_request(&mut conn).await;
                // The first call generates for 600 ms; the later ones never finish.
                let generation = if n == 0 { 600 } else { 60_000 };
                tokio::time::sleep(Duration::from_millis(generation)).await;
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    let policy = CallPolicy {
        first_byte_timeout: Duration::from_millis(100),
        whole_timeout: Duration::from_secs(5),
        ..fast_policy(3)
    };
    let p = provider("chat", &url, Map::new(), policy);
    let (chunks, error) = collect(p.stream(whole(presentation_turn()))).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(outcome(chunks, None).text, "Hi");
    assert_eq!(connections.load(Ordering::SeqCst), 1);
    let policy = CallPolicy {
        whole_timeout: Duration::from_millis(300),
        ..fast_policy(3)
    };
    let p = provider("chat", &url, Map::new(), policy);
    let (chunks, error) = collect(p.stream(whole(presentation_turn()))).await;
    assert!(chunks.is_empty(), "{chunks:?}");
    let error = error.unwrap();
    assert_eq!(error.kind, ProviderErrorKind::Timeout, "{error:?}");
    assert!(error.message.contains("300ms"), "{error:?}");
    assert_eq!(
        connections.load(Ordering::SeqCst),
        2,
        "asked once, not retried"
    );
}
