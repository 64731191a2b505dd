//! The Responses door (`/v1/responses`) black-box: the real binary on port 0, its agents
//! on the simulator, over loopback. Event order and shapes (against OpenAI's recorded
//! streams when the shared fixtures are there), function calls decided by the panel,
//! `previous_response_id` and `store: false`, errors, keep-alive events and cancellation.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    CLIENT_TOOL, FAST, Named, Setup, client, get_json, keys, mock_stats, panel_yaml,
    parse_named_sse, post, shared_fixture, write,
};

fn setup(models: &[&str], extra: &[&str]) -> Setup {
    Setup::start(|mock_url, dir| {
        let team = write(dir, "team.yaml", &panel_yaml(mock_url, models, ""));
        let mut flags = vec!["--config".to_string(), team.display().to_string()];
        flags.extend(extra.iter().map(|f| f.to_string()));
        flags
    })
}

fn weather_tool() -> Value {
    json!({"type": "function", "name": "get_weather", "description": "Current weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}, "strict": true})
}

async fn stream(url: &str, body: &Value) -> Vec<Named> {
    let response = post(url, "/v1/responses", None, body).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    parse_named_sse(&response.text().await.unwrap()).0
}

/// What every Responses stream must satisfy (the SDK accumulator's and Codex's rules).
fn check_stream_rules(events: &[Named]) {
    assert_eq!(events[0].data["type"], "response.created");
    let id = events[0].data["response"]["id"].clone();
    let mut added = BTreeSet::new();
    let mut done = BTreeSet::new();
    for (n, e) in events.iter().enumerate() {
        assert_eq!(e.event, e.data["type"], "event line = type");
        assert_eq!(
            e.data["sequence_number"], n as u64,
            "sequence numbers count up"
        );
        if let Some(r) = e.data.get("response") {
            assert_eq!(r["id"], id, "one response id throughout");
        }
        let index = e.data["output_index"].as_u64();
        match e.data["type"].as_str().unwrap() {
            "response.output_item.added" => assert!(added.insert(index.unwrap()), "index reused"),
            "response.output_item.done" => {
                assert!(added.contains(&index.unwrap()));
                done.insert(index.unwrap());
            }
            kind if kind.contains("delta") || kind.ends_with("part.added") => {
                let index = index.unwrap();
                assert!(
                    added.contains(&index) && !done.contains(&index),
                    "{kind} outside its item"
                );
            }
            _ => {}
        }
    }
    assert_eq!(added, done, "every added item is done");
    let last = &events.last().unwrap().data;
    assert!(matches!(
        last["type"].as_str(),
        Some("response.completed" | "response.incomplete" | "response.failed")
    ));
}

fn of_type<'a>(events: &'a [Named], kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e.data["type"] == kind)
        .map(|e| &e.data)
        .collect()
}

/// Keys OpenAI sends that describe its own serving (billing, sampling, caching, moderation)
/// and that a panel has no value for.
const OPENAI_ONLY: [&str; 9] = [
    "billing",
    "frequency_penalty",
    "presence_penalty",
    "moderation",
    "prompt_cache_key",
    "prompt_cache_retention",
    "safety_identifier",
    "service_tier",
    "top_logprobs",
];

fn assert_has_keys_of(ours: &Value, recorded: &Value, what: &str) {
    let missing: Vec<String> = keys(recorded)
        .difference(&keys(ours))
        .filter(|k| !OPENAI_ONLY.contains(&k.as_str()) && *k != "obfuscation" && *k != "phase")
        .cloned()
        .collect();
    assert!(missing.is_empty(), "{what}: missing {missing:?} in {ours}");
}

