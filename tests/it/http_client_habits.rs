//! What real clients and the proxies in front of them rely on, on all three doors:
//! `x-should-retry` only where a retry can help, upstream words kept out of the top-level
//! error message (a proxy classifies errors by it) and given per agent in `upstream`.

use serde_json::{Value, json};

use crate::support::{Setup, client, panel_yaml, parse_named_sse, parse_sse, post, write};

/// Agent 1 rate limited, agent 2 a server error: both transient, not all rate limits (a
/// 502), and "Rate limit reached" among the upstreams' words.
const MIXED: [&str; 2] = ["limited:fault=429,retry_after=0", "down:fault=500"];

fn setup(models: &[&str]) -> Setup {
    Setup::start(|mock_url, dir| {
        let team = write(dir, "team.yaml", &panel_yaml(mock_url, models, ""));
        vec!["--config".to_string(), team.display().to_string()]
    })
}

/// `path` on the door, `body` as that door wants it.
async fn send(url: &str, path: &str, body: &Value) -> reqwest::Response {
    if path == "/v1/messages" {
        return client()
            .post(format!("{url}{path}"))
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .json(body)
            .send()
            .await
            .unwrap();
    }
    post(url, path, None, body).await
}

fn ask(path: &str, model: &str, stream: bool) -> Value {
    match path {
        "/v1/responses" => json!({"model": model, "input": "Hi", "stream": stream}),
        "/v1/messages" => json!({"model": model, "max_tokens": 64, "stream": stream,
            "messages": [{"role": "user", "content": "Hi"}]}),
        _ => json!({"model": model, "stream": stream,
            "messages": [{"role": "user", "content": "Hi"}]}),
    }
}

const DOORS: [&str; 3] = ["/v1/chat/completions", "/v1/responses", "/v1/messages"];

/// The error object's message has none of the upstreams' words; `upstream` has them,
/// one entry per agent, with status and kind.
fn check_upstream_split(error: &Value, expect: &[(&str, u64, &str, &str)]) {
    let message = error["message"].as_str().unwrap();
    let lower = message.to_lowercase();
    for word in ["rate limit", "[simulated]", "context length", "429", "500"] {
        assert!(!lower.contains(word), "{word} in {message}");
    }
    let upstream = error["upstream"].as_array().expect("upstream list");
    assert_eq!(upstream.len(), expect.len(), "{error}");
    for (entry, (agent, status, kind, words)) in upstream.iter().zip(expect) {
        assert_eq!(entry["agent_id"], *agent, "{entry}");
        assert!(message.contains(agent), "{message} names {agent}");
        assert_eq!(entry["status"], *status, "{entry}");
        assert_eq!(entry["kind"], *kind, "{entry}");
        assert_eq!(entry["provider"], "chatcompletion", "{entry}");
        let text = entry["message"].as_str().unwrap();
        assert!(
            text.contains(words) && text.chars().count() <= 301,
            "{entry}"
        );
    }
}

const MIXED_EXPECT: [(&str, u64, &str, &str); 2] = [
    ("sim1", 429, "rate_limited", "Rate limit reached"),
    ("sim2", 500, "server", "The server had an error"),
];

#[tokio::test]
async fn a_502_keeps_upstream_words_in_error_upstream_on_every_door() {
    let s = setup(&MIXED);
    for path in DOORS {
        let r = send(&s.server.url, path, &ask(path, "massgen", false)).await;
        assert_eq!(r.status(), 502, "{path}");
        // Transient upstream failures: a retry may succeed.
        assert_eq!(r.headers()["x-should-retry"], "true", "{path}");
        let body: Value = r.json().await.unwrap();
        check_upstream_split(&body["error"], &MIXED_EXPECT);
    }
}

