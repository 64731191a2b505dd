//! Issue 23 item 2: no JSON Schema can stall the server. Patterns run on a linear-time
//! engine (a backreference or look-around is a 400 naming where it is, on every door), a
//! schema has caps on its patterns and branches, and answers are checked off the async
//! workers under a time budget, so `/health` answers while checks run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use massgen_core::coordination::{
    AnswerCheck, OrchestratorOptions, Rejection, SessionErrorKind, StructuredOutput,
};
use massgen_core::provider::OutputFormat;
use serde_json::{Value, json};

use crate::support::engine::{is_presentation, member, run, spec};
use crate::support::serving::assert_door_error;
use crate::support::{Setup, client_with_timeout, panel_yaml, post, write};

const PANEL: [&str; 2] = ["sim-a:ttft_ms=0,token_ms=0", "sim-b:ttft_ms=0,token_ms=0"];
const DOORS: [&str; 3] = ["/v1/chat/completions", "/v1/responses", "/v1/messages"];

fn setup() -> Setup {
    Setup::start(|mock_url, dir| {
        let team = write(dir, "team.yaml", &panel_yaml(mock_url, &PANEL, ""));
        vec!["--config".to_string(), team.display().to_string()]
    })
}

/// A request on `door` whose structured output format is `schema`.
fn ask(door: &str, schema: &Value) -> Value {
    let messages = json!([{"role": "user", "content": "Which string?"}]);
    match door {
        "/v1/chat/completions" => json!({"model": "massgen", "messages": messages,
            "response_format": {"type": "json_schema",
                "json_schema": {"name": "s", "schema": schema}}}),
        "/v1/responses" => json!({"model": "massgen", "input": "Which string?",
            "text": {"format": {"type": "json_schema", "name": "s", "schema": schema}}}),
        _ => json!({"model": "massgen", "max_tokens": 1024, "messages": messages,
            "output_config": {"format": {"type": "json_schema", "schema": schema}}}),
    }
}

/// The status and the error message, from the door's own error shape (the code must be
/// `invalid_value` on the OpenAI doors, `invalid_request_error` on Messages).
async fn refusal(url: &str, door: &str, schema: &Value) -> (u16, String) {
    let r = post(url, door, None, &ask(door, schema)).await;
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap();
    assert_door_error(door, &body, "invalid_value", "invalid_request_error", "");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    (status, message.to_string())
}

/// `{"a": <the string `value`>}`, whose `a` must also be valid against every branch of
/// `branches` (`anyOf`): the simulator answers with `value` (it follows the `$ref`), and
/// the check then tries every branch's pattern on it.
fn answer_then_branches(value: &str, branches: Vec<Value>) -> Value {
    json!({
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/answer", "anyOf": branches}},
        "required": ["a"],
        "$defs": {"answer": {"type": "string", "const": value}}
    })
}

/// The schema: `count` branches of `^(a|aa)+\1c{0,N}$` (a backreference), each
/// distinct.
fn backreference_branches(count: usize) -> Vec<Value> {
    (0..count)
        .map(|n| json!({"type": "string", "pattern": format!("^(a|aa)+\\1c{{0,{n}}}$")}))
        .collect()
}

