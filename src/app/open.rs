//! The use case, once for every edge: an [`Ask`] becomes a running session. [`open`]
//! chooses the panel (named, `massgen/model:`, `massgen/path:`, request panels), takes the
//! session's places and its upstream calls' descriptors ([`Permits`]), reserves its cost
//! under the key's daily quota, starts it and puts the one [forwarder](super::forward)
//! between the engine and the edge. What the session holds goes with its last event.
//!
//! [`open`]: App::open
//! [`Permits`]: super::permits::Permits

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use massgen_core::coordination::{EventKind, SessionEvent, SessionInput};
use massgen_core::provider::Sampling;
use tokio::sync::mpsc;
use tokio_util::sync::DropGuard;

use super::app::App;
use super::descriptors::Descriptors;
use super::estimate;
use super::forward::{self, Observe};
use super::observer::SessionObserver;
use super::panels::{self, request_panel::request_panel};
use super::permits::KeySessionSlot;
use super::spend;
use super::store::SessionInfo;
use super::{Caller, Overrides, Refusal, SessionRequest, Sessions, StartError};
use crate::config::PanelConfig;
use crate::telemetry;

/// How much of the deliberation the client sees (`massgen.deliberation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Deliberation {
    /// One line per answer, vote, failure and consensus.
    #[default]
    Summary,
    /// Summary plus the agents' streamed text.
    Full,
    Off,
}

/// A request, in door-neutral terms.
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
    /// Held by the session until its coordination ends (the edge's share of the body
    /// budget for this request's body).
    pub hold: Option<Box<dyn Any + Send>>,
}

/// A started session: its events, forwarded.
pub struct Opened {
    pub id: Arc<str>,
    /// Unix seconds, from the clock seam.
    pub created: u64,
    pub events: mpsc::Receiver<Box<SessionEvent>>,
    /// Set when the forwarder dropped a client that stopped reading.
    pub stalled: Arc<AtomicBool>,
    /// A panel of one: a plain call, whose events are the model's own (no deliberation).
    pub plain: bool,
}

impl App {
    /// The panel `ask` runs on: its model's, or the one its `massgen.models` make.
    pub fn resolve_panel(&self, ask: &Ask) -> Result<Arc<PanelConfig>, Refusal> {
        let settings = self.settings();
        let panel = panels::resolve(
            ask.route_as.as_deref().unwrap_or(&ask.model),
            self.catalog(),
            settings,
            settings.allow_model_override,
            settings.default_model.as_deref(),
            self.env(),
        )?;
        let models = &ask.overrides.models;
        if models.is_empty() {
            return Ok(panel);
        }
        Ok(Arc::new(request_panel(
            &panel,
            models,
            self.catalog(),
            settings.allow_request_panels,
        )?))
    }

    /// Resolves the panel, takes the session's places, reserves its cost and starts it.
    pub async fn open(&self, ask: Ask) -> Result<Opened, Refusal> {
        let panel = self.resolve_panel(&ask)?;
        self.open_on(ask, panel).await
    }

    /// [`App::open`] on `panel`, already resolved for `ask` ([`App::resolve_panel`]):
    /// a caller that needed the panel first (the response cache's key) does not resolve it
    /// twice (for `massgen/path:`, a second read of the file, which could differ).
    pub async fn open_on(&self, mut ask: Ask, panel: Arc<PanelConfig>) -> Result<Opened, Refusal> {
        if !self.settings().allow_request_sampling {
            // Ignored, not refused: most clients send `temperature` by default (LangChain,
            // LiteLLM, the Agents SDK), and the panel's settings are the operator's.
            ask.input.sampling = Sampling::default();
        }
        // Held by the session until its coordination ends; over a cap the request is
        // refused at once.
        let permit = self.permits.try_session()?;
        let key_slot = self.permits.try_key_session(ask.caller.key)?;
        // Before any upstream call: short of descriptors the client gets a 503 now, never
        // a session that fails half-way on "Too many open files".
        let descriptors = self.permits.try_descriptors(&panel)?;
        // Computed before the await: `Ask` holds the edge's share, which is `Send` only.
        let first_round = estimate::first_round_usd(&panel, &ask.input);
        let reservation = self
            .reserve_cost(&ask.caller, &panel, &ask.overrides, first_round)
            .await?;
        if let Some(reserved) = &reservation {
            // The session may spend what it reserved, no more, and no more than its own
            // caps (the reservation covers at least its first round, which may be more).
            ask.overrides.max_cost_usd = Some(
                ask.overrides
                    .max_cost_usd
                    .map_or(reserved.usd, |cap| cap.min(reserved.usd)),
            );
        }
        let model_chosen = panels::model_chosen(ask.route_as.as_deref().unwrap_or(&ask.model))
            || !ask.overrides.models.is_empty();
        let sessions = self.sessions();
        let door = ask.door;
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
        if let Some(m) = telemetry::metrics() {
            // A door's name is one of the registry's, never the request's: a bounded label.
            m.sessions_started.with_label_values(&[door]).inc();
        }
        let (events, stalled) = relay(
            sessions,
            started.events,
            started.cancel,
            self.settings().production.client_stall_timeout,
            Watch {
                observer: started.observer,
                held: Some(Held {
                    _permit: permit,
                    _key_slot: key_slot,
                    _descriptors: descriptors,
                    _hold: ask.hold,
                    reservation,
                }),
            },
        );
        Ok(Opened {
            id: started.id,
            created: sessions.now_secs(),
            events,
            stalled,
            plain: started.plain,
        })
    }

