//! Production settings of `massgen serve`: access control, limits, session records and
//! connection timeouts. They come from flags and `MASSGEN_SERVER_*` variables (see
//! docs/production.md); the defaults keep the server open and unlimited except
//! for bounded records and a header timeout.

use std::path::PathBuf;
use std::time::Duration;

use massgen_core::Secret;

/// `--max-buffered-body-bytes` unless given (raised to `--max-body-bytes` when that is
/// larger, so one largest body always fits).
pub const DEFAULT_BUFFERED_BODY_BYTES: usize = 32 * 1024 * 1024;

/// `--max-stored-bytes-per-key` unless given: 1 GiB holds some 20,000 turns of a coding
/// agent (tens of KB of tool output and answer each) within the database's 30 days of
/// retention, while a disk of a few GiB per key is enough for any key's worst.
pub const DEFAULT_STORED_BYTES_PER_KEY: u64 = 1024 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq)]
pub struct ProductionSettings {
    /// Accepted bearer keys; empty means no authentication.
    pub api_keys: Vec<Secret>,
    /// `/metrics` needs a key too (only meaningful with keys).
    pub protect_metrics: bool,
    /// Allowed CORS origins; empty means no CORS headers at all, `*` any origin.
    pub cors_origins: Vec<String>,
    /// Host names (`Host`) the server answers to besides IP addresses and `localhost`:
    /// `name`, `*.domain`, `*`; empty means loopback names only when the server is bound to
    /// a loopback address, any name otherwise.
    pub allowed_hosts: Vec<String>,
    /// Sessions running at once; more are answered 429.
    pub max_concurrent_sessions: Option<usize>,
    /// Sessions one API key (the whole server, without keys) runs at once; more are
    /// answered 429.
    pub max_sessions_per_key: Option<usize>,
    /// Requests per minute per API key (per server when there are no keys).
    pub rate_limit_per_minute: Option<u32>,
    /// Requests a key may send at once before the per-minute rate applies.
    pub rate_limit_burst: Option<u32>,
    /// Failed authentications per minute per client address (only with keys); over it
    /// the answer is 429 instead of 401.
    pub auth_failures_per_minute: u32,
    /// Upstream calls one session may make (every agent turn, retry attempts excluded).
    pub max_upstream_calls: Option<u32>,
    /// USD one session may spend at most; a panel's or request's limit may only be lower.
    pub max_session_cost_usd: Option<f64>,
    /// USD one API key (the whole server, without keys) may spend per UTC day; past it new
    /// sessions are refused with 429 `insufficient_quota`.
    pub max_key_cost_usd_per_day: Option<f64>,
    /// Time a client has to send the request headers (HTTP/1).
    pub header_read_timeout: Duration,
    /// Time a client has to send a whole request body.
    pub body_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed (HTTP/1 and 2).
    pub idle_timeout: Duration,
    /// Open connections at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// Open connections from one client address at once; more from it are closed as soon
    /// as they are accepted (default: half of `max_connections`, so one address leaves
    /// the other half to everybody else).
    pub max_connections_per_address: usize,
    /// Request body bytes all requests together may hold (from the first byte read until
    /// the response is done); a request that would go over waits briefly, then gets 503.
    pub max_buffered_body_bytes: usize,
    /// Bytes of stored Responses API responses one API key (the whole server, without
    /// keys) may hold; past it a `store: true` request is answered 429.
    pub max_stored_bytes_per_key: u64,
    /// A streaming client whose buffer stays full this long is dropped as a disconnect.
    pub client_stall_timeout: Duration,
    /// Readers of one session's `/events` at once; more are answered 429.
    pub max_subscribers_per_session: usize,
    /// Readers of `/events` one API key (the whole server, without keys) holds at once.
    pub max_subscribers_per_key: usize,
    /// Session records kept in memory (oldest dropped first).
    pub records_max_sessions: usize,
    /// Age after which a finished session's record is dropped.
    pub records_max_age: Duration,
    /// Also write each finished session in MassGen's log layout under this directory.
    pub records_dir: Option<PathBuf>,
    /// Where records are kept (`--records-db`).
    pub records_db: RecordsDb,
    /// How often this process says it is alive in the records database.
    pub records_heartbeat: Duration,
    /// A `running` session whose process has not said so for this long is `interrupted`.
    pub records_interrupted_after: Duration,
}

