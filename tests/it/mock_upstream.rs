//! Black-box tests of the simulated upstream over real loopback HTTP.

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::support::simulator_in_process;

struct Sim {
    base: String,
    client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start() -> Sim {
    let (base, stop, task) = simulator_in_process().await;
    Sim {
        base,
        client: reqwest::Client::new(),
        stop: Some(stop),
        task,
    }
}

const QUESTION: &str = "What causes the seasons on Earth?";

fn coordination_prompt(answers: &[(&str, &str)]) -> String {
    let mut s = format!("<original_message>\n{QUESTION}\n</original_message>\n");
    for (label, text) in answers {
        s.push_str(&format!("<answer label=\"{label}\">\n{text}\n</answer>\n"));
    }
    s
}

fn new_answer_tool() -> Value {
    json!({"type":"function","function":{"name":"new_answer","parameters":
        {"type":"object","properties":{"content":{"type":"string"}},"required":["content"]}}})
}

fn vote_tool(labels: &[&str]) -> Value {
    json!({"type":"function","function":{"name":"vote","parameters":{"type":"object",
        "properties":{"agent_id":{"type":"string","enum":labels},"reason":{"type":"string"}},
        "required":["agent_id","reason"]}}})
}

fn body(model: &str, user: &str, tools: Option<Value>, stream: bool, usage: bool) -> Value {
    let mut b = json!({"model": model, "stream": stream,
        "messages": [{"role":"system","content":"You are one of several agents."},
                     {"role":"user","content": user}]});
    if let Some(t) = tools {
        b["tools"] = t;
    }
    if usage {
        b["stream_options"] = json!({"include_usage": true});
    }
    b
}

fn expected_prompt_tokens(b: &Value) -> u64 {
    let chars: usize = b["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().chars().count())
        .sum();
    chars.div_ceil(4) as u64
}

impl Sim {
    async fn post(&self, b: &Value) -> reqwest::Response {
        self.client
            .post(format!("{}/v1/chat/completions", self.base))
            .json(b)
            .send()
            .await
            .unwrap()
    }

    async fn stats(&self) -> Value {
        let r = self.client.get(format!("{}/mock/stats", self.base)).send();
        r.await.unwrap().json().await.unwrap()
    }
}

/// The `data:` payloads of an SSE body, in order.
fn events(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            assert!(e.starts_with("data: "), "not a data event: {e:?}");
            e["data: ".len()..].to_string()
        })
        .collect()
}

fn json_events(events: &[String]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect()
}

async fn stream_events(sim: &Sim, b: &Value) -> (reqwest::header::HeaderMap, Vec<String>) {
    let r = sim.post(b).await;
    assert_eq!(r.status(), 200);
    let headers = r.headers().clone();
    (headers, events(&r.text().await.unwrap()))
}

/// Reassembles streamed tool calls into (name, parsed arguments), checking OpenAI's shape.
fn tool_calls(chunks: &[Value]) -> Vec<(String, Value)> {
    let mut calls: Vec<(String, String)> = Vec::new();
    for c in chunks {
        for tc in c["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let index = tc["index"].as_u64().unwrap() as usize;
            if let Some(id) = tc.get("id") {
                assert!(id.as_str().unwrap().starts_with("call_"));
                assert_eq!(tc["type"], "function");
                assert_eq!(tc["function"]["arguments"], "");
                assert_eq!(index, calls.len(), "indexes are contiguous, in order");
                calls.push((
                    tc["function"]["name"].as_str().unwrap().into(),
                    String::new(),
                ));
            } else {
                assert_eq!(
                    tc.as_object().unwrap().len(),
                    2,
                    "only index+function: {tc}"
                );
                assert!(tc["function"].get("name").is_none());
                let frag = tc["function"]["arguments"].as_str().unwrap();
                calls[index].1.push_str(frag);
            }
        }
    }
    calls
        .into_iter()
        .map(|(n, a)| (n, serde_json::from_str(&a).unwrap()))
        .collect()
}

