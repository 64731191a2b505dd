//! (7) Pass-through at the floor (issue 37): one streamed upstream call per request, through
//! `massgen serve` on a one-agent panel, through nginx as a reverse proxy of the same
//! simulator, and straight at the simulator, on the same pinned cores and the same
//! upstream stream.
//!
//! The simulator is `massgen mock-upstream`, a process of its own on the driver's CPU; the
//! server and nginx run on the server's CPUs. The server's panel is a config file given on
//! the command line (so the run can be repeated as the server's plain call changes) whose
//! agent reads `${MASSGEN_BENCH_UPSTREAM}` (the simulator's `/v1` URL) and
//! `${MASSGEN_BENCH_MODEL}` (the simulator's model string). The body the server sends
//! upstream for the client's request is captured once (a throwaway server whose agent
//! points at a one-shot listener) and is what the client sends straight to the simulator
//! and through nginx, so that all three answer with the same stream.
//!
//! For each round, connection count and target (interleaved: direct, nginx, server at each
//! count): every connection sends streamed requests back to back ([`stream_load`]) for the
//! step's time. Reported per step: the client's time to first byte, first token and last
//! byte (p50/p99), the same minus the direct step's of that round and count ("added"),
//! CPU per request of the server or nginx (its threads' run time from
//! /proc/PID/task/*/schedstat over the step ÷ requests, and utime + stime from
//! /proc/PID/stat, in 10 ms ticks, beside it), and from the simulator's counters
//! (`GET /mock/stats`) its calls and prompt tokens per request.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::client::chat_body;
use super::nginx::Nginx;
use super::scenarios::{Dist, Env, Latency, QUESTION};
use super::server::{Server, cpu_ms, cpu_us_threads};
use super::stats::pct;
use super::stream_load::{self, Sample};

/// The variables the panel config reads.
pub const UPSTREAM_VAR: &str = "MASSGEN_BENCH_UPSTREAM";
pub const MODEL_VAR: &str = "MASSGEN_BENCH_MODEL";

/// Requests per connection before each measured step, so that every pool on the way
/// (nginx's upstream keep-alive, the server's upstream connections) is warm.
const WARM_UP_PER_CONNECTION: usize = 3;

#[derive(Debug, Clone)]
pub struct FloorSettings {
    /// The server's panel config (`${MASSGEN_BENCH_UPSTREAM}`, `${MASSGEN_BENCH_MODEL}`).
    pub panel: PathBuf,
    /// Leaves nginx's rows out when `None`.
    pub nginx: Option<PathBuf>,
    pub latency: Latency,
    pub connections: Vec<usize>,
    pub seconds: u64,
    pub rounds: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub round: usize,
    pub connections: usize,
    /// `direct`, `nginx` or `server`.
    pub target: &'static str,
    pub requests: usize,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Connections the generator opened (one per connection unless the target closed some).
    pub connects: u64,
    pub rate_rps: f64,
    pub first_byte_ms: Dist,
    pub first_token_ms: Dist,
    pub last_byte_ms: Dist,
    /// p50 / p99 minus the direct step's of the same round and connection count.
    pub added_first_token_ms: Option<(f64, f64)>,
    pub added_last_byte_ms: Option<(f64, f64)>,
    /// The target's process (server or nginx), from its threads' schedstat (ns); none for
    /// direct.
    pub cpu_us_per_request: Option<f64>,
    /// The same from /proc/PID/stat (10 ms ticks, but counting threads that exited).
    pub cpu_us_per_request_stat: Option<f64>,
    pub simulator_cpu_us_per_request: f64,
    /// The driver (the load generator) on the simulator's CPU.
    pub client_cpu_us_per_request: f64,
    pub upstream_calls_per_request: f64,
    pub upstream_prompt_tokens_per_request: f64,
}

