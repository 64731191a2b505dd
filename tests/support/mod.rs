#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Black-box helpers: start the real `massgen` binary (server or simulator) on port 0,
//! read the address it prints, and kill it when the test ends.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A child process that is killed when dropped.
pub struct Proc {
    child: Child,
    pub url: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Sends SIGTERM and waits (bounded) for the exit status.
    pub fn terminate(&mut self, wait: Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = std::time::Instant::now() + wait;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_massgen")
}

/// Starts `massgen ARGS…` and waits (≤ 20 s) for the line `<prefix> http://ADDR`.
pub fn spawn(args: &[&str], prefix: &str, cwd: Option<&Path>) -> Proc {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .env("RUST_LOG", "error,tower_http=off");
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().expect("start massgen");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    let wanted = prefix.to_string();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix(&wanted).filter(|_| !sent) {
                let _ = tx.send(rest.trim().to_string());
                sent = true;
            }
        }
    });
    let url = match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(url) => url,
        Err(_) => {
            let _ = child.kill();
            panic!("massgen {args:?} did not print '{prefix}' within 20 s");
        }
    };
    Proc { child, url }
}

pub fn mock_upstream() -> Proc {
    spawn(
        &["mock-upstream", "--host", "127.0.0.1", "--port", "0"],
        "mock-upstream listening on",
        None,
    )
}

pub fn serve(extra: &[&str]) -> Proc {
    let mut args = vec!["serve", "--host", "127.0.0.1", "--port", "0"];
    args.extend_from_slice(extra);
    spawn(&args, "massgen listening on", None)
}

/// A panel YAML on the simulator: one agent per model string.
pub fn panel_yaml(mock_url: &str, models: &[&str], orchestrator: &str) -> String {
    let mut yaml = String::from("agents:\n");
    for (i, model) in models.iter().enumerate() {
        yaml.push_str(&format!(
            "  - id: sim{}\n    backend:\n      type: chatcompletion\n      base_url: {mock_url}/v1\n      model: \"{model}\"\n",
            i + 1
        ));
    }
    yaml.push_str("retry:\n  max_attempts: 2\n  initial_backoff_ms: 10\n  max_backoff_ms: 50\n");
    yaml.push_str(orchestrator);
    yaml
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write config");
    path
}

/// Parsed SSE stream: `data:` payloads in order (`[DONE]` kept as a string) and comments.
#[derive(Debug, Default)]
pub struct Sse {
    pub events: Vec<serde_json::Value>,
    pub done: bool,
    pub comments: usize,
    pub raw: String,
}

pub fn parse_sse(raw: &str) -> Sse {
    let mut sse = Sse {
        raw: raw.to_string(),
        ..Sse::default()
    };
    for block in raw.split("\n\n") {
        for line in block.lines() {
            if let Some(data) = line.strip_prefix("data: ") {
                if data == "[DONE]" {
                    sse.done = true;
                } else {
                    sse.events.push(
                        serde_json::from_str(data)
                            .unwrap_or_else(|e| panic!("bad chunk {data}: {e}")),
                    );
                }
            } else if line.starts_with(':') {
                sse.comments += 1;
            }
        }
    }
    sse
}

impl Sse {
    pub fn reasoning(&self) -> String {
        self.delta_text("reasoning_content")
    }
    pub fn content(&self) -> String {
        self.delta_text("content")
    }
    fn delta_text(&self, key: &str) -> String {
        self.events
            .iter()
            .filter_map(|e| e["choices"].get(0))
            .filter_map(|c| c["delta"][key].as_str())
            .collect()
    }
}

/// The shared fixtures folder (`../shared` beside the repository), when present.
pub fn shared_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("MASSGEN_SHARED_DIR") {
        let p = PathBuf::from(dir);
        if p.is_dir() {
            return Some(p);
        }
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    p.is_dir().then_some(p)
}
