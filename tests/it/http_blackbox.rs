//! The real binary on port 0, its agents on the real simulator (`massgen mock-upstream`),
//! everything over loopback HTTP.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    Setup, assert_usage_is_the_simulators, chat, client, mock_stats, panel_yaml, parse_sse, write,
};

const FAST: [&str; 3] = [
    "alpha:ttft_ms=20,token_ms=1",
    "beta:ttft_ms=40,token_ms=1",
    "gamma:ttft_ms=60,token_ms=1",
];

/// A simulator, a default panel of `models`, a configs dir with `timeout.yaml` and
/// `fast.yaml`, and a server started with `extra` flags.
fn setup(models: &[&str], orchestrator: &str, extra: &[&str]) -> Setup {
    Setup::start(|mock_url, dir| {
        let default = write(
            dir,
            "team.yaml",
            &panel_yaml(mock_url, models, orchestrator),
        );
        let configs = dir.join("configs");
        std::fs::create_dir(&configs).expect("configs dir");
        write(
            &configs,
            "timeout.yaml",
            &panel_yaml(
                mock_url,
                &["slow:fault=hang", "slow2:fault=hang"],
                "timeout_settings:\n  orchestrator_timeout_seconds: 1\n",
            ),
        );
        write(&configs, "fast.yaml", &panel_yaml(mock_url, &FAST, ""));
        let mut flags = vec![
            "--config".to_string(),
            default.display().to_string(),
            "--configs-dir".to_string(),
            configs.display().to_string(),
        ];
        flags.extend(extra.iter().map(|f| f.to_string()));
        flags
    })
}

fn question(stream: bool) -> Value {
    json!({
        "model": "massgen",
        "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Why is the sky blue?"}
        ]
    })
}

