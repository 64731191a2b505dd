//! `massgen eval`: the flags checked (every problem before any upstream call), the panels
//! found where `serve` finds them (or the demo's, on a simulator started here), the
//! server's state built as `serve` builds it, the run ([`crate::eval::run`]), the report's
//! table on stdout, and the exit code saying how the run ended (0 complete, 3 budget, 4
//! failures, 130 Ctrl-C; 2 usage, 1 a failure while running).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use super::catalog::{NO_CONFIG_HINT, build_catalog};
use super::commands::{demo_upstream, start_tools};
use super::fatal::Fatal;
use super::flags::{EvalArgs, GraderName};
use super::resolve::ServePlan;
use super::signals::Signals;
use crate::app::evals::ArmInfo;
use crate::app::{App, AppParts};
use crate::app::{Caller, HttpProviders, KeyId, Owner};
use crate::config::{Env, PanelCatalog, PanelConfig, RecordsDb, ServerSettings, process_env};
use crate::eval::arms::{self, Arms, Baselines, Variant};
use crate::eval::data::Item;
use crate::eval::grade::Grader;
use crate::eval::progress;
use crate::eval::run::{Interrupt, Plan, run};
use crate::eval::stop::{Ending, FailureRule};

/// Sessions in flight at most: each holds its agents' upstream connections and its events.
const MAX_CONCURRENCY: usize = 1024;

/// The answer format the exact, regex and numeric graders read best.
pub const DEFAULT_INSTRUCTION: &str =
    "End your reply with a final line of the form `Answer: <answer>`.";

/// What the run measures, and on what: the items and the arms that answer them (asked
/// anew), or a run's stored answers (graded again).
struct Measured {
    data: String,
    items: Vec<Item>,
    arms: Arms,
    infos: Vec<ArmInfo>,
    out: PathBuf,
}

