//! The application service: everything a coordination session runs on (the provider
//! factory, the MCP tool registry, the clock, instrumentation and the records), behind one
//! [`Sessions::start`]. A door parses its request, resolves the panel, calls `start` and
//! renders the events it gets back; it never builds a session itself.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use massgen_core::coordination::{
    Clock, OrchestratorOptions, Quorum, SessionAgent, SessionEvent, SessionInput, SessionSpec,
};
use massgen_tools::ToolRegistry;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::spend::SpendLedger;
use super::store::{RecordStore, SessionInfo};
use super::{Caller, ProviderFactory};
use crate::config::PanelConfig;
use crate::telemetry::{self, SessionTracker};

/// Events buffered between the engine and the forwarder before the engine waits.
const EVENT_BUFFER: usize = 256;

/// Why a session failed when the shutdown's grace period ended it (the engine only knows
/// it was cancelled; left alone, the record would say the client went away).
pub const SHUTDOWN_CANCELLED: &str = "the session was cancelled: the server is shutting down and its grace period for running sessions is over; send the request again";

/// What the service is built from; everything else it makes itself.
pub struct SessionsConfig {
    pub providers: Arc<dyn ProviderFactory>,
    pub tools: Arc<ToolRegistry>,
    pub clock: Arc<dyn Clock>,
    pub records: RecordStore,
    /// Upstream calls one session may make (`--max-upstream-calls`).
    pub max_upstream_calls: Option<u32>,
    /// USD one session may spend at most (`--max-session-cost-usd`).
    pub max_session_cost_usd: Option<f64>,
    /// Log the question at debug level (`--debug`).
    pub log_prompts: bool,
    /// What each owner spent today (fed by the records tee).
    pub spend: Arc<SpendLedger>,
}

/// Starts sessions and keeps track of them until they end.
pub struct Sessions {
    providers: Arc<dyn ProviderFactory>,
    tools: Arc<ToolRegistry>,
    clock: Arc<dyn Clock>,
    records: RecordStore,
    max_upstream_calls: Option<u32>,
    max_session_cost_usd: Option<f64>,
    log_prompts: bool,
    spend: Arc<SpendLedger>,
    /// Every running session (engine and forwarder), so shutdown can wait for them.
    tasks: TaskTracker,
    /// Cancels every session (shutdown past the grace period).
    cancel_all: CancellationToken,
}

/// One session to start.
pub struct SessionRequest {
    pub caller: Caller,
    /// What the record says about the request (model, door, question); `panel` is filled
    /// in by [`Sessions::start`].
    pub info: SessionInfo,
    pub input: SessionInput,
    /// Emit the agents' streamed text as events (`deliberation: full`).
    pub stream_agent_text: bool,
    /// What the request changes of the panel's orchestrator options.
    pub overrides: Overrides,
    /// The request replaced the panel's models (`massgen/model:<name>`): metrics do not
    /// take that name as a label value.
    pub model_chosen: bool,
}

/// What a request may change of the panel's `orchestrator:` options (the `massgen`
/// extension, the same on every door).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// `massgen.voting_quorum`.
    pub voting_quorum: Option<Quorum>,
    /// `massgen.max_cost_usd`: lowers the panel's limit, never raises it.
    pub max_cost_usd: Option<f64>,
    /// `massgen.models`: the panel's agents, one per `provider/model` (empty: the panel's
    /// own). The door checks them against what the operator allows before the session.
    pub models: Vec<String>,
    /// When the answer is due (the MCP door's `deadline_seconds`), presentation included:
    /// three quarters of it for the deliberation (then the best answer so far is
    /// presented, as at the session's own timeout) and the rest for the presentation
    /// (which, late, falls back to the winning answer as it stands). Lowers the panel's
    /// timeouts, never raises them.
    pub deadline: Option<std::time::Duration>,
}

impl Overrides {
    pub fn apply(&self, options: &mut OrchestratorOptions) {
        if let Some(q) = self.voting_quorum {
            options.voting_quorum = q;
        }
        options.max_cost_usd = smaller(options.max_cost_usd, self.max_cost_usd);
        if let Some(deadline) = self.deadline {
            let presenting = deadline / 4;
            options.session_timeout = options.session_timeout.min(deadline - presenting);
            options.presentation_timeout = options.presentation_timeout.min(presenting);
        }
    }
}

