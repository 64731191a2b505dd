//! The tool shapes real agents send (issue 40), end to end on the real binary: Claude
//! Code's `mcp__{server}__{tool}` names on every door, also where the panel's own MCP
//! server has the same name; tool results of every block type (a `tool_reference` loading
//! a deferred tool, images, documents); Codex's `namespace` tools. Each test runs a whole
//! tool loop: the client sends its tools, the panel (the simulator's `policy=client_tool`)
//! calls one, the client sends the result in its shape, and the panel's answer comes back
//! 200. The last tests run the real clients (tests/clients, the versions its lock pins):
//! Codex CLI with an MCP server, Claude Code with the README's MCP server (loaded through
//! its `ToolSearch`) and Claude Code reading a PNG.

use std::path::Path;

use serde_json::{Value, json};

use crate::cli_clients::{CLIENT_TIMEOUT, client, isolated};
use crate::support::recording::{self, Seen};
use crate::support::{CLIENT_TOOL, Proc, Setup, panel_yaml, post, serve, write};

const SEARCH: &str = "mcp__github__search_issues";

fn search_schema() -> Value {
    json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]})
}

/// The door's request for `question` with one client tool named `tool`, in its shape.
fn first_request(door: Door, tool: &str) -> Value {
    let question = "Which issues mention tool shapes?";
    match door {
        Door::Chat => {
            json!({"model": "massgen", "messages": [{"role": "user", "content": question}],
            "tools": [{"type": "function", "function": {"name": tool, "parameters": search_schema()}}]})
        }
        Door::Responses => json!({"model": "massgen", "input": question, "store": false,
            "tools": [{"type": "function", "name": tool, "parameters": search_schema()}]}),
        Door::Messages => json!({"model": "massgen", "max_tokens": 1024,
            "messages": [{"role": "user", "content": question}],
            "tools": [{"name": tool, "input_schema": search_schema()}]}),
    }
}

#[derive(Debug, Clone, Copy)]
enum Door {
    Chat,
    Responses,
    Messages,
}

impl Door {
    const ALL: [Door; 3] = [Door::Chat, Door::Responses, Door::Messages];

