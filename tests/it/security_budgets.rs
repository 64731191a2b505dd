//! Issue 23 items 6 and 8: a key's daily cost limit holds when its sessions run at once
//! (each session reserves its maximum cost first), `--max-sessions-per-key` caps a key's
//! concurrent sessions, and a session's slot is freed when its coordination ends, not when
//! its client finished reading.
//!
//! `MASSGEN_BUDGETS_BIN` runs these against another build of the server (the binary before
//! the fix: every test here fails on it).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::postgres::PgServer;
use crate::support::serving::{
    bin_from_env, metrics_text, post_at_once, rejected, serve_command, serve_on_db, until,
    zero_window_client,
};
use crate::support::{self, Proc, mock_stats, mock_upstream, panel_yaml, post, write};

const KEY_A: &str = "sk-mg-budget-key-a-0123456789";
const KEY_B: &str = "sk-mg-budget-key-b-0123456789";

/// The server under test: this build, or `MASSGEN_BUDGETS_BIN`.
fn server_bin() -> String {
    bin_from_env("MASSGEN_BUDGETS_BIN")
}

/// A simulator, and a server on it with `panel(simulator_url)` as its default panel, keys
/// A and B and `flags`.
struct Budgeted {
    mock: Proc,
    server: Proc,
    _dir: tempfile::TempDir,
}

fn start(panel: impl FnOnce(&str) -> String, flags: &[&str]) -> Budgeted {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let team = write(dir.path(), "team.yaml", &panel(&mock.url));
    let keys = write(dir.path(), "keys.txt", &format!("{KEY_A}\n{KEY_B}\n"));
    let mut cmd = serve_command(server_bin());
    cmd.arg("--config")
        .arg(&team)
        .arg("--api-keys-file")
        .arg(&keys)
        .args(flags);
    let server = support::start(cmd, "massgen listening on");
    Budgeted {
        mock,
        server,
        _dir: dir,
    }
}

/// Two simulated agents priced so that one session costs a few dollars (USD per million
/// tokens), each first token after `ttft_ms`, with an output cap (`max_tokens: 50`, above
/// what the simulator writes in one call) as real configs have: without one a session's
/// first round is counted at 4,096 output tokens an agent, which at these prices is more
/// than the day.
fn expensive(url: &str, ttft_ms: u64) -> String {
    let models = [
        format!("alpha:ttft_ms={ttft_ms},token_ms=1,vote=agent1"),
        format!("beta:ttft_ms={ttft_ms},token_ms=1,vote=agent1"),
    ];
    let models: Vec<&str> = models.iter().map(String::as_str).collect();
    panel_yaml(url, &models, "").replace(
        "\n      model: ",
        "\n      pricing: {input_per_million: 2000, output_per_million: 8000}\n      max_tokens: 50\n      model: ",
    )
}

fn chat_body(stream: bool) -> Value {
    json!({
        "model": "massgen",
        "stream": stream,
        "messages": [{"role": "user", "content": "Why is the sky blue?"}]
    })
}

