//! How configs of the native backend types resolve keys, endpoints and API versions, and
//! the provider factory building each wire format from them: the provider tests that need
//! the application's config. The wire formats themselves are tested in their crate
//! (`crates/massgen-providers/tests/providers`).

use std::path::Path;

use massgen::app::{HttpProviders, ProviderFactory};
use massgen::config::parse_panel;
use massgen_providers::http_client;
use massgen_providers::presets;
use serde_json::json;

use crate::support::{TestEnv, env_of};

fn parse(yaml: &str, env: &TestEnv) -> Result<massgen::config::PanelConfig, String> {
    parse_panel("team", Path::new("team.yaml"), yaml, env.as_ref()).map_err(|e| e.to_string())
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
