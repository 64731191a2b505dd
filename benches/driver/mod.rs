//! The benchmark driver: runs every measurement of issue 6 against a recording simulator
//! and writes `results/<name>.{md,json}`. `main.rs` is the command line; the smoke test
//! calls [`run`] at tiny sizes.

pub mod client;
pub mod mock;
pub mod passthrough;
pub mod reference;
pub mod report;
pub mod scenarios;
pub mod server;
pub mod stats;

use std::path::PathBuf;

use scenarios::{Env, Latency};

#[derive(Debug, Clone)]
pub struct Settings {
    pub massgen: PathBuf,
    /// Where configs and server logs go.
    pub out: PathBuf,
    /// Where `<name>.md` and `<name>.json` go.
    pub results: PathBuf,
    pub name: String,
    pub build: String,
    pub sessions: usize,
    pub latency: Latency,
    pub scale_sessions: usize,
    pub scale_latency: Latency,
    /// `taskset -c` list for the system under test (massgen serve, Python MassGen).
    pub server_cpus: Option<String>,
    pub wrk: Option<PathBuf>,
    pub pass_latency: Latency,
    pub pass_seconds: u64,
    pub pass_max_connections: usize,
    pub python: Option<PathBuf>,
    pub python_sessions: usize,
    pub command: String,
}

pub async fn run(s: &Settings) -> Result<report::Results, String> {
    std::fs::create_dir_all(&s.out).map_err(|e| format!("{}: {e}", s.out.display()))?;
    let mock = mock::start()
        .await
        .map_err(|e| format!("cannot start the simulator: {e}"))?;
    let http = reqwest::Client::builder()
        .pool_idle_timeout(std::time::Duration::from_secs(30))
        .build()
        .map_err(|e| format!("http client: {e}"))?;
    let env = Env {
        massgen: s.massgen.clone(),
        out: s.out.clone(),
        server_cpus: s.server_cpus.clone(),
        mock: &mock,
        http,
    };
    eprintln!("(1)+(2) coordination: {} sequential sessions", s.sessions);
    let coordination = scenarios::coordination(&env, s.latency, s.sessions).await?;
    eprintln!(
        "  ratio p50 {:.4} p99 {:.4}; ttfb p50 {:.2} ms p99 {:.2} ms",
        coordination.ratio.p50,
        coordination.ratio.p99,
        coordination.ttfb_ms.p50,
        coordination.ttfb_ms.p99
    );
    let pass = match &s.wrk {
        Some(wrk) => {
            eprintln!("(3) pass-through under wrk");
            // The generator shares the simulator's CPU (the driver's affinity).
            Some(
                passthrough::run(
                    &env,
                    wrk,
                    None,
                    s.pass_latency,
                    s.pass_seconds,
                    s.pass_max_connections,
                )
                .await?,
            )
        }
        None => None,
    };
    eprintln!("(4) scale: {} concurrent sessions", s.scale_sessions);
    let scale = scenarios::scale(&env, s.scale_latency, s.scale_sessions).await?;
    eprintln!(
        "  ok {} / {}, peak RSS {:.1} MiB",
        scale.completed_ok, scale.sessions, scale.peak_rss_mib
    );
    let reference = match &s.python {
        Some(python) => {
            eprintln!("(5) Python MassGen reference");
            Some(reference::run(&env, python, s.latency, s.python_sessions).await)
        }
        None => None,
    };
    let results = report::Results {
        name: s.name.clone(),
        command: s.command.clone(),
        machine: report::machine(),
        build: s.build.clone(),
        server_cpus: s.server_cpus.clone(),
        coordination,
        pass_through: pass,
        scale,
        reference,
    };
    report::write(&results, &s.results)?;
    Ok(results)
}
