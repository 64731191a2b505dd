//! Python MassGen's own OpenAI-compatible server (`massgen serve` from the reference venv:
//! FastAPI, non-streamed Chat Completions only) as a child process, pinned like ours, so
//! the efficiency table (6) can send it the same request our server gets.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::server::pinned;

/// Python's import of `massgen` alone takes ~5 s on this machine; start-up is bounded.
const START_TIMEOUT: Duration = Duration::from_secs(120);

pub struct PythonServe {
    child: Child,
    pub url: String,
    /// `massgen.__version__` as its `/health` reports it.
    pub version: String,
}

impl Drop for PythonServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PythonServe {
    /// Starts `CLI serve --config CONFIG` on a free loopback port, working in `dir` (it
    /// writes its session logs to `.massgen/` there), and waits until `/health` answers.
    pub async fn start(
        cli: &Path,
        config: &Path,
        cpus: Option<&str>,
        dir: &Path,
        log: &Path,
        http: &reqwest::Client,
    ) -> Result<Self, String> {
        // `massgen serve --port 0` means "the default port 4000" there, so pick one here.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let log_file = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let log_err = log_file
            .try_clone()
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let mut cmd = pinned(cli, cpus);
        cmd.args(["serve", "--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--config")
            .arg(config)
            .current_dir(dir)
            // The chatcompletion backend wants some key; the simulator ignores it.
            .env("OPENAI_API_KEY", "unused")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_file))
            .stderr(Stdio::from(log_err));
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", cli.display()))?;
        let mut server = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            version: String::new(),
        };
        let started = Instant::now();
        while started.elapsed() < START_TIMEOUT {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "Python massgen serve exited ({status}); see {}",
                    log.display()
                ));
            }
            let health = http.get(format!("{}/health", server.url)).send().await;
            if let Ok(r) = health.and_then(|r| r.error_for_status()) {
                let body: serde_json::Value = r.json().await.unwrap_or_default();
                server.version = body["version"].as_str().unwrap_or("unknown").to_string();
                return Ok(server);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!(
            "Python massgen serve did not answer /health within {} s; see {}",
            START_TIMEOUT.as_secs(),
            log.display()
        ))
    }
}
