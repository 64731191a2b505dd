//! Command line: `massgen serve` and `massgen mock-upstream`.
//!
//! Flags win over `MASSGEN_SERVER_*` variables (clap's `env`), which win over the defaults
//! [`resolve_serve`] applies.
//! Stdout carries exactly one `… listening on http://ADDR` line (black-box tests read it);
//! logs go to stderr. Exit codes: 0 ok, 1 runtime failure, 2 usage or config error.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use massgen_tools::ToolRegistry;
use massgen_tools::rmcp_client::RmcpConnector;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::app::HttpProviders;
use crate::config::{
    AUTO_SOURCE, ConfigError, DeliberationFormat, Env, PanelCatalog, PanelConfig,
    ProductionSettings, RecordsDb, Secret, ServerSettings, auto_panel, auto_panel_yaml,
    check_panel, demo_panel, find_default_config, load_catalog, process_env,
};
use crate::server::AppState;

#[derive(Debug, Parser)]
#[command(
    name = "massgen",
    version,
    about = "Several LLMs answer together behind an OpenAI-compatible Chat Completions API"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once at start-up: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the OpenAI-compatible API (POST /v1/chat/completions, GET /v1/models).
    Serve(ServeArgs),
    /// Run the simulated OpenAI-compatible model server (behaviour chosen by model name).
    MockUpstream(MockUpstreamArgs),
    /// Exit 0 when a server's /health answers 200 (container health checks; no curl needed).
    Healthcheck(HealthcheckArgs),
    /// Check panel configs without serving: one line per problem, warnings listed; exit 1
    /// when a config has an error.
    CheckConfig(CheckConfigArgs),
}

#[derive(Debug, Clone, Args)]
pub struct CheckConfigArgs {
    /// Panel config files (YAML)
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct HealthcheckArgs {
    /// Health URL [default: http://127.0.0.1:$MASSGEN_SERVER_PORT/health, port 4000]
    #[arg(long)]
    pub url: Option<String>,
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub timeout_seconds: u64,
}

#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// Address to bind [default: 127.0.0.1]
    #[arg(long, env = "MASSGEN_SERVER_HOST")]
    pub host: Option<String>,
    /// Port to bind, 0 for any free port [default: 4000]
    #[arg(long, env = "MASSGEN_SERVER_PORT", value_parser = Number::<u16>::new())]
    pub port: Option<u16>,
    /// Default panel config (YAML) [default: .massgen/config.yaml, then
    /// ~/.config/massgen/config.yaml, then an automatic panel from the API keys present]
    #[arg(long, value_name = "FILE", env = "MASSGEN_SERVER_DEFAULT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory of named panel configs, served as `massgen/<name>`
    #[arg(long, value_name = "DIR", env = "MASSGEN_SERVER_CONFIGS_DIR")]
    pub configs_dir: Option<PathBuf>,
    /// Run three simulated agents on a built-in mock upstream (no API keys needed)
    #[arg(long)]
    pub demo: bool,
    /// Print the default panel as YAML, ready to save as a config, and exit
    #[arg(long)]
    pub print_config: bool,
    /// Allow `massgen/path:<file>` models: `.yaml`/`.yml` files under --config-paths-root
    /// (else --configs-dir), never where the server writes records
    #[arg(long, env = "MASSGEN_SERVER_ALLOW_CONFIG_PATHS", value_parser = Switch)]
    pub allow_config_paths: bool,
    /// The folder `massgen/path:` files must be in [default: --configs-dir]
    #[arg(long, value_name = "DIR", env = "MASSGEN_SERVER_CONFIG_PATHS_ROOT")]
    pub config_paths_root: Option<PathBuf>,
    /// Environment variables a `massgen/path:` file may read (`${VAR}`, provider keys),
    /// comma-separated [default: none]
    #[arg(long, value_name = "VAR,…", env = "MASSGEN_SERVER_CONFIG_PATHS_ENV")]
    pub config_paths_env: Option<String>,
    /// Allow `massgen/model:<model>` models (`--allow-model-override=false` turns them off)
    /// [default: true]
    #[arg(
        long,
        env = "MASSGEN_SERVER_ALLOW_MODEL_OVERRIDE",
        value_parser = Switch,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub allow_model_override: Option<bool>,
    /// Allow `"massgen": {"models": ["openai/gpt-4o-mini", …]}`: a request chooses its
    /// panel's models among the providers the server's configs already use (their keys and
    /// base URLs; never new ones)
    #[arg(long, env = "MASSGEN_SERVER_ALLOW_REQUEST_PANELS", value_parser = Switch)]
    pub allow_request_panels: bool,
    /// Let a request's `temperature`, `top_p` and `seed` override every agent's config
    /// (otherwise they are ignored)
    #[arg(long, env = "MASSGEN_SERVER_ALLOW_REQUEST_SAMPLING", value_parser = Switch)]
    pub allow_request_sampling: bool,
    /// Answer a request identical to one answered within N seconds (same API key, same
    /// panel) from the response cache [default: off]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_CACHE_TTL_SECONDS", value_parser = Number::<u64>::new())]
    pub cache_ttl_seconds: Option<u64>,
    /// Period of SSE keep-alive comments [default: 15]
    #[arg(long, value_name = "N", value_parser = Number::<u64>::new())]
    pub keepalive_seconds: Option<u64>,
    /// Largest accepted request body [default: 10485760]
    #[arg(long, value_name = "N", value_parser = Number::<usize>::new())]
    pub max_body_bytes: Option<usize>,
    /// How long running sessions may finish after a shutdown signal [default: 30]
    #[arg(long, value_name = "N", value_parser = Number::<u64>::new())]
    pub shutdown_grace_seconds: Option<u64>,
    /// Debug logging, including prompt and answer text
    #[arg(long, env = "MASSGEN_SERVER_DEBUG", value_parser = Switch)]
    pub debug: bool,
    /// Replace every agent's model of the default config with NAME
    #[arg(long, value_name = "NAME", env = "MASSGEN_SERVER_DEFAULT_MODEL")]
    pub default_model: Option<String>,
    /// Panel for /v1/messages requests whose model is not `massgen` or `massgen/<name>` (Claude
    /// Code sends its own model names) [default: the default config]
    #[arg(
        long,
        value_name = "NAME",
        env = "MASSGEN_SERVER_MESSAGES_DEFAULT_PANEL"
    )]
    pub messages_default_panel: Option<String>,
    /// Where Chat Completions sends the deliberation: reasoning (`reasoning_content`),
    /// think_tags (`<think>…</think>` before the answer in `content`) or none [default:
    /// reasoning]
    #[arg(long, value_name = "FORMAT", env = "MASSGEN_SERVER_DELIBERATION_FORMAT", value_parser = deliberation_format)]
    pub deliberation_format: Option<DeliberationFormat>,
    #[command(flatten)]
    pub production: ProductionArgs,
}

