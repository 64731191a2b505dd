//! The MCP door against the real binary: Streamable HTTP at `/mcp` (raw JSON-RPC over
//! reqwest: keys, `Origin`, a deliberation with its progress, the session in
//! `/v1/sessions`), and the official Python `mcp` SDK's client over Streamable HTTP and over
//! stdio (`massgen mcp`), from its own virtualenv (tests/python/mcp/requirements.txt), whose
//! interpreter is MASSGEN_MCP_PYTHON. `.ci/run` creates it and sets MASSGEN_REQUIRE_PYTHON,
//! so a missing SDK fails instead of skipping.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{self, Proc};

const KEY: &str = "sk-mg-mcp-door";
const PYTEST_TIMEOUT: Duration = Duration::from_secs(240);
const PROTOCOL: &str = "2025-06-18";

/// The simulator, a server with key [`KEY`] on it (default panel: fast agents; named panel
/// `slow`: agents whose first token takes 20 s), and their folder.
struct Door {
    mock: Proc,
    server: Proc,
    dir: tempfile::TempDir,
}

fn configs(mock_url: &str, dir: &Path) -> (String, String) {
    let team = support::write(
        dir,
        "team.yaml",
        &support::panel_yaml(mock_url, &support::FAST, ""),
    );
    let named = dir.join("panels");
    std::fs::create_dir_all(&named).unwrap();
    let slow = [
        "slow1:ttft_ms=20000,token_ms=1",
        "slow2:ttft_ms=20000,token_ms=1",
    ];
    support::write(
        &named,
        "slow.yaml",
        &support::panel_yaml(mock_url, &slow, ""),
    );
    let patient = [
        "patient1:ttft_ms=4000,token_ms=1",
        "patient2:ttft_ms=4000,token_ms=1",
    ];
    support::write(
        &named,
        "patient.yaml",
        &support::panel_yaml(mock_url, &patient, ""),
    );
    // Answers after 2 s, votes after 4 s, presents after 6 s.
    let steady = [
        "steady1:ttft_ms=2000,token_ms=1",
        "steady2:ttft_ms=2000,token_ms=1",
    ];
    support::write(
        &named,
        "steady.yaml",
        &support::panel_yaml(mock_url, &steady, ""),
    );
    (team.display().to_string(), named.display().to_string())
}

fn door(extra: &[&str]) -> Door {
    let mock = support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let (team, named) = configs(&mock.url, dir.path());
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "--config".as_ref(),
        team.as_ref(),
        "--configs-dir".as_ref(),
        named.as_ref(),
    ];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    let server = support::serve_with_keys(&args, KEY);
    Door { mock, server, dir }
}

/// A JSON-RPC POST to `/mcp`.
async fn post(
    url: &str,
    key: Option<&str>,
    session: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    let mut request = support::client_with_timeout(Duration::from_secs(60))
        .post(format!("{url}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", PROTOCOL)
        .json(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(id) = session {
        request = request.header("mcp-session-id", id);
    }
    request.send().await.expect("request")
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {},
        "clientInfo": {"name": "massgen-tests", "version": "1"}}})
}

