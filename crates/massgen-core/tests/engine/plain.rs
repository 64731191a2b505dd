//! A panel of one is a plain call (docs/protocol.md, "A panel of one"): the model is asked
//! what the client asked, as the client would have asked it, in one upstream call, and what
//! it streams goes out as the answer, its reasoning as reasoning, its tool calls as the
//! answer's tool calls.

use std::sync::Arc;

use massgen_core::coordination::client_tools::ClientTools;
use massgen_core::coordination::{
    AnswerCheck, ConsensusReason, EventKind, OrchestratorOptions, Rejection, SessionErrorKind,
    StructuredOutput,
};
use massgen_core::provider::{
    FinishReason, Message, OutputFormat, ProviderChunk, Role, Sampling, ToolChoice, ToolSpec,
};
use massgen_core::testing::*;

fn streams(chunks: Vec<ProviderChunk>) -> Vec<Step> {
    let mut steps: Vec<Step> = chunks.into_iter().map(Step::Chunk).collect();
    steps.push(Step::Chunk(ProviderChunk::Usage(CALL_USAGE)));
    steps.push(Step::Chunk(ProviderChunk::Finish(FinishReason::Stop)));
    steps
}

fn text(t: &str) -> ProviderChunk {
    ProviderChunk::Text(t.into())
}

#[tokio::test(start_paused = true)]
async fn a_panel_of_one_sends_the_clients_call_and_streams_the_reply() {
    let a = Scripted::new("a", |_, _| streams(vec![text("Four"), text(".")]));
    let mut s = spec(&[("a", &a)], OrchestratorOptions::default());
    s.input.extra_system = Some("Be terse.".into());
    s.input.history = vec![
        Message::user("What is 1+1?"),
        Message {
            role: Role::Assistant,
            ..Message::user("Two.")
        },
    ];
    s.input.tools = ClientTools {
        tools: vec![Arc::new(ToolSpec {
            name: "calc".into(),
            description: "Adds.".into(),
            parameters: serde_json::json!({"type": "object"}),
        })],
        choice: Some(ToolChoice::Auto),
        parallel: Some(false),
    };
    s.input.answer_bounds.max_output_tokens = Some(64);
    s.input.answer_bounds.stop = vec!["END".into()];
    s.input.sampling = Sampling {
        temperature: Some(0.2),
        ..Sampling::default()
    };
    let run = run(s).await;
    let summary = run.summary();
    assert_eq!(summary.final_answer, "Four.");
    assert_eq!(summary.consensus_reason, ConsensusReason::SingleAgent);
    assert_eq!(summary.agents[0].calls, 1);
    // One call, and it is the client's: its system text, its turns as they were, its tools
    // (no workflow tool), choice, bounds and sampling; no coordination prompt.
    let requests = a.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    let turns: Vec<(Role, &str)> = r
        .messages
        .iter()
        .map(|m| (m.role, m.content.as_str()))
        .collect();
    assert_eq!(
        turns,
        [
            (Role::System, "Be terse."),
            (Role::User, "What is 1+1?"),
            (Role::Assistant, "Two."),
            (Role::User, "What is 2+2?"),
        ]
    );
    assert_eq!(tool_names(r), ["calc"]);
    assert_eq!(r.tool_choice, Some(ToolChoice::Auto));
    assert_eq!(r.parallel_tool_calls, Some(false));
    assert_eq!(r.max_output_tokens, Some(64));
    assert_eq!(r.stop, ["END"]);
    assert_eq!(r.sampling.temperature, Some(0.2));
    // The reply streamed as it came, then its usage and the end.
    let deltas: Vec<&str> = run
        .kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::FinalDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["Four", "."]);
    assert!(
        run.kinds()
            .iter()
            .any(|k| matches!(k, EventKind::Usage { .. }))
    );
    assert!(!run.kinds().iter().any(|k| matches!(
        k,
        EventKind::TurnStarted { .. } | EventKind::Consensus { .. }
    )));
}

