//! The accept loop's streaming over a real loopback socket: a streamed response's events
//! leave one write each as they are produced, also on a reused keep-alive connection
//! (where, with Nagle's algorithm on, the client's delayed ACK held the first ~40 ms of a
//! stream back and delivered it in one piece), unless the model asks for `batch=on`.
#![allow(clippy::unwrap_used)] // a panic is the test failure

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Words of the answer: one SSE event each, `token_ms=1` apart, so that a 40 ms delayed
/// ACK would hold most of them.
const WORDS: usize = 24;
/// The most reads one response may take, and the longest it may take: the test is bounded
/// whatever the server does.
const MAX_READS: usize = 1_000;
const RESPONSE_DEADLINE: Duration = Duration::from_secs(10);

/// A streamed request of `format` ("chat" or "anthropic") for `model`, kept alive.
fn request(format: &str, model: &str) -> Vec<u8> {
    let messages = serde_json::json!([{"role": "user", "content": "Why is the sky blue?"}]);
    let (path, body) = match format {
        "chat" => (
            "/v1/chat/completions",
            serde_json::json!({"model": model, "stream": true, "messages": messages}),
        ),
        _ => (
            "/v1/messages",
            serde_json::json!({"model": model, "stream": true, "max_tokens": 500,
                "messages": messages}),
        ),
    };
    let body = body.to_string();
    format!(
        "POST {path} HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Sends `request` on `conn` and reads the response to its chunked body's end: the number
/// of SSE events each read returned after the one that brought the head.
async fn events_per_read(conn: &mut TcpStream, request: &[u8]) -> Vec<usize> {
    conn.write_all(request).await.unwrap();
    let mut seen = Vec::new();
    let mut per_read = Vec::new();
    let mut buf = vec![0; 64 * 1024];
    tokio::time::timeout(RESPONSE_DEADLINE, async {
        for _ in 0..MAX_READS {
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "the simulator closed the connection mid-response");
            let had_head = seen.windows(4).any(|w| w == b"\r\n\r\n");
            seen.extend_from_slice(&buf[..n]);
            if had_head {
                let text = String::from_utf8_lossy(&buf[..n]);
                per_read.push(text.matches("data: ").count());
            }
            if seen.ends_with(b"\r\n0\r\n\r\n") {
                return;
            }
        }
        panic!("no end of the response in {MAX_READS} reads");
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&seen);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    per_read
}

async fn start() -> (TcpStream, tokio::task::JoinHandle<std::io::Result<()>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(crate::serve(listener, std::future::pending()));
    (TcpStream::connect(addr).await.unwrap(), server)
}

/// On a reused keep-alive connection every event comes in a read of its own, the tail
/// (finish, `[DONE]`; a native format's closing events) included. Counts, not timings, are
/// asserted: with Nagle's algorithm on, the first read after the head brought 16 or 17 of
/// 27 events and the tail came as one; the bar leaves room for a reader that is late.
#[tokio::test]
async fn each_event_arrives_on_its_own_on_a_reused_connection() {
    let (mut conn, server) = start().await;
    let model = format!("sim-a:ttft_ms=0,token_ms=1,words={WORDS},usage=off");
    for format in ["chat", "anthropic"] {
        let request = request(format, &model);
        // The first response makes the connection a reused one, as a client's pool does.
        events_per_read(&mut conn, &request).await;
        for round in 0..2 {
            let per_read = events_per_read(&mut conn, &request).await;
            let events: usize = per_read.iter().sum();
            let arrivals = per_read.iter().filter(|&&n| n > 0).count();
            assert!(
                events > WORDS,
                "{format} {round}: {events} events: {per_read:?}"
            );
            assert!(
                arrivals * 4 >= events * 3,
                "{format} {round}: {events} events in {arrivals} reads: {per_read:?}"
            );
        }
    }
    server.abort();
}

/// `batch=on` is the one way to get events together: the whole stream in one write.
#[tokio::test]
async fn batch_on_writes_the_whole_stream_at_once() {
    let (mut conn, server) = start().await;
    let model = format!("sim-a:ttft_ms=0,token_ms=1,words={WORDS},batch=on");
    for format in ["chat", "anthropic"] {
        let request = request(format, &model);
        for _ in 0..2 {
            let per_read = events_per_read(&mut conn, &request).await;
            let with_events: Vec<usize> = per_read.iter().copied().filter(|&n| n > 0).collect();
            assert_eq!(with_events.len(), 1, "{format}: {per_read:?}");
            assert!(with_events[0] > WORDS, "{format}: {per_read:?}");
        }
    }
    server.abort();
}
