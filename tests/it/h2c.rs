//! HTTP/2 with prior knowledge (h2c) to `http://` upstreams: the backend's `h2c` key, a
//! session over it through `massgen serve`, its refusal on `https://`, and the simulator
//! serving HTTP/1.1 and h2c on one port with many streams per connection.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use massgen::config::parse_panel;
use massgen_providers::UpstreamHttp;
use serde_json::{Value, json};

use crate::support::{
    Setup, chat, env_of, mock_stats, mock_stats_at, question, run_bounded, simulator_in_process,
    write,
};

fn parse(yaml: &str) -> Result<massgen::config::PanelConfig, massgen::config::ConfigError> {
    let env = env_of(&[("OPENAI_API_KEY", "sk-env")]);
    parse_panel("team", Path::new("team.yaml"), yaml, env.as_ref())
}

#[test]
fn h2c_is_a_backend_choice_never_sent_upstream() {
    let panel = parse(
        "
agents:
  - id: a
    backend: {type: chatcompletion, base_url: \"http://127.0.0.1:8000/v1\", model: m, h2c: true}
  - id: b
    backend: {type: vllm, model: m, h2c: \"false\"}
  - id: c
    backend: {type: sglang, model: m}
  - id: d
    backend: {type: openai, model: gpt-4o-mini, h2c: false}
",
    )
    .unwrap();
    let http: Vec<UpstreamHttp> = panel.agents.iter().map(|a| a.backend.http).collect();
    assert_eq!(
        http,
        [
            UpstreamHttp::H2c,
            UpstreamHttp::Negotiated,
            UpstreamHttp::Negotiated,
            UpstreamHttp::Negotiated
        ]
    );
    for agent in &panel.agents {
        assert!(!agent.backend.params.contains_key("h2c"), "{agent:?}");
    }
}

#[test]
fn h2c_on_https_or_not_a_boolean_is_refused_saying_why() {
    for (backend, url) in [
        (
            "{type: chatcompletion, base_url: \"https://llm.example/v1\", api_key: k, model: m, h2c: true}",
            "https://llm.example/…",
        ),
        // The type's default base URL is https.
        (
            "{type: openai, model: gpt-4o-mini, h2c: true}",
            "https://api.openai.com/…",
        ),
    ] {
        let error = parse(&format!("agents:\n  - id: a\n    backend: {backend}\n")).unwrap_err();
        let message = error.to_string();
        assert_eq!(error.key, "agents[0].backend.h2c", "{message}");
        for part in ["http:// base URLs", "ALPN", url] {
            assert!(message.contains(part), "{part:?} missing in: {message}");
        }
    }
    let error = parse("agents:\n  - id: a\n    backend: {type: vllm, model: m, h2c: sometimes}\n")
        .unwrap_err();
    assert_eq!(error.key, "agents[0].backend.h2c");
    assert!(
        error.to_string().contains("must be true or false"),
        "{error}"
    );
}

/// At start-up, as every config error: exit status 2, the file, the key and the reason.
#[test]
fn serve_refuses_h2c_on_an_https_base_url() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "team.yaml",
        "agents:\n  - id: a\n    backend: {type: chatcompletion, base_url: \"https://llm.example/v1\", api_key: k, model: m, h2c: true}\n",
    );
    let mut cmd = Command::new(crate::support::bin());
    cmd.args([
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--config",
        "team.yaml",
    ])
    .env_clear()
    .env("XDG_DATA_HOME", dir.path())
    .current_dir(dir.path());
    let out = run_bounded(cmd, Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("team.yaml: agents[0].backend.h2c: h2c") && stderr.contains("ALPN"),
        "{stderr}"
    );
}

