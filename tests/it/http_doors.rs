//! The doors in-process (no sockets) over scripted providers, where the test can read what
//! the engine sent upstream and set the clock: a continued Responses conversation reaches
//! the agents, `created` comes from the clock seam, and dropping a stream cancels the
//! session's upstream calls.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, header};
use http_body_util::BodyExt;
use massgen::app::ProviderFactory;
use massgen::config::{AgentConfig, BackendConfig, PanelCatalog, PanelConfig, ServerSettings};
use massgen::server::{AppState, router};
use massgen_core::coordination::OrchestratorOptions;
use massgen_core::provider::{Provider, ProviderRequest, Role};
use massgen_providers::retry::CallPolicy;
use massgen_tools::ToolRegistry;
use massgen_tools::rmcp_client::RmcpConnector;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::support::engine::{FIXED_MS, FixedClock, Scripted, Step, member};

/// Hands each agent the scripted provider of its id.
struct ByAgent(HashMap<String, Scripted>);

impl ProviderFactory for ByAgent {
    fn build(&self, backend: &BackendConfig, _: &CallPolicy) -> Result<Arc<dyn Provider>, String> {
        self.0
            .get(&backend.model)
            .map(|p| Arc::new(p.clone()) as Arc<dyn Provider>)
            .ok_or_else(|| format!("no script for {}", backend.model))
    }
}

fn app(agents: &[(&str, Scripted)]) -> axum::Router {
    app_with(agents, ServerSettings::default())
}

fn app_with(agents: &[(&str, Scripted)], settings: ServerSettings) -> axum::Router {
    let panel = PanelConfig {
        name: "scripted".into(),
        source: PathBuf::from("scripted.yaml"),
        agents: agents
            .iter()
            .map(|(id, _)| AgentConfig {
                id: id.to_string(),
                system_message: None,
                backend: BackendConfig {
                    backend_type: "scripted".into(),
                    model: id.to_string(),
                    api_key: None,
                    base_url: String::new(),
                    params: Default::default(),
                    api_version: None,
                    price: None,
                    vision: false,
                    http: Default::default(),
                },
                tools: None,
            })
            .collect(),
        orchestrator: OrchestratorOptions::default(),
        call_policy: CallPolicy::default(),
    };
    let catalog = PanelCatalog {
        default: Some(Arc::new(panel)),
        ..PanelCatalog::default()
    };
    let providers = ByAgent(
        agents
            .iter()
            .map(|(id, p)| (id.to_string(), p.clone()))
            .collect(),
    );
    let records = massgen::app::store::RecordStore::memory(&settings.production);
    let app = massgen::app::App::new(massgen::app::AppParts {
        catalog,
        settings,
        providers: Arc::new(providers),
        tools: Arc::new(ToolRegistry::new(Arc::new(RmcpConnector))),
        env: Arc::new(|_: &str| None),
        clock: Arc::new(FixedClock),
        records,
    });
    router(AppState::new(Arc::new(app)))
}

async fn post(app: &axum::Router, path: &str, body: Value) -> (u16, Value) {
    let request = Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// Every message text the provider was sent in its `n`th request.
fn prompt(p: &Scripted, n: usize) -> String {
    let requests: Vec<ProviderRequest> = p.requests();
    requests[n]
        .messages
        .iter()
        .filter(|m| m.role != Role::System)
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn previous_response_id_brings_the_conversation_to_the_agents() {
    let a = member("a", "Four.", 0, "agent1");
    let b = member("b", "Four!", 0, "agent1");
    let app = app(&[("a", a.clone()), ("b", b.clone())]);
    let (status, first) = post(
        &app,
        "/v1/responses",
        json!({"input": "What is 2+2?",
        "instructions": "Be terse."}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let answer = first["output"][1]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(answer, "Final answer");
    let before = a.requests().len();
    let (status, second) = post(
        &app,
        "/v1/responses",
        json!({"input": "And 3+3?",
        "previous_response_id": first["id"]}),
    )
    .await;
    assert_eq!(status, 200, "{second}");
    // The agents of the second session see the first question and the answer given.
    let seen = prompt(&a, before);
    assert!(
        seen.contains("What is 2+2?") && seen.contains("Final answer") && seen.contains("And 3+3?"),
        "{seen}"
    );
    // `instructions` held for the first request only.
    let system: String = a.requests()[before]
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(|m| m.content.clone())
        .collect();
    assert!(!system.contains("Be terse."), "{system}");
    assert!(
        a.requests()[0]
            .messages
            .iter()
            .any(|m| m.content.contains("Be terse."))
    );
}

#[tokio::test]
async fn created_timestamps_come_from_the_clock() {
    let app = app(&[("a", member("a", "Four.", 0, "agent1"))]);
    let (_, chat) = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "Hi"}]}),
    )
    .await;
    assert_eq!(chat["created"], FIXED_MS / 1000);
    let (_, response) = post(&app, "/v1/responses", json!({"input": "Hi"})).await;
    assert_eq!(response["created_at"], FIXED_MS / 1000);
    assert_eq!(response["completed_at"], FIXED_MS / 1000);
}

