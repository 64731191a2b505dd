//! `POST /v1/responses` and `GET /v1/responses/{id}`: the OpenAI Responses API door (what
//! Codex CLI, the Agents SDK and `client.responses` speak). One request is one session; the
//! deliberation streams as a reasoning summary, the answer as a message or the winning
//! function calls. `previous_response_id` continues a stored conversation. Errors are
//! OpenAI-shaped, in the body before the stream starts and as `error` +
//! `response.failed` events after.

pub mod render;
pub mod request;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use massgen_core::provider::{Message, ToolCall};

use super::conversation;
use super::limit::{self, AnswerLimit};
use super::metadata::metadata_json;
use super::session::{self, Ask, Beat, Incoming, Opened, Step, Steps};
use super::structured;
use crate::app::{Caller, Sessions};
use crate::server::AppState;
use crate::server::error::{ApiError, PathId};
use crate::server::sse;
use render::{Envelope, Live};
use request::ResponsesRequest;
use store::{ResponseStore, Stored};

/// This door's name in session records.
pub const DOOR: &str = "responses";

pub async fn create(incoming: Incoming) -> Result<Response, ApiError> {
    let Incoming {
        state,
        caller,
        received,
        body,
        share,
    } = incoming;
    let request = request::parse(&body)?;
    let (system, messages) = conversation_so_far(&state.responses, &caller, &request)?;
    // `instructions` hold for this request only; they are not kept with the conversation.
    let session_system: Vec<String> = request
        .instructions
        .iter()
        .cloned()
        .chain(system.iter().cloned())
        .collect();
    let mut input = conversation::session_input(
        session_system,
        messages.clone(),
        request.tools.clone(),
        "input",
    )?;
    input.answer_bounds.max_output_tokens = limit::upstream_cap(request.max_output_tokens);
    input.sampling = request.sampling;
    input.output = request
        .output
        .clone()
        .map(|format| structured::output(format, request.stream))
        .transpose()?;
    let ask = Ask {
        caller,
        door: DOOR,
        model: request.model.clone(),
        route_as: None,
        metadata: request.metadata.clone(),
        input,
        deliberation: request.deliberation,
        overrides: request.overrides,
        body_share: share,
    };
    let cached = session::cache_lookup(&state, &ask, &body)?;
    // The session has all it needs from the body; a big one is not held for its length.
    drop(body);
    if let Some(hit) = cached.hit() {
        return Ok(hit);
    }
    let Opened { id, created, steps } = session::open(&state, ask).await?;
    let env = Envelope {
        id: format!("resp_{}", &id[5..]),
        created_at: created,
        model: request.model.clone(),
        instructions: request.instructions.clone(),
        max_output_tokens: request.max_output_tokens,
        text: request.text.clone(),
        previous_response_id: request.previous_response_id.clone(),
        store: request.store,
        tools: request.tools_json.clone(),
        tool_choice: request.tool_choice_json.clone(),
        parallel_tool_calls: request.tools.parallel.unwrap_or(true),
        metadata: request.metadata.clone(),
    };
    let keep = request.store.then(|| Keep {
        store: state.responses.clone(),
        owner: caller,
        system,
        messages,
    });
    let finish = Finish {
        env,
        keep,
        sessions: state.sessions.clone(),
        session_id: id.to_string(),
        limit: AnswerLimit::new(request.max_output_tokens, Vec::new()),
    };
    let response = if request.stream {
        stream_response(finish, steps, state.settings.keepalive, received)
    } else {
        collect_response(finish, steps).await?
    };
    Ok(cached.keep(session::with_session_header(response, &id)))
}

