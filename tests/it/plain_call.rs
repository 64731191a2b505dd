//! A panel of one is a plain call (issue 37; docs/protocol.md, "A panel of one"): on every
//! door, the request reaches the upstream as the client's own call to that model (its
//! turns, system text, tools, `tool_choice`, bounds and sampling, no coordination prompt
//! or workflow tool, nothing added to its input), and the model's text comes back as the
//! answer as it streams. The real binary over the recording simulator.

use serde_json::{Value, json};

use crate::support::recording::{self, Seen};
use crate::support::{self, parse_named_sse, parse_sse, post};

/// A server whose default panel is one agent on the recording simulator at `sim`.
fn one_agent(sim: &str, dir: &std::path::Path) -> support::Proc {
    let panel = support::panel_yaml(sim, &["solo:ttft_ms=5,token_ms=1,words=12"], "");
    let config = support::write(dir, "one.yaml", &panel);
    support::serve(&[
        "--config",
        config.to_str().unwrap(),
        "--allow-request-sampling",
    ])
}

/// The conversation every door sends, in its own shape: a system text, an earlier turn,
/// the question, a tool, its choice, a token bound, a stop and a temperature.
fn request(door: &str) -> Value {
    let tool_params = json!({"type": "object", "properties": {"x": {"type": "integer"}}});
    match door {
        "/v1/chat/completions" => json!({
            "model": "massgen", "stream": true, "temperature": 0.3, "max_tokens": 50,
            "stop": ["END"], "tool_choice": "auto",
            "tools": [{"type": "function", "function": {"name": "calc", "description": "Adds.", "parameters": tool_params}}],
            "messages": [
                {"role": "system", "content": "Be terse."},
                {"role": "user", "content": "What is 1+1?"},
                {"role": "assistant", "content": "Two."},
                {"role": "user", "content": "What is 2+2?"}
            ]
        }),
        "/v1/responses" => json!({
            "model": "massgen", "stream": true, "temperature": 0.3, "max_output_tokens": 50,
            "instructions": "Be terse.", "tool_choice": "auto",
            "tools": [{"type": "function", "name": "calc", "description": "Adds.", "parameters": tool_params}],
            "input": [
                {"role": "user", "content": "What is 1+1?"},
                {"role": "assistant", "content": "Two."},
                {"role": "user", "content": "What is 2+2?"}
            ]
        }),
        _ => json!({
            "model": "massgen", "stream": true, "temperature": 0.3, "max_tokens": 50,
            "stop_sequences": ["END"], "system": "Be terse.", "tool_choice": {"type": "auto"},
            "tools": [{"name": "calc", "description": "Adds.", "input_schema": tool_params}],
            "messages": [
                {"role": "user", "content": "What is 1+1?"},
                {"role": "assistant", "content": "Two."},
                {"role": "user", "content": "What is 2+2?"}
            ]
        }),
    }
}

/// What the door streamed as the answer's text.
fn answer_text(door: &str, raw: &str) -> String {
    match door {
        "/v1/chat/completions" => parse_sse(raw).content(),
        "/v1/responses" => parse_named_sse(raw)
            .0
            .iter()
            .filter(|e| e.event == "response.output_text.delta")
            .filter_map(|e| e.data["delta"].as_str())
            .collect(),
        _ => parse_named_sse(raw)
            .0
            .iter()
            .filter(|e| e.data["delta"]["type"] == "text_delta")
            .filter_map(|e| e.data["delta"]["text"].as_str())
            .collect(),
    }
}

fn only_call(seen: &Seen) -> Value {
    let calls = recording::take(seen);
    assert_eq!(calls.len(), 1, "one upstream call: {calls:?}");
    calls.into_iter().next().unwrap()
}

