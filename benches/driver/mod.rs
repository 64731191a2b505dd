//! The benchmark driver: runs every measurement of issue 6 against a recording simulator
//! and writes `results/<name>.{md,json}`. `main.rs` is the command line; the smoke test
//! calls [`run`] at tiny sizes.

pub mod client;
pub mod efficiency;
pub mod floor;
pub mod mock;
pub mod nginx;
pub mod passthrough;
pub mod python_serve;
pub mod reference;
pub mod report;
pub mod scenarios;
pub mod server;
pub mod stats;
pub mod stream_load;

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
    /// Sessions of our server on the reference panel.
    pub reference_rust_sessions: usize,
    pub command: String,
    /// Run only these measurements (`coordination`, `pass`, `scale`, `reference`,
    /// `efficiency`, `floor`); empty: all.
    pub only: Vec<String>,
    /// Sessions per row of (6); 0 leaves it out.
    pub efficiency_sessions: usize,
    /// The server before issue 10, measured side by side in (6).
    pub baseline: Option<PathBuf>,
    /// (7) pass-through at the floor: the server's panel, nginx, the stream and the steps.
    pub floor: floor::FloorSettings,
}

impl Settings {
    fn wants(&self, what: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == what)
    }
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
    let coordination = if s.wants("coordination") {
        eprintln!("(1)+(2) coordination: {} sequential sessions", s.sessions);
        let c = scenarios::coordination(&env, s.latency, s.sessions).await?;
        eprintln!(
            "  ratio p50 {:.4} p99 {:.4}; ttfb p50 {:.2} ms p99 {:.2} ms",
            c.ratio.p50, c.ratio.p99, c.ttfb_ms.p50, c.ttfb_ms.p99
        );
        Some(c)
    } else {
        None
    };
    let pass = match &s.wrk {
        Some(wrk) if s.wants("pass") => {
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
        _ => None,
    };
    let scale = if s.wants("scale") {
        eprintln!("(4) scale: {} concurrent sessions", s.scale_sessions);
        let sc = scenarios::scale(&env, s.scale_latency, s.scale_sessions).await?;
        eprintln!(
            "  ok {} / {}, peak RSS {:.1} MiB",
            sc.completed_ok, sc.sessions, sc.peak_rss_mib
        );
        Some(sc)
    } else {
        None
    };
    let reference = match &s.python {
        Some(python) if s.wants("reference") => {
            eprintln!("(5) Python MassGen reference");
            Some(
                reference::run(
                    &env,
                    python,
                    s.latency,
                    s.reference_rust_sessions,
                    s.python_sessions,
                )
                .await,
            )
        }
        _ => None,
    };
    let efficiency = if s.wants("efficiency") && s.efficiency_sessions > 0 {
        eprintln!("(6) efficiency: {} sessions per row", s.efficiency_sessions);
        use efficiency::{Kind, Panel, Subject};
        let mut subjects = Vec::new();
        if let Some(b) = &s.baseline {
            subjects.push(Subject {
                name: "baseline".into(),
                kind: Kind::Rust(b.clone()),
                panel: Panel::VoteWhenOffered,
                quorums: vec![""],
                reference: true,
            });
        }
        let this_build = |panel| Subject {
            name: "this build".into(),
            kind: Kind::Rust(s.massgen.clone()),
            panel,
            quorums: vec!["all", "majority"],
            reference: false,
        };
        subjects.push(this_build(Panel::VoteWhenOffered));
        // Python MassGen's `massgen serve` sits next to the venv's python.
        if let Some(cli) = s
            .python
            .as_ref()
            .and_then(|p| p.parent())
            .map(|d| d.join("massgen"))
        {
            subjects.push(this_build(Panel::AnswerOnce));
            subjects.push(Subject {
                name: "Python MassGen".into(),
                kind: Kind::Python(cli),
                panel: Panel::AnswerOnce,
                // It has no quorum setting: every agent votes.
                quorums: vec![""],
                reference: true,
            });
        }
        let rows = efficiency::run(&env, &subjects, s.efficiency_sessions, 1).await?;
        eprintln!("{}", efficiency::table(&rows));
        Some(rows)
    } else {
        None
    };
    let floor = if s.wants("floor") {
        eprintln!(
            "(7) pass-through at the floor: {} round(s) of {:?} connections, {} s per step{}",
            s.floor.rounds,
            s.floor.connections,
            s.floor.seconds,
            if s.floor.nginx.is_some() {
                ""
            } else {
                " (no nginx)"
            }
        );
        Some(floor::run(&env, &s.floor).await?)
    } else {
        None
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
        efficiency,
        floor,
    };
    report::write(&results, &s.results)?;
    Ok(results)
}
