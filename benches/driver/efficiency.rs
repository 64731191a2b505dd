//! (6) Efficiency (issue 10): what the protocol's shape costs. The same 3-agent panel and
//! question, non-streamed, one session at a time, through a baseline binary (the server
//! before issue 10, when given) and the one under test with `voting_quorum` all and
//! majority: upstream calls, hops on the critical chain, wall time against the ideal
//! three-hop path (the slowest first answer, the slowest vote, the winner's presentation),
//! and tokens. Every agent votes for agent1, so the answers and the winner are the same
//! everywhere and only the protocol differs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use massgen_core::provider::{Price, Usage};
use serde::Serialize;
use serde_json::Value;

use super::client::chat_body;
use super::python_serve::PythonServe;
use super::scenarios::{Dist, Env, QUESTION};
use super::server::{Server, write_panel};
use super::stats::critical_path;

/// The two latency profiles of the issue: each agent's time to its first chunk, ms.
pub const PROFILES: [[u64; 3]; 2] = [[400, 400, 400], [400, 700, 1000]];

/// The simulator's models have no price: tokens are priced at this model's list price
/// from the server's own table, the same for every row.
pub const PRICED_AS: &str = "gpt-4o-mini";

/// How the simulated agents behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Panel {
    /// Vote for agent1 whenever `vote` is offered, else answer (the simulator's default).
    VoteWhenOffered,
    /// Python MassGen offers `vote` before any answer exists, so there every agent answers
    /// whenever it may (`policy=answer`) and may answer once
    /// (`max_new_answers_per_agent: 1`); then it votes for agent1.
    AnswerOnce,
}

impl Panel {
    fn model_options(self) -> &'static str {
        match self {
            Panel::VoteWhenOffered => "",
            Panel::AnswerOnce => ",policy=answer",
        }
    }

    fn orchestrator(self) -> &'static str {
        match self {
            Panel::VoteWhenOffered => "",
            Panel::AnswerOnce => "  max_new_answers_per_agent: 1\n",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub server: String,
    pub panel: Panel,
    /// The row the others of its profile and panel are compared with.
    pub reference: bool,
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
    /// Prompt + completion tokens the simulator reported.
    pub total_tokens: Dist,
    /// Those tokens at [`PRICED_AS`]'s list price.
    pub cost_usd: Dist,
}

/// Which server a row measures.
pub enum Kind {
    /// A `massgen` binary of this project.
    Rust(PathBuf),
    /// Python MassGen's `massgen` command (from the reference venv): `massgen serve`.
    Python(PathBuf),
}

/// One server to measure on one panel, with the quorums it is run with ("" = its default).
pub struct Subject {
    pub name: String,
    pub kind: Kind,
    pub panel: Panel,
    pub quorums: Vec<&'static str>,
    pub reference: bool,
}

enum Running {
    Rust(Server),
    Python(PythonServe),
}

impl Running {
    fn url(&self) -> &str {
        match self {
            Running::Rust(s) => &s.url,
            Running::Python(s) => &s.url,
        }
    }
}