/// Access control, limits, records and timeouts (README: "Running in production").
#[derive(Debug, Clone, Default, Args)]
pub struct ProductionArgs {
    /// File of accepted API keys, one per line (`#` comments); adds to MASSGEN_SERVER_API_KEYS
    /// (comma-separated)
    #[arg(long, value_name = "FILE", env = "MASSGEN_SERVER_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,
    /// Require an API key for GET /metrics too
    #[arg(long, env = "MASSGEN_SERVER_PROTECT_METRICS", value_parser = Switch)]
    pub protect_metrics: bool,
    /// Allowed CORS origins, comma-separated, or `*` [default: CORS off]
    #[arg(long, value_name = "LIST", env = "MASSGEN_SERVER_CORS_ORIGINS")]
    pub cors_origins: Option<String>,
    /// Sessions running at once, more get 429 [default: no cap]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_SESSIONS", value_parser = Number::<usize>::new())]
    pub max_sessions: Option<usize>,
    /// Sessions one API key (without keys: the server) runs at once, more get 429 [default: no cap]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_SESSIONS_PER_KEY", value_parser = Number::<usize>::new())]
    pub max_sessions_per_key: Option<usize>,
    /// Requests per minute per API key [default: no limit]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_RATE_LIMIT_PER_MINUTE", value_parser = Number::<u32>::new())]
    pub rate_limit_per_minute: Option<u32>,
    /// Requests a key may send in a burst [default: the per-minute rate]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_RATE_LIMIT_BURST", value_parser = Number::<u32>::new())]
    pub rate_limit_burst: Option<u32>,
    /// Failed authentications per minute per client address, then 429 [default: 30]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_AUTH_FAILURES_PER_MINUTE", value_parser = Number::<u32>::new())]
    pub auth_failures_per_minute: Option<u32>,
    /// Upstream calls one session may make [default: no cap]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_UPSTREAM_CALLS", value_parser = Number::<u32>::new())]
    pub max_upstream_calls: Option<u32>,
    /// USD one session may spend; panels and requests may only set less [default: no limit]
    #[arg(long, value_name = "USD", env = "MASSGEN_SERVER_MAX_SESSION_COST_USD", value_parser = Number::<f64>::new())]
    pub max_session_cost_usd: Option<f64>,
    /// USD one API key may spend per UTC day, then 429 insufficient_quota [default: no limit]
    #[arg(long, value_name = "USD", env = "MASSGEN_SERVER_MAX_KEY_COST_USD_PER_DAY", value_parser = Number::<f64>::new())]
    pub max_key_cost_usd_per_day: Option<f64>,
    /// Time to receive a request's headers [default: 30]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_HEADER_TIMEOUT_SECONDS", value_parser = Number::<u64>::new())]
    pub header_timeout_seconds: Option<u64>,
    /// Time to receive a request's whole body [default: 60]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_BODY_TIMEOUT_SECONDS", value_parser = Number::<u64>::new())]
    pub body_timeout_seconds: Option<u64>,
    /// Seconds a connection may stay open with no request in flight [default: 60]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_IDLE_TIMEOUT_SECONDS", value_parser = Number::<u64>::new())]
    pub idle_timeout_seconds: Option<u64>,
    /// Open connections at once; more are closed at once [default: 4096]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_CONNECTIONS", value_parser = Number::<usize>::new())]
    pub max_connections: Option<usize>,
    /// Open connections from one client address at once; more from it are closed at once
    /// [default: half of --max-connections]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_CONNECTIONS_PER_ADDRESS", value_parser = Number::<usize>::new())]
    pub max_connections_per_address: Option<usize>,
    /// Request body bytes all requests together may hold until their responses are done;
    /// past it a request waits up to 2 s, then gets 503 [default: 33554432, or
    /// --max-body-bytes if larger]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_BUFFERED_BODY_BYTES", value_parser = Number::<usize>::new())]
    pub max_buffered_body_bytes: Option<usize>,
    /// Seconds a streaming client may leave its buffer full (not reading) before it is
    /// dropped as a disconnect [default: 30]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_CLIENT_STALL_TIMEOUT_SECONDS", value_parser = Number::<u64>::new())]
    pub client_stall_timeout_seconds: Option<u64>,
    /// Readers of one session's event stream at once; more get 429 [default: 16]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_SUBSCRIBERS_PER_SESSION", value_parser = Number::<usize>::new())]
    pub max_subscribers_per_session: Option<usize>,
    /// Readers of session event streams one API key (the whole server, without keys) holds
    /// at once; more get 429 [default: 64]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_MAX_SUBSCRIBERS_PER_KEY", value_parser = Number::<usize>::new())]
    pub max_subscribers_per_key: Option<usize>,
    /// Where session records are kept: sqlite://PATH, postgres://USER:PASSWORD@HOST/DB or
    /// memory [default: sqlite://$XDG_DATA_HOME/massgen/records.db, else
    /// ~/.local/share/massgen/records.db]
    #[arg(
        long,
        value_name = "URL",
        env = "MASSGEN_SERVER_RECORDS_DB",
        hide_env_values = true
    )]
    pub records_db: Option<String>,
    /// Session records kept: in memory with `memory`, in the database otherwise (and
    /// finished ones waiting in memory while the database fails) [default: 1000 in memory,
    /// 100000 in a database]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_RECORDS_MAX", value_parser = Number::<usize>::new())]
    pub records_max: Option<usize>,
    /// Seconds between this process's heartbeats in the records database [default: 10]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_RECORDS_HEARTBEAT_SECONDS", value_parser = Number::<u64>::new())]
    pub records_heartbeat_seconds: Option<u64>,
    /// A running session whose process sent no heartbeat for this long is marked
    /// interrupted [default: 60]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_RECORDS_INTERRUPTED_AFTER_SECONDS", value_parser = Number::<u64>::new())]
    pub records_interrupted_after_seconds: Option<u64>,
    /// Seconds a finished session's record is kept [default: 3600 in memory, 2592000 (30
    /// days) in a database]
    #[arg(long, value_name = "N", env = "MASSGEN_SERVER_RECORDS_MAX_AGE_SECONDS", value_parser = Number::<u64>::new())]
    pub records_max_age_seconds: Option<u64>,
    /// Also write session records as files (MassGen's log layout)
    #[arg(long, value_name = "DIR", env = "MASSGEN_SERVER_RECORDS_DIR")]
    pub records_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct MockUpstreamArgs {
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// 0 picks a free port (the bound address is printed).
    #[arg(long, default_value_t = 9000)]
    pub port: u16,
}