/// The JSON-RPC messages of a response: its JSON body, or its SSE stream's `data:` lines.
async fn messages(response: reqwest::Response) -> Vec<Value> {
    let text = response.text().await.unwrap();
    if let Ok(one) = serde_json::from_str::<Value>(&text) {
        return vec![one];
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

/// Opens an MCP session (initialize, initialized) and returns its id.
async fn open_session(url: &str) -> String {
    let response = post(url, Some(KEY), None, &initialize()).await;
    assert_eq!(response.status(), 200);
    let id = response
        .headers()
        .get("mcp-session-id")
        .expect("a session id")
        .to_str()
        .unwrap()
        .to_string();
    let init = messages(response).await;
    assert_eq!(
        init[0]["result"]["serverInfo"]["name"], "massgen",
        "{init:?}"
    );
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(url, Some(KEY), Some(&id), &done).await.status(), 202);
    id
}

#[tokio::test]
async fn keys_and_origins_guard_the_mcp_route() {
    let d = door(&["--cors-origins", "https://ok.example"]);
    let url = &d.server.url;
    let refused = post(url, None, None, &initialize()).await;
    assert_eq!(refused.status(), 401);
    let wrong = post(url, Some("sk-wrong"), None, &initialize()).await;
    assert_eq!(wrong.status(), 401);
    let foreign = support::client()
        .post(format!("{url}/mcp"))
        .bearer_auth(KEY)
        .header("accept", "application/json, text/event-stream")
        .header("origin", "http://evil.example:4000")
        .json(&initialize())
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    let body: Value = foreign.json().await.unwrap();
    assert_eq!(body["error"]["code"], "origin_not_allowed", "{body}");
    let allowed = support::client()
        .post(format!("{url}/mcp"))
        .bearer_auth(KEY)
        .header("accept", "application/json, text/event-stream")
        .header("origin", "https://ok.example")
        .json(&initialize())
        .send()
        .await
        .unwrap();
    assert_eq!(allowed.status(), 200);
    // No Origin (every non-browser client): allowed.
    open_session(url).await;
    drop(d);
}

#[tokio::test]
async fn a_deliberation_over_http_is_a_session_like_any_other() {
    let d = door(&[]);
    let url = &d.server.url;
    let session = open_session(url).await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let tools = messages(post(url, Some(KEY), Some(&session), &list).await).await;
    let names: Vec<&str> = tools.last().unwrap()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["deliberate", "list_panels"]);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "deliberate", "arguments": {"question": "Rename the column?", "voting_quorum": "all"},
        "_meta": {"progressToken": "p-1"}}});
    let stream = messages(post(url, Some(KEY), Some(&session), &call).await).await;
    let result = stream.iter().position(|m| m["id"] == 3).expect("a result");
    let progress: Vec<&Value> = stream[..result]
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| &m["params"])
        .collect();
    assert!(progress.iter().all(|p| p["progressToken"] == "p-1"));
    let lines: Vec<&str> = progress
        .iter()
        .map(|p| p["message"].as_str().unwrap())
        .collect();
    assert!(lines.iter().any(|l| l.contains("consensus")), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("voted for")), "{lines:?}");
    let out = &stream[result]["result"];
    assert_eq!(out["isError"], false, "{out}");
    let answer = out["content"][0]["text"].as_str().unwrap();
    assert!(answer.starts_with("[simulated final answer]"), "{answer}");
    let structured = &out["structuredContent"];
    assert_eq!(structured["answer"], answer);
    assert_eq!(
        structured["votes"].as_array().unwrap().len(),
        3,
        "{structured}"
    );
    assert_eq!(structured["consensus_reason"], "converged");
    assert!(structured["cost_usd"].is_null(), "unpriced: {structured}");
    let id = structured["session_id"].as_str().unwrap();
    let record: Value = support::get(&format!("{url}/v1/sessions/{id}"), Some(KEY))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(record["door"], "mcp", "{record}");
    let listed: Value = support::get(&format!("{url}/v1/sessions"), Some(KEY))
        .await
        .json()
        .await
        .unwrap();
    assert!(
        listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == id && s["door"] == "mcp"),
        "{listed}"
    );
    let metrics = support::get(&format!("{url}/metrics"), Some(KEY))
        .await
        .text()
        .await
        .unwrap();
    assert!(
        support::sample(
            &metrics,
            "massgen_http_requests_total",
            &[("route", "/mcp")]
        )
        .is_some(),
        "{metrics}"
    );
    assert_eq!(
        support::sample(
            &metrics,
            "massgen_sessions_started_total",
            &[("door", "mcp")]
        ),
        Some(1.0),
        "{metrics}"
    );
    // A bad argument is the tool's error, in the HTTP doors' words.
    let bad = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
        "name": "deliberate", "arguments": {"question": "q", "max_cost_usd": 0}}});
    let bad = messages(post(url, Some(KEY), Some(&session), &bad).await).await;
    let bad = &bad.last().unwrap()["result"];
    assert_eq!(bad["isError"], true, "{bad}");
    assert!(
        bad["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("'max_cost_usd' must be")
    );
    drop(d);
}

// ---------------------------------------------------------------------------------------
// The Python SDK

