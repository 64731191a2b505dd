//! The benchmark driver (benches/driver, run by benches/run.sh) still runs end to end at
//! tiny sizes against the debug binary. No timing assertions: only that every session
//! completes with the right answer and the results files are written.

#[path = "../../benches/driver/mod.rs"]
#[allow(dead_code)]
mod driver;

use std::path::PathBuf;

use driver::scenarios::Latency;

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| PathBuf::from(dir).join(program))
        .find(|p| p.is_file())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_benchmark_runs_at_tiny_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let fast = Latency {
        ttft_ms: 5,
        token_ms: 1,
        words: 5,
    };
    let wrk = on_path("wrk");
    if wrk.is_none() {
        println!("wrk not installed: the pass-through step is not exercised");
    }
    let settings = driver::Settings {
        massgen: PathBuf::from(env!("CARGO_BIN_EXE_massgen")),
        out: dir.path().join("work"),
        results: dir.path().join("results"),
        name: "smoke".into(),
        build: "debug".into(),
        sessions: 3,
        latency: fast,
        scale_sessions: 5,
        scale_latency: fast,
        server_cpus: None,
        wrk,
        pass_latency: fast,
        pass_seconds: 1,
        pass_max_connections: 2,
        python: None,
        python_sessions: 0,
        reference_rust_sessions: 0,
        command: "smoke".into(),
        only: Vec::new(),
        // Seconds per session by design (0.4–1.0 s calls): run by benches/run.sh only.
        efficiency_sessions: 0,
        baseline: None,
        // No nginx here: the floor's own rows (direct, server) still run end to end.
        floor: driver::floor::FloorSettings {
            panel: PathBuf::from("benches/panels/one-agent-pass.yaml"),
            nginx: None,
            latency: fast,
            connections: vec![1, 2],
            seconds: 1,
            rounds: 1,
        },
    };
    let results = driver::run(&settings).await.unwrap();
    let c = results.coordination.as_ref().unwrap();
    assert_eq!(c.failures, 0, "{:?}", c.first_failure);
    assert_eq!(c.ratio.n, 3);
    assert!(
        c.ratio.p50 >= 1.0,
        "wall time cannot beat the critical path"
    );
    assert!(
        c.upstream_calls_per_session.p50 >= 7.0,
        "answers, votes and a presentation"
    );
    let scale = results.scale.as_ref().unwrap();
    assert_eq!(scale.completed_ok, 5, "{:?}", scale.first_failure);
    assert!(scale.peak_rss_mib > 0.0);
    if let Some(p) = &results.pass_through {
        assert!(p.steps.iter().all(|s| s.requests > 0));
    }
    let floor = results.floor.as_ref().unwrap();
    assert_eq!(
        floor.steps.len(),
        4,
        "direct and server at 1 and 2 connections"
    );
    for st in &floor.steps {
        assert!(st.requests > 0 && st.errors == 0, "{st:?}");
        assert_eq!(st.upstream_calls_per_request, 1.0, "{st:?}");
        assert!(st.first_token_ms.n > 0, "{st:?}");
    }
    assert!(floor.client_prompt_tokens > 0);
    assert!(
        floor.upstream_body.contains("sim-p:"),
        "{}",
        floor.upstream_body
    );
    let md = std::fs::read_to_string(dir.path().join("results/smoke.md")).unwrap();
    assert!(md.contains("## 7. Pass-through at the floor"));
    assert!(md.contains("| 1. coordination overhead"));
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("results/smoke.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(json["coordination"]["sessions"], 3);
}