#[tokio::test]
async fn dropping_a_responses_stream_cancels_the_upstream_calls() {
    let hang = Scripted::new("h", |_, _| vec![Step::Hang]);
    let app = app(&[("h", hang.clone())]);
    let request = Request::post("/v1/responses")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(
            json!({"input": "Hi", "stream": true}).to_string(),
        ))
        .unwrap();
    let mut body = app.oneshot(request).await.unwrap().into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("response.created"));
    for _ in 0..100 {
        if hang.live_streams() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(hang.live_streams(), 1);
    drop(body);
    for _ in 0..100 {
        if hang.live_streams() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the upstream call outlived the stream");
}

/// Issue 13: the client's answer bounds and format reach the presentation call upstream,
/// never a coordination turn; a presenter that does not write the format gets exactly one
/// corrective call, told what was wrong, then the door answers 502 `invalid_output`.
#[tokio::test]
async fn the_presentation_call_carries_the_clients_format_and_bounds() {
    use massgen_core::provider::OutputFormat;
    let a = member("a", "Four.", 0, "agent1");
    let b = member("b", "Four!", 0, "agent1");
    let app = app(&[("a", a.clone()), ("b", b.clone())]);
    let (status, body) = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "2+2?"}], "max_tokens": 100,
            "stop": ["END"], "response_format": {"type": "json_object"}}),
    )
    .await;
    // The scripted presenter writes prose: never JSON.
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "invalid_output");
    let all: Vec<ProviderRequest> = a.requests().into_iter().chain(b.requests()).collect();
    let (presentations, turns): (Vec<_>, Vec<_>) =
        all.into_iter().partition(|r| r.tools.is_empty());
    assert_eq!(presentations.len(), 2, "one call and one corrective call");
    for p in &presentations {
        assert_eq!(p.max_output_tokens, Some(100));
        assert_eq!(p.stop, vec!["END".to_string()]);
        // The first carries the format natively; a call that failed the check keeps it.
        assert_eq!(p.output_format, Some(OutputFormat::JsonObject));
    }
    let corrective = presentations[1].messages[0].content.clone();
    assert!(corrective.contains("it is not valid JSON"), "{corrective}");
    for t in &turns {
        assert_eq!((t.output_format.clone(), t.max_output_tokens), (None, None));
        assert!(t.stop.is_empty());
        // Told the format in words.
        assert!(t.messages[0].content.contains("one JSON object"), "{t:?}");
    }
    // Above 8192 the client's limit stays the server's cut only.
    let (status, _) = post(
        &app,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "2+2?"}], "max_tokens": 9000}),
    )
    .await;
    assert_eq!(status, 200);
    let last = a
        .requests()
        .into_iter()
        .chain(b.requests())
        .rfind(|r| r.tools.is_empty())
        .unwrap();
    assert_eq!(last.max_output_tokens, None);
}

/// Issue 13: `temperature`, `top_p` and `seed` reach every call of every agent (turns and
/// presentation) only where the operator allows it; otherwise they are ignored.
#[tokio::test]
async fn sampling_settings_reach_every_call_only_when_the_operator_allows_it() {
    use massgen_core::provider::Sampling;
    let body = json!({"messages": [{"role": "user", "content": "2+2?"}],
        "temperature": 0.25, "top_p": 0.5, "seed": 42});
    let wanted = Sampling {
        temperature: Some(0.25),
        top_p: Some(0.5),
        seed: Some(42),
    };
    for (allowed, expect) in [(false, Sampling::default()), (true, wanted)] {
        let a = member("a", "Four.", 0, "agent1");
        let b = member("b", "Four!", 0, "agent1");
        let settings = ServerSettings {
            allow_request_sampling: allowed,
            ..ServerSettings::default()
        };
        let app = app_with(&[("a", a.clone()), ("b", b.clone())], settings);
        for path in ["/v1/chat/completions", "/v1/responses", "/v1/messages"] {
            let mut body = body.clone();
            if path == "/v1/responses" {
                body["input"] = json!("2+2?");
            }
            if path == "/v1/messages" {
                body["max_tokens"] = json!(64);
            }
            let (status, response) = post(&app, path, body).await;
            assert_eq!(status, 200, "{path}: {response}");
        }
        let all: Vec<ProviderRequest> = a.requests().into_iter().chain(b.requests()).collect();
        assert!(
            all.iter().any(|r| r.tools.is_empty()),
            "a presentation call"
        );
        for r in &all {
            assert_eq!(r.sampling, expect, "allowed: {allowed}");
        }
    }
    // Out of range or of the wrong type: a 400 naming the field, allowed or not.
    let app = app(&[("a", member("a", "x", 0, "agent1"))]);
    for (field, value) in [
        ("temperature", json!(3)),
        ("top_p", json!(-0.1)),
        ("seed", json!("7")),
    ] {
        let mut body = body.clone();
        body[field] = value;
        let (status, response) = post(&app, "/v1/chat/completions", body).await;
        assert_eq!(status, 400, "{field}");
        assert_eq!(response["error"]["param"], field);
    }
}