#[tokio::test]
async fn stream_sends_role_deliberation_content_finish_usage_done_in_order() {
    let s = setup(&FAST, "", &[]);
    let response = chat(&s.server.url, None, &question(true)).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let session = response.headers()["x-massgen-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(session.starts_with("sess_"), "{session}");
    let sse = parse_sse(&response.text().await.unwrap());
    assert!(sse.done, "no [DONE]: {}", sse.raw);

    let first = &sse.events[0];
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let id = first["id"].as_str().unwrap();
    for e in &sse.events {
        assert_eq!(e["object"], "chat.completion.chunk");
        assert_eq!(e["id"], id);
        assert!(e["choices"].is_array());
    }
    // Role once only: clients concatenate repeated roles.
    let roles = sse
        .events
        .iter()
        .filter(|e| e["choices"][0]["delta"].get("role").is_some())
        .count();
    assert_eq!(roles, 1);

    let reasoning = sse.reasoning();
    assert!(reasoning.contains("answered (agent1.1)"), "{reasoning}");
    assert!(reasoning.contains("voted for agent"), "{reasoning}");
    assert!(reasoning.contains("consensus"), "{reasoning}");

    // Order: every reasoning chunk comes before the first content token, content is
    // streamed in several chunks, then finish, then usage.
    let kind = |e: &Value| -> &str {
        let c = &e["choices"];
        if c.as_array().is_some_and(|a| a.is_empty()) {
            "usage"
        } else if !c[0]["finish_reason"].is_null() {
            "finish"
        } else if c[0]["delta"].get("reasoning_content").is_some() {
            "reasoning"
        } else if c[0]["delta"]["content"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
        {
            "content"
        } else {
            "other"
        }
    };
    let kinds: Vec<&str> = sse.events.iter().map(kind).collect();
    let first_content = kinds.iter().position(|k| *k == "content").expect("content");
    let last_reasoning = kinds
        .iter()
        .rposition(|k| *k == "reasoning")
        .expect("reasoning");
    assert!(last_reasoning < first_content, "{kinds:?}");
    assert!(
        kinds.iter().filter(|k| **k == "content").count() > 3,
        "{kinds:?}"
    );
    assert_eq!(&kinds[kinds.len() - 2..], ["finish", "usage"], "{kinds:?}");
    let finish = &sse.events[sse.events.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["massgen_metadata"]["session_id"], session.as_str());
    assert!(
        sse.content().starts_with("[simulated final answer]"),
        "{}",
        sse.content()
    );
    let usage = &sse.events[sse.events.len() - 1]["usage"];
    assert!(usage["total_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn non_stream_returns_the_answer_the_deliberation_and_metadata() {
    let s = setup(&FAST, "", &[]);
    let response = chat(&s.server.url, None, &question(false)).await;
    assert_eq!(response.status(), 200);
    let session = response.headers()["x-massgen-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    let message = &body["choices"][0]["message"];
    assert_eq!(message["role"], "assistant");
    assert!(
        message["content"]
            .as_str()
            .unwrap()
            .starts_with("[simulated final answer]")
    );
    assert!(
        message["reasoning_content"]
            .as_str()
            .unwrap()
            .contains("answered (agent")
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let meta = &body["massgen_metadata"];
    assert_eq!(meta["session_id"], session.as_str());
    let winner = meta["winner"]["label"].as_str().unwrap();
    assert!(["agent1", "agent2", "agent3"].contains(&winner), "{meta}");
    assert!(meta["answers"].as_array().unwrap().len() >= 3, "{meta}");
    assert_eq!(meta["agents"].as_array().unwrap().len(), 3);
    assert!(meta["votes"].as_array().unwrap().len() == 3, "{meta}");
}

#[tokio::test]
async fn max_completion_tokens_and_stop_bound_the_answer() {
    let s = setup(&FAST, "", &[]);
    // Streamed: the stop sequence is found across deltas and not sent.
    let mut body = question(true);
    body["stop"] = json!("final");
    let raw = chat(&s.server.url, None, &body).await.text().await.unwrap();
    let sse = parse_sse(&raw);
    assert_eq!(sse.content(), "[simulated ");
    let finish = sse
        .events
        .iter()
        .filter_map(|e| e["choices"][0]["finish_reason"].as_str())
        .collect::<Vec<_>>();
    assert_eq!(finish, ["stop"]);
    assert!(sse.done);
    // Not streamed: two estimated tokens are eight characters, then `length`.
    for key in ["max_completion_tokens", "max_tokens"] {
        let mut body = question(false);
        body[key] = json!(2);
        let completion: Value = chat(&s.server.url, None, &body).await.json().await.unwrap();
        let choice = &completion["choices"][0];
        assert_eq!(choice["message"]["content"], "[simulat", "{key}");
        assert_eq!(choice["finish_reason"], "length", "{key}");
    }
}

#[tokio::test]
async fn summed_usage_equals_what_the_upstream_reported() {
    let s = setup(&FAST, "", &[]);
    let body: Value = chat(&s.server.url, None, &question(false))
        .await
        .json()
        .await
        .unwrap();
    let stats = mock_stats(&s.mock).await;
    let usage = &body["usage"];
    assert_usage_is_the_simulators(usage, &stats);
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );
    // Per-agent usage adds up to the total too.
    let per_agent: u64 = body["massgen_metadata"]["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["usage"]["total_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(per_agent, usage["total_tokens"].as_u64().unwrap());
}

#[tokio::test]
async fn client_disconnect_cancels_every_upstream_call() {
    let slow = ["s1:ttft_ms=20000", "s2:ttft_ms=20000", "s3:ttft_ms=20000"];
    let s = setup(&slow, "", &[]);
    let mut response = chat(&s.server.url, None, &question(true)).await;
    assert_eq!(response.status(), 200);
    // The role chunk arrives before any upstream answers.
    let first = tokio::time::timeout(Duration::from_secs(5), response.chunk())
        .await
        .expect("first chunk in time")
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains("\"role\":\"assistant\""));
    // Wait until the three upstream calls are running, then hang up.
    let mut active = 0;
    for _ in 0..100 {
        active = mock_stats(&s.mock).await["active"].as_u64().unwrap();
        if active == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(active, 3);
    drop(response);
    let mut stats = Value::Null;
    for _ in 0..100 {
        stats = mock_stats(&s.mock).await;
        if stats["active"] == 0 && stats["cancelled"] == 3 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("upstream calls still running after disconnect: {stats}");
}

#[tokio::test]
async fn keepalive_comments_flow_during_a_slow_deliberation() {
    let slow = ["k1:ttft_ms=2500,token_ms=1", "k2:ttft_ms=2600,token_ms=1"];
    let s = setup(&slow, "", &["--keepalive-seconds", "1"]);
    let response = chat(&s.server.url, None, &question(true)).await;
    let sse = parse_sse(&response.text().await.unwrap());
    assert!(sse.comments >= 1, "{}", sse.raw);
    assert!(sse.raw.contains(": keep-alive\n\n"));
    assert!(sse.done);
}

async fn expect_error(resp: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(resp.status().as_u16(), status);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let body: Value = resp.json().await.unwrap();
    let error = &body["error"];
    assert_eq!(error["code"], code, "{body}");
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(error["type"].is_string());
    assert!(error.get("param").is_some());
    body
}

#[tokio::test]
async fn every_bad_input_gets_an_openai_error() {
    let s = setup(&FAST, "", &["--max-body-bytes", "4000"]);
    let url = &s.server.url;
    let c = client();
    let endpoint = format!("{url}/v1/chat/completions");
    let raw = |body: &'static str| {
        c.post(&endpoint)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    expect_error(raw("{not json").await.unwrap(), 400, "invalid_json").await;
    expect_error(
        raw(r#"{"model":"massgen"}"#).await.unwrap(),
        400,
        "missing_required_parameter",
    )
    .await;
    expect_error(raw(r#"{"messages":[]}"#).await.unwrap(), 400, "empty_array").await;
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let unknown = expect_error(
        chat(
            url,
            None,
            &json!({"model": "massgen/nope", "messages": msgs}),
        )
        .await,
        404,
        "model_not_found",
    )
    .await;
    let message = unknown["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("massgen/fast") && message.contains("massgen/timeout"),
        "{message}"
    );
    expect_error(
        chat(
            url,
            None,
            &json!({"model": "massgen/../etc/passwd", "messages": msgs}),
        )
        .await,
        400,
        "invalid_model",
    )
    .await;
    expect_error(
        chat(
            url,
            None,
            &json!({"model": "massgen/path:/etc/passwd", "messages": msgs}),
        )
        .await,
        400,
        "config_paths_disabled",
    )
    .await;
    let big = "x".repeat(5000);
    expect_error(
        chat(
            url,
            None,
            &json!({"messages": [{"role": "user", "content": big}]}),
        )
        .await,
        413,
        "request_too_large",
    )
    .await;
    let collision = json!({"messages": msgs, "tools": [
        {"type": "function", "function": {"name": "new_answer", "parameters": {"type": "object"}}}
    ]});
    let body = expect_error(
        chat(url, None, &collision).await,
        400,
        "tool_name_collision",
    )
    .await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("new_answer")
    );
    expect_error(
        c.get(format!("{url}/v1/nope")).send().await.unwrap(),
        404,
        "not_found",
    )
    .await;
    expect_error(
        c.get(&endpoint).send().await.unwrap(),
        405,
        "method_not_allowed",
    )
    .await;
}

#[tokio::test]
async fn session_failures_map_to_502_503_504_and_429() {
    let s = setup(&FAST, "", &[]);
    let url = &s.server.url;
    let ask =
        |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    expect_error(
        chat(url, None, &ask("massgen/model:down:fault=500")).await,
        502,
        "upstream_failed",
    )
    .await;
    expect_error(
        chat(url, None, &ask("massgen/model:mute:policy=no_tool")).await,
        503,
        "no_usable_agent",
    )
    .await;
    expect_error(
        chat(url, None, &ask("massgen/timeout")).await,
        504,
        "session_timeout",
    )
    .await;
    let limited = chat(
        url,
        None,
        &ask("massgen/model:busy:fault=429,retry_after=0"),
    )
    .await;
    assert!(limited.headers().contains_key("retry-after"));
    expect_error(limited, 429, "rate_limit_exceeded").await;
}

#[tokio::test]
async fn a_rate_limited_call_is_retried_and_the_session_completes() {
    let s = setup(&FAST, "", &[]);
    let body = json!({"model": "massgen/model:flaky:fault=429,fault_times=1,retry_after=0",
        "messages": [{"role": "user", "content": "hi"}]});
    let response = chat(&s.server.url, None, &body).await;
    assert_eq!(response.status(), 200);
    let stats = mock_stats(&s.mock).await;
    let model = &stats["by_model"]["flaky"];
    assert!(model["requests"].as_u64().unwrap() >= 4, "{stats}");
}

#[tokio::test]
async fn an_error_after_the_stream_started_is_sent_in_band() {
    let s = setup(&FAST, "", &[]);
    let body = json!({"model": "massgen/model:down:fault=500", "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    let response = chat(&s.server.url, None, &body).await;
    assert_eq!(response.status(), 200);
    let sse = parse_sse(&response.text().await.unwrap());
    let last = sse.events.last().unwrap();
    assert!(last.get("choices").is_none(), "{last}");
    assert_eq!(last["error"]["code"], "upstream_failed");
    assert!(sse.done);
}

#[tokio::test]
async fn health_and_models_list_every_configuration() {
    let s = setup(&FAST, "", &[]);
    let c = client();
    let health: Value = c
        .get(format!("{}/health", s.server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    assert!(health["version"].is_string());
    let models: Value = c
        .get(format!("{}/v1/models", s.server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["massgen", "massgen/fast", "massgen/timeout"]);
    let named = chat(
        &s.server.url,
        None,
        &json!({"model": "massgen/fast", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(named.status(), 200);
}

#[tokio::test]
async fn a_listed_model_is_retrieved_by_id_and_any_other_is_a_404() {
    let s = setup(&FAST, "", &[]);
    let c = client();
    let get = |path: &str| c.get(format!("{}/v1/models/{path}", s.server.url)).send();
    // The slash of `massgen/<name>` as is and percent-encoded (the openai SDK's form).
    for (path, id) in [
        ("massgen", "massgen"),
        ("massgen/fast", "massgen/fast"),
        ("massgen%2Ftimeout", "massgen/timeout"),
    ] {
        let r = get(path).await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let model: Value = r.json().await.unwrap();
        assert_eq!(
            model,
            json!({"id": id, "object": "model", "created": 0, "owned_by": "massgen"})
        );
    }
    for path in [
        "massgen/nope",
        "gpt-4o",
        "massgen/fast/extra",
        "massgen%2Fmodel:x",
    ] {
        let r = get(path).await.unwrap();
        assert_eq!(r.headers()["x-should-retry"], "false", "{path}");
        let body = expect_error(r, 404, "model_not_found").await;
        assert_eq!(body["error"]["param"], "model");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("Available: massgen, massgen/fast, massgen/timeout"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn sigterm_lets_a_running_session_finish() {
    let slow = ["t1:ttft_ms=800,token_ms=1", "t2:ttft_ms=900,token_ms=1"];
    let mut s = setup(&slow, "", &["--shutdown-grace-seconds", "20"]);
    let url = s.server.url.clone();
    let request =
        tokio::spawn(async move { chat(&url, None, &question(false)).await.status().as_u16() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = tokio::task::spawn_blocking(move || {
        let exit = s.server.terminate(Duration::from_secs(25));
        drop(s);
        exit
    })
    .await
    .unwrap();
    assert_eq!(request.await.unwrap(), 200);
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}
