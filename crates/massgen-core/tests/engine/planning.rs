//! Planning mode (`orchestrator.coordination.enable_planning_mode`, issue 25): agents'
//! tools that change things are held back during coordination and run once, by the
//! winner, while presenting. Scripted providers, fake tools, paused time; the config keys
//! are tested in the root crate (`tests/it/engine_planning.rs`).

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use massgen_core::coordination::*;
use massgen_core::provider::{ProviderRequest, Role, ToolSpec};
use massgen_core::testing::*;
use serde_json::json;

const LOOKUP: &str = "mcp__files__lookup";
const DELETE: &str = "mcp__files__delete";

/// An MCP-like source with a read-only `lookup` and a `delete` that is not; it records
/// every call (shared by the agents, like one MCP server).
#[derive(Debug, Default)]
struct Files {
    calls: Mutex<Vec<String>>,
}

impl Files {
    fn calls(&self, name: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| *c == name)
            .count()
    }
}

#[derive(Debug, Clone)]
struct FilesTools(Arc<Files>);

impl AgentTools for FilesTools {
    fn discover(&self) -> BoxFuture<'static, Vec<OwnTool>> {
        let tool = |name: &str, read_only| OwnTool {
            spec: ToolSpec {
                name: name.into(),
                description: format!("{name} tool"),
                parameters: json!({"type": "object", "properties": {}}),
            },
            read_only,
        };
        let tools = vec![tool(LOOKUP, true), tool(DELETE, false)];
        Box::pin(async move { tools })
    }

    fn call(&self, name: String, _arguments: String) -> BoxFuture<'static, Result<String, String>> {
        self.0.calls.lock().unwrap().push(name.clone());
        Box::pin(async move {
            match name.as_str() {
                LOOKUP => Ok("report.txt is stale".to_string()),
                DELETE => Ok("deleted report.txt".to_string()),
                other => Err(format!("unknown tool {other}")),
            }
        })
    }

    fn limits(&self) -> ToolLimits {
        ToolLimits::default()
    }
}

fn is_turn(req: &ProviderRequest) -> bool {
    tool_names(req)
        .iter()
        .any(|n| n == "new_answer" || n == "vote")
}

fn tool_results(req: &ProviderRequest) -> Vec<String> {
    req.messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.clone())
        .collect()
}

/// A panel member that, in a turn, calls every own tool it is offered (once), then
/// answers (first turn) or votes for agent1; presenting, it calls `delete` if offered and
/// not yet called, then writes the final answer.
fn planner(name: &str, delay: u64) -> Scripted {
    Scripted::new(name, move |req, _| {
        let offered = tool_names(req);
        let done = !tool_results(req).is_empty();
        let own: Vec<Step> = offered
            .iter()
            .filter(|n| n.starts_with("mcp__"))
            .map(|n| tool_call(n, "{}"))
            .collect();
        if !is_turn(req) {
            if offered.iter().any(|n| n == DELETE) && !done {
                return text_then(&["Deleting the stale file."], vec![tool_call(DELETE, "{}")]);
            }
            return present(&["The stale report.txt is removed."]);
        }
        if !own.is_empty() && !done {
            return after(delay, text_then(&[], own));
        }
        let labels = vote_enum(req);
        if labels.is_empty() {
            return answer("Delete report.txt: it is stale.");
        }
        vote("agent1", "right file")
    })
}

async fn panel_run(planning_mode: bool) -> (Run, Vec<Scripted>, Arc<Files>) {
    let files = Arc::new(Files::default());
    let agents: Vec<Scripted> = (1..=3).map(|n| planner(&format!("p{n}"), n)).collect();
    let named: Vec<(&str, &Scripted)> = ["a", "b", "c"].into_iter().zip(&agents).collect();
    let mut s = spec(
        &named,
        OrchestratorOptions {
            planning_mode,
            ..OrchestratorOptions::default()
        },
    );
    for agent in &mut s.agents {
        agent.tools = Some(Arc::new(FilesTools(files.clone())));
    }
    (run(s).await, agents, files)
}