/// Where session records are kept. The URL of a database may hold a password: it stays a
/// [`Secret`], and messages use [`RecordsDb::describe`].
#[derive(Debug, Clone, PartialEq, Default)]
pub enum RecordsDb {
    /// In this process only, bounded (today's behaviour; in-process default).
    #[default]
    Memory,
    Sqlite(PathBuf),
    Postgres(Secret),
    /// The default (SQLite under XDG_DATA_HOME or HOME) with neither variable set:
    /// opening it fails, naming the flag.
    Unplaced,
}

impl RecordsDb {
    /// `memory`, `sqlite://PATH` (relative, or absolute as `sqlite:///abs`),
    /// `postgres://…` or `postgresql://…`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text == "memory" {
            return Ok(Self::Memory);
        }
        if let Some(path) = text.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err("sqlite:// needs a file path (sqlite://records.db, sqlite:///var/lib/massgen/records.db)".into());
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Self::Postgres(Secret::new(text)));
        }
        Err("expected memory, sqlite://PATH or postgres://USER:PASSWORD@HOST:PORT/DATABASE".into())
    }

    /// The laptop default: `$XDG_DATA_HOME/massgen/records.db`, else
    /// `~/.local/share/massgen/records.db`; `None` without either variable.
    pub fn default_sqlite(xdg_data_home: Option<&str>, home: Option<&str>) -> Option<Self> {
        let base = match (
            xdg_data_home.filter(|v| !v.is_empty()),
            home.filter(|v| !v.is_empty()),
        ) {
            (Some(xdg), _) => PathBuf::from(xdg),
            (None, Some(home)) => PathBuf::from(home).join(".local/share"),
            (None, None) => return None,
        };
        Some(Self::Sqlite(base.join("massgen").join("records.db")))
    }

    pub fn engine(&self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Sqlite(_) | Self::Unplaced => "sqlite",
            Self::Postgres(_) => "postgres",
        }
    }

    /// For logs and errors: the SQLite path, or PostgreSQL's host, port and database,
    /// never the user's password.
    pub fn describe(&self) -> String {
        match self {
            Self::Memory => "memory".into(),
            Self::Unplaced => "the default SQLite file".into(),
            Self::Sqlite(path) => format!("sqlite://{}", path.display()),
            Self::Postgres(url) => match reqwest::Url::parse(url.expose()) {
                Ok(u) => format!(
                    "postgres://{}:{}{}",
                    u.host_str().unwrap_or(""),
                    u.port().unwrap_or(5432),
                    u.path()
                ),
                Err(_) => "postgres://(unparsable URL)".into(),
            },
        }
    }
}

impl Default for ProductionSettings {
    fn default() -> Self {
        Self {
            api_keys: Vec::new(),
            protect_metrics: false,
            cors_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_concurrent_sessions: None,
            max_sessions_per_key: None,
            rate_limit_per_minute: None,
            rate_limit_burst: None,
            auth_failures_per_minute: 30,
            max_upstream_calls: None,
            max_session_cost_usd: None,
            max_key_cost_usd_per_day: None,
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            max_connections: 4096,
            max_connections_per_address: 2048,
            max_buffered_body_bytes: DEFAULT_BUFFERED_BODY_BYTES,
            max_stored_bytes_per_key: DEFAULT_STORED_BYTES_PER_KEY,
            client_stall_timeout: Duration::from_secs(30),
            max_subscribers_per_session: 16,
            max_subscribers_per_key: 64,
            records_max_sessions: 1000,
            records_max_age: Duration::from_secs(3600),
            records_dir: None,
            records_db: RecordsDb::Memory,
            records_heartbeat: Duration::from_secs(10),
            records_interrupted_after: Duration::from_secs(60),
        }
    }
}