/// What `serve` will do: settings plus where the panels come from.
#[derive(Debug, Clone, PartialEq)]
pub struct ServePlan {
    pub settings: ServerSettings,
    pub default_config: Option<PathBuf>,
    pub configs_dir: Option<PathBuf>,
    pub demo: bool,
}

/// A failure that ends the process with `code` after printing `message` to stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fatal {
    pub code: u8,
    pub message: String,
}

impl Fatal {
    fn usage(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: message.into(),
        }
    }
    fn runtime(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }
}

impl From<ConfigError> for Fatal {
    fn from(e: ConfigError) -> Self {
        Self::usage(e.to_string())
    }
}

pub const NO_CONFIG_HINT: &str = "no panel config: pass --config FILE (or set MASSGEN_SERVER_DEFAULT_CONFIG), \
     write .massgen/config.yaml or ~/.config/massgen/config.yaml, set a provider key for an automatic \
     panel (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY or GOOGLE_API_KEY, XAI_API_KEY, \
     GROQ_API_KEY, OPENROUTER_API_KEY, CEREBRAS_API_KEY; environment or .env), pass --configs-dir DIR \
     with *.yaml files, or --demo to try it with simulated agents";

/// Applies the defaults to what clap read from flags and `MASSGEN_SERVER_*` variables (flags
/// win). `env` is read for `MASSGEN_SERVER_API_KEYS` only, a list that has no flag: keys do
/// not belong on a command line.
pub fn resolve_serve(args: &ServeArgs, env: &Env) -> Result<ServePlan, Fatal> {
    let defaults = ServerSettings::default();
    let keepalive = args
        .keepalive_seconds
        .map_or(defaults.keepalive, Duration::from_secs);
    if keepalive.is_zero() {
        return Err(Fatal::usage("--keepalive-seconds must be at least 1"));
    }
    if args.cache_ttl_seconds == Some(0) {
        return Err(Fatal::usage(
            "--cache-ttl-seconds must be at least 1 (leave it out to keep the cache off)",
        ));
    }
    let (config_paths_root, config_paths_env) = config_paths(args)?;
    let max_body_bytes = args.max_body_bytes.unwrap_or(defaults.max_body_bytes);
    let max_buffered_body_bytes = match args.production.max_buffered_body_bytes {
        Some(n) if n < max_body_bytes => {
            return Err(Fatal::usage(format!(
                "--max-buffered-body-bytes ({n}) must be at least --max-body-bytes ({max_body_bytes}): \
                 a body the server accepts must fit in the budget"
            )));
        }
        Some(n) => n,
        None => defaults
            .production
            .max_buffered_body_bytes
            .max(max_body_bytes),
    };
    let settings = ServerSettings {
        host: given(&args.host).unwrap_or(defaults.host),
        port: args.port.unwrap_or(defaults.port),
        keepalive,
        max_body_bytes,
        allow_config_paths: args.allow_config_paths,
        config_paths_root,
        config_paths_env,
        allow_model_override: args
            .allow_model_override
            .unwrap_or(defaults.allow_model_override),
        allow_request_panels: args.allow_request_panels,
        allow_request_sampling: args.allow_request_sampling,
        shutdown_grace: args
            .shutdown_grace_seconds
            .map_or(defaults.shutdown_grace, Duration::from_secs),
        debug: args.debug,
        default_model: given(&args.default_model),
        messages_default_panel: messages_default_panel(args)?,
        deliberation_format: args.deliberation_format.unwrap_or_default(),
        production: {
            let mut production = resolve_production(&args.production, env)?;
            production.max_buffered_body_bytes = max_buffered_body_bytes;
            // Simulated sessions do not belong in the operator's records: `--demo` keeps
            // them in memory unless --records-db says otherwise.
            if args.demo && given(&args.production.records_db).is_none() {
                production.records_db = RecordsDb::Memory;
                production.records_max_sessions = args
                    .production
                    .records_max
                    .unwrap_or(ProductionSettings::default().records_max_sessions);
                production.records_max_age = args.production.records_max_age_seconds.map_or(
                    ProductionSettings::default().records_max_age,
                    Duration::from_secs,
                );
            }
            production
        },
        cache_ttl: args.cache_ttl_seconds.map(Duration::from_secs),
    };
    Ok(ServePlan {
        settings,
        default_config: given_path(&args.config),
        configs_dir: given_path(&args.configs_dir),
        demo: args.demo,
    })
}

