//! The Messages door's second turn, black-box: the real binary on a simulator served in
//! this process behind a layer that records every upstream body, so what the agents were
//! shown is checked as they received it. Thinking blocks come out signed (streamed and
//! not) and go back without reaching the agents; a tampered block, or one signed under
//! another `--reasoning-secret`, is a 400 naming its path, while a replica with the same
//! secret takes it (and a server without one drops what it cannot verify). Deliberation rendered as text (`<assistant_thinking>`, `<think>`) is
//! removed too. `message_start` carries the request's prompt as `count_tokens` counts it,
//! `message_delta` the session's totals.

use serde_json::{Value, json};

use crate::support::recording::{self, Seen};
use crate::support::{FAST, Named, Proc, client, panel_yaml, parse_named_sse, serve, write};

/// The recording simulator and the panel config that points at it.
struct Upstream {
    url: String,
    seen: Seen,
    config: String,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Upstream {
    async fn start() -> Self {
        let (url, seen, stop) = recording::serve().await;
        let dir = tempfile::tempdir().unwrap();
        let config = write(dir.path(), "team.yaml", &panel_yaml(&url, &FAST, ""));
        Self {
            url,
            seen,
            config: config.display().to_string(),
            _dir: dir,
            _stop: stop,
        }
    }

    /// A server on this panel whose thinking signatures use `secret` (without, a random
    /// key per process).
    async fn server(&self, secret: Option<&str>) -> Proc {
        let mut flags = vec!["--config".to_string(), self.config.clone()];
        if let Some(secret) = secret {
            flags.extend(["--reasoning-secret".to_string(), secret.to_string()]);
        }
        tokio::task::spawn_blocking(move || {
            serve(&flags.iter().map(String::as_str).collect::<Vec<_>>())
        })
        .await
        .unwrap()
    }

    /// The bodies recorded since the last call, as text.
    fn take(&self) -> Vec<String> {
        recording::take(&self.seen)
            .iter()
            .map(Value::to_string)
            .collect()
    }

    /// The simulator's token counters.
    async fn stats(&self) -> Value {
        client()
            .get(format!("{}/mock/stats", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

async fn post(url: &str, path: &str, body: &Value) -> reqwest::Response {
    client()
        .post(format!("{url}{path}"))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

const QUESTION: &str = "Why is the sky blue?";

fn ask(stream: bool) -> Value {
    json!({"model": "massgen", "max_tokens": 1024, "stream": stream,
        "messages": [{"role": "user", "content": QUESTION}]})
}

async fn stream(url: &str, body: &Value) -> Vec<Named> {
    let r = post(url, "/v1/messages", body).await;
    assert_eq!(r.status(), 200);
    parse_named_sse(&r.text().await.unwrap()).0
}

/// A turn's thinking block and answer text: what a client sends back.
struct Turn {
    thinking: String,
    signature: String,
    answer: String,
}

/// Turn 1 streamed: the block as the SDK's accumulator builds it from the deltas.
async fn streamed_turn(url: &str) -> Turn {
    let events = stream(url, &ask(true)).await;
    let deltas = |kind: &str, field: &str| -> String {
        events
            .iter()
            .filter(|e| e.data["delta"]["type"] == kind)
            .map(|e| e.data["delta"][field].as_str().unwrap())
            .collect()
    };
    let signatures = events
        .iter()
        .filter(|e| e.data["delta"]["type"] == "signature_delta")
        .count();
    assert_eq!(signatures, 1, "one thinking block, one signature");
    Turn {
        thinking: deltas("thinking_delta", "thinking"),
        signature: deltas("signature_delta", "signature"),
        answer: deltas("text_delta", "text"),
    }
}

/// Turn 1 not streamed.
async fn collected_turn(url: &str) -> Turn {
    let r = post(url, "/v1/messages", &ask(false)).await;
    assert_eq!(r.status(), 200);
    let message: Value = r.json().await.unwrap();
    let content = &message["content"];
    assert_eq!(content[0]["type"], "thinking", "{message}");
    Turn {
        thinking: content[0]["thinking"].as_str().unwrap().to_string(),
        signature: content[0]["signature"].as_str().unwrap().to_string(),
        answer: content[1]["text"].as_str().unwrap().to_string(),
    }
}

/// Turn 2: turn 1 sent back with `thinking` as its thinking block, and a new question.
fn second_turn(turn: &Turn, thinking: &str) -> Value {
    json!({"model": "massgen", "max_tokens": 1024, "messages": [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": thinking, "signature": turn.signature},
            {"type": "text", "text": turn.answer}]},
        {"role": "user", "content": "And at sunset?"}]})
}

/// What only the deliberation shown to clients writes (its narration's `[agent1] answered
/// (agent1.1)` lines), never an agent's prompt (whose votes read `agent1 voted for …`).
const DELIBERATION_MARKS: [&str; 3] = ["[massgen] ", "] answered (", "] voted for "];

fn shows_deliberation(bodies: &[String]) -> bool {
    bodies
        .iter()
        .any(|b| DELIBERATION_MARKS.iter().any(|m| b.contains(m)))
}

/// A 200, and the agents were asked (and shown no deliberation).
async fn reaches_agents_without_deliberation(upstream: &Upstream, url: &str, body: &Value) {
    upstream.take();
    let r = post(url, "/v1/messages", body).await;
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    let bodies = upstream.take();
    assert!(
        bodies.iter().any(|b| b.contains("And at sunset?")),
        "the agents were asked"
    );
    let shown: Vec<&String> = bodies
        .iter()
        .filter(|b| DELIBERATION_MARKS.iter().any(|m| b.contains(m)))
        .collect();
    assert!(
        shown.is_empty(),
        "the agents saw the deliberation: {shown:?}"
    );
}

/// A 400 `invalid_request_error` whose message names the signature's path.
async fn refused_signature(url: &str, body: &Value) {
    let r = post(url, "/v1/messages", body).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("messages[1].content[0].signature")
            && message.contains("Invalid `signature` in `thinking` block"),
        "{message}"
    );
}

#[tokio::test]
async fn signed_thinking_blocks_come_back_without_reaching_the_agents() {
    let upstream = Upstream::start().await;
    let server = upstream.server(Some("secret-one")).await;
    let url = &server.url;
    let streamed = streamed_turn(url).await;
    let collected = collected_turn(url).await;
    for turn in [&streamed, &collected] {
        assert!(
            DELIBERATION_MARKS.iter().all(|m| turn.thinking.contains(m)),
            "{}",
            turn.thinking
        );
        assert!(turn.signature.starts_with("mg1."), "{}", turn.signature);
        assert!(turn.answer.starts_with("[simulated final answer]"));
    }

    // Sent back intact, each turn's block is taken and dropped.
    for turn in [&streamed, &collected] {
        reaches_agents_without_deliberation(&upstream, url, &second_turn(turn, &turn.thinking))
            .await;
    }
    // The same text as a text block does reach the agents: the check above can fail.
    let mut as_text = second_turn(&streamed, &streamed.thinking);
    as_text["messages"][1]["content"] = json!([{"type": "text", "text": streamed.thinking}]);
    upstream.take();
    assert_eq!(post(url, "/v1/messages", &as_text).await.status(), 200);
    assert!(shows_deliberation(&upstream.take()));

    // Tampered text, or a signature from elsewhere: refused, naming the path.
    let tampered = format!("{} (edited)", streamed.thinking);
    refused_signature(url, &second_turn(&streamed, &tampered)).await;
    let mut foreign = second_turn(&streamed, &streamed.thinking);
    foreign["messages"][1]["content"][0]["signature"] = json!("EqQBCgIYAhIMmO3Yy1");
    refused_signature(url, &foreign).await;
    // An empty signature (clients that keep none) is dropped as before.
    let mut unsigned = second_turn(&streamed, &streamed.thinking);
    unsigned["messages"][1]["content"][0]["signature"] = json!("");
    reaches_agents_without_deliberation(&upstream, url, &unsigned).await;

    // A replica with the same secret takes the block; a deployment with another refuses it.
    let replica = upstream.server(Some("secret-one")).await;
    reaches_agents_without_deliberation(
        &upstream,
        &replica.url,
        &second_turn(&streamed, &streamed.thinking),
    )
    .await;
    let other = upstream.server(Some("secret-two")).await;
    refused_signature(&other.url, &second_turn(&streamed, &streamed.thinking)).await;
    // Without a secret the key is per process: a block it cannot verify (from before a
    // restart, say) is dropped like the rest, not refused.
    let laptop = upstream.server(None).await;
    reaches_agents_without_deliberation(
        &upstream,
        &laptop.url,
        &second_turn(&streamed, &streamed.thinking),
    )
    .await;
}

#[tokio::test]
async fn deliberation_rendered_as_text_is_removed_before_the_agents() {
    let upstream = Upstream::start().await;
    let server = upstream.server(Some("secret-one")).await;
    let turn = collected_turn(&server.url).await;
    assert!(DELIBERATION_MARKS.iter().all(|m| turn.thinking.contains(m)));
    // pydantic-ai's AnthropicModel, for thinking it cannot send back natively.
    let user_turn = json!({"model": "massgen", "max_tokens": 1024, "messages": [
        {"role": "user", "content": QUESTION},
        {"role": "user", "content": format!("<assistant_thinking>{}</assistant_thinking>", turn.thinking)},
        {"role": "assistant", "content": turn.answer},
        {"role": "user", "content": "And at sunset?"}]});
    reaches_agents_without_deliberation(&upstream, &server.url, &user_turn).await;
    // A leading `<think>` in an assistant turn (pydantic-ai, the server's think_tags).
    let think = json!({"model": "massgen", "max_tokens": 1024, "messages": [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": format!("<think>\n{}\n</think>\n\n{}", turn.thinking, turn.answer)},
        {"role": "user", "content": "And at sunset?"}]});
    reaches_agents_without_deliberation(&upstream, &server.url, &think).await;
}

#[tokio::test]
async fn message_start_carries_the_prompt_and_message_delta_the_session_totals() {
    let upstream = Upstream::start().await;
    let server = upstream.server(Some("secret-one")).await;
    let body = json!({"model": "massgen", "max_tokens": 1024, "stream": true,
        "system": "Answer briefly, with one example from everyday life.",
        "tools": [{"name": "get_weather", "description": "Current weather",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "messages": [{"role": "user", "content": QUESTION},
            {"role": "assistant", "content": "Rayleigh scattering."},
            {"role": "user", "content": "And at sunset?"}]});
    let count: Value = post(&server.url, "/v1/messages/count_tokens", &body)
        .await
        .json()
        .await
        .unwrap();
    let prompt = count["input_tokens"].as_u64().unwrap();
    assert!(prompt > 0, "{count}");
    let before = upstream.stats().await;
    let events = stream(&server.url, &body).await;
    let after = upstream.stats().await;
    let start = &events[0].data["message"]["usage"];
    assert_eq!(events[0].data["type"], "message_start");
    assert_eq!(start["input_tokens"], prompt, "{start}");
    assert_eq!(start["output_tokens"], 0, "{start}");
    let end = &events[events.len() - 2].data;
    assert_eq!(end["type"], "message_delta");
    let used = |key: &str| after[key].as_u64().unwrap() - before[key].as_u64().unwrap();
    let usage = &end["usage"];
    assert_eq!(
        usage["input_tokens"].as_u64().unwrap()
            + usage["cache_read_input_tokens"].as_u64().unwrap(),
        used("prompt_tokens"),
        "{usage}"
    );
    assert_eq!(usage["output_tokens"], used("completion_tokens"), "{usage}");
    // Every agent's calls: more than the one prompt.
    assert!(usage["input_tokens"].as_u64().unwrap() > prompt, "{usage}");
}
