//! The Chat Completions client: decoding our own recorded-style fixtures
//! (tests/fixtures/chat) and talking HTTP to a tiny in-test server on loopback.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use futures::StreamExt;
use massgen_core::Secret;
use massgen_providers::chat_completions::{
    ChatCompletions, ChatCompletionsConfig, ChatCompletionsProvider,
};
use massgen_providers::decode_stream;
use massgen_providers::http_client;
use massgen_providers::retry::CallPolicy;
use massgen_providers::{
    FinishReason, Message, Provider, ProviderChunk, ProviderErrorKind, ProviderRequest, ToolCall,
    ToolChoice, ToolSpec, Usage,
};
use serde_json::{Value, json};

use crate::support::{CHAT, SECOND, collect, fast_policy};

// ---------------------------------------------------------------------------------------
// Decoding fixtures

fn text_of(chunks: &[ProviderChunk]) -> String {
    chunks
        .iter()
        .filter_map(|c| match c {
            ProviderChunk::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn reasoning_of(chunks: &[ProviderChunk]) -> String {
    chunks
        .iter()
        .filter_map(|c| match c {
            ProviderChunk::Reasoning(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
        opaque: None,
    }
}

/// The announcement of a call, sent when its name arrives.
fn started(name: &str) -> ProviderChunk {
    ProviderChunk::ToolCallStarted { name: name.into() }
}

#[tokio::test]
async fn text_with_include_usage() {
    let (chunks, error) = CHAT.chunks("text_include_usage.sse").await;
    assert_eq!(error, None);
    assert_eq!(
        chunks,
        vec![
            ProviderChunk::Text("Hel".into()),
            ProviderChunk::Text("lo, wörld".into()),
            ProviderChunk::Usage(Usage {
                input_tokens: 11,
                output_tokens: 4,
                total_tokens: 15,
                cached_input_tokens: 3,
                reasoning_tokens: 0,
            }),
            ProviderChunk::Finish(FinishReason::Stop),
        ]
    );
}

#[tokio::test]
async fn tool_call_split_over_many_deltas() {
    let (chunks, error) = CHAT.chunks("tool_call_split.sse").await;
    assert_eq!(error, None);
    assert_eq!(
        chunks,
        vec![
            started("new_answer"),
            ProviderChunk::ToolCall(call("call_abc", "new_answer", r#"{"content": "42\n"}"#)),
            ProviderChunk::Usage(Usage {
                input_tokens: 50,
                output_tokens: 9,
                total_tokens: 59,
                ..Usage::default()
            }),
            ProviderChunk::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn parallel_tool_calls_interleaved() {
    let (chunks, error) = CHAT.chunks("parallel_tool_calls.sse").await;
    assert_eq!(error, None);
    assert_eq!(
        chunks,
        vec![
            started("get_weather"),
            started("get_stock"),
            ProviderChunk::ToolCall(call("call_w", "get_weather", r#"{"city": "Paris"}"#)),
            ProviderChunk::ToolCall(call("call_s", "get_stock", r#"{"ticker": "ACME"}"#)),
            ProviderChunk::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn reasoning_content_and_usage_on_finish_chunk() {
    let (chunks, error) = CHAT.chunks("reasoning_content_usage_on_finish.sse").await;
    assert_eq!(error, None);
    assert_eq!(
        chunks,
        vec![
            ProviderChunk::Reasoning("Think".into()),
            ProviderChunk::Reasoning("ing.".into()),
            ProviderChunk::Text("Four".into()),
            ProviderChunk::Usage(Usage {
                input_tokens: 13,
                output_tokens: 20,
                total_tokens: 33,
                cached_input_tokens: 0,
                reasoning_tokens: 17,
            }),
            ProviderChunk::Finish(FinishReason::Stop),
        ]
    );
}

#[tokio::test]
async fn gpt_oss_reasoning_whole_call_and_x_groq_usage() {
    let (chunks, error) = CHAT.chunks("reasoning_gpt_oss_x_groq.sse").await;
    assert_eq!(error, None);
    assert_eq!(reasoning_of(&chunks), "Need a vote.");
    assert_eq!(
        chunks[2..],
        [
            started("vote"),
            ProviderChunk::ToolCall(call("fc_1", "vote", r#"{"agent_id":"agent2"}"#)),
            ProviderChunk::Usage(Usage {
                input_tokens: 30,
                output_tokens: 12,
                total_tokens: 42,
                cached_input_tokens: 0,
                reasoning_tokens: 5,
            }),
            ProviderChunk::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn error_data_chunk_becomes_stream_error() {
    let (chunks, error) = CHAT.chunks("error_in_stream.sse").await;
    assert_eq!(chunks, vec![ProviderChunk::Text("Par".into())]);
    let error = error.expect("an error");
    assert_eq!(error.kind, ProviderErrorKind::Stream);
    assert_eq!(error.code.as_deref(), Some("503"));
    assert_eq!(error.status, Some(503));
    assert_eq!(error.error_type.as_deref(), Some("server_error"));
    assert!(error.message.contains("error while processing"));
}

#[tokio::test]
async fn error_event_saying_context_length_becomes_context_length() {
    let (chunks, error) = CHAT.chunks("error_event_context_length.sse").await;
    assert_eq!(chunks, vec![ProviderChunk::Reasoning("hmm".into())]);
    let error = error.expect("an error");
    assert_eq!(error.kind, ProviderErrorKind::ContextLength);
    assert_eq!(error.status, Some(400));
    assert_eq!(error.code.as_deref(), Some("context_length_exceeded"));
}

#[tokio::test]
async fn malformed_chunk_is_invalid_response() {
    let (chunks, error) = CHAT.chunks("malformed_chunk.sse").await;
    assert_eq!(chunks, vec![ProviderChunk::Text("ok".into())]);
    assert_eq!(
        error.map(|e| e.kind),
        Some(ProviderErrorKind::InvalidResponse)
    );
}

#[tokio::test]
async fn early_eof_is_a_connection_error() {
    let (chunks, error) = CHAT.chunks("early_eof.sse").await;
    assert_eq!(text_of(&chunks), "half an answer");
    let error = error.expect("an error");
    assert_eq!(error.kind, ProviderErrorKind::Connection);
    assert!(error.message.contains("ended early"), "{}", error.message);
}

#[tokio::test]
async fn comments_and_a_resent_call_without_finish_reason() {
    let (chunks, error) = CHAT.chunks("comments_resent_call_no_finish.sse").await;
    assert_eq!(error, None);
    assert_eq!(
        chunks,
        vec![
            started("llm_version"),
            ProviderChunk::ToolCall(call("0", "llm_version", "{}")),
            ProviderChunk::Usage(Usage {
                input_tokens: 57,
                output_tokens: 17,
                total_tokens: 74,
                ..Usage::default()
            }),
            ProviderChunk::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn refusal_is_text_and_finish_without_done_completes() {
    let (chunks, error) = CHAT.chunks("refusal_crlf_no_done.sse").await;
    assert_eq!(error, None);
    assert_eq!(
        chunks,
        vec![
            ProviderChunk::Text("I cannot help".into()),
            ProviderChunk::Finish(FinishReason::ContentFilter),
        ]
    );
}

#[tokio::test]
async fn body_error_mid_stream_is_a_connection_error() {
    let pieces: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from_static(
            b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n",
        )),
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset by peer",
        )),
    ];
    let stream =
        decode_stream::<ChatCompletions>("test".into(), futures::stream::iter(pieces), SECOND);
    let (chunks, error) = collect(stream).await;
    assert_eq!(chunks, vec![ProviderChunk::Text("a".into())]);
    let error = error.expect("an error");
    assert_eq!(error.kind, ProviderErrorKind::Connection);
    assert!(error.message.contains("reset by peer"), "{}", error.message);
}

#[tokio::test(start_paused = true)]
async fn silence_between_bytes_is_a_timeout() {
    let first = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n: keepalive\n\n",
    ))]);
    let body = first.chain(futures::stream::pending());
    let stream = decode_stream::<ChatCompletions>("test".into(), body, Duration::from_secs(30));
    let (chunks, error) = collect(stream).await;
    assert_eq!(chunks, vec![ProviderChunk::Text("a".into())]);
    assert_eq!(error.map(|e| e.kind), Some(ProviderErrorKind::Timeout));
}

// ---------------------------------------------------------------------------------------
// HTTP against an in-test server

/// One scripted reply of the test server.
#[derive(Clone)]
enum Reply {
    Status(u16, Vec<(&'static str, &'static str)>, String),
    Sse(String),
    /// Headers and `first`, then silence.
    Stall(String),
    /// Headers, `first`, then a chunk every 20 ms; signals `dropped` when the server
    /// stops (the client went away).
    Endless(String, Arc<tokio::sync::Notify>),
    /// Waits before answering (first-byte timeout).
    Slow(Duration),
}

#[derive(Default)]
struct Script {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<(HeaderMap, Value)>>,
    count: AtomicUsize,
}

async fn handle(State(script): State<Arc<Script>>, headers: HeaderMap, body: Bytes) -> Response {
    script.count.fetch_add(1, Ordering::SeqCst);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    script.requests.lock().unwrap().push((headers, body));
    let reply = {
        let mut replies = script.replies.lock().unwrap();
        if replies.len() > 1 {
            replies.pop_front()
        } else {
            replies.front().cloned()
        }
    };
    let sse = |body: Body| {
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(body)
            .unwrap()
    };
    match reply.expect("a scripted reply") {
        Reply::Status(status, headers, body) => {
            let mut response = Response::builder().status(StatusCode::from_u16(status).unwrap());
            for (name, value) in headers {
                response = response.header(name, value);
            }
            response.body(Body::from(body)).unwrap()
        }
        Reply::Sse(text) => sse(Body::from(text)),
        Reply::Stall(first) => {
            let stream = futures::stream::iter([Ok::<_, Infallible>(Bytes::from(first))])
                .chain(futures::stream::pending());
            sse(Body::from_stream(stream))
        }
        Reply::Endless(first, dropped) => {
            struct Guard(Arc<tokio::sync::Notify>);
            impl Drop for Guard {
                fn drop(&mut self) {
                    self.0.notify_one();
                }
            }
            let guard = Guard(dropped);
            let stream = async_stream::stream! {
                let _guard = guard;
                yield Ok::<_, Infallible>(Bytes::from(first));
                loop {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    yield Ok(Bytes::from_static(b": still here\n\n"));
                }
            };
            sse(Body::from_stream(stream))
        }
        Reply::Slow(wait) => {
            tokio::time::sleep(wait).await;
            sse(Body::from(CHAT.text("text_include_usage.sse")))
        }
    }
}

async fn serve(replies: Vec<Reply>) -> (String, Arc<Script>) {
    let script = Arc::new(Script {
        replies: Mutex::new(replies.into()),
        ..Script::default()
    });
    let router = Router::new()
        .route("/v1/chat/completions", post(handle))
        .with_state(Arc::clone(&script));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (format!("http://{addr}/v1/"), script)
}

fn provider(base_url: &str, policy: CallPolicy, key: Option<&str>) -> ChatCompletionsProvider {
    let mut params = serde_json::Map::new();
    params.insert("temperature".into(), json!(0.3));
    params.insert("reasoning_effort".into(), json!("low"));
    let config = ChatCompletionsConfig {
        provider_name: "mock".into(),
        model: "gpt-test".into(),
        base_url: base_url.into(),
        api_key: key.map(Secret::new),
        params,
        policy,
    };
    ChatCompletionsProvider::new(config, http_client().unwrap()).unwrap()
}

fn hello() -> ProviderRequest {
    ProviderRequest {
        messages: Arc::new(vec![Message::system("be brief"), Message::user("hi")]),
        ..ProviderRequest::default()
    }
}

fn ok_sse() -> Reply {
    Reply::Sse(CHAT.text("text_include_usage.sse"))
}

#[tokio::test]
async fn request_shape_and_authorization() {
    let (url, script) = serve(vec![ok_sse()]).await;
    let provider = provider(&url, fast_policy(1), Some("sk-test-123456789"));
    let request = ProviderRequest {
        messages: Arc::new(vec![Message::user("hi")]),
        tools: vec![Arc::new(ToolSpec {
            name: "vote".into(),
            description: "Vote for an answer".into(),
            parameters: json!({"type": "object", "properties": {"agent_id": {"type": "string"}}}),
        })],
        tool_choice: Some(ToolChoice::Required),
        parallel_tool_calls: Some(false),
        ..ProviderRequest::default()
    };
    let stream = provider.stream(request);
    assert_eq!(
        script.count.load(Ordering::SeqCst),
        0,
        "the call starts lazily"
    );
    let (chunks, error) = collect(stream).await;
    assert_eq!(error, None);
    assert_eq!(text_of(&chunks), "Hello, wörld");

    let requests = script.requests.lock().unwrap();
    let (headers, body) = &requests[0];
    assert_eq!(
        headers.get("authorization").and_then(|v| v.to_str().ok()),
        Some("Bearer sk-test-123456789")
    );
    assert_eq!(
        body,
        &json!({
            "temperature": 0.3,
            "reasoning_effort": "low",
            "model": "gpt-test",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {
                "name": "vote",
                "description": "Vote for an answer",
                "parameters": {"type": "object", "properties": {"agent_id": {"type": "string"}}},
            }}],
            "tool_choice": "required",
            "parallel_tool_calls": false,
            "stream": true,
            "stream_options": {"include_usage": true},
        })
    );
}

#[tokio::test]
async fn no_key_means_no_authorization_header() {
    let (url, script) = serve(vec![ok_sse()]).await;
    let (_, error) = collect(provider(&url, fast_policy(1), None).stream(hello())).await;
    assert_eq!(error, None);
    let requests = script.requests.lock().unwrap();
    assert!(requests[0].0.get("authorization").is_none());
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_retried_then_succeeds() {
    let limited = Reply::Status(
        429,
        vec![("retry-after", "0")],
        r#"{"error":{"message":"Rate limit reached","type":"tokens","code":"rate_limit_exceeded"}}"#
            .into(),
    );
    let (url, script) = serve(vec![limited, ok_sse()]).await;
    let (chunks, error) = collect(provider(&url, fast_policy(3), None).stream(hello())).await;
    assert_eq!(error, None);
    assert_eq!(text_of(&chunks), "Hello, wörld");
    assert_eq!(
        chunks.last(),
        Some(&ProviderChunk::Finish(FinishReason::Stop))
    );
    assert_eq!(script.count.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn retry_after_ms_is_honoured_for_overload() {
    let overloaded = Reply::Status(529, vec![("retry-after-ms", "3.5")], String::new());
    let (url, script) = serve(vec![overloaded, ok_sse()]).await;
    let (_, error) = collect(provider(&url, fast_policy(2), None).stream(hello())).await;
    assert_eq!(error, None);
    assert_eq!(script.count.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn server_errors_are_retried_up_to_max_attempts() {
    let body = CHAT.text("error_500_vllm_flat.json");
    let (url, script) = serve(vec![Reply::Status(500, vec![], body)]).await;
    let (chunks, error) = collect(provider(&url, fast_policy(3), None).stream(hello())).await;
    assert!(chunks.is_empty());
    let error = error.expect("an error");
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert_eq!(error.status, Some(500));
    assert_eq!(error.message, "Engine loop has died");
    assert_eq!(error.code.as_deref(), Some("500"));
    assert_eq!(error.provider, "mock");
    assert_eq!(script.count.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn authentication_errors_are_not_retried_and_the_key_is_not_echoed() {
    let body = r#"{"error":{"message":"Incorrect API key provided: sk-secret-key-42.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
    let (url, script) = serve(vec![Reply::Status(401, vec![], body.into())]).await;
    let provider = provider(&url, fast_policy(3), Some("sk-secret-key-42"));
    let (_, error) = collect(provider.stream(hello())).await;
    let error = error.expect("an error");
    assert_eq!(error.kind, ProviderErrorKind::Authentication);
    assert_eq!(error.code.as_deref(), Some("invalid_api_key"));
    assert!(
        !error.message.contains("sk-secret-key-42"),
        "{}",
        error.message
    );
    assert!(!error.to_string().contains("sk-secret-key-42"));
    assert!(!format!("{provider:?}").contains("sk-secret-key-42"));
    assert_eq!(script.count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn x_should_retry_false_stops_retries() {
    let reply = Reply::Status(503, vec![("x-should-retry", "false")], "busy".into());
    let (url, script) = serve(vec![reply]).await;
    let (_, error) = collect(provider(&url, fast_policy(3), None).stream(hello())).await;
    let error = error.expect("an error");
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert_eq!(error.message, "busy");
    assert_eq!(script.count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn retry_after_beyond_the_limit_fails_at_once_with_the_wait() {
    let reply = Reply::Status(429, vec![("retry-after", "120")], "{}".into());
    let (url, script) = serve(vec![reply]).await;
    let (_, error) = collect(provider(&url, fast_policy(3), None).stream(hello())).await;
    let error = error.expect("an error");
    assert_eq!(error.kind, ProviderErrorKind::RateLimited);
    assert_eq!(error.retry_after, Some(Duration::from_secs(120)));
    assert_eq!(script.count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn context_length_400_is_context_length_and_not_retried() {
    let body = CHAT.text("error_400_context_length.json");
    let (url, script) = serve(vec![Reply::Status(400, vec![], body)]).await;
    let (_, error) = collect(provider(&url, fast_policy(3), None).stream(hello())).await;
    let error = error.expect("an error");
    assert_eq!(error.kind, ProviderErrorKind::ContextLength);
    assert_eq!(error.status, Some(400));
    assert_eq!(error.code.as_deref(), Some("context_length_exceeded"));
    assert_eq!(error.error_type.as_deref(), Some("invalid_request_error"));
    assert_eq!(script.count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn stalled_stream_hits_the_idle_timeout_and_is_not_retried() {
    let first = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"so far\"}}]}\n\n";
    let (url, script) = serve(vec![Reply::Stall(first.into())]).await;
    let policy = CallPolicy {
        idle_timeout: Duration::from_millis(200),
        ..fast_policy(3)
    };
    let (chunks, error) = collect(provider(&url, policy, None).stream(hello())).await;
    assert_eq!(chunks, vec![ProviderChunk::Text("so far".into())]);
    assert_eq!(error.map(|e| e.kind), Some(ProviderErrorKind::Timeout));
    assert_eq!(script.count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn slow_headers_hit_the_first_byte_timeout_and_are_retried() {
    let (url, script) = serve(vec![Reply::Slow(Duration::from_secs(10))]).await;
    let policy = CallPolicy {
        first_byte_timeout: Duration::from_millis(150),
        ..fast_policy(2)
    };
    let (_, error) = collect(provider(&url, policy, None).stream(hello())).await;
    assert_eq!(error.map(|e| e.kind), Some(ProviderErrorKind::Timeout));
    assert_eq!(script.count.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn connection_refused_is_a_connection_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let url = format!("http://{addr}/v1");
    let (_, error) = collect(provider(&url, fast_policy(2), None).stream(hello())).await;
    let error = error.expect("an error");
    assert_eq!(error.kind, ProviderErrorKind::Connection);
    assert_eq!(error.status, None);
    assert!(
        !error.message.contains(&addr.to_string()),
        "{}",
        error.message
    );
}

/// The operator's upstream address never reaches a client, even when the upstream quotes
/// it: every form of it is replaced (worked out when the first error needs it).
#[tokio::test]
async fn an_error_quoting_the_upstream_address_is_told_without_it() {
    let (url, script) = serve(Vec::new()).await;
    let endpoint = format!("{url}chat/completions");
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/v1/")
        .to_string();
    let ip = addr.split(':').next().unwrap().to_string();
    let quoted = json!({"error": {"message": format!(
        "no such model at POST {endpoint} (from {addr}, host {ip})"
    )}});
    *script.replies.lock().unwrap() = [Reply::Status(404, vec![], quoted.to_string())].into();
    let (_, error) = collect(provider(&url, fast_policy(1), None).stream(hello())).await;
    let error = error.expect("an error");
    assert_eq!(error.status, Some(404));
    assert!(error.message.contains("<upstream>"), "{}", error.message);
    for place in [endpoint.as_str(), &addr, &ip] {
        assert!(
            !error.message.contains(place),
            "{place} in {}",
            error.message
        );
    }
}

#[tokio::test]
async fn dropping_the_stream_aborts_the_request() {
    let dropped = Arc::new(tokio::sync::Notify::new());
    let first = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tick\"}}]}\n\n";
    let (url, _script) = serve(vec![Reply::Endless(first.into(), Arc::clone(&dropped))]).await;
    let mut stream = provider(&url, fast_policy(1), None).stream(hello());
    let first_chunk = stream.next().await;
    assert_eq!(first_chunk, Some(Ok(ProviderChunk::Text("tick".into()))));
    drop(stream);
    tokio::time::timeout(Duration::from_secs(5), dropped.notified())
        .await
        .expect("the server saw the client go away");
}

#[tokio::test(start_paused = true)]
async fn a_tool_call_is_announced_as_soon_as_its_name_arrives() {
    CHAT.announces_early("tool_call_split.sse", "new_answer")
        .await;
}
