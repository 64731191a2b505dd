//! `POST /v1/chat/completions`: one request, one coordination session, rendered as a
//! `chat.completion` or as Chat Completions SSE.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use massgen_core::coordination::{EventKind, SessionError, SessionErrorKind, SessionEvent};
use massgen_core::provider::Usage;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::DropGuard;

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use super::render::{ChunkHeader, Narrator, metadata_json};
use super::request::{self, ChatRequest};
use super::routing;
use crate::app::records::SessionInfo;
use crate::app::{SessionRequest, StartError, Started};
use crate::telemetry;

pub const SESSION_HEADER: &str = "x-massgen-session-id";

pub async fn chat_completions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let received = std::time::Instant::now();
    let bytes = read_body(&headers, body, state.settings.max_body_bytes).await?;
    let request = request::parse(&bytes)?;
    let panel = routing::resolve(
        &request.model,
        &state.catalog,
        state.settings.allow_config_paths,
        state.default_model(),
        state.env.as_ref(),
    )?;

    // Held by the session until it ends; over the cap the request is refused at once.
    let permit = state.production.limits.try_session()?;
    let started = state
        .sessions
        .start(
            &panel,
            SessionRequest {
                caller,
                info: SessionInfo {
                    model: request.model.clone(),
                    question: request.input.question.clone(),
                    created_ms: state.sessions.now_ms(),
                    ..SessionInfo::default()
                },
                input: request.input.clone(),
                stream_agent_text: request.deliberation == request::Deliberation::Full,
                permit,
            },
        )
        .map_err(start_error)?;
    let Started {
        id: session_id,
        events: rx,
        cancel: guard,
    } = started;

    let header = ChunkHeader {
        id: format!("chatcmpl-{}", &session_id[5..]),
        created: state.sessions.now_secs(),
        model: request.model.clone(),
    };
    let mut response = if request.stream {
        stream_response(
            request,
            header,
            rx,
            guard,
            state.settings.keepalive,
            session_id.clone(),
            received,
        )
    } else {
        collect_response(request, header, rx, guard, session_id.clone()).await?
    };
    if let Ok(v) = HeaderValue::from_str(&session_id) {
        response.headers_mut().insert(SESSION_HEADER, v);
    }
    Ok(response)
}

async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let too_large = std::error::Error::source(&e)
            .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
        if too_large {
            ApiError::PayloadTooLarge { limit }
        } else {
            ApiError::invalid(
                format!("Could not read the request body: {e}"),
                None,
                "invalid_body",
            )
        }
    })
}

fn start_error(error: StartError) -> ApiError {
    match error {
        StartError::Provider {
            panel,
            agent,
            reason,
        } => ApiError::ConfigUnavailable {
            name: panel,
            reason: format!("agent '{agent}': {reason}"),
        },
    }
}

async fn collect_response(
    request: ChatRequest,
    header: ChunkHeader,
    mut rx: mpsc::Receiver<SessionEvent>,
    _guard: DropGuard,
    session_id: Arc<str>,
) -> Result<Response, ApiError> {
    let mut narrator = Narrator::new(request.deliberation);
    let mut reasoning = String::new();
    while let Some(event) = rx.recv().await {
        match event.kind {
            EventKind::SessionCompleted { summary } => {
                log_completed(&session_id, &summary.usage, summary.duration_ms);
                let metadata = metadata_json(&session_id, &summary);
                let body = header.completion(&summary, &reasoning, metadata);
                return Ok((StatusCode::OK, axum::Json(body)).into_response());
            }
            EventKind::SessionFailed { error } => {
                log_failed(&session_id, &error);
                return Err(ApiError::Session(error));
            }
            other => {
                if let Some(line) = narrator.line(&other) {
                    reasoning.push_str(&line);
                }
            }
        }
    }
    tracing::error!(session_id = %session_id, "session ended without an outcome");
    Err(ApiError::Internal)
}

fn stream_response(
    request: ChatRequest,
    header: ChunkHeader,
    mut rx: mpsc::Receiver<SessionEvent>,
    guard: DropGuard,
    keepalive: Duration,
    session_id: Arc<str>,
    received: std::time::Instant,
) -> Response {
    let body = async_stream::stream! {
        let _guard = guard;
        let mut narrator = Narrator::new(request.deliberation);
        if let Some(m) = telemetry::metrics() {
            m.time_to_first_byte.observe(received.elapsed().as_secs_f64());
        }
        yield Ok::<Bytes, Infallible>(data(&header.role()));
        let mut quiet_until = Instant::now() + keepalive;
        loop {
            let event = tokio::select! {
                event = rx.recv() => event,
                () = tokio::time::sleep_until(quiet_until) => {
                    quiet_until = Instant::now() + keepalive;
                    yield Ok(Bytes::from_static(b": keep-alive\n\n"));
                    continue;
                }
            };
            let Some(event) = event else {
                tracing::error!(session_id = %session_id, "session ended without an outcome");
                yield Ok(error_data(&ApiError::Internal));
                yield Ok(done());
                break;
            };
            let out = match event.kind {
                EventKind::FinalDelta { text } if !text.is_empty() => data(&header.content(&text)),
                EventKind::FinalToolCalls { calls } => {
                    for chunk in header.tool_call_deltas(&calls) {
                        yield Ok(data(&chunk));
                    }
                    quiet_until = Instant::now() + keepalive;
                    continue;
                }
                EventKind::SessionCompleted { summary } => {
                    log_completed(&session_id, &summary.usage, summary.duration_ms);
                    let metadata = metadata_json(&session_id, &summary);
                    yield Ok(data(&header.finish(summary.finish_reason, metadata)));
                    if request.include_usage {
                        yield Ok(data(&header.usage(&summary.usage)));
                    }
                    yield Ok(done());
                    break;
                }
                EventKind::SessionFailed { error } => {
                    log_failed(&session_id, &error);
                    yield Ok(error_data(&ApiError::Session(error)));
                    yield Ok(done());
                    break;
                }
                other => match narrator.line(&other) {
                    Some(line) => data(&header.reasoning(&line)),
                    None => continue,
                },
            };
            quiet_until = Instant::now() + keepalive;
            yield Ok(out);
        }
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| ApiError::Internal.into_response())
}

fn data(value: &impl serde::Serialize) -> Bytes {
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"data: ");
    // Serializing a Value cannot fail.
    let _ = serde_json::to_writer(&mut buf, value);
    buf.extend_from_slice(b"\n\n");
    Bytes::from(buf)
}

/// An error after the 200 went out: an object with `error` and no `choices`, as
/// OpenAI-compatible clients expect.
fn error_data(error: &ApiError) -> Bytes {
    let body: Value = json!({ "error": error.body() });
    data(&body)
}

fn done() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

fn log_completed(session_id: &str, usage: &Usage, duration_ms: u64) {
    tracing::info!(
        session_id = %session_id,
        duration_ms,
        total_tokens = usage.total_tokens,
        "session completed"
    );
}

fn log_failed(session_id: &str, error: &SessionError) {
    if error.kind == SessionErrorKind::Cancelled {
        tracing::info!(session_id = %session_id, "session cancelled");
    } else {
        tracing::warn!(session_id = %session_id, kind = ?error.kind, error = %error.message, "session failed");
    }
}
