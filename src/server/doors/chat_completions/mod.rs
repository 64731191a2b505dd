//! `POST /v1/chat/completions`: one request, one coordination session, rendered as a
//! `chat.completion` or as Chat Completions SSE. Errors are OpenAI-shaped ([`ApiError`]'s
//! own rendering).

pub mod render;
pub mod request;

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::metadata::metadata_json;
use super::session::{self, Ask, Opened, Step, Steps};
use crate::app::Caller;
use crate::server::AppState;
use crate::server::error::ApiError;
use crate::server::sse::{self, data};
use render::ChunkHeader;
use request::ChatRequest;

/// This door's name in session records.
pub const DOOR: &str = "chat_completions";

pub async fn handle(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let received = std::time::Instant::now();
    let bytes = session::read_body(&headers, body, state.settings.max_body_bytes).await?;
    let request = request::parse(&bytes)?;
    let Opened { id, created, steps } = session::open(
        &state,
        Ask {
            caller,
            door: DOOR,
            model: request.model.clone(),
            route_as: None,
            metadata: Default::default(),
            input: request.input.clone(),
            deliberation: request.deliberation,
        },
    )?;
    let header = ChunkHeader {
        id: format!("chatcmpl-{}", &id[5..]),
        created,
        model: request.model.clone(),
    };
    let response = if request.stream {
        stream_response(
            request,
            header,
            steps,
            state.settings.keepalive,
            &id,
            received,
        )
    } else {
        collect_response(header, steps, &id).await?
    };
    Ok(session::with_session_header(response, &id))
}

async fn collect_response(
    header: ChunkHeader,
    mut steps: Steps,
    session_id: &str,
) -> Result<Response, ApiError> {
    let mut reasoning = String::new();
    loop {
        match steps.next().await {
            Step::Reasoning(line) => reasoning.push_str(&line),
            Step::Text(_) | Step::ToolCalls(_) => {}
            Step::Completed(summary) => {
                let metadata = metadata_json(session_id, &summary);
                let body = header.completion(&summary, &reasoning, metadata);
                return Ok((StatusCode::OK, axum::Json(body)).into_response());
            }
            Step::Failed(error) => return Err(ApiError::Session(error)),
            Step::Lost => return Err(ApiError::Internal),
        }
    }
}

fn stream_response(
    request: ChatRequest,
    header: ChunkHeader,
    mut steps: Steps,
    keepalive: Duration,
    session_id: &str,
    received: std::time::Instant,
) -> Response {
    let session_id = session_id.to_string();
    let body = async_stream::stream! {
        session::observe_first_byte(received);
        yield Ok::<Bytes, Infallible>(data(&header.role()));
        let mut quiet_until = Instant::now() + keepalive;
        loop {
            let step = tokio::select! {
                step = steps.next() => step,
                () = tokio::time::sleep_until(quiet_until) => {
                    quiet_until = Instant::now() + keepalive;
                    yield Ok(Bytes::from_static(sse::KEEPALIVE_COMMENT));
                    continue;
                }
            };
            quiet_until = Instant::now() + keepalive;
            match step {
                Step::Reasoning(line) => yield Ok(data(&header.reasoning(&line))),
                Step::Text(text) => yield Ok(data(&header.content(&text))),
                Step::ToolCalls(calls) => {
                    for chunk in header.tool_call_deltas(&calls) {
                        yield Ok(data(&chunk));
                    }
                }
                Step::Completed(summary) => {
                    let metadata = metadata_json(&session_id, &summary);
                    yield Ok(data(&header.finish(summary.finish_reason, metadata)));
                    if request.include_usage {
                        yield Ok(data(&header.usage(&summary.usage)));
                    }
                    yield Ok(done());
                    break;
                }
                Step::Failed(error) => {
                    yield Ok(error_data(&ApiError::Session(error)));
                    yield Ok(done());
                    break;
                }
                Step::Lost => {
                    yield Ok(error_data(&ApiError::Internal));
                    yield Ok(done());
                    break;
                }
            }
        }
    };
    sse::response(body)
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