/// The interpreter of the `mcp` SDK's virtualenv, or `None` (skip) when it is unset or
/// lacks the packages.
fn mcp_python() -> Option<String> {
    let python = std::env::var("MASSGEN_MCP_PYTHON").ok();
    let ready = python.as_ref().is_some_and(|python| {
        Command::new(python)
            .args(["-c", "import mcp, httpx2, anyio, pytest"])
            .status()
            .is_ok_and(|s| s.success())
    });
    if !ready {
        assert!(
            std::env::var("MASSGEN_REQUIRE_PYTHON").is_err(),
            "the mcp SDK's virtualenv missing: set MASSGEN_MCP_PYTHON to the python of a venv \
             with tests/python/mcp/requirements.txt installed (as .ci/run does)"
        );
        println!("skipped: MASSGEN_MCP_PYTHON is not a python with the mcp SDK installed");
        return None;
    }
    python
}

/// Runs tests/python/mcp with `env`; fails unless `passed` tests passed.
fn pytest(python: &str, env: &[(&str, &str)], passed: usize) {
    let mut cmd = Command::new(python);
    cmd.args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg("tests/python/mcp/test_mcp_door.py")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .envs(env.iter().copied());
    support::offline(&mut cmd);
    let output = support::run_bounded(cmd, PYTEST_TIMEOUT);
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && log.contains(&format!("{passed} passed")),
        "pytest tests/python/mcp failed:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_over_streamable_http() {
    let Some(python) = mcp_python() else {
        return;
    };
    let d = door(&[]);
    let out = d.dir.path().join("session-id");
    let url = format!("{}/mcp", d.server.url);
    let env = [
        ("MASSGEN_MCP_URL", url.as_str()),
        ("MASSGEN_API_KEY", KEY),
        ("MASSGEN_MCP_SLOW_PANEL", "massgen/slow"),
        ("MASSGEN_MOCK_URL", d.mock.url.as_str()),
        ("MASSGEN_MCP_OUT", out.to_str().unwrap()),
    ];
    tokio::task::block_in_place(|| pytest(&python, &env, 5));
    // The deliberation the SDK saw is in the records, as the MCP door's.
    let id = std::fs::read_to_string(&out).unwrap();
    let record: Value = support::get(&format!("{}/v1/sessions/{id}", d.server.url), Some(KEY))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(record["door"], "mcp", "{record}");
    assert_eq!(support::mock_stats(&d.mock).await["active"], 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agents_sdk_at_its_5_s_default_gets_an_answer_within_a_deadline() {
    let Some(python) = crate::python_clients::python_with("") else {
        return;
    };
    let d = door(&[]);
    let url = format!("{}/mcp", d.server.url);
    let mut cmd = Command::new(python);
    cmd.args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg("tests/python/test_agents_mcp.py")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .envs([
            ("MASSGEN_MCP_URL", url.as_str()),
            ("MASSGEN_API_KEY", KEY),
            ("MASSGEN_MCP_STEADY_PANEL", "massgen/steady"),
        ]);
    support::offline(&mut cmd);
    let output = tokio::task::block_in_place(|| support::run_bounded(cmd, PYTEST_TIMEOUT));
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && log.contains("2 passed"),
        "pytest tests/python/test_agents_mcp.py failed:\n{log}"
    );
    // The call the client gave up on does not run on.
    until_active(&d.mock, 0, "after the Agents SDK gave up").await;
}

#[test]
fn the_python_sdk_over_stdio() {
    let Some(python) = mcp_python() else {
        return;
    };
    // The built-in demo panel: its answers are the simulator's.
    let demo = serde_json::to_string(&[support::bin(), "mcp", "--demo"]).unwrap();
    pytest(&python, &[("MASSGEN_MCP_COMMAND", demo.as_str())], 3);
    // Panels from files, one of them slow: a cancelled call stops its upstream calls.
    let mock = support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let (team, named) = configs(&mock.url, dir.path());
    let command = serde_json::to_string(&[
        support::bin(),
        "mcp",
        "--config",
        &team,
        "--configs-dir",
        &named,
    ])
    .unwrap();
    let env = [
        ("MASSGEN_MCP_COMMAND", command.as_str()),
        ("MASSGEN_MCP_SLOW_PANEL", "massgen/slow"),
        ("MASSGEN_MOCK_URL", mock.url.as_str()),
    ];
    pytest(&python, &env, 4);
}

/// A `deliberate` call on the slow panel, its POST's response (the SSE stream, unread).
async fn slow_call(url: &str, key: &str, session: Option<&str>, id: u64) -> reqwest::Response {
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "deliberate", "arguments": {"question": "Take your time", "panel": "massgen/slow"},
        "_meta": {"progressToken": "p"}}});
    let response = post(url, Some(key), session, &call).await;
    assert_eq!(response.status(), 200);
    response
}

