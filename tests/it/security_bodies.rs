//! Issue 23 item 7 and item 9 (connections): request bodies are bounded server-wide
//! (`--max-buffered-body-bytes`), one address cannot take every connection
//! (`--max-connections-per-address`), and a keep-alive connection waits for its next
//! request under the idle timeout, not the header timeout.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::serving::{
    assert_door_error, client_from, metrics_text, metrics_via, rejected, serve_command,
    start_up_error,
};
use crate::support::{Setup, bin, client, panel_yaml, serve};

/// One agent whose single call takes 3 s: a session holds its body's share at least that
/// long, longer than a request waits for room (2 s).
fn slow_panel(url: &str) -> String {
    panel_yaml(
        url,
        &["slow:ttft_ms=8000,token_ms=1,words=3"],
        "orchestrator:\n  skip_coordination_rounds: true\n  skip_final_presentation: true\n",
    )
}

fn big_question(path: &str, bytes: usize) -> Value {
    let text = "x".repeat(bytes);
    match path {
        "/v1/messages" => json!({
            "model": "massgen",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": text}],
        }),
        "/v1/responses" => json!({"model": "massgen", "input": text}),
        _ => json!({"model": "massgen", "messages": [{"role": "user", "content": text}]}),
    }
}

/// Status, `Retry-After` and JSON body of one POST; chunked (no `Content-Length`) when
/// `chunked`.
async fn send(url: &str, path: &str, body: &Value, chunked: bool) -> (u16, Option<String>, Value) {
    send_from(client(), url, path, body, chunked).await
}

/// A client whose connections come from 127.0.0.`n`, giving up after 30 s.
fn client_at(n: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, n]))
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// [`send`] with `client` (one from another address: without keys, each address holds
/// at most its part of the budget).
async fn send_from(
    client: reqwest::Client,
    url: &str,
    path: &str,
    body: &Value,
    chunked: bool,
) -> (u16, Option<String>, Value) {
    let bytes = serde_json::to_vec(body).unwrap();
    let request = client
        .post(format!("{url}{path}"))
        .header("content-type", "application/json");
    let request = if chunked {
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
            bytes.chunks(1024).map(|c| Ok(c.to_vec())).collect();
        request.body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
    } else {
        request.body(bytes)
    };
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let json = response.json().await.unwrap_or(Value::Null);
    (status, retry_after, json)
}