pub async fn run(
    env: &Env<'_>,
    subjects: &[Subject],
    sessions: usize,
    token_ms: u64,
) -> Result<Vec<Row>, String> {
    let price = massgen_providers::pricing::list_price(PRICED_AS)
        .ok_or_else(|| format!("no list price for {PRICED_AS}"))?;
    let mut rows = Vec::new();
    for ttft in PROFILES {
        for subject in subjects {
            for quorum in &subject.quorums {
                let row = measure(env, subject, ttft, quorum, sessions, token_ms, &price).await?;
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

async fn start(
    env: &Env<'_>,
    subject: &Subject,
    name: &str,
    models: &[String],
    orchestrator: &str,
) -> Result<Running, String> {
    match &subject.kind {
        Kind::Rust(massgen) => Env {
            massgen: massgen.clone(),
            out: env.out.clone(),
            server_cpus: env.server_cpus.clone(),
            mock: env.mock,
            http: env.http.clone(),
        }
        .server(name, models, orchestrator)
        .map(Running::Rust),
        Kind::Python(cli) => {
            let config = write_panel(
                &env.out,
                &format!("{name}.yaml"),
                &env.mock.base_url(),
                models,
                orchestrator,
            )?;
            PythonServe::start(
                cli,
                &config,
                env.server_cpus.as_deref(),
                &env.out.join(name),
                &env.out.join(format!("{name}.server.log")),
                &env.http,
            )
            .await
            .map(Running::Python)
        }
    }
}

async fn measure(
    env: &Env<'_>,
    subject: &Subject,
    ttft: [u64; 3],
    quorum: &str,
    sessions: usize,
    token_ms: u64,
    price: &Price,
) -> Result<Row, String> {
    // 40 words, not fewer: a shorter answer is little more than the quoted question
    // behind one of a few openers, two agents' answers can come out identical, and our
    // server refuses an identical answer (the agent retries) where Python takes it.
    let models: Vec<String> = ["sim-a", "sim-b", "sim-c"]
        .iter()
        .zip(ttft)
        .map(|(n, t)| {
            format!(
                "{n}:ttft_ms={t},token_ms={token_ms},words=40,vote=agent1{}",
                subject.panel.model_options()
            )
        })
        .collect();
    let mut orchestrator = subject.panel.orchestrator().to_string();
    if !quorum.is_empty() {
        orchestrator.push_str(&format!("  voting_quorum: {quorum}\n"));
    }
    if !orchestrator.is_empty() {
        orchestrator.insert_str(0, "orchestrator:\n");
    }
    let name = format!(
        "efficiency-{}-{:?}-{}-{}",
        subject
            .name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == ' ' || *c == '.')
            .collect::<String>()
            .replace(' ', "_"),
        subject.panel,
        ttft.map(|t| t.to_string()).join("-"),
        if quorum.is_empty() { "default" } else { quorum }
    );
    let server = start(env, subject, &name, &models, &orchestrator).await?;
    let server_name = match &server {
        Running::Python(p) => format!("Python MassGen {} `massgen serve`", p.version),
        Running::Rust(_) => subject.name.clone(),
    };
    // Warm-up: the first session pays for connection set-up (and Python's lazy imports).
    session(env, &subject.kind, server.url()).await?;
    let (mut calls, mut hops, mut wall, mut tokens, mut cost) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut failures = 0;
    let mut first_failure = None;
    for _ in 0..sessions {
        env.mock.recorder.clear();
        let (prompt0, completion0) = env.mock.tokens(&env.http).await?;
        let start = Instant::now();
        let outcome = session(env, &subject.kind, server.url()).await;
        let wall_ms = start.elapsed().as_secs_f64() * 1e3;
        // The simulator records a call when its body ends, a moment after the last byte.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (prompt1, completion1) = env.mock.tokens(&env.http).await?;
        match outcome {
            Ok(()) => {
                let recorded = env.mock.recorder.since(start);
                let (_, chain) = critical_path(&recorded);
                let usage = Usage {
                    input_tokens: prompt1 - prompt0,
                    output_tokens: completion1 - completion0,
                    total_tokens: prompt1 + completion1 - prompt0 - completion0,
                    ..Usage::default()
                };
                calls.push(recorded.len() as f64);
                hops.push(chain as f64);
                wall.push(wall_ms);
                tokens.push(usage.total_tokens as f64);
                cost.push(price.cost(&usage));
            }
            Err(e) => {
                failures += 1;
                first_failure.get_or_insert(e);
            }
        }
    }
    let slowest = ttft.iter().copied().max().unwrap_or(0) as f64;
    Ok(Row {
        server: server_name,
        panel: subject.panel,
        reference: subject.reference,
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
        cost_usd: Dist::of(&cost),
    })
}

/// One non-streamed session that must end with agent1 (sim1) as the winner.
async fn session(env: &Env<'_>, kind: &Kind, url: &str) -> Result<(), String> {
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
    let meta = &body["massgen_metadata"];
    // Ours names the winner by label; Python's by agent id (agent1 is sim1 there).
    let won = match kind {
        Kind::Rust(_) => meta["winner"]["label"] == "agent1",
        Kind::Python(_) => meta["selected_agent"] == "sim1",
    };
    let answer = body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    if !won || !answer.contains("[simulated") {
        return Err(format!(
            "winner or answer: {:.300} {answer:.200}",
            meta.to_string()
        ));
    }
    Ok(())
}

/// The Markdown table of benches/README.md: each row and its ratios to the reference row
/// of the same profile and panel (the baseline; Python MassGen on the answer-once panel).
pub fn table(rows: &[Row]) -> String {
    let mut m = String::from(
        "| agents' time to first chunk | panel | server | voting_quorum | upstream calls | hops | wall p50 | wall / ideal | tokens | cost (as gpt-4o-mini) | vs reference row: calls, wall, tokens |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let base = rows
            .iter()
            .find(|b| b.ttft_ms == r.ttft_ms && b.panel == r.panel && b.reference);
        let ratios = match base {
            Some(b) if !r.reference => format!(
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
        let panel = match r.panel {
            Panel::VoteWhenOffered => "votes when offered",
            Panel::AnswerOnce => "answers once, then votes",
        };
        m.push_str(&format!(
            "| {} ms | {panel} | {}{} | {} | {:.0} | {:.0} | {:.2} s | {:.3} (ideal {:.1} s) | {:.0} | ${:.5} | {}{} |\n",
            r.ttft_ms.map(|t| t.to_string()).join(" / "),
            r.server,
            if r.reference { " (reference)" } else { "" },
            r.quorum,
            r.calls.p50,
            r.hops.p50,
            r.wall_ms.p50 / 1e3,
            r.wall_ms.p50 / r.ideal_ms,
            r.ideal_ms / 1e3,
            r.total_tokens.p50,
            r.cost_usd.p50,
            ratios,
            failures
        ));
    }
    m
}