fn deliberation_format(name: &str) -> Result<DeliberationFormat, String> {
    DeliberationFormat::from_name(name.trim())
        .ok_or_else(|| format!("expected one of {}", DeliberationFormat::NAMES.join(", ")))
}

/// `--config-paths-root` (else `--configs-dir`) and `--config-paths-env`. With
/// `--allow-config-paths` a root is required: without one any file the server can read,
/// its own records included, would be a config a request can load.
fn config_paths(args: &ServeArgs) -> Result<(Option<PathBuf>, Vec<String>), Fatal> {
    let root = given_path(&args.config_paths_root).or_else(|| given_path(&args.configs_dir));
    if args.allow_config_paths && root.is_none() {
        return Err(Fatal::usage(
            "--allow-config-paths needs the folder massgen/path: files must be in: \
             --config-paths-root DIR (or --configs-dir DIR)",
        ));
    }
    let vars: Vec<String> = given(&args.config_paths_env)
        .map(|list| split_list(&list).map(str::to_string).collect())
        .unwrap_or_default();
    if let Some(bad) = vars
        .iter()
        .find(|v| !crate::config::expand::is_variable_name(v))
    {
        return Err(Fatal::usage(format!(
            "--config-paths-env: '{bad}' is not a variable name (letters, digits and '_', not starting with a digit)"
        )));
    }
    Ok((root, vars))
}

/// `--messages-default-panel`: a panel name (as in `massgen/<name>`).
fn messages_default_panel(args: &ServeArgs) -> Result<Option<String>, Fatal> {
    let Some(name) = given(&args.messages_default_panel).map(|n| n.trim().to_string()) else {
        return Ok(None);
    };
    if !crate::config::valid_panel_name(&name) {
        return Err(Fatal::usage(format!(
            "--messages-default-panel: '{name}' is not a panel name (letters, digits, '-', '_', '.')"
        )));
    }
    Ok(Some(name))
}

/// Records kept in a database by default: how many, and for how long (30 days).
const DB_RECORDS_MAX: usize = 100_000;
const DB_RECORDS_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

