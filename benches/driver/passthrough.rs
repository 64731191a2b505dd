//! (3) Pass-through overhead: one agent with `skip_coordination_rounds` and
//! `skip_final_presentation` under wrk at rising connection counts. wrk is closed-loop, so
//! with a fixed upstream latency L each connection holds about 1/L requests per second:
//! the rate rises with the connections. The scan stops after two steps in a row over 1 ms
//! (or with errors); every step is reported. Added latency = wrk's response-time percentile
//! minus the same percentile of the upstream durations the simulator recorded in that run.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::client::chat_body;
use super::scenarios::{Env, Latency};
use super::server::{cpu_ms, pinned};
use super::stats::pct;

const ORCHESTRATOR: &str =
    "orchestrator:\n  skip_coordination_rounds: true\n  skip_final_presentation: true\n";

#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub connections: usize,
    pub requests: u64,
    pub rate_rps: f64,
    pub errors: u64,
    pub response_p50_ms: f64,
    pub response_p99_ms: f64,
    pub upstream_p50_ms: f64,
    pub upstream_p99_ms: f64,
    pub added_p50_ms: f64,
    pub added_p99_ms: f64,
    /// The server's CPU time (user + system) per request in this step.
    pub server_cpu_us_per_request: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PassThrough {
    pub latency: Latency,
    pub seconds_per_step: u64,
    pub generator: String,
    pub steps: Vec<Step>,
    /// The highest rate held with added p99 under 1 ms and zero errors.
    pub best_rate_rps: Option<f64>,
    pub best_connections: Option<usize>,
}

#[derive(Deserialize)]
struct WrkOut {
    requests: u64,
    duration_us: u64,
    connect: u64,
    read: u64,
    write: u64,
    status: u64,
    timeout: u64,
    p50: f64,
    p99: f64,
}

fn lua(body: &str) -> String {
    format!(
        r#"wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [==[{body}]==]
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {{"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50":%d,"p99":%d}}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"#
    )
}

pub async fn run(
    env: &Env<'_>,
    wrk: &Path,
    wrk_cpus: Option<&str>,
    latency: Latency,
    seconds: u64,
    max_connections: usize,
) -> Result<PassThrough, String> {
    let server = env.server("passthrough", &[latency.model("sim-p")], ORCHESTRATOR)?;
    let body = chat_body("ping", false).to_string();
    let script = env.out.join("passthrough.lua");
    std::fs::write(&script, lua(&body)).map_err(|e| format!("{}: {e}", script.display()))?;
    let url = format!("{}/v1/chat/completions", server.url);
    // A short warm-up run fills both connection pools.
    wrk_step(wrk, wrk_cpus, &script, &url, 8, 1)?;
    let mut steps = Vec::new();
    let mut connections = 1;
    let mut failing = 0;
    while connections <= max_connections {
        env.mock.recorder.clear();
        let started = Instant::now();
        let cpu_before = cpu_ms(server.pid()).unwrap_or(0.0);
        let out = wrk_step(wrk, wrk_cpus, &script, &url, connections, seconds)?;
        let cpu = cpu_ms(server.pid()).unwrap_or(0.0) - cpu_before;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let upstream: Vec<f64> = env
            .mock
            .recorder
            .since(started)
            .iter()
            .map(|c| c.ms())
            .collect();
        let (up50, up99) = (pct(&upstream, 50.0), pct(&upstream, 99.0));
        let (r50, r99) = (out.p50 / 1e3, out.p99 / 1e3);
        let step = Step {
            connections,
            requests: out.requests,
            rate_rps: out.requests as f64 / (out.duration_us as f64 / 1e6),
            errors: out.connect + out.read + out.write + out.status + out.timeout,
            response_p50_ms: r50,
            response_p99_ms: r99,
            upstream_p50_ms: up50,
            upstream_p99_ms: up99,
            added_p50_ms: r50 - up50,
            added_p99_ms: r99 - up99,
            server_cpu_us_per_request: cpu * 1e3 / out.requests.max(1) as f64,
        };
        eprintln!(
            "  pass-through c={connections}: {:.0} req/s, added p50 {:.3} ms p99 {:.3} ms, errors {}, server CPU {:.0} µs/request",
            step.rate_rps,
            step.added_p50_ms,
            step.added_p99_ms,
            step.errors,
            step.server_cpu_us_per_request
        );
        // One noisy step must not end the scan: stop after two failing steps in a row.
        let failed = step.added_p99_ms > 1.0 || step.errors > 0;
        failing = if failed { failing + 1 } else { 0 };
        steps.push(step);
        if failing == 2 {
            break;
        }
        connections *= 2;
    }
    let best = steps
        .iter()
        .filter(|s| s.added_p99_ms <= 1.0 && s.errors == 0)
        .max_by(|a, b| a.rate_rps.total_cmp(&b.rate_rps));
    Ok(PassThrough {
        latency,
        seconds_per_step: seconds,
        generator: format!(
            "wrk -t1 (closed loop, {})",
            wrk_cpus.map_or("on the driver's CPU".to_string(), |c| format!("CPU {c}"))
        ),
        best_rate_rps: best.map(|s| s.rate_rps),
        best_connections: best.map(|s| s.connections),
        steps,
    })
}

fn wrk_step(
    wrk: &Path,
    cpus: Option<&str>,
    script: &Path,
    url: &str,
    connections: usize,
    seconds: u64,
) -> Result<WrkOut, String> {
    let mut cmd: Command = pinned(wrk, cpus);
    let out = cmd
        .args(["-t1", "--timeout", "10s"])
        .arg(format!("-c{connections}"))
        .arg(format!("-d{seconds}s"))
        .arg("-s")
        .arg(script)
        .arg(url)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", wrk.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("WRKJSON "))
        .ok_or_else(|| {
            format!(
                "wrk printed no result: {stdout} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    serde_json::from_str(line).map_err(|e| format!("wrk result {line}: {e}"))
}
