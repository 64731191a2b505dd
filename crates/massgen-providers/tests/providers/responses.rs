//! The OpenAI Responses client (`type: openai`): our fixtures (tests/fixtures/responses),
//! request snapshots, reasoning-item round trips, parameter passthrough, HTTP errors.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use massgen_core::Secret;
use massgen_providers::http_client;
use massgen_providers::responses::ResponsesProvider;
use massgen_providers::{
    FinishReason, Message, Provider, ProviderErrorKind, ProviderRequest, Role, UpstreamConfig,
};
use serde_json::{Map, Value, json};

use crate::support::*;

fn provider(base_url: &str, params: Map<String, Value>, attempts: u32) -> ResponsesProvider {
    let config = UpstreamConfig {
        provider_name: "openai".into(),
        model: "gpt-5-mini".into(),
        base_url: base_url.into(),
        api_key: Some(Secret::new("sk-openai-secret-123")),
        params,
        policy: fast_policy(attempts),
    };
    ResponsesProvider::new(config, http_client().unwrap()).unwrap()
}

#[tokio::test]
async fn text_and_usage_details() {
    let o = RESPONSES.decode("text_usage.sse").await;
    assert_eq!(o.text, "Hello, wörld");
    assert_eq!(o.usage, Some(usage(30, 9, 39, 12, 4)));
    assert_eq!(o.finish, Some(FinishReason::Stop));
}

