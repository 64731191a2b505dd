//! The process's file descriptors (issue 26): what a session needs, and a 503 before any
//! upstream call when they are short, instead of a session that fails half-way on "Too
//! many open files".
//!
//! A client connection holds one descriptor, and so does each upstream call over HTTP/1.1
//! (its own TCP connection). The open-file limit is split once, at start-up ([`Layout`]):
//!
//! - a reserve for what the process holds anyway (standard streams, the runtime, the
//!   listener, the records database, MCP servers, record files, idle upstream connections);
//! - `--max-connections` for client connections, clamped to fit;
//! - the rest for sessions: each takes, at admission and before any upstream call, one
//!   descriptor per agent that can hold an upstream connection at once, and gives them back
//!   when its coordination ends. One that does not fit is refused (503).
//!
//! Connections and sessions do not compete for one pool: connections keep their share
//! whether open or not. A connection that was accepted can then always be answered, its
//! session admitted or refused with a 503; had sessions been free to take that share, a
//! burst would leave no descriptor for the next connection itself, and a connection closed
//! at once is no clear 503. What idle connection slots leave unused is the price, sized by
//! the operator with `--max-connections`.
//!
//! The limit is the process's, so the budget is too: `serve` installs one ([`install`]).
//! Servers built in-process (tests, `massgen mcp`) have none and run as before.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::config::{BackendConfig, PanelCatalog, PanelConfig, ServerSettings};
use crate::telemetry::metrics;

/// What the process holds whatever its load: standard streams, the runtime (epoll, its
/// waker, the signal pipe), the listener, the records database (SQLite: 4 connections of
/// up to 3 files and the lock file; PostgreSQL: 8 connections and the notification
/// listener), the OTLP exporter's connection, config files read per request
/// (`massgen/path:`, one per worker thread at most), and the descriptors of refused
/// connections while they are answered (16 at most, `server::refuse`).
/// Name lookups need none of their own: a call resolves its host before it connects, so
/// the lookup's socket or file is gone before the connection that the agent's descriptor
/// pays for exists.
pub const BASE_RESERVE: u64 = 64;

/// Per MCP server the panels name: a stdio server's three pipes and its child's pidfd, or
/// a Streamable HTTP server's session stream and the request beside it.
pub const PER_MCP_SERVER: u64 = 4;

/// With `--records-dir`, each ended session's files are written on tokio's blocking pool
/// (512 threads at most), one file open at a time per thread, after the session gave its
/// descriptors back.
pub const RECORD_WRITERS: u64 = 512;

/// Idle connections the upstream client keeps per host (its `pool_max_idle_per_host`, set
/// in massgen-providers. client).
pub const IDLE_PER_HOST: u64 = massgen_providers::MAX_IDLE_PER_HOST as u64;

/// The descriptors one upstream call of `backend` holds of its own: 1, its own connection,
/// as every call over HTTP/1.1 has (and over TLS, where ALPN may yet pick HTTP/2, 1 is the
/// safe count). A backend marked as speaking HTTP/2 with prior knowledge (h2c) multiplexes
/// its calls over one connection per host, which the reserve already counts among that
/// host's pooled ones ([`IDLE_PER_HOST`]); this is where it answers 0.
pub fn descriptors_per_call(backend: &BackendConfig) -> usize {
    match backend.http {
        massgen_providers::UpstreamHttp::H2c => 0,
        massgen_providers::UpstreamHttp::Negotiated => 1,
    }
}

/// What the process holds besides client connections and sessions' calls, and the
/// `--max-connections` it serves: what the open-file limit is split by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Distinct upstream hosts (scheme, host, port) of the configured agents: the pool
    /// keeps idle connections to each.
    pub upstream_hosts: u64,
    pub mcp_servers: u64,
    /// `--records-dir` is set ([`RECORD_WRITERS`]).
    pub record_files: bool,
    /// The upstream is served by this process (`--demo`): each upstream connection is two
    /// descriptors, one for each end.
    pub upstream_in_process: bool,
    /// Some configured agent holds a connection per call (HTTP/1.1; not h2c).
    pub calls_hold_descriptors: bool,
    pub max_connections: usize,
}

