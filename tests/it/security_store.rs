//! Issue 36 part 2 on the real binary with the simulator: a stored conversation is a chain
//! (each response keeps its own turn and its parent's id), so a small follow-up of a long
//! conversation brings in at most the per-request cap of stored text, charged to the body
//! budget (memory stays flat); a stored follow-up writes about its own size; one key can
//! neither fill the records disk (`--max-stored-bytes-per-key`) nor evict another key's
//! responses from a memory store; and on PostgreSQL a chain continues across replicas.
//!
//! `MASSGEN_STORE_BIN` runs them against another build (the one before the change, to see
//! them fail there).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::Row;

use crate::support::postgres::PgServer;
use crate::support::serving::{bin_from_env, serve_command, until};
use crate::support::{Proc, client, get, panel_yaml, post, rss, start, write};

const KEYS: &str = "store-quota-one\nstore-quota-two";
const ONE: &str = "store-quota-one";
const TWO: &str = "store-quota-two";

fn bin() -> String {
    bin_from_env("MASSGEN_STORE_BIN")
}

/// One fast agent that answers alone: the tests measure what the server holds, not the
/// deliberation.
fn solo_panel(url: &str) -> String {
    panel_yaml(
        url,
        &["solo:ttft_ms=1,token_ms=1,words=5"],
        "orchestrator:\n  skip_coordination_rounds: true\n  skip_final_presentation: true\n",
    )
}

/// `massgen serve` on the solo panel with `extra` flags; `db`: `MASSGEN_SERVER_RECORDS_DB`
/// (else a SQLite file of its own); `keys`: the API keys, one a line.
fn serve(dir: &Path, mock: &str, db: Option<&str>, keys: Option<&str>, extra: &[&str]) -> Proc {
    let config = write(dir, "solo.yaml", &solo_panel(mock));
    let mut cmd: Command = serve_command(bin());
    cmd.arg("--config").arg(&config).args(extra);
    if let Some(keys) = keys {
        cmd.arg("--api-keys-file").arg(write(dir, "keys.txt", keys));
    }
    if let Some(db) = db {
        cmd.env("MASSGEN_SERVER_RECORDS_DB", db);
    }
    start(cmd, "massgen listening on")
}

async fn create(url: &str, key: Option<&str>, body: &Value) -> (u16, Value) {
    let r = post(url, "/v1/responses", key, body).await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A turn of `bytes` of text, continuing `previous` when given.
fn turn(bytes: usize, previous: Option<&str>, store: bool) -> Value {
    let mut body = json!({"model": "massgen", "input": "x".repeat(bytes), "store": store});
    if let Some(id) = previous {
        body["previous_response_id"] = json!(id);
    }
    body
}

/// A small follow-up of `previous` (about 130 bytes of body).
fn follow_up(previous: &str, store: bool) -> Value {
    json!({"model": "massgen", "input": "And what follows from that?",
        "previous_response_id": previous, "store": store})
}

fn id(object: &Value) -> String {
    object["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id: {object}"))
        .to_string()
}

/// Bytes process `pid` caused to be written to storage so far (Linux's `write_bytes`).
fn written(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// Waits (at most 20 s) until `pid` has written nothing for 500 ms: the background writers
/// are done.
async fn writes_settled(pid: u32) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = written(pid);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = written(pid);
        if now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "{pid} kept writing for 20 s");
        last = now;
    }
}