/// The targets for one round and connection count.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub round: usize,
    pub connections: usize,
    /// Server CPU per request ÷ nginx's (target ≤ 1.25).
    pub cpu_ratio: Option<f64>,
    /// Server's added p50 (last byte) − nginx's (target ≤ 0.1 ms).
    pub added_p50_over_nginx_ms: Option<f64>,
    /// Upstream prompt tokens per request through the server − the client's (target 0).
    pub tokens_added: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Floor {
    pub latency: Latency,
    pub panel: String,
    /// The panel config as it was read.
    pub panel_text: String,
    pub seconds_per_step: u64,
    pub generator: String,
    pub client_body: String,
    /// What the server sent upstream for `client_body`: the direct and nginx requests.
    pub upstream_body: String,
    /// The simulator's prompt tokens for the client's own messages.
    pub client_prompt_tokens: u64,
    pub nginx: Option<String>,
    pub steps: Vec<Step>,
    pub checks: Vec<Check>,
}

struct Target {
    name: &'static str,
    addr: SocketAddr,
    request: Arc<Vec<u8>>,
    /// The process whose CPU is the target's.
    pid: Option<u32>,
}

pub async fn run(env: &Env<'_>, s: &FloorSettings) -> Result<Floor, String> {
    let panel_text = std::fs::read_to_string(&s.panel)
        .map_err(|e| format!("panel {}: {e}", s.panel.display()))?;
    let model = s.latency.model("sim-p");
    let sim = Server::mock_upstream(&env.massgen, &env.out.join("floor.simulator.log"))?;
    let sim_addr = addr_of(&sim.url)?;
    let client_body = chat_body(QUESTION, true).to_string();
    let upstream_body = capture(env, &s.panel, &model, &client_body).await?;
    let client_prompt_tokens = prompt_tokens(env, &sim.url, &model).await?;
    let vars = [
        (UPSTREAM_VAR, format!("{}/v1", sim.url)),
        (MODEL_VAR, model.clone()),
    ];
    let server = Server::start_with_env(
        &env.massgen,
        &s.panel,
        env.server_cpus.as_deref(),
        &env.out.join("floor.server.log"),
        &vars,
    )?;
    let nginx = match &s.nginx {
        Some(bin) => Some(Nginx::start(
            bin,
            &env.out.join("floor-nginx"),
            sim_addr,
            env.server_cpus.as_deref(),
        )?),
        None => None,
    };
    let path = "/v1/chat/completions";
    // Each with its own address as Host: the server refuses a Host that is not its own.
    let target = |name, addr, body: &str, pid| Target {
        name,
        addr,
        request: Arc::new(stream_load::post(&addr.to_string(), path, body.as_bytes())),
        pid,
    };
    let mut targets = vec![target("direct", sim_addr, &upstream_body, None)];
    if let Some(n) = &nginx {
        targets.push(target("nginx", n.addr, &upstream_body, Some(n.pid())));
    }
    let server_addr = addr_of(&server.url)?;
    targets.push(target(
        "server",
        server_addr,
        &client_body,
        Some(server.pid()),
    ));
    let mut steps = Vec::new();
    for round in 1..=s.rounds {
        for &c in &s.connections {
            let mut direct: Option<(Vec<f64>, Vec<f64>)> = None;
            for t in &targets {
                let step = measure(env, &sim, t, round, c, s.seconds, direct.as_ref()).await?;
                eprintln!(
                    "  floor round {round} c={c} {}: {:.0} req/s, last byte p50 {:.2} ms (added {}), CPU {} µs/request, {} errors",
                    t.name,
                    step.0.rate_rps,
                    step.0.last_byte_ms.p50,
                    step.0
                        .added_last_byte_ms
                        .map_or("-".into(), |a| format!("{:.3}", a.0)),
                    step.0
                        .cpu_us_per_request
                        .map_or("-".into(), |v| format!("{v:.0}")),
                    step.0.errors
                );
                if t.name == "direct" {
                    direct = Some(step.1);
                }
                steps.push(step.0);
            }
        }
    }
    let checks = checks(&steps, client_prompt_tokens);
    Ok(Floor {
        latency: s.latency,
        panel: s.panel.display().to_string(),
        panel_text,
        seconds_per_step: s.seconds,
        generator: format!(
            "the driver (raw HTTP/1.1 keep-alive, closed loop, {WARM_UP_PER_CONNECTION} warm-up requests per connection before each step)"
        ),
        client_body,
        upstream_body,
        client_prompt_tokens,
        nginx: s.nginx.as_ref().map(|p| p.display().to_string()),
        steps,
        checks,
    })
}