#[tokio::test]
async fn a_panel_of_one_is_the_clients_own_call_on_every_door() {
    let (sim, seen, _stop) = recording::serve().await;
    let dir = tempfile::tempdir().unwrap();
    let server = one_agent(&sim, dir.path());
    for door in ["/v1/chat/completions", "/v1/responses", "/v1/messages"] {
        let response = post(&server.url, door, None, &request(door)).await;
        assert_eq!(response.status(), 200, "{door}");
        let raw = response.text().await.unwrap();
        let text = answer_text(door, &raw);
        assert!(text.starts_with("[simulated"), "{door}: {text:?} in {raw}");
        let call = only_call(&seen);
        let messages: Vec<(String, String)> = call["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap().to_string(),
                    m["content"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        let expected: Vec<(String, String)> = [
            ("system", "Be terse."),
            ("user", "What is 1+1?"),
            ("assistant", "Two."),
            ("user", "What is 2+2?"),
        ]
        .iter()
        .map(|(r, c)| (r.to_string(), c.to_string()))
        .collect();
        assert_eq!(messages, expected, "{door}: {call}");
        let tools: Vec<&str> = call["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(tools, ["calc"], "{door}: no workflow tool");
        assert_eq!(call["tool_choice"], "auto", "{door}");
        assert_eq!(call["temperature"], 0.3, "{door}");
        assert_eq!(call["max_tokens"], 50, "{door}");
        if door != "/v1/responses" {
            assert_eq!(call["stop"], json!(["END"]), "{door}");
        }
    }
    // Nothing was added to the client's input: the simulator counted the client's words.
    let stats = support::mock_stats_at(&sim).await;
    let per_call = stats["prompt_tokens"].as_u64().unwrap() / 3;
    assert!(per_call < 40, "{per_call} prompt tokens a call: {stats}");
}

/// A client that does not stream gets an upstream call that does not stream (as it would
/// have made itself), and a prefilled assistant turn stays after the question.
#[tokio::test]
async fn a_panel_of_one_keeps_the_clients_stream_flag_and_turn_order() {
    let (sim, seen, _stop) = recording::serve().await;
    let dir = tempfile::tempdir().unwrap();
    let server = one_agent(&sim, dir.path());
    let mut chat = request("/v1/chat/completions");
    chat["stream"] = json!(false);
    let response = post(&server.url, "/v1/chat/completions", None, &chat).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.starts_with("[simulated"), "{body}");
    let call = only_call(&seen);
    assert!(call.get("stream").is_none(), "{call}");
    assert!(call.get("stream_options").is_none(), "{call}");
    assert!(
        body["usage"]["prompt_tokens"].as_u64().unwrap() > 0,
        "{body}"
    );

    let prefill = json!({
        "model": "massgen", "max_tokens": 50,
        "messages": [
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "The colour is"}
        ]
    });
    let response = post(&server.url, "/v1/messages", None, &prefill).await;
    assert_eq!(response.status(), 200);
    let call = only_call(&seen);
    assert!(call.get("stream").is_none(), "{call}");
    let turns: Vec<(&str, &str)> = call["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(
        turns,
        [("user", "Name a colour."), ("assistant", "The colour is")]
    );
}

/// A client that gives up on a plain call it did not stream stops the upstream call: a
/// whole call sends nothing out until it ends, so it must notice the reader leaving, not
/// its next event (before, the upstream call ran to its end, up to 20 s here).
#[tokio::test]
async fn a_client_that_leaves_a_whole_plain_call_stops_its_upstream_call() {
    let setup = support::Setup::with_panel(
        |url| support::panel_yaml(url, &["slow:ttft_ms=20000,token_ms=1,words=5"], ""),
        &[],
    );
    let body = json!({"model": "massgen", "messages": [{"role": "user", "content": "Hi"}]});
    let gave_up = reqwest::Client::builder()
        .timeout(std::time::Duration::from_millis(800))
        .build()
        .unwrap()
        .post(format!("{}/v1/chat/completions", setup.server.url))
        .json(&body)
        .send()
        .await;
    assert!(gave_up.is_err(), "the client gave up before the answer");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let stats = loop {
        let stats = support::mock_stats(&setup.mock).await;
        if stats["requests"] == 1 && stats["active"] == 0 {
            break stats;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the upstream call still runs: {stats}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(stats["completed"], 0, "{stats}");
    assert_eq!(stats["cancelled"], 1, "{stats}");
}
