//! The results as JSON (everything) and Markdown (the table the README quotes).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::passthrough::PassThrough;
use super::reference::Reference;
use super::scenarios::{Coordination, Scale};

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub rustc: String,
    pub date_utc: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Results {
    pub name: String,
    pub command: String,
    pub machine: Machine,
    pub build: String,
    pub server_cpus: Option<String>,
    pub coordination: Option<Coordination>,
    pub pass_through: Option<PassThrough>,
    pub scale: Option<Scale>,
    pub reference: Option<Reference>,
    pub efficiency: Option<Vec<super::efficiency::Row>>,
    pub floor: Option<super::floor::Floor>,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn run(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

pub fn machine() -> Machine {
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let memory_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    Machine {
        cpu,
        // Not available_parallelism: the driver itself runs pinned to fewer CPUs.
        cores: cpuinfo
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count(),
        memory_gib,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        rustc: run("rustc", &["--version"]),
        date_utc: run("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]),
    }
}

pub fn write(r: &Results, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let json = serde_json::to_string_pretty(r).map_err(|e| e.to_string())?;
    let base = dir.join(&r.name);
    let write = |ext: &str, text: &str| {
        let path = base.with_extension(ext);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    write("json", &json)?;
    write("md", &markdown(r))
}

pub fn markdown(r: &Results) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# massgen benchmark: {}\n", r.name);
    let _ = writeln!(m, "Command: `{}`\n", r.command);
    let _ = writeln!(
        m,
        "Machine: {} ({} cores, {:.1} GiB), Linux {}, {}; {}. Build: {}. System under test pinned to CPU {}; driver, simulator and load generator on the other.\n",
        r.machine.cpu,
        r.machine.cores,
        r.machine.memory_gib,
        r.machine.kernel,
        r.machine.rustc,
        r.machine.date_utc,
        r.build,
        r.server_cpus.as_deref().unwrap_or("(unpinned)")
    );
    let _ = writeln!(
        m,
        "| measurement | settings | massgen (Rust) | Python MassGen | target |"
    );
    let _ = writeln!(m, "|---|---|---|---|---|");
    let refr = r.reference.as_ref();
    if let Some(c) = &r.coordination {
        let _ = writeln!(
            m,
            "| 1. coordination overhead: wall / critical path | 3 agents, {}, {} sequential streaming sessions | p50 **{:.4}**, p99 **{:.4}** (overhead p50 {:.1} ms, p99 {:.1} ms; {} failures) | see 5 | p99 ≤ 1.02 |",
            lat(&c.latency),
            c.sessions,
            c.ratio.p50,
            c.ratio.p99,
            c.overhead_ms.p50,
            c.overhead_ms.p99,
            c.failures
        );
        let _ = writeln!(
            m,
            "| 2. time to first SSE byte | same sessions | p50 **{:.2} ms**, p99 **{:.2} ms** | cannot stream | p99 < 5 ms |",
            c.ttfb_ms.p50, c.ttfb_ms.p99
        );
    }
    if let Some(p) = &r.pass_through {
        let best = p.best_rate_rps.map_or("none".to_string(), |v| {
            format!("**{v:.0} req/s** (c={})", p.best_connections.unwrap_or(0))
        });
        let _ = writeln!(
            m,
            "| 3. pass-through: highest rate with added p99 < 1 ms, 0 errors | 1 agent, skip rounds + presentation, {}, {} s/step, {} | {} | n/a | report |",
            lat(&p.latency),
            p.seconds_per_step,
            p.generator,
            best
        );
    }
    if let Some(s) = &r.scale {
        let ref_rss = refr.and_then(|x| x.peak_rss_mib.as_ref()).map_or_else(
            || "n/a".to_string(),
            |d| format!("{:.0} MiB for 1 session", d.max),
        );
        let _ = writeln!(
            m,
            "| 4. scale: concurrent streaming 3-agent sessions | {} sessions at once, {} | {} ok, {} errors; peak RSS **{:.1} MiB** (idle {:.1}), **{:.1} KiB**/session; all done in {:.1} s | {} | peak < 200 MB |",
            s.sessions,
            lat(&s.latency),
            s.completed_ok,
            s.failures,
            s.peak_rss_mib,
            s.idle_rss_mib,
            s.rss_per_session_kib,
            s.all_done_s,
            ref_rss
        );
    }
    if let Some(x) = refr {
        let ours = x.rust.as_ref().map_or_else(
            || "did not run".to_string(),
            |c| {
                format!(
                    "ratio p50 **{:.4}**, p99 **{:.4}** (n={}); wall p50 {:.0} ms; RSS {:.1} MiB",
                    c.ratio.p50, c.ratio.p99, c.sessions, c.wall_ms.p50, c.server_rss_mib_after
                )
            },
        );
        let theirs = match (&x.ratio, &x.wall_ms, &x.peak_rss_mib) {
            (Some(q), Some(w), Some(rss)) => format!(
                "ratio p50 **{:.3}**, p99 **{:.3}** (n={}); wall p50 {:.0} ms; peak RSS {:.0} MiB",
                q.p50, q.p99, q.n, w.p50, rss.max
            ),
            _ => format!(
                "did not complete: {}",
                x.problems.first().map_or("no result", String::as_str)
            ),
        };
        let _ = writeln!(
            m,
            "| 5. reference: the same panel and question through both | 3 agents, {}, `policy=answer`, `max_new_answers_per_agent: 1` | {} | {} | |",
            lat(&x.latency),
            ours,
            theirs
        );
    }
    if let Some(rows) = &r.efficiency {
        let _ = writeln!(
            m,
            "\n## 6. Efficiency: the protocol's shape (non-streamed, sequential sessions)\n\n{}",
            super::efficiency::table(rows)
        );
    }
    if let Some(f) = &r.floor {
        let _ = writeln!(
            m,
            "\n## 7. Pass-through at the floor (streamed, one upstream call per request)\n\n{}",
            super::floor::table(f)
        );
    }
    let _ = writeln!(m, "\n## Details\n");
    if let Some(c) = &r.coordination {
        let _ = writeln!(
            m,
            "Coordination: wall p50 {:.1} ms / critical path p50 {:.1} ms; upstream calls per session p50 {:.0} (max {:.0}), of which on the critical path p50 {:.0}; ratio max {:.4}; TTFB max {:.2} ms; server RSS after {:.1} MiB.{}\n",
            c.wall_ms.p50,
            c.critical_path_ms.p50,
            c.upstream_calls_per_session.p50,
            c.upstream_calls_per_session.max,
            c.chain_calls_per_session.p50,
            c.ratio.max,
            c.ttfb_ms.max,
            c.server_rss_mib_after,
            c.first_failure
                .as_ref()
                .map_or(String::new(), |f| format!(" First failure: {f}"))
        );
    }
    if let Some(s) = &r.scale {
        let _ = writeln!(
            m,
            "Scale: wall p50 {:.0} ms, p99 {:.0} ms; TTFB under the burst p50 {:.2} ms, p99 {:.2} ms; {} upstream calls.{}\n",
            s.wall_ms.p50,
            s.wall_ms.p99,
            s.ttfb_ms.p50,
            s.ttfb_ms.p99,
            s.upstream_calls,
            s.first_failure
                .as_ref()
                .map_or(String::new(), |f| format!(" First failure: {f}"))
        );
    }
    if let Some(p) = &r.pass_through {
        let _ = writeln!(
            m,
            "Pass-through steps (added = response percentile − upstream percentile):\n"
        );
        let _ = writeln!(
            m,
            "| connections | req/s | errors | response p50 / p99 ms | upstream p50 / p99 ms | added p50 / p99 ms | server CPU µs/request |"
        );
        let _ = writeln!(m, "|---|---|---|---|---|---|---|");
        for st in &p.steps {
            let _ = writeln!(
                m,
                "| {} | {:.0} | {} | {:.2} / {:.2} | {:.2} / {:.2} | {:.3} / {:.3} | {:.0} |",
                st.connections,
                st.rate_rps,
                st.errors,
                st.response_p50_ms,
                st.response_p99_ms,
                st.upstream_p50_ms,
                st.upstream_p99_ms,
                st.added_p50_ms,
                st.added_p99_ms,
                st.server_cpu_us_per_request
            );
        }
        let _ = writeln!(m);
    }
    if let Some(x) = refr {
        let _ = writeln!(
            m,
            "Python MassGen: {} of {} sessions completed.",
            x.completed, x.sessions
        );
        if let (Some(w), Some(cp), Some(i), Some(n)) = (
            &x.wall_ms,
            &x.critical_path_ms,
            &x.import_ms,
            &x.upstream_calls_per_session,
        ) {
            let _ = writeln!(
                m,
                "Wall (around `massgen.run`) p50 {:.0} ms, critical path p50 {:.0} ms, upstream calls p50 {:.0}; `import massgen` alone p50 {:.0} ms.",
                w.p50, cp.p50, n.p50, i.p50
            );
        }
        for p in x.problems.iter().take(5) {
            let _ = writeln!(m, "Problem: {p}");
        }
        let _ = writeln!(m);
    }
    m
}

fn lat(l: &super::scenarios::Latency) -> String {
    format!(
        "ttft {} ms, {} ms/token, {} words",
        l.ttft_ms, l.token_ms, l.words
    )
}
