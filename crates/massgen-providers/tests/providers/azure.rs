//! Azure OpenAI (`type: azure_openai`): Chat Completions at the deployment URL with the
//! `api-key` header and `api-version` query; and which wire format each backend type
//! speaks. How configs of the native types resolve keys, endpoints and API versions is the
//! root crate's (`tests/it/provider_config.rs`).

use std::sync::atomic::Ordering;

use massgen_core::Secret;
use massgen_providers::chat_completions::AzureChatCompletionsProvider;
use massgen_providers::http_client;
use massgen_providers::presets::{self, Wire};
use massgen_providers::{Provider, ProviderErrorKind, UpstreamConfig};
use serde_json::{Map, json};

use crate::support::*;

const CHAT_SSE: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\ndata: [DONE]\n\n";

fn azure(base_url: &str, version: &str, attempts: u32) -> AzureChatCompletionsProvider {
    let mut params = Map::new();
    params.insert("temperature".into(), json!(0.1));
    let config = UpstreamConfig {
        provider_name: "azure_openai".into(),
        model: "my-deployment".into(),
        base_url: base_url.into(),
        api_key: Some(Secret::new("azure-secret-key-123")),
        params,
        policy: fast_policy(attempts),
    };
    AzureChatCompletionsProvider::with_api_version(config, version, http_client().unwrap()).unwrap()
}

#[tokio::test]
async fn deployment_url_api_key_header_and_chat_body() {
    let (url, upstream) = serve(vec![Reply::Sse(CHAT_SSE.into())]).await;
    let p = azure(&format!("{url}/"), "2024-12-01-preview", 1);
    let (chunks, error) = collect(p.stream(presentation_turn())).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(outcome(chunks, None).text, "Hi");
    let seen = &upstream.requests()[0];
    assert_eq!(
        seen.uri,
        "/openai/deployments/my-deployment/chat/completions?api-version=2024-12-01-preview"
    );
    assert_eq!(seen.headers["api-key"], "azure-secret-key-123");
    assert!(seen.headers.get("authorization").is_none());
    assert_eq!(seen.body["messages"][0]["role"], "system");
    assert_eq!(seen.body["temperature"], json!(0.1));
    assert_eq!(seen.body["stream_options"], json!({"include_usage": true}));
}

/// The four request scenarios, as the deployment received them (Chat Completions bodies).
#[tokio::test]
async fn request_snapshots() {
    let (url, upstream) = serve(vec![Reply::Sse(CHAT_SSE.into())]).await;
    let p = azure(&url, "2024-12-01-preview", 1);
    let scenarios = [
        ("request_coordination", coordination_turn()),
        ("request_presentation", presentation_turn()),
        (
            "request_history_tool_results",
            history_with_tool_results(None),
        ),
        ("request_system_messages", system_messages()),
        ("request_images", images_turn()),
    ];
    for (name, request) in scenarios {
        let (_, error) = collect(p.stream(request)).await;
        assert!(error.is_none(), "{name}: {error:?}");
        snapshot("azure", name, &upstream.requests().pop().unwrap().body);
    }
}

#[tokio::test]
async fn a_base_url_naming_the_deployment_is_used_as_is() {
    let (url, upstream) = serve(vec![Reply::Sse(CHAT_SSE.into())]).await;
    let p = azure(&format!("{url}/openai/deployments/other"), "v1", 1);
    collect(p.stream(presentation_turn())).await;
    assert_eq!(
        upstream.requests()[0].uri,
        "/openai/deployments/other/chat/completions?api-version=v1"
    );
}

#[tokio::test]
async fn azure_errors_use_the_shared_retry_rules() {
    let limited = Reply::Status(
        429,
        vec![("retry-after", "0".into())],
        r#"{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation have exceeded call rate limit."}}"#.into(),
    );
    let (url, upstream) = serve(vec![limited, Reply::Sse(CHAT_SSE.into())]).await;
    let (_, error) = collect(azure(&url, "v", 3).stream(presentation_turn())).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(upstream.count.load(Ordering::SeqCst), 2);
    let context = Reply::Status(
        400,
        vec![],
        r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#.into(),
    );
    let (url, _) = serve(vec![context]).await;
    let (_, error) = collect(azure(&url, "v", 3).stream(presentation_turn())).await;
    assert_eq!(error.unwrap().kind, ProviderErrorKind::ContextLength);
}

#[test]
fn types_map_to_wire_formats() {
    let wire = |t: &str| presets::find(t).unwrap().wire;
    assert_eq!(wire("openai"), Wire::Responses);
    assert_eq!(wire("chatcompletion"), Wire::ChatCompletions);
    assert_eq!(wire("claude"), Wire::Anthropic);
    assert_eq!(wire("anthropic"), Wire::Anthropic);
    assert_eq!(wire("gemini"), Wire::Gemini);
    assert_eq!(wire("azure_openai"), Wire::AzureChatCompletions);
    assert_eq!(wire("groq"), Wire::ChatCompletions);
}
