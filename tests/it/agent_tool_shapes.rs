//! The tool shapes real agents send (issue 40), end to end on the real binary: Claude
//! Code's `mcp__{server}__{tool}` names on every door, also where the panel's own MCP
//! server has the same name. Each test runs a whole tool loop: the client sends its tools,
//! the panel (the simulator's `policy=client_tool`) calls one, the client sends the result
//! in its shape, and the panel's answer comes back 200.

use serde_json::{Value, json};

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

/// A server whose one agent (on the recording simulator, `policy=client_tool`) has the
/// MCP server `massgen`: another massgen's `/mcp` door. Its own tools are
/// `mcp__massgen__deliberate` and `mcp__massgen__list_panels`, the names Claude Code
/// gives the same server's tools when the README's recipe adds it.
struct OwnMcpPanel {
    server: Proc,
    seen: Seen,
    _stop: tokio::sync::oneshot::Sender<()>,
    _mcp: Setup,
    _dir: tempfile::TempDir,
}

async fn own_mcp_panel() -> OwnMcpPanel {
    let mcp = Setup::with_panel(|url| panel_yaml(url, &[CLIENT_TOOL[0]], ""), &[]);
    let (sim, seen, stop) = recording::serve().await;
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "agents:\n  - id: a\n    backend:\n      type: chatcompletion\n      base_url: {sim}/v1\n      model: \"a:policy=client_tool,ttft_ms=5,token_ms=1\"\n      mcp_servers:\n        massgen: {{type: streamable-http, url: \"{}/mcp\"}}\n",
        mcp.server.url
    );
    let config = write(dir.path(), "team.yaml", &yaml);
    let server = serve(&["--config", config.to_str().unwrap()]);
    OwnMcpPanel {
        server,
        seen,
        _stop: stop,
        _mcp: mcp,
        _dir: dir,
    }
}

/// The tool names of every coordination turn the simulator received (a request offering
/// `new_answer` or `vote`).
fn turn_tools(seen: &Seen) -> Vec<Vec<String>> {
    recording::take(seen)
        .iter()
        .filter_map(|r| r["tools"].as_array())
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .filter(|names| names.iter().any(|n| n == "new_answer" || n == "vote"))
        .collect()
}

#[tokio::test]
async fn a_client_tool_named_like_the_panels_own_mcp_tool_is_the_clients() {
    let p = own_mcp_panel().await;
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
    let turns = turn_tools(&p.seen);
    assert!(!turns.is_empty());
    let first_turn = &turns[0];
    for name in [
        tool,
        "own_mcp__massgen__list_panels",
        "mcp__massgen__deliberate",
    ] {
        assert!(first_turn.iter().any(|n| n == name), "{first_turn:?}");
    }
    assert_eq!(first_turn.iter().filter(|n| *n == tool).count(), 1);
}
