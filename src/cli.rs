//! Command line: `massgen serve` and `massgen mock-upstream`.
//!
//! Flags win over `MASSGEN_SERVER_*` variables, which win over defaults; [`resolve_serve`]
//! does that merge with an injected environment so it is unit-tested without the process env.
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
    ConfigError, Env, PanelCatalog, PanelConfig, ProductionSettings, Secret, ServerSettings,
    demo_panel, load_catalog, process_env,
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
    /// Address to bind [env: MASSGEN_SERVER_HOST] [default: 127.0.0.1]
    #[arg(long)]
    pub host: Option<String>,
    /// Port to bind, 0 for any free port [env: MASSGEN_SERVER_PORT] [default: 4000]
    #[arg(long)]
    pub port: Option<u16>,
    /// Default panel config (YAML) [env: MASSGEN_SERVER_DEFAULT_CONFIG]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Directory of named panel configs, served as `massgen/<name>` [env: MASSGEN_SERVER_CONFIGS_DIR]
    #[arg(long, value_name = "DIR")]
    pub configs_dir: Option<PathBuf>,
    /// Run three simulated agents on a built-in mock upstream (no API keys needed)
    #[arg(long)]
    pub demo: bool,
    /// Allow `massgen/path:<file>` models [env: MASSGEN_SERVER_ALLOW_CONFIG_PATHS]
    #[arg(long)]
    pub allow_config_paths: bool,
    /// Period of SSE keep-alive comments [default: 15]
    #[arg(long, value_name = "N")]
    pub keepalive_seconds: Option<u64>,
    /// Largest accepted request body [default: 10485760]
    #[arg(long, value_name = "N")]
    pub max_body_bytes: Option<usize>,
    /// How long running sessions may finish after a shutdown signal [default: 30]
    #[arg(long, value_name = "N")]
    pub shutdown_grace_seconds: Option<u64>,
    /// Debug logging, including prompt and answer text [env: MASSGEN_SERVER_DEBUG]
    #[arg(long)]
    pub debug: bool,
    /// Replace every agent's model of the default config with NAME [env: MASSGEN_SERVER_DEFAULT_MODEL]
    #[arg(long, value_name = "NAME")]
    pub default_model: Option<String>,
    /// Panel for /v1/messages requests whose model is not `massgen` or `massgen/<name>` (Claude
    /// Code sends its own model names) [env: MASSGEN_SERVER_MESSAGES_DEFAULT_PANEL] [default: the
    /// default config]
    #[arg(long, value_name = "NAME")]
    pub messages_default_panel: Option<String>,
    #[command(flatten)]
    pub production: ProductionArgs,
}

