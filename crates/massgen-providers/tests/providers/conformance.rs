//! Replays the recorded upstream traffic in the shared fixtures
//! (`fixtures/upstream/{openai-chat,deepseek,groq,openrouter,xai}`) through the Chat
//! Completions client and checks the facts their README states.
//!
//! The shared directory is `MASSGEN_SHARED_DIR` or `../shared` beside the repository; when
//! neither exists the tests print why and pass.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use massgen_providers::chat_completions::{
    ChatCompletions, ChatCompletionsConfig, ChatCompletionsProvider,
};
use massgen_providers::decode_stream;
use massgen_providers::http_client;
use massgen_providers::retry::CallPolicy;
use massgen_providers::{
    FinishReason, Message, Provider, ProviderChunk, ProviderError, ProviderErrorKind,
    ProviderRequest, ToolCall, Usage,
};

use crate::support::{assert_announced, byte_stream, files, upstream_dir, usage};

const DIRS: &[&str] = &["openai-chat", "deepseek", "groq", "openrouter", "xai"];

/// What one recording decodes to.
#[derive(Debug, Default, Clone, PartialEq)]
struct Outcome {
    text: String,
    reasoning: String,
    /// Kinds of the live chunks in arrival order, runs collapsed ("reasoning", "text").
    order: Vec<&'static str>,
    /// Names of the `ToolCallStarted` announcements, in order.
    started: Vec<String>,
    calls: Vec<ToolCall>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    error: Option<ProviderError>,
}

async fn replay(path: &Path, piece: usize) -> Outcome {
    let bytes = std::fs::read(path).unwrap();
    let mut stream = decode_stream::<ChatCompletions>(
        "replay".into(),
        byte_stream(&bytes, piece),
        Duration::from_secs(5),
    );
    let mut out = Outcome::default();
    while let Some(item) = stream.next().await {
        match item {
            Ok(ProviderChunk::Text(t)) => {
                out.order.push("text");
                out.text.push_str(&t);
            }
            Ok(ProviderChunk::Reasoning(t)) => {
                out.order.push("reasoning");
                out.reasoning.push_str(&t);
            }
            Ok(ProviderChunk::ToolCallStarted { name }) => out.started.push(name),
            Ok(ProviderChunk::ToolCall(call)) => {
                out.calls.push(call);
                assert_announced(&out.started, &out.calls, false);
            }
            Ok(ProviderChunk::Usage(usage)) => out.usage = Some(usage),
            Ok(ProviderChunk::Finish(reason)) => {
                assert!(out.finish.is_none(), "{}: two finishes", path.display());
                out.finish = Some(reason);
                assert_announced(&out.started, &out.calls, true);
            }
            Err(error) => out.error = Some(error),
        }
    }
    out.order.dedup();
    out
}

fn assert_json_arguments(outcome: &Outcome) {
    for call in &outcome.calls {
        let parsed: Result<serde_json::Value, _> = serde_json::from_str(&call.arguments);
        assert!(
            parsed.is_ok(),
            "arguments of {} are not JSON: {:?}",
            call.name,
            call.arguments
        );
        assert!(!call.id.is_empty());
    }
}

