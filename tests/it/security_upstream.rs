//! Issue 36 part 7: a hostile upstream holds neither memory nor time. One call's answer is
//! cut at 8 MiB (text, reasoning and tool calls together) whichever client reads it (the
//! own HTTP/1.1 client, h2c, reqwest through a proxy), and a head sent a byte a second,
//! endless `100 Continue` heads, an error body sent a byte every 2 s or a stream of SSE
//! comments each end the call well before the turn's timeout (300 s), while the panel's
//! other agent answers.
//!
//! The real binary serves; the hostile upstream is a loopback listener in the test writing
//! raw bytes (axum's h2c server for the h2c case), the other agent the simulator.
//! `MASSGEN_TEST_BIN` points at another build (the one before this change, to see these
//! tests fail there).

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::serving::{bin_from_env, serve_command, serve_router, until};
use crate::support::{Proc, client_with_timeout, mock_upstream, question, rss, start, write};

const MIB: u64 = 1024 * 1024;

/// What the flooding upstreams send unless cut: 2 GiB.
const FLOOD: u64 = 2 * 1024 * MIB;

/// The memory a flooded call may add to the server's: generous over the 8 MiB cap.
const RSS_ALLOWANCE: u64 = 64 * MIB;

/// How long a session with a slow-drip upstream may take: the turn's timeout is 300 s, and
/// before this change each held the call that long (or 120 s a try).
const SESSION_WITHIN: Duration = Duration::from_secs(60);

/// The bytes of answer one flooding event carries.
const PIECE: usize = 64 * 1024;

/// The binary under test.
fn bin() -> String {
    bin_from_env("MASSGEN_TEST_BIN")
}

// ---------------------------------------------------------------------------------------
// The hostile upstream

/// One connection to the hostile upstream: when it opened and closed, the bytes written.
#[derive(Clone, Debug)]
struct Conn {
    opened: Instant,
    closed: Option<Instant>,
    sent: u64,
}

#[derive(Clone)]
enum Behaviour {
    /// A 200 event stream: `opening`, then `event` again and again, [`FLOOD`] bytes in all.
    Flood { opening: Bytes, event: Bytes },
    /// `head`, then `piece` every `every` (at most 400 times) until the client goes.
    Drip {
        head: &'static [u8],
        piece: &'static [u8],
        every: Duration,
    },
}

/// A loopback listener that answers every request as `Behaviour` says.
struct Hostile {
    url: String,
    conns: Arc<Mutex<Vec<Conn>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Hostile {
    async fn start(behaviour: Behaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let conns = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&conns);
        let task = tokio::spawn(async move {
            // Bounded: a call is tried at most twice here, a session has one hostile agent.
            for _ in 0..32 {
                let Ok((conn, _)) = listener.accept().await else {
                    return;
                };
                let index = {
                    let mut conns = seen.lock().unwrap();
                    conns.push(Conn {
                        opened: Instant::now(),
                        closed: None,
                        sent: 0,
                    });
                    conns.len() - 1
                };
                let record = Arc::clone(&seen);
                let behaviour = behaviour.clone();
                tokio::spawn(async move {
                    let sent = |n: u64| record.lock().unwrap()[index].sent += n;
                    answer(conn, behaviour, sent).await;
                    record.lock().unwrap()[index].closed = Some(Instant::now());
                });
            }
        });
        Self { url, conns, task }
    }

    fn conns(&self) -> Vec<Conn> {
        self.conns.lock().unwrap().clone()
    }

    /// Waits (≤ 10 s) until every connection is closed; the connections.
    async fn closed(&self) -> Vec<Conn> {
        until(
            "the hostile upstream's connections closed",
            Duration::from_secs(10),
            Duration::from_millis(50),
            || async { self.conns().iter().all(|c| c.closed.is_some()) },
        )
        .await;
        self.conns()
    }
}

