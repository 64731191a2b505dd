//! Issue 23 items 3-4 on the real binary: session records survive a full disk (the writer
//! recovers once space is back, writes every finished session it kept and counts the ones
//! it dropped, the API says which are not stored yet); one process per SQLite file, and a
//! restart marks the sessions a killed process left `running` as `interrupted` at once.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use sqlx::Row;

use crate::support::serving::{
    finished_session as session, metrics_text, serve_command, serve_on_db, start_up_error,
    stored_events, streamed_session, until,
};
use crate::support::{self, FAST, Proc, get_json, mock_upstream, panel_yaml, write};

/// `massgen serve` on `config` keeping records in `db`, plus `extra` flags.
fn serve(config: &Path, db: &str, extra: &[&str]) -> Proc {
    let config = config.as_os_str();
    let args = [OsStr::new("--config"), config].into_iter();
    serve_on_db(support::bin(), args.chain(extra.iter().map(OsStr::new)), db)
}

async fn health_state(url: &str) -> String {
    let health = get_json(&format!("{url}/health")).await;
    health["records"]["state"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

async fn dropped_counter(url: &str) -> f64 {
    let text = metrics_text(url).await;
    support::sample(&text, "massgen_records_unsaved_dropped_total", &[]).unwrap_or(0.0)
}

async fn list(url: &str) -> Vec<Value> {
    get_json(&format!("{url}/v1/sessions?limit=1000")).await["data"]
        .as_array()
        .unwrap()
        .clone()
}

/// How often [`until`] polls.
const POLL: Duration = Duration::from_millis(100);

/// Waits (`limit`) until every listed session is stored; `what` names the wait.
async fn all_stored(url: &str, what: &str, limit: Duration) {
    until(what, limit, POLL, || async {
        list(url).await.iter().all(|s| s["stored"] == true)
    })
    .await;
}

/// A tmpfs mounted on a fresh folder (root only), unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(bytes: u64) -> Option<Self> {
        let dir = tempfile::tempdir().ok()?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes},mode=0700")])
            .arg("tmpfs")
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        status.success().then_some(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Writes `path` until the file system says it is full (bounded by `max` bytes).
fn fill(path: &Path, max: u64) {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 4096];
    let mut written = 0;
    while written < max {
        match file.write_all(&chunk).and_then(|()| file.sync_all()) {
            Ok(()) => written += chunk.len() as u64,
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => return,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    panic!("{} never filled the disk", path.display());
}

/// The database's sessions (id → status, events), read from outside the server.
async fn rows(db: &Path) -> std::collections::BTreeMap<String, (String, i64)> {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(db)
        .read_only(true);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let rows = sqlx::query(
        "SELECT s.id, s.status, (SELECT COUNT(*) FROM events e WHERE e.session_id = s.id) \
         FROM sessions s",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    rows.iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

/// Ids, statuses and event counts as the API serves them (the list, then each record).
async fn served(url: &str) -> std::collections::BTreeMap<String, (String, i64)> {
    let mut all = std::collections::BTreeMap::new();
    for entry in list(url).await {
        let id = entry["id"].as_str().unwrap().to_string();
        let response = support::get(&format!("{url}/v1/sessions/{id}"), None).await;
        let code = response.status();
        let record: Value = response.json().await.unwrap();
        assert_eq!(code, 200, "{record}");
        assert_eq!(record["status"], entry["status"], "{record}");
        let events =
            record["events"].as_i64().unwrap() - record["events_dropped"].as_i64().unwrap();
        all.insert(id, (entry["status"].as_str().unwrap().to_string(), events));
    }
    all
}

#[tokio::test]
async fn records_survive_a_full_disk_and_are_all_written_once_space_is_back() {
    let Some(disk) = Tmpfs::mount(4 * 1024 * 1024) else {
        // CI runs as root, where the mount works: there a failed mount must fail the run,
        // not skip the only full-disk test.
        assert!(
            std::env::var_os("CI").is_none(),
            "cannot mount a tmpfs for the full-disk test"
        );
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "team.yaml", &panel_yaml(&mock.url, &FAST, ""));
    let file = disk.path().join("records.db");
    let db = format!("sqlite://{}", file.display());
    // At most 4 finished records wait in memory for the database.
    const BOUND: usize = 4;
    let mut server = serve(&config, &db, &["--records-max", &BOUND.to_string()]);
    let url = server.url.clone();
    let first = session(&url).await;
    all_stored(&url, "the first session is stored", Duration::from_secs(10)).await;
    assert_eq!(health_state(&url).await, "ok");

    // The disk is full: sessions still answer, the writer fails.
    let filler = disk.path().join("filler");
    fill(&filler, 8 * 1024 * 1024);
    let mut ids = vec![first];
    for _ in 0..10 {
        ids.push(session(&url).await);
        tokio::time::sleep(Duration::from_millis(300)).await;
        if health_state(&url).await == "failing" {
            break;
        }
    }
    assert_eq!(
        health_state(&url).await,
        "failing",
        "the writer never failed"
    );
    let failing_from = ids.len();
    for _ in 0..BOUND + 3 {
        ids.push(session(&url).await);
    }
    // Those not stored say so; the oldest beyond the bound were dropped and counted.
    let listed = list(&url).await;
    let waiting: Vec<&Value> = listed.iter().filter(|s| s["stored"] == false).collect();
    assert!(!waiting.is_empty() && waiting.len() <= BOUND, "{listed:?}");
    for entry in &waiting {
        assert_ne!(entry["status"], "running", "{entry}");
        let id = entry["id"].as_str().unwrap();
        let record = get_json(&format!("{url}/v1/sessions/{id}")).await;
        assert_eq!(record["stored"], false, "{record}");
    }
    let newest = ids.last().unwrap();
    assert!(
        waiting.iter().any(|s| s["id"] == newest.as_str()),
        "the newest session waits for the database: {listed:?}"
    );
    let dropped = dropped_counter(&url).await;
    assert!(
        dropped >= (ids.len() - failing_from - BOUND) as f64,
        "{dropped} dropped of {} while failing",
        ids.len() - failing_from
    );
    assert!(rows(&file).await.len() < ids.len());

    // Space is back: the writer recovers, every kept record is written.
    std::fs::remove_file(&filler).unwrap();
    until(
        "/health is ok again",
        Duration::from_secs(30),
        POLL,
        || async { health_state(&url).await == "ok" },
    )
    .await;
    all_stored(
        &url,
        "every kept session is stored",
        Duration::from_secs(20),
    )
    .await;
    let served_now = served(&url).await;
    assert_eq!(
        rows(&file).await,
        served_now,
        "the file holds what the API serves"
    );
    let dropped = dropped_counter(&url).await;
    assert_eq!(
        served_now.len() as f64 + dropped,
        ids.len() as f64,
        "every session is stored or counted as dropped"
    );
    assert!(dropped >= 1.0);
    let kept: BTreeSet<&str> = served_now.keys().map(String::as_str).collect();
    assert!(kept.contains(newest.as_str()));

    // The writer works as before: two more, then SIGTERM; the file still holds exactly
    // what the API served.
    session(&url).await;
    session(&url).await;
    all_stored(
        &url,
        "the last sessions are stored",
        Duration::from_secs(10),
    )
    .await;
    let before = served(&url).await;
    assert_eq!(before.len(), served_now.len() + 2);
    assert!(server.terminate(Duration::from_secs(20)).is_some());
    assert_eq!(rows(&file).await, before);
}

/// A panel whose slow agent keeps a session running for about 20 s.
fn slow_panel(dir: &Path, mock_url: &str) -> PathBuf {
    let models = [
        "quick:ttft_ms=10,token_ms=1",
        "slow:ttft_ms=10,token_ms=100,words=200",
    ];
    write(dir, "slow.yaml", &panel_yaml(mock_url, &models, ""))
}

#[tokio::test]
async fn a_second_server_on_the_same_sqlite_file_exits_2_naming_it_and_the_holder() {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "team.yaml", &panel_yaml(&mock.url, &FAST, ""));
    let file = dir.path().join("records.db");
    let db = format!("sqlite://{}", file.display());
    let first = serve(&config, &db, &[]);
    let mut cmd = serve_command(support::bin());
    cmd.arg("--config")
        .arg(&config)
        .env("MASSGEN_SERVER_RECORDS_DB", &db)
        .env("RUST_LOG", "error");
    let (out, stderr) = start_up_error(cmd, Duration::from_secs(30), "the second server");
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    assert!(stderr.contains(&format!("PID {}", first.pid())), "{stderr}");
    assert!(out.stdout.is_empty(), "never listened");
    // The first one is untouched.
    session(&first.url).await;
    assert_eq!(health_state(&first.url).await, "ok");
}

#[tokio::test]
async fn a_session_killed_with_its_process_reads_interrupted_at_once_after_a_restart() {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let config = slow_panel(dir.path(), &mock.url);
    let db = format!("sqlite://{}", dir.path().join("records.db").display());
    // Default heartbeat (10 s) and interrupted-after (60 s) rule.
    let mut server = serve(&config, &db, &[]);
    let (response, id) = streamed_session(&server.url).await;
    let url = server.url.clone();
    until(
        "some events are stored",
        Duration::from_secs(15),
        POLL,
        || async {
            let record = get_json(&format!("{url}/v1/sessions/{id}")).await;
            assert_eq!(record["status"], "running", "{record}");
            record["events"].as_u64().unwrap() >= 5
        },
    )
    .await;
    // Past the writer's batching delay: the session's row is in the file.
    tokio::time::sleep(Duration::from_millis(600)).await;
    server.kill_9();
    let _ = server.terminate(Duration::from_secs(5));
    drop(response);

    let server = serve(&config, &db, &[]);
    // The first read after start-up, no waiting.
    let record = get_json(&format!("{}/v1/sessions/{id}", server.url)).await;
    assert_eq!(record["status"], "interrupted", "{record}");
    assert_eq!(record["stored"], true, "{record}");
    let events = stored_events(&server.url, &id, "interrupted").await;
    assert_eq!(events.len() as u64, record["events"].as_u64().unwrap());
    let listed = list(&server.url).await;
    assert_eq!(listed[0]["status"], "interrupted", "{listed:?}");
}