/// Whether the SQLite file `db` holds response `id` (read from outside, read-only).
async fn in_file(db: &Path, id: &str) -> bool {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(db)
        .read_only(true);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let n: i64 = sqlx::query("SELECT COUNT(*) FROM responses WHERE id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
    pool.close().await;
    n == 1
}

/// Sends `body` and waits until what it makes the server write is written: the session
/// record, and the stored response when `store`. The bytes written meanwhile.
async fn bytes_written_by(server: &Proc, db: &Path, body: &Value) -> (u64, String) {
    let before = writes_settled(server.pid()).await;
    let response = post(&server.url, "/v1/responses", None, body).await;
    assert_eq!(response.status(), 200);
    let session = response.headers()["x-massgen-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let object: Value = response.json().await.unwrap();
    let response_id = id(&object);
    let url = format!("{}/v1/sessions/{session}", server.url);
    until(
        "the session record",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || {
            let url = url.clone();
            async move {
                let record: Value = get(&url, None).await.json().await.unwrap_or(Value::Null);
                record["stored"] == true
            }
        },
    )
    .await;
    if body["store"] == true {
        until(
            "the stored response",
            Duration::from_secs(20),
            Duration::from_millis(100),
            || in_file(db, &response_id),
        )
        .await;
    }
    (writes_settled(server.pid()).await - before, response_id)
}

/// Sends eight `body`s to `server` at once while sampling its resident memory (every
/// 10 ms, at most 120 s), failing as soon as it grows by more than `ceiling`: each status
/// and JSON body, and the growth at the peak.
async fn eight_at_once(server: &Proc, body: &Value, ceiling: u64) -> (Vec<(u16, Value)>, u64) {
    let base = rss(server.pid());
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (url, body) = (server.url.clone(), body.clone());
            tokio::spawn(async move { create(&url, None, &body).await })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut peak = base;
    while !tasks.iter().all(|t| t.is_finished()) {
        peak = peak.max(rss(server.pid()));
        assert!(
            peak - base <= ceiling,
            "eight 130-byte follow-ups took the server from {} MB to {} MB",
            base >> 20,
            peak >> 20
        );
        assert!(Instant::now() < deadline, "the follow-ups never finished");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    (answers, peak - base)
}

#[tokio::test]
async fn a_follow_up_of_a_conversation_stored_whole_before_the_upgrade_is_refused() {
    use massgen::app::store::RecordDb;
    use massgen::config::RecordsDb;
    use massgen_core::provider::Message;

    let mock = crate::support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("records.db");
    // What the previous version kept for the fifth of five 9.5 MB turns: the whole
    // conversation (47.5 MB) in one row; and a short one.
    let db = RecordDb::connect(&RecordsDb::Sqlite(file.clone()))
        .await
        .unwrap();
    db.migrate(5).await.unwrap();
    let mut long = Vec::new();
    for _ in 0..5 {
        long.push(Message::user("x".repeat(9_500_000)));
        long.push(Message::assistant("Noted."));
    }
    let short = vec![
        Message::user("What is the capital of France?"),
        Message::assistant("Paris."),
    ];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for (id, messages) in [("resp_long", long), ("resp_short", short)] {
        let conversation = json!({"system": [], "messages": messages}).to_string();
        sqlx::query(
            "INSERT INTO responses (id, owner, created_ms, conversation, body) VALUES ($1, '', $2, $3, $4)",
        )
        .bind(id)
        .bind(now)
        .bind(conversation)
        .bind(json!({"id": id, "object": "response"}).to_string())
        .execute(db.pool())
        .await
        .unwrap();
    }
    db.close().await;
    drop(db);
    let db = format!("sqlite://{}", file.display());
    let server = serve(dir.path(), &mock.url, Some(&db), None, &[]);
    let fetched = get(&format!("{}/v1/responses/resp_long", server.url), None).await;
    assert_eq!(fetched.status(), 200);
    let (answers, growth) = eight_at_once(&server, &follow_up("resp_long", false), 64 << 20).await;
    for (status, object) in &answers {
        assert_eq!(*status, 400, "{object}");
        assert_eq!(object["error"]["param"], "previous_response_id", "{object}");
        assert_eq!(
            object["error"]["code"], "conversation_too_large",
            "{object}"
        );
    }
    eprintln!(
        "eight follow-ups of a 47.5 MB conversation: RSS +{} MB",
        growth >> 20
    );
    // A conversation stored whole goes on.
    let (status, object) = create(&server.url, None, &follow_up("resp_short", true)).await;
    assert_eq!(status, 200, "{object}");
    let (status, object) = create(&server.url, None, &follow_up(&id(&object), true)).await;
    assert_eq!(status, 200, "{object}");
}

#[tokio::test]
async fn a_small_follow_up_of_a_long_conversation_is_refused_or_bounded_in_memory() {
    const TURN: usize = 9_500_000;
    // What the eight follow-ups may add at their peak: the body budget (32 MiB) admits one
    // 28.5 MB conversation at a time, which a session holds about twice (its messages and
    // the upstream request), and freed pages go back within a second. Unbounded, the
    // eight would bring in 8 x 47.5 MB.
    const CEILING: u64 = 192 * 1024 * 1024;
    let mock = crate::support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &mock.url, None, None, &[]);
    // Five 9.5 MB turns, each continuing the last one stored.
    let mut last: Option<String> = None;
    let mut refused = None;
    for n in 0..5 {
        let (status, object) = create(&server.url, None, &turn(TURN, last.as_deref(), true)).await;
        match status {
            200 => last = Some(id(&object)),
            400 => {
                assert_eq!(object["error"]["param"], "previous_response_id", "{object}");
                assert_eq!(
                    object["error"]["code"], "conversation_too_large",
                    "{object}"
                );
                refused = Some(n);
                break;
            }
            _ => panic!("turn {n}: {status} {object}"),
        }
    }
    let last = last.unwrap();
    writes_settled(server.pid()).await;
    // Eight small follow-ups of the longest conversation stored, at once.
    let (answers, growth) = eight_at_once(&server, &follow_up(&last, false), CEILING).await;
    let mut statuses = Vec::new();
    for (status, object) in answers {
        match status {
            200 => {}
            400 => assert_eq!(object["error"]["param"], "previous_response_id", "{object}"),
            503 => assert_eq!(object["error"]["code"], "server_busy", "{object}"),
            _ => panic!("follow-up: {status} {object}"),
        }
        statuses.push(status);
    }
    eprintln!(
        "turns stored before the refusal: {refused:?}; follow-ups {statuses:?}; RSS +{} MB",
        growth >> 20
    );
    assert!(
        refused.is_some(),
        "five 9.5 MB turns all continued one conversation: nothing bounds what a follow-up brings in"
    );
}

#[tokio::test]
async fn a_stored_follow_up_writes_about_its_own_size() {
    const TURN: usize = 3_000_000;
    let mock = crate::support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("records.db");
    let db = format!("sqlite://{}", file.display());
    let server = serve(dir.path(), &mock.url, Some(&db), None, &[]);
    let before = writes_settled(server.pid()).await;
    let mut last: Option<String> = None;
    for _ in 0..3 {
        let (written, id) =
            bytes_written_by(&server, &file, &turn(TURN, last.as_deref(), true)).await;
        assert!(written > 0, "nothing written");
        last = Some(id);
    }
    let last = last.unwrap();
    // The measure works here: the three turns' own text reached the disk.
    let turns = written(server.pid()) - before;
    assert!(
        turns >= 3 * TURN as u64,
        "the three turns wrote {turns} bytes: this file system does not count writes"
    );
    let (unstored, _) = bytes_written_by(&server, &file, &follow_up(&last, false)).await;
    let (stored, _) = bytes_written_by(&server, &file, &follow_up(&last, true)).await;
    eprintln!(
        "a 9 MB conversation's follow-up wrote {unstored} bytes with store: false, {stored} with store: true"
    );
    assert!(
        stored < unstored + 256 * 1024,
        "a stored follow-up of a 9 MB conversation wrote {stored} bytes ({unstored} without storing it)"
    );
}

#[tokio::test]
async fn a_key_past_its_stored_bytes_gets_429_and_other_keys_store_on() {
    let mock = crate::support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(
        dir.path(),
        &mock.url,
        None,
        Some(KEYS),
        &["--max-stored-bytes-per-key", "3000000"],
    );
    let url = &server.url;
    let mut first: Option<String> = None;
    let mut refusal = None;
    for n in 0..10 {
        let response = post(
            url,
            "/v1/responses",
            Some(ONE),
            &turn(1_000_000, None, true),
        )
        .await;
        let status = response.status().as_u16();
        let retry = response.headers().get("x-should-retry").cloned();
        let object: Value = response.json().await.unwrap();
        match status {
            200 => {
                first.get_or_insert(id(&object));
            }
            429 => {
                refusal = Some((n, retry, object));
                break;
            }
            _ => panic!("{status} {object}"),
        }
    }
    let (n, retry, object) = refusal.expect("ten 1 MB responses of one key all stored");
    assert!(
        n >= 2,
        "refused after {n} responses of 1 MB under a 3 MB quota"
    );
    let error = &object["error"];
    assert_eq!(error["code"], "storage_quota_exceeded", "{object}");
    assert_eq!(error["type"], "rate_limit_error", "{object}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("--max-stored-bytes-per-key"),
        "{object}"
    );
    assert_eq!(retry.unwrap(), "false");
    // The key still runs sessions that store nothing, its stored responses stay readable
    // and continuable; the other key stores as before.
    let first = first.unwrap();
    let (status, _) = create(url, Some(ONE), &turn(10, None, false)).await;
    assert_eq!(status, 200);
    let (status, _) = create(url, Some(ONE), &follow_up(&first, false)).await;
    assert_eq!(status, 200);
    let fetched = client()
        .get(format!("{url}/v1/responses/{first}"))
        .bearer_auth(ONE)
        .send()
        .await
        .unwrap();
    assert_eq!(fetched.status(), 200);
    let (status, other) = create(url, Some(TWO), &turn(1_000_000, None, true)).await;
    assert_eq!(status, 200, "{other}");
}

#[tokio::test]
async fn in_a_memory_store_one_key_never_evicts_another_keys_responses() {
    let mock = crate::support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &mock.url, Some("memory"), Some(KEYS), &[]);
    let url = &server.url;
    let (status, kept) = create(url, Some(TWO), &turn(10, None, true)).await;
    assert_eq!(status, 200, "{kept}");
    let kept = id(&kept);
    // 80 MB of one key's responses: more than the whole memory store (64 MiB).
    let mut own = Vec::new();
    for _ in 0..20 {
        let (status, object) = create(url, Some(ONE), &turn(4_000_000, None, true)).await;
        assert_eq!(status, 200, "{object}");
        own.push(id(&object));
    }
    let fetch = |key: &'static str, id: String| async move {
        client()
            .get(format!("{url}/v1/responses/{id}"))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(
        fetch(TWO, kept).await,
        200,
        "another key's response was evicted"
    );
    // The key's own oldest went instead; its newest are there.
    assert_eq!(fetch(ONE, own[0].clone()).await, 404);
    assert_eq!(fetch(ONE, own[19].clone()).await, 200);
}

#[tokio::test]
async fn on_postgres_a_chain_goes_on_across_replicas_within_the_key_quota() {
    let Some(pg) = PgServer::start() else {
        return;
    };
    let mock = crate::support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let quota = ["--max-stored-bytes-per-key", "4000000"];
    let a = serve(dir.path(), &mock.url, Some(&pg.url()), Some(KEYS), &quota);
    let b = serve(dir.path(), &mock.url, Some(&pg.url()), Some(KEYS), &quota);
    // Turns of 1 MB alternate between the replicas: each continues the last, which the
    // other one stored (found in the database, or in its own memory for its own turns).
    let mut last: Option<String> = None;
    for (n, server) in [&a, &b, &a].into_iter().enumerate() {
        let body = turn(1_000_000, last.as_deref(), true);
        let previous = last.clone();
        let deadline = Instant::now() + Duration::from_secs(10);
        let object = loop {
            let (status, object) = create(&server.url, Some(ONE), &body).await;
            // The other replica's turn may not be written yet.
            if status == 400
                && object["error"]["code"] == "previous_response_not_found"
                && Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            assert_eq!(status, 200, "turn {n} after {previous:?}: {object}");
            break object;
        };
        // The agent saw every turn so far: about a token per 4 bytes of text.
        let tokens = object["usage"]["input_tokens"].as_u64().unwrap();
        assert!(
            tokens >= (n as u64 + 1) * 200_000,
            "turn {n}: {tokens} input tokens"
        );
        last = Some(id(&object));
    }
    // Three 1 MB turns of a 4 MB quota, counted on either replica once written: the
    // fourth is refused.
    let last_id = last.clone().unwrap();
    until(
        "the third turn in the database",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || {
            let url = format!("{}/v1/responses/{last_id}", b.url);
            async move {
                client()
                    .get(url)
                    .bearer_auth(ONE)
                    .send()
                    .await
                    .unwrap()
                    .status()
                    == 200
            }
        },
    )
    .await;
    let (status, object) = create(&b.url, Some(ONE), &turn(1_000_000, last.as_deref(), true)).await;
    assert_eq!(status, 429, "{object}");
    assert_eq!(object["error"]["code"], "storage_quota_exceeded");
    // Another key cannot continue it, and stores on.
    let (status, object) = create(
        &a.url,
        Some(TWO),
        &follow_up(last.as_deref().unwrap(), true),
    )
    .await;
    assert_eq!(status, 400, "{object}");
    assert_eq!(object["error"]["code"], "previous_response_not_found");
    let (status, _) = create(&a.url, Some(TWO), &turn(1_000, None, true)).await;
    assert_eq!(status, 200);
}
