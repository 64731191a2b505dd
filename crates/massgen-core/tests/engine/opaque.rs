//! The engine carries a tool call's opaque provider data (thinking signatures, thought
//! signatures, reasoning items) into the assistant message it sends back on a retry.

use massgen_core::coordination::OrchestratorOptions;
use massgen_core::provider::{ProviderChunk, Role, ToolCall};
use massgen_core::testing::*;
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn a_retried_turn_sends_the_opaque_data_back() {
    let opaque = json!({"anthropic": {"thinking": [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"}]}});
    let sent = opaque.clone();
    let a = member("a", "Alpha: four.", 1, "agent1");
    let b = Scripted::new("b", move |_, n| match n {
        0 => text_then(
            &[],
            vec![Step::Chunk(ProviderChunk::ToolCall(ToolCall {
                id: "toolu_1".into(),
                name: "new_answer".into(),
                arguments: "{not json".into(),
                opaque: Some(sent.clone()),
            }))],
        ),
        _ => answer("Beta: four, since 2+2=4."),
    });
    let run = run(spec(
        &[("a", &a), ("b", &b)],
        OrchestratorOptions::default(),
    ))
    .await;
    assert!(run.result.is_ok(), "{:?}", run.result);
    let retry = &b.requests()[1];
    let assistant = retry
        .messages
        .iter()
        .find(|m| m.role == Role::Assistant)
        .expect("the replayed assistant message");
    assert_eq!(assistant.tool_calls[0].id, "toolu_1");
    assert_eq!(assistant.tool_calls[0].opaque, Some(opaque));
}
