//! The Anthropic Messages door (`/v1/messages`) black-box: the real binary on port 0, its
//! agents on the simulator, over loopback. Event order and shapes (against Anthropic's
//! recorded streams when the shared fixtures are there), tool use decided by the panel,
//! the answer bounds, Anthropic-shaped errors from every layer, `x-api-key`, model names
//! mapped to a panel, `ping`s and cancellation.

use std::time::Duration;

use serde_json::{Value, json};

use super::http_responses::wait_for;
use crate::support::{
    CLIENT_TOOL, FAST, Named, Setup, client, get_json, keys, mock_stats, panel_yaml,
    parse_named_sse, shared_fixture, write,
};

/// A default panel of `models`, a named panel `solo` (one fast agent), and `extra` flags.
fn setup(models: &[&str], extra: &[&str]) -> Setup {
    Setup::start(|mock_url, dir| {
        let team = write(dir, "team.yaml", &panel_yaml(mock_url, models, ""));
        let configs = dir.join("configs");
        std::fs::create_dir(&configs).unwrap();
        write(&configs, "solo.yaml", &panel_yaml(mock_url, &[FAST[0]], ""));
        let mut flags = vec![
            "--config".to_string(),
            team.display().to_string(),
            "--configs-dir".to_string(),
            configs.display().to_string(),
        ];
        flags.extend(extra.iter().map(|f| f.to_string()));
        flags
    })
}

/// `POST /v1/messages?beta=true` as Claude Code sends it: `x-api-key`, the version and
/// beta headers.
async fn messages(url: &str, key: &str, body: &Value) -> reqwest::Response {
    client()
        .post(format!("{url}/v1/messages?beta=true"))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .header(
            "anthropic-beta",
            "claude-code-20250219,interleaved-thinking-2025-05-14",
        )
        .json(body)
        .send()
        .await
        .unwrap()
}

fn ask(text: &str) -> Value {
    json!({"model": "massgen", "max_tokens": 1024, "messages": [{"role": "user", "content": text}]})
}

fn streamed(mut body: Value) -> Value {
    body["stream"] = json!(true);
    body
}

async fn stream(url: &str, body: &Value) -> Vec<Named> {
    let r = messages(url, "k", &streamed(body.clone())).await;
    assert_eq!(r.status(), 200);
    parse_named_sse(&r.text().await.unwrap()).0
}

/// The SDK accumulator's and Claude Code's rules: an `event:` line equal to the type on
/// every event, `message_start` first, blocks started before their deltas and stopped.
fn check_stream_rules(events: &[Named]) {
    assert_eq!(events[0].data["type"], "message_start");
    assert_eq!(events[0].data["message"]["content"], json!([]));
    assert!(events[0].data["message"]["usage"].is_object());
    let mut open: Option<u64> = None;
    let mut next = 0;
    for e in events {
        assert_eq!(e.event, e.data["type"], "event line = type");
        match e.data["type"].as_str().unwrap() {
            "content_block_start" => {
                assert_eq!(open, None, "a block is still open");
                assert_eq!(e.data["index"], next);
                open = Some(next);
                next += 1;
            }
            "content_block_delta" => assert_eq!(open, e.data["index"].as_u64()),
            "content_block_stop" => {
                assert_eq!(open, e.data["index"].as_u64());
                open = None;
            }
            "message_delta" => assert!(e.data["usage"]["output_tokens"].is_u64()),
            _ => {}
        }
    }
    assert_eq!(open, None, "every block is stopped");
}

fn deltas(events: &[Named], kind: &str, field: &str) -> String {
    events
        .iter()
        .filter(|e| e.data["delta"]["type"] == kind)
        .map(|e| e.data["delta"][field].as_str().unwrap())
        .collect()
}

fn assert_has_keys_of(ours: &Value, recorded: &Value, what: &str) {
    // Anthropic's serving details a panel has no value for.
    let theirs_only = ["cache_creation", "service_tier", "inference_geo", "caller"];
    let missing: Vec<String> = keys(recorded)
        .difference(&keys(ours))
        .filter(|k| !theirs_only.contains(&k.as_str()))
        .cloned()
        .collect();
    assert!(missing.is_empty(), "{what}: missing {missing:?} in {ours}");
}

