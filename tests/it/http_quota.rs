//! `--max-key-cost-usd-per-day` through the real binary and the simulator: a key that
//! spent its day's allowance is refused on every door, in each door's error shape, while
//! another key keeps working; the spend is kept in the records database, so it outlives a
//! restart and one replica refuses what another let a key spend.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::Response;
use serde_json::{Value, json};

use crate::support::postgres::PgServer;
use crate::support::{
    self, Proc, Setup, get, mock_upstream, panel_yaml, post, priced_panel, sample, write,
};

const KEY_A: &str = "sk-mg-quota-key-a-0123456789";
const KEY_B: &str = "sk-mg-quota-key-b-0123456789";
/// Enough for one session's first round at the priced panel's prices (the server reserves
/// at least that before a session starts: about $0.0025 with the agents' 50-token output
/// cap), less than a whole session costs (about $0.0034).
const LIMIT: &str = "0.003";

const FAST: [&str; 2] = [
    "alpha:ttft_ms=10,token_ms=1,vote=agent1",
    "beta:ttft_ms=30,token_ms=1,vote=agent1",
];

/// Writes the priced default panel, an unpriced `massgen/unpriced` and the two keys into
/// `dir`, on the simulator at `url`; returns the server's flags.
fn quota_configs(dir: &Path, url: &str) -> Vec<String> {
    let team = write(
        dir,
        "team.yaml",
        &priced_panel(url, &FAST, "")
            .replace("\n      model: ", "\n      max_tokens: 50\n      model: "),
    );
    let configs = dir.join("configs");
    std::fs::create_dir_all(&configs).unwrap();
    write(&configs, "unpriced.yaml", &panel_yaml(url, &FAST, ""));
    let keys = write(dir, "keys.txt", &format!("{KEY_A}\n{KEY_B}\n"));
    [
        "--config",
        team.to_str().unwrap(),
        "--configs-dir",
        configs.to_str().unwrap(),
        "--api-keys-file",
        keys.to_str().unwrap(),
        "--max-key-cost-usd-per-day",
        LIMIT,
    ]
    .map(String::from)
    .to_vec()
}

fn quota_server() -> Setup {
    Setup::start(|url, dir| quota_configs(dir, url))
}

/// `massgen serve` with `flags` keeping records and spend in `db`.
fn serve_on(flags: &[String], db: &str) -> Proc {
    let mut cmd = Command::new(support::bin());
    cmd.args(["serve", "--host", "127.0.0.1", "--port", "0"])
        .args(flags)
        .env("MASSGEN_SERVER_RECORDS_DB", db);
    support::start(cmd, "massgen listening on")
}

/// Whether `key` is refused for its daily quota on `url` within a few seconds (another
/// replica's spend arrives once its writer committed it: about 100 ms).
async fn refused_soon(url: &str, key: &str) -> bool {
    let [chat, ..] = on_each_door("massgen");
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let response = post(url, chat.0, Some(key), &chat.1).await;
        if response.status() == 429 {
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["code"], "insufficient_quota", "{body}");
            return true;
        }
        assert_eq!(response.status(), 200);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// A question for `model` on each door: its path and body.
