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
mod stall;
mod ui;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::middleware;
use axum::response::IntoResponse;
use axum::routing::get;
use massgen_core::coordination::{Clock, SystemClock};
use massgen_tools::ToolRegistry;
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

use crate::app::records::RecordStore;
use crate::app::records::db::RecordDb;
use crate::app::records::db::upkeep::Upkeep;
use crate::app::spend::DailyQuota;
use crate::app::{ProviderFactory, Sessions, SessionsConfig};
use crate::config::{Env, PanelCatalog, ServerSettings};
use doors::responses::store::ResponseStore;

/// Shared by every request.
#[derive(Clone)]
pub struct AppState {
    pub catalog: Arc<PanelCatalog>,
    pub settings: Arc<ServerSettings>,
    /// Environment lookup for `massgen/path:` configs.
    pub env: Arc<Env>,
    /// The application service: starts sessions, keeps their records.
    pub sessions: Arc<Sessions>,
    /// Stored Responses API responses (`previous_response_id`, `GET /v1/responses/{id}`).
    pub responses: Arc<ResponseStore>,
    /// Access control and limits.
    pub production: Arc<Production>,
    /// The response cache, when `--cache-ttl-seconds` is set.
    pub cache: Option<Arc<cache::ResponseCache>>,
    /// Signs the deliberation clients get, to recognise it when it comes back.
    pub signer: Arc<doors::reasoning::Signer>,
}

/// What `settings.production` turns into at start-up (the records go to [`Sessions`]).
pub struct Production {
    pub keys: auth::ApiKeys,
    pub protect_metrics: bool,
    pub limits: limits::Limits,
    /// `--max-concurrent-sessions`, `--max-sessions-per-key`.
    pub permits: crate::app::permits::Permits,
    /// `--max-buffered-body-bytes`.
    pub bodies: bodies::BodyBudget,
    /// `--max-key-cost-usd-per-day`.
    pub quota: Option<DailyQuota>,
    /// `Host`, `Origin` and `Content-Type` checks against browsers.
    pub browsers: browsers::Policy,
}

impl Production {
    pub fn new(server: &ServerSettings) -> Self {
        let settings = &server.production;
        Self {
            keys: auth::ApiKeys::new(&settings.api_keys),
            protect_metrics: settings.protect_metrics,
            limits: limits::Limits::new(settings),
            permits: crate::app::permits::Permits::new(
                settings.max_concurrent_sessions,
                settings.max_sessions_per_key,
            ),
            bodies: bodies::BodyBudget::new(
                settings.max_buffered_body_bytes,
                server.max_body_bytes,
            ),
            quota: settings
                .max_key_cost_usd_per_day
                .map(|limit_usd| DailyQuota { limit_usd }),
            browsers: browsers::Policy::new(server),
        }
    }
}

impl AppState {
    pub fn new(
        catalog: PanelCatalog,
        settings: ServerSettings,
        providers: Arc<dyn ProviderFactory>,
        tools: Arc<ToolRegistry>,
        env: Arc<Env>,
    ) -> Self {
        Self::with_clock(
            catalog,
            settings,
            providers,
            tools,
            env,
            Arc::new(SystemClock),
        )
    }

    /// As [`AppState::new`], with the clock sessions and `created` fields read (tests).
    /// Records stay in memory whatever `settings` say (a database is opened, async, by
    /// [`open_records`] and given to [`AppState::with_records`]).
    pub fn with_clock(
        catalog: PanelCatalog,
        settings: ServerSettings,
        providers: Arc<dyn ProviderFactory>,
        tools: Arc<ToolRegistry>,
        env: Arc<Env>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let records = memory_records(&settings.production);
        Self::with_records(catalog, settings, providers, tools, env, clock, records)
    }

    /// As [`AppState::with_clock`], keeping records in `records`.
    pub fn with_records(
        catalog: PanelCatalog,
        settings: ServerSettings,
        providers: Arc<dyn ProviderFactory>,
        tools: Arc<ToolRegistry>,
        env: Arc<Env>,
        clock: Arc<dyn Clock>,
        records_store: RecordStore,
    ) -> Self {
        let production = Arc::new(Production::new(&settings));
        let records = &settings.production;
        // Stored responses live in the records database too, when there is one.
        let responses_db = records_store.db().cloned();
        let sessions = Sessions::new(SessionsConfig {
            providers,
            tools,
            clock,
            records: records_store,
            max_upstream_calls: records.max_upstream_calls,
            max_session_cost_usd: records.max_session_cost_usd,
            log_prompts: settings.debug,
            spend: Arc::default(),
        });
        let responses = ResponseStore::with_db(
            doors::responses::store::Limits {
                max_count: records.records_max_sessions,
                max_age: records.records_max_age,
                max_bytes: doors::responses::store::MAX_BYTES,
                keys: records.api_keys.len(),
                max_bytes_per_key: records.max_stored_bytes_per_key,
            },
            responses_db,
        );
        Self {
            production,
            signer: Arc::new(doors::reasoning::Signer::new(
                settings.reasoning_secret.as_ref(),
            )),
            cache: settings
                .cache_ttl
                .map(|ttl| Arc::new(cache::ResponseCache::new(ttl))),
            catalog: Arc::new(catalog),
            settings: Arc::new(settings),
            sessions: Arc::new(sessions),
            responses: Arc::new(responses),
            env,
        }
    }

    /// The use case, on this state's catalog, settings, sessions and limits.
    pub fn use_case(&self) -> crate::app::UseCase<'_> {
        crate::app::UseCase {
            catalog: &self.catalog,
            settings: &self.settings,
            env: self.env.as_ref(),
            sessions: &self.sessions,
            permits: &self.production.permits,
            quota: self.production.quota,
        }
    }
}

