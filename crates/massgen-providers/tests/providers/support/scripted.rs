//! A scripted upstream on loopback: it answers every request with the next of its
//! replies (the last one repeats) and records what it received. The black-box tests of
//! the root crate borrow it (`tests/it/support/native.rs` includes this file), so it uses
//! nothing of the provider tests' own helpers.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

#[derive(Clone)]
pub enum Reply {
    /// Status, headers, body.
    Status(u16, Vec<(&'static str, String)>, String),
    /// A 200 SSE body.
    Sse(String),
}

/// One request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Path and query.
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Default)]
pub struct Upstream {
    replies: Mutex<VecDeque<Reply>>,
    pub seen: Mutex<Vec<Seen>>,
    pub count: AtomicUsize,
}

impl Upstream {
    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn handle(
    State(upstream): State<Arc<Upstream>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    upstream.count.fetch_add(1, Ordering::SeqCst);
    upstream.seen.lock().unwrap().push(Seen {
        uri: uri.to_string(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let reply = {
        let mut replies = upstream.replies.lock().unwrap();
        if replies.len() > 1 {
            replies.pop_front()
        } else {
            replies.front().cloned()
        }
    };
    match reply.expect("a scripted reply") {
        Reply::Status(status, headers, body) => {
            let mut response = Response::builder().status(StatusCode::from_u16(status).unwrap());
            for (name, value) in headers {
                response = response.header(name, value);
            }
            response.body(Body::from(body)).unwrap()
        }
        Reply::Sse(text) => Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from(text))
            .unwrap(),
    }
}

/// Serves `replies` (the last one repeats) on every path; returns `http://ADDR`.
pub async fn serve(replies: Vec<Reply>) -> (String, Arc<Upstream>) {
    let upstream = Arc::new(Upstream {
        replies: Mutex::new(replies.into()),
        ..Upstream::default()
    });
    let router = Router::new()
        .fallback(handle)
        .with_state(Arc::clone(&upstream));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (format!("http://{addr}"), upstream)
}
