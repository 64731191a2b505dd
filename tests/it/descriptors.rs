//! Issue 26: under a low open-file limit, `massgen serve` raises its soft limit to the hard
//! one, and a session whose upstream calls do not fit in what is left gets a 503 before
//! any upstream call, while every session it admitted ends with a complete answer: none
//! fails half-way on "Too many open files".

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::{self, Proc, mock_upstream, panel_yaml, parse_sse, question, sample};

/// Open-file limits the server starts under (`sh` sets them, then `exec`s it): the hard
/// limit is low too, so the raise cannot lift it past what the test expects.
const SOFT: u64 = 64;
const HARD: u64 = 160;

/// Two slow agents: a session runs for seconds (answers, votes, presentation), so every
/// request of the burst arrives while the first ones still hold their descriptors.
const SLOW: [&str; 2] = [
    "a:ttft_ms=1500,token_ms=20,words=20",
    "b:ttft_ms=1500,token_ms=20,words=20",
];

fn serve_under_limit(config: &std::path::Path, records: &std::path::Path) -> Proc {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -Sn {SOFT} && ulimit -Hn {HARD} && exec \"$0\" \"$@\""
        ))
        .arg(support::bin())
        .args(["serve", "--host", "127.0.0.1", "--port", "0"])
        .args(["--max-connections", "8", "--config"])
        .arg(config)
        .env(
            "MASSGEN_SERVER_RECORDS_DB",
            format!("sqlite://{}", records.join("records.db").display()),
        );
    support::offline(&mut cmd);
    support::start(cmd, "massgen listening on")
}

async fn metrics(url: &str) -> String {
    support::get(&format!("{url}/metrics"), None)
        .await
        .text()
        .await
        .unwrap()
}

fn gauge(text: &str, name: &str) -> u64 {
    sample(text, name, &[]).unwrap_or_else(|| panic!("no {name} in\n{text}")) as u64
}

/// What one request of the burst got.
enum Outcome {
    /// 200, and the stream ended with `finish_reason: stop` and `[DONE]`.
    Complete,
    /// 503 in the door's error shape, before any byte of a stream.
    Refused,
}

async fn one_session(client: &reqwest::Client, url: &str) -> Outcome {
    let response = client
        .post(format!("{url}/v1/chat/completions"))
        .json(&question(true))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    if status == 503 {
        assert_eq!(headers["retry-after"], "1", "{text}");
        assert_eq!(headers["x-should-retry"], "true", "{text}");
        assert!(
            headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json"),
            "a stream had started: {text}"
        );
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["error"]["code"], "server_busy", "{text}");
        assert_eq!(
            body["error"]["message"],
            format!("The server is at its open-file limit ({HARD} descriptors): try again shortly"),
        );
        return Outcome::Refused;
    }
    assert_eq!(status, 200, "neither admitted nor refused: {text}");
    let sse = parse_sse(&text);
    assert!(sse.done, "no [DONE]: {text}");
    assert!(
        sse.events.iter().all(|e| e.get("error").is_none()),
        "a session failed half-way: {text}"
    );
    let finish = sse
        .events
        .iter()
        .filter_map(|e| e["choices"].get(0))
        .filter_map(|c| c["finish_reason"].as_str())
        .collect::<Vec<_>>();
    assert_eq!(finish, ["stop"], "{text}");
    assert!(!sse.content().is_empty(), "{text}");
    Outcome::Complete
}

#[tokio::test]
async fn sessions_past_the_open_file_limit_get_a_503_before_any_call_and_the_rest_complete() {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let config = support::write(dir.path(), "slow.yaml", &panel_yaml(&mock.url, &SLOW, ""));
    let server = serve_under_limit(&config, dir.path());
    let url = server.url.as_str();

    let before = metrics(url).await;
    assert_eq!(
        gauge(&before, "massgen_descriptor_limit"),
        HARD,
        "the soft limit was not raised to the hard one"
    );
    let budget = gauge(&before, "massgen_descriptor_session_budget");
    // Each session takes one per agent: twice the budget's worth of sessions cannot all fit.
    let per_session = SLOW.len() as u64;
    assert!(
        (per_session..=100).contains(&budget),
        "a budget this test cannot use: {budget}"
    );
    let burst = budget;

    // One HTTP/2 connection carries the whole burst: only sessions compete for descriptors.
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let outcomes = tokio::time::timeout(
        Duration::from_secs(90),
        futures::future::join_all((0..burst).map(|_| one_session(&client, url))),
    )
    .await
    .expect("the burst did not end in time");
    let complete = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Complete))
        .count() as u64;
    let refused = burst - complete;
    assert!(complete >= 1, "nothing admitted");
    assert!(refused >= 1, "nothing refused: the budget did not bind");

    let after = metrics(url).await;
    // Refused requests started no session (no upstream call); admitted ones gave their
    // descriptors back when they ended.
    let started = sample(&after, "massgen_sessions_started_total", &[]).unwrap_or(0.0) as u64;
    assert_eq!(started, complete, "{after}");
    let rejected = sample(
        &after,
        "massgen_rejected_requests_total",
        &[("reason", "descriptors")],
    )
    .unwrap_or(0.0) as u64;
    assert_eq!(rejected, refused, "{after}");
    assert_eq!(gauge(&after, "massgen_descriptors_reserved"), 0, "{after}");

    // With the descriptors back, the next session is admitted and completes.
    assert!(matches!(one_session(&client, url).await, Outcome::Complete));
    drop(mock);
}
