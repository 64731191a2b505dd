//! `cargo run --release --example bench_driver -- …`: see benches/README.md (run it through
//! benches/run.sh, which also builds the server and installs wrk and Python MassGen).

#![allow(clippy::print_stderr)]

#[path = "mod.rs"]
mod driver;

use std::path::PathBuf;

use clap::Parser;
use driver::scenarios::Latency;

#[derive(Parser)]
struct Args {
    /// The massgen binary under test (a release build).
    #[arg(long)]
    massgen: PathBuf,
    #[arg(long, default_value = "/tmp/massgen-bench")]
    out: PathBuf,
    #[arg(long, default_value = "benches/results")]
    results: PathBuf,
    #[arg(long, default_value = "latest")]
    name: String,
    #[arg(long, default_value = "")]
    build: String,
    #[arg(long, default_value_t = 60)]
    sessions: usize,
    #[arg(long, default_value_t = 200)]
    ttft_ms: u64,
    #[arg(long, default_value_t = 5)]
    token_ms: u64,
    #[arg(long, default_value_t = 40)]
    words: u64,
    #[arg(long, default_value_t = 1000)]
    scale_sessions: usize,
    #[arg(long, default_value_t = 200)]
    scale_ttft_ms: u64,
    #[arg(long, default_value_t = 50)]
    scale_token_ms: u64,
    #[arg(long)]
    server_cpus: Option<String>,
    #[arg(long)]
    wrk: Option<PathBuf>,
    #[arg(long, default_value_t = 20)]
    pass_ttft_ms: u64,
    #[arg(long, default_value_t = 1)]
    pass_token_ms: u64,
    #[arg(long, default_value_t = 8)]
    pass_words: u64,
    #[arg(long, default_value_t = 10)]
    pass_seconds: u64,
    #[arg(long, default_value_t = 512)]
    pass_max_connections: usize,
    #[arg(long)]
    python: Option<PathBuf>,
    #[arg(long, default_value_t = 5)]
    python_sessions: usize,
    #[arg(long, default_value_t = 20)]
    reference_rust_sessions: usize,
    /// Comma-separated subset: coordination, pass, scale, reference, efficiency (default: all).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Sessions per row of the efficiency table (6); 0 leaves it out.
    #[arg(long, default_value_t = 5)]
    efficiency_sessions: usize,
    /// A massgen binary from before issue 10, measured side by side in (6).
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// (7) the server's panel config for the pass-through at the floor; its agent reads
    /// ${MASSGEN_BENCH_UPSTREAM} and ${MASSGEN_BENCH_MODEL}.
    #[arg(long, default_value = "benches/panels/one-agent-pass.yaml")]
    floor_panel: PathBuf,
    /// nginx for (7)'s reverse-proxy rows (without it they are left out).
    #[arg(long)]
    nginx: Option<PathBuf>,
    #[arg(long, default_value_t = 20)]
    floor_ttft_ms: u64,
    #[arg(long, default_value_t = 1)]
    floor_token_ms: u64,
    #[arg(long, default_value_t = 8)]
    floor_words: u64,
    /// Concurrent connections of (7)'s steps, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    floor_connections: Vec<usize>,
    #[arg(long, default_value_t = 10)]
    floor_seconds: u64,
    /// Rounds of (7): every target at every count, interleaved, once per round.
    #[arg(long, default_value_t = 2)]
    floor_rounds: usize,
    /// The command line to print in the results.
    #[arg(long, default_value = "benches/run.sh")]
    command: String,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let a = Args::parse();
    let settings = driver::Settings {
        massgen: a.massgen,
        out: a.out,
        results: a.results,
        name: a.name,
        build: a.build,
        sessions: a.sessions,
        latency: Latency {
            ttft_ms: a.ttft_ms,
            token_ms: a.token_ms,
            words: a.words,
        },
        scale_sessions: a.scale_sessions,
        scale_latency: Latency {
            ttft_ms: a.scale_ttft_ms,
            token_ms: a.scale_token_ms,
            words: a.words,
        },
        server_cpus: a.server_cpus,
        wrk: a.wrk,
        pass_latency: Latency {
            ttft_ms: a.pass_ttft_ms,
            token_ms: a.pass_token_ms,
            words: a.pass_words,
        },
        pass_seconds: a.pass_seconds,
        pass_max_connections: a.pass_max_connections,
        python: a.python,
        python_sessions: a.python_sessions,
        reference_rust_sessions: a.reference_rust_sessions,
        command: a.command,
        only: a.only,
        efficiency_sessions: a.efficiency_sessions,
        baseline: a.baseline,
        floor: driver::floor::FloorSettings {
            panel: a.floor_panel,
            nginx: a.nginx,
            latency: Latency {
                ttft_ms: a.floor_ttft_ms,
                token_ms: a.floor_token_ms,
                words: a.floor_words,
            },
            connections: a.floor_connections,
            seconds: a.floor_seconds,
            rounds: a.floor_rounds,
        },
    };
    match driver::run(&settings).await {
        Ok(results) => {
            println!("{}", driver::report::markdown(&results));
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("benchmark failed: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
