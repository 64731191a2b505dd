//! The simulator served in this process behind a layer that keeps every JSON body it is
//! sent: what the agents really received, for tests that check a prompt (that a client's
//! earlier deliberation never reaches them, say). Async tests [`serve`] it on their own
//! runtime; for tests that are otherwise synchronous (they run clients with
//! [`super::run_bounded`]), [`RecordingSimulator`] owns one.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use serde_json::Value;
use tokio::sync::oneshot;

/// The JSON bodies received, in order.
pub type Seen = Arc<Mutex<Vec<Value>>>;

/// The layer that keeps each JSON body in `seen` before the simulator reads it (a body
/// that is not JSON, a `GET`'s, is passed on unkept).
pub async fn record(State(seen): State<Seen>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, massgen_simulator::MAX_BODY_BYTES)
        .await
        .unwrap_or_default();
    if let Ok(json) = serde_json::from_slice::<Value>(&bytes) {
        seen.lock().expect("recorded requests").push(json);
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The recording simulator on loopback, served on the current runtime: its base URL (a
/// panel's `base_url` is this plus `/v1`), what it is sent, and the sender whose drop
/// stops it.
pub async fn serve() -> (String, Seen, oneshot::Sender<()>) {
    let seen = Seen::default();
    let router =
        massgen_simulator::router().layer(middleware::from_fn_with_state(seen.clone(), record));
    let (url, stop) = super::serving::serve_router(router).await;
    (url, seen, stop)
}

/// The bodies received since the last take.
pub fn take(seen: &Seen) -> Vec<Value> {
    std::mem::take(&mut *seen.lock().expect("recorded requests"))
}

pub struct RecordingSimulator {
    /// The simulator's base URL (a panel's `base_url` is this plus `/v1`).
    pub url: String,
    seen: Seen,
    stop: Option<oneshot::Sender<()>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl RecordingSimulator {
    pub fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (url, seen, stop) = runtime.block_on(serve());
        Self {
            url,
            seen,
            stop: Some(stop),
            runtime: Some(runtime),
        }
    }

    /// The JSON bodies received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.seen.lock().expect("recorded requests").clone()
    }
}

impl Drop for RecordingSimulator {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

/// Every string inside a JSON value (a prompt's texts, wherever its format puts them).
pub fn strings(value: &Value) -> Vec<&str> {
    let mut out = Vec::new();
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::String(s) => out.push(s.as_str()),
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    out
}