    fn path(self) -> &'static str {
        match self {
            Door::Chat => "/v1/chat/completions",
            Door::Responses => "/v1/responses",
            Door::Messages => "/v1/messages",
        }
    }

    /// The calls of an answer: (id, name, arguments as JSON).
    fn calls(self, body: &Value) -> Vec<(String, String, Value)> {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let parse = |v: &Value| serde_json::from_str(v.as_str().unwrap_or("null")).unwrap();
        match self {
            Door::Chat => body["choices"][0]["message"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let f = &c["function"];
                    (text(&c["id"]), text(&f["name"]), parse(&f["arguments"]))
                })
                .collect(),
            Door::Responses => body["output"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|i| i["type"] == "function_call")
                .map(|i| {
                    (
                        text(&i["call_id"]),
                        text(&i["name"]),
                        parse(&i["arguments"]),
                    )
                })
                .collect(),
            Door::Messages => body["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| (text(&b["id"]), text(&b["name"]), b["input"].clone()))
                .collect(),
        }
    }

    /// The text of a final answer.
    fn text(self, body: &Value) -> String {
        match self {
            Door::Chat => body["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            Door::Responses => body["output"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|i| i["type"] == "message")
                .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
                .filter_map(|p| p["text"].as_str().map(str::to_string))
                .collect(),
            Door::Messages => body["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|b| b["text"].as_str())
                .collect(),
        }
    }

    /// `first` continued with the answer's `call` (as the client echoes it) and the
    /// client's `result` for it, in the door's shape: the tool message (Chat), the
    /// `function_call_output` (Responses), the `tool_result` (Messages).
    fn follow_up(self, first: &Value, answer: &Value, result: Value) -> Value {
        let mut next = first.clone();
        let (id, _, _) = self.calls(answer).remove(0);
        match self {
            Door::Chat => {
                let list = next["messages"].as_array_mut().unwrap();
                list.push(answer["choices"][0]["message"].clone());
                list.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
            }
            Door::Responses => {
                let mut input = vec![json!({"role": "user", "content": first["input"].clone()})];
                input.extend(
                    answer["output"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|i| i["type"] == "function_call")
                        .cloned(),
                );
                input
                    .push(json!({"type": "function_call_output", "call_id": id, "output": result}));
                next["input"] = json!(input);
            }
            Door::Messages => {
                let list = next["messages"].as_array_mut().unwrap();
                list.push(json!({"role": "assistant", "content": answer["content"].clone()}));
                list.push(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": id, "content": result}]}));
            }
        }
        next
    }
}

/// Posts `body` to `door` and expects 200.
async fn answer(url: &str, door: Door, body: &Value) -> Value {
    let r = post(url, door.path(), None, body).await;
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{door:?}: {text}");
    serde_json::from_str(&text).unwrap()
}

/// Asks with `first`, expects the panel to call `tool`, answers the call with `result`,
/// and returns the panel's final answer (checked to quote `quoted`).
async fn tool_loop(
    url: &str,
    door: Door,
    first: &Value,
    tool: &str,
    result: Value,
    quoted: &str,
) -> Value {
    let called = answer(url, door, first).await;
    let calls = door.calls(&called);
    assert_eq!(calls.len(), 1, "{door:?}: {called}");
    assert_eq!(calls[0].1, tool, "{door:?}: {called}");
    let next = door.follow_up(first, &called, result);
    let last = answer(url, door, &next).await;
    assert!(door.calls(&last).is_empty(), "{door:?}: {last}");
    let text = door.text(&last);
    assert!(text.contains(quoted), "{door:?}: {last}");
    last
}

#[tokio::test]
async fn mcp_named_client_tools_complete_a_loop_on_every_door() {
    let s = Setup::with_panel(|url| panel_yaml(url, &CLIENT_TOOL, ""), &[]);
    for door in Door::ALL {
        let first = first_request(door, SEARCH);
        tool_loop(
            &s.server.url,
            door,
            &first,
            SEARCH,
            json!("issue 40: accept every tool shape"),
            "issue 40: accept every tool shape",
        )
        .await;
    }
}

/// A server whose agents run on the recording simulator (`policy=client_tool`), so a test
/// sees what the agents were sent. Each agent is `(id, backend lines)` below `model`.
struct Recorded {
    server: Proc,
    seen: Seen,
    _stop: tokio::sync::oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

async fn recorded(agents: &[(&str, &str)]) -> Recorded {
    let (sim, seen, stop) = recording::serve().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "team.yaml",
        &client_tool_panel(&sim, agents, ""),
    );
    let server = serve(&["--config", config.to_str().unwrap()]);
    Recorded {
        server,
        seen,
        _stop: stop,
        _dir: dir,
    }
}

/// A panel on the simulator at `sim` whose agents are `(id, backend lines)`, each model
/// `{id}:policy=client_tool,ttft_ms=5,token_ms=1{options}`.
fn client_tool_panel(sim: &str, agents: &[(&str, &str)], options: &str) -> String {
    let mut yaml = String::from("agents:\n");
    for (id, extra) in agents {
        yaml.push_str(&format!(
            "  - id: {id}\n    backend:\n      type: chatcompletion\n      base_url: {sim}/v1\n      model: \"{id}:policy=client_tool,ttft_ms=5,token_ms=1{options}\"\n{extra}"
        ));
    }
    yaml
}

/// The agents' turns the simulator received since the last look: the coordination turns
/// (requests offering `new_answer` or `vote`), or, when none offers them, every request (a
/// panel of one is a plain call: the client's own request, with no workflow tool).
fn turns(seen: &Seen) -> Vec<Value> {
    let all = recording::take(seen);
    let workflow = |r: &Value| {
        tool_names(r)
            .iter()
            .any(|n| n == "new_answer" || n == "vote")
    };
    if all.iter().any(workflow) {
        all.into_iter().filter(workflow).collect()
    } else {
        all
    }
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn a_client_tool_named_like_the_panels_own_mcp_tool_is_the_clients() {
    // The agent's MCP server `massgen` is another massgen's `/mcp` door: its own tools are
    // `mcp__massgen__deliberate` and `mcp__massgen__list_panels`, the names Claude Code
    // gives the same server's tools when the README's recipe adds it.
    let mcp = Setup::with_panel(|url| panel_yaml(url, &[CLIENT_TOOL[0]], ""), &[]);
    let servers = format!(
        "      mcp_servers:\n        massgen: {{type: streamable-http, url: \"{}/mcp\"}}\n",
        mcp.server.url
    );
    let p = recorded(&[("a", &servers)]).await;
    let tool = "mcp__massgen__list_panels";
    let first = first_request(Door::Messages, tool);
    tool_loop(
        &p.server.url,
        Door::Messages,
        &first,
        tool,
        json!("massgen, massgen/solo"),
        "massgen, massgen/solo",
    )
    .await;
    // The agent was offered the client's tool under its name and its own server's tools,
    // the one the client's shadows under an alias.
    let turns = turns(&p.seen);
    assert!(!turns.is_empty());
    let first_turn = &tool_names(&turns[0]);
    for name in [
        tool,
        "own_mcp__massgen__list_panels",
        "mcp__massgen__deliberate",
    ] {
        assert!(first_turn.iter().any(|n| n == name), "{first_turn:?}");
    }
    assert_eq!(first_turn.iter().filter(|n| *n == tool).count(), 1);
}

/// A 1x1 PNG, as Claude Code's `Read` of a screenshot returns it (base64).
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// Two agents: `seer` sees images, `blind` does not.
async fn vision_panel() -> Recorded {
    recorded(&[
        ("seer", "      vision: true\n"),
        ("blind", "      vision: false\n"),
    ])
    .await
}

/// Checks a session's coordination turns: `seer`'s carried the PNG as an image part,
/// `blind`'s the note that it cannot see it, and both the image's mark.
fn assert_image_reached_the_seer(turns: &[Value]) {
    let of = |who: &str| -> Vec<&Value> {
        turns
            .iter()
            .filter(|r| r["model"].as_str().unwrap_or_default().starts_with(who))
            .collect()
    };
    let (seer, blind) = (of("seer:"), of("blind:"));
    assert!(!seer.is_empty() && !blind.is_empty(), "{turns:?}");
    let png = format!("data:image/png;base64,{PNG}");
    for turn in &seer {
        let strings = recording::strings(turn);
        assert!(strings.contains(&png.as_str()), "{turn}");
        assert!(strings.iter().any(|s| s.contains("[image 1]")), "{turn}");
    }
    for turn in &blind {
        let strings = recording::strings(turn);
        assert!(
            !strings.iter().any(|s| s.starts_with("data:image")),
            "{turn}"
        );
        assert!(
            strings
                .iter()
                .any(|s| s.contains("[image 1]") && s.contains("Your model cannot see images")),
            "{turn}"
        );
    }
}

#[tokio::test]
async fn claude_codes_tool_search_loads_a_deferred_tool_for_the_next_turn() {
    let p = recorded(&[("a", "")]).await;
    // Claude Code 2.1.332: WebFetch waits behind ToolSearch.
    let mut first = first_request(Door::Messages, "ToolSearch");
    first["tools"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "WebFetch",
        "description": "Fetch a URL", "defer_loading": true,
        "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}}}));
    let reference = json!([{"type": "tool_reference", "tool_name": "WebFetch"}]);
    let last = tool_loop(
        &p.server.url,
        Door::Messages,
        &first,
        "ToolSearch",
        reference,
        "[tool WebFetch loaded",
    )
    .await;
    assert_eq!(last["stop_reason"], "end_turn");
    let turns = turns(&p.seen);
    let before = tool_names(&turns[0]);
    let after = tool_names(turns.last().unwrap());
    assert!(!before.contains(&"WebFetch".to_string()), "{before:?}");
    assert!(after.contains(&"WebFetch".to_string()), "{after:?}");
}

#[tokio::test]
async fn an_image_in_a_tool_result_reaches_the_agents_that_see_images() {
    let p = vision_panel().await;
    // Claude Code's Read of a PNG; the Chat door's tool message; a Responses output.
    let results = [
        (
            Door::Messages,
            json!([{"type": "text", "text": "Read image (1x1)"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]),
        ),
        (
            Door::Chat,
            json!([{"type": "text", "text": "Read image (1x1)"},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG}")}}]),
        ),
        (
            Door::Responses,
            json!([{"type": "input_text", "text": "Read image (1x1)"},
                {"type": "input_image", "image_url": format!("data:image/png;base64,{PNG}")}]),
        ),
    ];
    for (door, result) in results {
        let first = first_request(door, "Read");
        let called = answer(&p.server.url, door, &first).await;
        assert_eq!(door.calls(&called)[0].1, "Read", "{door:?}: {called}");
        recording::take(&p.seen);
        let next = door.follow_up(&first, &called, result);
        let last = answer(&p.server.url, door, &next).await;
        assert!(
            door.text(&last).contains("Read image (1x1)"),
            "{door:?}: {last}"
        );
        assert_image_reached_the_seer(&turns(&p.seen));
    }
}

#[tokio::test]
async fn documents_search_results_and_files_in_tool_results_reach_the_agents_as_text() {
    let s = Setup::with_panel(|url| panel_yaml(url, &CLIENT_TOOL, ""), &[]);
    let results = [
        (
            Door::Messages,
            json!([{"type": "document", "title": "NOTES.md",
                    "source": {"type": "text", "media_type": "text/plain", "data": "ship on Friday"}},
                {"type": "search_result", "source": "https://example.com/a", "title": "A",
                    "content": [{"type": "text", "text": "found on the web"}]},
                {"type": "document", "title": "spec.pdf",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}]),
            [
                "ship on Friday",
                "found on the web",
                "spec.pdf\": a PDF the panel cannot read",
            ],
        ),
        (
            Door::Responses,
            json!([{"type": "input_text", "text": "two files"},
                {"type": "input_file", "filename": "NOTES.md",
                    "file_data": "data:text/markdown;base64,c2hpcCBvbiBGcmlkYXk="},
                {"type": "input_file", "filename": "spec.pdf",
                    "file_data": "data:application/pdf;base64,JVBERi0="}]),
            [
                "ship on Friday",
                "two files",
                "spec.pdf (application/pdf): not a text file",
            ],
        ),
    ];
    for (door, result, quoted) in results {
        let first = first_request(door, "Read");
        let called = answer(&s.server.url, door, &first).await;
        let next = door.follow_up(&first, &called, result);
        let last = answer(&s.server.url, door, &next).await;
        let text = door.text(&last);
        for q in quoted {
            assert!(text.contains(q), "{door:?}: {q} not in {text}");
        }
    }
}

/// Codex's MCP tools (0.169 and 0.171): a `namespace` tool holding function tools.
fn codex_tools() -> Value {
    json!([
        {"type": "namespace", "name": "mcp__github", "description": "Tools of the github MCP server",
         "tools": [{"type": "function", "name": "search_issues", "description": "Search issues",
            "strict": false, "parameters": search_schema()}]},
        {"type": "function", "name": "exec_command", "parameters": {"type": "object",
            "properties": {"cmd": {"type": "string"}}}}
    ])
}

#[tokio::test]
async fn codex_namespace_tools_are_offered_and_their_calls_carry_the_namespace() {
    let p = recorded(&[("a", ""), ("b", "")]).await;
    let url = &p.server.url;
    let mut first = first_request(Door::Responses, "unused");
    first["tools"] = codex_tools();
    // Stateless, as Codex sends it (`store: false`, the whole input every time).
    let called = answer(url, Door::Responses, &first).await;
    let call = called["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .cloned()
        .unwrap_or_else(|| panic!("{called}"));
    assert_eq!(
        (&call["name"], &call["namespace"]),
        (&json!("search_issues"), &json!("mcp__github")),
        "{call}"
    );
    let offered = tool_names(&turns(&p.seen)[0]);
    assert!(
        offered.iter().any(|n| n == "mcp__github__search_issues"),
        "{offered:?}"
    );
    assert!(offered.iter().any(|n| n == "exec_command"), "{offered:?}");
    let next = Door::Responses.follow_up(&first, &called, json!("issue 40 is open"));
    let last = answer(url, Door::Responses, &next).await;
    assert!(
        Door::Responses.text(&last).contains("issue 40 is open"),
        "{last}"
    );
    // The agents saw the echoed call under its flat name.
    let seen = recording::strings(&turns(&p.seen)[0]).join("\n");
    assert!(
        seen.contains("result of mcp__github__search_issues"),
        "{seen}"
    );

    // Stored: the next request names the response and sends only the output.
    first["store"] = json!(true);
    let called = answer(url, Door::Responses, &first).await;
    let call_id = Door::Responses.calls(&called)[0].0.clone();
    let next = json!({"model": "massgen", "store": false, "tools": codex_tools(),
        "previous_response_id": called["id"],
        "input": [{"type": "function_call_output", "call_id": call_id, "output": "stored and found"}]});
    recording::take(&p.seen);
    let last = answer(url, Door::Responses, &next).await;
    assert!(
        Door::Responses.text(&last).contains("stored and found"),
        "{last}"
    );
    let seen = recording::strings(&turns(&p.seen)[0]).join("\n");
    assert!(
        seen.contains("result of mcp__github__search_issues"),
        "{seen}"
    );

    // Streamed: the item and the arguments' end name the tool and its namespace.
    first["stream"] = json!(true);
    let r = post(url, "/v1/responses", None, &first).await;
    assert_eq!(r.status(), 200);
    let (events, _) = crate::support::parse_named_sse(&r.text().await.unwrap());
    let done = events
        .iter()
        .find(|e| e.event == "response.function_call_arguments.done")
        .expect("arguments done");
    assert_eq!(done.data["name"], "search_issues");
    assert_eq!(done.data["namespace"], "mcp__github");
    let item = events
        .iter()
        .find(|e| {
            e.event == "response.output_item.done" && e.data["item"]["type"] == "function_call"
        })
        .expect("the call's item");
    assert_eq!(item.data["item"]["namespace"], "mcp__github");
    assert_eq!(item.data["item"]["name"], "search_issues");
}

/// Codex CLI (tests/clients, 0.171) with one MCP server, `massgen` (a demo server's `/mcp`
/// door): it sends that server's tools as the namespace `mcp__massgen`. The panel (whose
/// agent calls `mcp__massgen__list_panels`, `call=` of the simulator) answers with that
/// call; Codex runs it on the MCP server and sends the output back; the panel's answer
/// quotes it.
#[test]
fn codex_runs_the_mcp_tool_the_panel_called_through_its_namespace() {
    let Some(codex) = client("codex") else { return };
    let mcp = serve(&["--demo"]);
    let sim = recording::RecordingSimulator::start();
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "agents:\n  - id: a\n    backend:\n      type: chatcompletion\n      base_url: {}/v1\n      model: \"a:policy=client_tool,call=mcp__massgen__list_panels,ttft_ms=5,token_ms=1\"\n",
        sim.url
    );
    let config = write(dir.path(), "team.yaml", &yaml);
    let server = serve(&["--config", config.to_str().unwrap()]);

    let home = tempfile::tempdir().unwrap();
    let last = home.path().join("last.txt");
    let provider = format!(
        "model_providers.massgen={{name=\"MassGen\",base_url=\"{}/v1\",wire_api=\"responses\",env_key=\"MASSGEN_API_KEY\",request_max_retries=0,stream_max_retries=0}}",
        server.url
    );
    let mcp_server = format!("mcp_servers.massgen={{url=\"{}/mcp\"}}", mcp.url);
    let mut cmd = isolated(&codex, home.path());
    cmd.env("CODEX_HOME", home.path())
        .env("MASSGEN_API_KEY", "unused")
        .args(["exec", "--skip-git-repo-check", "--ephemeral"])
        .args([
            "--sandbox",
            "read-only",
            "--disable",
            "plugins",
            "--json",
            "-o",
        ])
        .arg(&last)
        .args(["-c", "model_provider=massgen", "-c", "model=massgen"])
        .args([
            "-c",
            "approval_policy=never",
            "-c",
            &provider,
            "-c",
            &mcp_server,
        ])
        .args(["-c", "check_for_update_on_startup=false"])
        .args(["-c", "analytics.enabled=false"])
        .arg("Which panels are there?");
    let output = crate::support::run_bounded(cmd, CLIENT_TIMEOUT);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let log = format!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "codex failed: {log}");
    let requests = sim.requests();
    let offered: Vec<String> = requests.iter().flat_map(tool_names).collect();
    assert!(
        offered.iter().any(|n| n == "mcp__massgen__list_panels"),
        "{offered:?}\n{log}"
    );
    // Codex ran the call on its MCP server: an `mcp_tool_call` item of `massgen`.
    let items: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "item.completed")
        .map(|e| e["item"].clone())
        .collect();
    let call = items
        .iter()
        .find(|i| i["type"] == "mcp_tool_call")
        .unwrap_or_else(|| panic!("no mcp_tool_call item: {log}"));
    assert_eq!(
        (&call["server"], &call["tool"]),
        (&json!("massgen"), &json!("list_panels")),
        "{call}"
    );
    // Its output came back, and the panel's answer quotes it (the MCP server's panel).
    let answer = std::fs::read_to_string(&last).unwrap_or_default();
    assert!(
        answer.contains(r#""id":"sim-analyst""#),
        "answer: {answer}\n{log}"
    );
}

/// `claude ARGS…` (tests/clients) in `home`, where its config lives (`~/.claude.json`,
/// the project being `home`), with the server at `url` as its model, offline and with its
/// own network off-switches; exit 0 is asserted. Its stdout.
fn claude_code(claude: &Path, home: &Path, url: &str, args: &[&str]) -> String {
    let mut cmd = isolated(claude, home);
    cmd.env("ANTHROPIC_BASE_URL", url)
        .env("ANTHROPIC_API_KEY", "unused")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        // One retry at most, and no silent non-streaming retry masking a broken stream.
        .env("CLAUDE_CODE_MAX_RETRIES", "1")
        .env("CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK", "1")
        .args(args);
    let output = crate::support::run_bounded(cmd, CLIENT_TIMEOUT);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "claude {args:?} failed: {stdout}\n{stderr}"
    );
    stdout
}

/// `claude -p PROMPT --output-format json --model massgen ARGS…`: the result object, after
/// asserting `is_error: false`.
fn claude_print(claude: &Path, home: &Path, url: &str, prompt: &str, args: &[&str]) -> Value {
    let mut all = vec![
        "-p",
        prompt,
        "--output-format",
        "json",
        "--model",
        "massgen",
    ];
    all.extend_from_slice(args);
    let stdout = claude_code(claude, home, url, &all);
    let result: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    assert_eq!(result["is_error"], false, "{result}");
    result
}

/// Claude Code (tests/clients) as the README sets it up: the server as its model
/// (`ANTHROPIC_BASE_URL`) and, by `claude mcp add --transport http`, as its MCP server
/// `massgen` (the same server's `/mcp`). Claude Code 2.1.332 defers MCP tools: they are
/// named in its system text, not sent, until `ToolSearch` loads them. The panel's agent
/// (`call=mcp__massgen__list_panels`) calls `ToolSearch` for it, Claude Code answers with a
/// `tool_reference` and sends the tool from then on, the agent calls it, Claude Code runs
/// it on the MCP door and sends the result back, and the panel's answer quotes it.
#[test]
fn claude_code_loads_the_readmes_mcp_tool_through_tool_search_and_runs_it() {
    let Some(claude) = client("claude") else {
        return;
    };
    let sim = recording::RecordingSimulator::start();
    let dir = tempfile::tempdir().unwrap();
    let yaml = client_tool_panel(&sim.url, &[("a", "")], ",call=mcp__massgen__list_panels");
    let config = write(dir.path(), "team.yaml", &yaml);
    let server = serve(&["--config", config.to_str().unwrap()]);
    let home = tempfile::tempdir().unwrap();
    let mcp = format!("{}/mcp", server.url);
    let add = ["mcp", "add", "--transport", "http", "massgen", &mcp];
    claude_code(&claude, home.path(), &server.url, &add);

    let result = claude_print(
        &claude,
        home.path(),
        &server.url,
        "Which panels are there?",
        &["--allowedTools", "mcp__massgen__list_panels"],
    );
    // Three requests: the search, the call, the answer.
    assert_eq!(result["num_turns"], 3, "{result}");
    let text = result["result"].as_str().unwrap_or_default();
    for quoted in [
        "[tool mcp__massgen__list_panels loaded",
        r#""panel":"massgen""#,
    ] {
        assert!(text.contains(quoted), "{quoted} not in {result}");
    }
    // What the agents were offered: the tool only once the search loaded it.
    let requests = sim.requests();
    let has = |r: &Value, s: &str| recording::strings(r).iter().any(|t| t.contains(s));
    let (before, after): (Vec<&Value>, Vec<&Value>) = requests
        .iter()
        .filter(|r| !tool_names(r).is_empty())
        .partition(|r| !has(r, "[tool mcp__massgen__list_panels loaded"));
    assert!(!before.is_empty() && !after.is_empty(), "{requests:?}");
    for r in &before {
        let offered = tool_names(r);
        assert!(offered.iter().any(|n| n == "ToolSearch"), "{offered:?}");
        assert!(
            !offered.iter().any(|n| n.starts_with("mcp__massgen__")),
            "offered before it was loaded: {offered:?}"
        );
    }
    for r in &after {
        let offered = tool_names(r);
        assert!(
            offered.iter().any(|n| n == "mcp__massgen__list_panels"),
            "{offered:?}"
        );
        // Only what was loaded: the other deferred tools stay out.
        assert!(
            !offered
                .iter()
                .any(|n| n == "mcp__massgen__deliberate" || n == "WebFetch"),
            "{offered:?}"
        );
    }
}

/// Claude Code (tests/clients) reads a PNG in its working folder with its `Read` tool, which
/// the panel's agents called (`call=Read`, the path from the question's `[sim:args=…]`),
/// and sends it back as an `image` block: the agent that sees images gets the image, the
/// other one the note that it cannot see it.
#[test]
fn claude_codes_read_of_a_png_reaches_the_agent_that_sees_images() {
    let Some(claude) = client("claude") else {
        return;
    };
    let sim = recording::RecordingSimulator::start();
    let dir = tempfile::tempdir().unwrap();
    let yaml = client_tool_panel(
        &sim.url,
        &[
            ("seer", "      vision: true\n"),
            ("blind", "      vision: false\n"),
        ],
        ",call=Read",
    );
    let config = write(dir.path(), "team.yaml", &yaml);
    let server = serve(&["--config", config.to_str().unwrap()]);
    let home = tempfile::tempdir().unwrap();
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD
        .decode(PNG)
        .unwrap();
    std::fs::write(home.path().join("pixel.png"), png).unwrap();

    let result = claude_print(
        &claude,
        home.path(),
        &server.url,
        r#"What is in pixel.png? [sim:args={"file_path": "pixel.png"}]"#,
        &["--allowedTools", "Read"],
    );
    assert_eq!(result["num_turns"], 2, "{result}");
    let text = result["result"].as_str().unwrap_or_default();
    assert!(text.contains("result of Read"), "{result}");
    // The second session's coordination turns: those that carry the Read's result.
    let with_result: Vec<Value> = sim
        .requests()
        .into_iter()
        .filter(|r| {
            !tool_names(r).is_empty()
                && recording::strings(r)
                    .iter()
                    .any(|s| s.contains("result of Read"))
        })
        .collect();
    assert_image_reached_the_seer(&with_result);
}