#[tokio::test(start_paused = true)]
async fn reasoning_goes_out_as_reasoning_and_tool_calls_as_the_answer() {
    let a = Scripted::new("a", |_, _| {
        let mut steps = streams(vec![ProviderChunk::Reasoning("Let me see.".into())]);
        steps.insert(1, tool_call("calc", r#"{"a":2}"#));
        steps
    });
    let run = run(spec(&[("a", &a)], OrchestratorOptions::default())).await;
    let kinds = run.kinds();
    assert!(
        kinds
            .iter()
            .any(|k| matches!(k, EventKind::ReasoningDelta { text, .. } if text == "Let me see."))
    );
    let summary = run.summary();
    assert_eq!(summary.final_tool_calls.len(), 1);
    assert_eq!(summary.final_tool_calls[0].name, "calc");
    assert!(summary.final_answer.is_empty());
    assert!(
        kinds
            .iter()
            .any(|k| matches!(k, EventKind::FinalToolCalls { .. }))
    );
}

#[tokio::test(start_paused = true)]
async fn an_upstream_failure_fails_the_session_with_the_upstreams_words() {
    let a = Scripted::new("a", |_, _| vec![Step::Fail(upstream_error(503))]);
    let run = run(spec(&[("a", &a)], OrchestratorOptions::default())).await;
    let error = run.error();
    assert_eq!(error.kind, SessionErrorKind::UpstreamFailed);
    assert_eq!(error.agent_errors[0].status, Some(503));
}

#[tokio::test(start_paused = true)]
async fn the_first_agent_of_skip_coordination_rounds_is_a_plain_call_too() {
    let a = Scripted::new("a", |_, _| streams(vec![text("A.")]));
    let b = Scripted::new("b", |_, _| streams(vec![text("B.")]));
    let options = OrchestratorOptions {
        skip_coordination_rounds: true,
        ..OrchestratorOptions::default()
    };
    let run = run(spec(&[("a", &a), ("b", &b)], options)).await;
    assert_eq!(run.summary().final_answer, "A.");
    assert_eq!(a.requests().len(), 1);
    assert!(b.requests().is_empty());
    assert!(tool_names(&a.requests()[0]).is_empty(), "no workflow tool");
}

#[tokio::test(start_paused = true)]
async fn single_agent_coordination_keeps_the_protocol() {
    let a = member("a", "Four.", 0, "agent1");
    let options = OrchestratorOptions {
        single_agent_coordination: true,
        ..OrchestratorOptions::default()
    };
    let run = run(spec(&[("a", &a)], options)).await;
    assert_eq!(run.summary().final_answer, "Final answer");
    assert!(tool_names(&a.requests()[0]).contains(&"new_answer".to_string()));
}

/// Accepts an answer that is a JSON object.
#[derive(Debug)]
struct JsonObject;

impl AnswerCheck for JsonObject {
    fn check<'a>(
        &'a self,
        answer: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<(), Rejection>> {
        Box::pin(async move {
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(answer)
                .map(drop)
                .map_err(|e| Rejection::Mismatch(e.to_string()))
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_structured_answer_is_held_until_it_fits_with_one_corrective_call() {
    let a = Scripted::new("a", |_, n| {
        streams(vec![text(if n == 0 { "not json" } else { r#"{"x":1}"# })])
    });
    let mut s = spec(&[("a", &a)], OrchestratorOptions::default());
    s.input.output = Some(StructuredOutput {
        format: OutputFormat::JsonObject,
        check: Arc::new(JsonObject),
        streamed: false,
    });
    let run = run(s).await;
    assert_eq!(run.summary().final_answer, r#"{"x":1}"#);
    let requests = a.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].output_format, Some(OutputFormat::JsonObject));
    let last = requests[1].messages.last().unwrap();
    assert_eq!(last.role, Role::User);
    assert!(
        last.content.contains("not json"),
        "the correction quotes it"
    );
    // Only the answer that fits went out.
    let deltas: Vec<&str> = run
        .kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::FinalDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, [r#"{"x":1}"#]);
}