/// Access control, limits, records and timeouts (README: "Running in production").
#[derive(Debug, Clone, Default, Args)]
pub struct ProductionArgs {
    /// File of accepted API keys, one per line (`#` comments); adds to MASSGEN_SERVER_API_KEYS
    /// (comma-separated) [env: MASSGEN_SERVER_API_KEYS_FILE]
    #[arg(long, value_name = "FILE")]
    pub api_keys_file: Option<PathBuf>,
    /// Require an API key for GET /metrics too [env: MASSGEN_SERVER_PROTECT_METRICS]
    #[arg(long)]
    pub protect_metrics: bool,
    /// Allowed CORS origins, comma-separated, or `*` [env: MASSGEN_SERVER_CORS_ORIGINS] [default: CORS off]
    #[arg(long, value_name = "LIST")]
    pub cors_origins: Option<String>,
    /// Sessions running at once, more get 429 [env: MASSGEN_SERVER_MAX_SESSIONS] [default: no cap]
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<usize>,
    /// Requests per minute per API key [env: MASSGEN_SERVER_RATE_LIMIT_PER_MINUTE] [default: no limit]
    #[arg(long, value_name = "N")]
    pub rate_limit_per_minute: Option<u32>,
    /// Requests a key may send in a burst [env: MASSGEN_SERVER_RATE_LIMIT_BURST] [default: the per-minute rate]
    #[arg(long, value_name = "N")]
    pub rate_limit_burst: Option<u32>,
    /// Upstream calls one session may make [env: MASSGEN_SERVER_MAX_UPSTREAM_CALLS] [default: no cap]
    #[arg(long, value_name = "N")]
    pub max_upstream_calls: Option<u32>,
    /// Time to receive a request's headers [env: MASSGEN_SERVER_HEADER_TIMEOUT_SECONDS] [default: 30]
    #[arg(long, value_name = "N")]
    pub header_timeout_seconds: Option<u64>,
    /// Session records kept in memory [env: MASSGEN_SERVER_RECORDS_MAX] [default: 1000]
    #[arg(long, value_name = "N")]
    pub records_max: Option<usize>,
    /// Seconds a finished session's record is kept [env: MASSGEN_SERVER_RECORDS_MAX_AGE_SECONDS] [default: 3600]
    #[arg(long, value_name = "N")]
    pub records_max_age_seconds: Option<u64>,
    /// Also write session records as files (MassGen's log layout) [env: MASSGEN_SERVER_RECORDS_DIR]
    #[arg(long, value_name = "DIR")]
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
     --configs-dir DIR with *.yaml files, or --demo to try it with simulated agents";

/// Merges flags, `MASSGEN_SERVER_*` variables (looked up through `env`) and defaults.
pub fn resolve_serve(args: &ServeArgs, env: &Env) -> Result<ServePlan, Fatal> {
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let flag = |set: bool, name: &str| -> Result<bool, Fatal> {
        if set {
            return Ok(true);
        }
        var(name).map_or(Ok(false), |v| parse_bool(name, &v))
    };
    let defaults = ServerSettings::default();
    let port = match (args.port, var("MASSGEN_SERVER_PORT")) {
        (Some(port), _) => port,
        (None, Some(text)) => text.trim().parse().map_err(|_| {
            Fatal::usage(format!("MASSGEN_SERVER_PORT: not a port number: '{text}'"))
        })?,
        (None, None) => defaults.port,
    };
    let keepalive = args
        .keepalive_seconds
        .map_or(defaults.keepalive, Duration::from_secs);
    if keepalive.is_zero() {
        return Err(Fatal::usage("--keepalive-seconds must be at least 1"));
    }
    let settings = ServerSettings {
        host: args
            .host
            .clone()
            .or_else(|| var("MASSGEN_SERVER_HOST"))
            .unwrap_or(defaults.host),
        port,
        keepalive,
        max_body_bytes: args.max_body_bytes.unwrap_or(defaults.max_body_bytes),
        allow_config_paths: flag(args.allow_config_paths, "MASSGEN_SERVER_ALLOW_CONFIG_PATHS")?,
        shutdown_grace: args
            .shutdown_grace_seconds
            .map_or(defaults.shutdown_grace, Duration::from_secs),
        debug: flag(args.debug, "MASSGEN_SERVER_DEBUG")?,
        default_model: args
            .default_model
            .clone()
            .or_else(|| var("MASSGEN_SERVER_DEFAULT_MODEL"))
            .filter(|m| !m.trim().is_empty()),
        messages_default_panel: messages_default_panel(args, &var)?,
        production: resolve_production(&args.production, env)?,
    };
    Ok(ServePlan {
        settings,
        default_config: args
            .config
            .clone()
            .or_else(|| var("MASSGEN_SERVER_DEFAULT_CONFIG").map(PathBuf::from)),
        configs_dir: args
            .configs_dir
            .clone()
            .or_else(|| var("MASSGEN_SERVER_CONFIGS_DIR").map(PathBuf::from)),
        demo: args.demo,
    })
}

/// The production part of [`resolve_serve`]: flags win over variables, which win over
/// [`ProductionSettings::default`].
/// `--messages-default-panel`: a panel name (as in `massgen/<name>`).
fn messages_default_panel(
    args: &ServeArgs,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, Fatal> {
    let Some(name) = args
        .messages_default_panel
        .clone()
        .or_else(|| var("MASSGEN_SERVER_MESSAGES_DEFAULT_PANEL"))
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
    else {
        return Ok(None);
    };
    if !crate::config::valid_panel_name(&name) {
        return Err(Fatal::usage(format!(
            "--messages-default-panel: '{name}' is not a panel name (letters, digits, '-', '_', '.')"
        )));
    }
    Ok(Some(name))
}

pub fn resolve_production(args: &ProductionArgs, env: &Env) -> Result<ProductionSettings, Fatal> {
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    fn number<T: std::str::FromStr>(
        flag: Option<T>,
        name: &str,
        value: Option<String>,
    ) -> Result<Option<T>, Fatal> {
        match (flag, value) {
            (Some(v), _) => Ok(Some(v)),
            (None, Some(text)) => text
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| Fatal::usage(format!("{name}: not a valid number: '{text}'"))),
            (None, None) => Ok(None),
        }
    }
    let defaults = ProductionSettings::default();

    let mut api_keys: Vec<Secret> = var("MASSGEN_SERVER_API_KEYS")
        .map(|list| split_list(&list).map(Secret::new).collect())
        .unwrap_or_default();
    let keys_file = args
        .api_keys_file
        .clone()
        .or_else(|| var("MASSGEN_SERVER_API_KEYS_FILE").map(PathBuf::from));
    if let Some(path) = keys_file {
        // The error names the file only: its content is secret.
        let text = std::fs::read_to_string(&path).map_err(|e| {
            Fatal::usage(format!(
                "cannot read the API keys file {}: {e}",
                path.display()
            ))
        })?;
        api_keys.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(Secret::new),
        );
    }
    let protect_metrics = if args.protect_metrics {
        true
    } else {
        var("MASSGEN_SERVER_PROTECT_METRICS").map_or(Ok(false), |v| {
            parse_bool("MASSGEN_SERVER_PROTECT_METRICS", &v)
        })?
    };
    let cors_origins: Vec<String> = args
        .cors_origins
        .clone()
        .or_else(|| var("MASSGEN_SERVER_CORS_ORIGINS"))
        .map(|list| split_list(&list).map(str::to_string).collect())
        .unwrap_or_default();
    let max_concurrent_sessions = number(
        args.max_sessions,
        "MASSGEN_SERVER_MAX_SESSIONS",
        var("MASSGEN_SERVER_MAX_SESSIONS"),
    )?;
    let rate_limit_per_minute = number(
        args.rate_limit_per_minute,
        "MASSGEN_SERVER_RATE_LIMIT_PER_MINUTE",
        var("MASSGEN_SERVER_RATE_LIMIT_PER_MINUTE"),
    )?;
    let rate_limit_burst = number(
        args.rate_limit_burst,
        "MASSGEN_SERVER_RATE_LIMIT_BURST",
        var("MASSGEN_SERVER_RATE_LIMIT_BURST"),
    )?;
    let max_upstream_calls = number(
        args.max_upstream_calls,
        "MASSGEN_SERVER_MAX_UPSTREAM_CALLS",
        var("MASSGEN_SERVER_MAX_UPSTREAM_CALLS"),
    )?;
    let header_timeout = number(
        args.header_timeout_seconds,
        "MASSGEN_SERVER_HEADER_TIMEOUT_SECONDS",
        var("MASSGEN_SERVER_HEADER_TIMEOUT_SECONDS"),
    )?;
    let records_max = number(
        args.records_max,
        "MASSGEN_SERVER_RECORDS_MAX",
        var("MASSGEN_SERVER_RECORDS_MAX"),
    )?;
    let records_age = number(
        args.records_max_age_seconds,
        "MASSGEN_SERVER_RECORDS_MAX_AGE_SECONDS",
        var("MASSGEN_SERVER_RECORDS_MAX_AGE_SECONDS"),
    )?;
    for (value, name) in [
        (
            max_concurrent_sessions.map(|v| u64::try_from(v).unwrap_or(u64::MAX)),
            "--max-sessions",
        ),
        (
            rate_limit_per_minute.map(u64::from),
            "--rate-limit-per-minute",
        ),
        (rate_limit_burst.map(u64::from), "--rate-limit-burst"),
        (max_upstream_calls.map(u64::from), "--max-upstream-calls"),
        (header_timeout, "--header-timeout-seconds"),
    ] {
        if value == Some(0) {
            return Err(Fatal::usage(format!("{name} must be at least 1")));
        }
    }
    Ok(ProductionSettings {
        api_keys,
        protect_metrics,
        cors_origins,
        max_concurrent_sessions,
        rate_limit_per_minute,
        rate_limit_burst,
        max_upstream_calls,
        header_read_timeout: header_timeout
            .map_or(defaults.header_read_timeout, Duration::from_secs),
        records_max_sessions: records_max.unwrap_or(defaults.records_max_sessions),
        records_max_age: records_age.map_or(defaults.records_max_age, Duration::from_secs),
        records_dir: args
            .records_dir
            .clone()
            .or_else(|| var("MASSGEN_SERVER_RECORDS_DIR").map(PathBuf::from)),
    })
}