pub(super) async fn eval(args: EvalArgs) -> Result<(), Fatal> {
    check_modes(&args)?;
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
    let failures = failure_rule(&args)?;
    if !(1..=MAX_CONCURRENCY).contains(&args.concurrency) {
        return Err(Fatal::usage(format!(
            "--concurrency must be from 1 to {MAX_CONCURRENCY}, got {}",
            args.concurrency
        )));
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
    let env: Arc<Env> = Arc::new(process_env);
    let grader = grader(&args)?;
    // The demo's simulator answers until the run ends (its sender is dropped then).
    let (_stop_demo, demo_stopped) = watch::channel(false);
    let demo_url = demo_upstream(args.demo, &demo_stopped).await?;
    // Only `--judge NAME` needs the catalog when the panel is the demo's, or none is.
    let needs_catalog = !(args.demo || args.regrade)
        || args
            .judge
            .as_deref()
            .is_some_and(|j| !Path::new(j).is_file());
    let catalog = if needs_catalog {
        build_catalog(&plan, None, &process_env).map_err(eval_hint)?
    } else {
        PanelCatalog::default()
    };
    let measured = match (&demo_url, args.regrade) {
        (_, true) => stored(&args, &grader)?,
        (Some(url), false) => asked(
            &args,
            &grader,
            vec![Arc::new(crate::eval::demo::panel(url))],
        )?,
        (None, false) => asked(&args, &grader, panels(&args.panels, &catalog)?)?,
    };
    if let Some(key) = &args.group_by {
        crate::eval::data::check_group_key(&measured.items, key).map_err(Fatal::usage)?;
    }
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
    if let Some(usd) = args.max_cost_usd {
        if !(usd.is_finite() && usd > 0.0) {
            return Err(Fatal::usage(format!(
                "--max-cost-usd must be above 0, got {usd}"
            )));
        }
        let calls = measured
            .arms
            .panels
            .iter()
            .map(|a| &a.panel)
            .chain(measured.arms.agents.iter().map(|a| &a.panel))
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
    let inputs = if args.regrade {
        Vec::new()
    } else {
        measured
            .items
            .iter()
            .map(|item| crate::eval::session::input(item, instruction.as_deref(), schema.as_ref()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Fatal::usage(format!("{}: {e}", measured.data)))?
    };
    let schema_text = schema.as_ref().map(ToString::to_string).unwrap_or_default();
    let asked = format!("instruction={instruction:?} schema={schema_text}");
    let grading = format!(
        "{} tolerance={} relative={} schema={schema_text} judge={}",
        grader.name(),
        tolerance(&args),
        relative_tolerance(&args),
        judge
            .as_deref()
            .map(crate::eval::resume::comparable)
            .unwrap_or_default(),
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
    let out = measured.out.clone();
    let finished = run(
        app,
        Plan {
            data: measured.data,
            items: measured.items,
            arms: measured.arms,
            infos: measured.infos,
            grader,
            judge,
            concurrency: args.concurrency,
            max_cost_usd: args.max_cost_usd,
            failures,
            group_by: args.group_by.clone(),
            out: out.clone(),
            caller: caller(),
            inputs,
            asked,
            grading,
            regrade_only: args.regrade,
            interrupt,
        },
    )
    .await
    .map_err(Fatal::runtime)?;
    tools.shutdown().await;
    let mut stdout = std::io::stdout().lock();
    let _ = write!(stdout, "{}", finished.markdown);
    let _ = writeln!(stdout, "\nFiles: {}", out.display());
    let _ = stdout.flush();
    if let Some(stopped) = &finished.report.run.stopped {
        let error = stopped
            .most_common_error
            .as_deref()
            .map(|e| format!(" Most common error: {e}"))
            .unwrap_or_default();
        progress::say(&format!("eval: stopped: {}{error}", stopped.message));
    }
    match finished.ending {
        Ending::Complete => Ok(()),
        ending => Err(Fatal::quiet(ending.exit_code())),
    }
}

/// Which flags go together: `--regrade` asks nothing, so it takes no data or panel
/// flags; `--demo` measures its own panel; the others need `--data` and `--out`.
fn check_modes(args: &EvalArgs) -> Result<(), Fatal> {
    if args.regrade {
        let asking = [
            ("--data", args.data.is_some()),
            ("--demo", args.demo),
            ("--panel", !args.panels.is_empty()),
            ("--baselines", args.baselines.is_some()),
            ("--samples", args.samples.is_some()),
            ("--variants", args.variants.is_some()),
            ("--instruction", args.instruction.is_some()),
            ("--limit", args.limit.is_some()),
            ("--shuffle", args.shuffle),
            ("--seed", args.seed.is_some()),
        ];
        if let Some((flag, _)) = asking.iter().find(|(_, given)| *given) {
            return Err(Fatal::usage(format!(
                "--regrade grades the answers --out keeps, as they were asked: {flag} would \
                 ask anew (rerun without --regrade for that)"
            )));
        }
        if args.out.is_none() {
            return Err(Fatal::usage(
                "--regrade needs --out: the folder of the run to grade again",
            ));
        }
        return Ok(());
    }
    if args.demo && !args.panels.is_empty() {
        return Err(Fatal::usage(
            "--demo measures the demo's simulated panel: give --panel without --demo",
        ));
    }
    if args.data.is_none() && !args.demo {
        return Err(Fatal::usage(
            "--data FILE is needed (the questions, JSONL); or try `massgen eval --demo` \
             (simulated agents and bundled questions, no key)",
        ));
    }
    if args.out.is_none() && !args.demo {
        return Err(Fatal::usage(
            "--out DIR is needed (where the run's files go; a rerun with it continues)",
        ));
    }
    if args.seed.is_some() && !args.shuffle {
        return Err(Fatal::usage("--seed is read by --shuffle only"));
    }
    Ok(())
}

/// The items of `--data` (or the demo's) as `--shuffle` and `--limit` choose them, asked
/// of `panels`' arms.
fn asked(
    args: &EvalArgs,
    grader: &Grader,
    panels: Vec<Arc<PanelConfig>>,
) -> Result<Measured, Fatal> {
    let (data, mut items) = match &args.data {
        Some(path) => (
            path.display().to_string(),
            crate::eval::data::read(path, grader.needs_answer()).map_err(Fatal::usage)?,
        ),
        None => (
            crate::eval::demo::DATA.to_string(),
            crate::eval::data::parse(crate::eval::demo::QUESTIONS, grader.needs_answer())
                .map_err(|e| Fatal::usage(format!("{}: {e}", crate::eval::demo::DATA)))?,
        ),
    };
    grader
        .check(&items)
        .map_err(|e| Fatal::usage(format!("--data {data}: {e}")))?;
    if args.shuffle {
        crate::eval::data::shuffle(&mut items, args.seed.unwrap_or(0));
    }
    if let Some(limit) = args.limit {
        if limit == 0 {
            return Err(Fatal::usage("--limit must be at least 1"));
        }
        items.truncate(limit);
    }
    let arms = arms::arms(
        &panels,
        &variants(args.variants.as_deref())?,
        baselines(args)?,
    )
    .map_err(Fatal::usage)?;
    let infos = arms.infos();
    let out = match &args.out {
        Some(out) => out.clone(),
        // A new folder each time: the demo's simulator is new each time too.
        None => std::env::temp_dir().join(format!(
            "massgen-eval-demo-{}",
            uuid::Uuid::now_v7().simple()
        )),
    };
    Ok(Measured {
        data,
        items,
        arms,
        infos,
        out,
    })
}

/// `--regrade`: the items and arms of the run `--out` keeps, as its lines describe them.
fn stored(args: &EvalArgs, grader: &Grader) -> Result<Measured, Fatal> {
    let Some(out) = args.out.clone() else {
        return Err(Fatal::usage("--regrade needs --out"));
    };
    let previous = crate::eval::files::OutDir::read(&out).map_err(Fatal::usage)?;
    let Some(run) = previous.run else {
        return Err(Fatal::usage(format!(
            "--regrade: {} holds no run to grade again (no {}): run massgen eval with --data \
             and --out first",
            out.display(),
            crate::eval::files::RUN_FILE
        )));
    };
    let lines = format!(
        "--out {}: {}",
        out.display(),
        crate::eval::files::ITEMS_FILE
    );
    let items = crate::eval::data::from_results(&previous.items)
        .map_err(|e| Fatal::usage(format!("{lines}: {e}")))?;
    if items.is_empty() {
        return Err(Fatal::usage(format!(
            "--regrade: {lines} holds no graded item yet"
        )));
    }
    if let Some(name) = grader.needs_answer() {
        crate::eval::data::check_references(&items, name)
            .map_err(|e| Fatal::usage(format!("{lines}: {e}")))?;
    }
    grader
        .check(&items)
        .map_err(|e| Fatal::usage(format!("{lines}: {e}")))?;
    Ok(Measured {
        data: run.data,
        items,
        arms: Arms {
            panels: Vec::new(),
            agents: Vec::new(),
        },
        infos: run.arms,
        out,
    })
}

/// `--max-failures N` and `--max-failure-rate R`.
fn failure_rule(args: &EvalArgs) -> Result<FailureRule, Fatal> {
    let mut rule = FailureRule::default();
    if let Some(first) = args.max_failures {
        if first == 0 {
            return Err(Fatal::usage("--max-failures must be at least 1"));
        }
        rule.first = first;
    }
    if let Some(rate) = args.max_failure_rate {
        if !(rate.is_finite() && (0.0..=1.0).contains(&rate)) {
            return Err(Fatal::usage(format!(
                "--max-failure-rate must be from 0 to 1, got {rate}"
            )));
        }
        rule.rate = rate;
    }
    Ok(rule)
}

/// The catalog's "no panel" error, naming eval's own way to try it without one.
fn eval_hint(fatal: Fatal) -> Fatal {
    if fatal.message != NO_CONFIG_HINT {
        return fatal;
    }
    Fatal::usage(NO_CONFIG_HINT.replace(
        "or --demo to try it with simulated agents",
        "or run `massgen eval --demo` to try eval with simulated agents and bundled questions",
    ))
}

/// Ctrl-C (or SIGTERM) stops new items; the running ones finish and the report is
/// written (then the exit code is 130). A second one, or one once every item has ended,
/// exits at once: what `items.jsonl` holds stays, and a rerun continues. The handler stays
/// installed for the process's life, so no signal is lost while the run writes its report.
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
        progress::say(
            "eval: interrupted: no new items; the running ones finish and the report is written \
             (Ctrl-C again to quit now; a rerun with the same --out continues)",
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
/// The baselines when `--baselines` is not given.
const DEFAULT_BASELINES: &str = "agents,self-consistency";

fn baselines(args: &EvalArgs) -> Result<Baselines, Fatal> {
    let samples = args.samples.unwrap_or(DEFAULT_SAMPLES);
    let mut baselines = Baselines {
        agents: false,
        self_consistency: None,
    };
    for word in args
        .baselines
        .as_deref()
        .unwrap_or(DEFAULT_BASELINES)
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
            .ok_or_else(|| eval_hint(Fatal::usage(NO_CONFIG_HINT)));
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
