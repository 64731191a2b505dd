//! Replays the recorded upstream traffic in the shared fixtures
//! (`fixtures/upstream/{openai-responses,lmstudio,anthropic,gemini}`) through the native
//! clients and checks the facts their README states: every recorded stream through its
//! decoder (cut at several sizes), every recorded error body through the client's HTTP
//! error path on loopback.
//!
//! The shared directory is `MASSGEN_SHARED_DIR` or `../shared` beside the repository; when
//! neither exists the tests print why and pass.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use massgen_providers::anthropic::AnthropicProvider;
use massgen_providers::gemini::GeminiProvider;
use massgen_providers::http_client;
use massgen_providers::responses::ResponsesProvider;
use massgen_providers::{FinishReason, Provider, ProviderError, ProviderErrorKind, UpstreamConfig};
use serde_json::{Value, json};

use crate::support::*;

async fn replay(path: &Path, decode: Decode) -> Outcome {
    let bytes = std::fs::read(path).unwrap();
    let (chunks, error) = decode_bytes(&path.display().to_string(), bytes, decode).await;
    outcome(chunks, error)
}

fn decoder_for(dir: &str) -> Decode {
    match dir {
        "anthropic" => ANTHROPIC.decoder,
        "gemini" => GEMINI.decoder,
        _ => RESPONSES.decoder,
    }
}

fn args(outcome: &Outcome, i: usize) -> Value {
    serde_json::from_str(&outcome.calls[i].arguments)
        .unwrap_or_else(|e| panic!("arguments of call {i} are not JSON ({e}): {outcome:?}"))
}