/// One step; also its (first token, last byte) samples for the added latencies of the
/// targets measured after it.
async fn measure(
    env: &Env<'_>,
    sim: &Server,
    t: &Target,
    round: usize,
    connections: usize,
    seconds: u64,
    direct: Option<&(Vec<f64>, Vec<f64>)>,
) -> Result<(Step, (Vec<f64>, Vec<f64>)), String> {
    // Warm-up, not timed: with no time, each connection sends one request.
    for _ in 0..WARM_UP_PER_CONNECTION {
        stream_load::run(t.addr, Arc::clone(&t.request), connections, Duration::ZERO).await;
    }
    let stats0 = sim_stats(env, &sim.url).await?;
    let cpu0 = cpus(t.pid, sim.pid());
    let out = stream_load::run(
        t.addr,
        Arc::clone(&t.request),
        connections,
        Duration::from_secs(seconds),
    )
    .await;
    let cpu1 = cpus(t.pid, sim.pid());
    let stats1 = sim_stats(env, &sim.url).await?;
    let n = out.samples.len();
    let per = n.max(1) as f64;
    let per_request_us = |ms: f64| ms * 1e3 / per;
    let first_token: Vec<f64> = out
        .samples
        .iter()
        .filter_map(|s| s.first_token_ms)
        .collect();
    let last_byte: Vec<f64> = out.samples.iter().map(|s| s.last_byte_ms).collect();
    let first_byte: Vec<f64> = out
        .samples
        .iter()
        .map(|s: &Sample| s.first_byte_ms)
        .collect();
    let added = |mine: &[f64], base: &[f64]| {
        (
            pct(mine, 50.0) - pct(base, 50.0),
            pct(mine, 99.0) - pct(base, 99.0),
        )
    };
    let step = Step {
        round,
        connections,
        target: t.name,
        requests: n,
        errors: out.errors,
        first_error: out.first_error,
        connects: out.connects,
        rate_rps: n as f64 / out.elapsed.as_secs_f64().max(1e-9),
        first_byte_ms: Dist::of(&first_byte),
        first_token_ms: Dist::of(&first_token),
        last_byte_ms: Dist::of(&last_byte),
        added_first_token_ms: direct
            .filter(|_| t.name != "direct")
            .map(|d| added(&first_token, &d.0)),
        added_last_byte_ms: direct
            .filter(|_| t.name != "direct")
            .map(|d| added(&last_byte, &d.1)),
        cpu_us_per_request: cpu0
            .target
            .zip(cpu1.target)
            .map(|(a, b)| per_request_us(b - a)),
        cpu_us_per_request_stat: (cpu0.target_stat)
            .zip(cpu1.target_stat)
            .map(|(a, b)| per_request_us(b - a)),
        simulator_cpu_us_per_request: per_request_us(cpu1.sim - cpu0.sim),
        client_cpu_us_per_request: per_request_us(cpu1.client - cpu0.client),
        upstream_calls_per_request: (stats1.0 - stats0.0) as f64 / per,
        upstream_prompt_tokens_per_request: (stats1.1 - stats0.1) as f64 / per,
    };
    Ok((step, (first_token, last_byte)))
}

/// CPU so far, in ms: the target's (if it has a process) from schedstat and from stat, the
/// simulator's and this driver's (schedstat).
struct Cpu {
    target: Option<f64>,
    target_stat: Option<f64>,
    sim: f64,
    client: f64,
}

fn cpus(target: Option<u32>, sim: u32) -> Cpu {
    let ms = |pid| cpu_us_threads(pid).map(|us| us / 1e3);
    Cpu {
        target: target.and_then(ms),
        target_stat: target.and_then(cpu_ms),
        sim: ms(sim).unwrap_or(0.0),
        client: ms(std::process::id()).unwrap_or(0.0),
    }
}

