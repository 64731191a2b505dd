//! Shared budgets cannot be held for free (issue 36, finding 1): no body is read, and no
//! part of `--max-buffered-body-bytes` taken, for a request that has not passed
//! authentication or that carries none (`OPTIONS`, `GET`, `DELETE`); a body's share follows
//! the bytes that arrived, not its declared length; and one key (one address, without
//! keys) holds at most its part of the budget, so the others always get in.

use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::{self, FAST, panel_yaml, post, question};

const DECLARED: usize = 8 * 1024 * 1024;

fn server(keys: Option<&str>) -> (support::Proc, support::Proc, tempfile::TempDir) {
    let mock = support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let config = support::write(dir.path(), "team.yaml", &panel_yaml(&mock.url, &FAST, ""));
    let args: Vec<&std::ffi::OsStr> = vec!["--config".as_ref(), config.as_os_str()];
    let server = match keys {
        Some(keys) => support::serve_with_keys(&args, keys),
        None => {
            let mut cmd = std::process::Command::new(support::bin());
            cmd.args(["serve", "--host", "127.0.0.1", "--port", "0"])
                .args(&args)
                .env_remove("MASSGEN_SERVER_API_KEYS");
            support::start(cmd, "massgen listening on")
        }
    };
    (mock, server, dir)
}

/// A connection from `from` that sends `head` (declaring [`DECLARED`] body bytes), then
/// `sent` bytes of body at once, then a byte every 500 ms for as long as the test runs.
async fn dripping(
    url: &str,
    from: [u8; 4],
    head: &str,
    sent: usize,
) -> tokio::task::JoinHandle<()> {
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind((std::net::Ipv4Addr::from(from), 0).into())
        .unwrap();
    let mut stream: TcpStream = socket.connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b' '; 64 * 1024];
    let mut left = sent;
    while left > 0 {
        let n = left.min(chunk.len());
        stream.write_all(&chunk[..n]).await.unwrap();
        left -= n;
    }
    tokio::spawn(async move {
        for _ in 0..120 {
            if stream.write_all(b" ").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

fn head(method: &str, path: &str, key: Option<&str>) -> String {
    let auth = key.map_or(String::new(), |k| format!("authorization: Bearer {k}\r\n"));
    format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n{auth}content-length: {DECLARED}\r\n\r\n"
    )
}

/// An ordinary request gets its answer (before, 503 `server_busy` after waiting 2 s).
async fn answered(url: &str, key: Option<&str>) {
    let r = post(url, "/v1/chat/completions", key, &question(false)).await;
    let status = r.status();
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn requests_without_a_key_or_a_body_hold_no_part_of_the_body_budget() {
    let (_mock, server, _dir) = server(Some("sk-mg-a,sk-mg-b"));
    let url = &server.url;
    // Four OPTIONS /mcp, no key, each declaring 8 MiB (the whole 32 MiB budget), dripping.
    let mut drips = Vec::new();
    for _ in 0..4 {
        drips.push(dripping(url, [127, 0, 0, 1], &head("OPTIONS", "/mcp", None), 0).await);
    }
    // And one HTTP/2 connection with four such streams.
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let mut streams = Vec::new();
    for _ in 0..4 {
        let body = futures::stream::unfold(0u32, |n| async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            (n < 120).then(|| (Ok::<_, std::io::Error>(vec![b' ']), n + 1))
        });
        let request = h2
            .request(reqwest::Method::OPTIONS, format!("{url}/mcp"))
            .header("content-length", DECLARED)
            .body(reqwest::Body::wrap_stream(body))
            .send();
        streams.push(tokio::spawn(request));
    }
    // A GET and a DELETE declaring bodies, with a key, hold nothing either.
    for method in ["GET", "DELETE"] {
        drips.push(
            dripping(
                url,
                [127, 0, 0, 1],
                &head(method, "/mcp", Some("sk-mg-a")),
                0,
            )
            .await,
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for key in ["sk-mg-b", "sk-mg-a"] {
        answered(url, Some(key)).await;
    }
    for task in drips {
        task.abort();
    }
    for task in streams {
        task.abort();
    }
}

#[tokio::test]
async fn one_key_holds_at_most_its_part_and_declared_lengths_reserve_nothing() {
    let (_mock, keyed, _dir) = server(Some("sk-mg-a,sk-mg-b"));
    let url = &keyed.url;
    // Key A: four bodies declaring 8 MiB (all of the 32 MiB budget), 7 MiB of each sent at
    // once, then a byte every 500 ms: A is held to its part (10 MiB: a quarter, and at
    // least one largest body), and nothing counts what has not arrived.
    let mut drips = Vec::new();
    for _ in 0..4 {
        let head = head("POST", "/v1/chat/completions", Some("sk-mg-a"));
        drips.push(dripping(url, [127, 0, 0, 1], &head, 7 * 1024 * 1024).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    answered(url, Some("sk-mg-b")).await;
    // Without keys, an address is held to its part the same way.
    let (_mock2, keyless, _dir2) = server(None);
    let url = &keyless.url;
    for _ in 0..4 {
        let head = head("POST", "/v1/chat/completions", None);
        drips.push(dripping(url, [127, 0, 0, 2], &head, 7 * 1024 * 1024).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 3]))
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let r = other
        .post(format!("{url}/v1/chat/completions"))
        .json(&json!({"model": "massgen", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for task in drips {
        task.abort();
    }
}