    /// Under `--max-key-cost-usd-per-day`, reserves the new session's maximum cost from what
    /// `ask`'s caller may still spend today: the smallest of `--max-session-cost-usd`, the
    /// panel's and the request's `max_cost_usd`, else all that is left (then the key's next
    /// session waits for this one to end), but never less than `first_round`, what its
    /// first round can cost ([`estimate`]): however small its cap, a session's first calls
    /// run at once. Refused, before any upstream call, when less than that is left.
    async fn reserve_cost(
        &self,
        caller: &Caller,
        panel: &PanelConfig,
        overrides: &Overrides,
        first_round: f64,
    ) -> Result<Option<spend::Reservation>, Refusal> {
        let Some(quota) = self.quota else {
            return Ok(None);
        };
        let production = &self.settings().production;
        let cap = [
            production.max_session_cost_usd,
            panel.orchestrator.max_cost_usd,
            overrides.max_cost_usd,
        ]
        .into_iter()
        .flatten()
        .reduce(f64::min);
        let sessions = self.sessions();
        let reserved = spend::reserve(
            sessions.spend(),
            sessions.records().db(),
            quota,
            caller.owner(),
            sessions.now_ms(),
            (cap, first_round),
            production.records_interrupted_after,
        )
        .await;
        match reserved {
            Ok(reservation) => Ok(Some(reservation)),
            Err(refused) => {
                if let Some(m) = telemetry::metrics() {
                    m.rejected.with_label_values(&["key_quota"]).inc();
                }
                Err(Refusal::QuotaSpent(refused))
            }
        }
    }
}

/// Events buffered between the session and the door's response body. Frames are small,
/// so with hyper's write buffer this bounds what a stalled client holds.
const CLIENT_BUFFER: usize = 64;
/// Bytes of events held for a client that reads slowly, beyond the channel: the session
/// never waits for its client (it ends, records its end and frees its slots on its own
/// clock), so this is all a slow client can make the server hold for it. An ordinary
/// session is well under it (a few hundred events of a few hundred bytes, the answers);
/// a client this far behind is dropped as a disconnect.
const CLIENT_READ_AHEAD_BYTES: usize = 4 * 1024 * 1024;

/// What a session holds until its coordination ends.
struct Held {
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
    _key_slot: Option<KeySessionSlot>,
    /// One per agent's upstream connection ([`Permits::try_descriptors`]).
    _descriptors: Option<Descriptors>,
    /// What the edge gave the session to hold (the request body's share of the body
    /// budget).
    _hold: Option<Box<dyn Any + Send>>,
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

/// The session's observers, in turn: its record, metrics and spend, then what it holds,
/// which goes with its last event (`session_completed` or `session_failed`), before the
/// client can see it: a client that sends its next request on seeing the end of this one
/// finds the slots and the allowance given back.
struct Watch {
    observer: SessionObserver,
    held: Option<Held>,
}

impl Observe<Box<SessionEvent>> for Watch {
    fn see(&mut self, event: &mut Box<SessionEvent>) {
        self.observer.see(event);
        if let Some(held) = self.held.as_mut()
            && held.watch(event)
        {
            self.held = None;
        }
    }

