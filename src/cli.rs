//! Command line: `massgen serve` and `massgen mock-upstream`.
//!
//! Flags win over `MASSGEN_SERVER_*` variables, which win over defaults; [`resolve_serve`]
//! does that merge with an injected environment so it is unit-tested without the process env.
//! Stdout carries exactly one `… listening on http://ADDR` line (black-box tests read it);
//! logs go to stderr. Exit codes: 0 ok, 1 runtime failure, 2 usage or config error.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::providers::HttpProviders;
use crate::server::AppState;
use clap::{Args, Parser, Subcommand};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::{
    ConfigError, Env, PanelCatalog, PanelConfig, ServerSettings, demo_panel, load_catalog,
    process_env,
};

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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the OpenAI-compatible API (POST /v1/chat/completions, GET /v1/models).
    Serve(ServeArgs),
    /// Run the simulated OpenAI-compatible model server (behaviour chosen by model name).
    MockUpstream(MockUpstreamArgs),
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
    init_logging(debug);
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
    };
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

fn init_logging(debug: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(if debug { "debug" } else { "info" }));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && process_env("NO_COLOR").is_none());
    let json = process_env("MASSGEN_LOG_FORMAT").is_some_and(|f| f.eq_ignore_ascii_case("json"));
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

async fn serve(args: ServeArgs) -> Result<(), Fatal> {
    let plan = resolve_serve(&args, &process_env)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let mock_url = if plan.demo {
        let listener = bind("127.0.0.1", 0).await?;
        let addr = local_addr(&listener)?;
        let stop = stopped(stop_rx.clone());
        tokio::spawn(async move {
            if let Err(e) = crate::mock_upstream::serve(listener, stop).await {
                tracing::error!("demo mock upstream failed: {e}");
            }
        });
        Some(format!("http://{addr}/v1"))
    } else {
        None
    };
    let catalog = build_catalog(&plan, mock_url.as_deref(), &process_env)?;
    let settings = plan.settings;
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
    let http = crate::providers::chat_completions::http_client()
        .map_err(|e| Fatal::runtime(format!("cannot build the HTTP client: {e}")))?;
    let env: Arc<Env> = Arc::new(process_env);
    // MCP servers start now, in the background; a session that needs one first waits.
    let mcp = crate::tools::servers_of(&catalog);
    tokio::spawn(crate::tools::ToolRegistry::global().start_all(mcp));
    let state = AppState::new(catalog, settings, Arc::new(HttpProviders::new(http)), env);
    let result = crate::server::serve(listener, state, stopped(stop_rx)).await;
    crate::tools::ToolRegistry::global().shutdown().await;
    result.map_err(|e| Fatal::runtime(format!("server failed: {e:#}")))
}

async fn mock_upstream(args: MockUpstreamArgs) -> Result<(), Fatal> {
    let listener = bind(&args.host, args.port).await?;
    let addr = local_addr(&listener)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    spawn_signal_watcher(stop_tx)?;
    tracing::info!("mock-upstream listening on http://{addr}");
    announce(&format!("mock-upstream listening on http://{addr}"));
    crate::mock_upstream::serve(listener, stopped(stop_rx))
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
