//! The Anthropic Messages client: our fixtures (tests/fixtures/anthropic), request
//! snapshots, thinking round trips, and HTTP behaviour against a loopback upstream.

use std::sync::Arc;

use massgen_core::Secret;
use massgen_providers::anthropic::{AnthropicProvider, DEFAULT_MAX_TOKENS};
use massgen_providers::http_client;
use massgen_providers::{
    FinishReason, Provider, ProviderChunk, ProviderErrorKind, ProviderRequest, UpstreamConfig,
};
use serde_json::{Map, Value, json};

use crate::support::*;

fn provider(base_url: &str, params: Map<String, Value>, attempts: u32) -> AnthropicProvider {
    let config = UpstreamConfig {
        provider_name: "claude".into(),
        model: "claude-sonnet-4-5".into(),
        base_url: base_url.into(),
        api_key: Some(Secret::new("sk-ant-secret-key-123")),
        params,
        policy: fast_policy(attempts),
    };
    AnthropicProvider::new(config, http_client().unwrap()).unwrap()
}

#[tokio::test]
async fn text_with_cache_usage() {
    let o = ANTHROPIC.decode("text_cache_usage.sse").await;
    assert_eq!(o.text, "Hello, wörld");
    // input counts cached tokens too (10 + 5 created + 20 read).
    assert_eq!(o.usage, Some(usage(35, 7, 42, 20, 0)));
    assert_eq!(o.finish, Some(FinishReason::Stop));
    assert!(o.error.is_none());
}

