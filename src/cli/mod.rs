//! Command line: `massgen serve`, `mcp`, `eval`, `mock-upstream`, `healthcheck` and
//! `check-config`.
//!
//! Flags win over `MASSGEN_SERVER_*` variables (clap's `env`), which win over the defaults
//! (`flags`, from the settings' own `Default`; [`resolve_serve`] applies those that depend
//! on another flag). Stdout carries exactly one `… listening on http://ADDR` line (black-box
//! tests read it); logs go to stderr. Exit codes: 0 ok, 1 runtime failure, 2 usage or
//! config error.
//!
//! One file per job: `flags` (what clap reads), `values` (how a value is read), `resolve`
//! (flags to settings), `catalog` (where the panels come from), `commands` (what each
//! command runs), `eval` and `compare` (`massgen eval` and `eval compare`), `signals`
//! (shutdown), `fatal` (how a command fails).

mod catalog;
mod commands;
mod compare;
mod eval;
mod fatal;
mod flags;
mod mcp;
mod resolve;
mod signals;
mod values;

use std::path::Path;
use std::process::ExitCode;

use clap::Parser;

pub use catalog::{NO_CONFIG_HINT, build_catalog, describe_agents, printed_config};
pub use commands::check_report;
pub use fatal::Fatal;
pub use flags::{
    CheckConfigArgs, Cli, Command, EvalArgs, GraderName, HealthcheckArgs, McpArgs,
    MockUpstreamArgs, ProductionArgs, ServeArgs,
};
pub use resolve::{ServePlan, resolve_production, resolve_serve};

use crate::config::process_env;

pub fn main() -> ExitCode {
    // Before any thread exists: dotenvy sets process variables. Real variables win.
    let dotenv = load_dotenv();
    let cli = Cli::parse();
    // `serve` reads MASSGEN_SERVER_DEBUG through clap; the other commands log alike.
    let debug = matches!(&cli.command, Command::Serve(a) if a.debug)
        || process_env("MASSGEN_SERVER_DEBUG").is_some_and(|v| values::switch(&v) == Some(true));
    // `massgen eval` prints its own progress: the sessions' own lines only with --verbose.
    let quiet = matches!(&cli.command, Command::Eval(a) if !a.verbose);
    let default_filter = match (debug, quiet) {
        (true, _) => "debug",
        (false, true) => "warn,rmcp=warn",
        (false, false) => "info,rmcp=warn",
    };
    let telemetry = crate::telemetry::init(default_filter, &process_env);
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
        Command::Serve(args) => runtime.block_on(commands::serve(args)),
        Command::MockUpstream(args) => runtime.block_on(commands::mock_upstream(args)),
        Command::Healthcheck(args) => runtime.block_on(commands::healthcheck(args)),
        Command::CheckConfig(args) => commands::check_config(&args, &process_env),
        Command::Mcp(args) => runtime.block_on(mcp::run(args)),
        Command::Eval(EvalArgs {
            action: Some(flags::EvalAction::Compare(args)),
            ..
        }) => compare::run(&args),
        Command::Eval(args) => runtime.block_on(eval::eval(args)),
    };
    // Outside the runtime: the OTLP exporter's client blocks.
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(fatal) => fail(&fatal),
    }
}

fn fail(fatal: &Fatal) -> ExitCode {
    if !fatal.message.is_empty() {
        eprintln!("massgen: error: {}", fatal.message);
    }
    ExitCode::from(fatal.code)
}

fn load_dotenv() -> Result<(), dotenvy::Error> {
    let path = Path::new(".env");
    if path.is_file() {
        dotenvy::from_path(path)?;
    }
    Ok(())
}