#[tokio::test]
async fn a_stream_failure_carries_error_upstream_on_every_door() {
    let s = setup(&MIXED);
    let url = &s.server.url;
    let chat = send(url, DOORS[0], &ask(DOORS[0], "massgen", true)).await;
    let sse = parse_sse(&chat.text().await.unwrap());
    check_upstream_split(&sse.events.last().unwrap()["error"], &MIXED_EXPECT);

    let responses = send(url, DOORS[1], &ask(DOORS[1], "massgen", true)).await;
    let (events, _) = parse_named_sse(&responses.text().await.unwrap());
    let n = events.len();
    assert_eq!(events[n - 2].event, "error");
    check_upstream_split(&events[n - 2].data["error"], &MIXED_EXPECT);
    assert_eq!(events[n - 1].event, "response.failed");
    check_upstream_split(&events[n - 1].data["response"]["error"], &MIXED_EXPECT);

    let messages = send(url, DOORS[2], &ask(DOORS[2], "massgen", true)).await;
    let (events, _) = parse_named_sse(&messages.text().await.unwrap());
    let last = events.last().unwrap();
    assert_eq!(last.event, "error");
    check_upstream_split(&last.data["error"], &MIXED_EXPECT);
}

#[tokio::test]
async fn no_retry_where_the_same_request_fails_the_same_way() {
    let s = setup(&MIXED);
    let url = &s.server.url;
    // The upstream rejects the prompt itself: every retry would too.
    let context = "massgen/model:long:fault=context";
    // Agents that never follow the protocol: 503 no_usable_agent.
    let mute = "massgen/model:mute:policy=no_tool";
    for path in DOORS {
        let r = send(url, path, &ask(path, context, false)).await;
        assert_eq!(r.status(), 502, "{path}");
        assert_eq!(r.headers()["x-should-retry"], "false", "{path}");
        let body: Value = r.json().await.unwrap();
        let expect = [
            ("sim1", 400, "context_length", "maximum context length"),
            ("sim2", 400, "context_length", "maximum context length"),
        ];
        check_upstream_split(&body["error"], &expect);

        let r = send(url, path, &ask(path, mute, false)).await;
        assert_eq!(r.status(), 503, "{path}");
        assert_eq!(r.headers()["x-should-retry"], "false", "{path}");
        let body: Value = r.json().await.unwrap();
        assert!(body["error"].get("upstream").is_none(), "{body}");

        let r = send(url, path, &json!({"model": "massgen"})).await;
        assert_eq!(r.status(), 400, "{path}");
        assert_eq!(r.headers()["x-should-retry"], "false", "{path}");
    }
}

/// The answer text of a `chat.completion`, and its `reasoning_content`.
fn message_of(completion: &Value) -> (String, Option<String>) {
    let message = &completion["choices"][0]["message"];
    (
        message["content"].as_str().unwrap_or_default().to_string(),
        message["reasoning_content"].as_str().map(str::to_string),
    )
}

/// `content` and `reasoning_content` of a Chat Completions stream, each concatenated.
fn streamed_text(raw: &str) -> (String, String) {
    let sse = parse_sse(raw);
    assert!(sse.done, "{raw}");
    let mut content = String::new();
    let mut reasoning = String::new();
    for chunk in &sse.events {
        let delta = &chunk["choices"][0]["delta"];
        content.push_str(delta["content"].as_str().unwrap_or_default());
        reasoning.push_str(delta["reasoning_content"].as_str().unwrap_or_default());
    }
    (content, reasoning)
}

/// `<think>\n…</think>` then the answer: returns (deliberation, answer).
fn split_think(content: &str) -> (&str, &str) {
    let inner = content
        .strip_prefix("<think>\n")
        .unwrap_or_else(|| panic!("no opening tag: {content}"));
    inner
        .split_once("</think>")
        .unwrap_or_else(|| panic!("no closing tag: {content}"))
}

fn chat_body(stream: bool, format: Option<&str>) -> Value {
    let mut body = ask(DOORS[0], "massgen", stream);
    if let Some(format) = format {
        body["massgen"] = json!({"deliberation_format": format});
    }
    body
}

const SIMULATED: &str = "[simulated final answer]";

