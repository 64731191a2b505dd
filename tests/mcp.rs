//! MCP tools for agents, against in-process test servers built with the SDK's server side:
//! streamable HTTP on a loopback port, and stdio (this test binary started again as a child
//! process with MASSGEN_TEST_MCP_STDIO=1). `harness = false`: `main` runs the tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The helpers of the main test binary; this binary uses a few of them.
#[allow(dead_code)]
#[path = "it/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use massgen_core::coordination::*;
use massgen_core::provider::Role;
use massgen_tools::{
    AgentToolsConfig, McpServerConfig, McpTransport, SecretText, ToolRegistry,
    rmcp_client::RmcpConnector,
};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use support::engine::*;
use tokio_util::sync::CancellationToken;

const STDIO_ENV: &str = "MASSGEN_TEST_MCP_STDIO";

/// `delete` calls served by this process's HTTP test servers.
static DELETES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

// ---- the test server ----

#[derive(Debug, Clone)]
struct TestTools {
    #[allow(dead_code)] // read by the tool_handler macro
    tool_router: ToolRouter<Self>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    text: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

#[tool_router]
impl TestTools {
    fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "Echo the text back")]
    fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text
    }

    #[tool(description = "Add two integers")]
    fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        (a + b).to_string()
    }

    #[tool(description = "Always fails")]
    fn fail(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::error(vec![ContentBlock::text(
            "the tool broke",
        )]))
    }

    #[tool(description = "Takes a minute")]
    async fn slow(&self) -> String {
        tokio::time::sleep(Duration::from_secs(60)).await;
        "late".into()
    }

    #[tool(description = "Returns 100000 bytes")]
    fn big(&self) -> String {
        "x".repeat(100_000)
    }

    #[tool(description = "Deletes everything (not offered in most tests)")]
    fn delete(&self) -> String {
        DELETES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        "deleted".into()
    }

    #[tool(
        description = "Looks a file up (read-only)",
        annotations(read_only_hint = true)
    )]
    fn lookup(&self) -> String {
        "report.txt is stale".into()
    }

    #[tool(description = "Ends the server process")]
    fn crash(&self) -> String {
        std::process::exit(3)
    }

    #[tool(description = "The server's process id")]
    fn pid(&self) -> String {
        std::process::id().to_string()
    }
}

#[tool_handler]
impl ServerHandler for TestTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

async fn stdio_server() {
    let service = TestTools::new()
        .serve(rmcp::transport::stdio())
        .await
        .expect("stdio server");
    let _ = service.waiting().await;
}

async fn http_server() -> (String, CancellationToken) {
    let ct = CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default();
    config.cancellation_token = ct.child_token();
    let service: StreamableHttpService<TestTools, LocalSessionManager> =
        StreamableHttpService::new(|| Ok(TestTools::new()), Default::default(), config);
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = ct.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled_owned().await })
            .await;
    });
    (format!("http://{addr}/mcp"), ct)
}

// ---- configs ----

fn http_config(url: &str) -> McpServerConfig {
    McpServerConfig {
        name: "web".into(),
        transport: McpTransport::StreamableHttp {
            url: url.into(),
            headers: BTreeMap::from([("x-test".to_string(), SecretText::new("1"))]),
        },
    }
}

fn stdio_config(name: &str) -> McpServerConfig {
    McpServerConfig {
        name: name.into(),
        transport: McpTransport::Stdio {
            command: std::env::current_exe().unwrap().display().to_string(),
            args: Vec::new(),
            env: BTreeMap::from([(STDIO_ENV.to_string(), SecretText::new("1"))]),
            cwd: None,
        },
    }
}

fn tools_config(servers: Vec<McpServerConfig>, limits: ToolLimits) -> AgentToolsConfig {
    AgentToolsConfig {
        servers,
        allowed: None,
        exclude: vec!["mcp__web__delete".into(), "mcp__local__delete".into()],
        read_only: BTreeMap::new(),
        limits,
    }
}

fn registry() -> ToolRegistry {
    ToolRegistry::new(Arc::new(RmcpConnector))
}

fn names(specs: &[massgen_core::provider::ToolSpec]) -> Vec<String> {
    let mut n: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    n.sort();
    n
}

// ---- tests ----

