//! The HTTP edge: routes, OpenAI wire types, SSE rendering, errors as OpenAI JSON. It only
//! translates: a request becomes a [`SessionSpec`](crate::coordination::SessionSpec), and
//! the session's events become a response.

mod chat;
pub mod error;
pub mod render;
pub mod request;
pub mod routing;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::HeaderName;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

pub use chat::SESSION_HEADER;
use error::ApiError;

use crate::config::{Env, PanelCatalog, ServerSettings};
use crate::coordination::{Clock, SystemClock};
use crate::providers::ProviderFactory;

/// Shared by every request.
#[derive(Clone)]
pub struct AppState {
    pub catalog: Arc<PanelCatalog>,
    pub settings: Arc<ServerSettings>,
    pub providers: Arc<dyn ProviderFactory>,
    pub clock: Arc<dyn Clock>,
    /// Environment lookup for `massgen/path:` configs.
    pub env: Arc<Env>,
    /// Every running session, so shutdown can wait for them.
    pub sessions: TaskTracker,
    /// Cancels every session (shutdown past the grace period).
    pub sessions_cancel: CancellationToken,
}

impl AppState {
    pub fn new(
        catalog: PanelCatalog,
        settings: ServerSettings,
        providers: Arc<dyn ProviderFactory>,
        env: Arc<Env>,
    ) -> Self {
        Self {
            catalog: Arc::new(catalog),
            settings: Arc::new(settings),
            providers,
            clock: Arc::new(SystemClock),
            env,
            sessions: TaskTracker::new(),
            sessions_cancel: CancellationToken::new(),
        }
    }

    fn default_model(&self) -> Option<&str> {
        self.settings.default_model.as_deref()
    }
}

pub fn router(state: AppState) -> Router {
    let request_id = HeaderName::from_static("x-request-id");
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat::chat_completions))
        .fallback(not_found)
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .with_state(state)
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::Internal.into_response()
        }))
        .layer(TraceLayer::new_for_http())
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
}

async fn health() -> impl IntoResponse {
    axum::Json(json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")}))
}

async fn models(State(state): State<AppState>) -> impl IntoResponse {
    let data: Vec<_> = routing::model_ids(&state.catalog)
        .into_iter()
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "massgen"}))
        .collect();
    axum::Json(json!({"object": "list", "data": data}))
}

async fn not_found(request: Request) -> ApiError {
    ApiError::RouteNotFound {
        method: request.method().to_string(),
        path: request.uri().path().to_string(),
    }
}

/// Serves the API on `listener` until `shutdown` resolves: then it stops accepting, lets
/// running sessions finish for up to `settings.shutdown_grace`, and cancels the rest.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let grace = state.settings.shutdown_grace;
    let sessions = state.sessions.clone();
    let sessions_cancel = state.sessions_cancel.clone();
    let stopping = CancellationToken::new();
    let stop_signal = stopping.clone();
    let app = router(state);
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown.await;
        tracing::info!("shutting down: no new connections, waiting for running sessions");
        stop_signal.cancel();
    });
    let server = std::pin::pin!(server.into_future());
    let deadline = async {
        stopping.cancelled().await;
        sessions.close();
        if tokio::time::timeout(grace, sessions.wait()).await.is_err() {
            tracing::warn!(
                grace_seconds = grace.as_secs(),
                "grace period over: cancelling running sessions"
            );
            sessions_cancel.cancel();
        }
        // Streams end with an error chunk once cancelled; give them a moment to flush.
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    };
    tokio::select! {
        result = server => result?,
        () = deadline => tracing::warn!("connections still open after the grace period; exiting"),
    }
    Ok(())
}