/// Every wire format's backend with `h2c: true`: the session succeeds, and every call
/// reached the simulator over HTTP/2.
#[tokio::test]
async fn a_session_over_h2c_reaches_the_simulator_over_http2() {
    let s = Setup::with_panel(
        |url| {
            format!(
                "agents:
  - id: cc
    backend: {{type: chatcompletion, base_url: \"{url}/v1\", h2c: true, model: \"cc:ttft_ms=10,token_ms=1\"}}
  - id: gpt
    backend: {{type: openai, base_url: \"{url}/v1\", api_key: sim, h2c: true, model: \"gpt:ttft_ms=20,token_ms=1\"}}
  - id: claude
    backend: {{type: claude, base_url: \"{url}/v1\", api_key: sim, h2c: true, model: \"claude:ttft_ms=30,token_ms=1\"}}
  - id: gemini
    backend: {{type: gemini, base_url: \"{url}/v1beta\", api_key: sim, h2c: true, model: \"gem:ttft_ms=40,token_ms=1\"}}
retry:
  max_attempts: 1
"
            )
        },
        &[],
    );
    let response = chat(&s.server.url, None, &question(false)).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let meta = &body["massgen_metadata"];
    let agents = meta["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 4, "{meta}");
    assert!(agents.iter().all(|a| a["failed"] == false), "{meta}");
    let answer = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(answer.starts_with("[simulated"), "{answer}");

    let stats = mock_stats(&s.mock).await;
    let calls = stats["requests"].as_u64().unwrap();
    // Four first answers at least, then votes and the presentation.
    assert!(calls >= 5, "{stats}");
    assert_eq!(
        stats["http_versions"],
        json!({"HTTP/2.0": calls}),
        "{stats}"
    );
}

fn hello(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hello"}]})
}

#[tokio::test]
async fn the_simulator_serves_http1_and_h2c_on_one_port() {
    let (base, stop, task) = simulator_in_process().await;
    let http1 = reqwest::Client::builder().http1_only().build().unwrap();
    let h2c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    for (client, version) in [
        (&http1, reqwest::Version::HTTP_11),
        (&h2c, reqwest::Version::HTTP_2),
    ] {
        let response = client
            .post(format!("{base}/v1/chat/completions"))
            .json(&hello("sim:ttft_ms=0,token_ms=0"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.version(), version);
        let body: Value = response.json().await.unwrap();
        assert!(
            body["choices"][0]["message"]["content"].is_string(),
            "{body}"
        );
    }
    let stats: Value = http1
        .get(format!("{base}/mock/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        stats["http_versions"],
        json!({"HTTP/1.1": 1, "HTTP/2.0": 1}),
        "{stats}"
    );
    let reset: Value = h2c
        .post(format!("{base}/mock/reset"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(reset["http_versions"], json!({}), "{reset}");
    stop.send(()).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), task).await;
    assert!(matches!(ended, Ok(Ok(Ok(())))), "{ended:?}");
}

/// More calls in flight on one h2c connection than hyper's default stream limit (200):
/// all are served at once, and shutting down ends them and the server.
#[tokio::test]
async fn one_h2c_connection_carries_hundreds_of_calls_and_shuts_down() {
    const CALLS: u64 = 300;
    let (base, stop, task) = simulator_in_process().await;
    // One client, so one pooled HTTP/2 connection for every call.
    let h2c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let calls: Vec<_> = (0..CALLS)
        .map(|_| {
            let request = h2c
                .post(format!("{base}/v1/chat/completions"))
                .json(&hello("sim-wait:fault=hang_headers"));
            tokio::spawn(async move { request.send().await.map(|r| r.status()) })
        })
        .collect();
    // Watched over HTTP/1.1: a stats request must not queue behind the calls.
    let http1 = reqwest::Client::builder().http1_only().build().unwrap();
    let mut active = 0;
    for _ in 0..500 {
        let stats: Value = http1
            .get(format!("{base}/mock/stats"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        active = stats["active"].as_u64().unwrap();
        if active == CALLS {
            assert_eq!(
                stats["http_versions"],
                json!({"HTTP/2.0": CALLS}),
                "{stats}"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(active, CALLS);
    stop.send(()).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), task).await;
    assert!(matches!(ended, Ok(Ok(Ok(())))), "{ended:?}");
    for call in calls {
        // Each hanging call is answered as the simulator shuts down.
        let status = call.await.unwrap().unwrap();
        assert_eq!(status, 503);
    }
}

/// Calls cancelled while their tokens are still on the way (the protocol cancels an agent's
/// call whenever a newer answer restarts it) leave the one h2c connection working. Before
/// massgen set h2's reset limits, a frame for a cancelled stream h2 had forgotten (it
/// remembers 50, for 1 s) was answered with a reset of its own, and past 1,024 of those h2
/// closed the connection with every call on it: 8,266 of 10,000 sessions failed that way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_cancelled_mid_stream_leave_the_h2c_connection_working() {
    use futures::StreamExt;
    use massgen_providers::{
        CallPolicy, Message, ProviderChunk, ProviderRequest, UpstreamConfig, Upstreams, Wire,
    };
    const ROUNDS: usize = 6;
    const CALLS: usize = 600;
    let (base, stop, task) = simulator_in_process().await;
    let upstreams = Upstreams::new(massgen_providers::http_client().unwrap());
    let provider = |model: &str| {
        let config = UpstreamConfig {
            provider_name: "chatcompletion".into(),
            model: model.into(),
            base_url: format!("{base}/v1"),
            api_key: None,
            params: serde_json::Map::new(),
            policy: CallPolicy::default(),
        };
        upstreams
            .build(Wire::ChatCompletions, config, None, UpstreamHttp::H2c)
            .unwrap()
    };
    let request = || ProviderRequest {
        messages: std::sync::Arc::new(vec![Message::user("hi")]),
        ..ProviderRequest::default()
    };
    // Three seconds of tokens, a frame every millisecond: each call is dropped after its
    // first token, with the rest still coming.
    let long = provider("long:ttft_ms=0,token_ms=1,words=3000");
    for round in 0..ROUNDS {
        let calls = (0..CALLS).map(|_| {
            let mut stream = long.stream(request());
            async move {
                let first = tokio::time::timeout(Duration::from_secs(30), stream.next()).await;
                matches!(first, Ok(Some(Ok(ProviderChunk::Text(_)))))
            }
        });
        let firsts = futures::future::join_all(calls).await;
        let failed = firsts.iter().filter(|ok| !**ok).count();
        assert_eq!(failed, 0, "round {round}: {failed} of {CALLS} calls failed");
    }
    let short = provider("short:ttft_ms=0,token_ms=0,words=5");
    let mut stream = short.stream(request());
    let mut finished = false;
    while let Ok(Some(chunk)) = tokio::time::timeout(Duration::from_secs(30), stream.next()).await {
        if matches!(chunk.unwrap(), ProviderChunk::Finish(_)) {
            finished = true;
        }
    }
    assert!(finished);
    let stats = mock_stats_at(&base).await;
    assert_eq!(
        stats["http_versions"],
        json!({"HTTP/2.0": ROUNDS * CALLS + 1}),
        "{stats}"
    );
    stop.send(()).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), task).await;
    assert!(matches!(ended, Ok(Ok(Ok(())))), "{ended:?}");
}
