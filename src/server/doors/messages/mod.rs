//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: the Anthropic Messages door
//! (what Claude Code and the `anthropic` SDKs speak). One request is one session; the
//! deliberation streams as a `thinking` block, the answer as a `text` block or the winning
//! `tool_use` blocks; `ping` keeps quiet streams alive. Errors are Anthropic-shaped
//! ([`error`]), in the body before the stream starts and as `error` events after.

pub mod error;
pub mod render;
pub mod request;

use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::conversation;
use super::limit::{self, AnswerLimit, estimate_tokens};
use super::metadata::metadata_json;
use super::session::{self, Ask, Beat, Incoming, Opened, Step, Steps};
use super::structured;
use crate::server::error::ApiError;
use crate::server::sse;
use massgen_core::coordination::AnswerBounds;
use render::{Header, Live};
use request::MessagesRequest;

/// This door's name in session records.
pub const DOOR: &str = "messages";

pub async fn create(incoming: Incoming) -> Result<Response, ApiError> {
    let Incoming {
        state,
        caller,
        received,
        body,
        share,
    } = incoming;
    let mut request = request::parse(&body, true)?;
    let mut input = conversation::session_input(
        request.system.clone(),
        std::mem::take(&mut request.messages),
        request.tools.clone(),
        "messages",
    )?;
    input.answer_bounds = AnswerBounds {
        max_output_tokens: limit::upstream_cap(Some(request.max_tokens)),
        stop: request.stop_sequences.clone(),
    };
    input.sampling = request.sampling;
    input.output = request
        .output
        .clone()
        .map(|format| structured::output(format, request.stream))
        .transpose()?;
    let mut metadata = Map::new();
    if let Some(user) = &request.user_id {
        metadata.insert("user_id".into(), Value::String(user.clone()));
    }
    let ask = Ask {
        caller,
        door: DOOR,
        model: request.model.clone(),
        route_as: route_as(
            &request.model,
            state.settings.messages_default_panel.as_deref(),
        ),
        metadata,
        input,
        deliberation: request.deliberation,
        overrides: request.overrides.clone(),
        body_share: share,
    };
    let cached = session::cache_lookup(&state, &ask, &body)?;
    // The session has all it needs from the body; a big one is not held for its length.
    drop(body);
    if let Some(hit) = cached.hit() {
        return Ok(hit);
    }
    let Opened { id, steps, .. } = session::open(&state, ask).await?;
    let header = Header {
        id: format!("msg_{}", &id[5..]),
        model: request.model.clone(),
    };
    let response = if request.stream {
        stream_response(
            &request,
            header,
            steps,
            state.settings.keepalive,
            &id,
            received,
        )
    } else {
        collect_response(&request, header, steps, &id).await?
    };
    Ok(cached.keep(session::with_session_header(response, &id)))
}

/// Claude Code sends its own model names (`claude-…`); with `--messages-default-panel`
/// they go to that panel. `massgen` and `massgen/<name>` route as on every door.
fn route_as(model: &str, default_panel: Option<&str>) -> Option<String> {
    let ours = model == "massgen" || model.starts_with("massgen/");
    match default_panel {
        Some(panel) if !ours => Some(format!("massgen/{panel}")),
        _ => None,
    }
}

fn limit_of(request: &MessagesRequest) -> AnswerLimit {
    AnswerLimit::new(Some(request.max_tokens), request.stop_sequences.clone())
}

async fn collect_response(
    request: &MessagesRequest,
    header: Header,
    steps: Steps,
    session_id: &str,
) -> Result<Response, ApiError> {
    let (reasoning, summary) = steps.collect().await?;
    let metadata = metadata_json(session_id, &summary);
    let mut limit = limit_of(request);
    let body = render::message(&header, &summary, &reasoning, &mut limit, metadata);
    let response = (StatusCode::OK, axum::Json(body)).into_response();
    Ok(session::with_winner_header(response, &summary))
}

fn stream_response(
    request: &MessagesRequest,
    header: Header,
    mut steps: Steps,
    keepalive: Duration,
    session_id: &str,
    received: std::time::Instant,
) -> Response {
    let mut live = Live::new(header, limit_of(request));
    let session_id = session_id.to_string();
    let body = async_stream::stream! {
        session::observe_first_byte(received);
        for (kind, payload) in live.start() {
            yield Ok(sse::named(kind, &payload));
        }
        loop {
            let step = match steps.next_or_quiet(keepalive).await {
                Beat::Step(step) => step,
                Beat::Quiet => {
                    let (kind, payload) = render::ping();
                    yield Ok(sse::named(kind, &payload));
                    continue;
                }
            };
            let (events, end) = match step {
                Step::Reasoning(line) => (live.reasoning(&line), false),
                Step::Text(text) => (live.text(&text), false),
                Step::ToolCalls(calls) => (live.tool_calls(&calls), false),
                Step::Completed(summary) => {
                    let metadata = metadata_json(&session_id, &summary);
                    (live.completed(&summary, metadata), true)
                }
                Step::Failed(e) => (vec![error_event(&ApiError::Session(e))], true),
                Step::Lost => (vec![error_event(&ApiError::Internal)], true),
            };
            for (kind, payload) in events {
                yield Ok::<Bytes, std::convert::Infallible>(sse::named(kind, &payload));
            }
            if end {
                break;
            }
        }
    };
    sse::response(body)
}

/// An error after the 200 went out.
fn error_event(error: &ApiError) -> render::Event {
    (
        "error",
        json!({"type": "error", "error": error::error_object(error)}),
    )
}

/// `POST /v1/messages/count_tokens`: an estimate (one token per four characters of the
/// system text, messages and tool definitions), not a model's tokenizer; the panel's
/// models do not share one. `max_tokens` is not needed here.
pub async fn count_tokens(incoming: Incoming) -> Result<Response, ApiError> {
    let request = request::parse(&incoming.body, false)?;
    let mut text: String = request.system.join("\n");
    for m in &request.messages {
        text.push_str(&m.content);
        for call in &m.tool_calls {
            text.push_str(&call.name);
            text.push_str(&call.arguments);
        }
    }
    for tool in &request.tools.tools {
        text.push_str(&tool.name);
        text.push_str(&tool.description);
        text.push_str(&tool.parameters.to_string());
    }
    Ok(axum::Json(json!({"input_tokens": estimate_tokens(&text)})).into_response())
}