fn checks(steps: &[Step], client_tokens: u64) -> Vec<Check> {
    let find = |round, c, target| {
        steps
            .iter()
            .find(|s| s.round == round && s.connections == c && s.target == target)
    };
    steps
        .iter()
        .filter(|s| s.target == "server")
        .map(|server| {
            let nginx = find(server.round, server.connections, "nginx");
            Check {
                round: server.round,
                connections: server.connections,
                cpu_ratio: nginx
                    .and_then(|n| Some(server.cpu_us_per_request? / n.cpu_us_per_request?)),
                added_p50_over_nginx_ms: nginx
                    .and_then(|n| Some(server.added_last_byte_ms?.0 - n.added_last_byte_ms?.0)),
                tokens_added: server.upstream_prompt_tokens_per_request - client_tokens as f64,
            }
        })
        .collect()
}

fn addr_of(url: &str) -> Result<SocketAddr, String> {
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .map_err(|e| format!("address of {url}: {e}"))
}

/// (requests, prompt tokens) the simulator has counted so far.
async fn sim_stats(env: &Env<'_>, url: &str) -> Result<(u64, u64), String> {
    let v: Value = env
        .http
        .get(format!("{url}/mock/stats"))
        .send()
        .await
        .map_err(|e| format!("simulator stats: {e}"))?
        .json()
        .await
        .map_err(|e| format!("simulator stats: {e}"))?;
    let field = |k: &str| {
        v[k].as_u64()
            .ok_or_else(|| format!("simulator stats without {k}: {v}"))
    };
    Ok((field("requests")?, field("prompt_tokens")?))
}

/// The simulator's prompt tokens for the client's messages as the client sends them (its
/// own request with the agent's model string): what a call that adds nothing would count.
async fn prompt_tokens(env: &Env<'_>, url: &str, model: &str) -> Result<u64, String> {
    let mut body = chat_body(QUESTION, false);
    body["model"] = Value::from(model);
    let v: Value = env
        .http
        .post(format!("{url}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("simulator: {e}"))?
        .json()
        .await
        .map_err(|e| format!("simulator: {e}"))?;
    v.pointer("/usage/prompt_tokens")
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("simulator answer without usage: {v}"))
}

/// The body `massgen serve` sends upstream for `client_body`: a throwaway server on `panel`
/// whose upstream is a one-shot listener here.
async fn capture(
    env: &Env<'_>,
    panel: &Path,
    model: &str,
    client_body: &str,
) -> Result<String, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("capture listener: {e}"))?;
    let at = listener
        .local_addr()
        .map_err(|e| format!("capture listener: {e}"))?;
    let vars = [
        (UPSTREAM_VAR, format!("http://{at}/v1")),
        (MODEL_VAR, model.to_string()),
    ];
    let server = Server::start_with_env(
        &env.massgen,
        panel,
        None,
        &env.out.join("floor.capture.log"),
        &vars,
    )?;
    let server_addr = addr_of(&server.url)?;
    let request = stream_load::post(
        &server_addr.to_string(),
        "/v1/chat/completions",
        client_body.as_bytes(),
    );
    // The client's request: its answer (an upstream error) is not read.
    let asking = tokio::spawn(async move {
        let mut conn = tokio::net::TcpStream::connect(server_addr).await.ok()?;
        conn.write_all(&request).await.ok()?;
        let mut sink = vec![0; 4096];
        while conn.read(&mut sink).await.ok()? > 0 {}
        Some(())
    });
    let got = tokio::time::timeout(Duration::from_secs(30), async {
        let (mut conn, _) = listener.accept().await.map_err(|e| e.to_string())?;
        read_request_body(&mut conn).await
    })
    .await
    .map_err(|_| "capture: the server sent no upstream request within 30 s".to_string())?
    .map_err(|e| format!("capture: {e}"))?;
    asking.abort();
    drop(server);
    String::from_utf8(got).map_err(|_| "capture: the upstream body is not UTF-8".into())
}

