//! A connection over a connection cap is answered before it is closed: the client reads
//! a 503 `server_busy` with `Retry-After` (in the error shape of the door its request
//! names) instead of a reset it cannot tell from a crash. The answer goes through hyper
//! and the doors' error shaping, on a router that only refuses, within a short time, and
//! only a few at once: past that the connection is closed unanswered, as before.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::response::IntoResponse;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use super::doors::registry::reshape_errors;
use super::error::ApiError;

/// How long a refused connection may take to send its request and read the answer.
const ANSWER_WITHIN: Duration = Duration::from_millis(500);
/// Refused connections answered at once (each holds its descriptor meanwhile: counted in
/// the descriptor reserve, `app::descriptors::BASE_RESERVE`).
pub const AT_ONCE: usize = 16;

/// Answers refused connections; cheap to clone.
#[derive(Clone)]
pub struct Refuser {
    answering: Arc<Semaphore>,
    builder: Builder<TokioExecutor>,
    /// One router per cap, built once: a refusal only clones it.
    full: Router,
    address_full: Router,
}

impl Refuser {
    pub fn new() -> Self {
        let mut builder = Builder::new(TokioExecutor::new());
        builder.http1().timer(TokioTimer::new()).keep_alive(false);
        Self {
            answering: Arc::new(Semaphore::new(AT_ONCE)),
            builder,
            full: refusal(false),
            address_full: refusal(true),
        }
    }

    /// Answers `stream` with a 503 on a task of `tasks`, or closes it at once when
    /// [`AT_ONCE`] refusals are being answered already.
    pub fn refuse(&self, stream: TcpStream, per_address: bool, tasks: &TaskTracker) {
        let Ok(permit) = Arc::clone(&self.answering).try_acquire_owned() else {
            return;
        };
        let refusal = if per_address {
            self.address_full.clone()
        } else {
            self.full.clone()
        };
        let connection = self
            .builder
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(refusal))
            .into_owned();
        tasks.spawn(async move {
            let _permit = permit;
            // A client that sends nothing, or reads nothing, is cut at the deadline.
            let _ = tokio::time::timeout(ANSWER_WITHIN, connection).await;
        });
    }
}

/// Answers every request with [`ApiError::ConnectionsFull`], in the shape of the door the
/// request's path belongs to.
fn refusal(per_address: bool) -> Router {
    Router::new()
        .fallback(move || async move { ApiError::ConnectionsFull { per_address }.into_response() })
        .layer(axum::middleware::from_fn(reshape_errors))
}
