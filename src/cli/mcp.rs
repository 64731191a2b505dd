//! `massgen mcp`: the MCP door over stdin and stdout, for clients that launch a command
//! (Claude Desktop, Claude Code's stdio servers, Cursor, Codex CLI). The panels come from
//! where `serve` finds them; stdout carries MCP only, logs go to stderr.

use std::sync::Arc;

use tokio::sync::watch;

use super::catalog::build_catalog;
use super::commands::{demo_upstream, start_tools};
use super::fatal::Fatal;
use super::flags::McpArgs;
use super::resolve::ServePlan;
use super::signals::{spawn_signal_watcher, stopped};
use crate::app::App;
use crate::app::HttpProviders;
use crate::config::{Env, ServerSettings, process_env};
use crate::server::doors::mcp;

pub(super) async fn run(args: McpArgs) -> Result<(), Fatal> {
    let mut settings = ServerSettings::default();
    if let Some(usd) = args.max_session_cost_usd {
        if !(usd.is_finite() && usd > 0.0) {
            return Err(Fatal::usage(format!(
                "--max-session-cost-usd must be above 0, got {usd}"
            )));
        }
        settings.production.max_session_cost_usd = Some(usd);
    }
    if args.mcp_deadline_seconds == 0 {
        return Err(Fatal::usage("--mcp-deadline-seconds must be at least 1"));
    }
    settings.mcp_deadline = std::time::Duration::from_secs(args.mcp_deadline_seconds);
    let plan = ServePlan {
        settings,
        default_config: args.config.filter(|p| !p.as_os_str().is_empty()),
        configs_dir: args.configs_dir.filter(|p| !p.as_os_str().is_empty()),
        demo: args.demo,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let mock_url = demo_upstream(plan.demo, &stop_rx).await?;
    let catalog = build_catalog(&plan, mock_url.as_deref(), &process_env)?;
    let panels = crate::app::panels::model_ids(&catalog);
    tracing::info!(?panels, "massgen mcp: serving MCP on stdin/stdout");
    spawn_signal_watcher(stop_tx)?;
    let http = massgen_providers::http_client()
        .map_err(|e| Fatal::runtime(format!("cannot build the HTTP client: {e}")))?;
    let tools = start_tools(&catalog);
    let env: Arc<Env> = Arc::new(process_env);
    let app = Arc::new(App::in_memory(
        catalog,
        plan.settings,
        Arc::new(HttpProviders::new(http)),
        Arc::clone(&tools),
        env,
    ));
    let result = mcp::serve_stdio(Arc::clone(&app), stopped(stop_rx)).await;
    // The client is gone: what still runs has nobody to answer.
    app.shutdown().await;
    tools.shutdown().await;
    result.map_err(|e| Fatal::runtime(format!("{e:#}")))
}
