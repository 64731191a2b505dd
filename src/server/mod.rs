//! The HTTP edge: routes, the front doors (one module per client API, [`doors`]), auth,
//! limits, observability and the record routes. It only translates: a door parses a
//! request into a session input, the application service ([`crate::app::Sessions`]) runs
//! the session, and the door renders its events.

pub mod auth;
pub mod bodies;
mod browsers;
pub mod cache;
pub mod doors;
pub mod error;
pub mod evals;
pub mod limits;
mod listen;
mod observe;
pub mod records;
mod refuse;
mod retry_after;
pub mod sse;
mod ui;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRef, Request, State};
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::middleware;
use axum::response::IntoResponse;
use axum::routing::get;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::util::MapRequestLayer;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;

pub use doors::session::{SESSION_HEADER, WINNER_HEADER};
use error::ApiError;

use crate::app::App;
use crate::config::ServerSettings;
use doors::responses::store::ResponseStore;

/// What every request of the HTTP edge stands on: the application, and what only HTTP
/// needs. Handlers and middleware take the part they need (`State<Arc<App>>`,
/// `State<Arc<Edge>>`) through [`FromRef`].
#[derive(Clone)]
pub struct AppState {
    pub app: Arc<App>,
    pub edge: Arc<Edge>,
}

impl FromRef<AppState> for Arc<App> {
    fn from_ref(state: &AppState) -> Self {
        Arc::clone(&state.app)
    }
}

impl FromRef<AppState> for Arc<Edge> {
    fn from_ref(state: &AppState) -> Self {
        Arc::clone(&state.edge)
    }
}

/// What only the HTTP edge needs, made from the settings at start-up.
pub struct Edge {
    pub keys: auth::ApiKeys,
    pub protect_metrics: bool,
    pub limits: limits::Limits,
    /// `--max-buffered-body-bytes`.
    pub bodies: bodies::BodyBudget,
    /// `Host` and `Origin` checks against browsers.
    pub browsers: browsers::Policy,
    /// The response cache, when `--cache-ttl-seconds` is set.
    pub cache: Option<Arc<cache::ResponseCache>>,
    /// Signs the deliberation clients get, to recognise it when it comes back (shared with
    /// the renderers of running streams).
    pub signer: Arc<doors::reasoning::Signer>,
    /// Stored Responses API responses (`previous_response_id`, `GET /v1/responses/{id}`),
    /// shared with the renderers that store what they answered.
    pub responses: Arc<ResponseStore>,
}

impl AppState {
    /// The HTTP edge on `app`.
    pub fn new(app: Arc<App>) -> Self {
        let server = app.settings();
        let settings = &server.production;
        // Stored responses live in the records database too, when there is one.
        let responses = ResponseStore::with_db(
            doors::responses::store::Limits {
                max_count: settings.records_max_sessions,
                max_age: settings.records_max_age,
                max_bytes: doors::responses::store::MAX_BYTES,
                keys: settings.api_keys.len(),
                max_bytes_per_key: settings.max_stored_bytes_per_key,
            },
            app.records().db().cloned(),
        );
        let edge = Edge {
            keys: auth::ApiKeys::new(&settings.api_keys),
            protect_metrics: settings.protect_metrics,
            limits: limits::Limits::new(settings),
            bodies: bodies::BodyBudget::new(
                settings.max_buffered_body_bytes,
                server.max_body_bytes,
            ),
            browsers: browsers::Policy::new(server),
            cache: server
                .cache_ttl
                .map(|ttl| Arc::new(cache::ResponseCache::new(ttl))),
            signer: Arc::new(doors::reasoning::Signer::new(
                server.reasoning_secret.as_ref(),
            )),
            responses: Arc::new(responses),
        };
        Self {
            app,
            edge: Arc::new(edge),
        }
    }

    /// The application's settings (a shorthand the handlers use often).
    pub fn settings(&self) -> &ServerSettings {
        self.app.settings()
    }
}