fn on_each_door(model: &str) -> [(&'static str, Value); 3] {
    let q = "Why is the sky blue?";
    [
        (
            "/v1/chat/completions",
            json!({"model": model, "messages": [{"role": "user", "content": q}]}),
        ),
        ("/v1/responses", json!({"model": model, "input": q})),
        (
            "/v1/messages",
            json!({"model": model, "max_tokens": 1000, "messages": [{"role": "user", "content": q}]}),
        ),
    ]
}

async fn ok_json(response: Response, what: &str) -> Value {
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{what}: {body}");
    body
}

#[tokio::test]
async fn a_key_over_its_daily_cost_is_refused_on_every_door_and_the_other_key_is_not() {
    let s = quota_server();
    let url = &s.server.url;
    let [chat, ..] = on_each_door("massgen");

    // The first session may spend only what is left of the day's allowance: it stops at
    // its budget, and having spent more than the limit, A is done for today.
    let body = ok_json(post(url, chat.0, Some(KEY_A), &chat.1).await, "A's first").await;
    let meta = &body["massgen_metadata"];
    assert_eq!(meta["max_cost_usd"], 0.003, "{meta}");
    assert!(meta["cost_usd"].as_f64().unwrap() >= 0.003, "{meta}");

    for (path, request) in on_each_door("massgen") {
        let response = post(url, path, Some(KEY_A), &request).await;
        assert_eq!(response.status(), 429, "{path}");
        assert_eq!(response.headers()["x-should-retry"], "false", "{path}");
        assert!(response.headers().get("retry-after").is_none(), "{path}");
        let body: Value = response.json().await.unwrap();
        let message = if path == "/v1/messages" {
            assert_eq!(body["type"], "error", "{body}");
            assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
            body["error"]["message"].as_str().unwrap().to_string()
        } else {
            assert_eq!(body["error"]["code"], "insufficient_quota", "{body}");
            assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
            body["error"]["message"].as_str().unwrap().to_string()
        };
        for part in ["$0.003", "--max-key-cost-usd-per-day", "00:00 UTC"] {
            assert!(message.contains(part), "{path}: {message}");
        }
        assert!(!message.contains(KEY_A), "{message}");
    }
    // Refused before a stream starts: a plain JSON error, not an SSE stream.
    let mut streamed = chat.1.clone();
    streamed["stream"] = json!(true);
    let response = post(url, chat.0, Some(KEY_A), &streamed).await;
    assert_eq!(response.status(), 429);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "insufficient_quota", "{body}");

    // B has spent nothing: it is answered (once: at this limit one session spends it all).
    let [.., messages] = on_each_door("massgen");
    let body = ok_json(post(url, messages.0, Some(KEY_B), &messages.1).await, "B").await;
    assert_eq!(body["massgen_metadata"]["max_cost_usd"], 0.003, "{body}");
    let again = post(url, messages.0, Some(KEY_B), &messages.1).await;
    assert_eq!(again.status(), 429);

    let metrics = get(&format!("{url}/metrics"), None)
        .await
        .text()
        .await
        .unwrap();
    let refused = sample(
        &metrics,
        "massgen_rejected_requests_total",
        &[("reason", "key_quota")],
    );
    assert_eq!(refused, Some(5.0), "{metrics}");
}

#[tokio::test]
async fn with_a_daily_limit_a_panel_without_prices_is_refused() {
    let s = quota_server();
    let [chat, ..] = on_each_door("massgen/unpriced");
    let response = post(&s.server.url, chat.0, Some(KEY_B), &chat.1).await;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("has no price") && message.contains("--max-key-cost-usd-per-day"),
        "{message}"
    );
}

#[tokio::test]
async fn the_days_spend_outlives_a_restart_on_sqlite() {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let flags = quota_configs(dir.path(), &mock.url);
    let db = format!("sqlite://{}", dir.path().join("records.db").display());
    let mut server = serve_on(&flags, &db);
    let [chat, ..] = on_each_door("massgen");
    ok_json(post(&server.url, chat.0, Some(KEY_A), &chat.1).await, "A").await;
    assert!(refused_soon(&server.url, KEY_A).await);
    // The writer commits within about 100 ms. Waiting for it rather than counting on the
    // shutdown's drain: that drain returns at once while a batch the writer task took is
    // still in flight, and the process may exit before it commits.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(server.terminate(Duration::from_secs(20)).is_some());

    let server = serve_on(&flags, &db);
    let response = post(&server.url, chat.0, Some(KEY_A), &chat.1).await;
    assert_eq!(
        response.status(),
        429,
        "the spend was read back from the database"
    );
    ok_json(post(&server.url, chat.0, Some(KEY_B), &chat.1).await, "B").await;
}