impl Layout {
    /// The layout of a server with `catalog` and `settings`. Hosts are counted from the
    /// configured panels: `massgen/model:` and request panels use their providers, while a
    /// `massgen/path:` panel on another host is not counted (docs/production.md says so).
    pub fn of(catalog: &PanelCatalog, settings: &ServerSettings, demo: bool) -> Self {
        let agents = || {
            catalog
                .default
                .iter()
                .chain(catalog.named.values())
                .flat_map(|panel| panel.agents.iter())
        };
        let hosts: BTreeSet<String> = agents()
            .map(|agent| host_of(&agent.backend.base_url))
            .collect();
        Self {
            upstream_hosts: hosts.len() as u64,
            mcp_servers: super::servers_of(catalog).len() as u64,
            record_files: settings.production.records_dir.is_some(),
            upstream_in_process: demo,
            calls_hold_descriptors: agents().any(|a| descriptors_per_call(&a.backend) > 0),
            max_connections: settings.production.max_connections,
        }
    }

    /// Descriptors of the process per upstream connection (2 when it serves the upstream).
    fn per_connection(&self) -> u64 {
        u64::from(self.upstream_in_process) + 1
    }

    /// How the open-file `limit` is split.
    ///
    /// Idle upstream connections are the one part of the reserve that grows with the
    /// limit: up to [`IDLE_PER_HOST`] per host. Each of them was opened by a call when no
    /// idle one to its host was left, so a host never has more connections than its most
    /// calls in flight at once, which the sessions' share bounds. The idle reserve is
    /// therefore `hosts × min(IDLE_PER_HOST, sessions)`, and the sessions' share the most
    /// that, with it, fits in what is left: on a small limit, idle connections and
    /// sessions halve it (one host) rather than the pool taking it all.
    pub fn split(&self, limit: u64) -> Split {
        let fixed = BASE_RESERVE
            + PER_MCP_SERVER * self.mcp_servers
            + if self.record_files { RECORD_WRITERS } else { 0 };
        let usable = limit.saturating_sub(fixed);
        let wanted = u64::try_from(self.max_connections).unwrap_or(u64::MAX);
        let idle_cap = IDLE_PER_HOST * self.per_connection();
        let hosts = self.upstream_hosts;
        // At most half of what is usable, so sessions keep the other half; when every
        // configured agent multiplexes its calls (h2c), sessions hold none of their own
        // and connections may have all but the idle pools (a request's own panel on an
        // HTTP/1.1 host then draws on what is left, or gets a 503).
        let connections = if self.calls_hold_descriptors {
            wanted.min(usable / 2)
        } else {
            wanted.min(usable.saturating_sub(hosts.saturating_mul(idle_cap)))
        };
        let left = usable - connections;
        let beside_full_pools = left.saturating_sub(hosts.saturating_mul(idle_cap));
        let sessions = if beside_full_pools >= idle_cap {
            beside_full_pools
        } else {
            left / (hosts + 1)
        };
        Split {
            limit,
            reserve: limit - (connections + sessions),
            connections: usize::try_from(connections).unwrap_or(usize::MAX),
            connections_clamped: connections < wanted,
            sessions: usize::try_from(sessions).unwrap_or(usize::MAX),
        }
    }
}

/// `scheme://host:port` of a base URL, the upstream client's pool key; the URL as it
/// stands when it does not parse (counted as a host of its own, which errs on the safe
/// side).
fn host_of(base_url: &str) -> String {
    match reqwest::Url::parse(base_url) {
        Ok(url) => format!(
            "{}://{}:{}",
            url.scheme(),
            url.host_str().unwrap_or_default(),
            url.port_or_known_default().unwrap_or_default()
        ),
        Err(_) => base_url.to_string(),
    }
}