fn split_list(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty())
}

fn parse_bool(name: &str, text: &str) -> Result<bool, Fatal> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(Fatal::usage(format!(
            "{name}: expected true or false, got '{text}'"
        ))),
    }
}

/// Loads the panels of `plan` and, with `--demo`, adds the demo panel on `mock_base_url`:
/// as the default when no `--config` was given, else as the named config `demo`.
pub fn build_catalog(
    plan: &ServePlan,
    mock_base_url: Option<&str>,
    env: &Env,
) -> Result<PanelCatalog, Fatal> {
    let mut catalog = load_catalog(
        plan.default_config.as_deref(),
        plan.configs_dir.as_deref(),
        env,
    )?;
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
    let debug = matches!(&cli.command, Command::Serve(a) if a.debug)
        || process_env("MASSGEN_SERVER_DEBUG").is_some_and(|v| parse_bool("", &v) == Ok(true));
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
    let settings = plan.settings;
    if let Some(name) = &settings.messages_default_panel
        && !catalog.named.contains_key(name)
    {
        let known: Vec<&String> = catalog.named.keys().collect();
        return Err(Fatal::usage(format!(
            "--messages-default-panel: no panel '{name}' (named panels: {known:?})"
        )));
    }
    let listener = bind(&settings.host, settings.port).await?;
    let addr = local_addr(&listener)?;
    let (config, agents) = match &catalog.default {
        Some(panel) => (panel.source.display().to_string(), describe_agents(panel)),
        None => ("none".to_string(), "[]".to_string()),
    };
    let named: Vec<&String> = catalog.named.keys().collect();
    tracing::info!(
        unavailable = catalog.unavailable.len(),
        "massgen listening on http://{addr} config={config} agents={agents} named={named:?}"
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
    let state = AppState::new(catalog, settings, providers, Arc::clone(&tools), env);
    let result = crate::server::serve(listener, state, stopped(stop_rx)).await;
    tools.shutdown().await;
    result.map_err(|e| Fatal::runtime(format!("server failed: {e:#}")))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn production_defaults_env_and_flags() {
        let none = resolve_production(&ProductionArgs::default(), &env_of(&[])).unwrap();
        assert_eq!(none, ProductionSettings::default());

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keys");
        std::fs::write(&file, "# ops keys\nk-file-1\n\n  k-file-2  \n").unwrap();
        let env = env_of(&[
            ("MASSGEN_SERVER_API_KEYS", " k-env-1 ,k-env-2,"),
            ("MASSGEN_SERVER_MAX_SESSIONS", "8"),
            ("MASSGEN_SERVER_RATE_LIMIT_PER_MINUTE", "60"),
            (
                "MASSGEN_SERVER_CORS_ORIGINS",
                "https://a.example, https://b.example",
            ),
            ("MASSGEN_SERVER_PROTECT_METRICS", "true"),
            ("MASSGEN_SERVER_RECORDS_DIR", "/var/log/massgen"),
        ]);
        let args = ProductionArgs {
            api_keys_file: Some(file),
            max_sessions: Some(2),
            max_upstream_calls: Some(40),
            header_timeout_seconds: Some(5),
            ..ProductionArgs::default()
        };
        let p = resolve_production(&args, &env).unwrap();
        let keys: Vec<&str> = p.api_keys.iter().map(Secret::expose).collect();
        assert_eq!(keys, ["k-env-1", "k-env-2", "k-file-1", "k-file-2"]);
        assert_eq!(p.max_concurrent_sessions, Some(2), "flag wins");
        assert_eq!(p.rate_limit_per_minute, Some(60));
        assert_eq!(p.max_upstream_calls, Some(40));
        assert_eq!(p.header_read_timeout, Duration::from_secs(5));
        assert_eq!(p.cors_origins, ["https://a.example", "https://b.example"]);
        assert!(p.protect_metrics);
        assert_eq!(p.records_dir, Some(PathBuf::from("/var/log/massgen")));
        assert!(!format!("{p:?}").contains("k-env-1"), "keys never print");
    }

    #[test]
    fn production_rejects_bad_values_without_echoing_keys() {
        let zero = ProductionArgs {
            max_sessions: Some(0),
            ..ProductionArgs::default()
        };
        assert_eq!(resolve_production(&zero, &env_of(&[])).unwrap_err().code, 2);
        let bad = env_of(&[("MASSGEN_SERVER_RATE_LIMIT_PER_MINUTE", "lots")]);
        let e = resolve_production(&ProductionArgs::default(), &bad).unwrap_err();
        assert!(
            e.message.contains("MASSGEN_SERVER_RATE_LIMIT_PER_MINUTE"),
            "{}",
            e.message
        );
        let missing = ProductionArgs {
            api_keys_file: Some(PathBuf::from("/nonexistent/keys")),
            ..ProductionArgs::default()
        };
        let e = resolve_production(&missing, &env_of(&[])).unwrap_err();
        assert!(e.message.contains("/nonexistent/keys"), "{}", e.message);
    }
}
