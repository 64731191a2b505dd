//! A panel chosen per request (`"massgen": {"models": [...]}`, issue 14): allowed only with
//! `--allow-request-panels`, only on providers the server's configs already use (their key
//! and base URL), on all three doors, and never a metric label value.

use serde_json::{Value, json};

use crate::support::{FAST, Setup, get, mock_stats, panel_yaml, post};

const CHOSEN: [&str; 2] = [
    "chatcompletion/picked-one:ttft_ms=5,token_ms=1",
    "chatcompletion/picked-two:ttft_ms=10,token_ms=1",
];

fn server(extra: &[&str]) -> Setup {
    Setup::with_panel(|url| panel_yaml(url, &FAST, ""), extra)
}

/// The same question on each door, with `massgen` as given.
fn on_each_door(massgen: Value) -> [(&'static str, Value); 3] {
    let messages = json!([{"role": "user", "content": "Why is the sky blue?"}]);
    [
        (
            "/v1/chat/completions",
            json!({"model": "massgen", "messages": messages, "massgen": massgen}),
        ),
        (
            "/v1/responses",
            json!({"model": "massgen", "input": "Why is the sky blue?", "massgen": massgen}),
        ),
        (
            "/v1/messages",
            json!({"model": "massgen", "max_tokens": 64, "messages": messages, "massgen": massgen}),
        ),
    ]
}

/// Status and the error's code (OpenAI shape) or type and message (Anthropic shape).
async fn error_of(path: &str, response: reqwest::Response) -> (u16, String, String) {
    let status = response.status().as_u16();
    let v: Value = response.json().await.unwrap();
    let what = if path == "/v1/messages" {
        assert_eq!(v["type"], "error", "{v}");
        &v["error"]["type"]
    } else {
        assert_eq!(v["error"]["param"], "massgen.models", "{v}");
        &v["error"]["code"]
    };
    let message = v["error"]["message"].as_str().unwrap_or_default();
    (
        status,
        what.as_str().unwrap().to_string(),
        message.to_string(),
    )
}

#[tokio::test]
async fn a_request_runs_the_models_it_names_when_allowed() {
    let setup = server(&["--allow-request-panels"]);
    let url = &setup.server.url;
    for (path, body) in on_each_door(json!({"models": CHOSEN})) {
        let r = post(url, path, None, &body).await;
        assert_eq!(r.status(), 200, "{path}");
        let v: Value = r.json().await.unwrap();
        let agents = v["massgen_metadata"]["agents"].as_array().unwrap();
        let ids: Vec<&str> = agents
            .iter()
            .map(|a| a["agent_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, CHOSEN, "{path}: {v}");
        let models: Vec<&str> = agents
            .iter()
            .map(|a| a["model"].as_str().unwrap())
            .collect();
        assert_eq!(
            models,
            [
                "picked-one:ttft_ms=5,token_ms=1",
                "picked-two:ttft_ms=10,token_ms=1"
            ]
        );
    }
    // The simulator saw the chosen models, on the configured backend.
    let stats = mock_stats(&setup.mock).await;
    assert!(
        stats["by_model"]["picked-one"]["requests"]
            .as_u64()
            .unwrap()
            >= 3,
        "{stats}"
    );
    // A model repeats as several agents.
    let body = json!({"model": "massgen", "messages": [{"role": "user", "content": "hi"}],
        "massgen": {"models": [CHOSEN[0], CHOSEN[0], CHOSEN[1]]}});
    let v: Value = post(url, "/v1/chat/completions", None, &body)
        .await
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = v["massgen_metadata"]["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["agent_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [CHOSEN[0], &format!("{}#2", CHOSEN[0]), CHOSEN[1]]);
    // Metrics never take the client's strings.
    let metrics = get(&format!("{url}/metrics"), None)
        .await
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("(set by request)"), "{metrics}");
    assert!(
        !metrics.contains("picked-"),
        "a chosen model is a label value"
    );
}

#[tokio::test]
async fn request_panels_are_refused_unless_allowed_and_only_for_known_providers() {
    let off = server(&[]);
    for (path, body) in on_each_door(json!({"models": CHOSEN})) {
        let r = post(&off.server.url, path, None, &body).await;
        let (status, what, message) = error_of(path, r).await;
        assert_eq!(status, 400, "{path}");
        if path != "/v1/messages" {
            assert_eq!(what, "request_panels_disabled");
        }
        assert!(
            message.contains("--allow-request-panels"),
            "{path}: {message}"
        );
    }

    let on = server(&["--allow-request-panels"]);
    let url = &on.server.url;
    let unknown = json!({"models": ["groq/llama-3.3-70b-versatile"]});
    for (path, body) in on_each_door(unknown) {
        let r = post(url, path, None, &body).await;
        let (status, what, message) = error_of(path, r).await;
        assert_eq!(status, 400, "{path}");
        if path != "/v1/messages" {
            assert_eq!(what, "unknown_provider");
        }
        assert!(
            message.contains("no backend for provider 'groq' (available: chatcompletion)"),
            "{path}: {message}"
        );
    }
    let too_many = json!({"models": vec![CHOSEN[0]; 9]});
    let shapes = [
        json!([]),
        json!("openai/gpt-4o"),
        json!(["gpt-4o"]),
        json!([3]),
        too_many,
    ];
    for models in shapes {
        let body = json!({"model": "massgen", "messages": [{"role": "user", "content": "hi"}],
            "massgen": {"models": models}});
        let r = post(url, "/v1/chat/completions", None, &body).await;
        let (status, code, _) = error_of("/v1/chat/completions", r).await;
        assert_eq!((status, code.as_str()), (400, "invalid_value"), "{models}");
    }
}