/// A question on each door: its path and body.
fn on_each_door() -> [(&'static str, Value); 3] {
    let q = "Why is the sky blue?";
    [
        ("/v1/chat/completions", chat_body(false)),
        ("/v1/responses", json!({"model": "massgen", "input": q})),
        (
            "/v1/messages",
            json!({"model": "massgen", "max_tokens": 1000, "messages": [{"role": "user", "content": q}]}),
        ),
    ]
}

/// Every `massgen_cost_usd_total` sample of `/metrics`, summed: what the server spent.
async fn spent_usd(url: &str) -> f64 {
    let text = metrics_text(url).await;
    text.lines()
        .filter(|l| l.starts_with("massgen_cost_usd_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The `error` object of a 429 on `path`, checked to be in that door's shape.
async fn refused(response: reqwest::Response, path: &str) -> (Value, Option<String>) {
    assert_eq!(response.status(), 429, "{path}");
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body: Value = response.json().await.unwrap();
    if path == "/v1/messages" {
        assert_eq!(body["type"], "error", "{body}");
    }
    assert_eq!(body["error"]["type"], "rate_limit_error", "{path}: {body}");
    (body["error"].clone(), retry_after)
}

/// The sessions of `results` (status, body) that were answered, and the most one of them
/// spent; every other one was refused for the key's day.
fn answered_and_most(results: Vec<(u16, Value)>) -> (usize, f64) {
    let (mut answered, mut most) = (0, 0.0f64);
    for (status, body) in results {
        match status {
            200 => {
                answered += 1;
                most = most.max(body["massgen_metadata"]["cost_usd"].as_f64().unwrap());
            }
            429 => assert_eq!(body["error"]["code"], "insufficient_quota", "{body}"),
            _ => panic!("{status}: {body}"),
        }
    }
    (answered, most)
}

/// Waits (≤ 10 s) until the simulator has had two calls: the first session is running.
async fn first_session_running(mock: &Proc) {
    until(
        "the first session's calls never came",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async { mock_stats(mock).await["requests"].as_u64().unwrap() >= 2 },
    )
    .await;
}

#[tokio::test]
async fn twenty_concurrent_sessions_of_a_key_keep_its_five_dollar_day() {
    let s = start(
        |url| expensive(url, 300),
        &["--max-key-cost-usd-per-day", "5"],
    );
    let url = s.server.url.clone();
    let urls = vec![url.clone(); 20];
    let results = post_at_once(urls, "/v1/chat/completions", Some(KEY_A), &chat_body(false)).await;
    let (answered, most) = answered_and_most(results);
    assert!(answered >= 1, "at least one session ran");
    let spent = spent_usd(&url).await;
    eprintln!(
        "20 sessions on a $5 day: {answered} answered, ${spent:.2} spent, at most ${most:.2} by one"
    );
    // A session may overshoot its reservation by the calls in flight when it reached it;
    // the day as a whole by no more than one session's spend.
    assert!(
        spent <= 5.0 + most,
        "spent ${spent:.2} of a $5 day ({answered} sessions answered, the most one spent ${most:.2})"
    );
}

#[tokio::test]
async fn a_hundred_tiny_budget_requests_keep_a_five_dollar_day() {
    // Each request asks for a limit far below one call's cost. Its agents' first calls run
    // at once whatever the limit, so each session reserves at least what that first round
    // can cost: before, each reserved its $0.000001 and all of them ran a round (one run:
    // 100 requests, $20.24 spent on a $5 day).
    let s = start(
        |url| expensive(url, 300),
        &["--max-key-cost-usd-per-day", "5"],
    );
    let url = s.server.url.clone();
    let mut body = chat_body(false);
    body["massgen"] = json!({"max_cost_usd": 0.000001});
    let results = post_at_once(
        vec![url.clone(); 100],
        "/v1/chat/completions",
        Some(KEY_A),
        &body,
    )
    .await;
    let (answered, most) = answered_and_most(results);
    let spent = spent_usd(&url).await;
    let calls = mock_stats(&s.mock).await["requests"].as_u64().unwrap();
    eprintln!(
        "100 requests of max_cost_usd 0.000001 on a $5 day: {answered} answered, {calls} upstream calls, ${spent:.2} spent, at most ${most:.2} by one"
    );
    assert!(answered >= 1, "at least one session ran");
    // The day is kept but for what the calls running when the allowance ran out spent
    // beyond it: at most one session's worth.
    assert!(
        spent <= 5.0 + most,
        "spent ${spent:.2} of a $5 day ({answered} sessions answered, the most one spent ${most:.2})"
    );
}

#[tokio::test]
async fn tiny_budget_requests_on_two_postgresql_replicas_keep_the_day() {
    // As above, 80 requests split over two replicas sharing the day (one run before: $16.19
    // spent on a $5 day).
    let Some(pg) = PgServer::start() else { return };
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let team = write(dir.path(), "team.yaml", &expensive(&mock.url, 300));
    let keys = write(dir.path(), "keys.txt", &format!("{KEY_A}\n{KEY_B}\n"));
    let flags: Vec<String> = [
        "--config",
        team.to_str().unwrap(),
        "--api-keys-file",
        keys.to_str().unwrap(),
        "--max-key-cost-usd-per-day",
        "5",
    ]
    .map(String::from)
    .to_vec();
    let a = serve_on(&flags, &pg.url());
    let b = serve_on(&flags, &pg.url());
    let mut body = chat_body(false);
    body["massgen"] = json!({"max_cost_usd": 0.000001});
    let urls = (0..80).map(|i| {
        if i % 2 == 0 {
            a.url.clone()
        } else {
            b.url.clone()
        }
    });
    let results = post_at_once(urls, "/v1/chat/completions", Some(KEY_A), &body).await;
    let (answered, most) = answered_and_most(results);
    let spent = spent_usd(&a.url).await + spent_usd(&b.url).await;
    eprintln!(
        "80 requests of max_cost_usd 0.000001 on two replicas, a $5 day: {answered} answered, ${spent:.2} spent"
    );
    assert!(answered >= 1);
    assert!(spent <= 5.0 + most, "spent ${spent:.2} of a $5 day");
}

#[tokio::test]
async fn with_a_session_cap_a_keys_sessions_run_at_once_within_its_day() {
    // Each session reserves its $1 cap: five at once fit in the $5 day, the sixth does not.
    let s = start(
        |url| expensive(url, 1500),
        &[
            "--max-key-cost-usd-per-day",
            "5",
            "--max-session-cost-usd",
            "1",
        ],
    );
    let url = s.server.url.clone();
    let urls = vec![url.clone(); 20];
    let results = post_at_once(urls, "/v1/chat/completions", Some(KEY_A), &chat_body(false)).await;
    let mut statuses = Vec::new();
    for (status, body) in results {
        if status == 429 {
            assert_eq!(body["error"]["code"], "insufficient_quota", "{body}");
        } else if status == 200 {
            let cap = body["massgen_metadata"]["max_cost_usd"].as_f64().unwrap();
            assert!(cap <= 1.0, "{body}");
        }
        statuses.push(status);
    }
    let ran = statuses.iter().filter(|s| **s != 429).count();
    let spent = spent_usd(&url).await;
    eprintln!("20 sessions of at most $1 on a $5 day: {ran} ran, ${spent:.2} spent");
    assert!((2..=5).contains(&ran), "{statuses:?}");
    // Each stops at its $1 but the calls it had running finish (about $0.25 more here).
    // Without reservations all twenty ran, each given $1 of the $5.
    assert!(spent <= 5.0 + 0.5 * ran as f64, "spent ${spent:.2}");
}

#[tokio::test]
async fn a_key_that_cannot_reserve_is_refused_before_any_upstream_call() {
    // No session cap: a session reserves all that is left of the day, so while it runs
    // the key's next session cannot reserve anything. A session costs about $3.40 here and
    // reserves at least its first round (about $2.40): $8 leaves room for a second after.
    let s = start(
        |url| expensive(url, 3000),
        &["--max-key-cost-usd-per-day", "8"],
    );
    let url = s.server.url.clone();
    let first = {
        let url = url.clone();
        tokio::spawn(async move {
            post(&url, "/v1/chat/completions", Some(KEY_A), &chat_body(false)).await
        })
    };
    first_session_running(&s.mock).await;
    let before = mock_stats(&s.mock).await["requests"].clone();
    for (path, body) in on_each_door() {
        let (error, retry_after) = refused(post(&url, path, Some(KEY_A), &body).await, path).await;
        let message = error["message"].as_str().unwrap();
        if path != "/v1/messages" {
            assert_eq!(error["code"], "insufficient_quota", "{error}");
        }
        assert!(message.contains("--max-key-cost-usd-per-day"), "{message}");
        assert!(message.contains("reserved"), "{message}");
        // The running session gives back what it did not spend when it ends.
        assert!(retry_after.is_some(), "{path}");
    }
    assert_eq!(
        mock_stats(&s.mock).await["requests"],
        before,
        "a refused session made no upstream call"
    );
    // Another key has its own day.
    let b = post(&url, "/v1/chat/completions", Some(KEY_B), &chat_body(false)).await;
    assert_eq!(b.status(), 200);
    assert_eq!(first.await.unwrap().status(), 200);
    // The first session ended: what it did not spend is A's again.
    let again = post(&url, "/v1/chat/completions", Some(KEY_A), &chat_body(false)).await;
    assert_eq!(again.status(), 200);
}

#[tokio::test]
async fn a_key_at_its_session_cap_is_refused_on_every_door_and_others_are_not() {
    let s = start(|url| expensive(url, 3000), &["--max-sessions-per-key", "1"]);
    let url = s.server.url.clone();
    let first = {
        let url = url.clone();
        tokio::spawn(async move {
            post(&url, "/v1/chat/completions", Some(KEY_A), &chat_body(false)).await
        })
    };
    first_session_running(&s.mock).await;
    for (path, body) in on_each_door() {
        let (error, retry_after) = refused(post(&url, path, Some(KEY_A), &body).await, path).await;
        if path != "/v1/messages" {
            assert_eq!(error["code"], "too_many_sessions", "{error}");
        }
        let message = error["message"].as_str().unwrap();
        assert!(message.contains("--max-sessions-per-key"), "{message}");
        assert!(!message.contains(KEY_A), "{message}");
        assert_eq!(retry_after.as_deref(), Some("1"), "{path}");
    }
    let b = post(&url, "/v1/chat/completions", Some(KEY_B), &chat_body(false)).await;
    assert_eq!(b.status(), 200);
    assert_eq!(first.await.unwrap().status(), 200);
    let again = post(&url, "/v1/chat/completions", Some(KEY_A), &chat_body(false)).await;
    assert_eq!(again.status(), 200, "the ended session gave its place back");
    let metrics = metrics_text(&url).await;
    let refused = rejected(&metrics, "max_sessions_per_key");
    assert_eq!(refused, Some(3.0), "{metrics}");
}

#[tokio::test]
async fn a_keys_sessions_one_after_another_find_their_places_and_allowance_given_back() {
    // Without a session cap each session reserves all that is left of the day, and every
    // cap allows one session at a time: a client that sends its next question as soon as
    // it has read an answer must never be refused for the session before.
    let s = start(
        |url| expensive(url, 1),
        &[
            "--max-key-cost-usd-per-day",
            "1000",
            "--max-sessions",
            "1",
            "--max-sessions-per-key",
            "1",
        ],
    );
    for i in 0..12 {
        let body = if i % 2 == 0 {
            chat_body(true)
        } else {
            chat_body(false)
        };
        let response = post(&s.server.url, "/v1/chat/completions", Some(KEY_A), &body).await;
        let status = response.status();
        let text = response.text().await.unwrap();
        assert_eq!(status, 200, "session {i}: {text}");
    }
}

/// `massgen serve` with `flags`, keeping records, spend and reservations in `db`.
fn serve_on(flags: &[String], db: &str) -> Proc {
    serve_on_db(server_bin(), flags, db)
}

/// Polls `sql` on `pg` every 100 ms until it prints `want` (bounded by `within`).
async fn pg_until(pg: &PgServer, sql: &str, want: &str, within: Duration) {
    pg.until(sql, want, within, Duration::from_millis(100))
        .await;
}

#[tokio::test]
async fn replicas_on_one_postgresql_share_a_keys_day_and_a_crashed_ones_reservation_expires() {
    let Some(pg) = PgServer::start() else { return };
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let team = write(dir.path(), "team.yaml", &expensive(&mock.url, 1500));
    let keys = write(dir.path(), "keys.txt", &format!("{KEY_A}\n{KEY_B}\n"));
    let flags: Vec<String> = [
        "--config",
        team.to_str().unwrap(),
        "--api-keys-file",
        keys.to_str().unwrap(),
        "--max-key-cost-usd-per-day",
        "5",
        "--records-heartbeat-seconds",
        "1",
        "--records-interrupted-after-seconds",
        "3",
    ]
    .map(String::from)
    .to_vec();
    let a = serve_on(&flags, &pg.url());
    let b = serve_on(&flags, &pg.url());

    // Ten sessions of A at once, half on each replica: one reserves the whole day (no
    // session cap), and neither replica lets another start while it runs.
    let urls = (0..10).map(|i| {
        if i % 2 == 0 {
            a.url.clone()
        } else {
            b.url.clone()
        }
    });
    let results = post_at_once(urls, "/v1/chat/completions", Some(KEY_A), &chat_body(false)).await;
    let (answered, most) = answered_and_most(results);
    let spent = spent_usd(&a.url).await + spent_usd(&b.url).await;
    eprintln!("10 sessions on two replicas, a $5 day: {answered} answered, ${spent:.2} spent");
    assert!(answered >= 1);
    assert!(spent <= 5.0 + most, "spent ${spent:.2} of a $5 day");
    // Every reservation is given back once its session's spend is committed.
    pg_until(
        &pg,
        "SELECT COUNT(*) FROM reservations",
        "0",
        Duration::from_secs(15),
    )
    .await;

    // A replica that dies with a running session leaves its reservation; the other
    // replica counts it until the dead one's heartbeat is 3 s old, then B's day is free.
    let mut b = b;
    let running = {
        let url = b.url.clone();
        // Its answer never comes: the replica is killed under it.
        tokio::spawn(async move {
            let _ = support::client()
                .post(format!("{url}/v1/chat/completions"))
                .bearer_auth(KEY_B)
                .json(&chat_body(false))
                .send()
                .await;
        })
    };
    pg_until(
        &pg,
        "SELECT COUNT(*) FROM reservations",
        "1",
        Duration::from_secs(10),
    )
    .await;
    assert!(b.kill_9());
    let _ = running.await;
    let held = post(
        &a.url,
        "/v1/chat/completions",
        Some(KEY_B),
        &chat_body(false),
    )
    .await;
    let (error, _) = refused(held, "/v1/chat/completions").await;
    assert!(
        error["message"].as_str().unwrap().contains("reserved"),
        "{error}"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response = post(
            &a.url,
            "/v1/chat/completions",
            Some(KEY_B),
            &chat_body(false),
        )
        .await;
        if response.status() == 200 {
            break;
        }
        assert_eq!(response.status(), 429);
        assert!(
            Instant::now() < deadline,
            "the dead replica's reservation never expired"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    b.terminate(Duration::from_secs(1));
}

/// Words each agent answers with: the final answer is streamed a word an event, far more
/// than the server buffers for a client whose HTTP/2 window is 0 (before the fix that
/// session stopped there until its stall timeout), but far less than what the server now
/// reads ahead for a slow client. The simulator streams about 700 words a second (a debug
/// build), so the session (answers, votes, presentation) takes about 6 s.
const LONG_WORDS: usize = 2_000;

#[tokio::test]
async fn a_session_that_ended_frees_its_slot_though_its_client_never_reads() {
    let models = [
        format!("alpha:ttft_ms=10,token_ms=0,words={LONG_WORDS},vote=agent1"),
        format!("beta:ttft_ms=10,token_ms=0,words={LONG_WORDS},vote=agent1"),
    ];
    let s = start(
        |url| {
            let models: Vec<&str> = models.iter().map(String::as_str).collect();
            panel_yaml(url, &models, "")
        },
        &[
            "--max-sessions",
            "1",
            "--client-stall-timeout-seconds",
            "120",
        ],
    );
    let url = &s.server.url;
    // HTTP/2 with a zero window: the response headers arrive, no byte of the body can. The
    // client never reads (an HTTP/1 client that does not read is the same once the
    // socket buffers are full, which takes megabytes).
    let silent = zero_window_client(Duration::from_secs(150));
    let held = silent
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(KEY_A)
        .json(&chat_body(true))
        .send()
        .await
        .unwrap();
    assert_eq!(held.status(), 200);
    assert_eq!(held.version(), reqwest::Version::HTTP_2);

    // The silent client's session runs to its end (about 6 s); then its slot is free
    // although its client has read nothing, long before its stall timeout (120 s).
    let started = Instant::now();
    let mut last = 0;
    while started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let response = post(url, "/v1/chat/completions", Some(KEY_B), &chat_body(true)).await;
        last = response.status().as_u16();
        if last == 200 {
            break;
        }
        assert_eq!(last, 429, "only the slot may refuse it");
    }
    assert_eq!(
        last,
        200,
        "the slot was still held after {:?}",
        started.elapsed()
    );
    let stats = mock_stats(&s.mock).await;
    let streamed = stats["completion_tokens"].as_u64().unwrap();
    assert!(
        streamed >= 3 * LONG_WORDS as u64,
        "the session ran to its end: {stats}"
    );
    drop(held);
}