pub fn router(state: AppState) -> Router {
    let request_id = HeaderName::from_static(observe::REQUEST_ID);
    let cors = cors_layer(&state.settings.production.cors_origins);
    // Layers run outside-in from the last one added: request id (a client's unsafe one
    // dropped, then one generated where missing), trace span, panic guard,
    // request metrics, the browser checks, CORS, authentication, rate limit, then the
    // handler.
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
    router
        .layer(middleware::from_fn(observe::count_requests))
        .with_state(state)
        .layer(CatchPanicLayer::custom(|_| {
            ApiError::Internal.into_response()
        }))
        // Outside everything that can fail, so each door's errors all take its shape,
        // whichever layer produced them.
        .layer(middleware::from_fn(doors::registry::reshape_errors))
        .layer(TraceLayer::new_for_http().make_span_with(observe::request_span))
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
            HeaderName::from_static(auth::X_API_KEY),
        ]))
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .layer(MapRequestLayer::new(observe::safe_request_id))
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
async fn health(State(state): State<AppState>) -> impl IntoResponse {
    axum::Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "records": state.sessions.records().health(),
    }))
}

async fn models(State(state): State<AppState>) -> impl IntoResponse {
    let data: Vec<_> = crate::app::panels::model_ids(&state.catalog)
        .into_iter()
        .map(model_object)
        .collect();
    axum::Json(json!({"object": "list", "data": data}))
}

/// `GET /v1/models/{id}`: the ids `GET /v1/models` lists, nothing else (clients call
/// `models.retrieve` to check a name before using it).
async fn model(
    State(state): State<AppState>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let ids = crate::app::panels::model_ids(&state.catalog);
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
    let grace = state.settings.shutdown_grace;
    let production = &state.settings.production;
    let limits = listen::ConnectionLimits {
        header_timeout: production.header_read_timeout,
        idle_timeout: production.idle_timeout,
        max_connections: production.max_connections,
        max_connections_per_address: production.max_connections_per_address,
    };
    let sessions = state.sessions.clone();
    let stopping = CancellationToken::new();
    let stop_signal = stopping.clone();
    let housekeeping = tokio::spawn(housekeeping(state.clone()));
    let responses = state.responses.clone();
    let app = router(state);
    let server = listen::serve_connections(listener, app, limits, async move {
        shutdown.await;
        tracing::info!("shutting down: no new connections, waiting for running sessions");
        stop_signal.cancel();
    });
    let server = std::pin::pin!(server);
    let deadline = async {
        stopping.cancelled().await;
        let tasks = sessions.tasks();
        tasks.close();
        if tokio::time::timeout(grace, tasks.wait()).await.is_err() {
            tracing::warn!(
                grace_seconds = grace.as_secs(),
                "grace period over: cancelling running sessions"
            );
            sessions.cancel_all();
        }
        // Streams end with an error chunk once cancelled; give them a moment to flush.
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    };
    tokio::select! {
        () = server => {}
        () = deadline => tracing::warn!("connections still open after the grace period; exiting"),
    }
    // Sessions cancelled at the end still write their records (files) before the exit.
    let tasks = sessions.tasks();
    tasks.close();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), tasks.wait()).await;
    // What the records writer has not committed yet (the last batch) goes now.
    sessions
        .records()
        .close(std::time::Duration::from_secs(5))
        .await;
    responses.close(std::time::Duration::from_secs(5)).await;
    housekeeping.abort();
    Ok(())
}

fn memory_records(settings: &crate::config::ProductionSettings) -> RecordStore {
    RecordStore::new(
        settings.records_max_sessions,
        settings.records_max_age,
        settings.records_dir.clone(),
    )
}

/// The records store `settings` name: memory, or the database (connected and migrated;
/// the error says what failed, never a password). Call inside the runtime: with a
/// database it starts the writer and the upkeep timer.
pub async fn open_records(
    settings: &crate::config::ProductionSettings,
) -> Result<RecordStore, String> {
    open_records_with(settings, true).await
}

/// As [`open_records`], never deleting old records: for a process that only adds to a
/// database a server owns (`massgen eval`), whose retention is the server's to apply.
pub async fn open_records_keeping(
    settings: &crate::config::ProductionSettings,
) -> Result<RecordStore, String> {
    open_records_with(settings, false).await
}

async fn open_records_with(
    settings: &crate::config::ProductionSettings,
    retain: bool,
) -> Result<RecordStore, String> {
    if settings.records_db == crate::config::RecordsDb::Memory {
        return Ok(memory_records(settings));
    }
    let db = Arc::new(RecordDb::open(&settings.records_db).await?);
    tracing::info!(store = %db.describe(), replica = %db.replica(), "session records in a database");
    let upkeep = Upkeep {
        heartbeat: settings.records_heartbeat,
        interrupted_after: settings.records_interrupted_after,
        max_age: settings.records_max_age,
        max_sessions: settings.records_max_sessions,
        retain,
    };
    Ok(RecordStore::with_db(
        db,
        upkeep,
        settings.records_max_sessions.min(MAX_UNSAVED),
        settings.records_dir.clone(),
    ))
}

/// Finished records kept in memory while the database fails (~25 KB each): the database's
/// retention count (100,000 by default) would let a long outage hold gigabytes.
const MAX_UNSAVED: usize = 1000;

/// Keyed rate limiters only grow and records and stored responses only age out when
/// someone looks: trim them once a minute.
async fn housekeeping(state: AppState) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
    loop {
        tick.tick().await;
        state.production.limits.retain_recent();
        state.sessions.records().expire();
        state.responses.expire();
    }
}

fn warn_if_exposed(listener: &TcpListener, state: &AppState) {
    let addr = listener.local_addr().ok();
    if exposed_without_keys(addr, state.production.keys.enabled()) {
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