/// The facts the README states about each recording.
fn check(name: &str, o: &Outcome) {
    let names: Vec<&str> = o.calls.iter().map(|c| c.name.as_str()).collect();
    match name {
        "openai-chat/stream_finish_length.sse" => {
            assert_eq!(o.finish, Some(FinishReason::Length));
            assert!(!o.text.is_empty());
        }
        "openai-chat/stream_parallel_tool_calls.sse" => {
            assert_eq!(names, ["GetWeatherArgs", "get_stock_price"]);
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
            assert!(o.usage.is_some());
            let args: serde_json::Value = serde_json::from_str(&o.calls[1].arguments).unwrap();
            assert_eq!(args["ticker"], "AAPL");
        }
        "openai-chat/stream_refusal.sse" => {
            assert!(o.text.starts_with("I'm sorry"), "{:?}", o.text);
            assert_eq!(o.finish, Some(FinishReason::Stop));
        }
        "openai-chat/stream_text_include_usage.sse" | "openai-chat/stream_text_usage_null.sse" => {
            assert!(!o.text.is_empty());
            assert!(o.calls.is_empty());
            assert!(
                o.usage
                    .is_some_and(|u| u.input_tokens > 0 && u.output_tokens > 0)
            );
            assert_eq!(o.finish, Some(FinishReason::Stop));
        }
        "openai-chat/stream_tool_call_strict.sse" => {
            assert_eq!(names, ["get_weather"]);
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        "openai-chat/stream_tool_call_usage_null.sse" => {
            assert_eq!(names, ["multiply"]);
            assert_eq!(o.usage, Some(usage(54, 20, 74, 0, 0)));
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        "deepseek/stream_reasoning_content.sse" => {
            assert!(!o.reasoning.is_empty() && !o.text.is_empty());
            assert_eq!(o.order, ["reasoning", "text"]);
            assert_eq!(o.usage, Some(usage(6, 212, 218, 0, 198)));
            assert_eq!(o.finish, Some(FinishReason::Stop));
        }
        "groq/stream_error_midstream.sse" => {
            assert!(
                o.reasoning.starts_with("We need to call the"),
                "{:?}",
                o.reasoning
            );
            let error = o.error.as_ref().expect("the event: error frame");
            assert_eq!(error.kind, ProviderErrorKind::Stream);
            assert_eq!(error.code.as_deref(), Some("tool_use_failed"));
            assert_eq!(error.status, Some(400));
            assert_eq!(error.error_type.as_deref(), Some("invalid_request_error"));
        }
        "groq/stream_reasoning_tool_call.sse" => {
            assert!(!o.reasoning.is_empty());
            assert_eq!(
                o.calls,
                [ToolCall {
                    id: "fc_bfb39741-3748-4def-9886-a93fc9c64a90".into(),
                    name: "get_something_by_name".into(),
                    arguments: r#"{"name":"example"}"#.into(),
                    opaque: None,
                }]
            );
            assert_eq!(o.usage, Some(usage(304, 49, 353, 0, 23)));
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        "groq/stream_tool_call_x_groq.sse" => {
            assert_eq!(names, ["weather"]);
            assert_eq!(o.calls[0].arguments, "{}");
            assert_eq!(o.usage, Some(usage(210, 15, 225, 0, 0)));
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        "openrouter/stream_error_midstream.sse" => {
            assert!(o.reasoning.starts_with("We need"));
            let error = o.error.as_ref().expect("the top-level error chunk");
            assert_eq!(error.kind, ProviderErrorKind::Stream);
            assert_eq!(error.message, "Token limit reached");
            assert_eq!(error.code.as_deref(), Some("400"));
            assert_eq!(o.finish, None);
        }
        "openrouter/stream_reasoning.sse" => {
            assert!(!o.reasoning.is_empty());
            assert!(o.text.contains('4'), "{:?}", o.text);
            assert_eq!(o.usage, Some(usage(43, 36, 79, 0, 13)));
            assert_eq!(o.finish, Some(FinishReason::Stop));
        }
        "openrouter/stream_tool_call_repeated_role.sse" => {
            assert_eq!(
                o.calls,
                [ToolCall {
                    id: "0".into(),
                    name: "llm_version".into(),
                    arguments: "{}".into(),
                    opaque: None,
                }]
            );
            assert_eq!(o.usage, Some(usage(57, 17, 74, 0, 0)));
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        "xai/stream_reasoning_text.sse" => {
            assert!(
                o.reasoning.starts_with("First, the user said"),
                "{:?}",
                o.reasoning
            );
            assert_eq!(o.text, "Hello");
            assert_eq!(o.usage, Some(usage(12, 1, 303, 11, 290)));
            assert_eq!(o.finish, Some(FinishReason::Stop));
        }
        "xai/stream_reasoning_tool_call.sse" => {
            assert_eq!(names, ["weather"]);
            assert_eq!(o.calls[0].arguments, r#"{"location":"San Francisco"}"#);
            assert_eq!(o.calls[0].id, "call_55117580");
            assert_eq!(o.usage, Some(usage(291, 26, 513, 290, 196)));
            assert_eq!(o.finish, Some(FinishReason::ToolCalls));
        }
        other => println!("{other}: no specific expectations, generic checks only"),
    }
}

#[tokio::test]
async fn every_recorded_chat_stream_decodes_as_documented() {
    let Some(root) = upstream_dir() else { return };
    let mut seen = 0;
    for dir in DIRS {
        for path in files(&root, dir, ".sse") {
            let name = format!("{dir}/{}", path.file_name().unwrap().to_string_lossy());
            let outcome = replay(&path, usize::MAX).await;
            // Splitting the bytes anywhere must not change anything.
            assert_eq!(outcome, replay(&path, 3).await, "{name}: split-dependent");
            assert!(
                outcome.finish.is_some() != outcome.error.is_some(),
                "{name}: must end with exactly one of finish or error: {outcome:?}"
            );
            assert_json_arguments(&outcome);
            check(&name, &outcome);
            seen += 1;
        }
    }
    assert!(seen >= 15, "expected the documented recordings, saw {seen}");
}

/// Serves `{dir}/{file}` from the shared fixtures with the status in its name
/// (`error_429_…json` → 429).
async fn serve_fixture(
    State(root): State<Arc<PathBuf>>,
    UrlPath((dir, file)): UrlPath<(String, String)>,
) -> Response {
    let status = file
        .strip_prefix("error_")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
        .and_then(|code| StatusCode::from_u16(code).ok())
        .unwrap_or(StatusCode::IM_A_TEAPOT);
    let body = std::fs::read(root.join(&dir).join(&file)).unwrap_or_default();
    (status, [("content-type", "application/json")], body).into_response()
}

#[tokio::test]
async fn every_recorded_chat_error_body_maps_to_the_right_error() {
    let Some(root) = upstream_dir() else { return };
    let router = Router::new()
        .route("/{dir}/{file}/chat/completions", post(serve_fixture))
        .with_state(Arc::new(root.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });

    use ProviderErrorKind::*;
    let mut seen = 0;
    for dir in DIRS {
        for path in files(&root, dir, ".json") {
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            if !file.starts_with("error_") || file.ends_with(".headers.json") {
                continue; // non-stream bodies and header sets are not error bodies
            }
            let config = ChatCompletionsConfig {
                provider_name: (*dir).into(),
                model: "m".into(),
                base_url: format!("http://{addr}/{dir}/{file}"),
                api_key: None,
                params: serde_json::Map::new(),
                policy: CallPolicy {
                    max_attempts: 1,
                    ..CallPolicy::default()
                },
            };
            let provider = ChatCompletionsProvider::new(config, http_client().unwrap()).unwrap();
            let request = ProviderRequest {
                messages: Arc::new(vec![Message::user("hi")]),
                ..ProviderRequest::default()
            };
            let mut stream = provider.stream(request);
            let error = match stream.next().await {
                Some(Err(error)) => error,
                other => panic!("{dir}/{file}: expected an error, got {other:?}"),
            };
            let name = format!("{dir}/{file}");
            assert!(!error.message.is_empty(), "{name}");
            assert_eq!(error.provider, *dir);
            let expected: (ProviderErrorKind, Option<&str>) = match name.as_str() {
                "openai-chat/error_400_context_length_exceeded.json" => {
                    (ContextLength, Some("context_length_exceeded"))
                }
                "openai-chat/error_400_invalid_param.json" => (InvalidRequest, None),
                "openai-chat/error_401_invalid_api_key.json" => {
                    (Authentication, Some("invalid_api_key"))
                }
                "openai-chat/error_429_rate_limit_exceeded.json"
                | "openai-chat/error_429_rate_limit_exceeded_tpm.json" => {
                    assert_eq!(error.error_type.as_deref(), Some("tokens"));
                    (RateLimited, Some("rate_limit_exceeded"))
                }
                "openai-chat/error_500_server_error.json" => {
                    assert_eq!(error.error_type.as_deref(), Some("server_error"));
                    (Server, None)
                }
                "groq/error_400_tool_use_failed.json" => (InvalidRequest, Some("tool_use_failed")),
                "openrouter/error_429_provider_rate_limited.json" => {
                    assert!(
                        error.message.contains("temporarily rate-limited"),
                        "{}",
                        error.message
                    );
                    (RateLimited, Some("429"))
                }
                other => {
                    println!("{other}: no specific expectations, generic checks only");
                    (error.kind, error.code.as_deref())
                }
            };
            assert_eq!((error.kind, error.code.as_deref()), expected, "{name}");
            assert!(error.status.is_some_and(|s| s >= 400), "{name}");
            seen += 1;
        }
    }
    assert!(
        seen >= 8,
        "expected the documented error bodies, saw {seen}"
    );
}