fn jaccard(a: &str, b: &str) -> f64 {
    let set =
        |s: &str| -> HashSet<String> { s.split_whitespace().map(str::to_lowercase).collect() };
    let (a, b) = (set(a), set(b));
    a.intersection(&b).count() as f64 / a.union(&b).count() as f64
}

const FAST: &str = "ttft_ms=0,token_ms=0";

#[tokio::test]
async fn text_stream_has_openai_shape_and_exact_usage() {
    let sim = start().await;
    let b = body(&format!("sim-a:{FAST}"), QUESTION, None, true, true);
    let (headers, ev) = stream_events(&sim, &b).await;
    assert_eq!(headers["x-massgen-simulated"], "true");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let chunks = json_events(&ev);
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["id"], chunks[0]["id"]);
        assert_eq!(c["created"], chunks[0]["created"]);
        assert_eq!(c["model"], format!("sim-a:{FAST}"));
    }
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role":"assistant","content":""})
    );
    let n = chunks.len();
    let tokens: Vec<&str> = chunks[1..n - 2]
        .iter()
        .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap())
        .collect();
    let text = tokens.concat();
    assert!(text.starts_with("[simulated final answer] "), "{text}");
    assert!(text.contains("seasons on Earth?"), "{text}");
    assert_eq!(text.split_whitespace().count(), 30);
    assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[n - 2]["choices"][0]["delta"], json!({}));
    let usage = &chunks[n - 1];
    assert_eq!(usage["choices"], json!([]));
    let p = expected_prompt_tokens(&b);
    assert_eq!(usage["usage"]["prompt_tokens"], p);
    assert_eq!(usage["usage"]["completion_tokens"], tokens.len());
    assert_eq!(usage["usage"]["total_tokens"], p + tokens.len() as u64);

    // No usage chunk without include_usage, nor with usage=off.
    for (model, include) in [
        (format!("sim-a:{FAST}"), false),
        (format!("sim-a:{FAST},usage=off"), true),
    ] {
        let (_, ev) = stream_events(&sim, &body(&model, QUESTION, None, true, include)).await;
        let chunks = json_events(&ev);
        assert!(chunks.iter().all(|c| c.get("usage").is_none()), "{model}");
        assert_eq!(
            chunks.last().unwrap()["choices"][0]["finish_reason"],
            "stop"
        );
    }
}

#[tokio::test]
async fn new_answer_is_streamed_as_an_openai_tool_call() {
    let sim = start().await;
    let b = body(
        &format!("sim-a:{FAST}"),
        &coordination_prompt(&[]),
        Some(json!([new_answer_tool()])),
        true,
        true,
    );
    let (_, ev) = stream_events(&sim, &b).await;
    let chunks = json_events(&ev);
    let first = &chunks[0]["choices"][0]["delta"];
    assert_eq!(first["role"], "assistant");
    assert_eq!(first["tool_calls"][0]["function"]["name"], "new_answer");
    let fragments = chunks
        .iter()
        .filter(|c| {
            c["choices"][0]["delta"]["tool_calls"][0]
                .get("id")
                .is_none()
                && c["choices"][0]["delta"].get("tool_calls").is_some()
        })
        .count();
    assert!(fragments > 5, "arguments come in several pieces");
    let calls = tool_calls(&chunks);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, "new_answer");
    let content = calls[0].1["content"].as_str().unwrap();
    assert!(
        content.starts_with("[simulated] ") && content.contains("seasons"),
        "{content}"
    );
    let n = chunks.len();
    assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(chunks[n - 1]["usage"]["completion_tokens"], fragments);
}