async fn discovery_and_filters_over_both_transports() {
    let (url, stop) = http_server().await;
    let reg = registry();
    let config = tools_config(
        vec![http_config(&url), stdio_config("local")],
        ToolLimits::default(),
    );
    let specs = reg.toolbox(&config).specs().await;
    let all = names(&specs);
    for expected in [
        "mcp__web__echo",
        "mcp__local__echo",
        "mcp__web__add",
        "mcp__local__pid",
    ] {
        assert!(all.contains(&expected.to_string()), "{all:?}");
    }
    assert!(!all.iter().any(|n| n.ends_with("__delete")), "{all:?}");
    let echo = specs.iter().find(|s| s.name == "mcp__web__echo").unwrap();
    assert_eq!(echo.description, "Echo the text back");
    assert_eq!(echo.parameters["properties"]["text"]["type"], "string");

    let only = AgentToolsConfig {
        allowed: Some(vec!["mcp__web__add".into(), "mcp__local__echo".into()]),
        ..config.clone()
    };
    assert_eq!(
        names(&reg.toolbox(&only).specs().await),
        ["mcp__local__echo", "mcp__web__add"]
    );
    // Calls go to the right server and tool; both sessions share one stdio process.
    let tb = reg.toolbox(&only);
    tb.specs().await;
    assert_eq!(
        tb.call("mcp__web__add", r#"{"a":2,"b":3}"#).await,
        Ok("5".into())
    );
    assert_eq!(
        tb.call("mcp__local__echo", r#"{"text":"hi"}"#).await,
        Ok("hi".into())
    );
    assert!(tb.call("mcp__web__delete", "{}").await.is_err());
    assert_eq!(reg.server(&stdio_config("local")).starts(), 1);
    reg.shutdown().await;
    stop.cancel();
}

/// One agent whose provider follows `script`: a list of tool-call sets, one per upstream
/// call, then a `new_answer` quoting the last tool result it saw.
fn tool_user(script: Vec<Vec<(&'static str, &'static str)>>) -> Scripted {
    Scripted::new("t", move |req, n| {
        if let Some(calls) = script.get(n) {
            let mut steps: Vec<Step> = calls
                .iter()
                .map(|(name, args)| tool_call(name, args))
                .collect();
            // Distinct ids, as real models send.
            for (i, s) in steps.iter_mut().enumerate() {
                if let Step::Chunk(massgen_core::provider::ProviderChunk::ToolCall(c)) = s {
                    c.id = format!("call_{n}_{i}");
                }
            }
            steps.extend(text_then(&[], Vec::new()));
            return steps;
        }
        let last = req
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::Tool)
            .map(|m| m.content.clone())
            .unwrap_or_default();
        answer(&format!("result: {last}"))
    })
}

async fn run_with_tools(p: &Scripted, config: &AgentToolsConfig, reg: &ToolRegistry) -> Run {
    let mut s = spec(
        &[("t", p)],
        OrchestratorOptions {
            skip_final_presentation: true,
            ..OrchestratorOptions::default()
        },
    );
    s.agents[0].tools = Some(Arc::new(reg.toolbox(config)));
    run(s).await
}

fn tool_events(run: &Run) -> Vec<(String, u32, Option<String>)> {
    run.kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::ToolCalled {
                tool, round, error, ..
            } => Some((tool.clone(), *round, error.clone())),
            _ => None,
        })
        .collect()
}

