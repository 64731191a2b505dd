//! The application, built once: the panels, the settings, the sessions (provider factory,
//! MCP tools, clock, records), the session permits and each key's day. Every edge (the HTTP
//! server, `massgen mcp`, `massgen eval`) stands on an [`App`] and asks it for sessions
//! with [`App::open`] ([`super::open`]); none builds a session itself, and none of this
//! knows an edge. [`App::shutdown`] drains the sessions and closes the records.

use std::sync::Arc;
use std::time::Duration;

use massgen_core::coordination::{Clock, SystemClock};
use massgen_tools::ToolRegistry;

use super::permits::Permits;
use super::spend::DailyQuota;
use super::store::RecordStore;
use super::{ProviderFactory, Sessions, SessionsConfig};
use crate::config::{Env, PanelCatalog, ServerSettings};

/// What an [`App`] is built from.
pub struct AppParts {
    pub catalog: PanelCatalog,
    pub settings: ServerSettings,
    pub providers: Arc<dyn ProviderFactory>,
    pub tools: Arc<ToolRegistry>,
    /// Environment lookup for `massgen/path:` configs.
    pub env: Arc<Env>,
    /// What sessions and `created` fields read the time from (tests pass their own).
    pub clock: Arc<dyn Clock>,
    /// Where session records go: memory, or a database opened with [`RecordStore::open`].
    pub records: RecordStore,
}

/// The application: see the module's comment.
pub struct App {
    catalog: Arc<PanelCatalog>,
    settings: Arc<ServerSettings>,
    env: Arc<Env>,
    sessions: Sessions,
    /// `--max-concurrent-sessions`, `--max-sessions-per-key`, the descriptor budget.
    pub(super) permits: Permits,
    /// `--max-key-cost-usd-per-day`.
    pub(super) quota: Option<DailyQuota>,
}

impl App {
    pub fn new(parts: AppParts) -> Self {
        let AppParts {
            catalog,
            settings,
            providers,
            tools,
            env,
            clock,
            records,
        } = parts;
        let production = &settings.production;
        let sessions = Sessions::new(SessionsConfig {
            providers,
            tools,
            clock,
            records,
            max_upstream_calls: production.max_upstream_calls,
            max_session_cost_usd: production.max_session_cost_usd,
            log_prompts: settings.debug,
            spend: Arc::default(),
        });
        Self {
            permits: Permits::new(
                production.max_concurrent_sessions,
                production.max_sessions_per_key,
            ),
            quota: production
                .max_key_cost_usd_per_day
                .map(|limit_usd| DailyQuota { limit_usd }),
            catalog: Arc::new(catalog),
            settings: Arc::new(settings),
            env,
            sessions,
        }
    }

    /// An app keeping its records in memory, on the system clock (`massgen mcp`, tests).
    pub fn in_memory(
        catalog: PanelCatalog,
        settings: ServerSettings,
        providers: Arc<dyn ProviderFactory>,
        tools: Arc<ToolRegistry>,
        env: Arc<Env>,
    ) -> Self {
        let records = RecordStore::memory(&settings.production);
        Self::new(AppParts {
            catalog,
            settings,
            providers,
            tools,
            env,
            clock: Arc::new(SystemClock),
            records,
        })
    }

    pub fn catalog(&self) -> &Arc<PanelCatalog> {
        &self.catalog
    }

    pub fn settings(&self) -> &Arc<ServerSettings> {
        &self.settings
    }

    pub fn env(&self) -> &Env {
        self.env.as_ref()
    }

    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    pub fn records(&self) -> &RecordStore {
        self.sessions.records()
    }

    /// What ages out only when someone looks: run once a minute.
    pub fn housekeeping(&self) {
        self.records().expire();
    }

    /// Lets the running sessions finish for up to `grace`, then cancels the rest.
    pub async fn drain(&self, grace: Duration) {
        let tasks = self.sessions.tasks();
        tasks.close();
        if tokio::time::timeout(grace, tasks.wait()).await.is_err() {
            tracing::warn!(
                grace_seconds = grace.as_secs(),
                "grace period over: cancelling running sessions"
            );
            self.sessions.cancel_all();
        }
    }

    /// Stops what still runs: cancels every session, lets the cancelled ones write their
    /// records (files) for up to 2 s, and commits what the records writer has not yet.
    pub async fn shutdown(&self) {
        self.sessions.cancel_all();
        let tasks = self.sessions.tasks();
        tasks.close();
        let _ = tokio::time::timeout(Duration::from_secs(2), tasks.wait()).await;
        self.records().close(Duration::from_secs(5)).await;
    }
}