/// Waits (≤ 15 s) until the simulator has `n` calls in flight.
async fn until_active(mock: &Proc, n: u64, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let active = support::mock_stats(mock).await["active"].as_u64().unwrap();
        if active == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {active} upstream calls in flight, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_server_keeps_no_mcp_sessions_so_none_can_be_hoarded() {
    // Stateless: opening sessions takes nothing, so one key opening many shuts nobody out
    // (a session table of --max-connections entries was filled by one key before).
    let d = door(&[
        "--max-connections",
        "8",
        "--max-connections-per-address",
        "8",
    ]);
    let url = &d.server.url;
    let mut ids = std::collections::HashSet::new();
    for _ in 0..40 {
        ids.insert(open_session(url).await);
    }
    assert_eq!(ids.len(), 40, "each initialize gets its own id");
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let any = ids.iter().next().unwrap();
    let tools = messages(post(url, Some(KEY), Some(any), &list).await).await;
    assert!(
        tools.last().unwrap()["result"]["tools"].is_array(),
        "{tools:?}"
    );
}

#[tokio::test]
async fn a_session_id_answers_only_the_key_that_opened_it() {
    let mock = support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let (team, named) = configs(&mock.url, dir.path());
    let server = support::serve_with_keys(
        &[
            "--config".as_ref(),
            team.as_ref(),
            "--configs-dir".as_ref(),
            named.as_ref(),
        ],
        &format!("{KEY},sk-mg-other"),
    );
    let url = &server.url;
    let mine = open_session(url).await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    // Another key with this session id: 404, whatever it sends.
    let theirs = post(url, Some("sk-mg-other"), Some(&mine), &list).await;
    assert_eq!(theirs.status(), 404);
    let running = slow_call(url, KEY, Some(&mine), 9).await;
    until_active(&mock, 2, "the slow call").await;
    let delete = |key: &'static str| {
        support::client_with_timeout(Duration::from_secs(10))
            .delete(format!("{url}/mcp"))
            .bearer_auth(key)
            .header("mcp-session-id", &mine)
            .header("mcp-protocol-version", PROTOCOL)
            .send()
    };
    assert_eq!(delete("sk-mg-other").await.unwrap().status(), 404);
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 9}});
    assert_eq!(
        post(url, Some("sk-mg-other"), Some(&mine), &cancel)
            .await
            .status(),
        404
    );
    // Neither reached the call.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(support::mock_stats(&mock).await["active"], 2);
    // Its own key ends the session: 204, and its call is cancelled.
    let started = std::time::Instant::now();
    assert_eq!(delete(KEY).await.unwrap().status(), 204);
    assert!(started.elapsed() < Duration::from_secs(3), "DELETE waited");
    until_active(&mock, 0, "after DELETE").await;
    drop(running);
}

#[tokio::test]
async fn a_call_belongs_to_its_post_closing_it_cancels_the_deliberation() {
    let d = door(&[]);
    let url = &d.server.url;
    let session = open_session(url).await;
    // Calls on many connections, then every connection closed at once: nothing keeps
    // running (before, the sessions and their upstream calls ran on, billed).
    let mut running = Vec::new();
    for id in 0..4 {
        running.push(slow_call(url, KEY, Some(&session), 100 + id).await);
    }
    until_active(&d.mock, 8, "the slow calls").await;
    drop(running);
    until_active(&d.mock, 0, "after the POSTs closed").await;
    // Without a session id too.
    let alone = slow_call(url, KEY, None, 1).await;
    until_active(&d.mock, 2, "the call without a session").await;
    drop(alone);
    until_active(&d.mock, 0, "after its POST closed").await;
}

#[tokio::test]
async fn a_client_cancels_its_call_by_its_request_id() {
    let d = door(&[]);
    let url = &d.server.url;
    let session = open_session(url).await;
    let running = slow_call(url, KEY, Some(&session), 41).await;
    until_active(&d.mock, 2, "the slow call").await;
    // Another request id of the same session cancels nothing.
    let other = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 40}});
    assert_eq!(
        post(url, Some(KEY), Some(&session), &other).await.status(),
        202
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(support::mock_stats(&d.mock).await["active"], 2);
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 41, "reason": "timed out"}});
    assert_eq!(
        post(url, Some(KEY), Some(&session), &cancel).await.status(),
        202
    );
    until_active(&d.mock, 0, "after notifications/cancelled").await;
    drop(running);
}