#[tokio::test]
async fn reasoning_summary_and_interleaved_function_calls() {
    let o = RESPONSES.decode("reasoning_tool_calls.sse").await;
    assert_eq!(o.reasoning, "**Weighing** both.\n\nAgent2 is clearer.");
    assert_eq!(o.calls.len(), 2);
    assert_eq!(o.calls[0].id, "call_v");
    assert_eq!(o.calls[0].name, "vote");
    assert_eq!(
        o.calls[0].arguments,
        r#"{"agent_id":"agent2","reason":"clear"}"#
    );
    assert_eq!(o.calls[1].id, "call_w");
    assert_eq!(o.calls[1].arguments, r#"{"q":1}"#);
    let reasoning = json!({"id": "rs_1", "type": "reasoning", "summary": [
        {"type": "summary_text", "text": "**Weighing** both."},
        {"type": "summary_text", "text": "Agent2 is clearer."}],
        "encrypted_content": "gAAAAB-opaque"});
    assert_eq!(
        o.calls[0].opaque,
        Some(json!({"responses": {"reasoning": [reasoning], "item_id": "fc_1"}}))
    );
    assert_eq!(
        o.calls[1].opaque,
        Some(json!({"responses": {"item_id": "fc_2"}}))
    );
    assert_eq!(o.usage, Some(usage(100, 50, 150, 0, 32)));
    assert_eq!(o.finish, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn incomplete_error_and_early_eof() {
    let o = RESPONSES.decode("incomplete_max_output.sse").await;
    assert_eq!(o.text, "Cut");
    assert_eq!(o.finish, Some(FinishReason::Length));
    assert_eq!(o.usage, Some(usage(5, 16, 21, 0, 0)));
    let o = RESPONSES.decode("error_context_length.sse").await;
    let error = o.error.unwrap();
    assert_eq!(error.kind, ProviderErrorKind::ContextLength);
    assert_eq!(error.code.as_deref(), Some("context_length_exceeded"));
    let o = RESPONSES.decode("early_eof.sse").await;
    assert_eq!(o.text, "Hal");
    assert_eq!(o.error.unwrap().kind, ProviderErrorKind::Connection);
}

#[tokio::test]
async fn request_snapshots() {
    let (url, upstream) = serve(vec![RESPONSES.sse("text_usage.sse")]).await;
    let mut params = Map::new();
    params.insert(
        "reasoning".into(),
        json!({"effort": "low", "summary": "auto"}),
    );
    params.insert("max_tokens".into(), json!(2048));
    let p = provider(&format!("{url}/v1"), params, 1);
    let opaque = json!({"responses": {"item_id": "fc_9", "reasoning": [
        {"id": "rs_9", "type": "reasoning", "summary": []}]}});
    let scenarios: [(&str, ProviderRequest); 5] = [
        ("request_coordination", coordination_turn()),
        ("request_presentation", presentation_turn()),
        (
            "request_history_tool_results",
            history_with_tool_results(Some(opaque)),
        ),
        ("request_system_messages", system_messages()),
        ("request_images", images_turn()),
    ];
    for (name, request) in scenarios {
        let (_, error) = collect(p.stream(request)).await;
        assert!(error.is_none(), "{name}: {error:?}");
        let seen = upstream.requests().pop().unwrap();
        assert_eq!(seen.uri, "/v1/responses");
        assert_eq!(seen.headers["authorization"], "Bearer sk-openai-secret-123");
        snapshot("responses", name, &seen.body);
    }
}

/// With `store: false` a reasoning item without encrypted content cannot be resolved by
/// the API: the call is replayed alone, without its item id.
#[tokio::test]
async fn stateless_replay_drops_unresolvable_reasoning() {
    let (url, upstream) = serve(vec![RESPONSES.sse("text_usage.sse")]).await;
    let mut params = Map::new();
    params.insert("store".into(), json!(false));
    params.insert("reasoning_effort".into(), json!("high"));
    let opaque = json!({"responses": {"item_id": "fc_9", "reasoning": [
        {"id": "rs_9", "type": "reasoning", "summary": []}]}});
    let p = provider(&format!("{url}/v1"), params, 1);
    collect(p.stream(history_with_tool_results(Some(opaque)))).await;
    let body = &upstream.requests()[0].body;
    assert_eq!(body["reasoning"], json!({"effort": "high"}));
    assert!(body.get("reasoning_effort").is_none());
    let input = body["input"].as_array().unwrap();
    assert!(
        input.iter().all(|item| item["type"] != "reasoning"),
        "{input:?}"
    );
    assert_eq!(
        input[2],
        json!({"type": "function_call", "call_id": "call_a", "name": "vote",
            "arguments": r#"{"agent_id":"agent9","reason":"best"}"#})
    );
}

/// Calls decoded from a stream go back with their reasoning item and item id.
#[tokio::test]
async fn reasoning_items_round_trip() {
    let o = RESPONSES.decode("reasoning_tool_calls.sse").await;
    let mut request = coordination_turn();
    let messages = Arc::make_mut(&mut request.messages);
    messages.push(Message {
        role: Role::Assistant,
        content: String::new(),
        tool_calls: o.calls.clone(),
        tool_call_id: None,
        images: Vec::new(),
    });
    messages.push(Message::tool_result("call_v", "Error: x"));
    messages.push(Message::tool_result("call_w", "Error: y"));
    let (url, upstream) = serve(vec![RESPONSES.sse("text_usage.sse")]).await;
    collect(provider(&format!("{url}/v1"), Map::new(), 1).stream(request)).await;
    let input = upstream.requests()[0].body["input"].clone();
    assert_eq!(input[1]["type"], "reasoning");
    assert_eq!(input[1]["encrypted_content"], "gAAAAB-opaque");
    assert_eq!(input[2]["id"], "fc_1");
    assert_eq!(input[2]["call_id"], "call_v");
    assert_eq!(
        input[3]["id"],
        Value::Null,
        "no reasoning for the second call: no id"
    );
    assert_eq!(
        input[4],
        json!({"type": "function_call_output", "call_id": "call_v", "output": "Error: x"})
    );
}

#[tokio::test]
async fn errors_keep_status_type_code_and_quota_is_not_retried() {
    let quota = Reply::Status(
        429,
        vec![],
        r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#.into(),
    );
    let (url, upstream) = serve(vec![quota]).await;
    let (_, error) =
        collect(provider(&format!("{url}/v1"), Map::new(), 3).stream(presentation_turn())).await;
    let error = error.unwrap();
    assert_eq!(error.kind, ProviderErrorKind::RateLimited);
    assert_eq!(error.status, Some(429));
    assert_eq!(error.code.as_deref(), Some("insufficient_quota"));
    assert_eq!(upstream.count.load(Ordering::SeqCst), 1);

    let limited = Reply::Status(
        429,
        vec![("retry-after-ms", "10".into())],
        r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#.into(),
    );
    let (url, upstream) = serve(vec![limited, RESPONSES.sse("text_usage.sse")]).await;
    let (_, error) =
        collect(provider(&format!("{url}/v1"), Map::new(), 3).stream(presentation_turn())).await;
    assert!(error.is_none());
    assert_eq!(upstream.count.load(Ordering::SeqCst), 2);

    let context = Reply::Status(
        400,
        vec![],
        r#"{"error":{"message":"Your input exceeds the context window of this model.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}"#.into(),
    );
    let (url, _) = serve(vec![context]).await;
    let (_, error) =
        collect(provider(&format!("{url}/v1"), Map::new(), 3).stream(presentation_turn())).await;
    assert_eq!(error.unwrap().kind, ProviderErrorKind::ContextLength);
}

#[tokio::test]
async fn malformed_event_is_invalid_response() {
    let bytes = b"event: response.created\ndata: {not json\n\n".to_vec();
    let (_, error) = decode_bytes("malformed", bytes, RESPONSES.decoder).await;
    assert_eq!(error.unwrap().kind, ProviderErrorKind::InvalidResponse);
}

#[tokio::test(start_paused = true)]
async fn a_tool_call_is_announced_as_soon_as_its_name_arrives() {
    RESPONSES
        .announces_early("reasoning_tool_calls.sse", "lookup")
        .await;
}
