//! More shared pieces of the black-box tests: `massgen serve` commands (another build of
//! the binary, its own records database, its log captured, a start-up that must fail), an
//! in-process router on loopback, and HTTP probes (metrics, refusal counters, the error
//! shape of each door, requests sent at once, special clients, polling).

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Proc, chat, client, question, run_bounded, sample};

// ---------------------------------------------------------------------------------------
// The binary

/// The binary named by the environment variable `var` (another build, e.g. the one before
/// a fix, to see tests fail there), or this build's.
pub fn bin_from_env(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| super::bin().to_string())
}

/// `BIN serve --host 127.0.0.1 --port 0`, to add to.
pub fn serve_command(bin: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--host", "127.0.0.1", "--port", "0"]);
    cmd
}

/// `BIN serve` on port 0 with `args`, keeping records (and spend, reservations) in `db`.
pub fn serve_on_db<I, S>(bin: impl AsRef<OsStr>, args: I, db: &str) -> Proc
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = serve_command(bin);
    cmd.args(args).env("MASSGEN_SERVER_RECORDS_DB", db);
    super::start(cmd, "massgen listening on")
}

/// Runs `cmd` (bounded by `limit`), which must exit 2 before listening (a start-up
/// error); `what` names the case in the failure. Its output and its stderr as text.
pub fn start_up_error(cmd: Command, limit: Duration, what: &str) -> (Output, String) {
    let out = run_bounded(cmd, limit);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
    (out, stderr)
}

impl Proc {
    /// Sends SIGKILL (the process gets no shutdown of its own), without waiting for it:
    /// whether `kill` succeeded. [`Proc::terminate`] then collects it.
    pub fn kill_9(&self) -> bool {
        Command::new("kill")
            .args(["-KILL", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success())
    }
}

/// The stderr lines of a process, collected as they come.
#[derive(Clone, Default)]
pub struct Lines(Arc<Mutex<Vec<String>>>);

impl Lines {
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// The lines so far, one text.
    pub fn text(&self) -> String {
        self.0.lock().unwrap().join("\n")
    }
}

/// Runs `cmd` as it is (its environment, `RUST_LOG` included, is the caller's), its stderr
/// collected line by line, and waits (≤ 20 s) for the stdout line `<prefix> http://ADDR`;
/// when that does not come the process is killed and the test fails with the log so far.
pub fn start_logged(mut cmd: Command, prefix: &str) -> (Proc, Lines) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start massgen");
    let logs = Lines::default();
    let sink = logs.clone();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.0.lock().unwrap().push(line);
        }
    });
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let wanted = prefix.to_string();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix(&wanted) {
                let _ = tx.send(url.trim().to_string());
            }
        }
    });
    let Ok(url) = rx.recv_timeout(Duration::from_secs(20)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("server did not start: {:?}", logs.lines());
    };
    let proc = Proc {
        child,
        url,
        records: None,
    };
    (proc, logs)
}

/// `router` served in this process on a loopback port: its base URL, and the sender that
/// stops it.
pub async fn serve_router(router: axum::Router) -> (String, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
    });
    (url, stop)
}

// ---------------------------------------------------------------------------------------
// HTTP

/// The text of `GET {url}/metrics`, asked with `client`.
pub async fn metrics_via(client: &reqwest::Client, url: &str) -> String {
    client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The text of `GET {url}/metrics`.
pub async fn metrics_text(url: &str) -> String {
    metrics_via(&client(), url).await
}

/// The `massgen_rejected_requests_total` sample for `reason` in `metrics`.
pub fn rejected(metrics: &str, reason: &str) -> Option<f64> {
    sample(
        metrics,
        "massgen_rejected_requests_total",
        &[("reason", reason)],
    )
}

/// Checks that `body` is an error in the shape of `door`: on `/v1/messages` Anthropic's
/// (`type: error`, `error.type` = `anthropic_type`), on the OpenAI doors `error.code` =
/// `code`. `what` names the case in the failure.
pub fn assert_door_error(door: &str, body: &Value, code: &str, anthropic_type: &str, what: &str) {
    if door == "/v1/messages" {
        assert_eq!(body["type"], "error", "{door} {what}: {body}");
        assert_eq!(
            body["error"]["type"], anthropic_type,
            "{door} {what}: {body}"
        );
    } else {
        assert_eq!(body["error"]["code"], code, "{door} {what}: {body}");
    }
}

/// `POST {url}{path}` with `body` to every url of `urls` at once, with `key` as the bearer
/// token when given: each status and JSON body, in the order of `urls`.
pub async fn post_at_once(
    urls: impl IntoIterator<Item = String>,
    path: &str,
    key: Option<&str>,
    body: &Value,
) -> Vec<(u16, Value)> {
    let tasks: Vec<_> = urls
        .into_iter()
        .map(|url| {
            let (path, key, body) = (path.to_string(), key.map(str::to_string), body.clone());
            tokio::spawn(async move {
                let response = super::post(&url, &path, key.as_deref(), &body).await;
                let status = response.status().as_u16();
                (status, response.json::<Value>().await.unwrap())
            })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}

/// One finished session (the default question, not streamed) on `url`: its id.
pub async fn finished_session(url: &str) -> String {
    let response = chat(url, None, &question(false)).await;
    assert_eq!(response.status(), 200);
    response.headers()["x-massgen-session-id"]
        .to_str()
        .unwrap()
        .to_string()
}

/// A session of the default question, streamed, on `url`: the response (its stream not read
/// yet) and the session's id.
pub async fn streamed_session(url: &str) -> (reqwest::Response, String) {
    let response = chat(url, None, &question(true)).await;
    assert_eq!(response.status(), 200);
    let id = response.headers()["x-massgen-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    (response, id)
}

/// A client whose connections come from `ip` (any 127.0.0.0/8 address reaches loopback).
pub fn client_from(ip: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(ip))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// An HTTP/2 client with a zero window: the response headers arrive, no byte of the body
/// can (a client that never reads).
pub fn zero_window_client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .http2_initial_stream_window_size(Some(0))
        .http2_initial_connection_window_size(Some(0))
        .timeout(timeout)
        .build()
        .unwrap()
}

/// Polls `check` every `every` until it holds; fails (`what`) after `limit`.
pub async fn until<F, Fut>(what: &str, limit: Duration, every: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(every).await;
    }
}

/// The stored events of session `id` (`GET /v1/sessions/{id}/events`), checking the
/// status header says `status`; the stream must end within 20 s.
pub async fn stored_events(url: &str, id: &str, status: &str) -> Vec<super::Named> {
    let response = super::get(&format!("{url}/v1/sessions/{id}/events"), None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-massgen-session-status"], status);
    let raw = tokio::time::timeout(Duration::from_secs(20), response.text())
        .await
        .unwrap_or_else(|_| panic!("the {status} session's events end"))
        .unwrap();
    super::parse_named_sse(&raw).0
}
