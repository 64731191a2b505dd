//! The Gemini client: our fixtures (tests/fixtures/gemini), request snapshots (schema
//! subset, roles, function responses), thought-signature round trips, HTTP errors.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use massgen_core::Secret;
use massgen_providers::gemini::GeminiProvider;
use massgen_providers::http_client;
use massgen_providers::{
    FinishReason, Message, Provider, ProviderErrorKind, ProviderRequest, Role, ToolSpec,
    UpstreamConfig,
};
use serde_json::{Map, Value, json};

use crate::support::*;

fn provider(base_url: &str, params: Map<String, Value>, attempts: u32) -> GeminiProvider {
    let config = UpstreamConfig {
        provider_name: "gemini".into(),
        model: "gemini-2.5-flash".into(),
        base_url: base_url.into(),
        api_key: Some(Secret::new("AIza-secret-key-123")),
        params,
        policy: fast_policy(attempts),
    };
    GeminiProvider::new(config, http_client().unwrap()).unwrap()
}

#[tokio::test]
async fn text_and_last_usage_metadata() {
    let o = GEMINI.decode("text_usage.sse").await;
    assert_eq!(o.text, "Hello, wörld");
    assert_eq!(o.usage, Some(usage(8, 4, 12, 3, 0)));
    assert_eq!(o.finish, Some(FinishReason::Stop));
}

#[tokio::test]
async fn thoughts_and_several_calls_in_one_chunk() {
    let o = GEMINI.decode("thoughts_parallel_calls.sse").await;
    assert_eq!(o.reasoning, "Comparing the answers.");
    assert_eq!(o.text, "");
    assert_eq!(o.calls.len(), 2);
    assert_eq!(
        (o.calls[0].id.as_str(), o.calls[0].name.as_str()),
        ("call_0", "vote")
    );
    assert_eq!(
        serde_json::from_str::<Value>(&o.calls[0].arguments).unwrap(),
        json!({"agent_id": "agent2", "reason": "clear"})
    );
    assert_eq!(
        o.calls[0].opaque,
        Some(json!({"gemini": {"thought_signature": "CiQBVKhc7sig"}}))
    );
    assert_eq!(
        (o.calls[1].id.as_str(), o.calls[1].arguments.as_str()),
        ("call_1", r#"{"q":1}"#)
    );
    assert_eq!(o.calls[1].opaque, None);
    // Thought tokens count as output and are reported apart.
    assert_eq!(o.usage, Some(usage(50, 35, 85, 0, 15)));
    // Gemini says STOP after calls; that is a tool-calls finish.
    assert_eq!(o.finish, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn finish_reasons_errors_and_early_eof() {
    assert_eq!(
        GEMINI.decode("max_tokens.sse").await.finish,
        Some(FinishReason::Length)
    );
    assert_eq!(
        GEMINI.decode("safety.sse").await.finish,
        Some(FinishReason::ContentFilter)
    );
    let o = GEMINI.decode("error_in_stream.sse").await;
    assert_eq!(o.text, "Par");
    let error = o.error.unwrap();
    assert_eq!(error.kind, ProviderErrorKind::Stream);
    assert_eq!(error.error_type.as_deref(), Some("INTERNAL"));
    let o = GEMINI.decode("early_eof.sse").await;
    assert_eq!(o.error.unwrap().kind, ProviderErrorKind::Connection);
}

#[tokio::test]
async fn request_snapshots() {
    let (url, upstream) = serve(vec![GEMINI.sse("text_usage.sse")]).await;
    let mut params = Map::new();
    params.insert("temperature".into(), json!(0.2));
    params.insert("max_tokens".into(), json!(1024));
    params.insert(
        "thinking_config".into(),
        json!({"thinking_budget": 512, "include_thoughts": true}),
    );
    let p = provider(&format!("{url}/v1beta"), params, 1);
    let opaque = json!({"gemini": {"thought_signature": "c2ln"}});
    let mut strict_tools = coordination_turn();
    strict_tools.tools.push(std::sync::Arc::new(ToolSpec {
        name: "lookup".into(),
        description: "A client tool with a strict schema.".into(),
        parameters: json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
            "additionalProperties": false, "properties": {"q": {"type": ["string", "null"]}},
            "required": ["q"]}),
    }));
    let scenarios: [(&str, ProviderRequest); 6] = [
        ("request_coordination", coordination_turn()),
        ("request_presentation", presentation_turn()),
        (
            "request_history_tool_results",
            history_with_tool_results(Some(opaque)),
        ),
        ("request_system_messages", system_messages()),
        ("request_images", images_turn()),
        ("request_schema_subset", strict_tools),
    ];
    for (name, request) in scenarios {
        let (_, error) = collect(p.stream(request)).await;
        assert!(error.is_none(), "{name}: {error:?}");
        let seen = upstream.requests().pop().unwrap();
        assert_eq!(
            seen.uri,
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        assert_eq!(seen.headers["x-goog-api-key"], "AIza-secret-key-123");
        snapshot("gemini", name, &seen.body);
    }
}

#[tokio::test]
async fn thought_signatures_round_trip() {
    let o = GEMINI.decode("thoughts_parallel_calls.sse").await;
    let mut request = coordination_turn();
    let messages = Arc::make_mut(&mut request.messages);
    messages.push(Message {
        role: Role::Assistant,
        content: String::new(),
        tool_calls: o.calls.clone(),
        tool_call_id: None,
        images: Vec::new(),
    });
    messages.push(Message::tool_result("call_0", "Error: x"));
    messages.push(Message::tool_result("call_1", "Error: y"));
    let (url, upstream) = serve(vec![GEMINI.sse("text_usage.sse")]).await;
    collect(provider(&format!("{url}/v1beta"), Map::new(), 1).stream(request)).await;
    let contents = upstream.requests()[0].body["contents"].clone();
    assert_eq!(
        contents[1],
        json!({"role": "model", "parts": [
            {"functionCall": {"name": "vote", "args": {"agent_id": "agent2", "reason": "clear"}},
                "thoughtSignature": "CiQBVKhc7sig"},
            {"functionCall": {"name": "lookup", "args": {"q": 1}}}]})
    );
    assert_eq!(
        contents[2],
        json!({"role": "user", "parts": [
            {"functionResponse": {"name": "vote", "response": {"result": "Error: x"}}},
            {"functionResponse": {"name": "lookup", "response": {"result": "Error: y"}}}]})
    );
}

/// Newer Gemini models name their calls; those ids go back with the call and its result.
#[tokio::test]
async fn upstream_call_ids_round_trip() {
    let sse = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"functionCall\": {\"id\": \"g-1\", \"name\": \"vote\", \"args\": {}}}], \"role\": \"model\"}, \"finishReason\": \"STOP\"}]}\r\n\r\n";
    let (chunks, error) = decode_bytes("ids", sse.as_bytes().to_vec(), GEMINI.decoder).await;
    let o = outcome(chunks, error);
    assert_eq!(o.calls[0].id, "g-1");
    let mut request = coordination_turn();
    let messages = Arc::make_mut(&mut request.messages);
    messages.push(Message {
        role: Role::Assistant,
        content: String::new(),
        tool_calls: o.calls.clone(),
        tool_call_id: None,
        images: Vec::new(),
    });
    messages.push(Message::tool_result("g-1", "Error: x"));
    let (url, upstream) = serve(vec![GEMINI.sse("text_usage.sse")]).await;
    collect(provider(&format!("{url}/v1beta"), Map::new(), 1).stream(request)).await;
    let contents = upstream.requests()[0].body["contents"].clone();
    assert_eq!(contents[1]["parts"][0]["functionCall"]["id"], "g-1");
    assert_eq!(contents[2]["parts"][0]["functionResponse"]["id"], "g-1");
}

#[tokio::test]
async fn bad_key_400_is_authentication_and_not_retried() {
    let body = r#"{
  "error": {
    "code": 400,
    "message": "API key not valid. Please pass a valid API key.",
    "status": "INVALID_ARGUMENT",
    "details": [
      {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "API_KEY_INVALID",
        "domain": "googleapis.com"
      }
    ]
  }
}
"#;
    let (url, upstream) = serve(vec![Reply::Status(400, vec![], body.into())]).await;
    let (_, error) =
        collect(provider(&format!("{url}/v1beta"), Map::new(), 3).stream(presentation_turn()))
            .await;
    let error = error.unwrap();
    assert_eq!(error.kind, ProviderErrorKind::Authentication);
    assert_eq!(error.status, Some(400));
    assert_eq!(error.error_type.as_deref(), Some("INVALID_ARGUMENT"));
    assert_eq!(error.code.as_deref(), Some("API_KEY_INVALID"));
    assert_eq!(upstream.count.load(Ordering::SeqCst), 1);
}

fn exhausted(delay: &str) -> Reply {
    Reply::Status(
        429,
        vec![],
        format!(
            r#"[{{"error":{{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED",
            "details":[{{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"{delay}"}}]}}}}]"#
        ),
    )
}