#[tokio::test]
async fn a_streamed_answer_has_the_recorded_event_order_and_shapes() {
    let s = setup(&FAST, &[]);
    let events = stream(&s.server.url, &ask("Why is the sky blue?")).await;
    check_stream_rules(&events);
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e.data["type"].as_str().unwrap())
        .collect();
    assert_eq!(&kinds[..2], ["message_start", "ping"]);
    assert_eq!(&kinds[kinds.len() - 2..], ["message_delta", "message_stop"]);
    let thinking = deltas(&events, "thinking_delta", "thinking");
    assert!(
        thinking.contains("answered (agent") && thinking.contains("voted for"),
        "{thinking}"
    );
    // The thinking block ends with a signature delta, as the SDK and Claude Code expect.
    assert!(
        events
            .iter()
            .any(|e| e.data["delta"]["type"] == "signature_delta")
    );
    let text = deltas(&events, "text_delta", "text");
    assert!(text.starts_with("[simulated final answer]"), "{text}");
    let end = &events[events.len() - 2].data;
    assert_eq!(end["delta"]["stop_reason"], "end_turn");
    let stats = mock_stats(&s.mock).await;
    assert_eq!(
        end["usage"]["input_tokens"].as_u64().unwrap()
            + end["usage"]["cache_read_input_tokens"].as_u64().unwrap(),
        stats["prompt_tokens"].as_u64().unwrap()
    );
    assert_eq!(end["usage"]["output_tokens"], stats["completion_tokens"]);
    assert!(end["massgen_metadata"]["winner"].is_object());

    for fixture in ["anthropic/stream_text.sse", "anthropic/stream_thinking.sse"] {
        let Some(raw) = shared_fixture(fixture) else {
            return;
        };
        for r in parse_named_sse(&raw).0 {
            let ours = events
                .iter()
                .find(|e| {
                    e.data["type"] == r.data["type"]
                        && e.data["delta"]["type"] == r.data["delta"]["type"]
                        && e.data["content_block"]["type"] == r.data["content_block"]["type"]
                })
                .unwrap_or_else(|| panic!("no {} like the recording's", r.event));
            assert_has_keys_of(&ours.data, &r.data, &r.event);
            for field in ["message", "delta", "content_block", "usage"] {
                if let Some(inner) = r.data.get(field) {
                    assert_has_keys_of(&ours.data[field], inner, &format!("{} {field}", r.event));
                }
            }
        }
    }
}