#[tokio::test]
async fn a_key_that_spent_on_one_replica_is_refused_on_another() {
    let Some(pg) = PgServer::start() else { return };
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let flags = quota_configs(dir.path(), &mock.url);
    let (a, b) = (serve_on(&flags, &pg.url()), serve_on(&flags, &pg.url()));
    let [chat, ..] = on_each_door("massgen");
    ok_json(post(&a.url, chat.0, Some(KEY_A), &chat.1).await, "A on a").await;
    pg_until(&pg, "SELECT COUNT(*), bool_and(usd > 0) FROM spend", "1|t").await;
    // b never ran a session of A: only the database can tell it, on A's first request.
    let response = post(&b.url, chat.0, Some(KEY_A), &chat.1).await;
    assert_eq!(response.status(), 429, "b refuses what A spent on a");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "insufficient_quota", "{body}");
    ok_json(post(&b.url, chat.0, Some(KEY_B), &chat.1).await, "B on b").await;
}

/// Polls `sql` on `pg` until it prints `want` (bounded: the writer commits in ~100 ms).
async fn pg_until(pg: &PgServer, sql: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while pg.query(sql).trim() != want {
        assert!(Instant::now() < deadline, "{sql}: {}", pg.query(sql));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_postgresql_database_of_the_previous_schema_keeps_its_sessions_and_gains_spend() {
    let Some(pg) = PgServer::start() else { return };
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let flags = quota_configs(dir.path(), &mock.url);
    let [chat, ..] = on_each_door("massgen");
    let mut server = serve_on(&flags, &pg.url());
    let response = post(&server.url, chat.0, Some(KEY_A), &chat.1).await;
    let id = response.headers()["x-massgen-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    ok_json(response, "A").await;
    let status = format!("SELECT status FROM sessions WHERE id = '{id}'");
    pg_until(&pg, &status, "completed").await;
    let events = format!("SELECT COUNT(*) FROM events WHERE session_id = '{id}'");
    let stored = pg.query(&events);
    assert!(server.terminate(Duration::from_secs(20)).is_some());
    // Back to the schema before 0002, as the previous version left it: its data stays.
    pg.query(
        "DROP TABLE eval_items; DROP TABLE eval_runs; DROP TABLE response_items; \
         DROP TABLE responses; DROP TABLE response_owners; DROP TABLE reservations; \
         DROP TABLE spend; DROP INDEX sessions_by_owner_door; \
         DELETE FROM _sqlx_migrations WHERE version >= 2",
    );
    assert_eq!(
        pg.query("SELECT MAX(version) FROM _sqlx_migrations").trim(),
        "1"
    );

    let server = serve_on(&flags, &pg.url());
    assert_eq!(
        pg.query("SELECT MAX(version) FROM _sqlx_migrations").trim(),
        "7"
    );
    assert_eq!(pg.query(&events), stored, "the events are kept");
    let record = get(&format!("{}/v1/sessions/{id}", server.url), Some(KEY_A)).await;
    assert_eq!(record.status(), 200);
    let record: Value = record.json().await.unwrap();
    assert_eq!(record["status"], "completed", "{record}");
    // The spend of before 0002 was not kept; from now on it is.
    assert_eq!(pg.query("SELECT COUNT(*) FROM spend").trim(), "0");
    ok_json(
        post(&server.url, chat.0, Some(KEY_A), &chat.1).await,
        "A again",
    )
    .await;
    pg_until(&pg, "SELECT COUNT(*), bool_and(usd > 0) FROM spend", "1|t").await;
}

#[tokio::test]
async fn with_the_database_down_sessions_start_and_the_process_counts_its_own_spend() {
    let Some(mut pg) = PgServer::start() else {
        return;
    };
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let server = serve_on(&quota_configs(dir.path(), &mock.url), &pg.url());
    pg.stop();
    let [chat, ..] = on_each_door("massgen");
    ok_json(post(&server.url, chat.0, Some(KEY_A), &chat.1).await, "A").await;
    assert!(
        refused_soon(&server.url, KEY_A).await,
        "A's spend still counts"
    );
    ok_json(post(&server.url, chat.0, Some(KEY_B), &chat.1).await, "B").await;
}