pub fn router(state: AppState) -> Router {
    let request_id = HeaderName::from_static(observe::REQUEST_ID);
    let cors = cors_layer(&state.settings().production.cors_origins);
    // Layers run outside-in: request id (a client's unsafe one dropped, then one generated
    // where missing), trace span, the doors' error shapes, panic guard (those around the
    // whole router, below), then per route (the last added runs first) request metrics,
    // the browser checks, CORS, authentication, rate limit, and the handler.
    let router = doors::registry::mount(Router::new(), &state)
        .route("/", get(ui::index))
        .route("/ui", get(ui::index))
        .route("/ui/", get(ui::index))
        .route("/ui/app.js", get(ui::app_js))
        .route("/ui/app.css", get(ui::app_css))
        .route("/ui/favicon.svg", get(ui::favicon))
        .route("/ui/evals.js", get(evals::evals_js))
        .route("/health", get(health))
        .route("/metrics", get(observe::metrics_text))
        .route("/v1/models", get(models))
        // A catch-all: `massgen/<name>` arrives with its slash as is or as `%2F` (the
        // openai SDK encodes it); both decode to the same id.
        .route("/v1/models/{*id}", get(model))
        .route("/v1/sessions", get(records::list_sessions))
        .route("/v1/sessions/{id}", get(records::get_session))
        .route("/v1/sessions/{id}/events", get(records::session_events))
        .route("/v1/evals", get(evals::list_evals))
        .route("/v1/evals/{id}", get(evals::get_eval))
        .fallback(not_found)
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        // Innermost: only requests that passed auth and the rate limit read bodies.
        .layer(middleware::from_fn(bodies::hold_shares))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            limits::rate_limit,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ));
    let router = match cors {
        Some(cors) => router.layer(cors),
        None => router,
    };
    // Before CORS, keys and bodies: a page the server does not serve or allow, or a name
    // it does not answer to, is refused whatever else it sends.
    let router = router.layer(middleware::from_fn_with_state(
        state.clone(),
        browsers::guard,
    ));
    let routes = router
        .layer(middleware::from_fn(observe::count_requests))
        .with_state(state);
    // The layers that need no matched route wrap the whole router once. `Router::layer`
    // wraps each route in each layer, boxed, and a call clones the boxed stack beneath
    // every layer it passes: with all thirteen per route, a request made 113 boxed clones
    // (37 this way, callgrind).
    // First added runs first.
    let outside = tower::ServiceBuilder::new()
        .layer(MapRequestLayer::new(observe::safe_request_id))
        .layer(SetRequestIdLayer::new(request_id.clone(), MakeRequestUuid))
        .layer(PropagateRequestIdLayer::new(request_id))
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
            HeaderName::from_static(auth::X_API_KEY),
        ]))
        .layer(TraceLayer::new_for_http().make_span_with(observe::request_span))
        // Outside everything that can fail, so each door's errors all take its shape,
        // whichever layer produced them.
        .layer(middleware::from_fn(doors::registry::reshape_errors))
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::Internal.into_response()
        }))
        .service(routes);
    Router::new().fallback_service(outside)
}

/// CORS only when origins are configured: `*` allows any origin, otherwise the list.
fn cors_layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let layer = CorsLayer::new()
        .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            HeaderName::from_static("x-request-id"),
            HeaderName::from_static("traceparent"),
            HeaderName::from_static(auth::X_API_KEY),
            HeaderName::from_static("anthropic-version"),
            HeaderName::from_static("anthropic-beta"),
            // MCP's Streamable HTTP (`/mcp`).
            HeaderName::from_static("mcp-session-id"),
            HeaderName::from_static("mcp-protocol-version"),
            HeaderName::from_static("last-event-id"),
        ])
        .expose_headers([
            HeaderName::from_static("x-request-id"),
            HeaderName::from_static(SESSION_HEADER),
            HeaderName::from_static(WINNER_HEADER),
            HeaderName::from_static(cache::CACHE_HEADER),
            header::RETRY_AFTER,
            HeaderName::from_static(error::SHOULD_RETRY),
            HeaderName::from_static("mcp-session-id"),
        ]);
    if origins.iter().any(|o| o == "*") {
        return Some(layer.allow_origin(AllowOrigin::any()));
    }
    let list: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|o| match HeaderValue::from_str(o) {
            Ok(v) => Some(v),
            Err(_) => {
                tracing::warn!(origin = %o, "ignoring an invalid CORS origin");
                None
            }
        })
        .collect();
    Some(layer.allow_origin(AllowOrigin::list(list)))
}

