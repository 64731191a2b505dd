//! Client tools through consensus: scripted providers, paused time.

use massgen_core::coordination::*;
use massgen_core::provider::{
    FinishReason, Message, ProviderRequest, Role, ToolCall, ToolChoice, ToolSpec,
};
use massgen_core::testing::*;
use serde_json::json;

const PARIS: &str = r#"{"city":"Paris"}"#;

/// One agent through the coordination protocol (a panel of one is otherwise a plain
/// call: tests/engine/plain.rs).
fn coordinating() -> OrchestratorOptions {
    OrchestratorOptions {
        single_agent_coordination: true,
        ..OrchestratorOptions::default()
    }
}

fn weather_tools() -> ClientTools {
    let spec = |name: &str| ToolSpec {
        name: name.into(),
        description: format!("{name} tool"),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    };
    ClientTools {
        tools: vec![
            std::sync::Arc::new(spec("get_weather")),
            std::sync::Arc::new(spec("get_time")),
        ],
        choice: None,
        parallel: None,
    }
}

fn with_tools(mut s: SessionSpec, tools: ClientTools) -> SessionSpec {
    s.input.tools = tools;
    s
}

fn calls_in(run: &Run) -> Vec<(String, String)> {
    run.summary()
        .final_tool_calls
        .iter()
        .map(|c| (c.name.clone(), c.arguments.clone()))
        .collect()
}

/// Proposes `get_weather(Paris)` after `delay` s whenever it may answer and `vote_too` is
/// false or no vote is offered; otherwise votes for the first label.
fn proposer(name: &str, delay: u64, vote_when_offered: bool) -> Scripted {
    Scripted::new(name, move |req, _| {
        if is_presentation(req) {
            return present(&["should not present"]);
        }
        let labels = vote_enum(req);
        if vote_when_offered && !labels.is_empty() {
            return vote(&labels[0], "agree");
        }
        let mut steps = after(delay, vec![tool_call("get_weather", PARIS)]);
        steps.extend(text_then(&[], Vec::new()));
        steps
    })
}

fn answer_events(run: &Run) -> usize {
    run.kinds()
        .iter()
        .filter(|k| matches!(k, EventKind::Answer { .. }))
        .count()
}

