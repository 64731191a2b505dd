#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is the test failure

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::HeaderMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// Bounds every wait of these tests.
const LIMIT: Duration = Duration::from_secs(10);

pub(super) fn client() -> H1Client {
    H1Client::new(
        Duration::from_secs(5),
        Duration::from_secs(30),
        HEAD_WITHIN,
        "massgen/test",
    )
}

/// Reads one request (head and `Content-Length` body) off `conn`; `None` at its end.
pub(super) async fn read_request(conn: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut data = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = tokio::time::timeout(LIMIT, conn.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(data[..head_end].to_vec()).unwrap();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length: "))
        .unwrap()
        .parse()
        .unwrap();
    while data.len() < head_end + length {
        let n = tokio::time::timeout(LIMIT, conn.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "request body cut");
        data.extend_from_slice(&chunk[..n]);
    }
    Some((head, data[head_end..].to_vec()))
}

/// A server answering each request on each connection with the next of `answers` (written
/// in the given pieces, 5 ms apart; `CLOSE` closes the connection); returns its address
/// and each request's head with the number of the connection it came on.
async fn server(
    answers: Vec<Vec<&'static [u8]>>,
) -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<(usize, String)>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (heads, seen) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let answers = std::sync::Arc::new(tokio::sync::Mutex::new(answers.into_iter()));
        for index in 0..16 {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let (answers, heads) = (answers.clone(), heads.clone());
            tokio::spawn(async move {
                while let Some((head, _)) = read_request(&mut conn).await {
                    let _ = heads.send((index, head));
                    let Some(pieces) = answers.lock().await.next() else {
                        return;
                    };
                    for piece in pieces {
                        if piece == b"CLOSE" {
                            return;
                        }
                        conn.write_all(piece).await.unwrap();
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            });
        }
    });
    (address, seen)
}

async fn body_of(response: Response) -> Result<String, String> {
    let mut body = response.body;
    let mut text = Vec::new();
    loop {
        match tokio::time::timeout(LIMIT, body.next()).await.unwrap() {
            Some(Ok(bytes)) => text.extend_from_slice(&bytes),
            Some(Err(error)) => return Err(error.to_string()),
            None => return Ok(String::from_utf8(text).unwrap()),
        }
    }
}

async fn post(client: &H1Client, address: &str, headers: &HeaderMap) -> Result<Response, String> {
    let target = Target::parse(&format!("http://{address}/v1/chat/completions?x=1")).unwrap();
    tokio::time::timeout(
        LIMIT,
        client.post(&target, headers, Bytes::from_static(b"{\"q\":1}")),
    )
    .await
    .unwrap()
    .map_err(|error| error.message)
}

