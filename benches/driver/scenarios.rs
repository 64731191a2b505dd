//! The five measurements. Each starts its own `massgen serve` so memory and warm-up of one
//! do not leak into the next.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::client::{self, Outcome};
use super::mock::Mock;
use super::server::{Server, rss_mib, write_panel};
use super::stats::{critical_path, pct};

pub const QUESTION: &str = "How should a team adopt Rust in an existing C++ codebase?";

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Latency {
    pub ttft_ms: u64,
    pub token_ms: u64,
    pub words: u64,
}

impl Latency {
    pub fn model(&self, name: &str) -> String {
        format!(
            "{name}:ttft_ms={},token_ms={},words={},vote=agent1",
            self.ttft_ms, self.token_ms, self.words
        )
    }

    /// Three agents; `extra` is appended to every model string (e.g. `,policy=answer`).
    pub fn panel(&self, extra: &str) -> Vec<String> {
        ["sim-a", "sim-b", "sim-c"]
            .iter()
            .map(|n| format!("{}{extra}", self.model(n)))
            .collect()
    }
}

/// The panel both servers run in (5). Python MassGen offers `vote` (with every agent in
/// its enum) from the first turn on, so the simulator's `auto` policy would vote before any
/// answer exists; `policy=answer` answers whenever `new_answer` is offered, and one answer
/// per agent puts both implementations in vote-only mode after it.
pub const REFERENCE_MODELS: &str = ",policy=answer";
pub const REFERENCE_ORCHESTRATOR: &str = "orchestrator:\n  max_new_answers_per_agent: 1\n";

pub struct Env<'a> {
    pub massgen: PathBuf,
    pub out: PathBuf,
    pub server_cpus: Option<String>,
    pub mock: &'a Mock,
    pub http: reqwest::Client,
}