    async fn end(mut self) {
        self.held = None;
        self.observer.end().await;
    }
}

/// Moves the session's events to the door ([`forward::spawn`]), holding up to
/// [`CLIENT_READ_AHEAD_BYTES`] for a slow client so the session never waits on it. A
/// client that falls further behind, or leaves the channel full for `stall` (it stopped
/// reading, or its HTTP/2 window is 0), is dropped as a disconnect, as is one that goes
/// away. Either way `cancel` is dropped, which cancels the session's upstream calls; the
/// session then ends and frees what it held.
fn relay(
    sessions: &Sessions,
    from: mpsc::Receiver<Box<SessionEvent>>,
    cancel: DropGuard,
    stall: Duration,
    watch: Watch,
) -> (mpsc::Receiver<Box<SessionEvent>>, Arc<AtomicBool>) {
    let bounds = forward::Bounds {
        capacity: CLIENT_BUFFER,
        ahead_bytes: CLIENT_READ_AHEAD_BYTES,
        source_waits: false,
        stall,
    };
    forward::spawn(
        sessions.tasks(),
        tokio_stream::wrappers::ReceiverStream::new(from),
        bounds,
        cancel,
        watch,
        move |why, event| match why {
            forward::Dropped::Stalled => tracing::warn!(
                session_id = %event.session_id,
                stall_seconds = stall.as_secs_f64(),
                "the client stopped reading: dropping it as a disconnect"
            ),
            forward::Dropped::TooFarBehind => tracing::warn!(
                session_id = %event.session_id,
                behind_bytes = CLIENT_READ_AHEAD_BYTES,
                "the client fell too far behind the session: dropping it as a disconnect"
            ),
        },
    )
}

impl forward::Weigh for Box<SessionEvent> {
    /// The event and the text it carries; the rest of an event (ids, labels, counts) is
    /// within the fixed part.
    fn weight(&self) -> usize {
        const FIXED: usize = 256;
        let calls = |calls: &[massgen_core::provider::ToolCall]| -> usize {
            calls
                .iter()
                .map(|c| c.id.len() + c.name.len() + c.arguments.len() + 64)
                .sum()
        };
        let answer = |content: &massgen_core::coordination::AnswerContent| match content {
            massgen_core::coordination::AnswerContent::Text { text } => text.len(),
            massgen_core::coordination::AnswerContent::ToolCalls { calls: c } => calls(c),
        };
        FIXED
            + match &self.kind {
                EventKind::AgentDelta { text, .. }
                | EventKind::FinalDelta { text }
                | EventKind::ReasoningDelta { text, .. } => text.len(),
                EventKind::Answer { answer: a } => answer(&a.content),
                EventKind::Vote { vote } => vote.reason.len(),
                EventKind::VoteIgnored { vote, why } => vote.reason.len() + why.len(),
                EventKind::TurnInvalid { message, .. }
                | EventKind::PresentationFailed { message, .. } => message.len(),
                EventKind::AgentFailed { error } => error.message.len(),
                EventKind::PostEvaluation {
                    reason,
                    instructions,
                    ..
                } => reason.len() + instructions.len(),
                EventKind::FinalToolCalls { calls: c } => calls(c),
                EventKind::SessionCompleted { summary } => {
                    summary.final_answer.len()
                        + calls(&summary.final_tool_calls)
                        + summary
                            .answers
                            .iter()
                            .map(|a| answer(&a.content))
                            .sum::<usize>()
                }
                EventKind::SessionFailed { error } => error.message.len(),
                _ => 0,
            }
    }
}

fn start_error(error: StartError) -> Refusal {
    match error {
        StartError::Provider {
            panel,
            agent,
            reason,
        } => Refusal::ConfigUnavailable {
            name: panel,
            reason: format!("agent '{agent}': {reason}"),
        },
        StartError::Unpriced {
            panel,
            agent,
            model,
            limit,
        } => Refusal::ConfigUnavailable {
            name: panel,
            reason: format!(
                "the session may spend at most ${limit} (its max_cost_usd, --max-session-cost-usd or what is left of the key's --max-key-cost-usd-per-day) but agent '{agent}' has no price for model '{model}', so the limit could not be kept: set its backend.pricing"
            ),
        },
    }
}