/// The production part of [`resolve_serve`], over [`ProductionSettings::default`].
pub fn resolve_production(args: &ProductionArgs, env: &Env) -> Result<ProductionSettings, Fatal> {
    let defaults = ProductionSettings::default();
    let (records_heartbeat, records_interrupted_after) = heartbeat_flags(args, &defaults)?;
    // A key source that was given but holds no key is an operator's mistake that would
    // leave the API open: refuse to start instead (fail closed). An empty variable counts
    // as not given, as everywhere else.
    let mut api_keys: Vec<Secret> = Vec::new();
    if let Some(list) = env("MASSGEN_SERVER_API_KEYS").filter(|l| !l.trim().is_empty()) {
        api_keys.extend(split_list(&list).map(Secret::new));
        if api_keys.is_empty() {
            return Err(Fatal::usage(
                "MASSGEN_SERVER_API_KEYS is set but holds no key (only commas and spaces): \
                 set real keys or unset it",
            ));
        }
    }
    if let Some(path) = given_path(&args.api_keys_file) {
        // The error names the file only: its content is secret.
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Fatal::usage(format!(
                "cannot read the API keys file {}: {e}",
                path.display()
            ))
        })?;
        let before = api_keys.len();
        api_keys.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(Secret::new),
        );
        if api_keys.len() == before {
            return Err(Fatal::usage(format!(
                "the API keys file {} holds no key (only blank or # lines): add keys or drop \
                 --api-keys-file",
                path.display()
            )));
        }
    }
    for (value, name) in [
        (
            args.max_sessions
                .map(|v| u64::try_from(v).unwrap_or(u64::MAX)),
            "--max-sessions",
        ),
        (
            args.max_sessions_per_key
                .map(|v| u64::try_from(v).unwrap_or(u64::MAX)),
            "--max-sessions-per-key",
        ),
        (
            args.rate_limit_per_minute.map(u64::from),
            "--rate-limit-per-minute",
        ),
        (args.rate_limit_burst.map(u64::from), "--rate-limit-burst"),
        (
            args.auth_failures_per_minute.map(u64::from),
            "--auth-failures-per-minute",
        ),
        (
            args.max_upstream_calls.map(u64::from),
            "--max-upstream-calls",
        ),
        (args.header_timeout_seconds, "--header-timeout-seconds"),
        (args.body_timeout_seconds, "--body-timeout-seconds"),
        (args.idle_timeout_seconds, "--idle-timeout-seconds"),
        (
            args.client_stall_timeout_seconds,
            "--client-stall-timeout-seconds",
        ),
        (
            args.max_connections
                .map(|v| u64::try_from(v).unwrap_or(u64::MAX)),
            "--max-connections",
        ),
        (
            args.max_connections_per_address
                .map(|v| u64::try_from(v).unwrap_or(u64::MAX)),
            "--max-connections-per-address",
        ),
        (
            args.max_subscribers_per_session
                .map(|v| u64::try_from(v).unwrap_or(u64::MAX)),
            "--max-subscribers-per-session",
        ),
        (
            args.max_subscribers_per_key
                .map(|v| u64::try_from(v).unwrap_or(u64::MAX)),
            "--max-subscribers-per-key",
        ),
    ] {
        if value == Some(0) {
            return Err(Fatal::usage(format!("{name} must be at least 1")));
        }
    }
    for (usd, name) in [
        (args.max_session_cost_usd, "--max-session-cost-usd"),
        (args.max_key_cost_usd_per_day, "--max-key-cost-usd-per-day"),
    ] {
        if let Some(usd) = usd
            && !(usd.is_finite() && usd > 0.0)
        {
            return Err(Fatal::usage(format!("{name} must be above 0, got {usd}")));
        }
    }
    let records_db = match given(&args.records_db) {
        Some(text) => RecordsDb::parse(&text)
            .map_err(|e| Fatal::usage(format!("--records-db / MASSGEN_SERVER_RECORDS_DB: {e}")))?,
        // Without either variable the store fails when opened, not here: commands that
        // never open it (--print-config) still work.
        None => RecordsDb::default_sqlite(env("XDG_DATA_HOME").as_deref(), env("HOME").as_deref())
            .unwrap_or(RecordsDb::Unplaced),
    };
    Ok(ProductionSettings {
        api_keys,
        protect_metrics: args.protect_metrics,
        cors_origins: given(&args.cors_origins)
            .map(|list| split_list(&list).map(str::to_string).collect())
            .unwrap_or_default(),
        max_concurrent_sessions: args.max_sessions,
        max_sessions_per_key: args.max_sessions_per_key,
        rate_limit_per_minute: args.rate_limit_per_minute,
        rate_limit_burst: args.rate_limit_burst,
        auth_failures_per_minute: args
            .auth_failures_per_minute
            .unwrap_or(defaults.auth_failures_per_minute),
        max_upstream_calls: args.max_upstream_calls,
        max_session_cost_usd: args.max_session_cost_usd,
        max_key_cost_usd_per_day: args.max_key_cost_usd_per_day,
        header_read_timeout: args
            .header_timeout_seconds
            .map_or(defaults.header_read_timeout, Duration::from_secs),
        body_read_timeout: args
            .body_timeout_seconds
            .map_or(defaults.body_read_timeout, Duration::from_secs),
        idle_timeout: args
            .idle_timeout_seconds
            .map_or(defaults.idle_timeout, Duration::from_secs),
        max_connections: args.max_connections.unwrap_or(defaults.max_connections),
        max_connections_per_address: args
            .max_connections_per_address
            .unwrap_or((args.max_connections.unwrap_or(defaults.max_connections) / 2).max(1)),
        max_buffered_body_bytes: args
            .max_buffered_body_bytes
            .unwrap_or(defaults.max_buffered_body_bytes),
        client_stall_timeout: args
            .client_stall_timeout_seconds
            .map_or(defaults.client_stall_timeout, Duration::from_secs),
        max_subscribers_per_session: args
            .max_subscribers_per_session
            .unwrap_or(defaults.max_subscribers_per_session),
        max_subscribers_per_key: args
            .max_subscribers_per_key
            .unwrap_or(defaults.max_subscribers_per_key),
        records_max_sessions: args.records_max.unwrap_or(match records_db {
            RecordsDb::Memory => defaults.records_max_sessions,
            _ => DB_RECORDS_MAX,
        }),
        records_max_age: args.records_max_age_seconds.map_or(
            match records_db {
                RecordsDb::Memory => defaults.records_max_age,
                _ => DB_RECORDS_MAX_AGE,
            },
            Duration::from_secs,
        ),
        records_dir: given_path(&args.records_dir),
        records_heartbeat,
        records_interrupted_after,
        records_db,
    })
}

