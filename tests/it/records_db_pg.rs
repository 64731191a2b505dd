//! Session records on PostgreSQL, on the real binary: a throwaway PostgreSQL server per
//! test ([`PgServer`], Debian's package; the tests skip with a line when it is not
//! installed, and fail instead under MASSGEN_REQUIRE_POSTGRES=1, which `.ci/run` sets).
//! Several servers per test share it (`--records-db postgres://…`): each other's records,
//! lists and live events; a killed server's session marked interrupted; the database
//! stopped and started under a running server. (Start-up against a database that is not
//! there: `records_db.rs`.)

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;

use crate::support::postgres::PgServer;
use crate::support::{
    Proc, bin, chat, client_with_timeout, get, mock_upstream, panel_yaml, parse_named_sse,
    parse_sse, question, sample, start, write,
};

/// True while a process with this PID exists (a reaped child's PID is gone).
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn refuses_connections(port: u16) -> bool {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err()
}

/// The test helper itself: started, queried, stopped, started again on the same data and
/// port, stopped; nothing left running and the folder removed.
#[test]
fn throwaway_postgres_starts_stops_and_restarts() {
    let Some(mut pg) = PgServer::start() else {
        return;
    };
    assert_eq!(pg.query("select 1").trim(), "1");
    assert!(
        pg.url()
            .starts_with(&format!("postgres://postgres@127.0.0.1:{}/", pg.port())),
        "{}",
        pg.url()
    );
    pg.query("create table kept (v int); insert into kept values (42)");
    let first = pg.pid().expect("running");
    pg.stop();
    assert!(!alive(first), "postmaster {first} still there after stop");
    assert!(refuses_connections(pg.port()));

    pg.start_again();
    let second = pg.pid().expect("running again");
    assert_eq!(pg.query("select v from kept").trim(), "42", "same data");
    pg.stop();
    assert!(!alive(second), "postmaster {second} still there after stop");
    assert!(refuses_connections(pg.port()));

    pg.start_again();
    let third = pg.pid().expect("running a third time");
    let dir = pg.dir().to_path_buf();
    drop(pg);
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(third) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(third), "postmaster {third} still there after drop");
    assert!(!dir.exists(), "{} not removed", dir.display());
}

// ---------------------------------------------------------------------------------------
// Servers on one PostgreSQL

const KEYS: &str = "pg-key-one,pg-key-two";
const ONE: &str = "pg-key-one";
const TWO: &str = "pg-key-two";
/// What a reader or client may wait for an event at most.
const PATIENCE: Duration = Duration::from_secs(30);

/// A throwaway PostgreSQL, a simulator and a panel file on it: what the servers of one
/// test share.
struct Cluster {
    pg: PgServer,
    _mock: Proc,
    config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// `None` (the test skips) without PostgreSQL.
    fn start(models: &[&str]) -> Option<Self> {
        let pg = PgServer::start()?;
        let mock = mock_upstream();
        let dir = tempfile::tempdir().unwrap();
        let config = write(dir.path(), "team.yaml", &panel_yaml(&mock.url, models, ""));
        Some(Self {
            pg,
            _mock: mock,
            config,
            _dir: dir,
        })
    }

    /// `massgen serve` on this database, with two API keys; heartbeats every second and
    /// a session whose server fell silent for 3 s counts as interrupted.
    fn server(&self) -> Proc {
        let mut cmd = Command::new(bin());
        cmd.args(["serve", "--host", "127.0.0.1", "--port", "0", "--config"])
            .arg(&self.config)
            .args(["--records-db", &self.pg.url()])
            .args(["--records-heartbeat-seconds", "1"])
            .args(["--records-interrupted-after-seconds", "3"])
            .env("MASSGEN_SERVER_API_KEYS", KEYS)
            .env_remove("MASSGEN_SERVER_API_KEYS_FILE")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
        start(cmd, "massgen listening on")
    }
}

/// Two fast agents.
const QUICK: [&str; 2] = [
    "quick1:ttft_ms=10,token_ms=1,words=12",
    "quick2:ttft_ms=20,token_ms=1,words=12",
];
/// One agent answers at once, the other streams for about 5 s: the session runs long
/// enough to be followed, killed or cut off while it runs.
const SLOW: [&str; 2] = [
    "early:ttft_ms=50,token_ms=2,words=10",
    "late:ttft_ms=300,token_ms=100,words=50",
];