impl Env<'_> {
    pub fn server(
        &self,
        name: &str,
        models: &[String],
        orchestrator: &str,
    ) -> Result<Server, String> {
        let config = write_panel(
            &self.out,
            &format!("{name}.yaml"),
            &self.mock.base_url(),
            models,
            orchestrator,
        )?;
        Server::start(
            &self.massgen,
            &config,
            self.server_cpus.as_deref(),
            &self.out.join(format!("{name}.server.log")),
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Dist {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Dist {
    pub fn of(samples: &[f64]) -> Self {
        Self {
            n: samples.len(),
            p50: pct(samples, 50.0),
            p99: pct(samples, 99.0),
            max: pct(samples, 100.0),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Coordination {
    pub latency: Latency,
    pub sessions: usize,
    pub failures: usize,
    pub first_failure: Option<String>,
    /// wall time / critical path.
    pub ratio: Dist,
    /// wall time − critical path, ms.
    pub overhead_ms: Dist,
    pub wall_ms: Dist,
    pub critical_path_ms: Dist,
    pub ttfb_ms: Dist,
    pub upstream_calls_per_session: Dist,
    pub chain_calls_per_session: Dist,
    pub server_rss_mib_after: f64,
}

/// (1) and (2): sequential streaming sessions, each alone on the simulator so every
/// recorded upstream call belongs to it.
pub async fn coordination(
    env: &Env<'_>,
    latency: Latency,
    sessions: usize,
) -> Result<Coordination, String> {
    coordination_with(env, "coordination", latency, sessions, "", "").await
}

pub async fn coordination_with(
    env: &Env<'_>,
    name: &str,
    latency: Latency,
    sessions: usize,
    models: &str,
    orchestrator: &str,
) -> Result<Coordination, String> {
    let server = env.server(name, &latency.panel(models), orchestrator)?;
    for _ in 0..2 {
        let warm = client::stream_session(&env.http, &server.url, QUESTION).await;
        warm.check().map_err(|e| format!("warm-up session: {e}"))?;
    }
    let (mut ratio, mut over, mut wall, mut cp, mut ttfb, mut calls_n, mut chain_n) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut failures = 0;
    let mut first_failure = None;
    for _ in 0..sessions {
        env.mock.recorder.clear();
        let o = client::stream_session(&env.http, &server.url, QUESTION).await;
        // The simulator records a call when its body ends, a moment after the last byte.
        tokio::time::sleep(Duration::from_millis(20)).await;
        if let Err(e) = o.check() {
            failures += 1;
            first_failure.get_or_insert(e);
            continue;
        }
        let calls = env.mock.recorder.since(o.start);
        let (path_ms, chain) = critical_path(&calls);
        ratio.push(o.wall_ms() / path_ms);
        over.push(o.wall_ms() - path_ms);
        wall.push(o.wall_ms());
        cp.push(path_ms);
        ttfb.extend(o.ttfb_ms());
        calls_n.push(calls.len() as f64);
        chain_n.push(chain as f64);
    }
    let rss = rss_mib(server.pid()).map_or(0.0, |r| r.0);
    Ok(Coordination {
        latency,
        sessions,
        failures,
        first_failure,
        ratio: Dist::of(&ratio),
        overhead_ms: Dist::of(&over),
        wall_ms: Dist::of(&wall),
        critical_path_ms: Dist::of(&cp),
        ttfb_ms: Dist::of(&ttfb),
        upstream_calls_per_session: Dist::of(&calls_n),
        chain_calls_per_session: Dist::of(&chain_n),
        server_rss_mib_after: rss,
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct Scale {
    pub latency: Latency,
    pub sessions: usize,
    pub completed_ok: usize,
    pub failures: usize,
    pub first_failure: Option<String>,
    pub idle_rss_mib: f64,
    pub peak_rss_mib: f64,
    pub rss_per_session_kib: f64,
    pub all_done_s: f64,
    pub wall_ms: Dist,
    pub ttfb_ms: Dist,
    pub upstream_calls: usize,
}

/// (4): `sessions` streaming sessions started at once.
pub async fn scale(env: &Env<'_>, latency: Latency, sessions: usize) -> Result<Scale, String> {
    let server = env.server("scale", &latency.panel(""), "")?;
    let warm = client::stream_session(&env.http, &server.url, QUESTION).await;
    warm.check().map_err(|e| format!("warm-up session: {e}"))?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pid = server.pid();
    let idle = rss_mib(pid).ok_or("cannot read the server's RSS")?.0;
    env.mock.recorder.clear();
    let running = Arc::new(AtomicBool::new(true));
    let sampler = {
        let running = running.clone();
        tokio::spawn(async move {
            let mut peak: f64 = 0.0;
            while running.load(Ordering::Relaxed) {
                if let Some((rss, _)) = rss_mib(pid) {
                    peak = peak.max(rss);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            peak
        })
    };
    let start = Instant::now();
    let tasks: Vec<_> = (0..sessions)
        .map(|_| {
            let http = env.http.clone();
            let url = server.url.clone();
            tokio::spawn(async move { client::stream_session(&http, &url, QUESTION).await })
        })
        .collect();
    let mut outcomes: Vec<Outcome> = Vec::with_capacity(sessions);
    let mut failures = 0;
    let mut first_failure = None;
    for t in tasks {
        match t.await {
            Ok(o) => outcomes.push(o),
            Err(e) => {
                failures += 1;
                first_failure.get_or_insert(format!("task: {e}"));
            }
        }
    }
    let all_done_s = start.elapsed().as_secs_f64();
    running.store(false, Ordering::Relaxed);
    let sampled_peak = sampler.await.unwrap_or(0.0);
    // VmHWM catches a peak between two samples.
    let hwm = rss_mib(pid).map_or(0.0, |r| r.1);
    let peak = sampled_peak.max(hwm);
    let mut ok = 0;
    for o in &outcomes {
        match o.check() {
            Ok(()) => ok += 1,
            Err(e) => {
                failures += 1;
                first_failure.get_or_insert(e);
            }
        }
    }
    let wall: Vec<f64> = outcomes.iter().map(Outcome::wall_ms).collect();
    let ttfb: Vec<f64> = outcomes.iter().filter_map(Outcome::ttfb_ms).collect();
    Ok(Scale {
        latency,
        sessions,
        completed_ok: ok,
        failures,
        first_failure,
        idle_rss_mib: idle,
        peak_rss_mib: peak,
        rss_per_session_kib: (peak - idle) * 1024.0 / sessions.max(1) as f64,
        all_done_s,
        wall_ms: Dist::of(&wall),
        ttfb_ms: Dist::of(&ttfb),
        upstream_calls: env.mock.recorder.since(start).len(),
    })
}