/// The open-file limit, split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// The soft `RLIMIT_NOFILE`.
    pub limit: u64,
    /// Neither connections' nor sessions': the process's own and idle upstream connections.
    pub reserve: u64,
    /// Client connections at once (`--max-connections`, clamped).
    pub connections: usize,
    /// `--max-connections` was more than fits.
    pub connections_clamped: bool,
    /// What running sessions may hold for their upstream calls.
    pub sessions: usize,
}

/// The sessions' share of the open-file limit.
pub struct Budget {
    split: Split,
    per_connection: usize,
    held: AtomicUsize,
    /// Updates the process's gauges (the installed budget only).
    report: bool,
    /// A warning was logged on the first refusal.
    warned: AtomicBool,
}

/// A session's descriptors, given back when dropped.
pub struct Descriptors {
    budget: Arc<Budget>,
    count: usize,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // Only what was taken comes back, so `held` never goes below 0.
        self.budget.held.fetch_sub(self.count, Ordering::AcqRel);
        self.budget.gauge(-self.count.cast_signed());
    }
}

impl Budget {
    pub fn new(layout: &Layout, limit: u64) -> Arc<Self> {
        Self::build(layout, limit, false)
    }

    fn build(layout: &Layout, limit: u64, report: bool) -> Arc<Self> {
        Arc::new(Self {
            split: layout.split(limit),
            per_connection: usize::from(layout.upstream_in_process) + 1,
            held: AtomicUsize::new(0),
            report,
            warned: AtomicBool::new(false),
        })
    }

    pub fn split(&self) -> Split {
        self.split
    }

    /// Descriptors running sessions hold now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// The descriptors a session of `panel` holds at most at once: one upstream
    /// connection per agent (an agent's calls follow one another; the presentation is one
    /// of the winner's calls).
    pub fn session_need(&self, panel: &PanelConfig) -> usize {
        let calls: usize = panel
            .agents
            .iter()
            .map(|agent| descriptors_per_call(&agent.backend))
            .sum();
        calls * self.per_connection
    }

    /// `count` descriptors, or `None` when they do not fit (nothing is taken then).
    pub fn try_take(self: &Arc<Self>, count: usize) -> Option<Descriptors> {
        let total = self.split.sessions;
        let mut held = self.held.load(Ordering::Acquire);
        loop {
            let after = held.checked_add(count).filter(|&n| n <= total)?;
            match self
                .held
                .compare_exchange_weak(held, after, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => held = now,
            }
        }
        self.gauge(count.cast_signed());
        Some(Descriptors {
            budget: Arc::clone(self),
            count,
        })
    }

    /// Logs the first refusal: the 503s that follow are counted in the rejected metric.
    pub fn warn_once(&self, need: usize) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                limit = self.split.limit,
                sessions_budget = self.split.sessions,
                need,
                "the open-file limit is reached: refusing sessions with 503 until running ones end (raise `ulimit -n`, or serve HTTP/2 upstreams; massgen_rejected_requests_total{{reason=\"descriptors\"}} counts them)"
            );
        }
    }

    fn gauge(&self, by: isize) {
        if self.report
            && let Some(m) = metrics()
        {
            m.descriptors_reserved.add(i64::try_from(by).unwrap_or(0));
        }
    }
}

static INSTALLED: OnceLock<Arc<Budget>> = OnceLock::new();

/// The process's budget, once `serve` installed it.
pub fn installed() -> Option<Arc<Budget>> {
    INSTALLED.get().cloned()
}

