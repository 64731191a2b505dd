//! Issue 11's bounds on session records: what a finished record costs, what it keeps of a
//! huge question, and what the readers of `/v1/sessions/{id}/events` may hold.

use std::time::Duration;

use serde_json::json;

use crate::support::{FAST, Setup, client, client_with_timeout, get, panel_yaml, question, rss};

fn fast(extra: &[&str]) -> Setup {
    Setup::with_panel(|url| panel_yaml(url, &FAST, ""), extra)
}

/// Runs `n` non-streamed sessions, `at_once` at a time, and returns their ids.
async fn sessions(url: &str, n: usize, at_once: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    // A long answer through a debug build on a busy 2-core machine takes a while.
    let http = client_with_timeout(Duration::from_secs(120));
    for batch in 0..n.div_ceil(at_once) {
        let runs = (0..at_once.min(n - batch * at_once)).map(|_| {
            let http = http.clone();
            async move {
                let r = http
                    .post(format!("{url}/v1/chat/completions"))
                    .json(&question(false))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                let id = r.headers()["x-massgen-session-id"].to_str().unwrap();
                id.to_string()
            }
        });
        ids.extend(futures::future::join_all(runs).await);
    }
    ids
}

/// A finished record used to keep a live-event buffer of 1,024 events (~200 KB) for as
/// long as the record lived: 233 KB of RSS per record whose events serialise to 15 KB.
/// The server's resident memory now grows by about that size per record kept (25 KB;
/// measured over 300 records, after warm-up sessions have grown the allocator's arenas).
#[cfg(target_os = "linux")]
#[tokio::test]
async fn finished_records_cost_about_their_serialised_size() {
    // The memory store: finished records stay in this process (with a database they leave).
    let setup = fast(&["--records-max", "2000", "--records-db", "memory"]);
    let url = &setup.server.url;
    let pid = setup.server.pid();
    sessions(url, 60, 6).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss(pid);
    let n = 300;
    let ids = sessions(url, n, 6).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = rss(pid);
    let mut serialised = 0;
    for id in ids.iter().step_by(30) {
        let events = get(&format!("{url}/v1/sessions/{id}/events"), None).await;
        serialised += events.bytes().await.unwrap().len();
    }
    let serialised = serialised as u64 / ids.iter().step_by(30).count() as u64;
    let per_record = after.saturating_sub(before) / n as u64;
    assert!(
        per_record < 3 * serialised,
        "each finished record costs {per_record} B of RSS; its events serialise to {serialised} B"
    );
}

