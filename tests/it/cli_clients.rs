//! The real CLI agents against the real binary: Codex CLI (`codex exec`, a custom provider
//! with `wire_api = "responses"`) and Claude Code (`claude -p`, `ANTHROPIC_BASE_URL`), at the
//! versions tests/clients/package-lock.json pins. Both can exit 0 with an empty answer
//! when a stream misses an event they need, so the answer text is checked, not only the
//! exit status. The official `openai` Node SDK's structured-output `parse()` runs from a
//! small script there too (tests/clients/structured_output.mjs). `.ci/run` installs them (`npm ci` in tests/clients) and sets
//! MASSGEN_REQUIRE_CLIENTS=1 so that a missing client fails instead of skipping.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support;

const KEY: &str = "sk-mg-door-test";
/// A demo session takes a few seconds; the clients start in under one.
pub(crate) const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// `tests/clients/node_modules/.bin/<name>`, or `None` (skip) when not installed.
pub(crate) fn client(name: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients/node_modules/.bin")
        .join(name);
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var("MASSGEN_REQUIRE_CLIENTS").is_err(),
        "{name} missing: run `npm ci` in tests/clients"
    );
    println!("skipped: {name} not installed (npm ci in tests/clients)");
    None
}

/// The environment both CLIs run in: nothing inherited but PATH, a fresh HOME, no route
/// off loopback ([`support::offline`]); their own off-switches are set too (see each test).
pub(crate) fn isolated(program: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(home)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("TERM", "dumb");
    support::offline(&mut cmd);
    cmd
}

/// The sessions the server recorded, newest first.
fn doors_of_sessions(url: &str) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let list: Value = support::get(&format!("{url}/v1/sessions"), Some(KEY))
            .await
            .json()
            .await
            .unwrap();
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["door"].as_str().unwrap_or_default().to_string())
            .collect()
    })
}

/// What `codex exec --json` printed and wrote.
struct CodexRun {
    /// `-o`: the final message.
    answer: String,
    /// The `item.completed` items of the JSONL on stdout.
    items: Vec<Value>,
    log: String,
}

impl CodexRun {
    fn text_of(&self, kind: &str) -> String {
        self.items
            .iter()
            .filter(|i| i["type"] == kind)
            .filter_map(|i| i["text"].as_str())
            .collect()
    }
}

/// `codex exec "Say pong"` with a custom provider at `url`, in a fresh CODEX_HOME, no
/// retries (a retry would run the whole deliberation again); exit 0 is asserted.
fn codex_exec(codex: &Path, url: &str) -> CodexRun {
    let home = tempfile::tempdir().unwrap();
    let last = home.path().join("last.txt");
    let provider = format!(
        "model_providers.massgen={{name=\"MassGen\",base_url=\"{url}/v1\",wire_api=\"responses\",env_key=\"MASSGEN_API_KEY\",request_max_retries=0,stream_max_retries=0}}"
    );
    let mut cmd = isolated(codex, home.path());
    cmd.env("CODEX_HOME", home.path())
        .env("MASSGEN_API_KEY", KEY)
        .args([
            "exec",
            "--skip-git-repo-check",
            "--ephemeral",
            "--sandbox",
            "read-only",
        ])
        .args(["--disable", "plugins", "--json", "-o"])
        .arg(&last)
        .args(["-c", "model_provider=massgen", "-c", "model=massgen"])
        .args(["-c", "approval_policy=never", "-c", &provider])
        // No plugin sync (it resolves github.com), no update check, no analytics.
        .args(["-c", "check_for_update_on_startup=false"])
        .args(["-c", "analytics.enabled=false"])
        .arg("Say pong");
    let output = support::run_bounded(cmd, CLIENT_TIMEOUT);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let log = format!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "codex failed: {log}");
    let items = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "item.completed")
        .map(|e| e["item"].clone())
        .collect();
    CodexRun {
        answer: std::fs::read_to_string(&last).unwrap_or_default(),
        items,
        log,
    }
}

/// `claude -p "Say pong" --bare --output-format json` against `url`; returns the result
/// object after asserting exit 0 and `is_error: false`.
fn claude_print(claude: &Path, url: &str, model: Option<&str>) -> Value {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = isolated(claude, home.path());
    cmd.env("ANTHROPIC_BASE_URL", url)
        .env("ANTHROPIC_API_KEY", KEY)
        // No telemetry, error reporting or update check (the first alone covers all).
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        // One retry at most, and no silent non-streaming retry masking a broken stream.
        .env("CLAUDE_CODE_MAX_RETRIES", "1")
        .env("CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK", "1")
        .args(["-p", "Say pong", "--bare", "--output-format", "json"]);
    if let Some(model) = model {
        cmd.args(["--model", model]);
    }
    let output = support::run_bounded(cmd, CLIENT_TIMEOUT);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "claude failed: {stdout}\n{stderr}");
    let result: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"));
    assert_eq!(result["is_error"], false, "{result}\n{stderr}");
    result
}