#[tokio::test]
async fn bodies_past_the_budget_wait_then_get_503_with_retry_after_and_none_hang() {
    // Room for two 4 KB bodies at once: the budget's bookkeeping does not depend on the
    // size, and small bodies keep the test quick in a debug build.
    let setup = Setup::with_panel(
        slow_panel,
        &[
            "--max-body-bytes",
            "5000",
            "--max-buffered-body-bytes",
            "10000",
        ],
    );
    let url = setup.server.url.clone();
    let chat = "/v1/chat/completions";
    let question = big_question(chat, 4000);
    let started = Instant::now();
    // From two addresses: one address holds at most its part (here one largest body).
    let held: Vec<_> = (2..4)
        .map(|n| {
            let (url, question) = (url.clone(), question.clone());
            tokio::spawn(async move { send_from(client_at(n), &url, chat, &question, false).await })
        })
        .collect();
    // Both bodies are in well before their sessions' 8 s are over, and the late requests'
    // 2 s of waiting end long before that, even on a loaded machine.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut late = Vec::new();
    for (path, chunked) in [
        (chat, false),
        (chat, false),
        (chat, true),
        ("/v1/messages", false),
        ("/v1/responses", false),
    ] {
        let (url, question) = (url.clone(), big_question(path, 4000));
        late.push(tokio::spawn(async move {
            (path, send(&url, path, &question, chunked).await)
        }));
    }
    // The server stays responsive while requests wait for room.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let probe = Instant::now();
    let health = client().get(format!("{url}/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert!(
        probe.elapsed() < Duration::from_secs(2),
        "{:?}",
        probe.elapsed()
    );
    for task in late {
        let (path, (status, retry_after, body)) = task.await.unwrap();
        assert_eq!(status, 503, "{path}: {body}");
        assert_eq!(retry_after.as_deref(), Some("1"), "{path}");
        // The Messages door's errors are Anthropic-shaped.
        assert_door_error(path, &body, "server_busy", "api_error", "");
        let message = &body["error"]["message"];
        assert!(
            message
                .as_str()
                .is_some_and(|m| m.contains("--max-buffered-body-bytes")),
            "{body}"
        );
    }
    for task in held {
        let (status, _, body) = task.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    assert!(started.elapsed() < Duration::from_secs(40), "too slow");
    // Every share was given back: a big body gets in again.
    let (status, _, body) = send(&url, chat, &question, false).await;
    assert_eq!(status, 200, "{body}");
    let metrics = metrics_text(&url).await;
    let refused = rejected(&metrics, "max_buffered_body_bytes");
    assert_eq!(refused, Some(5.0), "{metrics}");
}

#[test]
fn a_budget_smaller_than_the_body_limit_is_a_start_up_error() {
    let mut cmd = serve_command(bin());
    cmd.args([
        "--demo",
        "--max-body-bytes",
        "1000",
        "--max-buffered-body-bytes",
        "999",
    ]);
    let (_, stderr) = start_up_error(cmd, Duration::from_secs(20), "");
    assert!(
        stderr.contains("--max-buffered-body-bytes (999) must be at least --max-body-bytes (1000)"),
        "{stderr}"
    );
}

fn address(url: &str) -> &str {
    url.trim_start_matches("http://")
}

/// Whether the server closes `stream` within `within` (reading whatever it sends).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn one_address_past_its_connection_cap_is_closed_while_others_get_in() {
    let server = serve(&["--demo", "--max-connections-per-address", "3"]);
    let url = &server.url;
    // Three connections from 127.0.0.1 that send nothing (held until the header timeout).
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(address(url)).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut fourth = TcpStream::connect(address(url)).await.unwrap();
    assert!(
        closed_within(&mut fourth, Duration::from_secs(5)).await,
        "the 4th connection from 127.0.0.1 stayed open"
    );
    let refused = client_from([127, 0, 0, 1])
        .get(format!("{url}/health"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "server_busy", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("from one address"),
        "{body}"
    );
    // Another address is not affected.
    let other = client_from([127, 0, 0, 2]);
    let health = other.get(format!("{url}/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let metrics = metrics_via(&other, url).await;
    let closed = rejected(&metrics, "max_connections_per_address");
    assert!(closed.is_some_and(|n| n >= 2.0), "{metrics}");
    // Once its connections close, the address gets in again.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // Refused (503) until the server has seen the held connections close.
        if let Ok(r) = client_from([127, 0, 0, 1])
            .get(format!("{url}/health"))
            .send()
            .await
            && r.status() == 200
        {
            break;
        }
        assert!(Instant::now() < deadline, "127.0.0.1 never got in again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads one HTTP/1.1 response (headers and a `content-length` body) within `within`.
async fn read_response(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let text = String::from_utf8_lossy(&seen).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if seen.len() >= end + 4 + length {
                return Some(text);
            }
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => seen.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
}

const HEALTH: &[u8] = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n";

#[tokio::test]
async fn keep_alive_waits_under_the_idle_timeout_and_partial_headers_under_the_header_timeout() {
    let server = serve(&[
        "--demo",
        "--header-timeout-seconds",
        "2",
        "--idle-timeout-seconds",
        "10",
    ]);
    let url = &server.url;
    // A keep-alive connection idle 4 s between two requests: both answered.
    let mut kept = TcpStream::connect(address(url)).await.unwrap();
    kept.write_all(HEALTH).await.unwrap();
    let first = read_response(&mut kept, Duration::from_secs(5)).await;
    assert!(first.is_some_and(|r| r.starts_with("HTTP/1.1 200")));
    tokio::time::sleep(Duration::from_secs(4)).await;
    kept.write_all(HEALTH).await.unwrap();
    let second = read_response(&mut kept, Duration::from_secs(5)).await;
    assert!(
        second
            .as_deref()
            .is_some_and(|r| r.starts_with("HTTP/1.1 200")),
        "the second request on the idle keep-alive connection: {second:?}"
    );
    // Headers that stop halfway are cut after the header timeout: on a new connection,
    // and as the next request of a keep-alive one.
    let mut fresh = TcpStream::connect(address(url)).await.unwrap();
    fresh.write_all(b"GET /health HTTP/1.1\r\n").await.unwrap();
    kept.write_all(b"GET /health HTTP/1.1\r\n").await.unwrap();
    let started = Instant::now();
    let (fresh_closed, kept_closed) = tokio::join!(
        closed_within(&mut fresh, Duration::from_secs(8)),
        closed_within(&mut kept, Duration::from_secs(8)),
    );
    assert!(fresh_closed, "a partial first request was not cut");
    assert!(kept_closed, "a partial next request was not cut");
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "cut before the header timeout: {:?}",
        started.elapsed()
    );
}

/// The process's environment as it is now (after any restart).
#[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc")))]
fn environ(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    String::from_utf8_lossy(&raw).replace('\0', "\n")
}

/// With jemalloc (the default build), freed memory goes back to the system about a second
/// after it was freed (background purging, built in by .cargo/config.toml): big request
/// bodies raise the peak, and the idle server comes back down. glibc's malloc kept such a
/// peak for good.
#[cfg(all(target_os = "linux", feature = "jemalloc"))]
#[tokio::test]
async fn memory_of_big_requests_goes_back_to_the_system() {
    const MIB: u64 = 1024 * 1024;
    let server = serve(&["--demo"]);
    let pid = server.pid();
    let body = big_question("/v1/chat/completions", 6 * 1024 * 1024);
    send(&server.url, "/v1/chat/completions", &body, false).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = crate::support::rss(pid);
    // Sampled while the requests run: the peak lasts only as long as they do.
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(idle));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (sampling.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(
                    crate::support::rss(pid),
                    std::sync::atomic::Ordering::Relaxed,
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    for _ in 0..3 {
        // From four addresses: one holds at most its part of the body budget.
        let round = (2..6).map(|n| {
            send_from(
                client_at(n),
                &server.url,
                "/v1/chat/completions",
                &body,
                false,
            )
        });
        for (status, _, _) in futures::future::join_all(round).await {
            assert_eq!(status, 200);
        }
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.await.unwrap();
    let peak = sampling.load(std::sync::atomic::Ordering::Relaxed);
    let rise = peak.saturating_sub(idle);
    assert!(
        rise > 16 * MIB,
        "the load did not raise the peak: idle {} MiB, peak {} MiB",
        idle / MIB,
        peak / MIB
    );
    // At least three quarters of the rise given back (glibc's malloc gave back none).
    let back_to = idle + rise / 4;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut now = crate::support::rss(pid);
    while now > back_to && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        now = crate::support::rss(pid);
    }
    assert!(
        now <= back_to,
        "still {} MiB 20 s after a peak of {} MiB (idle {} MiB)",
        now / MIB,
        peak / MIB,
        idle / MIB
    );
}

/// Without jemalloc (`--no-default-features`): glibc's malloc, with a fixed mmap threshold.
#[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc")))]
#[test]
fn serve_runs_with_a_fixed_malloc_mmap_threshold_keeping_the_operators_own() {
    let server = serve(&["--demo"]);
    let env = environ(server.pid());
    assert!(
        env.lines()
            .any(|l| l == "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=262144"),
        "{env}"
    );
    let mut cmd = serve_command(bin());
    cmd.arg("--demo").env(
        "GLIBC_TUNABLES",
        "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=131072",
    );
    let server = crate::support::start(cmd, "massgen listening on");
    // glibc splits the variable in place where it reads it (`:` becomes NUL).
    let env = environ(server.pid());
    assert!(env.contains("glibc.malloc.arena_max=2"), "{env}");
    assert!(env.contains("glibc.malloc.mmap_threshold=131072"), "{env}");
    assert!(!env.contains("262144"), "{env}");
}
