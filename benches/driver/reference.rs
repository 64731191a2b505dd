//! (5) Python MassGen (`pip install massgen`) on the same simulator, config and question:
//! one process per session (pinned like our server), its own wall time around
//! `massgen.run` and its peak RSS, and the critical path from the same call records.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::scenarios::{
    self, Coordination, Dist, Env, Latency, QUESTION, REFERENCE_MODELS, REFERENCE_ORCHESTRATOR,
};
use super::server::pinned;
use super::stats::critical_path;

#[derive(Debug, Clone, Serialize)]
pub struct Reference {
    /// Our server on the same panel, the same way as (1).
    pub rust: Option<Coordination>,
    pub latency: Latency,
    pub sessions: usize,
    pub completed: usize,
    /// Why sessions did not complete (or why nothing ran).
    pub problems: Vec<String>,
    pub ratio: Option<Dist>,
    pub wall_ms: Option<Dist>,
    pub critical_path_ms: Option<Dist>,
    pub upstream_calls_per_session: Option<Dist>,
    pub import_ms: Option<Dist>,
    pub peak_rss_mib: Option<Dist>,
    pub answer_sample: Option<String>,
}

#[derive(Deserialize)]
struct RefOut {
    wall_ms: f64,
    import_ms: f64,
    peak_rss_mib: f64,
    winner: Option<String>,
    answer: String,
}

pub async fn run(
    env: &Env<'_>,
    python: &Path,
    latency: Latency,
    rust_sessions: usize,
    sessions: usize,
) -> Reference {
    let mut problems = Vec::new();
    let rust = scenarios::coordination_with(
        env,
        "reference",
        latency,
        rust_sessions,
        REFERENCE_MODELS,
        REFERENCE_ORCHESTRATOR,
    )
    .await
    .map_err(|e| problems.push(format!("Rust server on the reference panel: {e}")))
    .ok();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/reference/massgen_ref.py");
    let models = latency.panel(REFERENCE_MODELS);
    let (mut ratio, mut wall, mut cp, mut calls_n, mut import, mut rss) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut answer_sample = None;
    for _ in 0..sessions {
        env.mock.recorder.clear();
        let started = std::time::Instant::now();
        let mut cmd = pinned(python, env.server_cpus.as_deref());
        cmd.arg(&script)
            .arg(env.mock.base_url())
            .arg(QUESTION)
            .args(&models)
            // Python MassGen's chatcompletion backend wants some key; the simulator ignores it.
            .env("OPENAI_API_KEY", "unused");
        let output = match tokio::process::Command::from(cmd).output().await {
            Ok(o) => o,
            Err(e) => {
                problems.push(format!("cannot run {}: {e}", python.display()));
                break;
            }
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("REFJSON ")) else {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: String = stderr.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
            problems.push(format!(
                "exit {:?}, no result: {tail}",
                output.status.code()
            ));
            continue;
        };
        let Ok(out) = serde_json::from_str::<RefOut>(line) else {
            problems.push(format!("unreadable result: {line}"));
            continue;
        };
        let calls = env.mock.recorder.since(started);
        let (path_ms, _) = critical_path(&calls);
        if out.winner.is_none() || !out.answer.contains("[simulated") {
            problems.push(format!("no winner; answer: {:.300}", out.answer));
            continue;
        }
        answer_sample.get_or_insert(out.answer.clone());
        ratio.push(out.wall_ms / path_ms);
        wall.push(out.wall_ms);
        cp.push(path_ms);
        calls_n.push(calls.len() as f64);
        import.push(out.import_ms);
        rss.push(out.peak_rss_mib);
    }
    let dist = |v: &Vec<f64>| (!v.is_empty()).then(|| Dist::of(v));
    Reference {
        rust,
        latency,
        sessions,
        completed: wall.len(),
        problems,
        ratio: dist(&ratio),
        wall_ms: dist(&wall),
        critical_path_ms: dist(&cp),
        upstream_calls_per_session: dist(&calls_n),
        import_ms: dist(&import),
        peak_rss_mib: dist(&rss),
        answer_sample,
    }
}
