//! `POST /v1/chat/completions`: one request, one coordination session, rendered as a
//! `chat.completion` or as Chat Completions SSE. Errors are OpenAI-shaped ([`ApiError`]'s
//! own rendering).

pub mod render;
pub mod request;
mod think;

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use massgen_core::provider::FinishReason;
use serde_json::{Value, json};

use super::limit::{AnswerLimit, Cut};
use super::metadata::metadata_json;
use super::narrate::Deliberation;
use super::session::{self, Ask, Beat, Incoming, Opened, Step, Steps};
use crate::config::DeliberationFormat;
use crate::server::error::ApiError;
use crate::server::sse::{self, data};
use render::ChunkHeader;
use request::ChatRequest;
use think::ThinkTags;

/// This door's name in session records.
pub const DOOR: &str = "chat_completions";

pub async fn handle(incoming: Incoming) -> Result<Response, ApiError> {
    let Incoming {
        state,
        caller,
        received,
        body,
        share,
    } = incoming;
    let mut request = request::parse(&body)?;
    // The server's default when the request does not say.
    let format = *request
        .deliberation_format
        .get_or_insert(state.settings.deliberation_format);
    let deliberation = match format {
        DeliberationFormat::None => Deliberation::Off,
        _ => request.deliberation,
    };
    let ask = Ask {
        caller,
        door: DOOR,
        model: request.model.clone(),
        route_as: None,
        metadata: Default::default(),
        input: std::mem::take(&mut request.input),
        deliberation,
        overrides: request.overrides.clone(),
        body_share: share,
    };
    let cached = session::cache_lookup(&state, &ask, &body)?;
    // The session has all it needs from the body; a big one is not held for its length.
    drop(body);
    if let Some(hit) = cached.hit() {
        return Ok(hit);
    }
    let Opened { id, created, steps } = session::open(&state, ask).await?;
    let header = ChunkHeader {
        id: format!("chatcmpl-{}", &id[5..]),
        created,
        model: request.model.clone(),
    };
    let limit = AnswerLimit::new(request.max_tokens, request.stop.clone());
    let response = if request.stream {
        stream_response(
            request,
            limit,
            header,
            steps,
            state.settings.keepalive,
            &id,
            received,
        )
    } else {
        collect_response(header, steps, limit, &id, format).await?
    };
    Ok(cached.keep(session::with_session_header(response, &id)))
}

async fn collect_response(
    header: ChunkHeader,
    steps: Steps,
    mut limit: AnswerLimit,
    session_id: &str,
    format: DeliberationFormat,
) -> Result<Response, ApiError> {
    let (mut reasoning, mut summary) = steps.collect().await?;
    let metadata = metadata_json(session_id, &summary);
    summary.final_answer = limit.apply(&summary.final_answer);
    summary.finish_reason = finish_reason(&limit, summary.finish_reason);
    if format == DeliberationFormat::ThinkTags {
        summary.final_answer = think::wrap(&reasoning, &summary.final_answer);
        reasoning.clear();
    }
    let body = header.completion(&summary, &reasoning, metadata);
    let response = (StatusCode::OK, axum::Json(body)).into_response();
    Ok(session::with_winner_header(response, &summary))
}

/// `length` or `stop` when the client's bounds cut the answer.
fn finish_reason(limit: &AnswerLimit, reason: FinishReason) -> FinishReason {
    match limit.cut() {
        Some(Cut::MaxTokens) => FinishReason::Length,
        Some(Cut::Stop(_)) => FinishReason::Stop,
        None => reason,
    }
}

fn stream_response(
    request: ChatRequest,
    mut limit: AnswerLimit,
    header: ChunkHeader,
    mut steps: Steps,
    keepalive: Duration,
    session_id: &str,
    received: std::time::Instant,
) -> Response {
    let session_id = session_id.to_string();
    let mut think = (request.deliberation_format == Some(DeliberationFormat::ThinkTags))
        .then(ThinkTags::default);
    let body = async_stream::stream! {
        session::observe_first_byte(received);
        yield Ok::<Bytes, Infallible>(data(&header.role()));
        loop {
            let step = match steps.next_or_quiet(keepalive).await {
                Beat::Step(step) => step,
                Beat::Quiet => {
                    yield Ok(Bytes::from_static(sse::KEEPALIVE_COMMENT));
                    continue;
                }
            };
            // Whatever follows the deliberation closes its think block first.
            if !matches!(step, Step::Reasoning(_))
                && let Some(close) = think.as_mut().and_then(ThinkTags::close)
            {
                yield Ok(data(&header.content(&close)));
            }
            match step {
                Step::Reasoning(line) => match think.as_mut() {
                    Some(tags) => {
                        let text = tags.line(&line);
                        if !text.is_empty() {
                            yield Ok(data(&header.content(&text)));
                        }
                    }
                    None => yield Ok(data(&header.reasoning(&line))),
                },
                Step::Text(text) => {
                    let text = limit.push(&text);
                    if !text.is_empty() {
                        yield Ok(data(&header.content(&text)));
                    }
                }
                Step::ToolCalls(calls) => {
                    for chunk in header.tool_call_deltas(&calls) {
                        yield Ok(data(&chunk));
                    }
                }
                Step::Completed(summary) => {
                    let held = limit.finish();
                    if !held.is_empty() {
                        yield Ok(data(&header.content(&held)));
                    }
                    let metadata = metadata_json(&session_id, &summary);
                    let reason = finish_reason(&limit, summary.finish_reason);
                    yield Ok(data(&header.finish(reason, metadata)));
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