#[tokio::test]
async fn a_non_streamed_message_has_the_recorded_shape_and_its_record_says_messages() {
    let s = setup(&FAST, &[]);
    let r = messages(&s.server.url, "k", &ask("Why is the sky blue?")).await;
    assert_eq!(r.status(), 200);
    let sid = r.headers()["x-massgen-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let message: Value = r.json().await.unwrap();
    assert_eq!(message["type"], "message");
    assert_eq!(message["content"][0]["type"], "thinking");
    assert_eq!(message["content"][1]["type"], "text");
    assert_eq!(message["stop_reason"], "end_turn");
    let record: Value = get_json(&format!("{}/v1/sessions/{sid}", s.server.url)).await;
    assert_eq!(record["door"], "messages");
    let Some(raw) = shared_fixture("anthropic/nonstream_text.json") else {
        return;
    };
    let recorded: Value = serde_json::from_str(&raw).unwrap();
    assert_has_keys_of(&message, &recorded, "message");
    assert_has_keys_of(&message["usage"], &recorded["usage"], "usage");
}

#[tokio::test]
async fn the_panel_uses_a_tool_and_the_result_comes_back_in_a_user_turn() {
    let s = setup(&CLIENT_TOOL, &[]);
    let tools = json!([{"name": "get_weather", "description": "Current weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]);
    let mut body = ask("What is the weather in Paris?");
    body["tools"] = tools.clone();
    let events = stream(&s.server.url, &body).await;
    check_stream_rules(&events);
    let start = events
        .iter()
        .find(|e| e.data["content_block"]["type"] == "tool_use")
        .unwrap();
    assert_eq!(start.data["content_block"]["name"], "get_weather");
    let input = deltas(&events, "input_json_delta", "partial_json");
    assert_eq!(
        serde_json::from_str::<Value>(&input).unwrap(),
        json!({"city": "simulated"})
    );
    assert_eq!(
        events[events.len() - 2].data["delta"]["stop_reason"],
        "tool_use"
    );

    let id = start.data["content_block"]["id"].clone();
    let follow = json!({"model": "massgen", "max_tokens": 1024, "tools": tools, "messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "…", "signature": ""},
            {"type": "tool_use", "id": id, "name": "get_weather", "input": {"city": "simulated"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "18C and sunny"}]}
    ]});
    let message: Value = messages(&s.server.url, "k", &follow)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(message["stop_reason"], "end_turn");
    let text = message["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "text")
        .unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.contains("18C and sunny"), "{text}");
}

#[tokio::test]
async fn stop_sequences_and_max_tokens_bound_the_answer() {
    let s = setup(&FAST, &[]);
    let mut body = ask("Why is the sky blue?");
    body["stop_sequences"] = json!(["final"]);
    let events = stream(&s.server.url, &body).await;
    check_stream_rules(&events);
    assert_eq!(deltas(&events, "text_delta", "text"), "[simulated ");
    let end = &events[events.len() - 2].data["delta"];
    assert_eq!(
        (end["stop_reason"].as_str(), end["stop_sequence"].as_str()),
        (Some("stop_sequence"), Some("final"))
    );

    let mut body = ask("Why is the sky blue?");
    body["max_tokens"] = json!(2);
    let message: Value = messages(&s.server.url, "k", &body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(message["stop_reason"], "max_tokens");
    assert_eq!(message["content"][1]["text"], "[simulat");

    let count: Value = client()
        .post(format!("{}/v1/messages/count_tokens", s.server.url))
        .json(&json!({"model": "massgen", "messages": [{"role": "user", "content": "12345678"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(count, json!({"input_tokens": 2}));
}

/// Anthropic's error body, with `x-should-retry` set.
async fn expect_error(r: reqwest::Response, status: u16, kind: &str) -> Value {
    assert_eq!(r.status().as_u16(), status);
    assert!(r.headers().contains_key("x-should-retry"));
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], kind, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
    assert!(body["request_id"].is_string());
    body
}

#[tokio::test]
async fn every_error_on_this_door_is_anthropic_shaped_whichever_layer_made_it() {
    let s = setup(
        &FAST,
        &[
            "--max-body-bytes",
            "4000",
            "--rate-limit-per-minute",
            "60",
            "--rate-limit-burst",
            "12",
        ],
    );
    let url = &s.server.url;
    let no_max = json!({"model": "massgen", "messages": [{"role": "user", "content": "x"}]});
    let e = expect_error(
        messages(url, "k", &no_max).await,
        400,
        "invalid_request_error",
    )
    .await;
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens")
    );
    let r = client()
        .post(format!("{url}/v1/messages"))
        .body("{nope")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-should-retry"], "false");
    expect_error(r, 400, "invalid_request_error").await;
    expect_error(
        messages(url, "k", &ask(&"x".repeat(5000))).await,
        413,
        "request_too_large",
    )
    .await;
    let mut unknown = ask("x");
    unknown["model"] = json!("massgen/nope");
    expect_error(messages(url, "k", &unknown).await, 404, "not_found_error").await;
    let r = client()
        .post(format!("{url}/v1/messages/nope"))
        .json(&ask("x"))
        .send()
        .await
        .unwrap();
    expect_error(r, 404, "not_found_error").await;
    let r = client()
        .get(format!("{url}/v1/messages"))
        .send()
        .await
        .unwrap();
    expect_error(r, 405, "invalid_request_error").await;
    // Other doors keep OpenAI's shape.
    let r = client()
        .post(format!("{url}/v1/nope"))
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_found");
    // The rate limit (a layer in front of the door) speaks Anthropic here too.
    let mut limited = None;
    for _ in 0..20 {
        let r = client()
            .post(format!("{url}/v1/messages/count_tokens"))
            .json(&ask("x"))
            .send()
            .await
            .unwrap();
        if r.status() == 429 {
            limited = Some(r);
            break;
        }
    }
    let r = limited.expect("rate limited within 20 requests");
    assert_eq!(r.headers()["x-should-retry"], "true");
    assert!(r.headers().contains_key("retry-after"));
    expect_error(r, 429, "rate_limit_error").await;
}

#[tokio::test]
async fn keys_come_as_x_api_key_or_bearer_and_a_wrong_one_is_an_authentication_error() {
    let mock = crate::support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let team = write(dir.path(), "team.yaml", &panel_yaml(&mock.url, &FAST, ""));
    let server = crate::support::serve_with_keys(
        &[std::ffi::OsStr::new("--config"), team.as_os_str()],
        "sk-right",
    );
    let url = &server.url;
    expect_error(
        messages(url, "sk-wrong", &ask("x")).await,
        401,
        "authentication_error",
    )
    .await;
    let ok = messages(url, "sk-right", &ask("x")).await;
    assert_eq!(ok.status(), 200);
    let bearer = client()
        .post(format!("{url}/v1/messages"))
        .bearer_auth("sk-right")
        .header("anthropic-version", "2026-10-21")
        .json(&ask("x"))
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), 200);
    // Claude Code's connectivity probe.
    let head = client().head(format!("{url}/")).send().await.unwrap();
    assert!(head.status().is_success());
}

#[tokio::test]
async fn claude_model_names_go_to_the_configured_panel() {
    let s = setup(&FAST, &["--messages-default-panel", "solo"]);
    let mut body = ask("Hi");
    body["model"] = json!("claude-opus-4-8");
    let r = messages(&s.server.url, "k", &body).await;
    let sid = r.headers()["x-massgen-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let message: Value = r.json().await.unwrap();
    assert_eq!(message["model"], "claude-opus-4-8");
    let record: Value = get_json(&format!("{}/v1/sessions/{sid}", s.server.url)).await;
    assert_eq!(
        (record["panel"].as_str(), record["model"].as_str()),
        (Some("solo"), Some("claude-opus-4-8"))
    );
    // `massgen` still means the default config.
    let r = messages(&s.server.url, "k", &ask("Hi")).await;
    let sid = r.headers()["x-massgen-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let record: Value = get_json(&format!("{}/v1/sessions/{sid}", s.server.url)).await;
    assert_eq!(record["panel"], "team");
}

#[tokio::test]
async fn quiet_deliberations_ping_and_a_disconnect_cancels_every_call() {
    let s = setup(
        &["k1:ttft_ms=2500,token_ms=1", "k2:ttft_ms=2600,token_ms=1"],
        &["--keepalive-seconds", "1"],
    );
    let events = stream(&s.server.url, &ask("Hi")).await;
    check_stream_rules(&events);
    assert!(events.iter().filter(|e| e.data["type"] == "ping").count() >= 2);

    let slow = setup(&["s1:ttft_ms=20000", "s2:ttft_ms=20000"], &[]);
    let mut response = messages(&slow.server.url, "k", &streamed(ask("Hi"))).await;
    let first = tokio::time::timeout(Duration::from_secs(5), response.chunk())
        .await
        .expect("first event in time")
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).starts_with("event: message_start"));
    wait_for(&slow, |s| s["active"] == 2).await;
    drop(response);
    wait_for(&slow, |s| s["active"] == 0 && s["cancelled"] == 2).await;
}

#[tokio::test]
async fn a_failure_after_the_stream_started_is_an_error_event() {
    let s = setup(&["bad:fault=500", "bad2:fault=500"], &[]);
    let events = stream(&s.server.url, &ask("Hi")).await;
    let last = &events.last().unwrap().data;
    assert_eq!(events.last().unwrap().event, "error");
    assert_eq!(last["error"]["type"], "api_error");
    assert!(last["error"]["message"].as_str().unwrap().contains("agent"));
}
