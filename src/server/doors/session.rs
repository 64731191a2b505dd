//! What every door does the same way: read the body, resolve the panel and start the
//! session (parse → resolve → start), then walk the session's events as door-neutral
//! [`Step`]s (deliberation lines, answer text, tool calls, the outcome) to render.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::HeaderValue;
use axum::response::Response;
use massgen_core::coordination::{
    EventKind, SessionError, SessionErrorKind, SessionEvent, SessionInput, SessionSummary,
};
use massgen_core::provider::{Sampling, ToolCall};
use tokio::sync::mpsc;
use tokio_util::sync::DropGuard;

use super::narrate::{Deliberation, Narrator};
use crate::app::records::SessionInfo;
use crate::app::spend;
use crate::app::{Caller, Overrides, SHUTDOWN_CANCELLED, SessionRequest, Sessions, StartError};
use crate::config::PanelConfig;
use crate::server::cache::{Lookup, ResponseCache};
use crate::server::error::ApiError;
use crate::server::limits::KeySessionSlot;
use crate::server::panel_choice::request_panel;
use crate::server::{AppState, bodies, routing, stall};
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
        let within = state.settings.production.body_read_timeout;
        // A body trickled in a byte at a time would otherwise hold the connection forever.
        let body = tokio::time::timeout(
            within,
            bodies::read_body(
                &parts.headers,
                share.as_ref(),
                body,
                state.settings.max_body_bytes,
                &state.production.bodies,
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

/// A parsed request, in door-neutral terms.
pub struct Ask {
    pub caller: Caller,
    /// Which door (the record says so).
    pub door: &'static str,
    /// The `model` as the client sent it (the record).
    pub model: String,
    /// The model name to route by, when it is not `model` (the Messages door's mapping).
    pub route_as: Option<String>,
    /// Request metadata kept with the record.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    pub input: SessionInput,
    pub deliberation: Deliberation,
    /// The `massgen` fields that change the panel's options.
    pub overrides: Overrides,
    /// The request body's share of the body budget ([`Incoming::share`]).
    pub body_share: Option<bodies::ShareSlot>,
}

/// A started session, ready to render.
pub struct Opened {
    pub id: Arc<str>,
    /// Unix seconds, from the clock seam.
    pub created: u64,
    pub steps: Steps,
}

/// The panel `ask` runs on: its model's, or the one its `massgen.models` make.
fn resolve_panel(state: &AppState, ask: &Ask) -> Result<Arc<PanelConfig>, ApiError> {
    let panel = routing::resolve(
        ask.route_as.as_deref().unwrap_or(&ask.model),
        &state.catalog,
        &state.settings,
        state.settings.allow_model_override,
        state.default_model(),
        state.env.as_ref(),
    )?;
    let models = &ask.overrides.models;
    if models.is_empty() {
        return Ok(panel);
    }
    let allowed = state.settings.allow_request_panels;
    Ok(Arc::new(request_panel(
        &panel,
        models,
        &state.catalog,
        allowed,
    )?))
}

/// The response cache's part in a request to `ask`'s panel with `body` (nothing when
/// the cache is off).
pub fn cache_lookup(state: &AppState, ask: &Ask, body: &[u8]) -> Result<Lookup, ApiError> {
    let Some(cache) = state.cache.as_ref() else {
        return Ok(Lookup::off(ask.door));
    };
    let panel = resolve_panel(state, ask)?;
    let key = ResponseCache::key(ask.door, &ask.caller, &panel, body);
    Ok(Lookup::new(Some(cache), ask.door, key))
}

/// Resolves the panel for `ask.model`, takes a session slot and starts the session.
pub async fn open(state: &AppState, mut ask: Ask) -> Result<Opened, ApiError> {
    if !state.settings.allow_request_sampling {
        // Ignored, not refused: most clients send `temperature` by default (LangChain,
        // LiteLLM, the Agents SDK), and the panel's settings are the operator's.
        ask.input.sampling = Sampling::default();
    }
    let panel = resolve_panel(state, &ask)?;
    let limits = &state.production.limits;
    // Held by the session until its coordination ends; over a cap the request is refused
    // at once.
    let permit = limits.try_session()?;
    let key_slot = limits.try_key_session(ask.caller.key)?;
    let reservation = reserve_cost(state, &ask.caller, &panel, &ask.overrides).await?;
    if let Some(reserved) = &reservation {
        // The session may spend what it reserved, no more (never more than its own caps:
        // the reservation is at most the smallest of them).
        ask.overrides.max_cost_usd = Some(reserved.usd);
    }
    let models = &ask.overrides.models;
    let model_chosen =
        routing::model_chosen(ask.route_as.as_deref().unwrap_or(&ask.model)) || !models.is_empty();
    let sessions = &state.sessions;
    let started = sessions
        .start(
            &panel,
            SessionRequest {
                caller: ask.caller,
                info: SessionInfo {
                    model: ask.model,
                    door: ask.door.into(),
                    metadata: ask.metadata,
                    question: ask.input.question.clone(),
                    created_ms: sessions.now_ms(),
                    ..SessionInfo::default()
                },
                input: ask.input,
                stream_agent_text: ask.deliberation == Deliberation::Full,
                overrides: ask.overrides,
                model_chosen,
            },
        )
        .map_err(start_error)?;
    let (events, stalled) = relay(
        started.events,
        started.cancel,
        state.settings.production.client_stall_timeout,
        Held {
            _permit: permit,
            _key_slot: key_slot,
            _body_share: ask.body_share.as_ref().map(bodies::ShareSlot::take),
            reservation,
        },
    );
    Ok(Opened {
        created: sessions.now_secs(),
        steps: Steps {
            events,
            narrator: Narrator::new(ask.deliberation),
            session_id: started.id.clone(),
            sessions: Arc::clone(sessions),
            stalled,
        },
        id: started.id,
    })
}

/// Under `--max-key-cost-usd-per-day`, reserves the new session's maximum cost from what
/// `caller` may still spend today: the smallest of `--max-session-cost-usd`, the panel's
/// and the request's `max_cost_usd`, else all that is left (then the key's next session
/// waits for this one to end). Refused, before any upstream call, when nothing is left.
async fn reserve_cost(
    state: &AppState,
    caller: &Caller,
    panel: &PanelConfig,
    overrides: &Overrides,
) -> Result<Option<spend::Reservation>, ApiError> {
    let Some(quota) = state.production.quota else {
        return Ok(None);
    };
    let production = &state.settings.production;
    let cap = [
        production.max_session_cost_usd,
        panel.orchestrator.max_cost_usd,
        overrides.max_cost_usd,
    ]
    .into_iter()
    .flatten()
    .reduce(f64::min);
    let sessions = &state.sessions;
    let reserved = spend::reserve(
        sessions.spend(),
        sessions.records().db(),
        quota,
        caller.owner(),
        sessions.now_ms(),
        cap,
        production.records_interrupted_after,
    )
    .await;
    match reserved {
        Ok(reservation) => Ok(Some(reservation)),
        Err(refused) => {
            if let Some(m) = telemetry::metrics() {
                m.rejected.with_label_values(&["key_quota"]).inc();
            }
            Err(ApiError::QuotaSpent(refused))
        }
    }
}

/// Events buffered between the session and the door's response body. Frames are small,
/// so with hyper's write buffer this bounds what a stalled client holds.
const CLIENT_BUFFER: usize = 64;
/// Events a session may produce ahead of a client that reads slowly, so its coordination
/// ends, and frees its slots, without waiting for the client: a whole ordinary session
/// (a few hundred events; a streamed presentation is one per chunk). Past it the session
/// waits for the client, up to the stall timeout. Events are a few hundred bytes (a chunk
/// of text each), so a stalled client holds a megabyte or two here (the few events that carry whole
/// answers are the larger part).
const CLIENT_READ_AHEAD: usize = 4_096;

/// What a session holds until its coordination ends.
struct Held {
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
    _key_slot: Option<KeySessionSlot>,
    _body_share: Option<bodies::Share>,
    reservation: Option<spend::Reservation>,
}

impl Held {
    /// Counts what the session spends against its reservation; whether `event` is the
    /// session's last.
    fn watch(&mut self, event: &SessionEvent) -> bool {
        match &event.kind {
            EventKind::Usage {
                cost_usd: Some(usd),
                ..
            } => {
                if let Some(reservation) = self.reservation.as_mut() {
                    reservation.spend(*usd);
                }
                false
            }
            EventKind::SessionCompleted { .. } | EventKind::SessionFailed { .. } => true,
            _ => false,
        }
    }
}

/// Moves the session's events to the door through a small buffer, reading ahead of a
/// slow client (up to [`CLIENT_READ_AHEAD`]) so the session never waits on it for long.
/// `held` goes with the session's last event (`session_completed` or `session_failed`),
/// before the client can see it: a client that sends its next request on seeing the end
/// of this one finds the slots and the allowance given back. A client that leaves the
/// buffer full for `stall` (it stopped reading, or its HTTP/2 window is 0) is dropped as a
/// disconnect, as is one that goes away. Either way `cancel` is dropped, which cancels the
/// session's upstream calls; the session then ends and frees what it held.
fn relay(
    from: mpsc::Receiver<Box<SessionEvent>>,
    cancel: DropGuard,
    stall: Duration,
    held: Held,
) -> (mpsc::Receiver<Box<SessionEvent>>, Arc<AtomicBool>) {
    let bounds = stall::Bounds {
        capacity: CLIENT_BUFFER,
        ahead: CLIENT_READ_AHEAD,
        stall,
    };
    stall::read_ahead(
        from,
        bounds,
        cancel,
        held,
        |held, event| held.watch(event),
        move |event| {
            tracing::warn!(
                session_id = %event.session_id,
                stall_seconds = stall.as_secs_f64(),
                buffered_events = CLIENT_BUFFER,
                "the client stopped reading: dropping it as a disconnect"
            );
        },
    )
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
        StartError::Unpriced {
            panel,
            agent,
            model,
            limit,
        } => ApiError::ConfigUnavailable {
            name: panel,
            reason: format!(
                "the session may spend at most ${limit} (its max_cost_usd, --max-session-cost-usd or what is left of the key's --max-key-cost-usd-per-day) but agent '{agent}' has no price for model '{model}', so the limit could not be kept: set its backend.pricing"
            ),
        },
    }
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
pub fn with_winner_header(mut response: Response, summary: &SessionSummary) -> Response {
    if let Ok(v) = HeaderValue::from_str(&summary.winner.agent_id) {
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

/// The session's events as [`Step`]s. Dropping it cancels the session's upstream calls.
pub struct Steps {
    events: mpsc::Receiver<Box<SessionEvent>>,
    narrator: Narrator,
    session_id: Arc<str>,
    /// Tells a cancellation by shutdown from one by the client.
    sessions: Arc<Sessions>,
    /// Set when [`relay`] dropped a client that stopped reading.
    stalled: Arc<AtomicBool>,
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
                EventKind::SessionFailed { mut error } => {
                    // The engine cannot tell who cancelled it; the service can.
                    if error.kind == SessionErrorKind::Cancelled && self.sessions.shutting_down() {
                        error.message = SHUTDOWN_CANCELLED.to_string();
                    }
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
        match tokio::time::timeout(keepalive, self.next()).await {
            Ok(step) => Beat::Step(step),
            Err(_) => Beat::Quiet,
        }
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