#[tokio::test]
async fn vote_follows_the_option_and_the_offered_enum() {
    let sim = start().await;
    let prompt = coordination_prompt(&[("agent1", "one"), ("agent3", "three")]);
    let tools = json!([new_answer_tool(), vote_tool(&["agent1", "agent3"])]);
    for (opt, want) in [
        ("", "agent1"),
        (",vote=last", "agent3"),
        (",vote=agent3", "agent3"),
        (",vote=agent2", "agent1"),
    ] {
        let b = body(
            &format!("sim-v:{FAST}{opt}"),
            &prompt,
            Some(tools.clone()),
            true,
            false,
        );
        let calls = tool_calls(&json_events(&stream_events(&sim, &b).await.1));
        assert_eq!(calls.len(), 1, "{opt}");
        assert_eq!(calls[0].0, "vote");
        assert_eq!(
            calls[0].1,
            json!({"agent_id": want, "reason": "[simulated] clearest answer"}),
            "{opt}"
        );
    }
    let b = body(
        &format!("sim-v:{FAST},policy=double_vote"),
        &prompt,
        Some(tools.clone()),
        true,
        false,
    );
    let calls = tool_calls(&json_events(&stream_events(&sim, &b).await.1));
    assert_eq!(
        calls.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
        ["vote", "vote"]
    );
    let b = body(
        &format!("sim-v:{FAST},policy=bad_vote"),
        &prompt,
        Some(tools.clone()),
        true,
        false,
    );
    let calls = tool_calls(&json_events(&stream_events(&sim, &b).await.1));
    assert_eq!(calls[0].1["agent_id"], "agent99");
    let b = body(
        &format!("sim-v:{FAST},policy=copy"),
        &prompt,
        Some(tools.clone()),
        true,
        false,
    );
    let calls = tool_calls(&json_events(&stream_events(&sim, &b).await.1));
    assert_eq!(
        calls[0],
        ("new_answer".to_string(), json!({"content": "one"}))
    );
}

#[tokio::test]
async fn reasoning_comes_before_content() {
    let sim = start().await;
    let b = body(
        &format!("sim-r:{FAST},reasoning=on"),
        QUESTION,
        None,
        true,
        true,
    );
    let chunks = json_events(&stream_events(&sim, &b).await.1);
    let deltas: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0))
        .map(|c| &c["delta"])
        .collect();
    let first_content = deltas
        .iter()
        .position(|d| d["content"].as_str().is_some_and(|s| !s.is_empty()))
        .unwrap();
    let reasoning: String = deltas
        .iter()
        .filter_map(|d| d["reasoning_content"].as_str())
        .collect();
    assert!(
        reasoning.starts_with("[simulated reasoning]"),
        "{reasoning}"
    );
    assert!(
        deltas[..first_content]
            .iter()
            .any(|d| d.get("reasoning_content").is_some())
    );
    assert!(
        deltas[first_content..]
            .iter()
            .all(|d| d.get("reasoning_content").is_none())
    );
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(
        usage["completion_tokens_details"]["reasoning_tokens"],
        reasoning.split_whitespace().count()
    );
}

#[tokio::test]
async fn non_stream_completion_has_message_and_usage() {
    let sim = start().await;
    let b = body(&format!("sim-a:{FAST}"), QUESTION, None, false, false);
    let r = sim.post(&b).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-massgen-simulated"], "true");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.starts_with("[simulated final answer] "));
    assert_eq!(v["usage"]["completion_tokens"], 30);
    assert_eq!(v["usage"]["prompt_tokens"], expected_prompt_tokens(&b));

    let tools = json!([new_answer_tool(), vote_tool(&["agent2"])]);
    let b = body(
        &format!("sim-a:{FAST}"),
        &coordination_prompt(&[("agent2", "x")]),
        Some(tools),
        false,
        false,
    );
    let v: Value = sim.post(&b).await.json().await.unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "vote");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args["agent_id"], "agent2");
}