#[tokio::test]
async fn a_long_call_without_a_progress_token_is_kept_alive_and_answered() {
    // Nothing to send while the agents think and no progress asked for: the stream carries
    // keep-alive comments, so no client or proxy times it out for silence, and the result
    // comes (before, a call past the MCP session's 5-minute idle expiry was lost).
    let d = door(&["--keepalive-seconds", "1"]);
    let url = &d.server.url;
    let session = open_session(url).await;
    let call = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "deliberate", "arguments": {"question": "Think first", "panel": "massgen/patient"}}});
    let raw = post(url, Some(KEY), Some(&session), &call)
        .await
        .text()
        .await
        .unwrap();
    let pings = raw.lines().filter(|l| l.starts_with(':')).count();
    assert!(pings >= 3, "{pings} keep-alive comments in {raw}");
    let result = raw
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|m| m["id"] == 8)
        .unwrap_or_else(|| panic!("no result in {raw}"));
    assert_eq!(result["result"]["isError"], false, "{result}");
}

/// A `deliberate` call's result on `url` (no progress token), its messages.
async fn call_deliberate(url: &str, arguments: Value) -> Value {
    let call = json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {
        "name": "deliberate", "arguments": arguments}});
    let stream = messages(post(url, Some(KEY), None, &call).await).await;
    stream
        .iter()
        .find(|m| m["id"] == 21)
        .unwrap_or_else(|| panic!("no result: {stream:?}"))["result"]
        .clone()
}

#[tokio::test]
async fn a_deadline_presents_the_best_answer_so_far() {
    // The steady panel answers after 2 s, would vote after 4 s and present after 6 s: a
    // 4 s deadline ends the deliberation at 3 s with the answers it has, as the session's
    // own timeout does, and a presentation that cannot make the last second gives way to
    // the winning answer as it stands.
    let d = door(&[]);
    let url = &d.server.url;
    let started = std::time::Instant::now();
    let out = call_deliberate(
        url,
        json!({"question": "Quick?", "panel": "massgen/steady", "deadline_seconds": 4}),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(out["isError"], false, "{out}");
    assert_eq!(
        out["structuredContent"]["consensus_reason"], "timeout",
        "{out}"
    );
    assert!(took < Duration::from_secs(6), "answered after {took:?}");
    let bad = call_deliberate(url, json!({"question": "q", "deadline_seconds": -1})).await;
    assert_eq!(bad["isError"], true, "{bad}");
}

#[tokio::test]
async fn a_call_without_progress_gets_the_servers_deadline_and_one_with_progress_does_not() {
    let d = door(&["--mcp-deadline-seconds", "4"]);
    let url = &d.server.url;
    let quiet = call_deliberate(url, json!({"question": "Q?", "panel": "massgen/steady"})).await;
    assert_eq!(
        quiet["structuredContent"]["consensus_reason"], "timeout",
        "{quiet}"
    );
    // With a progress token the client hears the panel work and the deliberation runs its
    // course.
    let call = json!({"jsonrpc": "2.0", "id": 22, "method": "tools/call", "params": {
        "name": "deliberate", "arguments": {"question": "Q?", "panel": "massgen/steady"},
        "_meta": {"progressToken": "p-22"}}});
    let stream = messages(post(url, Some(KEY), None, &call).await).await;
    let result = &stream.iter().find(|m| m["id"] == 22).unwrap()["result"];
    assert_eq!(
        result["structuredContent"]["consensus_reason"], "converged",
        "{result}"
    );
}

#[tokio::test]
async fn a_quiet_panel_still_sends_progress_every_ten_seconds() {
    // The slow panel's agents say nothing for 20 s: a client that waits only as long as
    // progress comes (a timeout reset on progress) hears it is still at work.
    let d = door(&[]);
    let url = &d.server.url;
    let started = std::time::Instant::now();
    let mut response = slow_call(url, KEY, None, 31).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut seen = String::new();
    while !seen.contains("still deliberating") {
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .unwrap_or_else(|_| panic!("no progress within 15 s: {seen}"))
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(started.elapsed() >= Duration::from_secs(9), "{seen}");
    assert!(seen.contains("notifications/progress"), "{seen}");
    drop(response);
    until_active(&d.mock, 0, "after the POST closed").await;
}

/// A POST of the 2026-07-28 protocol declaring the tasks extension in its `_meta`.
async fn tasks_post(url: &str, key: &str, id: u64, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "massgen-tests", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        }
    });
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let response = support::client_with_timeout(Duration::from_secs(30))
        .post(format!("{url}/mcp"))
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    let name = body["params"]["name"]
        .as_str()
        .or(body["params"]["taskId"].as_str());
    let response = match name {
        Some(name) => response.header("mcp-name", name),
        None => response,
    };
    let response = response.json(&body).send().await.unwrap();
    let all = messages(response).await;
    all.into_iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no answer to {method}"))
}