fn tool_events(run: &Run) -> Vec<(String, String)> {
    run.kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::ToolCalled { agent, tool, .. } => Some((agent.label.clone(), tool.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn planning_mode_runs_the_write_tool_once_by_the_winner_while_presenting() {
    let (run, agents, files) = panel_run(true).await;
    let s = run.summary();
    assert_eq!(s.winner.label, "agent1");
    assert_eq!(s.presentation, PresentationMode::Presented);
    assert_eq!(files.calls(DELETE), 1, "{:?}", files.calls.lock().unwrap());
    // The read-only lookup is still used in the turns, by every agent.
    let events = tool_events(&run);
    for label in ["agent1", "agent2", "agent3"] {
        assert!(
            events.contains(&(label.to_string(), LOOKUP.to_string())),
            "{events:?}"
        );
    }
    assert_eq!(files.calls(LOOKUP), events.len() - 1);
    for agent in &agents {
        for turn in agent.requests().iter().filter(|r| is_turn(r)) {
            let offered = tool_names(turn);
            assert!(offered.contains(&LOOKUP.to_string()), "{offered:?}");
            assert!(!offered.contains(&DELETE.to_string()), "{offered:?}");
            // Told which tool is held back and who runs it.
            let system = system_text(turn);
            assert!(
                system.contains(&format!("tools that change things: `{DELETE}`"))
                    && system.contains("runs them, once, while presenting"),
                "{system}"
            );
        }
    }
    // The winner's presentation was offered every tool, ran `delete`, saw its result and
    // finished; the others made no presentation call.
    let presentation: Vec<ProviderRequest> = agents[0]
        .requests()
        .into_iter()
        .filter(|r| !is_turn(r))
        .collect();
    assert_eq!(
        presentation.len(),
        2,
        "the call with the tool, then the one after it"
    );
    assert_eq!(tool_names(&presentation[0]), [LOOKUP, DELETE]);
    assert!(system_text(&presentation[0]).contains("available now: `mcp__files__delete`"));
    assert_eq!(tool_results(&presentation[1]), ["deleted report.txt"]);
    for other in &agents[1..] {
        assert!(other.requests().iter().all(is_turn));
    }
    // The call is an event like in turns, after the presentation started; the streamed
    // text of both rounds is the final answer.
    assert_eq!(
        events.last().unwrap(),
        &("agent1".to_string(), DELETE.to_string())
    );
    assert_eq!(events.iter().filter(|(_, t)| t == DELETE).count(), 1);
    let kinds = run.kinds();
    let started = kinds
        .iter()
        .position(|k| matches!(k, EventKind::PresentationStarted { .. }))
        .unwrap();
    let deleted = kinds
        .iter()
        .position(|k| matches!(k, EventKind::ToolCalled { tool, .. } if tool == DELETE))
        .unwrap();
    assert!(deleted > started);
    assert_eq!(
        s.final_answer,
        "Deleting the stale file.\n\nThe stale report.txt is removed."
    );
    let streamed: String = kinds
        .iter()
        .filter_map(|k| match k {
            EventKind::FinalDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, s.final_answer);
    // Both presentation calls' usage is counted.
    let presentation_usage = kinds
        .iter()
        .filter(|k| {
            matches!(k, EventKind::Usage { phase: CallPhase::Presentation, usage, .. }
                if usage.total_tokens == 2 * CALL_USAGE.total_tokens)
        })
        .count();
    assert_eq!(presentation_usage, 1);
}

#[tokio::test(start_paused = true)]
async fn without_planning_mode_every_agent_runs_the_write_tool_in_its_turn() {
    let (run, agents, files) = panel_run(false).await;
    let s = run.summary();
    assert_eq!(s.winner.label, "agent1");
    // Today's behaviour: each agent's first turn was offered both tools and ran both.
    let events = tool_events(&run);
    for label in ["agent1", "agent2", "agent3"] {
        for tool in [LOOKUP, DELETE] {
            let used = (label.to_string(), tool.to_string());
            assert!(events.contains(&used), "{events:?}");
        }
    }
    assert!(files.calls(DELETE) >= 3);
    for agent in &agents {
        let first = &agent.requests()[0];
        assert_eq!(tool_names(first)[1..], [LOOKUP, DELETE]);
        assert!(!system_text(first).contains("change things"));
    }
    // The presentation gets no tools.
    let presentation: Vec<ProviderRequest> = agents[0]
        .requests()
        .into_iter()
        .filter(|r| !is_turn(r))
        .collect();
    assert_eq!(presentation.len(), 1);
    assert!(presentation[0].tools.is_empty());
    assert_eq!(s.final_answer, "The stale report.txt is removed.");
}

#[tokio::test(start_paused = true)]
async fn a_presentation_tool_loop_keeps_the_turns_limits() {
    // A presenter that keeps calling `delete`: after max_tool_rounds it is told the limit
    // is reached and called once more without the tools.
    let files = Arc::new(Files::default());
    let p = Scripted::new("p", |req, _| {
        if is_turn(req) {
            return answer("Delete it.");
        }
        if req.tools.is_empty() {
            return present(&["Gave up."]);
        }
        text_then(&[], vec![tool_call(DELETE, "{}")])
    });
    let mut s = spec(
        &[("a", &p)],
        OrchestratorOptions {
            planning_mode: true,
            ..OrchestratorOptions::default()
        },
    );
    #[derive(Debug)]
    struct Limited(FilesTools);
    impl AgentTools for Limited {
        fn discover(&self) -> BoxFuture<'static, Vec<OwnTool>> {
            self.0.discover()
        }
        fn call(&self, n: String, a: String) -> BoxFuture<'static, Result<String, String>> {
            self.0.call(n, a)
        }
        fn limits(&self) -> ToolLimits {
            ToolLimits {
                max_rounds: 2,
                ..ToolLimits::default()
            }
        }
    }
    s.agents[0].tools = Some(Arc::new(Limited(FilesTools(files.clone()))));
    let run = run(s).await;
    assert_eq!(files.calls(DELETE), 2);
    assert_eq!(run.summary().final_answer, "Gave up.");
    let last = p.requests().last().cloned().unwrap();
    assert!(
        tool_results(&last)
            .last()
            .unwrap()
            .contains("tool round limit (2)")
    );
}