#[tokio::test]
async fn pre_stream_faults_answer_with_openai_errors() {
    let sim = start().await;
    let r = sim
        .post(&body("sim-f:fault=429", QUESTION, None, true, false))
        .await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(r.headers()["x-massgen-simulated"], "true");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("[simulated]")
    );

    let r = sim
        .post(&body(
            "sim-f:fault=429,retry_after_ms=250",
            QUESTION,
            None,
            true,
            false,
        ))
        .await;
    assert_eq!(r.headers()["retry-after-ms"], "250");
    assert!(r.headers().get("retry-after").is_none());

    let r = sim
        .post(&body("sim-f:fault=500", QUESTION, None, false, false))
        .await;
    assert_eq!(r.status(), 500);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["type"],
        "server_error"
    );
    let r = sim
        .post(&body(
            "sim-f:fault=503,retry_after=2",
            QUESTION,
            None,
            true,
            false,
        ))
        .await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "2");
    let r = sim
        .post(&body("sim-f:fault=context", QUESTION, None, true, false))
        .await;
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        "context_length_exceeded"
    );
}

#[tokio::test]
async fn fault_times_faults_only_the_first_requests() {
    let sim = start().await;
    let b = body(
        &format!("sim-t:fault=500,fault_times=2,{FAST}"),
        QUESTION,
        None,
        false,
        false,
    );
    assert_eq!(sim.post(&b).await.status(), 500);
    assert_eq!(sim.post(&b).await.status(), 500);
    assert_eq!(sim.post(&b).await.status(), 200);
    let s = sim.stats().await;
    assert_eq!(s["by_model"]["sim-t"]["faulted"], 2);
    assert_eq!(s["by_model"]["sim-t"]["requests"], 3);
    // Reset restarts the count.
    sim.client
        .post(format!("{}/mock/reset", sim.base))
        .send()
        .await
        .unwrap();
    assert_eq!(sim.post(&b).await.status(), 500);
    assert_eq!(sim.stats().await["requests"], 1);
}

#[tokio::test]
async fn mid_stream_faults() {
    let sim = start().await;
    let drop = stream_events(
        &sim,
        &body(
            &format!("sim-d:fault=drop,{FAST}"),
            QUESTION,
            None,
            true,
            true,
        ),
    )
    .await
    .1;
    assert!(
        drop.len() > 5 && drop.len() < 25,
        "about half: {}",
        drop.len()
    );
    assert!(!drop.contains(&"[DONE]".to_string()));
    assert!(
        json_events(&drop)
            .iter()
            .all(|c| c["choices"][0]["finish_reason"].is_null())
    );

    let bad = stream_events(
        &sim,
        &body(
            &format!("sim-d:fault=malformed,{FAST}"),
            QUESTION,
            None,
            true,
            false,
        ),
    )
    .await
    .1;
    assert!(bad.contains(&"{not json".to_string()));
    assert_eq!(bad.last().unwrap(), "[DONE]");

    let err = stream_events(
        &sim,
        &body(
            &format!("sim-d:fault=error_chunk,{FAST}"),
            QUESTION,
            None,
            true,
            false,
        ),
    )
    .await
    .1;
    assert_eq!(err.last().unwrap(), "[DONE]");
    let e: Value = serde_json::from_str(&err[err.len() - 2]).unwrap();
    assert!(e.get("choices").is_none());
    for key in ["message", "type", "param", "code"] {
        assert!(e["error"].get(key).is_some(), "{key}");
    }
    assert!(
        json_events(&err)
            .iter()
            .all(|c| c["choices"][0]["finish_reason"].is_null())
    );
}

#[tokio::test]
async fn hang_sends_headers_then_nothing() {
    let sim = start().await;
    let r = sim
        .post(&body("sim-h:fault=hang", QUESTION, None, true, false))
        .await;
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut s = r.bytes_stream();
    let next = tokio::time::timeout(Duration::from_millis(300), s.next()).await;
    assert!(next.is_err(), "no bytes may arrive: {next:?}");

    let r = sim
        .client
        .post(format!("{}/v1/chat/completions", sim.base))
        .json(&body(
            "sim-h:fault=hang_headers",
            QUESTION,
            None,
            true,
            false,
        ))
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(r.unwrap_err().is_timeout());
    drop(s);
    let mut stats = Value::Null;
    for _ in 0..40 {
        stats = sim.stats().await;
        if stats["active"] == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        (stats["cancelled"].as_u64(), stats["faulted"].as_u64()),
        (Some(2), Some(2)),
        "{stats}"
    );
}