#[tokio::test]
async fn a_chunked_stream_in_odd_pieces_is_read_whole_and_its_connection_reused() {
    let (address, mut seen) = server(vec![
        vec![
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
            b"9;ext=1\r\ndata: ",
            b"a\r\n\r\n4\r",
            b"\nb\n\n\n\r\n0\r\nx-trailer: 1\r\n\r\n",
        ],
        vec![b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nlast"],
    ])
    .await;
    let client = client();
    let response = post(&client, &address, &HeaderMap::new()).await.unwrap();
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(response.headers["content-type"], "text/event-stream");
    assert_eq!(body_of(response).await.unwrap(), "data: a\r\nb\n\n\n");
    assert_eq!(client.pool.idle(&address), 1);
    let (first, head) = seen.recv().await.unwrap();
    assert!(
        head.starts_with("POST /v1/chat/completions?x=1 HTTP/1.1\r\n"),
        "{head}"
    );
    for field in [
        format!("host: {address}"),
        "content-type: application/json".to_string(),
        "accept: text/event-stream".to_string(),
        "user-agent: massgen/test".to_string(),
        "content-length: 7".to_string(),
    ] {
        assert!(
            head.contains(&format!("\r\n{field}\r\n")),
            "{field} missing: {head}"
        );
    }
    let response = post(&client, &address, &HeaderMap::new()).await.unwrap();
    assert_eq!(body_of(response).await.unwrap(), "last");
    assert_eq!(
        seen.recv().await.unwrap().0,
        first,
        "not on the same connection"
    );
    assert_eq!(client.pool.idle(&address), 1);
}

#[tokio::test]
async fn headers_given_replace_the_defaults_and_framing_stays_the_clients() {
    let (address, mut seen) =
        server(vec![vec![b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"]]).await;
    let mut headers = HeaderMap::new();
    headers.insert("accept", HeaderValue::from_static("application/json"));
    headers.insert("authorization", HeaderValue::from_static("Bearer k"));
    headers.insert("content-length", HeaderValue::from_static("999"));
    headers.insert("connection", HeaderValue::from_static("close"));
    let response = post(&client(), &address, &headers).await.unwrap();
    assert_eq!(body_of(response).await.unwrap(), "");
    let head = seen.recv().await.unwrap().1.to_lowercase();
    assert_eq!(head.matches("accept:").count(), 1, "{head}");
    assert!(head.contains("\r\naccept: application/json\r\n"), "{head}");
    assert!(head.contains("\r\nauthorization: bearer k\r\n"), "{head}");
    assert!(
        head.contains("\r\ncontent-length: 7\r\n") && !head.contains("999"),
        "{head}"
    );
    assert!(!head.contains("connection:"), "{head}");
}

#[tokio::test]
async fn a_pooled_connection_the_upstream_closed_is_replaced_without_failing_the_call() {
    // The first answer ends with the server closing the connection it keeps alive.
    let (address, mut seen) = server(vec![
        vec![b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", b"CLOSE"],
        vec![b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nagain"],
    ])
    .await;
    let client = client();
    let response = post(&client, &address, &HeaderMap::new()).await.unwrap();
    assert_eq!(body_of(response).await.unwrap(), "ok");
    assert_eq!(client.pool.idle(&address), 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let response = post(&client, &address, &HeaderMap::new()).await.unwrap();
    assert_eq!(body_of(response).await.unwrap(), "again");
    let on = [seen.recv().await.unwrap().0, seen.recv().await.unwrap().0];
    assert_eq!(
        on,
        [0, 1],
        "the second call was not made on a new connection"
    );
}

#[tokio::test]
async fn a_body_dropped_half_read_closes_its_connection() {
    let (address, _seen) = server(vec![vec![
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n",
        b"3\r\ndef\r\n0\r\n\r\n",
    ]])
    .await;
    let client = client();
    let mut body = post(&client, &address, &HeaderMap::new())
        .await
        .unwrap()
        .body;
    assert_eq!(&body.next().await.unwrap().unwrap()[..], b"abc");
    drop(body);
    assert_eq!(client.pool.idle(&address), 0);
}

#[tokio::test]
async fn bodies_cut_or_malformed_fail_the_stream_not_the_process() {
    let cases: [(&[u8], &str); 5] = [
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
            "closed the connection before the response ended",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            "chunk size cannot be read",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabc\r\n",
            "longer than its size",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1ffffffffffffffff\r\n",
            "chunk size cannot be read",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n",
            "closed the connection before",
        ),
    ];
    for (answer, expected) in cases {
        let (address, _seen) = server(vec![vec![answer, b"CLOSE"]]).await;
        let response = post(&client(), &address, &HeaderMap::new()).await.unwrap();
        let error = body_of(response).await.unwrap_err();
        assert!(
            error.contains(expected),
            "{error} for {}",
            String::from_utf8_lossy(answer)
        );
    }
}

#[tokio::test]
async fn a_body_without_length_runs_to_the_close_and_its_connection_is_not_kept() {
    let (address, _seen) = server(vec![vec![
        b"HTTP/1.1 200 OK\r\n\r\nuntil ",
        b"the end",
        b"CLOSE",
    ]])
    .await;
    let client = client();
    let response = post(&client, &address, &HeaderMap::new()).await.unwrap();
    assert_eq!(body_of(response).await.unwrap(), "until the end");
    assert_eq!(client.pool.idle(&address), 0);
}

#[tokio::test]
async fn a_response_with_both_lengths_is_read_chunked_and_its_connection_not_kept() {
    let (address, _seen) = server(vec![vec![
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n",
        b"5\r\nhello\r\n0\r\n\r\n",
    ]])
    .await;
    let client = client();
    let response = post(&client, &address, &HeaderMap::new()).await.unwrap();
    assert_eq!(body_of(response).await.unwrap(), "hello");
    assert_eq!(client.pool.idle(&address), 0);
}

#[tokio::test]
async fn a_pooled_connection_that_fails_late_fails_the_call_and_is_not_sent_twice() {
    // The second request is read, then nothing for longer than a round trip, then the
    // connection closes (an upstream that died while generating).
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        for _ in 0..4 {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let counted = counted.clone();
            tokio::spawn(async move {
                while read_request(&mut conn).await.is_some() {
                    if counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        conn.write_all(ok).await.unwrap();
                    } else {
                        tokio::time::sleep(RESEND_WITHIN + Duration::from_millis(300)).await;
                        return;
                    }
                }
            });
        }
    });
    let client = client();
    let first = post(&client, &address, &HeaderMap::new()).await.unwrap();
    assert_eq!(body_of(first).await.unwrap(), "ok");
    assert_eq!(client.pool.idle(&address), 1);
    let error = post(&client, &address, &HeaderMap::new())
        .await
        .err()
        .unwrap();
    assert!(error.contains("closed the connection"), "{error}");
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[tokio::test]
async fn heads_that_cannot_be_read_are_errors_with_a_reason() {
    let huge: &'static [u8] = Box::leak(
        format!("HTTP/1.1 200 OK\r\nx-big: {}\r\n", "a".repeat(MAX_HEAD))
            .into_bytes()
            .into_boxed_slice(),
    );
    let cases: [(&[u8], &str); 4] = [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "response head cannot be read"),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 1, 2\r\n\r\n",
            "invalid Content-Length",
        ),
        (
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "answered with status 101",
        ),
        (huge, "larger than 64 KiB"),
    ];
    for (answer, expected) in cases {
        let (address, _seen) = server(vec![vec![answer, b"CLOSE"]]).await;
        let error = post(&client(), &address, &HeaderMap::new())
            .await
            .err()
            .unwrap();
        assert!(error.contains(expected), "{error}");
    }
    // Nothing listening: a refused connection, not a timeout.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    drop(listener);
    let target = Target::parse(&format!("http://{address}/")).unwrap();
    let error = client()
        .post(&target, &HeaderMap::new(), Bytes::new())
        .await
        .err()
        .unwrap();
    assert!(
        !error.timeout && error.message.starts_with("cannot connect to the upstream"),
        "{}",
        error.message
    );
}

#[test]
fn targets_keep_the_path_and_name_the_port_only_when_the_url_does() {
    let target = Target::parse("http://vllm/v1/chat/completions").unwrap();
    assert_eq!(
        (
            &*target.address,
            target.host.to_str().unwrap(),
            &*target.path
        ),
        ("vllm:80", "vllm", "/v1/chat/completions")
    );
    let target = Target::parse("http://[::1]:8000").unwrap();
    assert_eq!(
        (
            &*target.address,
            target.host.to_str().unwrap(),
            &*target.path
        ),
        ("[::1]:8000", "[::1]:8000", "/")
    );
    assert!(Target::parse("http://bad host/").is_err());
}

#[test]
fn framing_follows_rfc_9112() {
    let headers = |pairs: &[(&'static str, &'static str)]| {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    };
    let ok = StatusCode::OK;
    assert_eq!(
        framing::framing(
            ok,
            &headers(&[
                ("transfer-encoding", "gzip, chunked"),
                ("content-length", "3")
            ])
        ),
        Ok(Framing::Chunked)
    );
    assert_eq!(
        framing::framing(ok, &headers(&[("transfer-encoding", "chunked, gzip")])),
        Ok(Framing::Close)
    );
    assert_eq!(
        framing::framing(
            ok,
            &headers(&[("content-length", "7"), ("content-length", "7")])
        ),
        Ok(Framing::Length(7))
    );
    assert!(framing::framing(ok, &headers(&[("content-length", "+7")])).is_err());
    assert_eq!(framing::framing(ok, &headers(&[])), Ok(Framing::Close));
    assert_eq!(
        framing::framing(StatusCode::NO_CONTENT, &headers(&[])),
        Ok(Framing::Length(0))
    );
}

/// A server that reads one request, waits `wait`, writes `first`, then `piece` every `gap`
/// up to `times` times.
async fn dripping(
    wait: Duration,
    first: &'static [u8],
    piece: &'static [u8],
    gap: Duration,
    times: usize,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        read_request(&mut conn).await.unwrap();
        tokio::time::sleep(wait).await;
        conn.write_all(first).await.unwrap();
        for _ in 0..times {
            if conn.write_all(piece).await.is_err() {
                break;
            }
            tokio::time::sleep(gap).await;
        }
    });
    address
}