/// `--records-heartbeat-seconds` and `--records-interrupted-after-seconds`: a replica's
/// running sessions are marked interrupted by the others after the second without its
/// heartbeat, so it must allow a few missed beats (a slow but live replica is not gone).
fn heartbeat_flags(
    args: &ProductionArgs,
    defaults: &ProductionSettings,
) -> Result<(Duration, Duration), Fatal> {
    if args.records_heartbeat_seconds == Some(0) {
        return Err(Fatal::usage(
            "--records-heartbeat-seconds must be at least 1",
        ));
    }
    let heartbeat = args
        .records_heartbeat_seconds
        .map_or(defaults.records_heartbeat, Duration::from_secs);
    let after = args
        .records_interrupted_after_seconds
        .map_or(defaults.records_interrupted_after, Duration::from_secs);
    if after < heartbeat * 3 {
        return Err(Fatal::usage(format!(
            "--records-interrupted-after-seconds ({}) must be at least 3 x --records-heartbeat-seconds ({}): a live replica's sessions would be marked interrupted between two heartbeats",
            after.as_secs(),
            heartbeat.as_secs()
        )));
    }
    Ok((heartbeat, after))
}

/// A text value, an empty one (`MASSGEN_SERVER_HOST=`) counting as not given.
fn given(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.trim().is_empty())
}

fn given_path(value: &Option<PathBuf>) -> Option<PathBuf> {
    value.clone().filter(|p| !p.as_os_str().is_empty())
}

fn split_list(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// How a flag or its variable names itself in an error: `--port / MASSGEN_SERVER_PORT`.
fn arg_names(arg: Option<&clap::Arg>) -> String {
    let Some(arg) = arg else {
        return "value".to_string();
    };
    let flag = arg
        .get_long()
        .map_or_else(|| arg.get_id().to_string(), |long| format!("--{long}"));
    match arg.get_env() {
        Some(var) => format!("{flag} / {}", var.to_string_lossy()),
        None => flag,
    }
}

fn invalid(cmd: &clap::Command, arg: Option<&clap::Arg>, problem: String) -> clap::Error {
    clap::Error::raw(
        clap::error::ErrorKind::InvalidValue,
        format!("{}: {problem}\n", arg_names(arg)),
    )
    .with_cmd(cmd)
}

/// A whole number from a flag or its variable (surrounding spaces allowed); a bad one names
/// both, since the operator may not know which of the two set it.
#[derive(Debug, Clone, Copy)]
struct Number<T>(std::marker::PhantomData<fn() -> T>);

impl<T> Number<T> {
    fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<T> clap::builder::TypedValueParser for Number<T>
where
    T: std::str::FromStr + Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let text = value.to_string_lossy();
        text.trim()
            .parse()
            .map_err(|_| invalid(cmd, arg, format!("not a valid number: '{text}'")))
    }
}

/// An on/off value from a flag (`--debug` means true) or its variable: 1/true/yes/on or
/// 0/false/no/off, any case; empty counts as off.
#[derive(Debug, Clone, Copy)]
struct Switch;

impl clap::builder::TypedValueParser for Switch {
    type Value = bool;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<bool, clap::Error> {
        let text = value.to_string_lossy();
        switch(&text)
            .ok_or_else(|| invalid(cmd, arg, format!("expected true or false, got '{text}'")))
    }
}