/// A request's body (framed by Content-Length, as massgen sends it).
async fn read_request_body(conn: &mut tokio::net::TcpStream) -> Result<Vec<u8>, String> {
    let mut data = Vec::new();
    let mut buf = vec![0; 64 * 1024];
    let (head_end, length) = loop {
        let n = conn.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the server hung up before a request".into());
        }
        data.extend_from_slice(&buf[..n]);
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..i]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or("an upstream request without content-length")?;
            break (i + 4, length);
        }
        if data.len() > 1024 * 1024 {
            return Err("no request head in 1 MiB".into());
        }
    };
    while data.len() < head_end + length {
        let n = conn.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the server hung up mid-body".into());
        }
        data.extend_from_slice(&buf[..n]);
    }
    Ok(data[head_end..head_end + length].to_vec())
}

/// The steps and the checks as Markdown.
pub fn table(f: &Floor) -> String {
    let mut m = String::new();
    let _ = writeln!(
        m,
        "Upstream `ttft_ms={},token_ms={},words={}`; {} s per step; panel `{}`; {}. Prompt tokens of the client's own messages: {}. Times in ms from the request's first byte; added = this target's percentile − the direct step's (same round and connections); CPU = the process's threads' run time (/proc/PID/task/*/schedstat) over the step ÷ requests, in brackets utime + stime (/proc/PID/stat, 10 ms ticks).\n",
        f.latency.ttft_ms,
        f.latency.token_ms,
        f.latency.words,
        f.seconds_per_step,
        f.panel,
        f.generator,
        f.client_prompt_tokens
    );
    let _ = writeln!(
        m,
        "| round | conns | target | req/s | errors | first byte p50 / p99 | first token p50 / p99 | last byte p50 / p99 | added first token p50 / p99 | added last byte p50 / p99 | target CPU µs/req (stat) | simulator CPU µs/req | client CPU µs/req | upstream calls/req | upstream prompt tokens/req |"
    );
    let _ = writeln!(
        m,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let pair = |p: Option<(f64, f64)>| p.map_or("–".into(), |(a, b)| format!("{a:.3} / {b:.3}"));
    for st in &f.steps {
        let _ = writeln!(
            m,
            "| {} | {} | {} | {:.0} | {} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.1} |",
            st.round,
            st.connections,
            st.target,
            st.rate_rps,
            st.errors,
            st.first_byte_ms.p50,
            st.first_byte_ms.p99,
            st.first_token_ms.p50,
            st.first_token_ms.p99,
            st.last_byte_ms.p50,
            st.last_byte_ms.p99,
            pair(st.added_first_token_ms),
            pair(st.added_last_byte_ms),
            match (st.cpu_us_per_request, st.cpu_us_per_request_stat) {
                (Some(v), Some(t)) => format!("{v:.0} ({t:.0})"),
                _ => "–".into(),
            },
            st.simulator_cpu_us_per_request,
            st.client_cpu_us_per_request,
            st.upstream_calls_per_request,
            st.upstream_prompt_tokens_per_request
        );
    }
    let _ = writeln!(
        m,
        "\n| round | conns | server CPU ÷ nginx's (target ≤ 1.25) | server added p50 − nginx's, last byte (≤ 0.1 ms) | upstream prompt tokens added per request (0) |"
    );
    let _ = writeln!(m, "|---|---|---|---|---|");
    let verdict = |ok: bool| if ok { "met" } else { "not met" };
    for c in &f.checks {
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {:.1} ({}) |",
            c.round,
            c.connections,
            c.cpu_ratio.map_or("no nginx".into(), |r| format!(
                "{r:.2} ({})",
                verdict(r <= 1.25)
            )),
            c.added_p50_over_nginx_ms
                .map_or("no nginx".into(), |d| format!(
                    "{d:.3} ms ({})",
                    verdict(d <= 0.1)
                )),
            c.tokens_added,
            verdict(c.tokens_added.abs() < 0.5)
        );
    }
    for st in f.steps.iter().filter(|s| s.errors > 0) {
        let _ = writeln!(
            m,
            "\nRound {} c={} {}: {} errors, the first: {}",
            st.round,
            st.connections,
            st.target,
            st.errors,
            st.first_error.as_deref().unwrap_or("?")
        );
    }
    m
}