#[tokio::test]
async fn a_client_that_takes_tasks_gets_one_and_polls_it_to_the_answer() {
    let mock = support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let (team, named) = configs(&mock.url, dir.path());
    let server = support::serve_with_keys(
        &[
            "--config".as_ref(),
            team.as_ref(),
            "--configs-dir".as_ref(),
            named.as_ref(),
        ],
        &format!("{KEY},sk-mg-other"),
    );
    let url = &server.url;
    let started = std::time::Instant::now();
    let created = tasks_post(
        url,
        KEY,
        1,
        "tools/call",
        json!({"name": "deliberate", "arguments": {"question": "Plan it", "panel": "massgen/patient"}}),
    )
    .await;
    let task = &created["result"];
    assert_eq!(task["resultType"], "task", "{created}");
    assert_eq!(task["status"], "working", "{created}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the task handle waited"
    );
    let id = task["taskId"].as_str().unwrap().to_string();
    // Another key cannot read or cancel it.
    let theirs = tasks_post(url, "sk-mg-other", 2, "tasks/get", json!({"taskId": id})).await;
    assert!(theirs["error"].is_object(), "{theirs}");
    let cancel = tasks_post(url, "sk-mg-other", 3, "tasks/cancel", json!({"taskId": id})).await;
    assert!(cancel["error"].is_object(), "{cancel}");
    // Its own key polls it to the answer.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let done = loop {
        let got = tasks_post(url, KEY, 4, "tasks/get", json!({"taskId": id})).await;
        let status = got["result"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if status != "working" {
            break got;
        }
        assert!(std::time::Instant::now() < deadline, "still working: {got}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let result = &done["result"];
    assert_eq!(result["status"], "completed", "{done}");
    assert_eq!(result["result"]["isError"], false, "{done}");
    assert_eq!(
        result["result"]["structuredContent"]["session_id"],
        id.as_str()
    );
    // A task cancelled by its key stops its upstream calls.
    let created = tasks_post(
        url,
        KEY,
        5,
        "tools/call",
        json!({"name": "deliberate", "arguments": {"question": "Slowly", "panel": "massgen/slow"}}),
    )
    .await;
    let slow = created["result"]["taskId"].as_str().unwrap().to_string();
    until_active(&mock, 2, "the slow task's calls").await;
    let ack = tasks_post(url, KEY, 6, "tasks/cancel", json!({"taskId": slow})).await;
    assert!(ack["result"].is_object(), "{ack}");
    until_active(&mock, 0, "after tasks/cancel").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = tasks_post(url, KEY, 7, "tasks/get", json!({"taskId": slow})).await;
        if got["result"]["status"] == "cancelled" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not cancelled: {got}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn any_replica_answers_any_session() {
    // Two servers with the same key and panels, no shared state: a session opened on one
    // is served by the other (no affinity needed behind a load balancer).
    let d = door(&[]);
    let mock_url = d.mock.url.clone();
    let (team, named) = configs(&mock_url, d.dir.path());
    let other = support::serve_with_keys(
        &[
            "--config".as_ref(),
            team.as_ref(),
            "--configs-dir".as_ref(),
            named.as_ref(),
        ],
        KEY,
    );
    let session = open_session(&d.server.url).await;
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "deliberate", "arguments": {"question": "Which replica?"}}});
    let stream = messages(post(&other.url, Some(KEY), Some(&session), &call).await).await;
    let out = &stream.last().unwrap()["result"];
    assert_eq!(out["isError"], false, "{out}");
    let id = out["structuredContent"]["session_id"].as_str().unwrap();
    assert_eq!(
        support::get(&format!("{}/v1/sessions/{id}", other.url), Some(KEY))
            .await
            .status(),
        200
    );
}
