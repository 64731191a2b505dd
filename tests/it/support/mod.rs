//! Helpers the integration tests share:
//! - black-box: the real `massgen` binary (server or simulator) started on port 0, its
//!   printed address read, killed when the test ends ([`Proc`]), and a server on a
//!   simulator with its panel files ([`Setup`]); a client command run to completion
//!   within a time limit ([`run_bounded`]), kept off the internet ([`offline`]);
//! - HTTP: a client with a timeout, chat requests, the simulator's stats, SSE parsing;
//! - an injected environment ([`env_of`]), a test body run in a child process with a
//!   given process environment ([`in_child_env`]), config files ([`write`]), the shared
//!   fixtures folder ([`shared_dir`]);
//! - [`engine`]: scripted providers for the engine tests; [`native`]: the provider tests'
//!   scripted loopback upstream and request scenarios, and the recorded upstream traffic
//!   (the provider tests themselves are in their crate); [`serving`]: serve
//!   commands (another build, a records database, a captured log, a start-up error), a
//!   router on loopback, metrics and door-shaped errors, requests at once, polling.

pub mod app;
pub mod engine;
pub mod native;
pub mod postgres;
pub mod recording;
pub mod serving;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------
// Environment and files

/// An injected environment lookup (what `massgen::config::Env` is in tests).
pub type TestEnv = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// An environment holding exactly `pairs`.
pub fn env_of(pairs: &[(&str, &str)]) -> TestEnv {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Box::new(move |name| map.get(name).cloned())
}

/// Runs `body` where the process environment is exactly `vars`: for code that reads the
/// environment itself (clap's `env`), which a test cannot set in its own process without
/// `unsafe`. The test binary is started again running only `test` (the calling test's
/// path, e.g. `cli::env_fallbacks_apply`), and in that child `body` runs; the parent
/// fails unless the child ran that one test and it passed.
pub fn in_child_env(test: &str, vars: &[(&str, &str)], body: impl FnOnce()) {
    const CHILD: &str = "MASSGEN_TEST_CHILD_ENV";
    if std::env::var(CHILD).as_deref() == Ok(test) {
        body();
        return;
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let mut cmd = Command::new(exe);
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env_clear()
        .env(CHILD, test)
        .envs(vars.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {test}: {e}"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().ok().flatten().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{test} in a child process did not finish within 30 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test} in a child process:\n{stdout}\n{stderr}"
    );
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {name}: {e}"));
    path
}

/// The shared fixtures folder (`MASSGEN_SHARED_DIR`, or `../shared` beside the
/// repository), when present.
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

// ---------------------------------------------------------------------------------------
// The binary

/// A child process that is killed when dropped.
pub struct Proc {
    child: Child,
    pub url: String,
    /// The server's own records database (removed after the process is gone).
    records: Option<tempfile::TempDir>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        drop(self.records.take());
    }
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

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

/// Points every proxy variable at a loopback port where nothing listens (9, discard),
/// except for loopback itself: a client that reaches for the internet (telemetry, update
/// checks) fails on this machine instead of leaving it.
pub fn offline(cmd: &mut Command) -> &mut Command {
    for var in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        cmd.env(var, "http://127.0.0.1:9")
            .env(var.to_lowercase(), "http://127.0.0.1:9");
    }
    cmd.env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
}

/// Runs `cmd` with no stdin in its own process group, reading its output as it comes.
/// At `limit` the whole group is killed and the test fails; after a normal exit the group
/// is killed too, so nothing the command spawned (Codex's node wrapper starts the native
/// binary, pytest starts clients) outlives the test.
pub fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = read(Box::new(child.stdout.take().expect("stdout")));
    let stderr = read(Box::new(child.stderr.take().expect("stderr")));
    let kill_group = |pid: u32| {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .stderr(Stdio::null())
            .status();
    };
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    kill_group(child.id());
    let _ = child.wait();
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let Some(status) = status else {
        panic!(
            "{cmd:?} still running after {limit:?}, killed\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        );
    };
    Output {
        status,
        stdout,
        stderr,
    }
}

/// The binary under test: this build's, or the one `MASSGEN_TEST_BIN` names (another
/// build, e.g. the one before a change, to see a new test fail on it).
pub fn bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("MASSGEN_TEST_BIN")
            .ok()
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_massgen").to_string())
    })
}

/// Starts `massgen ARGS…` and waits (≤ 20 s) for the line `<prefix> http://ADDR`.
pub fn spawn(args: &[&str], prefix: &str, cwd: Option<&Path>) -> Proc {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    start(cmd, prefix)
}