#[tokio::test]
async fn backreferences_and_look_around_are_400s_naming_the_keyword_and_its_path() {
    let s = setup();
    let url = &s.server.url;
    let mut branches: Vec<Value> = (0..3)
        .map(|n| json!({"pattern": format!("^a{{{n}}}$")}))
        .collect();
    branches.push(json!({"pattern": "^(a|aa)+\\1c$"}));
    let backreference = answer_then_branches("aaaaaaaaaaaaaaaaaaaaaaaaaaaaab", branches);
    let look_ahead = json!({"type": "object", "properties": {"b": {"type": "object",
        "patternProperties": {"^(?!x)": {"type": "string"}}}}});
    let look_behind = json!({"type": "object", "properties": {"c": {"type": "string",
        "pattern": "(?<=a)b"}}});
    for door in DOORS {
        let (status, message) = refusal(url, door, &backreference).await;
        assert_eq!(status, 400, "{door}: {message}");
        assert!(
            message.contains("/properties/a/anyOf/3/pattern") && message.contains("backreference"),
            "{door}: {message}"
        );
        let (status, message) = refusal(url, door, &look_ahead).await;
        assert_eq!(status, 400, "{door}: {message}");
        assert!(
            message.contains("/properties/b/patternProperties") && message.contains("look-around"),
            "{door}: {message}"
        );
        let (status, message) = refusal(url, door, &look_behind).await;
        assert_eq!(status, 400, "{door}: {message}");
        assert!(
            message.contains("/properties/c/pattern") && message.contains("look-around"),
            "{door}: {message}"
        );
    }
    // A class holding the same characters is no backreference and no look-around.
    let literal = json!({"type": "object", "properties": {"d": {"type": "string",
        "pattern": "^[(?=\\\\1)]+$"}}});
    let r = post(url, DOORS[0], None, &ask(DOORS[0], &literal)).await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn too_many_branches_or_patterns_is_a_400_naming_the_limit() {
    let s = setup();
    let url = &s.server.url;
    let many_branches = json!({"anyOf": vec![json!({"type": "string"}); 300]});
    let many_patterns = json!({"allOf": (0..150)
        .map(|n| json!({"pattern": format!("^x{{{n}}}$")}))
        .collect::<Vec<_>>()});
    let long_pattern = json!({"type": "string", "pattern": format!("^{}$", "ab".repeat(2_000))});
    let deep = (0..80).fold(
        json!({"type": "string"}),
        |inner, _| json!({"items": inner}),
    );
    for door in DOORS {
        for (schema, words) in [
            (&many_branches, "branches"),
            (&many_patterns, "patterns"),
            (&long_pattern, "characters"),
            (&deep, "deep"),
        ] {
            let (status, message) = refusal(url, door, schema).await;
            assert_eq!(status, 400, "{door}: {message}");
            assert!(
                message.contains(words) && message.contains("limit"),
                "{door}: {message}"
            );
        }
    }
}

#[tokio::test]
async fn a_catastrophic_looking_linear_pattern_is_checked_quickly() {
    let s = setup();
    let url = &s.server.url;
    let branches = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"type": "string", "pattern": format!("^(a|aa)+c{{0,{i}}}$")}))
            .collect()
    };
    // The answer `value` checked against 60 such branches, on Chat Completions.
    let answer = |value: &str| {
        let body = ask(DOORS[0], &answer_then_branches(value, branches(60)));
        async move { post(url, DOORS[0], None, &body).await }
    };
    let matching = "a".repeat(40) + "c";
    let started = Instant::now();
    let r = answer(&matching).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(content).unwrap(),
        json!({"a": matching})
    );
    // No branch matches: every pattern runs on the answer, twice (the corrective call),
    // and the session ends with the usual invalid_output.
    let failing = "a".repeat(40) + "b";
    let r = answer(&failing).await;
    assert_eq!(r.status(), 502);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_output", "{body}");
    // Generous: a backtracking engine takes minutes here; the linear one milliseconds.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn health_answers_while_hostile_schemas_are_sent() {
    let s = setup();
    let url = s.server.url.clone();
    let hostile = answer_then_branches(&("a".repeat(30) + "b"), backreference_branches(300));
    // Within the caps, and costly: every pattern scans a 25,000-character answer (about a
    // third of a second per check on a debug build; each request checks twice).
    let linear = answer_then_branches(
        &"é".repeat(25_000),
        (0..60)
            .map(|n| json!({"pattern": format!(".{{1,200}}[a-z]{{1,100}}Q{{0,{n}}}")}))
            .collect(),
    );
    let requests: Vec<_> = [&hostile, &hostile, &linear, &linear]
        .into_iter()
        .map(|schema| {
            let (url, body) = (url.clone(), ask(DOORS[0], schema));
            tokio::spawn(async move { post(&url, DOORS[0], None, &body).await.status().as_u16() })
        })
        .collect();
    let health = client_with_timeout(Duration::from_secs(30));
    let mut slowest = Duration::ZERO;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !requests.iter().all(|r| r.is_finished()) && Instant::now() < deadline {
        let started = Instant::now();
        let r = health.get(format!("{url}/health")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        slowest = slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut statuses = Vec::new();
    for r in requests {
        statuses.push(r.await.unwrap());
    }
    assert_eq!(statuses, [400, 400, 502, 502]);
    eprintln!("slowest /health {slowest:?}");
    // Generous: validation on the async workers made /health wait for seconds.
    assert!(
        slowest < Duration::from_secs(2),
        "slowest /health {slowest:?}"
    );
}

/// A check that runs out of its budget, as the server's does on a schema too costly to
/// check.
#[derive(Debug)]
struct OutOfBudget;

impl AnswerCheck for OutOfBudget {
    fn check<'a>(&'a self, _answer: &'a str) -> BoxFuture<'a, Result<(), Rejection>> {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Err(Rejection::Unchecked("too costly to check".into()))
        })
    }
}

#[tokio::test(start_paused = true)]
async fn an_answer_the_check_cannot_judge_fails_the_session_without_a_corrective_call() {
    let a = member("a", "Four.", 1, "agent1");
    let b = member("b", "It is 4.", 2, "agent1");
    let mut session = spec(&[("a", &a), ("b", &b)], OrchestratorOptions::default());
    session.input.output = Some(StructuredOutput {
        format: OutputFormat::JsonObject,
        check: Arc::new(OutOfBudget),
        streamed: false,
    });
    let ran = run(session).await;
    let error = ran.error();
    assert_eq!(error.kind, SessionErrorKind::InvalidOutput);
    assert!(
        error.message.contains("could not be checked") && error.message.contains("too costly"),
        "{}",
        error.message
    );
    let presentations = a
        .requests()
        .iter()
        .chain(b.requests().iter())
        .filter(|r| is_presentation(r))
        .count();
    assert_eq!(presentations, 1, "no corrective call");
}
