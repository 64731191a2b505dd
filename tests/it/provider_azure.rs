//! Azure OpenAI (`type: azure_openai`): Chat Completions at the deployment URL with the
//! `api-key` header and `api-version` query; and how configs of the native types resolve
//! keys, endpoints and API versions.

use std::path::Path;
use std::sync::atomic::Ordering;

use massgen::app::{HttpProviders, ProviderFactory};
use massgen::config::parse_panel;
use massgen_core::Secret;
use massgen_providers::chat_completions::AzureChatCompletionsProvider;
use massgen_providers::http_client;
use massgen_providers::presets::{self, Wire};
use massgen_providers::{Provider, ProviderErrorKind, UpstreamConfig};
use serde_json::{Map, json};

use crate::support::native::*;
use crate::support::{TestEnv, env_of};

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

// ---------------------------------------------------------------------------------------
// Config: native types

fn parse(yaml: &str, env: &TestEnv) -> Result<massgen::config::PanelConfig, String> {
    parse_panel("team", Path::new("team.yaml"), yaml, env.as_ref()).map_err(|e| e.to_string())
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

#[test]
fn azure_endpoint_and_api_version_resolution() {
    let yaml = "agent: {backend: {type: azure_openai, model: dep}}";
    let e = parse(yaml, &env_of(&[("AZURE_OPENAI_API_KEY", "k")])).unwrap_err();
    assert!(e.contains("agent.backend.base_url"), "{e}");
    assert!(e.contains("AZURE_OPENAI_ENDPOINT"), "{e}");
    let e = parse(
        yaml,
        &env_of(&[("AZURE_OPENAI_ENDPOINT", "https://x.openai.azure.com")]),
    )
    .unwrap_err();
    assert!(e.contains("AZURE_OPENAI_API_KEY"), "{e}");

    let vars = env_of(&[
        ("AZURE_OPENAI_API_KEY", "k"),
        ("AZURE_OPENAI_ENDPOINT", "https://x.openai.azure.com/"),
    ]);
    let b = &parse(yaml, &vars).unwrap().agents[0].backend;
    assert_eq!(b.base_url, "https://x.openai.azure.com");
    assert_eq!(
        b.api_version.as_deref(),
        Some(presets::AZURE_DEFAULT_API_VERSION)
    );
    let vars = env_of(&[
        ("AZURE_OPENAI_API_KEY", "k"),
        ("AZURE_OPENAI_ENDPOINT", "https://x.openai.azure.com"),
        ("AZURE_OPENAI_API_VERSION", "2025-01-01-preview"),
    ]);
    assert_eq!(
        parse(yaml, &vars).unwrap().agents[0]
            .backend
            .api_version
            .as_deref(),
        Some("2025-01-01-preview")
    );
    let explicit = "agent: {backend: {type: azure_openai, model: dep, base_url: \"https://y.openai.azure.com\", api_version: \"2024-12-01-preview\", temperature: 0.5}}";
    let b = parse(explicit, &vars).unwrap().agents.remove(0).backend;
    assert_eq!(b.base_url, "https://y.openai.azure.com");
    assert_eq!(b.api_version.as_deref(), Some("2024-12-01-preview"));
    assert!(
        !b.params.contains_key("api_version"),
        "a server key, not a param"
    );
    assert_eq!(b.params["temperature"], json!(0.5));
    // Only Azure knows api_version; elsewhere it is a passthrough param.
    let other = "agent: {backend: {type: groq, model: m, api_version: x}}";
    let b = parse(other, &env_of(&[("GROQ_API_KEY", "g")]))
        .unwrap()
        .agents
        .remove(0)
        .backend;
    assert_eq!(b.api_version, None);
    assert_eq!(b.params["api_version"], json!("x"));
}

#[test]
fn native_key_variables() {
    let claude = "agent: {backend: {type: claude, model: claude-sonnet-4-5}}";
    let e = parse(claude, &env_of(&[])).unwrap_err();
    assert!(e.contains("ANTHROPIC_API_KEY"), "{e}");
    let b = parse(claude, &env_of(&[("ANTHROPIC_API_KEY", "sk-ant")]))
        .unwrap()
        .agents
        .remove(0)
        .backend;
    assert_eq!(b.base_url, "https://api.anthropic.com/v1");
    assert_eq!(b.api_key.unwrap().expose(), "sk-ant");
    let gemini = "agent: {backend: {type: gemini, model: gemini-2.5-flash}}";
    let e = parse(gemini, &env_of(&[])).unwrap_err();
    assert!(e.contains("GEMINI_API_KEY or GOOGLE_API_KEY"), "{e}");
    let b = parse(gemini, &env_of(&[("GOOGLE_API_KEY", "g-key")]))
        .unwrap()
        .agents
        .remove(0)
        .backend;
    assert_eq!(b.api_key.unwrap().expose(), "g-key");
    assert_eq!(
        b.base_url,
        "https://generativelanguage.googleapis.com/v1beta"
    );
    let both = env_of(&[("GOOGLE_API_KEY", "g-key"), ("GEMINI_API_KEY", "gem-key")]);
    let b = parse(gemini, &both).unwrap().agents.remove(0).backend;
    assert_eq!(b.api_key.unwrap().expose(), "gem-key");
}

#[test]
fn the_factory_builds_each_wire_format() {
    let yaml = "agents:
  - {id: a, backend: {type: openai, model: m}}
  - {id: b, backend: {type: claude, model: m}}
  - {id: c, backend: {type: gemini, model: m}}
  - {id: d, backend: {type: azure_openai, model: m, base_url: \"https://x.openai.azure.com\"}}
  - {id: e, backend: {type: chatcompletion, model: m, base_url: \"http://127.0.0.1:1/v1\"}}
";
    let vars = env_of(&[
        ("OPENAI_API_KEY", "k"),
        ("ANTHROPIC_API_KEY", "k"),
        ("GEMINI_API_KEY", "k"),
        ("AZURE_OPENAI_API_KEY", "k"),
    ]);
    let panel = parse(yaml, &vars).unwrap();
    let factory = HttpProviders::new(http_client().unwrap());
    let built: Vec<String> = panel
        .agents
        .iter()
        .map(|a| {
            format!(
                "{:?}",
                factory.build(&a.backend, &panel.call_policy).unwrap()
            )
        })
        .collect();
    assert!(built[0].starts_with("ResponsesProvider") && built[0].contains("/v1/responses"));
    assert!(built[1].starts_with("AnthropicProvider") && built[1].contains("/v1/messages"));
    assert!(
        built[2].starts_with("GeminiProvider")
            && built[2].contains("models/m:streamGenerateContent?alt=sse")
    );
    assert!(built[3].contains("/openai/deployments/m/chat/completions?api-version="));
    assert!(
        built[4].starts_with("ChatCompletionsProvider")
            && built[4].contains("/v1/chat/completions")
    );
    for line in &built {
        assert!(!line.contains("\"k\""), "no key in debug output: {line}");
    }
}