/// The smaller of two optional limits (`None`: no limit).
fn smaller(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A running session as its door sees it.
pub struct Started {
    pub id: Arc<str>,
    /// Every event, the last one `session_completed` or `session_failed`, straight from
    /// the engine: the door's forwarder ([`super::forward`]) hands each to `observer`.
    pub events: mpsc::Receiver<Box<SessionEvent>>,
    /// The session's record, metrics and spend.
    pub observer: super::observer::SessionObserver,
    /// Dropping it (client gone, handler dropped) cancels every upstream call at once.
    pub cancel: DropGuard,
    /// A panel of one: a plain call, whose events are the model's own (no deliberation).
    pub plain: bool,
}

/// Why a session could not start.
#[derive(Debug, Clone, PartialEq)]
pub enum StartError {
    /// An agent's backend has no provider (unknown type, bad settings).
    Provider {
        panel: String,
        agent: String,
        reason: String,
    },
    /// The session has a cost limit and an agent's model has no price, so the limit could
    /// not be kept.
    Unpriced {
        panel: String,
        agent: String,
        model: String,
        limit: f64,
    },
}

impl Sessions {
    pub fn new(config: SessionsConfig) -> Self {
        Self {
            providers: config.providers,
            tools: config.tools,
            clock: config.clock,
            records: config.records,
            max_upstream_calls: config.max_upstream_calls,
            max_session_cost_usd: config.max_session_cost_usd,
            log_prompts: config.log_prompts,
            spend: config.spend,
            tasks: TaskTracker::new(),
            cancel_all: CancellationToken::new(),
        }
    }

    /// Builds the panel's agents (instrumented providers, toolboxes), spawns the engine and
    /// the records tee, and returns the events.
    pub fn start(
        &self,
        panel: &PanelConfig,
        request: SessionRequest,
    ) -> Result<Started, StartError> {
        let mut options = panel.orchestrator.clone();
        request.overrides.apply(&mut options);
        options.max_cost_usd = smaller(options.max_cost_usd, self.max_session_cost_usd);
        if let Some(limit) = options.max_cost_usd
            && let Some(agent) = panel.agents.iter().find(|a| a.backend.price.is_none())
        {
            return Err(StartError::Unpriced {
                panel: panel.name.clone(),
                agent: agent.id.clone(),
                model: agent.backend.model.clone(),
                limit,
            });
        }
        let id: Arc<str> = format!("sess_{}", uuid::Uuid::now_v7().simple()).into();
        let tracker = SessionTracker::new(id.clone(), self.max_upstream_calls);
        let mut agents = Vec::with_capacity(panel.agents.len());
        for agent in &panel.agents {
            let provider = self
                .providers
                .build(&agent.backend, &panel.call_policy)
                .map_err(|reason| StartError::Provider {
                    panel: panel.name.clone(),
                    agent: agent.id.clone(),
                    reason,
                })?;
            let b = &agent.backend;
            let meter =
                telemetry::CallMeter::new(&b.backend_type, &b.model, b.price, request.model_chosen);
            agents.push(SessionAgent {
                id: agent.id.clone(),
                system_message: agent.system_message.clone(),
                provider: telemetry::instrument(provider, &agent.id, &tracker, meter),
                tools: super::agent_tools(&self.tools, agent),
                price: b.price,
                vision: b.vision,
            });
        }
        if self.log_prompts {
            tracing::debug!(session_id = %id, question = %request.input.question, "session request");
        }
        tracing::info!(
            session_id = %id,
            config = %panel.name,
            agents = panel.agents.len(),
            "session started"
        );
        let spec = SessionSpec {
            session_id: id.clone(),
            agents,
            options,
            input: request.input,
            stream_agent_text: request.stream_agent_text,
        };
        let plain = massgen_core::coordination::is_plain(&spec);

        let (tx, engine_rx) = mpsc::channel(EVENT_BUFFER);
        // A child of the service's token: shutdown past the grace period cancels it too.
        let cancel = self.cancel_all.child_token();
        let span = tracing::info_span!(
            "session",
            session_id = %id,
            config = %panel.name,
            "otel.name" = "massgen.session",
            "gen_ai.operation.name" = "invoke_agent",
            "gen_ai.agent.name" = "massgen",
            "massgen.session_id" = %id,
        );
        self.tasks.spawn(
            massgen_core::coordination::run_session(spec, tx, cancel.clone(), self.clock.clone())
                .instrument(span),
        );
        let info = SessionInfo {
            panel: panel.name.clone(),
            ..request.info
        };
        let start = super::observer::SessionStart {
            record: self.records.insert_with(id.clone(), request.caller, info),
            tracker,
            files_dir: self.records.dir.clone(),
            shutdown: self.cancel_all.clone(),
            spend: self.spend.clone(),
        };
        Ok(Started {
            id,
            events: engine_rx,
            observer: super::observer::SessionObserver::new(start),
            cancel: cancel.drop_guard(),
            plain,
        })
    }

    pub fn records(&self) -> &RecordStore {
        &self.records
    }

    /// What each owner spent today (`--max-key-cost-usd-per-day`).
    pub fn spend(&self) -> &SpendLedger {
        &self.spend
    }

    /// The running sessions (shutdown closes and waits for it).
    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// Cancels every running session.
    pub fn cancel_all(&self) {
        self.cancel_all.cancel();
    }

    /// Whether [`Sessions::cancel_all`] ran: a session cancelled now was cancelled by the
    /// shutdown, not by its client.
    pub fn shutting_down(&self) -> bool {
        self.cancel_all.is_cancelled()
    }

    /// Unix time in milliseconds, from the clock seam.
    pub fn now_ms(&self) -> u64 {
        unix_millis(self.clock.now())
    }

    /// Unix time in whole seconds, from the clock seam (`created` fields).
    pub fn now_secs(&self) -> u64 {
        self.now_ms() / 1000
    }
}

fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}
