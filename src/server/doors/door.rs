//! A door is what a wire format is upstream: one impl of [`Door`]. It reads its request
//! (serde-derived wire types through [`json::read`](super::json::read)) into the neutral
//! [`Ask`] and a plan of how to answer, and renders the session's [`Step`]s into its
//! stream ([`Live`]) or its body. [`serve`] is the one driver every door runs under:
//! cache, the use case ([`session::open`]), streaming and not, the cache's keep by the
//! session's outcome. Routes, labels and error shapes are in the [registry](super::registry).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use massgen_core::coordination::SessionSummary;
use massgen_core::provider::ToolCall;

use super::session::{self, Ask, Beat, Incoming, Opened, Step};
use crate::app::Caller;
use crate::server::AppState;
use crate::server::bodies::ShareSlot;
use crate::server::error::ApiError;
use crate::server::sse;

/// A request read by its door: the neutral ask, and what the door keeps to answer it.
pub struct Prepared<P> {
    pub ask: Ask,
    pub plan: P,
    /// Answer as a stream of events rather than one body.
    pub stream: bool,
}

/// The session as a door renders it.
#[derive(Debug, Clone)]
pub struct SessionRef {
    pub id: Arc<str>,
    /// Unix seconds, from the clock seam.
    pub created: u64,
}

/// One client API.
pub trait Door: Send + Sync + 'static {
    /// The door's name in session records, metrics labels and cache keys.
    const NAME: &'static str;
    /// What the door keeps from its request to render the answer.
    type Plan: Send + 'static;
    /// A streamed answer's rendering state.
    type Live: Live;

    /// Reads `body` (the caller's) into the neutral ask and the plan. `share`: the
    /// request's part of `--max-buffered-body-bytes`, for text the request makes the
    /// server hold besides its body (a stored conversation it continues).
    fn prepare(
        state: &AppState,
        caller: Caller,
        body: &[u8],
        share: Option<&ShareSlot>,
    ) -> impl Future<Output = Result<Prepared<Self::Plan>, ApiError>> + Send;

    /// The stream's renderer.
    fn live(state: &AppState, plan: Self::Plan, session: &SessionRef) -> Self::Live;

    /// The non-streamed body of a completed session; `reasoning` is the deliberation
    /// lines joined.
    fn body(
        state: &AppState,
        plan: Self::Plan,
        session: &SessionRef,
        reasoning: String,
        summary: Box<SessionSummary>,
    ) -> serde_json::Value;
}

/// A door's streamed answer: frames in the door's SSE idiom, a method per kind of
/// [`Step`] ([`serve`] matches the step once). After [`completed`](Live::completed) or
/// [`failed`](Live::failed) nothing more is asked.
pub trait Live: Send + 'static {
    /// Frames before the first step (the door's opening events).
    fn start(&mut self) -> Vec<Bytes>;
    /// Frames for a quiet spell as long as the keep-alive period.
    fn quiet(&mut self) -> Vec<Bytes>;
    /// A deliberation line (in `full` mode, a piece of an agent's text).
    fn reasoning(&mut self, line: &str) -> Vec<Bytes>;
    /// A piece of the final answer.
    fn text(&mut self, text: &str) -> Vec<Bytes>;
    /// The final answer is these client tool calls.
    fn tool_calls(&mut self, calls: &[ToolCall]) -> Vec<Bytes>;
    /// The session's outcome: the stream's closing frames.
    fn completed(&mut self, summary: &SessionSummary) -> Vec<Bytes>;
    /// The session failed, or stopped without an outcome ([`ApiError::Internal`]): the
    /// error after the 200 went out, and the stream's end.
    fn failed(&mut self, error: &ApiError) -> Vec<Bytes>;
}

/// Runs one request through door `D`: read, cache, open the session, answer.
pub async fn serve<D: Door>(incoming: Incoming) -> Result<Response, ApiError> {
    let Incoming {
        state,
        caller,
        received,
        body,
        share,
    } = incoming;
    let Prepared {
        mut ask,
        plan,
        stream,
    } = D::prepare(&state, caller, &body, share.as_ref()).await?;
    // The body's share of the body budget goes with the session, not the response.
    ask.hold = share
        .as_ref()
        .map(|slot| Box::new(slot.take()) as Box<dyn std::any::Any + Send>);
    // The door's name comes from the registry's impl, never from what a door wrote.
    ask.door = D::NAME;
    // Resolved once, for the cache's key and for the session.
    let panel = state.app.resolve_panel(&ask)?;
    let cached = session::cache_lookup(&state, &ask, &panel, &body);
    // The session has all it needs from the body; a big one is not held for its length.
    drop(body);
    if let Some(hit) = cached.hit() {
        return Ok(hit);
    }
    let Opened { id, created, steps } = session::open_on(&state.app, ask, panel).await?;
    let session = SessionRef {
        id: id.clone(),
        created,
    };
    let completed = Arc::new(AtomicBool::new(false));
    let response = if stream {
        let mut live = D::live(&state, plan, &session);
        let keepalive = state.settings().keepalive;
        let mut steps = steps;
        let done = Arc::clone(&completed);
        let frames = async_stream::stream! {
            session::observe_first_byte(received);
            for frame in live.start() {
                yield Ok::<Bytes, Infallible>(frame);
            }
            loop {
                let step = match steps.next_or_quiet(keepalive).await {
                    Beat::Step(step) => step,
                    Beat::Quiet => {
                        for frame in live.quiet() {
                            yield Ok(frame);
                        }
                        continue;
                    }
                };
                let ends = step.ends();
                let frames = match step {
                    Step::Reasoning(line) => live.reasoning(&line),
                    Step::Text(text) => live.text(&text),
                    Step::ToolCalls(calls) => live.tool_calls(&calls),
                    Step::Completed(summary) => {
                        done.store(true, Ordering::Release);
                        live.completed(&summary)
                    }
                    Step::Failed(error) => live.failed(&ApiError::Session(error)),
                    Step::Lost => live.failed(&ApiError::Internal),
                };
                for frame in frames {
                    yield Ok(frame);
                }
                if ends {
                    break;
                }
            }
        };
        sse::response(frames)
    } else {
        let (reasoning, summary) = steps.collect().await?;
        let winner = summary.winner.agent_id.clone();
        let body = D::body(&state, plan, &session, reasoning, summary);
        completed.store(true, Ordering::Release);
        let response = (StatusCode::OK, axum::Json(body)).into_response();
        session::with_winner_header(response, &winner)
    };
    Ok(cached.keep(session::with_session_header(response, &id), completed))
}
