//! Issue 15 on the real binary with SQLite (the default engine): records outlive the
//! process, a session cut by `kill -9` comes back `interrupted` with the events written
//! so far, and a database that cannot be used stops start-up. (PostgreSQL:
//! `records_db_pg.rs`.)

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{
    self, FAST, Proc, chat, get_json, mock_upstream, panel_yaml, parse_named_sse, question, write,
};

/// `massgen serve` on `config` keeping records in `db`, plus `extra` flags.
fn serve(config: &Path, db: &str, extra: &[&str]) -> Proc {
    let mut cmd = Command::new(support::bin());
    cmd.args(["serve", "--host", "127.0.0.1", "--port", "0", "--config"])
        .arg(config)
        .args(extra)
        .env("MASSGEN_SERVER_RECORDS_DB", db);
    support::start(cmd, "massgen listening on")
}

async fn session(url: &str) -> String {
    let response = chat(url, None, &question(false)).await;
    assert_eq!(response.status(), 200);
    response.headers()["x-massgen-session-id"]
        .to_str()
        .unwrap()
        .to_string()
}

/// The replayed events of a finished session (the stream ends on its own).
async fn replay(url: &str, id: &str) -> Vec<Value> {
    replay_as(url, id, "finished").await
}

/// The session's stored events, checking the status header says `status`.
async fn replay_as(url: &str, id: &str, status: &str) -> Vec<Value> {
    let response = support::get(&format!("{url}/v1/sessions/{id}/events"), None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-massgen-session-status"], status);
    let raw = tokio::time::timeout(Duration::from_secs(20), response.text())
        .await
        .expect("a finished session's events end")
        .unwrap();
    parse_named_sse(&raw)
        .0
        .into_iter()
        .map(|n| n.data)
        .collect()
}

#[tokio::test]
async fn records_survive_a_restart() {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "team.yaml", &panel_yaml(&mock.url, &FAST, ""));
    let db = format!("sqlite://{}", dir.path().join("records.db").display());
    let mut server = serve(&config, &db, &[]);
    let health = get_json(&format!("{}/health", server.url)).await;
    assert_eq!(health["records"]["store"], "sqlite", "{health}");
    assert_eq!(health["records"]["state"], "ok", "{health}");
    let ids = [session(&server.url).await, session(&server.url).await];
    // Both in the file (`stored`), as they will be after the restart.
    let started = Instant::now();
    let list_before = loop {
        let list = get_json(&format!("{}/v1/sessions", server.url)).await;
        if list["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["stored"] == true)
        {
            break list;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{list}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut records_before = Vec::new();
    let mut events_before = Vec::new();
    for id in &ids {
        records_before.push(get_json(&format!("{}/v1/sessions/{id}", server.url)).await);
        events_before.push(replay(&server.url, id).await);
    }
    assert!(server.terminate(Duration::from_secs(20)).is_some());

    let server = serve(&config, &db, &[]);
    let list_after = get_json(&format!("{}/v1/sessions", server.url)).await;
    assert_eq!(list_after, list_before);
    let listed: Vec<&str> = list_after["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [ids[1].as_str(), ids[0].as_str()], "newest first");
    for (i, id) in ids.iter().enumerate() {
        let record = get_json(&format!("{}/v1/sessions/{id}", server.url)).await;
        assert_eq!(record, records_before[i]);
        assert_eq!(record["status"], "completed");
        let events = replay(&server.url, id).await;
        assert!(events.len() > 5, "{events:?}");
        assert_eq!(events, events_before[i]);
    }
    // The file is the user's alone.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("records.db"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[tokio::test]
async fn a_session_cut_by_kill_9_is_interrupted_with_its_events_so_far() {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    // A quick agent answers (events to keep); a slow one takes about 20 s to answer,
    // far longer than the test waits.
    let models = [
        "quick:ttft_ms=10,token_ms=1",
        "slow:ttft_ms=10,token_ms=100,words=200",
    ];
    let config = write(dir.path(), "slow.yaml", &panel_yaml(&mock.url, &models, ""));
    let db = format!("sqlite://{}", dir.path().join("records.db").display());
    let quick = [
        "--records-heartbeat-seconds",
        "1",
        "--records-interrupted-after-seconds",
        "3",
    ];
    let mut server = serve(&config, &db, &quick);
    let response = chat(&server.url, None, &question(true)).await;
    assert_eq!(response.status(), 200);
    let id = response.headers()["x-massgen-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    // Some events stored, the session still running.
    let started = Instant::now();
    let seen = loop {
        let record = get_json(&format!("{}/v1/sessions/{id}", server.url)).await;
        assert_eq!(record["status"], "running", "{record}");
        let n = record["events"].as_u64().unwrap();
        if n >= 5 {
            break n;
        }
        assert!(started.elapsed() < Duration::from_secs(15), "{record}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Past the writer's batching delay: what was stored then is in the file.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let _ = Command::new("kill")
        .args(["-KILL", &server.pid().to_string()])
        .status();
    let _ = server.terminate(Duration::from_secs(5));
    drop(response);

    let server = serve(&config, &db, &quick);
    let started = Instant::now();
    let record = loop {
        let record = get_json(&format!("{}/v1/sessions/{id}", server.url)).await;
        if record["status"] == "interrupted" {
            break record;
        }
        assert_eq!(record["status"], "running", "{record}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "not marked interrupted: {record}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let kept = record["events"].as_u64().unwrap();
    assert!(
        kept >= seen,
        "{kept} events kept, {seen} stored before the kill"
    );
    let events = replay_as(&server.url, &id, "interrupted").await;
    assert_eq!(events.len() as u64, kept);
    assert_eq!(
        record["timings"]["ended_at_ms"],
        events.last().unwrap()["at_ms"],
        "ended at its last event"
    );
    let list = get_json(&format!("{}/v1/sessions", server.url)).await;
    assert_eq!(list["data"][0]["status"], "interrupted", "{list}");
}

#[test]
fn an_unusable_database_stops_start_up_with_exit_2_and_no_password() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "not-a-dir", "x");
    for db in [
        // Nothing listens on port 1.
        "postgres://massgen:hunter2@127.0.0.1:1/records".to_string(),
        format!("sqlite://{}/records.db", file.display()),
    ] {
        let mut cmd = Command::new(support::bin());
        cmd.args(["serve", "--demo", "--host", "127.0.0.1", "--port", "0"])
            .env("MASSGEN_SERVER_RECORDS_DB", &db)
            .current_dir(dir.path());
        let out = support::run_bounded(cmd, Duration::from_secs(30));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{db}: {stderr}");
        assert!(stderr.contains("--records-db"), "{stderr}");
        assert!(!stderr.contains("hunter2"), "{stderr}");
        assert!(out.stdout.is_empty(), "never listened: {db}");
    }
}

/// PostgreSQL: a reader on B of a session running on A is woken by A's notifications
/// (LISTEN/NOTIFY), not only by the once-a-second look: B counts them, and B's stream is
/// the session's whole record, ending with it.
#[tokio::test]
async fn a_reader_on_another_replica_is_woken_by_notifications() {
    let Some(pg) = crate::support::postgres::PgServer::start() else {
        return;
    };
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let models = [
        "early:ttft_ms=50,token_ms=2,words=10",
        "late:ttft_ms=300,token_ms=50,words=40",
    ];
    let config = write(dir.path(), "team.yaml", &panel_yaml(&mock.url, &models, ""));
    let (a, b) = (
        serve(&config, &pg.url(), &[]),
        serve(&config, &pg.url(), &[]),
    );
    let asked = {
        let url = a.url.clone();
        tokio::spawn(async move { session(&url).await })
    };
    // The session's id, once A's writer committed its first events.
    let started = Instant::now();
    let id = loop {
        let list = get_json(&format!("{}/v1/sessions", b.url)).await;
        if let Some(id) = list["data"][0]["id"].as_str() {
            break id.to_string();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{list}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let response = support::get(&format!("{}/v1/sessions/{id}/events", b.url), None).await;
    assert_eq!(response.headers()["x-massgen-session-status"], "running");
    let raw = tokio::time::timeout(Duration::from_secs(30), response.text())
        .await
        .expect("the followed session ends")
        .unwrap();
    let followed: Vec<Value> = parse_named_sse(&raw)
        .0
        .into_iter()
        .map(|n| n.data)
        .collect();
    assert_eq!(asked.await.unwrap(), id);
    assert_eq!(followed, replay(&a.url, &id).await);
    let metrics = support::get(&format!("{}/metrics", b.url), None)
        .await
        .text()
        .await
        .unwrap();
    let woken = support::sample(&metrics, "massgen_records_notifications_total", &[]);
    assert!(woken.is_some_and(|n| n >= 1.0), "{woken:?}");
}