/// Installs the budget of `layout` under the open-file `limit` for the whole process (the
/// first call wins), logs the split and sets the gauges. Before the server state is built:
/// its session permits and its accept loop read it then.
pub fn install(layout: &Layout, limit: u64, default_panel: Option<&PanelConfig>) {
    let budget = Budget::build(layout, limit, true);
    let split = budget.split();
    let need = default_panel.map(|p| budget.session_need(p));
    if INSTALLED.set(budget).is_err() {
        return;
    }
    if let Some(m) = metrics() {
        m.descriptor_limit
            .set(i64::try_from(limit).unwrap_or(i64::MAX));
        m.descriptor_session_budget
            .set(i64::try_from(split.sessions).unwrap_or(i64::MAX));
    }
    tracing::info!(
        limit,
        reserve = split.reserve,
        connections = split.connections,
        sessions = split.sessions,
        upstream_hosts = layout.upstream_hosts,
        default_panel_session_needs = need,
        "open files: {limit} = {} reserved (the process, MCP servers, record files, idle upstream connections) + {} for client connections + {} for sessions' upstream calls (one per agent each)",
        split.reserve,
        split.connections,
        split.sessions
    );
    if split.connections_clamped {
        tracing::warn!(
            max_connections = layout.max_connections,
            clamped_to = split.connections,
            "--max-connections is more than the open-file limit {limit} holds: clamped so sessions keep half (raise `ulimit -n` to serve more)"
        );
    }
    if let Some(need) = need.filter(|&n| n > split.sessions) {
        tracing::warn!(
            need,
            sessions = split.sessions,
            "the open-file limit {limit} leaves too few descriptors for one session of the default panel: every one will be refused with 503 (raise `ulimit -n`)"
        );
    }
}