#[tokio::test]
async fn thinking_signature_and_tool_use_assembled() {
    let o = ANTHROPIC.decode("thinking_tools.sse").await;
    assert_eq!(o.reasoning, "Compare the answers.");
    assert_eq!(o.text, "Voting.");
    assert_eq!(o.calls.len(), 2);
    assert_eq!(o.calls[0].id, "toolu_01");
    assert_eq!(o.calls[0].name, "vote");
    assert_eq!(
        o.calls[0].arguments,
        r#"{"agent_id": "agent2", "reason": "clear"}"#
    );
    assert_eq!(
        o.calls[0].opaque,
        Some(json!({"anthropic": {"thinking": [
            {"type": "thinking", "thinking": "Compare the answers.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}
        ]}}))
    );
    // A tool_use without input deltas keeps its start input.
    assert_eq!(o.calls[1].arguments, "{}");
    assert_eq!(o.calls[1].opaque, None);
    // message_delta's cumulative usage overrides message_start's.
    assert_eq!(o.usage, Some(usage(48, 61, 109, 8, 0)));
    assert_eq!(o.finish, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn in_stream_overloaded_error_keeps_its_type() {
    let o = ANTHROPIC.decode("error_overloaded_in_stream.sse").await;
    assert_eq!(o.text, "Part");
    let error = o.error.unwrap();
    assert_eq!(error.kind, ProviderErrorKind::Stream);
    assert_eq!(error.error_type.as_deref(), Some("overloaded_error"));
    assert_eq!(error.message, "Overloaded");
    assert_eq!(o.finish, None);
}

#[tokio::test]
async fn max_tokens_is_length_and_early_eof_is_a_connection_error() {
    let o = ANTHROPIC.decode("max_tokens.sse").await;
    assert_eq!(o.text, "Cut off");
    assert_eq!(o.finish, Some(FinishReason::Length));
    assert_eq!(o.usage, Some(usage(3, 2, 5, 0, 0)));
    let o = ANTHROPIC.decode("early_eof.sse").await;
    assert_eq!(o.text, "Hal");
    assert_eq!(o.error.unwrap().kind, ProviderErrorKind::Connection);
}

/// The four request scenarios, as the upstream received them.
#[tokio::test]
async fn request_snapshots() {
    let sse = ANTHROPIC.text("text_cache_usage.sse");
    let (url, upstream) = serve(vec![Reply::Sse(sse)]).await;
    let mut params = Map::new();
    params.insert("temperature".into(), json!(0.2));
    let p = provider(&format!("{url}/v1"), params, 1);
    let signature = json!({"anthropic": {"thinking": [
        {"type": "thinking", "thinking": "t", "signature": "sig"}]}});
    let scenarios: [(&str, ProviderRequest); 5] = [
        ("request_coordination", coordination_turn()),
        ("request_presentation", presentation_turn()),
        (
            "request_history_tool_results",
            history_with_tool_results(Some(signature)),
        ),
        ("request_system_messages", system_messages()),
        ("request_images", images_turn()),
    ];
    for (name, request) in scenarios {
        let (_, error) = collect(p.stream(request)).await;
        assert!(error.is_none(), "{name}: {error:?}");
        let seen = upstream.requests().pop().unwrap();
        assert_eq!(seen.uri, "/v1/messages");
        snapshot("anthropic", name, &seen.body);
    }
}

#[tokio::test]
async fn headers_and_max_tokens_default() {
    let sse = ANTHROPIC.text("text_cache_usage.sse");
    let (url, upstream) = serve(vec![Reply::Sse(sse)]).await;
    let p = provider(&format!("{url}/v1/"), Map::new(), 1);
    collect(p.stream(presentation_turn())).await;
    let seen = &upstream.requests()[0];
    assert_eq!(seen.headers["x-api-key"], "sk-ant-secret-key-123");
    assert_eq!(seen.headers["anthropic-version"], "2023-06-01");
    assert!(seen.headers.get("authorization").is_none());
    assert_eq!(seen.body["max_tokens"], json!(DEFAULT_MAX_TOKENS));
    // A thinking budget is added on top so the answer keeps its room.
    let mut params = Map::new();
    params.insert(
        "thinking".into(),
        json!({"type": "enabled", "budget_tokens": 2000}),
    );
    let p = provider(&format!("{url}/v1"), params, 1);
    collect(p.stream(presentation_turn())).await;
    assert_eq!(
        upstream.requests()[1].body["max_tokens"],
        json!(DEFAULT_MAX_TOKENS + 2000)
    );
    let mut params = Map::new();
    params.insert("max_tokens".into(), json!(4096));
    let p = provider(&format!("{url}/v1"), params, 1);
    collect(p.stream(presentation_turn())).await;
    assert_eq!(upstream.requests()[2].body["max_tokens"], json!(4096));
}

/// The decoded calls, replayed by the engine, carry their thinking blocks back.
#[tokio::test]
async fn thinking_blocks_round_trip_into_the_next_request() {
    let o = ANTHROPIC.decode("thinking_tools.sse").await;
    let mut request = coordination_turn();
    let messages = Arc::make_mut(&mut request.messages);
    messages.push(massgen_providers::Message {
        role: massgen_providers::Role::Assistant,
        content: o.text.clone(),
        tool_calls: o.calls.clone(),
        tool_call_id: None,
        images: Vec::new(),
    });
    for call in &o.calls {
        messages.push(massgen_providers::Message::tool_result(
            &call.id, "Error: x",
        ));
    }
    let sse = ANTHROPIC.text("text_cache_usage.sse");
    let (url, upstream) = serve(vec![Reply::Sse(sse)]).await;
    collect(provider(&format!("{url}/v1"), Map::new(), 1).stream(request)).await;
    let body = &upstream.requests()[0].body;
    let assistant = &body["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["content"],
        json!([
            {"type": "thinking", "thinking": "Compare the answers.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
            {"type": "text", "text": "Voting."},
            {"type": "tool_use", "id": "toolu_01", "name": "vote",
                "input": {"agent_id": "agent2", "reason": "clear"}},
            {"type": "tool_use", "id": "toolu_02", "name": "lookup", "input": {}},
        ])
    );
    assert_eq!(
        body["messages"][2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "Error: x"},
            {"type": "tool_result", "tool_use_id": "toolu_02", "content": "Error: x"},
        ])
    );
}

fn overloaded() -> Reply {
    Reply::Status(
        529,
        vec![],
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}"#.into(),
    )
}

#[tokio::test]
async fn overloaded_529_is_retried_then_succeeds() {
    let sse = ANTHROPIC.text("text_cache_usage.sse");
    let (url, upstream) = serve(vec![overloaded(), Reply::Sse(sse)]).await;
    let (chunks, error) =
        collect(provider(&format!("{url}/v1"), Map::new(), 3).stream(hello())).await;
    assert!(error.is_none(), "{error:?}");
    assert!(chunks.contains(&ProviderChunk::Finish(FinishReason::Stop)));
    assert_eq!(upstream.count.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[tokio::test]
async fn overloaded_529_gives_up_with_status_and_type() {
    let (url, upstream) = serve(vec![overloaded()]).await;
    let (_, error) = collect(provider(&format!("{url}/v1"), Map::new(), 2).stream(hello())).await;
    let error = error.unwrap();
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert_eq!(error.status, Some(529));
    assert_eq!(error.error_type.as_deref(), Some("overloaded_error"));
    assert_eq!(error.message, "Overloaded");
    assert_eq!(upstream.count.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[tokio::test]
async fn retry_after_is_honoured_and_x_should_retry_false_stops() {
    let limited = Reply::Status(
        429,
        vec![("retry-after", "30".into())],
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#.into(),
    );
    // 30 s is over the policy's 2 s limit: fail at once, with the wait.
    let (url, upstream) = serve(vec![limited]).await;
    let (_, error) = collect(provider(&format!("{url}/v1"), Map::new(), 3).stream(hello())).await;
    let error = error.unwrap();
    assert_eq!(error.kind, ProviderErrorKind::RateLimited);
    assert_eq!(error.retry_after, Some(std::time::Duration::from_secs(30)));
    assert_eq!(upstream.count.load(std::sync::atomic::Ordering::SeqCst), 1);

    let no_retry = Reply::Status(
        500,
        vec![("x-should-retry", "false".into())],
        r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#.into(),
    );
    let (url, upstream) = serve(vec![no_retry]).await;
    let (_, error) = collect(provider(&format!("{url}/v1"), Map::new(), 3).stream(hello())).await;
    assert_eq!(error.unwrap().kind, ProviderErrorKind::Server);
    assert_eq!(upstream.count.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn prompt_too_long_is_context_length_and_auth_errors_hide_the_key() {
    let too_long = Reply::Status(
        400,
        vec![],
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#.into(),
    );
    let (url, _) = serve(vec![too_long]).await;
    let (_, error) = collect(provider(&format!("{url}/v1"), Map::new(), 3).stream(hello())).await;
    let error = error.unwrap();
    assert_eq!(error.kind, ProviderErrorKind::ContextLength);
    assert_eq!(error.error_type.as_deref(), Some("invalid_request_error"));

    let auth = Reply::Status(
        401,
        vec![],
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key sk-ant-secret-key-123"}}"#.into(),
    );
    let (url, upstream) = serve(vec![auth]).await;
    let (_, error) = collect(provider(&format!("{url}/v1"), Map::new(), 3).stream(hello())).await;
    let error = error.unwrap();
    assert_eq!(error.kind, ProviderErrorKind::Authentication);
    assert!(
        !error.message.contains("sk-ant-secret-key-123"),
        "{}",
        error.message
    );
    assert_eq!(upstream.count.load(std::sync::atomic::Ordering::SeqCst), 1);
}

fn hello() -> ProviderRequest {
    ProviderRequest {
        messages: Arc::new(vec![massgen_providers::Message::user("hi")]),
        ..ProviderRequest::default()
    }
}

#[tokio::test]
async fn malformed_event_is_invalid_response() {
    let bytes = b"event: message_start\ndata: {not json\n\n".to_vec();
    let (_, error) = decode_bytes("malformed", bytes, ANTHROPIC.decoder).await;
    assert_eq!(error.unwrap().kind, ProviderErrorKind::InvalidResponse);
}

#[tokio::test(start_paused = true)]
async fn a_tool_call_is_announced_as_soon_as_its_name_arrives() {
    let chunks = ANTHROPIC
        .announces_early("thinking_tools.sse", "lookup")
        .await;
    assert_usage_so_far(&chunks);
}