/// 200 whatever the records store's state: sessions run and answer without it.
async fn health(State(app): State<Arc<App>>) -> impl IntoResponse {
    axum::Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "records": app.records().health(),
    }))
}

async fn models(State(app): State<Arc<App>>) -> impl IntoResponse {
    let data: Vec<_> = crate::app::panels::model_ids(app.catalog())
        .into_iter()
        .map(model_object)
        .collect();
    axum::Json(json!({"object": "list", "data": data}))
}

/// `GET /v1/models/{id}`: the ids `GET /v1/models` lists, nothing else (clients call
/// `models.retrieve` to check a name before using it).
async fn model(
    State(app): State<Arc<App>>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let ids = crate::app::panels::model_ids(app.catalog());
    if ids.contains(&id) {
        return Ok(axum::Json(model_object(id)));
    }
    Err(ApiError::ModelNotFound { id, available: ids })
}

/// OpenAI's model object.
fn model_object(id: String) -> serde_json::Value {
    json!({"id": id, "object": "model", "created": 0, "owned_by": "massgen"})
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
    warn_if_exposed(&listener, &state);
    let grace = state.settings().shutdown_grace;
    let production = &state.settings().production;
    let limits = listen::ConnectionLimits {
        header_timeout: production.header_read_timeout,
        idle_timeout: production.idle_timeout,
        max_connections: production.max_connections,
        max_connections_per_address: production.max_connections_per_address,
    };
    let AppState { app, edge } = state.clone();
    let stopping = CancellationToken::new();
    let stop_signal = stopping.clone();
    let housekeeping = tokio::spawn(housekeeping(state.clone()));
    let router = router(state);
    let server = listen::serve_connections(listener, router, limits, async move {
        shutdown.await;
        tracing::info!("shutting down: no new connections, waiting for running sessions");
        stop_signal.cancel();
    });
    let server = std::pin::pin!(server);
    let deadline = async {
        stopping.cancelled().await;
        app.drain(grace).await;
        // Streams end with an error chunk once cancelled; give them a moment to flush.
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    };
    tokio::select! {
        () = server => {}
        () = deadline => tracing::warn!("connections still open after the grace period; exiting"),
    }
    // Sessions cancelled at the end still write their records (files) before the exit, and
    // what the writers have not committed yet (the last batch) goes now.
    app.shutdown().await;
    edge.responses
        .close(std::time::Duration::from_secs(5))
        .await;
    housekeeping.abort();
    Ok(())
}

/// Keyed rate limiters only grow and records and stored responses only age out when
/// someone looks: trim them once a minute.
async fn housekeeping(state: AppState) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
    loop {
        tick.tick().await;
        state.edge.limits.retain_recent();
        state.app.housekeeping();
        state.edge.responses.expire();
    }
}

fn warn_if_exposed(listener: &TcpListener, state: &AppState) {
    let addr = listener.local_addr().ok();
    if exposed_without_keys(addr, state.edge.keys.enabled()) {
        tracing::warn!(
            "listening on a non-loopback address without API keys: anyone who can reach this port can spend your provider credits (set MASSGEN_SERVER_API_KEYS or --api-keys-file)"
        );
    }
}

fn exposed_without_keys(addr: Option<std::net::SocketAddr>, keys: bool) -> bool {
    !keys && addr.is_some_and(|a| !a.ip().is_loopback())
}

#[cfg(test)]
mod tests {
    #[test]
    fn warns_only_for_non_loopback_without_keys() {
        let any = "0.0.0.0:4000".parse().ok();
        let local = "127.0.0.1:4000".parse().ok();
        let v6 = "[::1]:4000".parse().ok();
        assert!(super::exposed_without_keys(any, false));
        assert!(!super::exposed_without_keys(any, true));
        assert!(!super::exposed_without_keys(local, false));
        assert!(!super::exposed_without_keys(v6, false));
    }
}