/// A finished non-streamed session of `key` on `url`: its id.
async fn ask(url: &str, key: &str) -> String {
    let r = chat(url, Some(key), &question(false)).await;
    assert_eq!(r.status(), 200);
    let id = r.headers()["x-massgen-session-id"].to_str().unwrap();
    id.to_string()
}

async fn record(url: &str, key: &str, id: &str) -> (u16, Value) {
    let r = get(&format!("{url}/v1/sessions/{id}"), Some(key)).await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Polls `id`'s record (every 100 ms, at most `limit`) until `done` holds for it.
async fn record_when(
    url: &str,
    key: &str,
    id: &str,
    limit: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let (status, body) = record(url, key, id).await;
        if status == 200 && done(&body) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{url}: record {id} not as expected within {limit:?}: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn status_is(wanted: &'static str) -> impl Fn(&Value) -> bool {
    move |record| record["status"] == wanted
}

/// The ids `key` sees in `GET /v1/sessions`.
async fn listed(url: &str, key: &str) -> Vec<String> {
    let body: Value = get(&format!("{url}/v1/sessions"), Some(key))
        .await
        .json()
        .await
        .unwrap();
    let data = body["data"].as_array().unwrap_or_else(|| panic!("{body}"));
    data.iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

/// A session's events as `GET /v1/sessions/{id}/events` serves them, read to the end.
async fn replay(url: &str, key: &str, id: &str) -> Vec<Value> {
    let r = get(&format!("{url}/v1/sessions/{id}/events"), Some(key)).await;
    assert_eq!(r.status(), 200, "{url} events of {id}");
    let text = r.text().await.unwrap();
    parse_named_sse(&text)
        .0
        .into_iter()
        .map(|n| n.data)
        .collect()
}

/// Follows `GET /v1/sessions/{id}/events` to its end (bounded by [`PATIENCE`] per event):
/// each event with the moment it arrived, and the `x-massgen-session-status` header.
async fn follow(url: &str, key: &str, id: &str) -> (String, Vec<(Instant, Value)>) {
    let r = client_with_timeout(Duration::from_secs(120))
        .get(format!("{url}/v1/sessions/{id}/events"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{url} events of {id}");
    let state = r.headers()["x-massgen-session-status"]
        .to_str()
        .unwrap()
        .to_string();
    let mut body = r.bytes_stream();
    let (mut buffer, mut events) = (String::new(), Vec::new());
    loop {
        let next = tokio::time::timeout(PATIENCE, body.next())
            .await
            .unwrap_or_else(|_| panic!("no event of {id} for {PATIENCE:?}: {events:?}"));
        let Some(chunk) = next else { break };
        buffer.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            for named in parse_named_sse(&frame).0 {
                events.push((Instant::now(), named.data));
            }
        }
    }
    (state, events)
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

/// Streams a chat on `url` and sends, on `answered`, the label of the first answer the
/// deliberation lines announce; returns when the stream ends, with the moment it did.
async fn stream_chat(
    url: String,
    key: &'static str,
    ids: tokio::sync::oneshot::Sender<String>,
    answered: tokio::sync::oneshot::Sender<String>,
) -> Instant {
    let r = chat(&url, Some(key), &question(true)).await;
    assert_eq!(r.status(), 200);
    let _ = ids.send(
        r.headers()["x-massgen-session-id"]
            .to_str()
            .unwrap()
            .to_string(),
    );
    let mut answered = Some(answered);
    let mut body = r.bytes_stream();
    let mut text = String::new();
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout(PATIENCE, body.next()).await {
        text.push_str(&String::from_utf8_lossy(&chunk));
        let lines = parse_sse(text.rsplit_once("\n\n").map_or("", |(done, _)| done)).reasoning();
        let label = lines
            .split("answered (")
            .nth(1)
            .and_then(|rest| rest.split(')').next());
        if let (Some(label), Some(_)) = (label, answered.as_ref()) {
            let _ = answered.take().unwrap().send(label.to_string());
        }
    }
    Instant::now()
}

/// A streamed chat of key ONE started on `server`: its task (see [`stream_chat`]), the
/// session's id, and where the first answer's label will come.
async fn stream_on(
    server: &Proc,
) -> (
    tokio::task::JoinHandle<Instant>,
    String,
    tokio::sync::oneshot::Receiver<String>,
) {
    let (ids, id) = tokio::sync::oneshot::channel();
    let (answered, label) = tokio::sync::oneshot::channel();
    let run = tokio::spawn(stream_chat(server.url.clone(), ONE, ids, answered));
    (run, id.await.unwrap(), label)
}

/// Two servers on one PostgreSQL: a session run on either is listed by, readable from and
/// replayed by the other, for its own key only.
#[tokio::test]
async fn two_servers_on_one_postgres_serve_each_others_sessions() {
    let Some(cluster) = Cluster::start(&QUICK) else {
        return;
    };
    let (a, b) = (cluster.server(), cluster.server());
    let on_a = ask(&a.url, ONE).await;
    let on_b = ask(&b.url, TWO).await;
    for (id, key, ran, other, stranger) in [
        (&on_a, ONE, &a.url, &b.url, TWO),
        (&on_b, TWO, &b.url, &a.url, ONE),
    ] {
        let there = record_when(other, key, id, PATIENCE, status_is("completed")).await;
        let here = record_when(ran, key, id, PATIENCE, status_is("completed")).await;
        assert_eq!(there, here, "the record read from the other server");
        assert!(listed(other, key).await.contains(id));
        assert!(!listed(other, stranger).await.contains(id));
        assert_eq!(record(other, stranger, id).await.0, 404);
        let replayed = replay(other, key, id).await;
        assert_eq!(replayed, replay(ran, key, id).await);
        assert_eq!(kinds(&replayed).first(), Some(&"session_started"));
        assert_eq!(kinds(&replayed).last(), Some(&"session_completed"));
    }
}

/// A session running on A followed from B: its events reach B while it runs (through the
/// database), not only after it ended, and B's stream ends with it.
#[tokio::test]
async fn a_session_running_on_one_server_is_followed_live_from_another() {
    let Some(cluster) = Cluster::start(&SLOW) else {
        return;
    };
    let (a, b) = (cluster.server(), cluster.server());
    let (run, id, _) = stream_on(&a).await;
    // B knows the session once A's writer committed its first events.
    record_when(&b.url, ONE, &id, PATIENCE, status_is("running")).await;
    let (state, followed) = follow(&b.url, ONE, &id).await;
    let ended = run.await.unwrap();
    assert_eq!(state, "running");
    let events: Vec<Value> = followed.iter().map(|(_, e)| e.clone()).collect();
    assert_eq!(kinds(&events).last(), Some(&"session_completed"));
    assert_eq!(
        events,
        replay(&a.url, ONE, &id).await,
        "B saw every event, in order"
    );
    // Live: answers reached B while A's client was still being streamed to, at
    // different moments (not one burst at the end).
    let live: Vec<Instant> = followed
        .iter()
        .filter(|(at, e)| *at < ended && e["type"] == "answer")
        .map(|(at, _)| *at)
        .collect();
    assert!(
        !live.is_empty(),
        "no answer reached B before the session ended"
    );
    let first = followed[0].0;
    let last_live = followed
        .iter()
        .filter(|(at, _)| *at < ended)
        .map(|(at, _)| *at)
        .max();
    assert!(
        last_live.is_some_and(|last| last.duration_since(first) > Duration::from_secs(1)),
        "B's events before the end arrived within one second: one burst, not followed"
    );
}

/// kill -9 of the server running a session: the other server marks it interrupted (no
/// heartbeat), keeps what the client had already been told, and its readers end.
#[tokio::test]
async fn a_session_of_a_killed_server_is_marked_interrupted_with_its_events() {
    let Some(cluster) = Cluster::start(&SLOW) else {
        return;
    };
    let (a, b) = (cluster.server(), cluster.server());
    let (run, id, label) = stream_on(&a).await;
    let label = tokio::time::timeout(PATIENCE, label)
        .await
        .unwrap()
        .unwrap();
    record_when(&b.url, ONE, &id, PATIENCE, status_is("running")).await;
    let reader = {
        let (url, id) = (b.url.clone(), id.clone());
        tokio::spawn(async move { follow(&url, ONE, &id).await })
    };
    // The client was told of an answer; the writer's batch (≤ ~100 ms) has gone out.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed = Command::new("kill")
        .args(["-KILL", &a.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    drop(a); // reaps it
    run.await.unwrap();

    let interrupted = record_when(&b.url, ONE, &id, PATIENCE, status_is("interrupted")).await;
    let events = replay(&b.url, ONE, &id).await;
    assert_eq!(kinds(&events).first(), Some(&"session_started"));
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "answer" && e["answer"]["answer_label"] == label.as_str()),
        "the answer {label} the client saw is not in the record: {interrupted}"
    );
    assert!(!kinds(&events).contains(&"session_completed"));
    let (_, followed) = tokio::time::timeout(PATIENCE, reader)
        .await
        .expect("B's reader of the interrupted session did not end")
        .unwrap();
    assert!(!followed.is_empty());
    // A restarted A sees the same.
    let a = cluster.server();
    record_when(&a.url, ONE, &id, PATIENCE, status_is("interrupted")).await;
}

/// `/health`'s records part.
async fn records_health(url: &str) -> Value {
    let r = get(&format!("{url}/health"), None).await;
    assert_eq!(
        r.status(),
        200,
        "/health answers 200 whatever the store's state"
    );
    r.json::<Value>().await.unwrap()["records"].clone()
}

async fn metric(url: &str, name: &str) -> f64 {
    let text = get(&format!("{url}/metrics"), None)
        .await
        .text()
        .await
        .unwrap();
    sample(&text, name, &[]).unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// Polls `/health` (every 200 ms, at most `limit`) until the records state is `state`.
async fn health_becomes(url: &str, state: &str, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let records = records_health(url).await;
        if records["state"] == state {
            return records;
        }
        assert!(
            Instant::now() < deadline,
            "records never {state}: {records}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// PostgreSQL stopped while the server runs: sessions still answer, /health and the
/// metrics say the store fails; started again, what was held and what comes next is written.
#[tokio::test]
async fn sessions_keep_answering_while_postgres_is_down_and_records_catch_up() {
    let Some(mut cluster) = Cluster::start(&QUICK) else {
        return;
    };
    let a = cluster.server();
    let before = ask(&a.url, ONE).await;
    assert_eq!(records_health(&a.url).await["store"], "postgres");
    health_becomes(&a.url, "ok", PATIENCE).await;
    assert_eq!(
        metric(&a.url, "massgen_records_write_failures_total").await,
        0.0
    );

    cluster.pg.stop();
    let during = ask(&a.url, ONE).await;
    let health = health_becomes(&a.url, "failing", PATIENCE).await;
    assert_eq!(health["store"], "postgres");
    assert!(metric(&a.url, "massgen_records_write_failures_total").await >= 1.0);
    assert_eq!(metric(&a.url, "massgen_records_store_up").await, 0.0);
    let also_during = ask(&a.url, TWO).await;

    cluster.pg.start_again();
    health_becomes(&a.url, "ok", Duration::from_secs(60)).await;
    let after = ask(&a.url, ONE).await;
    // In the database itself, as a fresh server would read it.
    let deadline = Instant::now() + PATIENCE;
    for id in [&before, &during, &also_during, &after] {
        loop {
            let status = cluster
                .pg
                .query(&format!("select status from sessions where id = '{id}'"));
            if status.trim() == "completed" {
                break;
            }
            assert!(Instant::now() < deadline, "{id} not written: {status:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let fresh = cluster.server();
    for (id, key) in [(&during, ONE), (&also_during, TWO), (&after, ONE)] {
        let replayed = replay(&fresh.url, key, id).await;
        assert_eq!(kinds(&replayed).last(), Some(&"session_completed"), "{id}");
    }
    assert_eq!(metric(&a.url, "massgen_records_store_up").await, 1.0);
}