/// Runs `cmd` with quiet logs on stderr and waits (≤ 20 s) for the stdout line
/// `<prefix> http://ADDR`.
/// A `serve` gets its own SQLite records file in a temporary folder (the default engine,
/// never the user's own file), unless the test chose `MASSGEN_SERVER_RECORDS_DB`.
pub fn start(mut cmd: Command, prefix: &str) -> Proc {
    let serves = cmd.get_args().next().is_some_and(|a| a == "serve");
    let chosen = cmd
        .get_envs()
        .any(|(k, v)| k == "MASSGEN_SERVER_RECORDS_DB" && v.is_some());
    let records = (serves && !chosen).then(|| {
        let dir = tempfile::tempdir().expect("records tempdir");
        cmd.env(
            "MASSGEN_SERVER_RECORDS_DB",
            format!("sqlite://{}", dir.path().join("records.db").display()),
        );
        dir
    });
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .env("RUST_LOG", "error,tower_http=off");
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
            let _ = child.wait();
            panic!("{cmd:?} did not print '{prefix}' within 20 s");
        }
    };
    Proc {
        child,
        url,
        records,
    }
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

/// `massgen serve` on port 0 with `keys` (comma-separated) as its API keys, for the web
/// page's tests.
pub fn serve_with_keys(args: &[&OsStr], keys: &str) -> Proc {
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--host", "127.0.0.1", "--port", "0"])
        .args(args)
        .env("MASSGEN_SERVER_API_KEYS", keys)
        .env_remove("MASSGEN_SERVER_API_KEYS_FILE")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    start(cmd, "massgen listening on")
}