/// The soft open-file limit after raising it to the hard one (what Go and nginx-style
/// servers do: desktops often start at a soft 1024), or `None` where the platform has no
/// such limit. A failed raise keeps the current limit, with a warning.
pub fn raise_open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use rlimit::Resource;
        if !Resource::NOFILE.is_supported() {
            return None;
        }
        let (before, hard) = match Resource::NOFILE.get() {
            Ok(limits) => limits,
            Err(e) => {
                tracing::warn!("cannot read the open-file limit: {e}; no descriptor budget");
                return None;
            }
        };
        let soft = match rlimit::increase_nofile_limit(u64::MAX) {
            Ok(soft) => soft,
            Err(e) => {
                tracing::warn!(
                    "cannot raise the open-file limit from {before} to {hard}: {e}; keeping {before}"
                );
                before
            }
        };
        tracing::info!(before, soft, hard, "open-file limit");
        Some(soft)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(hosts: u64, max_connections: usize) -> Layout {
        Layout {
            upstream_hosts: hosts,
            mcp_servers: 0,
            record_files: false,
            upstream_in_process: false,
            calls_hold_descriptors: true,
            max_connections,
        }
    }

    fn panel() -> PanelConfig {
        crate::config::demo_panel("http://127.0.0.1:9/v1")
    }

    #[test]
    fn a_large_limit_keeps_full_pools_and_the_asked_connections() {
        let split = layout(2, 4096).split(20_000);
        assert_eq!(split.connections, 4096);
        assert!(!split.connections_clamped);
        assert_eq!(split.sessions, 20_000 - 64 - 4096 - 2 * 256);
        assert_eq!(split.reserve, 64 + 2 * 256);
    }

    #[test]
    fn a_small_limit_halves_connections_then_shares_with_the_idle_pool() {
        // 160 − 64 = 96: 48 for connections (4096 asked), 48 left for one host's idle
        // connections and sessions, each at most what the other holds.
        let split = layout(1, 4096).split(160);
        assert_eq!(split.connections, 48);
        assert!(split.connections_clamped);
        assert_eq!(split.sessions, 24);
        assert_eq!(split.reserve, 160 - 48 - 24);
        // Everything adds up, whatever the limit: never more than it.
        for limit in [0, 1, 63, 64, 65, 200, 1024, 5_000, 1 << 20, u64::MAX] {
            for hosts in [0, 1, 3, 40] {
                let s = layout(hosts, 4096).split(limit);
                let used = s.reserve + s.connections as u64 + s.sessions as u64;
                assert_eq!(used, limit, "{limit} {hosts}: {s:?}");
                let idle = hosts * (s.sessions as u64).min(IDLE_PER_HOST);
                assert!(s.reserve >= idle.min(limit), "{limit} {hosts}: {s:?}");
            }
        }
    }

    #[test]
    fn multiplexed_calls_leave_connections_all_but_the_idle_pools() {
        let h2c = Layout {
            calls_hold_descriptors: false,
            ..layout(1, 12_000)
        };
        let split = h2c.split(20_000);
        assert_eq!(split.connections, 12_000, "not halved: sessions need none");
        assert!(!split.connections_clamped);
        let tight = h2c.split(10_000);
        assert_eq!(tight.connections, 10_000 - 64 - 256);
        assert!(tight.connections_clamped);
        assert_eq!(
            tight.reserve + tight.connections as u64 + tight.sessions as u64,
            10_000
        );
    }

    #[test]
    fn the_fixed_reserve_grows_with_mcp_servers_record_files_and_an_in_process_upstream() {
        let plain = layout(0, 10).split(2_000).sessions;
        let with = Layout {
            mcp_servers: 3,
            record_files: true,
            ..layout(0, 10)
        }
        .split(2_000)
        .sessions;
        assert_eq!(
            plain - with,
            3 * PER_MCP_SERVER as usize + RECORD_WRITERS as usize
        );
        let demo = Layout {
            upstream_in_process: true,
            ..layout(1, 10)
        };
        assert_eq!(demo.split(10_000).sessions, 10_000 - 64 - 10 - 2 * 256);
        let budget = Budget::new(&demo, 10_000);
        assert_eq!(budget.session_need(&panel()), 6, "two ends per connection");
    }

    #[test]
    fn hosts_are_counted_by_scheme_host_and_port() {
        let mut catalog = PanelCatalog::default();
        let mut a = panel();
        a.agents[1].backend.base_url = "http://127.0.0.1:9/other/v1".into();
        a.agents[2].backend.base_url = "https://api.example.com/v1".into();
        catalog.default = Some(Arc::new(a));
        let mut b = panel();
        b.agents[0].backend.base_url = "https://api.example.com:443/v2".into();
        catalog.named.insert("b".into(), Arc::new(b));
        let layout = Layout::of(&catalog, &ServerSettings::default(), false);
        assert_eq!(layout.upstream_hosts, 2);
        assert_eq!(layout.max_connections, 4096);
        assert!(!layout.record_files && !layout.upstream_in_process);
    }

    #[test]
    fn sessions_take_one_per_agent_and_give_them_back() {
        // 64 + 10 connections + 1 host: 200 − 74 = 126, beside a full pool not even one
        // host's 256, so the pool and the sessions share it: 63 each.
        let budget = Budget::new(&layout(1, 10), 200);
        assert_eq!(budget.split().sessions, 63);
        let need = budget.session_need(&panel());
        assert_eq!(need, 3);
        let held: Vec<_> = (0..21).map(|_| budget.try_take(need).unwrap()).collect();
        assert_eq!(budget.held(), 63);
        assert!(budget.try_take(need).is_none(), "short: refused");
        assert!(budget.try_take(1).is_none());
        assert_eq!(budget.held(), 63, "a refusal takes nothing");
        assert!(
            budget.try_take(0).is_some(),
            "a session without HTTP/1.1 calls fits"
        );
        drop(held);
        assert_eq!(budget.held(), 0);
        assert!(budget.try_take(63).is_some());
        assert!(budget.try_take(usize::MAX).is_none(), "no overflow");
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn concurrent_takers_never_hold_more_than_the_budget() {
        let budget = Budget::new(&layout(0, 0), 64 + 40);
        assert_eq!(budget.split().sessions, 40);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..2_000 {
                        if let Some(taken) = budget.try_take(3) {
                            assert!(budget.held() <= 40);
                            drop(taken);
                        }
                    }
                });
            }
        });
        assert_eq!(budget.held(), 0);
    }
}
