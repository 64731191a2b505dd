//! A simulated model server whose behaviour is chosen by the model name. It speaks Chat
//! Completions here and the OpenAI Responses, Anthropic Messages and Gemini formats in
//! [`native`], all with the same behaviours and stats.
//!
//! Used by `massgen serve --demo`, black-box tests and benchmarks. The `model` string of a
//! request is `<name>[:key=value[,key=value…]]` (grammar in [`behaviour`]); every text it
//! writes is marked `[simulated]`, and every response carries `x-massgen-simulated: true`.
//!
//! Standalone: it depends on no other massgen crate, so it can stand in for any upstream
//! without sharing a line of the code under test.

pub mod behaviour;
pub mod instance;
pub mod native;
pub mod plan;
pub mod respond;
pub mod stats;
pub mod text;

use std::future::Future;
use std::sync::Arc;

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use behaviour::{Behaviour, Fault};
use stats::Stats;

/// Names listed by `GET /v1/models`; any other name works too.
const EXAMPLE_MODELS: &[&str] = &["sim-a", "sim-b", "sim-c"];

#[derive(Clone, Default)]
struct App {
    stats: Arc<Stats>,
    /// Cancelled on shutdown so that hanging responses end and graceful shutdown completes.
    shutdown: CancellationToken,
}

/// The simulator's routes, with fresh counters.
pub fn router() -> Router {
    router_with(App::default())
}

fn router_with(app: App) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/responses", post(responses))
        .route("/v1/messages", post(messages))
        .route("/v1beta/models/{target}", post(gemini))
        .route("/v1/models", get(models))
        .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/mock/stats", get(stats))
        .route("/mock/reset", post(reset))
        .layer(axum::middleware::map_response(mark_simulated))
        .with_state(app)
}

/// Serves the simulator on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = App::default();
    let token = app.shutdown.clone();
    axum::serve(listener, router_with(app))
        .with_graceful_shutdown(async move {
            shutdown.await;
            token.cancel();
        })
        .await
}

async fn mark_simulated(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert("x-massgen-simulated", HeaderValue::from_static("true"));
    response
}

async fn models(State(app): State<App>) -> Json<serde_json::Value> {
    let seen = app.stats.snapshot().by_model.into_keys();
    let mut names: Vec<String> = EXAMPLE_MODELS.iter().map(|s| s.to_string()).collect();
    names.extend(seen.filter(|n| !n.is_empty() && !EXAMPLE_MODELS.contains(&n.as_str())));
    let data: Vec<_> = names
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "massgen-simulator"}))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

async fn stats(State(app): State<App>) -> Json<stats::Snapshot> {
    Json(app.stats.snapshot())
}

async fn reset(State(app): State<App>) -> Json<stats::Snapshot> {
    app.stats.reset();
    Json(app.stats.snapshot())
}

async fn chat(State(app): State<App>, body: Bytes) -> Response {
    let mut req = match plan::parse_request(&body) {
        Ok(req) => req,
        Err(e) => {
            let model = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("model")?.as_str().map(String::from))
                .unwrap_or_default();
            app.stats.begin(behaviour::name_of(&model)).finish();
            return bad_request(&e.message, e.param, None);
        }
    };
    let mut guard = app.stats.begin(behaviour::name_of(&req.model));
    let b = match Behaviour::parse(&req.model) {
        Ok(b) => b,
        Err(e) => {
            guard.finish();
            return bad_request(&e.message, Some("model"), Some(e.code));
        }
    };
    let fault = if b.fault != Fault::None && app.stats.should_fault(&req.model, b.fault_times) {
        guard.mark_faulted();
        b.fault
    } else {
        Fault::None
    };
    if let Some(response) = respond::fault_response(&b, fault, req.prompt_tokens) {
        guard.finish();
        return response;
    }
    if fault == Fault::HangHeaders {
        // Never answers; the guard counts a cancel when the client gives up.
        app.shutdown.cancelled().await;
        drop(guard);
        return respond::shutting_down();
    }
    if let Some(json) = &mut req.json {
        json.mark(&req.model, &req.last_user, |key| {
            app.stats.should_fault(key, Some(1))
        });
    }
    let plan = plan::plan(&b, &req);
    let ctx = respond::Ctx {
        model: req.model.clone(),
        prompt_tokens: req.prompt_tokens,
        include_usage: req.include_usage,
        behaviour: b,
        fault,
        shutdown: app.shutdown.clone(),
    };
    if req.stream {
        respond::stream(ctx, &plan, guard)
    } else {
        respond::complete(ctx, &plan, guard).await
    }
}

async fn responses(State(app): State<App>, body: Bytes) -> Response {
    let parsed = native::parse::responses(&body);
    native::handle(app, native::Format::Responses, parsed, &body, None).await
}

async fn messages(State(app): State<App>, body: Bytes) -> Response {
    let parsed = native::parse::anthropic(&body);
    native::handle(app, native::Format::Anthropic, parsed, &body, None).await
}

/// `{model}:streamGenerateContent` (SSE with `alt=sse`) or `{model}:generateContent`.
async fn gemini(
    State(app): State<App>,
    Path(target): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let (model, action) = target.rsplit_once(':').unwrap_or((target.as_str(), ""));
    let stream = match action {
        "streamGenerateContent" if query.get("alt").map(String::as_str) == Some("sse") => true,
        "generateContent" => false,
        _ => {
            return respond::api_error(
                StatusCode::NOT_FOUND,
                "[simulated] use {model}:streamGenerateContent?alt=sse or {model}:generateContent",
                "not_found",
                None,
                None,
            );
        }
    };
    let parsed = native::parse::gemini(model, stream, &body);
    native::handle(app, native::Format::Gemini, parsed, &body, Some(model)).await
}

fn bad_request(message: &str, param: Option<&str>, code: Option<&str>) -> Response {
    respond::api_error(
        StatusCode::BAD_REQUEST,
        message,
        "invalid_request_error",
        param,
        code,
    )
}