/// A simulator and a server (with `env`) whose two agents call the first client tool they
/// are offered (the simulator's `policy=client_tool`), then answer with its result.
pub fn client_tool_server(env: &[(&str, &str)]) -> (Proc, Proc, tempfile::TempDir) {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().expect("tempdir");
    let models = [
        "a:policy=client_tool,ttft_ms=10,token_ms=1",
        "b:policy=client_tool,ttft_ms=40,token_ms=1",
    ];
    let config = write(
        dir.path(),
        "tools.yaml",
        &panel_yaml(&mock.url, &models, ""),
    );
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--host", "127.0.0.1", "--port", "0", "--config"])
        .arg(&config)
        .envs(env.iter().copied());
    (mock, start(cmd, "massgen listening on"), dir)
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

/// [`panel_yaml`] with every agent priced (USD per million tokens: 2 in, 8 out, 0.5 cached
/// in), so sessions report their cost.
pub fn priced_panel(url: &str, models: &[&str], orchestrator: &str) -> String {
    panel_yaml(url, models, orchestrator).replace(
        "\n      model: ",
        "\n      pricing: {input_per_million: 2, output_per_million: 8, cached_input_per_million: 0.5}\n      model: ",
    )
}

/// A simulator (`massgen mock-upstream`) and a server whose configs point at it, in a
/// temporary folder that lives as long as the setup.
pub struct Setup {
    pub mock: Proc,
    pub server: Proc,
    _dir: tempfile::TempDir,
}

impl Setup {
    /// Starts the simulator, lets `configure(simulator_url, folder)` write the configs and
    /// return the server's flags, then starts the server with them.
    pub fn start(configure: impl FnOnce(&str, &Path) -> Vec<String>) -> Self {
        let mock = mock_upstream();
        let dir = tempfile::tempdir().expect("tempdir");
        let flags = configure(&mock.url, dir.path());
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let server = serve(&flags);
        Self {
            mock,
            server,
            _dir: dir,
        }
    }

    /// The server's default config is `panel(simulator_url)` (written as `team.yaml`), plus
    /// `extra` flags.
    pub fn with_panel(panel: impl FnOnce(&str) -> String, extra: &[&str]) -> Self {
        Self::start(|url, dir| {
            let config = write(dir, "team.yaml", &panel(url));
            let mut flags = vec!["--config".to_string(), config.display().to_string()];
            flags.extend(extra.iter().map(|f| f.to_string()));
            flags
        })
    }
}

/// The simulator served in this process on a loopback port: its base URL, the sender that
/// stops it, and its task.
pub async fn simulator_in_process() -> (
    String,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(massgen_simulator::serve(listener, async {
        let _ = stopped.await;
    }));
    (base, stop, task)
}

// ---------------------------------------------------------------------------------------
// Simulated panels

/// Three fast simulated agents that answer, vote and present.
pub const FAST: [&str; 3] = [
    "alpha:ttft_ms=20,token_ms=1",
    "beta:ttft_ms=40,token_ms=1",
    "gamma:ttft_ms=60,token_ms=1",
];

/// Two simulated agents that call the first client tool offered, then answer with its
/// result.
pub const CLIENT_TOOL: [&str; 2] = [
    "a:policy=client_tool,ttft_ms=10,token_ms=1",
    "b:policy=client_tool,ttft_ms=40,token_ms=1",
];

// ---------------------------------------------------------------------------------------
// HTTP

/// A client whose requests give up after 30 s.
pub fn client() -> reqwest::Client {
    client_with_timeout(Duration::from_secs(30))
}

pub fn client_with_timeout(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .expect("client")
}

/// A one-line question to the default panel, with usage in the stream.
pub fn question(stream: bool) -> Value {
    json!({
        "model": "massgen",
        "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "Why is the sky blue?"}]
    })
}

/// `POST {url}/v1/chat/completions`, with `key` as the bearer token when given.
pub async fn chat(url: &str, key: Option<&str>, body: &Value) -> reqwest::Response {
    let mut request = client()
        .post(format!("{url}/v1/chat/completions"))
        .json(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.expect("request")
}

/// `GET url`, with `key` as the bearer token when given.
pub async fn get(url: &str, key: Option<&str>) -> reqwest::Response {
    let mut request = client().get(url);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.expect("request")
}

/// `GET url` (no key) as JSON.
pub async fn get_json(url: &str) -> Value {
    get(url, None).await.json().await.expect("json body")
}

/// The simulator's request and token counters (`GET /mock/stats`).
pub async fn mock_stats(mock: &Proc) -> Value {
    mock_stats_at(&mock.url).await
}

/// The `/mock/stats` of the simulator at `base`.
pub async fn mock_stats_at(base: &str) -> Value {
    client()
        .get(format!("{base}/mock/stats"))
        .send()
        .await
        .expect("stats")
        .json()
        .await
        .expect("stats json")
}

/// The prompt and completion tokens of a response's `usage` are what the simulator's
/// stats counted.
pub fn assert_usage_is_the_simulators(usage: &Value, stats: &Value) {
    assert_eq!(
        usage["prompt_tokens"], stats["prompt_tokens"],
        "{usage} vs {stats}"
    );
    assert_eq!(
        usage["completion_tokens"], stats["completion_tokens"],
        "{usage} vs {stats}"
    );
}

/// Parsed SSE stream: `data:` payloads in order (`[DONE]` kept as a string) and comments.
#[derive(Debug, Default)]
pub struct Sse {
    pub events: Vec<Value>,
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

/// `POST {url}{path}` with a JSON body, with `key` as the bearer token when given.
pub async fn post(url: &str, path: &str, key: Option<&str>, body: &Value) -> reqwest::Response {
    let mut request = client().post(format!("{url}{path}")).json(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.expect("request")
}

/// One named SSE event: the `event:` line (empty when absent) and the `data:` payload.
#[derive(Debug, Clone)]
pub struct Named {
    pub event: String,
    pub data: Value,
}

/// A stream of `event:` + `data:` frames (Responses, Anthropic); comments are counted.
pub fn parse_named_sse(raw: &str) -> (Vec<Named>, usize) {
    let mut events = Vec::new();
    let mut comments = 0;
    for block in raw.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut event = String::new();
        let mut data = None;
        for line in block.lines() {
            if let Some(name) = line.strip_prefix("event: ") {
                event = name.to_string();
            } else if let Some(payload) = line.strip_prefix("data: ") {
                data = Some(
                    serde_json::from_str(payload)
                        .unwrap_or_else(|e| panic!("bad event data {payload}: {e}")),
                );
            } else if line.starts_with(':') {
                comments += 1;
            }
        }
        if let Some(data) = data {
            events.push(Named { event, data });
        }
    }
    (events, comments)
}

/// The keys of a JSON object (empty for anything else).
pub fn keys(value: &Value) -> std::collections::BTreeSet<String> {
    value
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// A recorded fixture from the shared folder (`fixtures/upstream/<path>`), when the
/// folder is there.
pub fn shared_fixture(path: &str) -> Option<String> {
    let dir = native::upstream_dir()?;
    Some(std::fs::read_to_string(dir.join(path)).unwrap_or_else(|e| panic!("{path}: {e}")))
}

/// The log of `massgen serve --port 0` in `dir` with exactly `vars`, up to its address
/// line; the server is then stopped.
pub fn startup_log(dir: &Path, vars: &[(&str, &str)]) -> String {
    let log_path = dir.join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--host", "127.0.0.1", "--port", "0"])
        .env_clear()
        .envs(vars.iter().copied())
        .current_dir(dir);
    // No HOME in a cleared environment: the default records file needs a place, in `dir`.
    if !vars
        .iter()
        .any(|(k, _)| *k == "HOME" || *k == "MASSGEN_SERVER_RECORDS_DB")
    {
        cmd.env("XDG_DATA_HOME", dir);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(log).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(20));
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.as_deref()
            .is_ok_and(|l| l.starts_with("massgen listening on")),
        "{line:?}"
    );
    std::fs::read_to_string(log_path).unwrap()
}

/// Value of the first sample of `name` whose labels contain every `labels` pair.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The resident memory of process `pid` now, in bytes (Linux).
#[cfg(target_os = "linux")]
pub fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}
