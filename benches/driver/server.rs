//! The system under test as a child process: `massgen serve`, optionally pinned with
//! `taskset`, and its memory from /proc; `massgen mock-upstream` as a process of its own.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub struct Server {
    child: Child,
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cmd` prefixed with `taskset -c CPUS` when `cpus` is set.
pub fn pinned(program: &Path, cpus: Option<&str>) -> Command {
    match cpus {
        Some(cpus) => {
            let mut c = Command::new("taskset");
            c.arg("-c").arg(cpus).arg(program);
            c
        }
        None => Command::new(program),
    }
}

impl Server {
    /// Starts `massgen serve --config CONFIG` on a free port; logs go to `log`.
    pub fn start(
        bin: &Path,
        config: &Path,
        cpus: Option<&str>,
        log: &Path,
    ) -> Result<Self, String> {
        Self::start_with_env(bin, config, cpus, log, &[])
    }

    /// [`Server::start`] with `env` added to the server's environment (a panel config's
    /// `${VAR}`s).
    pub fn start_with_env(
        bin: &Path,
        config: &Path,
        cpus: Option<&str>,
        log: &Path,
        env: &[(&str, String)],
    ) -> Result<Self, String> {
        let mut cmd = pinned(bin, cpus);
        cmd.args(["serve", "--host", "127.0.0.1", "--port", "0", "--config"])
            .arg(config)
            .envs(env.iter().map(|(k, v)| (k, v)));
        // The default engine (SQLite), in a fresh file beside the log: runs do not share
        // records. MASSGEN_SERVER_RECORDS_DB in the driver's environment overrides it.
        if std::env::var_os("MASSGEN_SERVER_RECORDS_DB").is_none() {
            let db = log.with_extension("records.db");
            // A file left by an earlier run would make this one measure a grown database
            // (and its freelist, which SQLite's statement journal copies page by page).
            for suffix in ["", "-wal", "-shm"] {
                let mut path = db.clone().into_os_string();
                path.push(suffix);
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(format!("{}: {e}", db.display())),
                }
            }
            cmd.env(
                "MASSGEN_SERVER_RECORDS_DB",
                format!("sqlite://{}", db.display()),
            );
        }
        Self::spawn(cmd, "massgen listening on ", log, bin)
    }

    /// `massgen mock-upstream` as a process of its own on a free port (it inherits the
    /// driver's CPU affinity).
    pub fn mock_upstream(bin: &Path, log: &Path) -> Result<Self, String> {
        let mut cmd = Command::new(bin);
        cmd.args(["mock-upstream", "--host", "127.0.0.1", "--port", "0"]);
        Self::spawn(cmd, "mock-upstream listening on ", log, bin)
    }

    /// Runs `cmd` (stderr to `log`) until it prints `prefix` and its URL on stdout.
    fn spawn(
        mut cmd: Command,
        prefix: &'static str,
        log: &Path,
        bin: &Path,
    ) -> Result<Self, String> {
        let log_file = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file));
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = mpsc::channel();
        // Keeps draining stdout so the process never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix(prefix) {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) => Ok(Self { child, url }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!(
                    "{} did not start (see {})",
                    bin.display(),
                    log.display()
                ))
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// (VmRSS, VmHWM) of a process in MiB.
pub fn rss_mib(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// A panel on the recording simulator: one agent per model string.
pub fn write_panel(
    dir: &Path,
    name: &str,
    mock_url: &str,
    models: &[String],
    orchestrator: &str,
) -> Result<PathBuf, String> {
    let mut yaml = String::from("agents:\n");
    for (i, model) in models.iter().enumerate() {
        yaml.push_str(&format!(
            "  - id: sim{}\n    backend:\n      type: chatcompletion\n      base_url: {mock_url}\n      model: \"{model}\"\n",
            i + 1
        ));
    }
    yaml.push_str(orchestrator);
    let path = dir.join(name);
    std::fs::write(&path, yaml).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// User + system CPU time of a process so far, in ms (from /proc, 10 ms ticks).
pub fn cpu_ms(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may contain spaces, closed by the last ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) * 10.0)
}

/// CPU time of a process's live threads so far, in µs, from each thread's schedstat (ns,
/// where /proc/PID/stat counts 10 ms ticks). A thread that exits takes its time with it:
/// compare with [`cpu_ms`] over the same span.
pub fn cpu_us_threads(pid: u32) -> Option<f64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut ns: u64 = 0;
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        ns += stat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Some(ns as f64 / 1e3)
}