#[tokio::test]
async fn retry_delay_in_the_body_is_the_wait() {
    // Within the policy's 2 s limit: waited for, then the call succeeds.
    let (url, upstream) = serve(vec![exhausted("0.01s"), GEMINI.sse("text_usage.sse")]).await;
    let (_, error) =
        collect(provider(&format!("{url}/v1beta"), Map::new(), 3).stream(presentation_turn()))
            .await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(upstream.count.load(Ordering::SeqCst), 2);
    // Beyond it: fails at once, with the wait for the caller.
    let (url, upstream) = serve(vec![exhausted("34.4s")]).await;
    let (_, error) =
        collect(provider(&format!("{url}/v1beta"), Map::new(), 3).stream(presentation_turn()))
            .await;
    let error = error.unwrap();
    assert_eq!(error.kind, ProviderErrorKind::RateLimited);
    assert_eq!(error.retry_after, Some(Duration::from_millis(34_400)));
    assert_eq!(upstream.count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn input_token_limit_is_context_length_and_503_is_retried() {
    let body = r#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#;
    let (url, _) = serve(vec![Reply::Status(400, vec![], body.into())]).await;
    let (_, error) =
        collect(provider(&format!("{url}/v1beta"), Map::new(), 3).stream(presentation_turn()))
            .await;
    assert_eq!(error.unwrap().kind, ProviderErrorKind::ContextLength);
    let overloaded = Reply::Status(
        503,
        vec![],
        r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#.into(),
    );
    let (url, upstream) = serve(vec![overloaded]).await;
    let (_, error) =
        collect(provider(&format!("{url}/v1beta"), Map::new(), 2).stream(presentation_turn()))
            .await;
    let error = error.unwrap();
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert_eq!(error.error_type.as_deref(), Some("UNAVAILABLE"));
    assert_eq!(upstream.count.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn malformed_chunk_is_invalid_response() {
    let bytes = b"data: {not json\r\n\r\n".to_vec();
    let (_, error) = decode_bytes("malformed", bytes, GEMINI.decoder).await;
    assert_eq!(error.unwrap().kind, ProviderErrorKind::InvalidResponse);
}

#[tokio::test(start_paused = true)]
async fn a_tool_call_is_announced_as_soon_as_its_name_arrives() {
    let chunks = GEMINI
        .announces_early("thoughts_parallel_calls.sse", "lookup")
        .await;
    assert_usage_so_far(&chunks);
}
