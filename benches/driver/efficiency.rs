//! (6) Efficiency (issue 10): what the protocol's shape costs. The same 3-agent panel and
//! question, non-streamed, one session at a time, through a baseline binary (the server
//! before issue 10, when given) and the one under test with `voting_quorum` all and
//! majority: upstream calls, hops on the critical chain, wall time against the ideal
//! three-hop path (the slowest first answer, the slowest vote, the winner's presentation),
//! and tokens. Every agent votes for agent1, so the answers and the winner are the same
//! everywhere and only the protocol differs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::client::chat_body;
use super::scenarios::{Dist, Env, QUESTION};
use super::stats::critical_path;

/// The two latency profiles of the issue: each agent's time to its first chunk, ms.
pub const PROFILES: [[u64; 3]; 2] = [[400, 400, 400], [400, 700, 1000]];

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub server: String,
    pub ttft_ms: [u64; 3],
    pub quorum: String,
    pub sessions: usize,
    pub failures: usize,
    pub first_failure: Option<String>,
    pub calls: Dist,
    pub hops: Dist,
    pub wall_ms: Dist,
    /// The slowest first answer + the slowest vote + agent1's presentation.
    pub ideal_ms: f64,
    pub total_tokens: Dist,
}

/// One binary to measure, and whether it knows `voting_quorum`.
pub struct Subject {
    pub name: String,
    pub massgen: PathBuf,
    pub quorums: Vec<&'static str>,
}

pub async fn run(
    env: &Env<'_>,
    subjects: &[Subject],
    sessions: usize,
    token_ms: u64,
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for ttft in PROFILES {
        for subject in subjects {
            for quorum in &subject.quorums {
                rows.push(measure(env, subject, ttft, quorum, sessions, token_ms).await?);
            }
        }
    }
    Ok(rows)
}

async fn measure(
    env: &Env<'_>,
    subject: &Subject,
    ttft: [u64; 3],
    quorum: &str,
    sessions: usize,
    token_ms: u64,
) -> Result<Row, String> {
    let models: Vec<String> = ["sim-a", "sim-b", "sim-c"]
        .iter()
        .zip(ttft)
        .map(|(n, t)| format!("{n}:ttft_ms={t},token_ms={token_ms},words=10,vote=agent1"))
        .collect();
    let orchestrator = if quorum.is_empty() {
        String::new()
    } else {
        format!("orchestrator:\n  voting_quorum: {quorum}\n")
    };
    let name = format!(
        "efficiency-{}-{}-{}",
        subject.name,
        ttft.map(|t| t.to_string()).join("-"),
        if quorum.is_empty() { "default" } else { quorum }
    );
    let server = Env {
        massgen: subject.massgen.clone(),
        out: env.out.clone(),
        server_cpus: env.server_cpus.clone(),
        mock: env.mock,
        http: env.http.clone(),
    }
    .server(&name, &models, &orchestrator)?;
    // Warm-up: the first session pays for connection set-up.
    session(env, &server.url).await?;
    let (mut calls, mut hops, mut wall, mut tokens) = (vec![], vec![], vec![], vec![]);
    let mut failures = 0;
    let mut first_failure = None;
    for _ in 0..sessions {
        env.mock.recorder.clear();
        let start = Instant::now();
        let outcome = session(env, &server.url).await;
        let wall_ms = start.elapsed().as_secs_f64() * 1e3;
        // The simulator records a call when its body ends, a moment after the last byte.
        tokio::time::sleep(Duration::from_millis(20)).await;
        match outcome {
            Ok(total) => {
                let recorded = env.mock.recorder.since(start);
                let (_, chain) = critical_path(&recorded);
                calls.push(recorded.len() as f64);
                hops.push(chain as f64);
                wall.push(wall_ms);
                tokens.push(total);
            }
            Err(e) => {
                failures += 1;
                first_failure.get_or_insert(e);
            }
        }
    }
    let slowest = ttft.iter().copied().max().unwrap_or(0) as f64;
    Ok(Row {
        server: subject.name.clone(),
        ttft_ms: ttft,
        quorum: if quorum.is_empty() { "(none)" } else { quorum }.to_string(),
        sessions,
        failures,
        first_failure,
        calls: Dist::of(&calls),
        hops: Dist::of(&hops),
        wall_ms: Dist::of(&wall),
        ideal_ms: 2.0 * slowest + ttft[0] as f64,
        total_tokens: Dist::of(&tokens),
    })
}

/// One non-streamed session; its summed `usage.total_tokens`.
async fn session(env: &Env<'_>, url: &str) -> Result<f64, String> {
    let response = env
        .http
        .post(format!("{url}/v1/chat/completions"))
        .json(&chat_body(QUESTION, false))
        .send()
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = response.status();
    let body: Value = response.json().await.map_err(|e| format!("body: {e}"))?;
    if !status.is_success() {
        return Err(format!("{status}: {body}"));
    }
    if body["massgen_metadata"]["winner"]["label"] != "agent1" {
        return Err(format!("winner: {}", body["massgen_metadata"]["winner"]));
    }
    body["usage"]["total_tokens"]
        .as_f64()
        .ok_or_else(|| format!("no usage: {body}"))
}

/// The Markdown table of benches/README.md: each row and its ratios to the baseline row
/// of the same profile.
pub fn table(rows: &[Row]) -> String {
    let mut m = String::from(
        "| agents' time to first chunk | server | voting_quorum | upstream calls | hops | wall p50 | wall / ideal | tokens | vs baseline: calls, wall, tokens |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let base = rows
            .iter()
            .find(|b| b.ttft_ms == r.ttft_ms && b.server == "baseline");
        let ratios = match base {
            Some(b) if b.server != r.server => format!(
                "{:.2}x, {:.2}x, {:.2}x",
                r.calls.p50 / b.calls.p50,
                r.wall_ms.p50 / b.wall_ms.p50,
                r.total_tokens.p50 / b.total_tokens.p50
            ),
            _ => "–".to_string(),
        };
        let failures = if r.failures > 0 {
            format!(
                " ({} failed: {})",
                r.failures,
                r.first_failure.as_deref().unwrap_or("")
            )
        } else {
            String::new()
        };
        m.push_str(&format!(
            "| {} ms | {} | {} | {:.0} | {:.0} | {:.2} s | {:.3} (ideal {:.1} s) | {:.0} | {}{} |\n",
            r.ttft_ms.map(|t| t.to_string()).join(" / "),
            r.server,
            r.quorum,
            r.calls.p50,
            r.hops.p50,
            r.wall_ms.p50 / 1e3,
            r.wall_ms.p50 / r.ideal_ms,
            r.ideal_ms / 1e3,
            r.total_tokens.p50,
            ratios,
            failures
        ));
    }
    m
}