#[tokio::test]
async fn a_head_must_end_soon_after_its_first_byte_interim_heads_included() {
    let within = Duration::from_millis(400);
    let client = H1Client::new(
        Duration::from_secs(5),
        Duration::from_secs(30),
        within,
        "massgen/test",
    );
    let ms = Duration::from_millis;
    // A byte of a head every 50 ms, and `100 Continue` heads every 50 ms: neither ever
    // ends (400 pieces: 20 s), so each was only bounded by the call's first-byte timeout.
    for (what, first, piece) in [
        (
            "a dripped head",
            &b"HTTP/1.1 200 OK\r\nx-slow: "[..],
            &b"a"[..],
        ),
        (
            "endless interim heads",
            b"",
            b"HTTP/1.1 100 Continue\r\n\r\n",
        ),
    ] {
        let address = dripping(ms(0), first, piece, ms(50), 400).await;
        let started = std::time::Instant::now();
        let target = Target::parse(&format!("http://{address}/v1")).unwrap();
        let headers = HeaderMap::new();
        let sent = client.post(&target, &headers, Bytes::from_static(b"{}"));
        let Err(error) = tokio::time::timeout(LIMIT, sent).await.unwrap() else {
            panic!("{what}: a response");
        };
        assert!(error.timeout, "{what}: {}", error.message);
        assert!(
            error.message.contains("did not end within 400ms"),
            "{what}: {}",
            error.message
        );
        // Generous: the bound is 400 ms from the first byte.
        assert!(
            started.elapsed() < ms(3000),
            "{what}: {:?}",
            started.elapsed()
        );
    }
    // The wait before the first byte is the model's, not the head's: a head that comes
    // whole after three times the bound is read.
    let address = dripping(
        ms(1200),
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        b"",
        ms(0),
        0,
    )
    .await;
    let response = post(&client, &address, &HeaderMap::new()).await.unwrap();
    assert_eq!(body_of(response).await.unwrap(), "ok");
}