/// The stored conversation `previous_response_id` names, followed by this request's input.
fn conversation_so_far(
    store: &ResponseStore,
    caller: &Caller,
    request: &ResponsesRequest,
) -> Result<(Vec<String>, Vec<Message>), ApiError> {
    let Some(previous_id) = &request.previous_response_id else {
        return Ok((request.system.clone(), request.messages.clone()));
    };
    let previous = store.get(previous_id, caller).ok_or_else(|| {
        ApiError::invalid(
            format!(
                "Previous response with id '{previous_id}' not found (responses are kept unless 'store' was false, for a limited time)"
            ),
            Some("previous_response_id"),
            "previous_response_not_found",
        )
    })?;
    let mut system = previous.system.clone();
    system.extend(request.system.iter().cloned());
    let mut messages = previous.messages.clone();
    messages.extend(request.messages.iter().cloned());
    Ok((system, messages))
}

/// What a stored response keeps besides its object.
struct Keep {
    store: Arc<ResponseStore>,
    owner: Caller,
    system: Vec<String>,
    messages: Vec<Message>,
}

/// Everything the end of the response needs.
struct Finish {
    env: Envelope,
    keep: Option<Keep>,
    sessions: Arc<Sessions>,
    session_id: String,
    limit: AnswerLimit,
}

impl Finish {
    /// Stores the finished response (unless `store: false`): its object, and the
    /// conversation with the answer the client got.
    fn store(&mut self, object: &serde_json::Value, calls: &[ToolCall]) {
        let Some(Keep {
            store,
            owner,
            system,
            mut messages,
        }) = self.keep.take()
        else {
            return;
        };
        let empty = Vec::new();
        let output = object["output"].as_array().unwrap_or(&empty);
        let mut answer = Message::assistant(render::answer_text(output));
        answer.tool_calls = calls.to_vec();
        messages.push(answer);
        store.put(
            self.env.id.clone(),
            Stored {
                owner,
                system,
                messages,
                response: object.to_string(),
            },
        );
    }
}

async fn collect_response(mut finish: Finish, steps: Steps) -> Result<Response, ApiError> {
    let (reasoning, summary) = steps.collect().await?;
    let output = render::output(&finish.env, &summary, &reasoning, &mut finish.limit);
    let metadata = metadata_json(&finish.session_id, &summary);
    let object = finish.env.finished(
        &summary,
        output,
        finish.limit.cut(),
        metadata,
        finish.sessions.now_secs(),
    );
    finish.store(&object, &summary.final_tool_calls);
    let response = (StatusCode::OK, axum::Json(object)).into_response();
    Ok(session::with_winner_header(response, &summary))
}

fn stream_response(
    mut finish: Finish,
    mut steps: Steps,
    keepalive: Duration,
    received: std::time::Instant,
) -> Response {
    let limit = std::mem::take(&mut finish.limit);
    let mut live = Live::new(finish.env.clone(), limit);
    let body = async_stream::stream! {
        session::observe_first_byte(received);
        for (kind, payload) in live.start() {
            yield Ok(sse::named(kind, &payload));
        }
        loop {
            let step = match steps.next_or_quiet(keepalive).await {
                Beat::Step(step) => step,
                Beat::Quiet => {
                    for (kind, payload) in live.keepalive() {
                        yield Ok(sse::named(kind, &payload));
                    }
                    continue;
                }
            };
            let (events, end) = match step {
                Step::Reasoning(line) => (live.reasoning(&line), false),
                Step::Text(text) => (live.text(&text), false),
                Step::ToolCalls(calls) => (live.tool_calls(&calls), false),
                Step::Completed(summary) => {
                    let metadata = metadata_json(&finish.session_id, &summary);
                    let (events, object) =
                        live.completed(&summary, metadata, finish.sessions.now_secs());
                    finish.store(&object, &summary.final_tool_calls);
                    (events, true)
                }
                Step::Failed(error) => (live.failed(&ApiError::Session(error)), true),
                Step::Lost => (live.failed(&ApiError::Internal), true),
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

/// `GET /v1/responses/{id}`: a stored response of the caller's.
pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathId(id): PathId,
) -> Result<Response, ApiError> {
    let stored = state
        .responses
        .get(&id, &caller)
        .ok_or(ApiError::ResponseNotFound { id })?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        stored.response.clone(),
    )
        .into_response())
}
