//! The simulator (`massgen_simulator`, the code behind `massgen mock-upstream`) served
//! in the driver's process behind a layer that records when every chat request arrived and
//! when its response body ended. These records are the
//! upstream side of every measurement (critical path, pass-through added latency).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::serve::ListenerExt;
use futures::StreamExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// One upstream call as the simulator served it.
#[derive(Debug, Clone)]
pub struct Call {
    pub start: Instant,
    pub end: Instant,
}

impl Call {
    pub fn ms(&self) -> f64 {
        (self.end - self.start).as_secs_f64() * 1e3
    }
}

#[derive(Default)]
pub struct Recorder {
    calls: Mutex<Vec<Call>>,
}

impl Recorder {
    fn push(&self, call: Call) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(call);
        }
    }

    /// Calls that started at or after `from` (and have ended).
    pub fn since(&self, from: Instant) -> Vec<Call> {
        self.calls
            .lock()
            .map(|c| c.iter().filter(|c| c.start >= from).cloned().collect())
            .unwrap_or_default()
    }

    pub fn clear(&self) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.clear();
        }
    }
}

pub struct Mock {
    pub addr: SocketAddr,
    pub recorder: Arc<Recorder>,
    stop: CancellationToken,
}

impl Mock {
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// (prompt, completion) tokens the simulator has reported to its clients so far, from
    /// its own counters (`GET /mock/stats`): the same count whichever server made the calls.
    pub async fn tokens(&self, http: &reqwest::Client) -> Result<(u64, u64), String> {
        let stats: serde_json::Value = http
            .get(format!("http://{}/mock/stats", self.addr))
            .send()
            .await
            .map_err(|e| format!("simulator stats: {e}"))?
            .json()
            .await
            .map_err(|e| format!("simulator stats: {e}"))?;
        let field = |k: &str| {
            stats[k]
                .as_u64()
                .ok_or_else(|| format!("simulator stats without {k}: {stats}"))
        };
        Ok((field("prompt_tokens")?, field("completion_tokens")?))
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub async fn start() -> std::io::Result<Mock> {
    let recorder = Arc::new(Recorder::default());
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    // Without TCP_NODELAY a chunk written while the previous one is unacknowledged waits
    // for the peer's delayed ACK (up to 40 ms): the simulator would not keep its timing.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let app = massgen_simulator::router().layer(axum::middleware::from_fn_with_state(
        recorder.clone(),
        record,
    ));
    let stop = CancellationToken::new();
    let token = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { token.cancelled().await })
            .await;
    });
    Ok(Mock {
        addr,
        recorder,
        stop,
    })
}

async fn record(State(rec): State<Arc<Recorder>>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    if req.uri().path() != "/v1/chat/completions" {
        return next.run(req).await;
    }
    let response = next.run(req).await;
    let (parts, body) = response.into_parts();
    let mut data = body.into_data_stream();
    let body = async_stream::stream! {
        while let Some(chunk) = data.next().await {
            yield chunk;
        }
        rec.push(Call { start, end: Instant::now() });
    };
    Response::from_parts(parts, Body::from_stream(body))
}