#[tokio::test]
async fn invalid_requests_get_400_in_openai_format() {
    let sim = start().await;
    let r = sim
        .post(&body("sim:colour=red", QUESTION, None, true, false))
        .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["param"], "model");
    assert!(v["error"]["message"].as_str().unwrap().contains("`colour`"));
    let r = sim.post(&json!({"model": "sim"})).await;
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["param"],
        "messages"
    );
}

#[tokio::test]
async fn client_disconnect_mid_stream_counts_as_cancelled() {
    let sim = start().await;
    let b = body(
        "sim-c:ttft_ms=0,token_ms=50,words=200",
        QUESTION,
        None,
        true,
        false,
    );
    let r = sim.post(&b).await;
    let mut s = r.bytes_stream();
    s.next().await.unwrap().unwrap();
    assert_eq!(sim.stats().await["active"], 1);
    drop(s);
    let mut stats = Value::Null;
    for _ in 0..40 {
        stats = sim.stats().await;
        if stats["cancelled"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(stats["cancelled"], 1, "{stats}");
    assert_eq!(stats["active"], 0);
    assert_eq!(stats["completed"], 0);
    assert_eq!(stats["by_model"]["sim-c"]["cancelled"], 1);

    // A stream read to the end is completed, not cancelled.
    stream_events(
        &sim,
        &body(&format!("sim-c:{FAST}"), QUESTION, None, true, false),
    )
    .await;
    let stats = sim.stats().await;
    assert_eq!(
        (stats["completed"].as_u64(), stats["cancelled"].as_u64()),
        (Some(1), Some(1))
    );
}

#[tokio::test]
async fn answers_of_different_models_are_dissimilar() {
    let sim = start().await;
    let prompt = coordination_prompt(&[]);
    let mut answers = Vec::new();
    for name in ["sim-a", "sim-b", "sim-c", "gpt-sim", "claude-sim"] {
        let b = body(
            &format!("{name}:{FAST}"),
            &prompt,
            Some(json!([new_answer_tool()])),
            false,
            false,
        );
        let v: Value = sim.post(&b).await.json().await.unwrap();
        let args = v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap();
        let content: Value = serde_json::from_str(args).unwrap();
        answers.push(content["content"].as_str().unwrap().to_string());
    }
    for (i, a) in answers.iter().enumerate() {
        for b in &answers[i + 1..] {
            let j = jaccard(a, b);
            assert!(j < 0.5, "{j}: {a} | {b}");
        }
    }
}

#[tokio::test]
async fn models_health_and_graceful_shutdown_with_a_hanging_stream() {
    let mut sim = start().await;
    let models: Value = sim
        .client
        .get(format!("{}/v1/models", sim.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["object"], "list");
    assert!(!models["data"].as_array().unwrap().is_empty());
    let health = sim
        .client
        .get(format!("{}/health", sim.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    let hanging = sim
        .post(&body("sim-h:fault=hang", QUESTION, None, true, false))
        .await;
    sim.stop.take().unwrap().send(()).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(2), &mut sim.task).await;
    assert!(matches!(ended, Ok(Ok(Ok(())))), "{ended:?}");
    drop(hanging);
}

#[tokio::test(start_paused = true)]
async fn delays_follow_ttft_and_token_ms() {
    use tower::ServiceExt;
    let b = body(
        "sim-slow:ttft_ms=1000,token_ms=100,words=10",
        QUESTION,
        None,
        false,
        false,
    );
    let request = axum::http::Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(b.to_string()))
        .unwrap();
    let started = tokio::time::Instant::now();
    let response = massgen_simulator::router().oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    // The first of 11 deltas (role + 10 words) waits ttft, each later one token_ms.
    assert_eq!(started.elapsed(), Duration::from_millis(1000 + 10 * 100));
}