#[tokio::test]
async fn think_tags_put_the_deliberation_in_content_before_the_answer() {
    let s = setup(&crate::support::FAST);
    let url = &s.server.url;
    let r = send(url, DOORS[0], &chat_body(true, Some("think_tags"))).await;
    let (content, reasoning) = streamed_text(&r.text().await.unwrap());
    assert_eq!(reasoning, "", "no reasoning_content beside the tags");
    let (deliberation, answer) = split_think(&content);
    assert!(
        deliberation.contains("answered (agent") && deliberation.contains("voted for"),
        "{deliberation}"
    );
    assert!(deliberation.ends_with('\n') && !deliberation.contains("<think>"));
    assert!(answer.starts_with(SIMULATED), "{answer}");

    let r = send(url, DOORS[0], &chat_body(false, Some("think_tags"))).await;
    let (content, reasoning) = message_of(&r.json().await.unwrap());
    assert_eq!(reasoning, None);
    let (deliberation, answer) = split_think(&content);
    assert!(deliberation.contains("voted for"), "{deliberation}");
    assert!(answer.starts_with(SIMULATED), "{answer}");

    // `max_completion_tokens` and `stop` bound the answer, never the deliberation.
    let mut bounded = chat_body(false, Some("think_tags"));
    bounded["stop"] = json!(["final"]);
    let r = send(url, DOORS[0], &bounded).await;
    let (content, _) = message_of(&r.json().await.unwrap());
    assert_eq!(split_think(&content).1, "[simulated ");

    // Without a deliberation to show, no tags.
    let mut quiet = chat_body(false, Some("think_tags"));
    quiet["massgen"]["deliberation"] = json!("off");
    let r = send(url, DOORS[0], &quiet).await;
    let (content, _) = message_of(&r.json().await.unwrap());
    assert!(content.starts_with(SIMULATED), "{content}");
}

#[tokio::test]
async fn the_server_default_format_applies_to_chat_completions_unless_the_request_says() {
    let s = Setup::start(|mock_url, dir| {
        let team = write(
            dir,
            "team.yaml",
            &panel_yaml(mock_url, &crate::support::FAST, ""),
        );
        [
            "--config",
            &team.display().to_string(),
            "--deliberation-format",
            "think_tags",
        ]
        .map(str::to_string)
        .to_vec()
    });
    let url = &s.server.url;
    let r = send(url, DOORS[0], &chat_body(true, None)).await;
    let (content, reasoning) = streamed_text(&r.text().await.unwrap());
    assert_eq!(reasoning, "");
    assert!(split_think(&content).1.starts_with(SIMULATED));

    let r = send(url, DOORS[0], &chat_body(true, Some("reasoning"))).await;
    let (content, reasoning) = streamed_text(&r.text().await.unwrap());
    assert!(reasoning.contains("voted for"), "{reasoning}");
    assert!(content.starts_with(SIMULATED), "{content}");

    for stream in [true, false] {
        let r = send(url, DOORS[0], &chat_body(stream, Some("none"))).await;
        let (content, reasoning) = if stream {
            streamed_text(&r.text().await.unwrap())
        } else {
            let (c, r) = message_of(&r.json().await.unwrap());
            (c, r.unwrap_or_default())
        };
        assert_eq!(reasoning, "");
        assert!(content.starts_with(SIMULATED), "{content}");
    }

    // The Responses door keeps its reasoning items: the default is Chat Completions'.
    let r = send(url, DOORS[1], &ask(DOORS[1], "massgen", false)).await;
    let body: Value = r.json().await.unwrap();
    let types: Vec<&str> = body["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["reasoning", "message"], "{body}");
    let text = body["output"][1]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with(SIMULATED), "{text}");
}

