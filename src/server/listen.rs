//! The accept loop (instead of `axum::serve`, which has no timeouts): HTTP/1 and HTTP/2,
//! a limit on the time a client takes to send its request headers, and graceful shutdown
//! (stop accepting, let open connections finish their responses).

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt;

use super::limits::ClientAddr;

/// Serves `app` until `shutdown` resolves, then until every open connection is done.
pub async fn serve_connections(
    listener: TcpListener,
    app: Router,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    // SSE chunks are small: without this, Nagle can hold one back for an
                    // ACK (up to 40 ms on a real network).
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!("cannot set TCP_NODELAY: {e}");
                    }
                    (stream, peer)
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let from = ClientAddr(peer.ip().to_canonical());
        let service = TowerToHyperService::new(app.clone().map_request(
            move |mut request: Request<Incoming>| {
                // The per-address limits read it (see `limits`).
                request.extensions_mut().insert(from);
                request.map(Body::new)
            },
        ));
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            // hyper's header timeout starts after the protocol is detected: a client that
            // connects and sends nothing is cut here instead.
            let mut first = [0u8; 1];
            if tokio::time::timeout(header_timeout, stream.peek(&mut first))
                .await
                .is_err()
            {
                tracing::debug!("closing a connection that sent nothing");
                return;
            }
            let connection = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .into_owned();
            if let Err(e) = watcher.watch(connection).await {
                tracing::debug!("connection ended: {e}");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
