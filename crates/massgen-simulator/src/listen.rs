//! The accept loop (instead of `axum::serve`, whose HTTP/2 settings cannot be changed):
//! HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on one port, many streams per HTTP/2
//! connection, `TCP_NODELAY` on every accepted socket (each streamed event leaves when it
//! is written), and graceful shutdown (stop accepting, let open connections finish).

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// Streams one HTTP/2 connection may have open at once. hyper's default, 200, would queue
/// the calls of a client that sends every call to a host over one connection (massgen's
/// `h2c` backends): a benchmark of 10,000 sessions × 3 agents has 30,000 calls in flight.
pub const MAX_CONCURRENT_STREAMS: u32 = 100_000;

/// The HTTP/2 connection's receive window. With hyper's 1 MiB, 3,000 sessions' request
/// bodies on one connection, sent faster than a loaded simulator reads them, came in as
/// ever smaller DATA frames as the window reopened, and h2's guard against floods of small
/// frames (its budget is half the window) closed the connection with ENHANCE_YOUR_CALM:
/// every call on it failed. A real upstream has the same guard; the simulator must not be
/// the bottleneck of a benchmark.
pub const CONNECTION_WINDOW: u32 = 64 * 1024 * 1024;

/// Serves `app` on `listener` until `shutdown` resolves, then until every open connection
/// has finished (idle ones close at once, HTTP/2 ones after a GOAWAY). `on_accept` is told
/// of each connection.
pub(crate) async fn serve_connections(
    listener: TcpListener,
    app: Router,
    on_accept: impl Fn(),
    shutdown: impl Future<Output = ()>,
) {
    // The automatic builder reads the first bytes: the HTTP/2 preface is h2c, anything
    // else HTTP/1.1.
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http2()
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .initial_connection_window_size(CONNECTION_WINDOW);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                // SSE events are small writes: with Nagle's algorithm on, one written while
                // the previous segment is unacknowledged waits for the client's delayed ACK
                // (40 ms on Linux), so on a reused keep-alive connection the first 40 ms of
                // a stream arrived in one piece. No provider streams like that, and it
                // skewed every latency measured on the simulator. A socket that refuses the
                // option is dropped rather than served late without a word.
                Ok((stream, _)) => match stream.set_nodelay(true) {
                    Ok(()) => {
                        on_accept();
                        stream
                    }
                    Err(_) => continue,
                },
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(app.clone());
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // A client that leaves mid-response ends its connection with an error: for a
            // simulator, nothing to report.
            let _ = connection.await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

#[cfg(test)]
#[path = "listen_tests.rs"]
mod tests;