#[tokio::test]
async fn doors_with_native_reasoning_refuse_think_tags_and_honour_none() {
    let s = setup(&crate::support::FAST);
    let url = &s.server.url;
    for path in [DOORS[1], DOORS[2]] {
        let mut body = ask(path, "massgen", false);
        body["massgen"] = json!({"deliberation_format": "think_tags"});
        let r = send(url, path, &body).await;
        assert_eq!(r.status(), 400, "{path}");
        let error: Value = r.json().await.unwrap();
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains("Chat Completions only"), "{message}");

        body["massgen"] = json!({"deliberation_format": "none"});
        let r = send(url, path, &body).await;
        assert_eq!(r.status(), 200, "{path}");
        let body: Value = r.json().await.unwrap();
        let kinds: Vec<&str> = body
            .get("output")
            .or(body.get("content"))
            .and_then(Value::as_array)
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap())
            .collect();
        assert!(
            !kinds.contains(&"reasoning") && !kinds.contains(&"thinking"),
            "{body}"
        );
    }
    let mut bad = chat_body(false, Some("tags"));
    bad["massgen"]["deliberation_format"] = json!("tags");
    let r = send(url, DOORS[0], &bad).await;
    assert_eq!(r.status(), 400);
    let error: Value = r.json().await.unwrap();
    assert_eq!(error["error"]["code"], "invalid_value");
    assert_eq!(error["error"]["param"], "massgen.deliberation_format");
}

#[tokio::test]
async fn session_id_and_winner_ride_in_headers_where_proxies_keep_them() {
    let s = setup(&crate::support::FAST);
    let url = &s.server.url;
    for path in DOORS {
        let r = send(url, path, &ask(path, "massgen", false)).await;
        assert_eq!(r.status(), 200, "{path}");
        let session = r.headers()["x-massgen-session-id"]
            .to_str()
            .unwrap()
            .to_string();
        let winner = r.headers()["x-massgen-winner"]
            .to_str()
            .unwrap()
            .to_string();
        let body: Value = r.json().await.unwrap();
        let metadata = &body["massgen_metadata"];
        assert_eq!(metadata["session_id"], session.as_str(), "{path}");
        assert_eq!(metadata["winner"]["agent_id"], winner.as_str(), "{path}");
        assert!(winner.starts_with("sim"), "{winner}");

        // Streamed, the headers leave before a winner exists: the last metadata has it.
        let r = send(url, path, &ask(path, "massgen", true)).await;
        assert!(r.headers().contains_key("x-massgen-session-id"), "{path}");
        assert!(!r.headers().contains_key("x-massgen-winner"), "{path}");
        let raw = r.text().await.unwrap();
        let last_metadata = raw
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .filter_map(|v| find_metadata(&v).cloned())
            .next_back()
            .unwrap_or_else(|| panic!("no massgen_metadata in {raw}"));
        assert!(
            last_metadata["winner"]["agent_id"]
                .as_str()
                .is_some_and(|w| w.starts_with("sim")),
            "{last_metadata}"
        );
    }
}

/// `massgen_metadata` wherever a door's final event carries it.
fn find_metadata(event: &Value) -> Option<&Value> {
    [
        &event["massgen_metadata"],
        &event["response"]["massgen_metadata"],
    ]
    .into_iter()
    .find(|m| m.is_object())
}

/// A spent quota is a 429 no wait fixes: `insufficient_quota`, no `Retry-After`, and
/// `x-should-retry: false`, so the SDKs do not run the panel again (issue 13, item 4).
#[tokio::test]
async fn a_spent_quota_is_a_429_that_says_do_not_retry_on_every_door() {
    let s = setup(&["broke:fault=quota"]);
    for path in DOORS {
        let r = send(&s.server.url, path, &ask(path, "massgen", false)).await;
        assert_eq!(r.status(), 429, "{path}");
        assert_eq!(r.headers()["x-should-retry"], "false", "{path}");
        assert!(r.headers().get("retry-after").is_none(), "{path}");
        let body: Value = r.json().await.unwrap();
        if path != "/v1/messages" {
            assert_eq!(body["error"]["code"], "insufficient_quota", "{body}");
        }
        assert_eq!(body["error"]["upstream"][0]["status"], 429, "{body}");
    }
}