#[tokio::test]
async fn a_streamed_answer_has_the_recorded_event_order_and_shapes() {
    let s = setup(&FAST, &[]);
    let events = stream(
        &s.server.url,
        &json!({"model": "massgen", "stream": true,
        "input": "Why is the sky blue?", "instructions": "Answer briefly."}),
    )
    .await;
    check_stream_rules(&events);
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e.data["type"].as_str().unwrap())
        .collect();
    let first = |k: &str| {
        kinds
            .iter()
            .position(|x| *x == k)
            .unwrap_or_else(|| panic!("{k} missing: {kinds:?}"))
    };
    assert_eq!(&kinds[..2], ["response.created", "response.in_progress"]);
    // The deliberation first, as a reasoning summary, then the answer.
    assert!(first("response.reasoning_summary_text.delta") < first("response.output_text.delta"));
    let summary: String = of_type(&events, "response.reasoning_summary_text.delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(
        summary.contains("answered (agent") && summary.contains("voted for"),
        "{summary}"
    );
    let text: String = of_type(&events, "response.output_text.delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(text.starts_with("[simulated final answer]"), "{text}");
    let message_done = of_type(&events, "response.output_item.done")
        .into_iter()
        .find(|e| e["item"]["type"] == "message")
        .unwrap();
    assert_eq!(message_done["item"]["content"][0]["text"], text.as_str());
    let completed = &events.last().unwrap().data["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["instructions"], "Answer briefly.");
    let output = completed["output"].as_array().unwrap();
    assert_eq!(output[0]["type"], "reasoning");
    assert_eq!(output[0]["summary"][0]["text"], summary.as_str());
    assert_eq!(output[1]["content"][0]["text"], text.as_str());
    // Usage is the sum of every upstream call.
    let stats = mock_stats(&s.mock).await;
    assert_eq!(completed["usage"]["input_tokens"], stats["prompt_tokens"]);
    assert_eq!(
        completed["usage"]["output_tokens"],
        stats["completion_tokens"]
    );
    assert!(
        completed["massgen_metadata"]["winner"]["label"]
            .as_str()
            .unwrap()
            .starts_with("agent")
    );

    // Every key of OpenAI's recorded events and objects is there too.
    let Some(raw) = shared_fixture("openai-responses/stream_text.sse") else {
        return;
    };
    let (recorded, _) = parse_named_sse(&raw);
    for r in &recorded {
        let ours = events
            .iter()
            .find(|e| {
                e.data["type"] == r.data["type"] && e.data["item"]["type"] == r.data["item"]["type"]
            })
            .unwrap();
        assert_has_keys_of(&ours.data, &r.data, r.event.as_str());
        for field in ["response", "item", "part"] {
            if let Some(inner) = r.data.get(field) {
                assert_has_keys_of(&ours.data[field], inner, &format!("{} {field}", r.event));
            }
        }
    }
}

#[tokio::test]
async fn a_non_streamed_response_has_the_recorded_shape_and_is_stored() {
    let s = setup(&FAST, &[]);
    let response = post(
        &s.server.url,
        "/v1/responses",
        None,
        &json!({"input": [{"role": "user", "content": "Why is the sky blue?"}],
            "metadata": {"ticket": "T-1"}}),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["x-massgen-session-id"]
            .to_str()
            .unwrap()
            .starts_with("sess_")
    );
    let object: Value = response.json().await.unwrap();
    assert_eq!(object["object"], "response");
    assert_eq!(object["status"], "completed");
    assert_eq!(object["metadata"]["ticket"], "T-1");
    let output = object["output"].as_array().unwrap();
    assert_eq!(output[0]["type"], "reasoning");
    assert_eq!(output[1]["type"], "message");
    assert!(
        output[1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("[simulated final answer]")
    );
    let usage = &object["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap())
    );
    // GET returns the same object.
    let id = object["id"].as_str().unwrap();
    let got: Value = get_json(&format!("{}/v1/responses/{id}", s.server.url)).await;
    assert_eq!(got, object);
    // The record says which door.
    let sid = object["massgen_metadata"]["session_id"].as_str().unwrap();
    let record: Value = get_json(&format!("{}/v1/sessions/{sid}", s.server.url)).await;
    assert_eq!(record["door"], "responses");
    assert_eq!(record["metadata"]["ticket"], "T-1");

    let Some(raw) = shared_fixture("openai-responses/nonstream_text.json") else {
        return;
    };
    let recorded: Value = serde_json::from_str(&raw).unwrap();
    assert_has_keys_of(&object, &recorded, "response");
    assert_has_keys_of(&output[1], &recorded["output"][0], "message item");
    assert_has_keys_of(
        &output[1]["content"][0],
        &recorded["output"][0]["content"][0],
        "output_text",
    );
    assert_has_keys_of(usage, &recorded["usage"], "usage");
}

#[tokio::test]
async fn the_panel_calls_a_function_and_the_conversation_continues_by_id() {
    let s = setup(&CLIENT_TOOL, &[]);
    let events = stream(
        &s.server.url,
        &json!({"stream": true, "tools": [weather_tool()],
        "input": "What is the weather in Paris?"}),
    )
    .await;
    check_stream_rules(&events);
    let added = of_type(&events, "response.output_item.added")
        .into_iter()
        .find(|e| e["item"]["type"] == "function_call")
        .unwrap();
    assert_eq!(added["item"]["name"], "get_weather");
    assert_eq!(added["item"]["arguments"], "");
    let args: String = of_type(&events, "response.function_call_arguments.delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"city": "simulated"})
    );
    let completed = &events.last().unwrap().data["response"];
    let call = completed["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap()
        .clone();
    assert_eq!(call["arguments"], args.as_str());
    assert_eq!(call["call_id"], added["item"]["call_id"]);

    // The result goes back by reference to the stored response.
    let response = post(&s.server.url, "/v1/responses", None, &json!({
        "previous_response_id": completed["id"], "tools": [weather_tool()],
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "18C and sunny"}]
    })).await;
    assert_eq!(response.status(), 200);
    let object: Value = response.json().await.unwrap();
    assert_eq!(object["previous_response_id"], completed["id"]);
    let text = object["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "message")
        .unwrap()["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.contains("18C and sunny"), "{text}");
}

#[tokio::test]
async fn store_false_keeps_nothing_and_unknown_ids_are_errors() {
    let s = setup(&FAST, &[]);
    let object: Value = post(
        &s.server.url,
        "/v1/responses",
        None,
        &json!({"input": "Hi", "store": false}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(object["store"], false);
    let id = object["id"].as_str().unwrap();
    let missing = client()
        .get(format!("{}/v1/responses/{id}", s.server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(missing.headers()["x-should-retry"], "false");
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["code"], "response_not_found");
    let continued = post(
        &s.server.url,
        "/v1/responses",
        None,
        &json!({"input": "More", "previous_response_id": id}),
    )
    .await;
    assert_eq!(continued.status(), 400);
    let body: Value = continued.json().await.unwrap();
    assert_eq!(body["error"]["code"], "previous_response_not_found");
    assert_eq!(body["error"]["param"], "previous_response_id");
}

#[tokio::test]
async fn bad_requests_get_openai_errors_that_say_not_to_retry() {
    let s = setup(&FAST, &["--max-body-bytes", "4000"]);
    let url = &s.server.url;
    let cases = [
        (
            json!({"model": "massgen"}),
            400,
            "missing_required_parameter",
        ),
        (
            json!({"input": "x", "background": true}),
            400,
            "unsupported_parameter",
        ),
        (
            json!({"input": "x", "tools": [{"type": "file_search"}]}),
            400,
            "invalid_value",
        ),
        (
            json!({"input": "x", "tools": [{"type": "function", "name": "vote"}]}),
            400,
            "tool_name_collision",
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
            400,
            "invalid_message",
        ),
        (
            json!({"input": "x", "model": "massgen/nope"}),
            404,
            "model_not_found",
        ),
        (json!({"input": "x".repeat(5000)}), 413, "request_too_large"),
    ];
    for (body, status, code) in cases {
        let r = post(url, "/v1/responses", None, &body).await;
        assert_eq!(r.status().as_u16(), status, "{body}");
        assert_eq!(r.headers()["x-should-retry"], "false");
        let e: Value = r.json().await.unwrap();
        assert_eq!(e["error"]["code"], code, "{e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    // Codex's built-in provider first tries a WebSocket on GET: a plain refusal, not 101.
    let ws = client()
        .get(format!("{url}/v1/responses"))
        .header("upgrade", "websocket")
        .header("connection", "upgrade")
        .send()
        .await
        .unwrap();
    assert_eq!(ws.status(), 405);
}

#[tokio::test]
async fn an_upstream_failure_after_the_stream_started_is_an_error_then_response_failed() {
    let s = setup(&["bad:fault=500", "bad2:fault=500"], &[]);
    let events = stream(&s.server.url, &json!({"stream": true, "input": "Hi"})).await;
    check_stream_rules(&events);
    let n = events.len();
    assert_eq!(events[n - 2].data["type"], "error");
    assert_eq!(events[n - 2].data["error"]["code"], "upstream_failed");
    assert_eq!(events[n - 1].data["response"]["status"], "failed");
    assert_eq!(
        events[n - 1].data["response"]["error"]["code"],
        "upstream_failed"
    );
}

#[tokio::test]
async fn quiet_deliberations_send_in_progress_events_and_a_disconnect_cancels_every_call() {
    let s = setup(
        &["k1:ttft_ms=2500,token_ms=1", "k2:ttft_ms=2600,token_ms=1"],
        &["--keepalive-seconds", "1"],
    );
    let events = stream(
        &s.server.url,
        &json!({"stream": true, "input": "Hi",
        "massgen": {"deliberation": "off"}}),
    )
    .await;
    check_stream_rules(&events);
    // Real events (Codex's idle timer ignores comments), not only the first one.
    assert!(of_type(&events, "response.in_progress").len() >= 2);
    assert!(of_type(&events, "response.reasoning_summary_text.delta").is_empty());

    let slow = setup(&["s1:ttft_ms=20000", "s2:ttft_ms=20000"], &[]);
    let mut response = post(
        &slow.server.url,
        "/v1/responses",
        None,
        &json!({"stream": true, "input": "Hi"}),
    )
    .await;
    let first = tokio::time::timeout(Duration::from_secs(5), response.chunk())
        .await
        .expect("first event in time")
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&first).contains("response.created"));
    wait_for(&slow, |s| s["active"] == 2).await;
    drop(response);
    wait_for(&slow, |s| s["active"] == 0 && s["cancelled"] == 2).await;
}

/// Polls the simulator's stats (≤ 5 s) until `ok`.
pub async fn wait_for(s: &Setup, ok: impl Fn(&Value) -> bool) {
    let mut stats = Value::Null;
    for _ in 0..100 {
        stats = mock_stats(&s.mock).await;
        if ok(&stats) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("simulator never got there: {stats}");
}