/// What each recording must decode to.
fn check(name: &str, o: &Outcome) {
    let no_error = || assert!(o.error.is_none(), "{name}: {:?}", o.error);
    match name {
        "openai-responses/stream_text.sse" => {
            no_error();
            assert!(!o.text.is_empty());
            assert!(o.calls.is_empty());
            assert_eq!(o.finish, Some(FinishReason::Stop));
            let u = o.usage.unwrap();
            assert_eq!(u.total_tokens, u.input_tokens + u.output_tokens);
        }
        "openai-responses/stream_function_call.sse" => {
            no_error();
            assert_eq!(o.calls.len(), 1);
            assert_eq!(o.calls[0].id, "call_sVidsfFJ6zlzRpelrPkTPlpd");
            assert_eq!(o.calls[0].name, "multiply");
            assert_eq!(args(o, 0), json!({"a": 1231, "b": 2331}));
            assert_eq!(o.usage, Some(usage(58, 23, 81, 0, 0)));
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        "openai-responses/stream_reasoning_summary.sse" => {
            no_error();
            assert!(!o.reasoning.is_empty());
            assert!(!o.text.is_empty());
            assert!(o.usage.unwrap().reasoning_tokens > 0);
            assert_eq!(o.finish, Some(FinishReason::Stop));
        }
        "openai-responses/stream_text_after_function_output.sse" => {
            no_error();
            assert!(!o.text.is_empty());
            assert_eq!(o.finish, Some(FinishReason::Stop));
        }
        "openai-responses/stream_error_insufficient_quota.sse" => {
            let e = o.error.as_ref().expect("the in-stream error");
            assert_eq!(e.code.as_deref(), Some("insufficient_quota"));
            assert!(e.message.starts_with("You exceeded your current quota"));
            assert_eq!(o.finish, None);
        }
        "lmstudio/responses_stream_reasoning_tool_call.sse" => {
            no_error();
            assert!(
                !o.reasoning.is_empty(),
                "reasoning_text deltas are reasoning"
            );
            assert_eq!(o.calls.len(), 1);
            assert!(args(o, 0).is_object());
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
            let opaque = o.calls[0].opaque.as_ref().unwrap();
            assert_eq!(opaque["responses"]["reasoning"][0]["type"], "reasoning");
        }
        "anthropic/stream_text.sse" | "anthropic/stream_text_sdk_fixture.sse" => {
            no_error();
            assert!(!o.text.is_empty());
            assert_eq!(o.finish, Some(FinishReason::Stop));
            let u = o.usage.unwrap();
            assert!(u.input_tokens > 0 && u.output_tokens > 0);
        }
        "anthropic/stream_thinking.sse" => {
            no_error();
            assert!(!o.reasoning.is_empty());
            assert!(!o.text.is_empty());
            assert_eq!(o.finish, Some(FinishReason::Stop));
        }
        "anthropic/stream_tool_use.sse" => {
            no_error();
            assert!(!o.text.is_empty());
            assert_eq!(o.calls.len(), 1);
            assert!(o.calls[0].id.starts_with("toolu_"));
            assert_eq!(o.calls[0].name, "get_weather");
            assert_eq!(args(o, 0), json!({"location": "Paris"}));
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        "gemini/stream_text.sse" => {
            no_error();
            assert!(!o.text.is_empty());
            assert_eq!(o.finish, Some(FinishReason::Stop));
            assert!(o.usage.unwrap().input_tokens > 0);
        }
        "gemini/stream_function_call.sse" => {
            no_error();
            assert_eq!(o.calls.len(), 1);
            assert_eq!(o.calls[0].id, "call_0", "synthesized id");
            assert!(args(o, 0).is_object());
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        "gemini/stream_function_call_thought_signature.sse" => {
            no_error();
            assert_eq!(o.calls.len(), 1);
            let signature = &o.calls[0].opaque.as_ref().unwrap()["gemini"]["thought_signature"];
            assert!(signature.as_str().is_some_and(|s| !s.is_empty()));
            assert!(o.usage.unwrap().reasoning_tokens > 0);
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        "gemini/stream_function_call_partial_args_vertex.sse" => {
            no_error();
            assert_eq!(o.calls.len(), 2, "{:?}", o.calls);
            assert_eq!(o.calls[0].name, "getWeather");
            assert_eq!(args(o, 0), json!({"location": "Boston"}));
            assert!(o.calls[0].opaque.is_some(), "thought signature kept");
            assert!(args(o, 1).is_object());
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        "gemini/stream_thoughts.sse" => {
            no_error();
            assert!(!o.reasoning.is_empty());
            assert!(!o.text.is_empty());
            assert!(o.usage.unwrap().reasoning_tokens > 0);
            assert_eq!(o.finish, Some(FinishReason::Stop));
        }
        other => panic!("{other}: no expectation written for this recording"),
    }
}

#[tokio::test]
async fn every_recorded_native_stream_decodes() {
    let Some(root) = upstream_dir() else { return };
    let mut seen = 0;
    for dir in ["openai-responses", "lmstudio", "anthropic", "gemini"] {
        for path in files(&root, dir, ".sse") {
            let name = format!("{dir}/{}", path.file_name().unwrap().to_string_lossy());
            let o = replay(&path, decoder_for(dir)).await;
            check(&name, &o);
            seen += 1;
        }
    }
    assert!(seen >= 14, "only {seen} recordings found");
}

/// Serves the recorded body of `/{dir}/{file}/…` with the status its name gives.
async fn serve_fixture(
    State(root): State<Arc<PathBuf>>,
    UrlPath((dir, file, _rest)): UrlPath<(String, String, String)>,
) -> Response {
    let status = file
        .strip_prefix("error_")
        .and_then(|rest| rest.split('_').next())
        .and_then(|code| code.parse::<u16>().ok())
        .and_then(|code| StatusCode::from_u16(code).ok())
        .unwrap_or(StatusCode::IM_A_TEAPOT);
    let body = std::fs::read(root.join(&dir).join(&file)).unwrap_or_default();
    let headers_file = root.join(&dir).join(file.replace(".json", ".headers.json"));
    let mut response = (status, [("content-type", "application/json")], body).into_response();
    if let Ok(text) = std::fs::read_to_string(headers_file)
        && let Ok(Value::Object(headers)) = serde_json::from_str::<Value>(&text)
    {
        // Only the retry hints: the recorded content-length belongs to another body.
        let hints = headers
            .into_iter()
            .filter(|(name, _)| name == "x-should-retry" || name.starts_with("retry-after"));
        for (name, value) in hints {
            if let (Ok(name), Some(Ok(value))) = (
                axum::http::HeaderName::try_from(name.as_str()),
                value.as_str().map(axum::http::HeaderValue::from_str),
            ) {
                response.headers_mut().insert(name, value);
            }
        }
    }
    response
}

fn client(dir: &str, base_url: String) -> Arc<dyn Provider> {
    let config = UpstreamConfig {
        provider_name: dir.into(),
        model: "m".into(),
        base_url,
        api_key: None,
        params: serde_json::Map::new(),
        policy: fast_policy(1),
    };
    let http = http_client().unwrap();
    match dir {
        "anthropic" => Arc::new(AnthropicProvider::new(config, http).unwrap()),
        "gemini" => Arc::new(GeminiProvider::new(config, http).unwrap()),
        _ => Arc::new(ResponsesProvider::new(config, http).unwrap()),
    }
}

fn expected(name: &str, e: &ProviderError) {
    use ProviderErrorKind::*;
    let want: (ProviderErrorKind, Option<&str>, Option<&str>) = match name {
        "openai-responses/error_400_invalid_param.json" => (
            InvalidRequest,
            Some("invalid_request_error"),
            Some("decimal_below_min_value"),
        ),
        "openai-responses/error_429_insufficient_quota.json" => (
            RateLimited,
            Some("insufficient_quota"),
            Some("insufficient_quota"),
        ),
        "anthropic/error_400_invalid_request.json" => {
            (InvalidRequest, Some("invalid_request_error"), None)
        }
        "anthropic/error_400_prompt_too_long.json" => {
            (ContextLength, Some("invalid_request_error"), None)
        }
        "anthropic/error_401_authentication.json" => {
            (Authentication, Some("authentication_error"), None)
        }
        "anthropic/error_429_rate_limit.json" => (RateLimited, Some("rate_limit_error"), None),
        "anthropic/error_500_api_error.json" => (Server, Some("api_error"), None),
        "anthropic/error_529_overloaded.json" => (Server, Some("overloaded_error"), None),
        "gemini/error_400_api_key_invalid.json" => (
            Authentication,
            Some("INVALID_ARGUMENT"),
            Some("API_KEY_INVALID"),
        ),
        "gemini/error_400_input_token_limit.json" => {
            (ContextLength, Some("INVALID_ARGUMENT"), None)
        }
        "gemini/error_429_resource_exhausted.json" => {
            (RateLimited, Some("RESOURCE_EXHAUSTED"), None)
        }
        "gemini/error_503_model_overloaded.json" | "gemini/error_503_unavailable.json" => {
            (Server, Some("UNAVAILABLE"), None)
        }
        other => panic!("{other}: no expectation written for this error body"),
    };
    assert_eq!(
        (e.kind, e.error_type.as_deref(), e.code.as_deref()),
        want,
        "{name}: {e:?}"
    );
    if name == "gemini/error_429_resource_exhausted.json" {
        assert_eq!(
            e.retry_after,
            Some(std::time::Duration::from_millis(34_400))
        );
    }
}

#[tokio::test]
async fn every_recorded_native_error_body_maps_to_the_right_error() {
    let Some(root) = upstream_dir() else { return };
    let router = Router::new()
        .route("/{dir}/{file}/{*rest}", post(serve_fixture))
        .with_state(Arc::new(root.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let mut seen = 0;
    for dir in ["openai-responses", "anthropic", "gemini"] {
        for path in files(&root, dir, ".json") {
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            if !file.starts_with("error_") || file.ends_with(".headers.json") {
                continue; // non-stream bodies and header sets are not error bodies
            }
            let provider = client(dir, format!("http://{addr}/{dir}/{file}"));
            let (_, error) = collect(provider.stream(presentation_turn())).await;
            let name = format!("{dir}/{file}");
            let error = error.unwrap_or_else(|| panic!("{name}: expected an error"));
            assert!(!error.message.is_empty(), "{name}");
            assert_eq!(error.provider, dir);
            assert_eq!(
                error.status.map(u32::from),
                file[6..9].parse::<u32>().ok(),
                "{name}"
            );
            expected(&name, &error);
            seen += 1;
        }
    }
    assert!(seen >= 13, "only {seen} error bodies found");
}
