//! What every door does the same way: read the body, resolve the panel and start the
//! session (parse → resolve → start), then walk the session's events as door-neutral
//! [`Step`]s (deliberation lines, answer text, tool calls, the outcome) to render.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::HeaderValue;
use axum::response::Response;
use massgen_core::coordination::{
    EventKind, SessionError, SessionErrorKind, SessionEvent, SessionSummary,
};
use massgen_core::provider::ToolCall;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

use super::narrate::Narrator;
pub use crate::app::Ask;
use crate::app::{App, Caller};
use crate::config::PanelConfig;
use crate::server::cache::{Lookup, ResponseCache};
use crate::server::error::ApiError;
use crate::server::{AppState, bodies};
use crate::telemetry;

pub const SESSION_HEADER: &str = "x-massgen-session-id";
/// The winning agent's id, on non-streamed responses: proxies (LiteLLM) drop unknown body
/// fields such as `massgen_metadata` but keep response headers. A streamed response's
/// headers go out before there is a winner; its final event's metadata names it.
pub const WINNER_HEADER: &str = "x-massgen-winner";

/// What every door's handler starts from: the state, the caller, when the request
/// arrived, and its body (read up to `--max-body-bytes`).
pub struct Incoming {
    pub state: AppState,
    pub caller: Caller,
    pub received: std::time::Instant,
    pub body: Bytes,
    /// Where the body's part of `--max-buffered-body-bytes` is kept: a session takes it,
    /// so it is given back when the coordination ends, not when a slow client has read
    /// the whole response.
    pub share: Option<bodies::ShareSlot>,
}

impl FromRequest<AppState> for Incoming {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let received = std::time::Instant::now();
        let caller = request
            .extensions()
            .get::<Caller>()
            .copied()
            .unwrap_or_default();
        let (parts, body) = request.into_parts();
        let share = parts.extensions.get::<bodies::ShareSlot>().cloned();
        let within = state.settings().production.body_read_timeout;
        // A body trickled in a byte at a time would otherwise hold the connection forever.
        let body = tokio::time::timeout(
            within,
            bodies::read_body(
                &parts.headers,
                share.as_ref(),
                body,
                state.settings().max_body_bytes,
                &state.edge.bodies,
            ),
        )
        .await
        .map_err(|_| ApiError::BodyTimeout { within })??;
        Ok(Self {
            state: state.clone(),
            caller,
            received,
            body,
            share,
        })
    }
}

/// The response cache's part in a request to `ask`'s panel with `body` (nothing when
/// the cache is off).
pub fn cache_lookup(state: &AppState, ask: &Ask, panel: &PanelConfig, body: &[u8]) -> Lookup {
    match state.edge.cache.as_ref() {
        Some(cache) => Lookup::new(
            Some(cache),
            ResponseCache::key(ask.door, &ask.caller, panel, body),
        ),
        None => Lookup::off(),
    }
}

/// A started session, ready to render.
pub struct Opened {
    pub id: Arc<str>,
    /// Unix seconds, from the clock seam.
    pub created: u64,
    pub steps: Steps,
}

/// Starts the session `ask` asks for ([`crate::app::open`]), its events as [`Steps`].
pub async fn open(app: &App, ask: Ask) -> Result<Opened, ApiError> {
    let panel = app.resolve_panel(&ask)?;
    open_on(app, ask, panel).await
}

/// [`open`] on `panel`, already resolved for `ask`.
pub async fn open_on(app: &App, ask: Ask, panel: Arc<PanelConfig>) -> Result<Opened, ApiError> {
    let deliberation = ask.deliberation;
    let started = app.open_on(ask, panel).await?;
    let narrator = if started.plain {
        Narrator::plain(deliberation)
    } else {
        Narrator::new(deliberation)
    };
    Ok(Opened {
        created: started.created,
        steps: Steps {
            events: started.events,
            narrator,
            session_id: started.id.clone(),
            stalled: started.stalled,
            quiet: None,
        },
        id: started.id,
    })
}

/// Puts the session id on a response.
pub fn with_session_header(mut response: Response, id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(id) {
        response.headers_mut().insert(SESSION_HEADER, v);
    }
    response
}

/// Puts the winner's agent id on a non-streamed response (left out if the id cannot be a
/// header value).
pub fn with_winner_header(mut response: Response, winner: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(winner) {
        response.headers_mut().insert(WINNER_HEADER, v);
    }
    response
}

/// What a door renders, in the order the session produces it.
#[derive(Debug)]
pub enum Step {
    /// A deliberation line (or, in `full` mode, a piece of an agent's text).
    Reasoning(String),
    /// A piece of the final answer.
    Text(String),
    /// The final answer is this set of client tool calls.
    ToolCalls(Vec<ToolCall>),
    Completed(Box<SessionSummary>),
    Failed(SessionError),
    /// The engine stopped without an outcome (a bug; logged).
    Lost,
}