#[test]
fn codex_exec_gets_the_panels_answer_over_the_responses_api() {
    let Some(codex) = client("codex") else { return };
    let server = support::serve_with_keys(&["--demo".as_ref()], KEY);
    let run = codex_exec(&codex, &server.url);
    assert!(
        run.answer.starts_with("[simulated final answer]"),
        "answer: {:?}\n{}",
        run.answer,
        run.log
    );
    // The deliberation shown as reasoning, the answer as the message.
    assert!(
        run.text_of("reasoning").contains("voted for"),
        "{}",
        run.log
    );
    assert_eq!(run.text_of("agent_message").trim(), run.answer.trim());
    assert_eq!(doors_of_sessions(&server.url)[0], "responses");
}

#[test]
fn codex_handles_the_function_call_the_panel_chose_and_sends_back_its_output() {
    let Some(codex) = client("codex") else { return };
    let (_mock, server, _dir) = support::client_tool_server(&[("MASSGEN_SERVER_API_KEYS", KEY)]);
    let run = codex_exec(&codex, &server.url);
    // The panel called Codex's first function tool (`exec_command`, command `simulated`);
    // Codex handled it (under a temporary CODEX_HOME it sets up no sandbox helper, so
    // nothing runs and the failure is the output), sent the output back in a second
    // request, and the panel answered with it.
    let command = run
        .items
        .iter()
        .find(|i| i["type"] == "command_execution")
        .unwrap_or_else(|| panic!("no command_execution item: {}", run.log));
    assert!(
        command["command"]
            .as_str()
            .unwrap_or_default()
            .contains("simulated")
    );
    assert!(
        run.answer.starts_with("[simulated final answer]"),
        "{}",
        run.log
    );
    assert!(
        run.answer.contains("called exec_command(")
            && run.answer.contains("result of exec_command [call_"),
        "answer: {}",
        run.answer
    );
    assert_eq!(
        doors_of_sessions(&server.url)[..2],
        ["responses", "responses"]
    );
}

#[test]
fn claude_code_gets_the_panels_answer_over_the_messages_api() {
    let Some(claude) = client("claude") else {
        return;
    };
    let server = support::serve_with_keys(&["--demo".as_ref()], KEY);
    // Its own model name (the default panel answers it) and then `massgen` by name.
    for model in [None, Some("massgen")] {
        let result = claude_print(&claude, &server.url, model);
        let text = result["result"].as_str().unwrap_or_default();
        assert!(text.starts_with("[simulated final answer]"), "{result}");
    }
    assert_eq!(
        doors_of_sessions(&server.url)[..2],
        ["messages", "messages"]
    );
}

#[test]
fn claude_code_handles_the_tool_use_the_panel_chose_and_sends_back_its_result() {
    let Some(claude) = client("claude") else {
        return;
    };
    let (_mock, server, _dir) = support::client_tool_server(&[("MASSGEN_SERVER_API_KEYS", KEY)]);
    let result = claude_print(&claude, &server.url, Some("massgen"));
    // The panel called Claude Code's first tool (Bash); print mode refuses a command that
    // needs approval and sends that back as an error result, which the panel answered.
    assert_eq!(result["num_turns"], 2, "{result}");
    let text = result["result"].as_str().unwrap_or_default();
    assert!(text.starts_with("[simulated final answer]"), "{result}");
    assert!(
        text.contains("called Bash(") && text.contains("result of Bash [call_"),
        "{result}"
    );
    assert_eq!(
        doors_of_sessions(&server.url)[..2],
        ["messages", "messages"]
    );
}

/// The official `openai` Node SDK (pinned in tests/clients) parses the panel's structured
/// output, streamed and not, through the corrective retry, and raises on a clear error.
#[test]
fn openai_node_sdk_parses_structured_output() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients");
    if !dir.join("node_modules/openai/package.json").is_file() {
        assert!(
            std::env::var("MASSGEN_REQUIRE_CLIENTS").is_err(),
            "the openai npm package is missing: run `npm ci` in tests/clients"
        );
        println!("skipped: the openai npm package is not installed (npm ci in tests/clients)");
        return;
    }
    let server = support::serve(&["--demo"]);
    let mut cmd = Command::new("node");
    cmd.arg("structured_output.mjs")
        .current_dir(&dir)
        .env("MASSGEN_BASE_URL", &server.url);
    support::offline(&mut cmd);
    let output = support::run_bounded(cmd, CLIENT_TIMEOUT);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.trim_end().ends_with("ok"),
        "node structured_output.mjs failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