/// Reads one request (head and `Content-Length` body); false when the client went first.
async fn read_request(conn: &mut TcpStream) -> bool {
    let mut data = Vec::new();
    let mut chunk = [0u8; 8192];
    let limit = Duration::from_secs(10);
    let head_end = loop {
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match tokio::time::timeout(limit, conn.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 && data.len() < 1 << 20 => data.extend_from_slice(&chunk[..n]),
            _ => return false,
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    while data.len() < head_end + length {
        match tokio::time::timeout(limit, conn.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => data.extend_from_slice(&chunk[..n]),
            _ => return false,
        }
    }
    true
}

async fn answer(mut conn: TcpStream, behaviour: Behaviour, sent: impl Fn(u64)) {
    if !read_request(&mut conn).await {
        return;
    }
    match behaviour {
        Behaviour::Flood { opening, event } => {
            let head =
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            if conn.write_all(head).await.is_err() || conn.write_all(&opening).await.is_err() {
                return;
            }
            let mut total = 0;
            while total < FLOOD {
                if conn.write_all(&event).await.is_err() {
                    return;
                }
                total += event.len() as u64;
                sent(event.len() as u64);
            }
        }
        Behaviour::Drip { head, piece, every } => {
            let (mut read, mut write) = conn.into_split();
            if write.write_all(head).await.is_err() {
                return;
            }
            sent(head.len() as u64);
            let mut buf = [0u8; 1024];
            for _ in 0..400 {
                tokio::select! {
                    () = tokio::time::sleep(every) => {
                        if write.write_all(piece).await.is_err() {
                            return;
                        }
                        sent(piece.len() as u64);
                    }
                    // The client closed (or reset) the connection.
                    read = read.read(&mut buf) => {
                        if !matches!(read, Ok(n) if n > 0) {
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// An h2c upstream (axum's server, which speaks HTTP/2 with prior knowledge) streaming
/// `opening` and then `event` for [`FLOOD`] bytes; the bytes it sent, and whether the
/// stream was dropped (the client reset it).
async fn hostile_h2c(
    opening: Bytes,
    event: Bytes,
) -> (
    String,
    Arc<AtomicU64>,
    Arc<AtomicBool>,
    tokio::sync::oneshot::Sender<()>,
) {
    struct Dropped(Arc<AtomicBool>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let sent = Arc::new(AtomicU64::new(0));
    let dropped = Arc::new(AtomicBool::new(false));
    let (counter, flag) = (Arc::clone(&sent), Arc::clone(&dropped));
    let reply = move || {
        let (counter, guard) = (Arc::clone(&counter), Dropped(Arc::clone(&flag)));
        let (opening, event) = (opening.clone(), event.clone());
        async move {
            let events = FLOOD / event.len() as u64;
            let body = futures::StreamExt::map(
                futures::stream::iter(
                    std::iter::once(opening)
                        .chain(std::iter::repeat_n(event, usize::try_from(events).unwrap())),
                ),
                move |piece| {
                    let _held = &guard;
                    counter.fetch_add(piece.len() as u64, Ordering::Relaxed);
                    Ok::<_, std::io::Error>(piece)
                },
            );
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .body(axum::body::Body::from_stream(body))
                .unwrap()
        }
    };
    let router = axum::Router::new().route("/v1/chat/completions", axum::routing::post(reply));
    let (url, stop) = serve_router(router).await;
    (url, sent, dropped, stop)
}

// ---------------------------------------------------------------------------------------
// The server

/// A simulator, and `massgen serve` whose panel is the agent `hostile` at `hostile_url`
/// (with `backend_extra` lines) and a simulated agent that answers; `env` for the server.
struct Server {
    proc: Proc,
    _mock: Proc,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(hostile_url: &str, backend_extra: &str, env: &[(&str, &str)]) -> Self {
        let mock = mock_upstream();
        let dir = tempfile::tempdir().unwrap();
        let panel = format!(
            "agents:
  - id: hostile
    backend:
      type: chatcompletion
      base_url: {hostile_url}/v1
      model: m{backend_extra}
  - id: sim
    backend:
      type: chatcompletion
      base_url: {}/v1
      model: \"sim:ttft_ms=10,token_ms=1\"
retry:
  max_attempts: 2
  initial_backoff_ms: 10
  max_backoff_ms: 50
  idle_timeout_seconds: 5
",
            mock.url
        );
        let config = write(dir.path(), "team.yaml", &panel);
        let mut cmd: Command = serve_command(bin());
        cmd.arg("--config").arg(&config).envs(env.iter().copied());
        Self {
            proc: start(cmd, "massgen listening on"),
            _mock: mock,
            _dir: dir,
        }
    }

    /// Asks one question: the status, the answer's text (empty when none), and how long
    /// the session took; `Err` when it took longer than `limit`.
    async fn ask(&self, limit: Duration) -> Result<(u16, String, Duration), String> {
        let started = Instant::now();
        let sent = client_with_timeout(limit)
            .post(format!("{}/v1/chat/completions", self.proc.url))
            .json(&question(false))
            .send()
            .await;
        let response = sent.map_err(|error| format!("after {:?}: {error}", started.elapsed()))?;
        let status = response.status().as_u16();
        let body: Value = response.json().await.map_err(|error| error.to_string())?;
        let text = body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        Ok((status, text, started.elapsed()))
    }
}

/// Runs `work` while sampling the resident memory of `pid` every 20 ms: the highest seen,
/// and what `work` gave, or `None` when the memory passed `ceiling` first (then the test has
/// failed, and waiting on would only let the server grow).
async fn peak_while<T>(
    pid: u32,
    ceiling: u64,
    work: impl std::future::Future<Output = T>,
) -> (u64, Option<T>) {
    let mut peak = rss(pid);
    let mut work = std::pin::pin!(work);
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    // Bounded by `work`, which is bounded in time.
    loop {
        tokio::select! {
            done = &mut work => return (peak.max(rss(pid)), Some(done)),
            _ = tick.tick() => {
                peak = peak.max(rss(pid));
                if peak > ceiling {
                    return (peak, None);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Bytes

fn chat_event(delta: &str) -> Bytes {
    Bytes::from(format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{delta}}}]}}\n\n"
    ))
}

fn content_flood() -> (Bytes, Bytes) {
    let x = "x".repeat(PIECE);
    (
        Bytes::new(),
        chat_event(&format!("{{\"content\":\"{x}\"}}")),
    )
}

fn tool_argument_flood() -> (Bytes, Bytes) {
    let x = "x".repeat(PIECE);
    (
        chat_event(
            "{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"new_answer\",\"arguments\":\"{\\\"content\\\":\\\"\"}}]}",
        ),
        chat_event(&format!(
            "{{\"tool_calls\":[{{\"index\":0,\"function\":{{\"arguments\":\"{x}\"}}}}]}}"
        )),
    )
}

/// The session answers (the simulated agent), the server's memory grew by less than
/// [`RSS_ALLOWANCE`] over its idle size, and the hostile call's connections were cut long
/// before their 2 GiB (`sent` per connection).
async fn answers_within_memory(what: &str, server: &Server, sent: impl Fn() -> Vec<u64>) {
    let pid = server.proc.pid();
    let idle = rss(pid);
    let (peak, asked) = peak_while(
        pid,
        idle + RSS_ALLOWANCE,
        server.ask(Duration::from_secs(120)),
    )
    .await;
    let grew = peak.saturating_sub(idle);
    eprintln!(
        "{what}: idle {} MiB, peak {} MiB (+{} MiB); upstream sent {:?} MiB per connection; {asked:?}",
        idle / MIB,
        peak / MIB,
        grew / MIB,
        sent().iter().map(|n| n / MIB).collect::<Vec<_>>()
    );
    assert!(
        grew < RSS_ALLOWANCE,
        "{what}: the server grew by {} MiB",
        grew / MIB
    );
    let asked = asked.expect("ended before the memory passed its ceiling");
    let (status, text, _) = asked.unwrap_or_else(|error| panic!("{what}: {error}"));
    assert_eq!(status, 200, "{what}: {text}");
    assert!(!text.is_empty(), "{what}: no answer");
    let sent = sent();
    assert!(
        !sent.is_empty(),
        "{what}: the hostile agent was never called"
    );
    for n in sent {
        assert!(
            n < 64 * MIB,
            "{what}: {} MiB read from one connection",
            n / MIB
        );
    }
}

#[tokio::test]
async fn a_2_gib_answer_is_cut_and_the_server_stays_small_over_http_1_1() {
    for (what, (opening, event)) in [
        ("content", content_flood()),
        ("tool-call arguments", tool_argument_flood()),
    ] {
        let hostile = Hostile::start(Behaviour::Flood { opening, event }).await;
        let server = Server::start(&hostile.url, "", &[]);
        answers_within_memory(what, &server, || {
            hostile.conns().iter().map(|c| c.sent).collect()
        })
        .await;
        hostile.closed().await;
    }
}

#[tokio::test]
async fn a_2_gib_answer_is_cut_over_h2c() {
    let (opening, event) = content_flood();
    let (url, sent, dropped, _stop) = hostile_h2c(opening, event).await;
    let server = Server::start(&url, "\n      h2c: true", &[]);
    answers_within_memory("h2c", &server, || vec![sent.load(Ordering::Relaxed)]).await;
    until(
        "the h2c stream reset",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async { dropped.load(Ordering::Relaxed) },
    )
    .await;
}

#[tokio::test]
async fn a_2_gib_answer_is_cut_over_reqwest_through_a_proxy() {
    // With a proxy for http:// in the environment, upstream calls go through reqwest (the
    // https:// client): the hostile listener is the proxy, the simulator is not proxied.
    let (opening, event) = content_flood();
    let hostile = Hostile::start(Behaviour::Flood { opening, event }).await;
    let proxy = hostile.url.clone();
    let mut env = Vec::new();
    for var in ["HTTP_PROXY", "http_proxy"] {
        env.push((var, proxy.as_str()));
    }
    for var in ["NO_PROXY", "no_proxy"] {
        env.push((var, "127.0.0.1,localhost"));
    }
    for var in ["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"] {
        env.push((var, ""));
    }
    let server = Server::start("http://hostile.invalid", "", &env);
    answers_within_memory("reqwest", &server, || {
        hostile.conns().iter().map(|c| c.sent).collect()
    })
    .await;
    hostile.closed().await;
}

// ---------------------------------------------------------------------------------------
// Time

/// The session answers within [`SESSION_WITHIN`] and the hostile upstream's connections
/// were each held `within` at most: how long the longest was.
async fn ends_soon(what: &str, behaviour: Behaviour, within: Duration) {
    let hostile = Hostile::start(behaviour).await;
    let server = Server::start(&hostile.url, "", &[]);
    let asked = server.ask(SESSION_WITHIN).await;
    let conns = hostile.conns();
    let held: Vec<Duration> = conns
        .iter()
        .map(|c| c.closed.unwrap_or_else(Instant::now) - c.opened)
        .collect();
    eprintln!("{what}: {asked:?}; connections held {held:?}");
    let (status, text, took) = asked.unwrap_or_else(|error| panic!("{what}: {error}"));
    assert_eq!(status, 200, "{what}: {text}");
    assert!(!text.is_empty(), "{what}: no answer");
    assert!(took < SESSION_WITHIN, "{what}: {took:?}");
    assert!(
        !conns.is_empty(),
        "{what}: the hostile agent was never called"
    );
    for conn in hostile.closed().await {
        let held = conn.closed.unwrap() - conn.opened;
        assert!(held < within, "{what}: a connection held {held:?}");
    }
}

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn a_head_sent_a_byte_a_second_ends_the_call_soon() {
    // 10 s from the head's first byte, a try; before, 120 s (the first-byte timeout).
    let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-slow: ";
    let drip = Behaviour::Drip {
        head,
        piece: b"a",
        every: SECOND,
    };
    ends_soon("a dripped head", drip, 15 * SECOND).await;
}

#[tokio::test]
async fn endless_interim_heads_end_the_call_soon() {
    let drip = Behaviour::Drip {
        head: b"HTTP/1.1 100 Continue\r\n\r\n",
        piece: b"HTTP/1.1 100 Continue\r\n\r\n",
        every: Duration::from_millis(200),
    };
    ends_soon("endless 100 Continue", drip, 15 * SECOND).await;
}

#[tokio::test]
async fn an_error_body_sent_a_byte_every_2_s_ends_the_call_soon() {
    // Its deadline is 10 s, or the idle timeout when shorter (5 s here).
    let drip = Behaviour::Drip {
        head: b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: 65536\r\n\r\n",
        piece: b"x",
        every: 2 * SECOND,
    };
    ends_soon("a dripped error body", drip, 10 * SECOND).await;
}

#[tokio::test]
async fn a_stream_of_sse_comments_only_ends_the_call_at_the_idle_timeout() {
    // A comment a second, under the idle timeout (5 s here): before, each restarted it.
    let drip = Behaviour::Drip {
        head: b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n",
        piece: b": OPENROUTER PROCESSING\n\n",
        every: SECOND,
    };
    ends_soon("SSE comments only", drip, 10 * SECOND).await;
}