fn switch(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

/// Loads the panels of `plan` and, with `--demo`, adds the demo panel on `mock_base_url`:
/// as the default when no `--config` was given, else as the named config `demo`.
///
/// Without `--config` and `--demo` the default panel is looked up as MassGen's CLI does
/// ([`find_default_config`] from the working directory); failing that, and without
/// `--configs-dir`, it is the automatic panel of the keys in `env` ([`auto_panel`]).
pub fn build_catalog(
    plan: &ServePlan,
    mock_base_url: Option<&str>,
    env: &Env,
) -> Result<PanelCatalog, Fatal> {
    let lookup = plan.default_config.is_none() && !plan.demo;
    let found = lookup
        .then(|| find_default_config(Path::new(""), env))
        .flatten();
    let default_config = plan.default_config.as_deref().or(found.as_deref());
    let mut catalog = load_catalog(default_config, plan.configs_dir.as_deref(), env)?;
    if lookup
        && catalog.default.is_none()
        && plan.configs_dir.is_none()
        && let Some(panel) = auto_panel(env)
    {
        catalog.default = Some(Arc::new(panel?));
    }
    if let Some(url) = mock_base_url {
        let demo = Arc::new(demo_panel(url));
        if catalog.default.is_none() {
            catalog.default = Some(demo);
        } else {
            if catalog.named.contains_key("demo") {
                tracing::warn!("the built-in demo panel replaces configs dir's demo.yaml");
            }
            catalog.named.insert("demo".to_string(), demo);
        }
    }
    if catalog.default.is_none() && catalog.named.is_empty() {
        return Err(Fatal::usage(NO_CONFIG_HINT));
    }
    Ok(catalog)
}

/// What `--print-config` prints: the automatic panel's YAML, or the default config file as
/// it is (both load back to the panel that would be served).
pub fn printed_config(catalog: &PanelCatalog, env: &Env) -> Result<String, Fatal> {
    let Some(panel) = &catalog.default else {
        return Err(Fatal::usage(
            "--print-config: there is no default panel (only --configs-dir panels)",
        ));
    };
    if panel.source == Path::new(AUTO_SOURCE) {
        return auto_panel_yaml(env)
            .ok_or_else(|| Fatal::runtime("the API keys changed while reading them"));
    }
    std::fs::read_to_string(&panel.source)
        .map_err(|e| Fatal::runtime(format!("cannot read {}: {e}", panel.source.display())))
}

/// `--default-model` becomes every default agent's model: it must stay one URL path
/// segment for each that puts it into its upstream URL, as a configured model must.
fn check_default_model(catalog: &PanelCatalog, model: Option<&str>) -> Result<(), Fatal> {
    let (Some(model), Some(panel)) = (model, &catalog.default) else {
        return Ok(());
    };
    for agent in &panel.agents {
        massgen_providers::check_model(&agent.backend.backend_type, model)
            .map_err(|why| Fatal::usage(format!("--default-model: agent '{}': {why}", agent.id)))?;
    }
    Ok(())
}

/// `gpt(openai/gpt-4o-mini), …`: ids, types and models only, never keys or URLs.
pub fn describe_agents(panel: &PanelConfig) -> String {
    let list: Vec<String> = panel
        .agents
        .iter()
        .map(|a| format!("{}({}/{})", a.id, a.backend.backend_type, a.backend.model))
        .collect();
    format!("[{}]", list.join(", "))
}

pub fn main() -> ExitCode {
    // Before any thread exists: dotenvy sets process variables. Real variables win.
    let dotenv = load_dotenv();
    let cli = Cli::parse();
    // `serve` reads MASSGEN_SERVER_DEBUG through clap; the other commands log alike.
    let debug = matches!(&cli.command, Command::Serve(a) if a.debug)
        || process_env("MASSGEN_SERVER_DEBUG").is_some_and(|v| switch(&v) == Some(true));
    let telemetry = crate::telemetry::init(debug, &process_env);
    if let Err(e) = dotenv {
        tracing::warn!("ignoring .env: {e}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&Fatal::runtime(format!("cannot start the runtime: {e}"))),
    };
    let result = match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args)),
        Command::MockUpstream(args) => runtime.block_on(mock_upstream(args)),
        Command::Healthcheck(args) => runtime.block_on(healthcheck(args)),
        Command::CheckConfig(args) => check_config(&args, &process_env),
    };
    // Outside the runtime: the OTLP exporter's client blocks.
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(fatal) => fail(&fatal),
    }
}

fn fail(fatal: &Fatal) -> ExitCode {
    eprintln!("massgen: error: {}", fatal.message);
    ExitCode::from(fatal.code)
}

fn load_dotenv() -> Result<(), dotenvy::Error> {
    let path = Path::new(".env");
    if path.is_file() {
        dotenvy::from_path(path)?;
    }
    Ok(())
}

