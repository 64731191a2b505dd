//! The accept loop (instead of `axum::serve`, which has no timeouts): HTTP/1 and HTTP/2,
//! a cap on open connections, a limit on the time a client takes to send its request
//! headers, an idle timeout for connections with no request in flight, HTTP/2 keep-alive
//! pings, and graceful shutdown (stop accepting, let open connections finish their
//! responses).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use super::limits::ClientAddr;
use crate::telemetry::metrics;

/// HTTP/2 PING period and how long an unanswered PING may wait before the connection is
/// closed: finds peers that vanished without closing (a window of 0 held forever, a
/// dropped network), which TCP alone notices only after hours.
const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(20);
const HTTP2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a connection told to close (idle, or shutting down) may take to do so.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Connection limits and timeouts (`ProductionSettings`).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

/// Serves `app` until `shutdown` resolves, then until every open connection is done.
pub async fn serve_connections(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(HTTP2_PING_INTERVAL))
        .keep_alive_timeout(HTTP2_PING_TIMEOUT);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let stopping = CancellationToken::new();
    let connections = TaskTracker::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Over the cap the connection is closed at once: a client (a health probe) fails
        // fast instead of waiting in the backlog, and the cap holds below the fd limit.
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            drop(stream);
            if let Some(m) = metrics() {
                m.rejected.with_label_values(&["max_connections"]).inc();
            }
            tracing::debug!("closing a connection over --max-connections");
            continue;
        };
        // SSE chunks are small: without this, Nagle can hold one back for an ACK (up to
        // 40 ms on a real network).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {e}");
        }
        let from = ClientAddr(peer.ip().to_canonical());
        let (in_flight, idle) = watch::channel(0usize);
        let in_flight = Arc::new(in_flight);
        let service = TowerToHyperService::new(app.clone().map_request(
            move |mut request: Request<Incoming>| {
                // The per-address limits read it (see `limits`).
                request.extensions_mut().insert(from);
                request.map(Body::new)
            },
        ));
        let service = InFlight::wrap(service, in_flight);
        let builder = builder.clone();
        let stopping = stopping.clone();
        connections.spawn(async move {
            let _slot = slot;
            let _open = Open::new();
            // hyper's header timeout starts after the protocol is detected: a client that
            // connects and sends nothing is cut here instead.
            let mut first = [0u8; 1];
            if tokio::time::timeout(limits.header_timeout, stream.peek(&mut first))
                .await
                .is_err()
            {
                tracing::debug!("closing a connection that sent nothing");
                return;
            }
            let connection = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .into_owned();
            let mut connection = std::pin::pin!(connection);
            let why = tokio::select! {
                ended = connection.as_mut() => {
                    if let Err(e) = ended {
                        tracing::debug!("connection ended: {e}");
                    }
                    return;
                }
                () = idle_for(idle, limits.idle_timeout) => "idle",
                () = stopping.cancelled() => "shutting down",
            };
            tracing::debug!("closing a connection: {why}");
            connection.as_mut().graceful_shutdown();
            // Idle connections close at once; on shutdown, running responses finish first
            // (the server's grace period bounds that).
            let bound = if why == "idle" {
                CLOSE_GRACE
            } else {
                Duration::MAX
            };
            let _ = tokio::time::timeout(bound, connection).await;
        });
    }
    drop(listener);
    stopping.cancel();
    connections.close();
    connections.wait().await;
}

/// Resolves once the connection has had no request in flight for `limit`.
async fn idle_for(mut in_flight: watch::Receiver<usize>, limit: Duration) {
    loop {
        if *in_flight.borrow_and_update() == 0 {
            match tokio::time::timeout(limit, in_flight.changed()).await {
                Err(_) => return,
                Ok(Ok(())) => continue,
                Ok(Err(_)) => std::future::pending::<()>().await,
            }
        } else if in_flight.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Counts a connection's requests from their arrival until their response body is done
/// (a streamed answer is in flight until its last byte), for the idle timeout.
#[derive(Clone)]
struct InFlight<S> {
    inner: S,
    count: Arc<watch::Sender<usize>>,
}

/// Held by a request and then its response body; lowers the count when dropped.
struct Busy(Arc<watch::Sender<usize>>);

impl Busy {
    fn new(count: &Arc<watch::Sender<usize>>) -> Self {
        count.send_modify(|n| *n += 1);
        Self(Arc::clone(count))
    }
}

impl Busy {
    fn pass<T>(&self, frame: T) -> T {
        frame
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl<S> InFlight<S> {
    fn wrap(inner: S, count: Arc<watch::Sender<usize>>) -> Self {
        Self { inner, count }
    }
}

impl<S> hyper::service::Service<Request<Incoming>> for InFlight<S>
where
    S: hyper::service::Service<Request<Incoming>, Response = axum::response::Response>,
    S::Future: Send + 'static,
{
    type Response = axum::response::Response;
    type Error = S::Error;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<axum::response::Response, S::Error>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let busy = Busy::new(&self.count);
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| {
                // The body owns `busy`: the count drops when the body is done.
                Body::new(body.map_frame(move |frame| busy.pass(frame)))
            }))
        })
    }
}

/// The open-connections gauge, decremented however the connection ends.
struct Open;

impl Open {
    fn new() -> Self {
        if let Some(m) = metrics() {
            m.open_connections.inc();
        }
        Self
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(m) = metrics() {
            m.open_connections.dec();
        }
    }
}