impl Step {
    /// Whether this is the session's last step.
    pub fn ends(&self) -> bool {
        matches!(self, Self::Completed(_) | Self::Failed(_) | Self::Lost)
    }
}

/// The session's events as [`Step`]s. Dropping it cancels the session's upstream calls.
pub struct Steps {
    events: mpsc::Receiver<Box<SessionEvent>>,
    narrator: Narrator,
    session_id: Arc<str>,
    /// Set when [`relay`] dropped a client that stopped reading.
    stalled: Arc<AtomicBool>,
    /// The keep-alive timer, kept and moved on rather than made per step: a timeout per
    /// step registered and removed a timer for every token; moving a registered timer
    /// later is an atomic store.
    quiet: Option<Pin<Box<Sleep>>>,
}

impl Steps {
    /// The next step. Cancel-safe: an event is only taken when it yields a step (or none).
    pub async fn next(&mut self) -> Step {
        loop {
            let Some(event) = self.events.recv().await else {
                if !self.stalled.load(Ordering::Relaxed) {
                    tracing::error!(session_id = %self.session_id, "session ended without an outcome");
                }
                return Step::Lost;
            };
            match event.kind {
                EventKind::FinalDelta { text } if !text.is_empty() => return Step::Text(text),
                EventKind::FinalToolCalls { calls } => return Step::ToolCalls(calls),
                EventKind::SessionCompleted { summary } => {
                    tracing::info!(
                        session_id = %self.session_id,
                        duration_ms = summary.duration_ms,
                        total_tokens = summary.usage.total_tokens,
                        "session completed"
                    );
                    return Step::Completed(summary);
                }
                EventKind::SessionFailed { error } => {
                    // A cancellation by the shutdown already says so: the session's
                    // observer rewrote the event before it got here.
                    log_failed(&self.session_id, &error);
                    return Step::Failed(error);
                }
                other => {
                    if let Some(line) = self.narrator.line(&other) {
                        return Step::Reasoning(line);
                    }
                }
            }
        }
    }
}

/// A step, or a quiet spell as long as the keep-alive period.
#[derive(Debug)]
pub enum Beat {
    Step(Step),
    Quiet,
}

impl Steps {
    /// The next step, or [`Beat::Quiet`] when none came for `keepalive` (each door sends
    /// its own keep-alive then).
    pub async fn next_or_quiet(&mut self, keepalive: Duration) -> Beat {
        let until = Instant::now() + keepalive;
        // Taken out while waiting (the step borrows `self`); a wait dropped half-way loses
        // it, and the next one makes another.
        let mut quiet = self
            .quiet
            .take()
            .unwrap_or_else(|| Box::pin(tokio::time::sleep_until(until)));
        quiet.as_mut().reset(until);
        let beat = tokio::select! {
            biased;
            step = self.next() => Beat::Step(step),
            () = quiet.as_mut() => Beat::Quiet,
        };
        self.quiet = Some(quiet);
        beat
    }

    /// For a non-streamed response: the deliberation lines joined, and the outcome (the
    /// answer is in the summary); a failure as the error to answer with.
    pub async fn collect(mut self) -> Result<(String, Box<SessionSummary>), ApiError> {
        let mut reasoning = String::new();
        loop {
            match self.next().await {
                Step::Reasoning(line) => reasoning.push_str(&line),
                Step::Text(_) | Step::ToolCalls(_) => {}
                Step::Completed(summary) => return Ok((reasoning, summary)),
                Step::Failed(error) => return Err(ApiError::Session(error)),
                Step::Lost => return Err(ApiError::Internal),
            }
        }
    }
}

/// The message can quote the answer (a failed schema check) or an upstream's words (which
/// can quote the question): it is logged at debug only; above that, who failed and how.
fn log_failed(session_id: &str, error: &SessionError) {
    let agents: Vec<String> = error
        .agent_errors
        .iter()
        .map(|a| match a.status {
            Some(status) => format!("{}:{:?}:{status}", a.agent.agent_id, a.kind),
            None => format!("{}:{:?}", a.agent.agent_id, a.kind),
        })
        .collect();
    if error.kind == SessionErrorKind::Cancelled {
        // Our own words (shutdown, a client gone).
        tracing::info!(session_id = %session_id, reason = %error.message, "session cancelled");
    } else {
        tracing::warn!(session_id = %session_id, kind = ?error.kind, agents = %agents.join(","), "session failed");
    }
    tracing::debug!(session_id = %session_id, error = %error.message, "session failure");
}

/// Time from the request's arrival to the first byte of a streamed response.
pub fn observe_first_byte(received: std::time::Instant) {
    if let Some(m) = telemetry::metrics() {
        m.time_to_first_byte
            .observe(received.elapsed().as_secs_f64());
    }
}