async fn a_tool_loop_of_several_rounds_with_parallel_calls() {
    let (url, stop) = http_server().await;
    let reg = registry();
    let config = tools_config(vec![http_config(&url)], ToolLimits::default());
    let p = tool_user(vec![
        vec![
            ("mcp__web__echo", r#"{"text":"one"}"#),
            ("mcp__web__add", r#"{"a":1,"b":2}"#),
        ],
        vec![("mcp__web__echo", r#"{"text":"two"}"#)],
    ]);
    let run = run_with_tools(&p, &config, &reg).await;
    assert_eq!(run.summary().final_answer, "result: two");
    let events = tool_events(&run);
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(events.iter().all(|(_, _, e)| e.is_none()));
    assert_eq!(
        events.iter().map(|e| e.1).collect::<Vec<_>>().iter().max(),
        Some(&2)
    );
    // The second call saw both results of the first round, in call order.
    let second = &p.requests()[1];
    let results: Vec<&str> = second
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(results, ["one", "3"]);
    assert!(second.tools.iter().any(|t| t.name == "mcp__web__echo"));
    // Usage of all three upstream calls of the turn is counted.
    assert_eq!(
        run.summary().usage.total_tokens,
        3 * CALL_USAGE.total_tokens
    );
    reg.shutdown().await;
    stop.cancel();
}

async fn failing_slow_and_big_tools_become_tool_results() {
    let (url, stop) = http_server().await;
    let reg = registry();
    let limits = ToolLimits {
        max_rounds: 10,
        call_timeout: Duration::from_millis(300),
        max_result_bytes: 1000,
    };
    let config = tools_config(vec![http_config(&url)], limits);
    let p = tool_user(vec![vec![
        ("mcp__web__fail", "{}"),
        ("mcp__web__slow", "{}"),
        ("mcp__web__big", "{}"),
        ("mcp__web__echo", "not json"),
    ]]);
    let run = run_with_tools(&p, &config, &reg).await;
    assert!(
        run.result.is_ok(),
        "tool failures must not fail the session"
    );
    let results: Vec<String> = p.requests()[1]
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.clone())
        .collect();
    assert_eq!(results[0], "Error: the tool broke");
    assert!(
        results[1].starts_with("Error: the tool call timed out"),
        "{}",
        results[1]
    );
    assert!(
        results[2].len() < 1200 && results[2].contains("[truncated: the result had 100000 bytes")
    );
    assert!(results[3].contains("JSON object"), "{}", results[3]);
    let errors: Vec<bool> = tool_events(&run).iter().map(|e| e.2.is_some()).collect();
    assert_eq!(errors, [true, true, false, true]);
    reg.shutdown().await;
    stop.cancel();
}

async fn the_round_limit_makes_the_agent_finish_without_tools() {
    let (url, stop) = http_server().await;
    let reg = registry();
    let limits = ToolLimits {
        max_rounds: 2,
        ..ToolLimits::default()
    };
    let config = tools_config(vec![http_config(&url)], limits);
    let echo = vec![("mcp__web__echo", r#"{"text":"again"}"#)];
    let p = tool_user(vec![echo.clone(), echo.clone(), echo]);
    let run = run_with_tools(&p, &config, &reg).await;
    assert_eq!(tool_events(&run).len(), 2);
    let requests = p.requests();
    assert_eq!(requests.len(), 4);
    // The call after the limit is told so and offered no MCP tools.
    assert!(
        !requests[3]
            .tools
            .iter()
            .any(|t| t.name.starts_with("mcp__"))
    );
    assert!(requests[3].tools.iter().any(|t| t.name == "new_answer"));
    assert!(run.summary().final_answer.contains("tool round limit (2)"));

    // A model that keeps calling the withdrawn tools gets an invalid turn, not a loop.
    let echo = vec![("mcp__web__echo", r#"{"text":"again"}"#)];
    let p = tool_user(vec![echo.clone(), echo.clone(), echo.clone(), echo]);
    let run = run_with_tools(&p, &config, &reg).await;
    assert_eq!(run.invalid_checks("agent1"), ["unknown_tool"]);
    assert_eq!(tool_events(&run).len(), 2);
    assert!(run.result.is_ok());
    reg.shutdown().await;
    stop.cancel();
}

async fn a_crashed_stdio_server_is_restarted() {
    let reg = registry();
    let config = tools_config(vec![stdio_config("local")], ToolLimits::default());
    let tb = reg.toolbox(&config);
    tb.specs().await;
    let first = tb.call("mcp__local__pid", "{}").await.unwrap();
    let crashed = tb.call("mcp__local__crash", "{}").await;
    assert!(crashed.is_err(), "{crashed:?}");
    let second = tb.call("mcp__local__pid", "{}").await.unwrap();
    assert_ne!(first, second, "a new process answers");
    assert_eq!(reg.server(&stdio_config("local")).starts(), 2);
    // Shutdown stops the child process.
    reg.shutdown().await;
    let pid: i32 = second.parse().unwrap();
    let mut gone = false;
    for _ in 0..100 {
        let alive = std::process::Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !alive {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the stdio server {pid} still runs after shutdown");
}

/// The real binary with a panel whose agent has a stdio MCP server (this binary) and the
/// simulator's `policy=client_tool`, which calls the first non-workflow tool it is offered.
async fn the_server_runs_mcp_tools_for_its_agents() {
    let mock = support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap().display().to_string();
    let yaml = format!(
        "agents:\n  - id: researcher\n    backend:\n      type: chatcompletion\n      base_url: {}/v1\n      model: \"r:policy=client_tool,ttft_ms=5,token_ms=1\"\n      mcp_servers:\n        local: {{type: stdio, command: \"{exe}\", env: {{{STDIO_ENV}: \"1\"}}}}\n      allowed_tools: [mcp__local__echo]\n",
        mock.url
    );
    let config = support::write(dir.path(), "team.yaml", &yaml);
    let server = support::serve(&["--config", config.to_str().unwrap()]);
    let body =
        json!({"model": "massgen", "messages": [{"role": "user", "content": "Say something"}]});
    let resp: Value = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&body)
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let message = &resp["choices"][0]["message"];
    let reasoning = message["reasoning_content"].as_str().unwrap_or_default();
    assert!(
        reasoning.contains("[agent1] used mcp__local__echo ("),
        "{resp}"
    );
    // The agent's answer was written after it saw the tool's result.
    let answer = resp["massgen_metadata"]["answers"][0]["content"]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(answer.contains("Tool results used: simulated"), "{resp}");
    // The call is counted in the metrics too.
    let metrics = reqwest::Client::new()
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"massgen_tool_calls_total{outcome="ok",tool="mcp__local__echo"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"massgen_tool_call_duration_seconds_count{tool="mcp__local__echo"} 1"#),
        "{metrics}"
    );
    drop(server);
    drop(mock);
}

/// `readOnlyHint` marks a tool read-only; a server's `read_only_tools` list overrides the
/// hints either way.
async fn read_only_comes_from_the_hint_or_the_config_list() {
    let (url, stop) = http_server().await;
    let reg = registry();
    let mut config = tools_config(vec![http_config(&url)], ToolLimits::default());
    config.exclude.clear();
    let read_only = |tools: &[OwnTool]| {
        let mut n: Vec<String> = tools
            .iter()
            .filter(|t| t.read_only)
            .map(|t| t.spec.name.clone())
            .collect();
        n.sort();
        n
    };
    let tools = reg.toolbox(&config).tools().await;
    assert!(tools.iter().any(|t| t.spec.name == "mcp__web__delete"));
    assert_eq!(read_only(&tools), ["mcp__web__lookup"]);
    config.read_only = BTreeMap::from([("web".to_string(), vec!["echo".to_string()])]);
    assert_eq!(
        read_only(&reg.toolbox(&config).tools().await),
        ["mcp__web__echo"]
    );
    reg.shutdown().await;
    stop.cancel();
}

/// Planning mode over a real MCP server: two agents look up in their turns, `delete` is
/// offered only to the winner's presentation, which runs it once.
async fn planning_mode_deletes_once_over_mcp() {
    let (url, stop) = http_server().await;
    let reg = registry();
    let mut config = tools_config(vec![http_config(&url)], ToolLimits::default());
    config.exclude.clear();
    config.allowed = Some(vec!["mcp__web__lookup".into(), "mcp__web__delete".into()]);
    let agent = |name: &str| {
        Scripted::new(name, |req, _| {
            let names = tool_names(req);
            let seen = req.messages.iter().any(|m| m.role == Role::Tool);
            let turn = names.iter().any(|n| n == "new_answer" || n == "vote");
            if !turn {
                if names.iter().any(|n| n == "mcp__web__delete") && !seen {
                    return text_then(&[], vec![tool_call("mcp__web__delete", "{}")]);
                }
                return present(&["Done."]);
            }
            if names.iter().any(|n| n == "mcp__web__lookup") && !seen {
                return text_then(&[], vec![tool_call("mcp__web__lookup", "{}")]);
            }
            let labels = vote_enum(req);
            if labels.is_empty() {
                return answer("Delete report.txt.");
            }
            vote(&labels[0], "agreed")
        })
    };
    let (a, b) = (agent("a"), agent("b"));
    let mut s = spec(
        &[("a", &a), ("b", &b)],
        OrchestratorOptions {
            planning_mode: true,
            ..OrchestratorOptions::default()
        },
    );
    for agent in &mut s.agents {
        agent.tools = Some(Arc::new(reg.toolbox(&config)));
    }
    let before = DELETES.load(std::sync::atomic::Ordering::SeqCst);
    let run = run(s).await;
    assert_eq!(run.summary().final_answer, "Done.");
    assert_eq!(
        DELETES.load(std::sync::atomic::Ordering::SeqCst) - before,
        1
    );
    let used: Vec<(String, String)> = run
        .kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::ToolCalled { agent, tool, .. } => Some((agent.label.clone(), tool.clone())),
            _ => None,
        })
        .collect();
    assert!(
        used.contains(&("agent2".into(), "mcp__web__lookup".into())),
        "{used:?}"
    );
    let winner = run.summary().winner.label.clone();
    assert_eq!(used.last(), Some(&(winner, "mcp__web__delete".to_string())));
    for p in [&a, &b] {
        for r in p.requests() {
            let names = tool_names(&r);
            if names.iter().any(|n| n == "vote" || n == "new_answer") {
                assert!(!names.iter().any(|n| n == "mcp__web__delete"), "{names:?}");
            }
        }
    }
    reg.shutdown().await;
    stop.cancel();
}

/// The real binary under planning mode: two simulated agents whose only MCP tool is
/// `delete` answer and vote without it; the winner's presentation calls it, once.
async fn the_server_runs_held_tools_once_while_presenting() {
    let mock = support::mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap().display().to_string();
    let agent = |id: &str| {
        format!(
            "  - id: {id}\n    backend:\n      type: chatcompletion\n      base_url: {}/v1\n      model: \"{id}:policy=client_tool,ttft_ms=5,token_ms=1\"\n      mcp_servers:\n        local: {{type: stdio, command: \"{exe}\", env: {{{STDIO_ENV}: \"1\"}}}}\n      allowed_tools: [mcp__local__delete]\n",
            mock.url
        )
    };
    let yaml = format!(
        "agents:\n{}{}orchestrator:\n  coordination: {{enable_planning_mode: true}}\n",
        agent("a"),
        agent("b")
    );
    let config = support::write(dir.path(), "team.yaml", &yaml);
    let server = support::serve(&["--config", config.to_str().unwrap()]);
    let body = json!({"model": "massgen", "messages": [{"role": "user", "content": "Clean up"}]});
    let resp: Value = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&body)
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let answer = resp["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(answer.contains("Tool results used: deleted"), "{resp}");
    // The answers were written without the tool: it was not offered in the turns.
    for a in resp["massgen_metadata"]["answers"].as_array().unwrap() {
        let text = a["content"]["text"].as_str().unwrap_or_default();
        assert!(!text.contains("Tool results used"), "{resp}");
    }
    let metrics = reqwest::Client::new()
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"massgen_tool_calls_total{outcome="ok",tool="mcp__local__delete"} 1"#),
        "{metrics}"
    );
    drop(server);
    drop(mock);
}

type Test = fn() -> Pin<Box<dyn Future<Output = ()>>>;

fn main() {
    if std::env::var_os(STDIO_ENV).is_some() {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(stdio_server());
        return;
    }
    let tests: Vec<(&str, Test)> = vec![
        ("discovery_and_filters_over_both_transports", || {
            Box::pin(discovery_and_filters_over_both_transports())
        }),
        ("a_tool_loop_of_several_rounds_with_parallel_calls", || {
            Box::pin(a_tool_loop_of_several_rounds_with_parallel_calls())
        }),
        ("failing_slow_and_big_tools_become_tool_results", || {
            Box::pin(failing_slow_and_big_tools_become_tool_results())
        }),
        (
            "the_round_limit_makes_the_agent_finish_without_tools",
            || Box::pin(the_round_limit_makes_the_agent_finish_without_tools()),
        ),
        ("a_crashed_stdio_server_is_restarted", || {
            Box::pin(a_crashed_stdio_server_is_restarted())
        }),
        ("the_server_runs_mcp_tools_for_its_agents", || {
            Box::pin(the_server_runs_mcp_tools_for_its_agents())
        }),
        ("read_only_comes_from_the_hint_or_the_config_list", || {
            Box::pin(read_only_comes_from_the_hint_or_the_config_list())
        }),
        ("planning_mode_deletes_once_over_mcp", || {
            Box::pin(planning_mode_deletes_once_over_mcp())
        }),
        ("the_server_runs_held_tools_once_while_presenting", || {
            Box::pin(the_server_runs_held_tools_once_while_presenting())
        }),
    ];
    // libtest-style: flags are ignored, the first other argument filters by name.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut ran = 0;
    for (name, test) in tests {
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        println!("test {name} ...");
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(90), test())
                .await
                .unwrap_or_else(|_| panic!("{name} timed out"))
        });
        println!("test {name} ... ok");
        ran += 1;
    }
    println!("test result: ok. {ran} passed");
}
