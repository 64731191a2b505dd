//! `massgen eval`: the flags checked (every problem before any upstream call), the panels
//! found where `serve` finds them, the server's state built as `serve` builds it, the run
//! ([`crate::eval::run`]), and the report's table on stdout.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use super::catalog::build_catalog;
use super::commands::start_tools;
use super::fatal::Fatal;
use super::flags::{EvalArgs, GraderName};
use super::resolve::ServePlan;
use super::signals::Signals;
use crate::app::{App, AppParts};
use crate::app::{Caller, HttpProviders, KeyId, Owner};
use crate::config::{Env, PanelCatalog, PanelConfig, RecordsDb, ServerSettings, process_env};
use crate::eval::arms::{self, Baselines, Variant};
use crate::eval::grade::Grader;
use crate::eval::run::{Interrupt, Plan, run};

/// Sessions in flight at most: each holds its agents' upstream connections and its events.
const MAX_CONCURRENCY: usize = 1024;

/// The answer format the exact, regex and numeric graders read best.
pub const DEFAULT_INSTRUCTION: &str =
    "End your reply with a final line of the form `Answer: <answer>`.";

pub(super) async fn eval(args: EvalArgs) -> Result<(), Fatal> {
    let mut settings = ServerSettings::default();
    if let Some(url) = args.records_db.as_deref().filter(|u| !u.trim().is_empty()) {
        settings.production.records_db =
            RecordsDb::parse(url).map_err(|e| Fatal::usage(format!("--records-db: {e}")))?;
    }
    // The per-session limits of `serve` (its HTTP-side ones have nothing to limit here).
    if let Some(usd) = args.max_session_cost_usd {
        if !(usd.is_finite() && usd > 0.0) {
            return Err(Fatal::usage(format!(
                "--max-session-cost-usd must be above 0, got {usd}"
            )));
        }
        settings.production.max_session_cost_usd = Some(usd);
    }
    if let Some(calls) = args.max_upstream_calls {
        if calls == 0 {
            return Err(Fatal::usage("--max-upstream-calls must be at least 1"));
        }
        settings.production.max_upstream_calls = Some(calls);
    }
    let plan = ServePlan {
        settings,
        default_config: args.config.clone().filter(|p| !p.as_os_str().is_empty()),
        configs_dir: args
            .configs_dir
            .clone()
            .filter(|p| !p.as_os_str().is_empty()),
        demo: false,
    };
    let catalog = build_catalog(&plan, None, &process_env)?;
    let env: Arc<Env> = Arc::new(process_env);
    let grader = grader(&args)?;
    let items = crate::eval::data::read(&args.data, grader.needs_answer()).map_err(Fatal::usage)?;
    grader
        .check(&items)
        .map_err(|e| Fatal::usage(format!("--data {}: {e}", args.data.display())))?;
    let panels = panels(&args.panels, &catalog)?;
    let arms = arms::arms(
        &panels,
        &variants(args.variants.as_deref())?,
        baselines(&args)?,
    )
    .map_err(Fatal::usage)?;
    let judge = match (&grader, &args.judge) {
        (Grader::Judge, Some(judge)) => Some(Arc::new(judge_panel(judge, &catalog, env.as_ref())?)),
        (Grader::Judge, None) => {
            return Err(Fatal::usage(
                "--grader judge needs --judge: a panel config file, or a panel's name",
            ));
        }
        (_, Some(_)) => {
            return Err(Fatal::usage("--judge is read by --grader judge only"));
        }
        (_, None) => None,
    };
    if !(1..=MAX_CONCURRENCY).contains(&args.concurrency) {
        return Err(Fatal::usage(format!(
            "--concurrency must be from 1 to {MAX_CONCURRENCY}, got {}",
            args.concurrency
        )));
    }
    if let Some(usd) = args.max_cost_usd {
        if !(usd.is_finite() && usd > 0.0) {
            return Err(Fatal::usage(format!(
                "--max-cost-usd must be above 0, got {usd}"
            )));
        }
        let calls = arms
            .panels
            .iter()
            .map(|a| &a.panel)
            .chain(arms.agents.iter().map(|a| &a.panel))
            .chain(judge.iter());
        for panel in calls {
            if let Some(agent) = panel.agents.iter().find(|a| a.backend.price.is_none()) {
                return Err(Fatal::usage(format!(
                    "--max-cost-usd: agent '{}' of panel '{}' has no price for model '{}', so the budget could not be kept: set its backend.pricing",
                    agent.id, panel.name, agent.backend.model
                )));
            }
        }
    }
    // Self-consistency counts the `Answer:` lines, so the judge's arms get it too; the
    // JSON Schema grader's answers are the JSON itself.
    let instruction = match (&args.instruction, &grader) {
        (Some(text), _) => Some(text.clone()).filter(|t| !t.trim().is_empty()),
        (None, Grader::JsonSchema { .. }) => None,
        (None, _) => Some(DEFAULT_INSTRUCTION.to_string()),
    };
    let schema = match &grader {
        Grader::JsonSchema { schema, .. } => Some(schema.clone()),
        _ => None,
    };
    let inputs = items
        .iter()
        .map(|item| crate::eval::session::input(item, instruction.as_deref(), schema.as_ref()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Fatal::usage(format!("--data {}: {e}", args.data.display())))?;
    let settings_key = format!(
        "{} tolerance={} relative={} schema={} judge={} instruction={:?}",
        grader.name(),
        tolerance(&args),
        relative_tolerance(&args),
        schema.as_ref().map(ToString::to_string).unwrap_or_default(),
        judge
            .as_deref()
            .map(crate::eval::resume::comparable)
            .unwrap_or_default(),
        instruction
    );
    // As `serve` does: every session holds a descriptor per HTTP/1.1 agent.
    let _ = crate::app::descriptors::raise_open_file_limit();
    let records = crate::app::store::RecordStore::open(&plan.settings.production, false)
        .await
        .map_err(|e| Fatal::usage(format!("--records-db / MASSGEN_SERVER_RECORDS_DB: {e}")))?;
    let http = massgen_providers::http_client()
        .map_err(|e| Fatal::runtime(format!("cannot build the HTTP client: {e}")))?;
    let interrupt = watch_signals()?;
    let tools = start_tools(&catalog);
    let app = Arc::new(App::new(AppParts {
        catalog,
        settings: plan.settings,
        providers: Arc::new(HttpProviders::new(http)),
        tools: Arc::clone(&tools),
        env,
        clock: Arc::new(massgen_core::coordination::SystemClock),
        records,
    }));
    let finished = run(
        app,
        Plan {
            data: args.data.display().to_string(),
            items,
            arms,
            grader,
            judge,
            instruction,
            concurrency: args.concurrency,
            max_cost_usd: args.max_cost_usd,
            out: args.out.clone(),
            caller: caller(),
            inputs,
            settings: settings_key,
            interrupt,
        },
    )
    .await
    .map_err(Fatal::runtime)?;
    tools.shutdown().await;
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", finished.markdown);
    let _ = writeln!(out, "\nFiles: {}", args.out.display());
    let _ = out.flush();
    Ok(())
}

/// Ctrl-C (or SIGTERM) stops new items; the running ones finish and the report is
/// written. A second one, or one once every item has ended, exits at once: what
/// `items.jsonl` holds stays, and a rerun continues. The handler stays installed for the
/// process's life, so no signal is lost while the run writes its report.
fn watch_signals() -> Result<Arc<Interrupt>, Fatal> {
    let mut signals =
        Signals::install().map_err(|e| Fatal::runtime(format!("cannot listen for Ctrl-C: {e}")))?;
    let interrupt = Arc::new(Interrupt::default());
    let asked = Arc::clone(&interrupt);
    tokio::spawn(async move {
        signals.next().await;
        if asked.ask() {
            std::process::exit(130);
        }
        eprintln!(
            "eval: interrupted: no new items; the running ones finish and the report is written \
             (Ctrl-C again to quit now; a rerun with the same --out continues)"
        );
        signals.next().await;
        std::process::exit(130);
    });
    Ok(interrupt)
}

/// `MASSGEN_EVAL_KEY`: the API key whose owner the run and its sessions are filed under,
/// so a server with keys shows them to that key (an environment variable only: keys do
/// not belong on a command line). The key itself is never stored.
fn caller() -> Caller {
    match process_env("MASSGEN_EVAL_KEY").filter(|k| !k.trim().is_empty()) {
        Some(key) => Caller {
            key: Some(KeyId::new(0, Owner::of_key(key.trim()))),
        },
        None => Caller::default(),
    }
}

fn grader(args: &EvalArgs) -> Result<Grader, Fatal> {
    if args.schema.is_some() && args.grader != GraderName::JsonSchema {
        return Err(Fatal::usage(
            "--schema is read by --grader json-schema only",
        ));
    }
    let numeric = args.tolerance.is_some() || args.relative_tolerance.is_some();
    if numeric && args.grader != GraderName::Numeric {
        return Err(Fatal::usage(
            "--tolerance and --relative-tolerance are read by --grader numeric only",
        ));
    }
    Ok(match args.grader {
        GraderName::Exact => Grader::Exact,
        GraderName::Regex => Grader::Regex,
        GraderName::Judge => Grader::Judge,
        GraderName::Numeric => {
            for (flag, value) in [
                ("--tolerance", tolerance(args)),
                ("--relative-tolerance", relative_tolerance(args)),
            ] {
                if !(value.is_finite() && value >= 0.0) {
                    return Err(Fatal::usage(format!(
                        "{flag} must be 0 or more, got {value}"
                    )));
                }
            }
            Grader::Numeric {
                absolute: tolerance(args),
                relative: relative_tolerance(args),
            }
        }
        GraderName::JsonSchema => {
            let Some(path) = &args.schema else {
                return Err(Fatal::usage(
                    "--grader json-schema needs --schema FILE (a JSON Schema)",
                ));
            };
            let text = read_small(path, "--schema")?;
            Grader::json_schema(&text)
                .map_err(|e| Fatal::usage(format!("--schema {}: {e}", path.display())))?
        }
    })
}

/// A small regular file's text (a FIFO or a device is refused before it is opened).
fn read_small(path: &Path, flag: &str) -> Result<String, Fatal> {
    const LIMIT: u64 = 1024 * 1024;
    crate::eval::regular::read(path, crate::eval::regular::Links::Follow, LIMIT)
        .map_err(|e| Fatal::usage(format!("{flag} {}: {e}", path.display())))
}

/// The numeric grader's absolute tolerance: what `--tolerance` says, else 1e-6.
fn tolerance(args: &EvalArgs) -> f64 {
    args.tolerance.unwrap_or(1e-6)
}

fn relative_tolerance(args: &EvalArgs) -> f64 {
    args.relative_tolerance.unwrap_or(0.0)
}

/// Self-consistency samples when `--samples` is not given.
const DEFAULT_SAMPLES: u32 = 5;

fn baselines(args: &EvalArgs) -> Result<Baselines, Fatal> {
    let samples = args.samples.unwrap_or(DEFAULT_SAMPLES);
    let mut baselines = Baselines {
        agents: false,
        self_consistency: None,
    };
    for word in args
        .baselines
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
    {
        match word {
            "agents" => baselines.agents = true,
            "self-consistency" | "sc" => baselines.self_consistency = Some(samples),
            "none" => {}
            other => {
                return Err(Fatal::usage(format!(
                    "--baselines: unknown baseline '{other}' (agents, self-consistency, none)"
                )));
            }
        }
    }
    if args.samples.is_some() && baselines.self_consistency.is_none() {
        return Err(Fatal::usage(
            "--samples is read by the self-consistency baseline only (--baselines self-consistency)",
        ));
    }
    if baselines.self_consistency.is_some() && samples < 2 {
        return Err(Fatal::usage(format!(
            "--samples must be at least 2 for self-consistency, got {samples}"
        )));
    }
    if samples > 64 {
        return Err(Fatal::usage(format!(
            "--samples is at most 64, got {samples}"
        )));
    }
    Ok(baselines)
}

fn variants(list: Option<&str>) -> Result<Vec<Variant>, Fatal> {
    let mut out = Vec::new();
    for word in list.unwrap_or_default().split(',').map(str::trim) {
        if word.is_empty() {
            continue;
        }
        let variant = Variant::parse(word).map_err(Fatal::usage)?;
        if !out.contains(&variant) {
            out.push(variant);
        }
    }
    Ok(out)
}

/// The panels named by `--panel`, or the default one.
fn panels(names: &[String], catalog: &PanelCatalog) -> Result<Vec<Arc<PanelConfig>>, Fatal> {
    if names.is_empty() {
        return catalog
            .default
            .clone()
            .map(|p| vec![p])
            .ok_or_else(|| Fatal::usage(super::catalog::NO_CONFIG_HINT));
    }
    names.iter().map(|name| named(name, catalog)).collect()
}

fn named(name: &str, catalog: &PanelCatalog) -> Result<Arc<PanelConfig>, Fatal> {
    let found = if name == "default" {
        catalog.default.clone()
    } else {
        catalog.named.get(name).cloned()
    };
    found.ok_or_else(|| {
        let known: Vec<&String> = catalog.named.keys().collect();
        let why = catalog
            .unavailable
            .get(name)
            .map(|why| format!(": it failed to load: {why}"))
            .unwrap_or_default();
        Fatal::usage(format!(
            "no panel '{name}'{why} (named panels in --configs-dir: {known:?}; `default` is the default panel)"
        ))
    })
}

/// `--judge`: a config file, else a panel's name. A one-agent judge answers in one call.
fn judge_panel(judge: &str, catalog: &PanelCatalog, env: &Env) -> Result<PanelConfig, Fatal> {
    let path = Path::new(judge);
    let panel = if path.is_file() {
        crate::config::load_panel(path, env)
            .map_err(|e| Fatal::usage(format!("--judge {judge}: {e}")))?
    } else {
        let panel = named(judge, catalog)
            .map_err(|e| Fatal::usage(format!("--judge: not a file, and {}", e.message)))?;
        PanelConfig::clone(&panel)
    };
    Ok(if panel.agents.len() == 1 {
        arms::alone(&panel, 0)
    } else {
        panel
    })
}