#[tokio::test(start_paused = true)]
async fn agents_proposing_the_same_call_converge_on_it() {
    let a = proposer("a", 1, true);
    let b = proposer("b", 2, true);
    // c keeps proposing the same call even when it could vote: that counts as a vote.
    let c = proposer("c", 3, false);
    let run = run(with_tools(
        spec(
            &[("a", &a), ("b", &b), ("c", &c)],
            OrchestratorOptions::default(),
        ),
        weather_tools(),
    ))
    .await;
    let s = run.summary();
    assert_eq!(s.winner.label, "agent1");
    assert_eq!(
        calls_in(&run),
        [("get_weather".to_string(), PARIS.to_string())]
    );
    assert_eq!(s.finish_reason, FinishReason::ToolCalls);
    assert_eq!(s.final_answer, "");
    assert_eq!(s.presentation, PresentationMode::Skipped);
    // One proposal only: the identical ones became votes.
    assert_eq!(answer_events(&run), 1);
    assert!(matches!(
        &s.answers[0].content,
        AnswerContent::ToolCalls { calls } if calls[0].name == "get_weather"
    ));
    assert!(s.votes.iter().all(|v| v.target_label == "agent1"));
    assert!(
        s.votes
            .iter()
            .any(|v| v.voter.label == "agent3" && v.reason == "proposed the same tool calls"),
        "{:?}",
        s.votes
    );
    // No presentation call, and the final calls went out as one event.
    for p in [&a, &b, &c] {
        assert!(!p.requests().iter().any(is_presentation));
    }
    assert!(run.kinds().iter().any(
        |k| matches!(k, EventKind::FinalToolCalls { calls } if calls.len() == 1 && !calls[0].id.is_empty())
    ));
    // Agents that saw the proposal were shown it readably and offered the client's tools.
    let later = b.requests().last().cloned().unwrap();
    assert!(
        user_text(&later).contains(r#"agent1 proposes calling get_weather({"city":"Paris"})"#),
        "{}",
        user_text(&later)
    );
    assert!(tool_names(&later).contains(&"get_weather".to_string()));
    assert!(system_text(&later).contains("`get_weather`"));
    assert_eq!(later.tool_choice, Some(ToolChoice::Auto));
}

/// agent1 proposes calling a tool, agent2 answers in text; every agent then votes for
/// `target`.
async fn call_against_text(target: &'static str) -> (Run, Scripted) {
    let voter = move |req: &ProviderRequest| {
        let labels = vote_enum(req);
        (labels.len() == 2).then(|| vote(target, "best"))
    };
    let a = Scripted::new("a", move |req, _| {
        if is_presentation(req) {
            return present(&["unused"]);
        }
        if let Some(v) = voter(req) {
            return v;
        }
        let mut steps = after(1, vec![tool_call("get_weather", PARIS)]);
        steps.extend(text_then(&[], Vec::new()));
        steps
    });
    let b = Scripted::new("b", move |req, _| {
        if is_presentation(req) {
            return present(&["It is ", "probably mild."]);
        }
        voter(req).unwrap_or_else(|| after(2, answer("Paris is usually mild in spring.")))
    });
    let c = Scripted::new("c", move |req, _| {
        voter(req).unwrap_or_else(|| after(3, vec![Step::Hang]))
    });
    let run = run(with_tools(
        spec(
            &[("a", &a), ("b", &b), ("c", &c)],
            OrchestratorOptions::default(),
        ),
        weather_tools(),
    ))
    .await;
    (run, b)
}

#[tokio::test(start_paused = true)]
async fn votes_decide_between_a_tool_call_and_a_text_answer() {
    let (run, _) = call_against_text("agent1").await;
    let s = run.summary();
    assert_eq!(s.winner.label, "agent1");
    assert_eq!(s.finish_reason, FinishReason::ToolCalls);
    assert_eq!(calls_in(&run).len(), 1);
    assert_eq!(answer_events(&run), 2);

    let (run, b) = call_against_text("agent2").await;
    let s = run.summary();
    assert_eq!(s.winner.label, "agent2");
    assert_eq!(s.finish_reason, FinishReason::Stop);
    assert_eq!(s.final_answer, "It is probably mild.");
    assert!(s.final_tool_calls.is_empty());
    // The text presenter is not offered the client's tools.
    let presentation = b.requests().into_iter().find(is_presentation).unwrap();
    assert!(presentation.tools.is_empty());
}

#[tokio::test(start_paused = true)]
async fn tool_choice_and_parallel_calls_are_passed_on() {
    // `none`: the client's tools are hidden and a text answer wins.
    let solo = |n: &str| member(n, "Mild.", 1, "agent1");
    let a = solo("a");
    let mut tools = weather_tools();
    tools.choice = Some(ToolChoice::None);
    let first_run = run(with_tools(spec(&[("a", &a)], coordinating()), tools)).await;
    assert_eq!(first_run.summary().finish_reason, FinishReason::Stop);
    assert_eq!(tool_names(&a.requests()[0]), ["new_answer"]);

    // A named function: only that tool, no text answers, `required` upstream; with
    // parallel calls off, two calls in one answer are rejected.
    let a = Scripted::new("a", |req, n| {
        let mut steps = vec![tool_call("get_time", "{}")];
        if n == 0 {
            steps.push(tool_call("get_time", r#"{"tz":"UTC"}"#));
        }
        let _ = req;
        steps.extend(text_then(&[], Vec::new()));
        steps
    });
    let mut tools = weather_tools();
    tools.choice = Some(ToolChoice::Function("get_time".into()));
    tools.parallel = Some(false);
    let run = run(with_tools(spec(&[("a", &a)], coordinating()), tools)).await;
    let first = &a.requests()[0];
    assert_eq!(tool_names(first), ["get_time"]);
    assert_eq!(first.tool_choice, Some(ToolChoice::Required));
    assert_eq!(first.parallel_tool_calls, Some(false));
    assert!(system_text(first).contains("requires the answer to be calls"));
    assert_eq!(run.invalid_checks("agent1"), ["too_many_tool_calls"]);
    assert_eq!(calls_in(&run), [("get_time".to_string(), "{}".to_string())]);
    assert_eq!(run.summary().consensus_reason, ConsensusReason::SingleAgent);
}

#[tokio::test(start_paused = true)]
async fn unknown_tools_and_bad_arguments_are_retried() {
    let a = Scripted::new("a", |_, n| {
        let call = match n {
            0 => tool_call("delete_everything", "{}"),
            1 => tool_call("get_weather", "{not json"),
            _ => tool_call("get_weather", PARIS),
        };
        let mut steps = vec![call];
        steps.extend(text_then(&[], Vec::new()));
        steps
    });
    let run = run(with_tools(
        spec(&[("a", &a)], coordinating()),
        weather_tools(),
    ))
    .await;
    assert_eq!(
        run.invalid_checks("agent1"),
        ["unknown_tool", "invalid_arguments"]
    );
    assert_eq!(calls_in(&run).len(), 1);
    // The rejection went back as the tool result, naming the available tools.
    let retry = &a.requests()[1];
    let result = retry
        .messages
        .iter()
        .find(|m| m.role == Role::Tool)
        .unwrap();
    assert!(
        result.content.contains("`get_weather`"),
        "{}",
        result.content
    );
}

#[tokio::test(start_paused = true)]
async fn a_follow_up_shows_the_calls_and_results() {
    let a = member("a", "Paris is 18C and sunny today.", 1, "agent1");
    let mut s = with_tools(spec(&[("a", &a)], coordinating()), weather_tools());
    s.input.question = "Weather in Paris?".into();
    s.input.followup = vec![
        Message {
            role: Role::Assistant,
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "get_weather".into(),
                arguments: PARIS.into(),
                opaque: None,
            }],
            tool_call_id: None,
            images: Vec::new(),
        },
        Message::tool_result("call_1", "18C, sunny"),
    ];
    let run = run(s).await;
    assert_eq!(run.summary().final_answer, "Final answer");
    let prompt = user_text(&a.requests()[0]);
    assert!(
        prompt.contains("<tool_results>")
            && prompt.contains(r#"called get_weather({"city":"Paris"}) [call_1]"#)
            && prompt.contains("result of get_weather [call_1]: 18C, sunny"),
        "{prompt}"
    );
    let question = prompt.find("<original_message>").unwrap();
    assert!(prompt.find("<tool_results>").unwrap() > question);
}

#[tokio::test(start_paused = true)]
async fn present_tool_calls_lets_the_winner_restate_them() {
    let a = Scripted::new("a", |req, _| {
        if tool_names(req) == ["get_weather", "get_time"] {
            // The presentation: offered only the client's tools.
            let mut steps = vec![tool_call("get_weather", r#"{"city":"Paris, FR"}"#)];
            steps.extend(text_then(&[], Vec::new()));
            return steps;
        }
        let mut steps = vec![tool_call("get_weather", PARIS)];
        steps.extend(text_then(&[], Vec::new()));
        steps
    });
    let options = OrchestratorOptions {
        present_tool_calls: true,
        ..coordinating()
    };
    let run = run(with_tools(spec(&[("a", &a)], options), weather_tools())).await;
    let s = run.summary();
    assert_eq!(s.presentation, PresentationMode::Presented);
    assert_eq!(
        calls_in(&run),
        [(
            "get_weather".to_string(),
            r#"{"city":"Paris, FR"}"#.to_string()
        )]
    );
    assert_eq!(a.requests().len(), 2);
}

/// An agent's own MCP-like source with `mcp__github__search`: it records the names it is
/// called by.
#[derive(Debug, Default)]
struct GithubTools(std::sync::Mutex<Vec<String>>);

const SEARCH: &str = "mcp__github__search";

impl AgentTools for GithubTools {
    fn discover(&self) -> futures::future::BoxFuture<'static, Vec<OwnTool>> {
        let tool = OwnTool {
            spec: ToolSpec {
                name: SEARCH.into(),
                description: "Search the panel's GitHub".into(),
                parameters: json!({"type": "object", "properties": {}}),
            },
            read_only: true,
        };
        Box::pin(async move { vec![tool] })
    }

    fn call(
        &self,
        name: String,
        _arguments: String,
    ) -> futures::future::BoxFuture<'static, Result<String, String>> {
        self.0.lock().unwrap().push(name.clone());
        Box::pin(async move {
            match name.as_str() {
                SEARCH => Ok("issue 40 is open".to_string()),
                other => Err(format!("unknown tool {other}")),
            }
        })
    }

    fn limits(&self) -> ToolLimits {
        ToolLimits::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_client_tool_named_like_an_own_tool_keeps_its_name_and_the_own_one_takes_an_alias() {
    // Claude Code's MCP server `github` and the panel's: the same `mcp__github__search`.
    let a = Scripted::new("a", |req, _| {
        if is_presentation(req) {
            return present(&["should not present"]);
        }
        let own_done = req.messages.iter().any(|m| m.role == Role::Tool);
        if !own_done {
            return text_then(&[], vec![tool_call("own_mcp__github__search", "{}")]);
        }
        text_then(&[], vec![tool_call(SEARCH, r#"{"q":"issue 40"}"#)])
    });
    let github = std::sync::Arc::new(GithubTools::default());
    let mut s = spec(&[("a", &a)], coordinating());
    s.agents[0].tools = Some(github.clone());
    s.input.tools = ClientTools {
        tools: vec![std::sync::Arc::new(ToolSpec {
            name: SEARCH.into(),
            description: "Search the client's GitHub".into(),
            parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        })],
        choice: None,
        parallel: None,
    };
    let run = run(s).await;
    // The own tool ran under its own name; the client got its own tool's call.
    assert_eq!(*github.0.lock().unwrap(), [SEARCH]);
    assert_eq!(
        calls_in(&run),
        [(SEARCH.to_string(), r#"{"q":"issue 40"}"#.to_string())]
    );
    let first = &a.requests()[0];
    assert_eq!(
        tool_names(first),
        ["new_answer", SEARCH, "own_mcp__github__search"]
    );
    let client = first.tools.iter().find(|t| t.name == SEARCH).unwrap();
    assert_eq!(client.description, "Search the client's GitHub");
    let second = &a.requests()[1];
    assert!(
        second
            .messages
            .iter()
            .any(|m| m.role == Role::Tool && m.content == "issue 40 is open")
    );
}