#[tokio::test]
async fn a_huge_question_is_kept_as_a_prefix_with_its_size_and_hash() {
    use sha2::Digest;
    let setup = fast(&[]);
    let url = &setup.server.url;
    let question = "why? ".repeat(400_000);
    let body = json!({"model": "massgen", "messages": [{"role": "user", "content": question}]});
    let r = client()
        .post(format!("{url}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let id = r.headers()["x-massgen-session-id"].to_str().unwrap();
    let record: serde_json::Value = get(&format!("{url}/v1/sessions/{id}"), None)
        .await
        .json()
        .await
        .unwrap();
    let kept = record["question"].as_str().unwrap();
    assert_eq!(kept.len(), massgen::app::store::QUESTION_KEPT_BYTES);
    assert!(question.starts_with(kept));
    assert_eq!(record["question_bytes"], question.len());
    assert_eq!(record["question_truncated"], true);
    let hash = format!("{:x}", sha2::Sha256::digest(question.as_bytes()));
    assert_eq!(record["question_sha256"], hash);
}

/// A panel whose answer is `words` final-answer deltas: a record of that many events. It
/// coordinates alone: a plain call asked without a stream makes a whole upstream call, one
/// delta.
fn long(words: usize, extra: &[&str]) -> Setup {
    let model = format!("long:words={words},token_ms=0,ttft_ms=1");
    let coordinated = "orchestrator:\n  single_agent_coordination: true\n";
    Setup::with_panel(|url| panel_yaml(url, &[&model], coordinated), extra)
}

/// The id of a finished session on `url`.
async fn finished_session(url: &str) -> String {
    sessions(url, 1, 1).await.remove(0)
}

/// An HTTP/2 client with a zero window: response headers arrive, no byte of a body can.
fn never_reads() -> reqwest::Client {
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .http2_initial_stream_window_size(Some(0))
        .http2_initial_connection_window_size(Some(0))
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

/// Each reader used to get its own copy of the record (the old `subscribe()` cloned
/// every stored event): 300 slow readers of a 20,000-event record took 1.6 GB. Readers now
/// share the record and hold a few chunks of frames each: 100 readers that never read a
/// record of an 8,000-token answer, read back from the database (> 320 KB as SSE: its
/// deltas merged per write into rows of up to 4 KiB, read 16 rows at a time; ~1.4 MB as
/// the live record) must cost less than 160 KiB of RSS each
/// (under 128 KiB with glibc's malloc, ~133 KiB measured with jemalloc, whose size classes
/// and arenas keep more resident for the same allocations; a copy of the record each
/// would be over 900 KB).
#[cfg(target_os = "linux")]
#[tokio::test]
async fn many_readers_of_a_large_record_do_not_multiply_memory() {
    let setup = long(
        8_000,
        &[
            "--max-subscribers-per-session",
            "500",
            "--max-subscribers-per-key",
            "500",
        ],
    );
    let url = &setup.server.url;
    let pid = setup.server.pid();
    let id = finished_session(url).await;
    // Read from the database, as every reader of a finished session is once it is stored.
    let mut stored = false;
    for _ in 0..200 {
        let record: serde_json::Value = get(&format!("{url}/v1/sessions/{id}"), None)
            .await
            .json()
            .await
            .unwrap();
        stored = record["stored"] == true;
        if stored {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(stored, "the record was not stored within 10 s");
    let events = format!("{url}/v1/sessions/{id}/events");
    let size = get(&events, None).await.bytes().await.unwrap().len() as u64;
    assert!(size > 320_000, "a large record: {size} B");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss(pid);
    let http = never_reads();
    let n = 100;
    let held = futures::future::join_all((0..n).map(|_| http.get(&events).send())).await;
    for r in &held {
        assert_eq!(r.as_ref().unwrap().status(), 200);
    }
    // Every reader has filled what it may hold by now.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let per_reader = rss(pid).saturating_sub(before) / n;
    assert!(
        per_reader < 160 * 1024,
        "each reader of a {size} B record costs {per_reader} B of RSS"
    );
    drop(held);
}

async fn code_of(r: reqwest::Response) -> (u16, String) {
    let status = r.status().as_u16();
    let body: serde_json::Value = r.json().await.unwrap_or_default();
    (
        status,
        body["error"]["code"].as_str().unwrap_or("").to_string(),
    )
}

#[tokio::test]
async fn readers_over_the_session_or_key_limit_get_429() {
    use crate::support::{mock_upstream, serve_with_keys, write};
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let slow = ["a:ttft_ms=30000", "b:ttft_ms=30000"];
    let config = write(dir.path(), "team.yaml", &panel_yaml(&mock.url, &slow, ""));
    let args: Vec<&std::ffi::OsStr> = [
        "--config".as_ref(),
        config.as_os_str(),
        "--max-subscribers-per-session".as_ref(),
        "2".as_ref(),
        "--max-subscribers-per-key".as_ref(),
        "3".as_ref(),
    ]
    .to_vec();
    let server = serve_with_keys(&args, "k1,k2");
    let url = &server.url;
    let http = client();
    // Two running sessions of k1 (their streams stay open: nothing is read from them).
    let mut running = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = http
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth("k1")
            .json(&question(true))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        ids.push(
            r.headers()["x-massgen-session-id"]
                .to_str()
                .unwrap()
                .to_string(),
        );
        running.push(r);
    }
    let read = |id: &str, key: &str| {
        http.get(format!("{url}/v1/sessions/{id}/events"))
            .bearer_auth(key)
            .send()
    };
    let first = read(&ids[0], "k1").await.unwrap();
    let second = read(&ids[0], "k1").await.unwrap();
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 200)
    );
    let (status, code) = code_of(read(&ids[0], "k1").await.unwrap()).await;
    assert_eq!((status, code.as_str()), (429, "too_many_subscribers"));
    let third = read(&ids[1], "k1").await.unwrap();
    assert_eq!(third.status(), 200);
    let over = read(&ids[1], "k1").await.unwrap();
    assert_eq!(over.headers()["retry-after"], "1");
    let body: serde_json::Value = over.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_subscribers", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("--max-subscribers-per-key"), "{message}");
    // A reader that leaves gives its place back.
    drop(first);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = read(&ids[1], "k1").await.unwrap();
        if r.status() == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the place was not freed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop((second, third, running));
}

#[tokio::test]
async fn a_reader_that_stops_reading_is_dropped_and_frees_its_place() {
    let setup = long(
        2_000,
        &[
            "--max-subscribers-per-session",
            "1",
            "--client-stall-timeout-seconds",
            "2",
        ],
    );
    let url = &setup.server.url;
    let id = finished_session(url).await;
    let events = format!("{url}/v1/sessions/{id}/events");
    let held = never_reads().get(&events).send().await.unwrap();
    assert_eq!(held.status(), 200);
    assert_eq!(held.version(), reqwest::Version::HTTP_2);
    let (status, code) = code_of(get(&events, None).await).await;
    assert_eq!((status, code.as_str()), (429, "too_many_subscribers"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = get(&events, None).await;
        if r.status() == 200 {
            let replay = r.text().await.unwrap();
            assert!(replay.contains("session_completed"), "{replay}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the reader that stopped reading kept its place"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(held);
}

/// `massgen_open_connections` over fresh connections (`connection: close`), so the
/// client's own pool holds none.
async fn open_connections(url: &str) -> f64 {
    let text = client()
        .get(format!("{url}/metrics"))
        .header("connection", "close")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    crate::support::sample(&text, "massgen_open_connections", &[]).unwrap()
}

#[tokio::test]
async fn the_open_connections_gauge_follows_the_connections() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let setup = fast(&[]);
    let url = &setup.server.url;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut c = tokio::net::TcpStream::connect(url.trim_start_matches("http://"))
            .await
            .unwrap();
        c.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        assert!(c.read(&mut buf).await.unwrap() > 0);
        held.push(c);
    }
    // The three kept alive, and the one asking.
    assert_eq!(open_connections(url).await, 4.0);
    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while open_connections(url).await != 1.0 {
        assert!(std::time::Instant::now() < deadline, "the gauge stayed up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
