//! `massgen serve` with API keys, for the web page's tests (tests/http_ui.rs, tests/ui_e2e.rs).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The server process, killed when dropped.
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

/// `massgen serve --host 127.0.0.1 --port 0 ARGS…` with `keys` (comma-separated) as its API
/// keys; waits (≤ 20 s) for the address it prints.
pub fn serve_with_keys(args: &[&std::ffi::OsStr], keys: &str) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_massgen"))
        .args(["serve", "--host", "127.0.0.1", "--port", "0"])
        .args(args)
        .env("MASSGEN_SERVER_API_KEYS", keys)
        .env("RUST_LOG", "error,tower_http=off")
        .env_remove("MASSGEN_SERVER_API_KEYS_FILE")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start massgen");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("massgen listening on ") {
                let _ = tx.send(url.trim().to_string());
            }
        }
    });
    let Ok(url) = rx.recv_timeout(Duration::from_secs(20)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("massgen serve {args:?} did not start within 20 s");
    };
    Server { child, url }
}