async fn serve(args: ServeArgs) -> Result<(), Fatal> {
    let plan = resolve_serve(&args, &process_env)?;
    if args.print_config {
        if plan.demo {
            return Err(Fatal::usage(
                "--print-config prints a config file or the automatic panel; --demo has neither",
            ));
        }
        let catalog = build_catalog(&plan, None, &process_env)?;
        let yaml = printed_config(&catalog, &process_env)?;
        let mut out = std::io::stdout().lock();
        return write!(out, "{yaml}")
            .and_then(|()| out.flush())
            .map_err(|e| Fatal::runtime(format!("cannot write the config: {e}")));
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let mock_url = if plan.demo {
        let listener = bind("127.0.0.1", 0).await?;
        let addr = local_addr(&listener)?;
        let stop = stopped(stop_rx.clone());
        tokio::spawn(async move {
            if let Err(e) = massgen_simulator::serve(listener, stop).await {
                tracing::error!("demo mock upstream failed: {e}");
            }
        });
        Some(format!("http://{addr}/v1"))
    } else {
        None
    };
    let catalog = build_catalog(&plan, mock_url.as_deref(), &process_env)?;
    let mut settings = plan.settings;
    if settings.allow_config_paths
        && let Some(root) = &settings.config_paths_root
    {
        let root = crate::config::check_config_paths_root(root, &settings.production)
            .map_err(Fatal::usage)?;
        settings.config_paths_root = Some(root);
    }
    if let Some(name) = &settings.messages_default_panel
        && !catalog.named.contains_key(name)
    {
        let known: Vec<&String> = catalog.named.keys().collect();
        return Err(Fatal::usage(format!(
            "--messages-default-panel: no panel '{name}' (named panels: {known:?})"
        )));
    }
    check_default_model(&catalog, settings.default_model.as_deref())?;
    // Before listening: a configured database that cannot be used ends start-up (exit 2),
    // never a silent fall back to memory.
    let records = crate::server::open_records(&settings.production)
        .await
        .map_err(|e| Fatal::usage(format!("--records-db / MASSGEN_SERVER_RECORDS_DB: {e}")))?;
    let listener = bind(&settings.host, settings.port).await?;
    let addr = local_addr(&listener)?;
    let (config, agents) = match &catalog.default {
        Some(panel) => (panel.source.display().to_string(), describe_agents(panel)),
        None => ("none".to_string(), "[]".to_string()),
    };
    let named: Vec<&String> = catalog.named.keys().collect();
    let automatic = if config == AUTO_SOURCE {
        " (automatic panel: write a config to choose your own; --print-config prints this one)"
    } else {
        ""
    };
    tracing::info!(
        unavailable = catalog.unavailable.len(),
        "massgen listening on http://{addr} config={config} agents={agents} named={named:?}{automatic}"
    );
    spawn_signal_watcher(stop_tx)?;
    announce(&format!("massgen listening on http://{addr}"));
    let http = massgen_providers::http_client()
        .map_err(|e| Fatal::runtime(format!("cannot build the HTTP client: {e}")))?;
    let env: Arc<Env> = Arc::new(process_env);
    // The process's MCP servers, held in the state; they start now, in the background, and a
    // session that needs one first waits.
    let tools = Arc::new(ToolRegistry::new(Arc::new(RmcpConnector)));
    let mcp = crate::app::servers_of(&catalog);
    tokio::spawn({
        let tools = Arc::clone(&tools);
        async move { tools.start_all(mcp).await }
    });
    let providers = Arc::new(HttpProviders::new(http));
    let state = AppState::with_records(
        catalog,
        settings,
        providers,
        Arc::clone(&tools),
        env,
        Arc::new(massgen_core::coordination::SystemClock),
        records,
    );
    let result = crate::server::serve(listener, state, stopped(stop_rx)).await;
    tools.shutdown().await;
    result.map_err(|e| Fatal::runtime(format!("server failed: {e:#}")))
}

/// `massgen check-config FILE…`: every error and warning of each file on stdout, one a
/// line (`error: FILE: KEY: problem`, `warning: FILE: KEY: why`).
fn check_config(args: &CheckConfigArgs, env: &Env) -> Result<(), Fatal> {
    let (report, failed) = check_report(&args.files, env);
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{report}");
    let _ = out.flush();
    if failed == 0 {
        Ok(())
    } else {
        Err(Fatal::runtime(format!(
            "{failed} of {} config file(s) have errors",
            args.files.len()
        )))
    }
}

/// The report of `check-config` and how many files failed.
pub fn check_report(files: &[PathBuf], env: &Env) -> (String, usize) {
    let mut report = String::new();
    let mut failed = 0;
    for file in files {
        let check = check_panel(file, env);
        for error in &check.errors {
            report.push_str(&format!("error: {error}\n"));
        }
        for warning in &check.warnings {
            report.push_str(&format!("warning: {}: {warning}\n", file.display()));
        }
        if check.errors.is_empty() {
            report.push_str(&format!(
                "ok: {} ({} warning(s))\n",
                file.display(),
                check.warnings.len()
            ));
        } else {
            failed += 1;
        }
    }
    (report, failed)
}

async fn healthcheck(args: HealthcheckArgs) -> Result<(), Fatal> {
    let url = args.url.unwrap_or_else(|| {
        let port = process_env("MASSGEN_SERVER_PORT").unwrap_or_else(|| "4000".to_string());
        format!("http://127.0.0.1:{}/health", port.trim())
    });
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(args.timeout_seconds.max(1)))
        .build()
        .map_err(|e| Fatal::runtime(format!("cannot build the HTTP client: {e}")))?;
    match client.get(&url).send().await {
        Ok(response) if response.status().is_success() => Ok(()),
        Ok(response) => Err(Fatal::runtime(format!("{url}: HTTP {}", response.status()))),
        Err(e) => Err(Fatal::runtime(format!("{url}: {e}"))),
    }
}

async fn mock_upstream(args: MockUpstreamArgs) -> Result<(), Fatal> {
    let listener = bind(&args.host, args.port).await?;
    let addr = local_addr(&listener)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    spawn_signal_watcher(stop_tx)?;
    tracing::info!("mock-upstream listening on http://{addr}");
    announce(&format!("mock-upstream listening on http://{addr}"));
    massgen_simulator::serve(listener, stopped(stop_rx))
        .await
        .map_err(|e| Fatal::runtime(format!("mock upstream failed: {e}")))
}

async fn bind(host: &str, port: u16) -> Result<TcpListener, Fatal> {
    TcpListener::bind((host, port))
        .await
        .map_err(|e| Fatal::runtime(format!("cannot bind {host}:{port}: {e}")))
}

fn local_addr(listener: &TcpListener) -> Result<SocketAddr, Fatal> {
    listener
        .local_addr()
        .map_err(|e| Fatal::runtime(format!("cannot read the bound address: {e}")))
}

/// The one stdout line; flushed because stdout to a pipe is block-buffered.
fn announce(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// First Ctrl-C / SIGTERM: graceful shutdown (the server applies its grace period).
/// Second: exit at once. The handlers are installed before this returns, so a signal sent
/// right after the address line is printed is never lost to the default (killing) action.
fn spawn_signal_watcher(stop: watch::Sender<bool>) -> Result<(), Fatal> {
    let mut signals = Signals::install()
        .map_err(|e| Fatal::runtime(format!("cannot listen for shutdown signals: {e}")))?;
    tokio::spawn(async move {
        signals.next().await;
        tracing::info!("shutting down (send the signal again to exit at once)");
        let _ = stop.send(true);
        signals.next().await;
        eprintln!("massgen: second signal, exiting now");
        std::process::exit(130);
    });
    Ok(())
}

#[cfg(unix)]
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn install() -> std::io::Result<Self> {
        Ok(Self)
    }

    async fn next(&mut self) {
        let _ = tokio::signal::ctrl_c().await;
    }
}
