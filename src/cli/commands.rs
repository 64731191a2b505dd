//! What each command runs: `serve`, `mock-upstream`, `healthcheck` and `check-config`.
//! Stdout carries exactly one `… listening on http://ADDR` line (black-box tests read it);
//! logs go to stderr.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use massgen_tools::ToolRegistry;
use massgen_tools::rmcp_client::RmcpConnector;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::catalog::{build_catalog, check_default_model, describe_agents, printed_config};
use super::fatal::Fatal;
use super::flags::{CheckConfigArgs, HealthcheckArgs, MockUpstreamArgs, ServeArgs};
use super::resolve::resolve_serve;
use super::signals::{spawn_signal_watcher, stopped};
use crate::app::HttpProviders;
use crate::app::{App, AppParts};
use crate::config::{AUTO_SOURCE, Env, ServerSettings, check_panel, process_env};
use crate::server::AppState;

pub(super) async fn serve(args: ServeArgs) -> Result<(), Fatal> {
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
    // First: everything after (the records database, the listener, the upstream pools)
    // opens its files under the raised limit, and the budget is cut from it.
    let open_files = crate::app::descriptors::raise_open_file_limit();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mock_url = demo_upstream(plan.demo, &stop_rx).await?;
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
    let records = crate::app::store::RecordStore::open(&settings.production, true)
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
    let tools = start_tools(&catalog);
    let providers = Arc::new(HttpProviders::new(http));
    if let Some(limit) = open_files {
        // Before the state: its session permits and the accept loop read the budget.
        let layout = crate::app::descriptors::Layout::of(&catalog, &settings, plan.demo);
        crate::app::descriptors::install(&layout, limit, catalog.default.as_deref());
    }
    let app = App::new(AppParts {
        catalog,
        settings,
        providers,
        tools: Arc::clone(&tools),
        env,
        clock: Arc::new(massgen_core::coordination::SystemClock),
        records,
    });
    let state = AppState::new(Arc::new(app));
    let result = crate::server::serve(listener, state, stopped(stop_rx)).await;
    tools.shutdown().await;
    result.map_err(|e| Fatal::runtime(format!("server failed: {e:#}")))
}

/// With `--demo`, the simulated upstream on a loopback port until `stop` (its `/v1` URL).
pub(super) async fn demo_upstream(
    demo: bool,
    stop: &watch::Receiver<bool>,
) -> Result<Option<String>, Fatal> {
    if !demo {
        return Ok(None);
    }
    let listener = bind("127.0.0.1", 0).await?;
    let addr = local_addr(&listener)?;
    let stop = stopped(stop.clone());
    tokio::spawn(async move {
        if let Err(e) = massgen_simulator::serve(listener, stop).await {
            tracing::error!("demo mock upstream failed: {e}");
        }
    });
    Ok(Some(format!("http://{addr}/v1")))
}

/// The process's MCP servers, held in the state; they start now, in the background, and a
/// session that needs one first waits.
pub(super) fn start_tools(catalog: &crate::config::PanelCatalog) -> Arc<ToolRegistry> {
    let tools = Arc::new(ToolRegistry::new(Arc::new(RmcpConnector)));
    let servers = crate::app::servers_of(catalog);
    tokio::spawn({
        let tools = Arc::clone(&tools);
        async move { tools.start_all(servers).await }
    });
    tools
}

/// `massgen check-config FILE…`: every error and warning of each file on stdout, one a
/// line (`error: FILE: KEY: problem`, `warning: FILE: KEY: why`).
pub(super) fn check_config(args: &CheckConfigArgs, env: &Env) -> Result<(), Fatal> {
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

pub(super) async fn healthcheck(args: HealthcheckArgs) -> Result<(), Fatal> {
    let url = args.url.unwrap_or_else(|| {
        let port = process_env("MASSGEN_SERVER_PORT")
            .unwrap_or_else(|| ServerSettings::default().port.to_string());
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

pub(super) async fn mock_upstream(args: MockUpstreamArgs) -> Result<(), Fatal> {
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
