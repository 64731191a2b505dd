//! The steps of the usual calls (an answer, a vote, a presentation, an upstream error) and
//! the usual panel member built from them.

use std::time::Duration;

use super::inspect::{is_presentation, vote_enum};
use super::scripted::{Scripted, Step};
use crate::provider::{
    FinishReason, ProviderChunk, ProviderError, ProviderErrorKind, ToolCall, Usage,
};

/// The usage every scripted call ends with.
pub const CALL_USAGE: Usage = Usage {
    input_tokens: 10,
    output_tokens: 5,
    total_tokens: 15,
    cached_input_tokens: 1,
    reasoning_tokens: 2,
};

/// The model begins a call to `name` (its arguments still to come).
pub fn begins(name: &str) -> Step {
    Step::Chunk(ProviderChunk::ToolCallStarted { name: name.into() })
}

pub fn tool_call(name: &str, args: &str) -> Step {
    Step::Chunk(ProviderChunk::ToolCall(ToolCall {
        id: format!("call_{name}"),
        name: name.into(),
        arguments: args.into(),
        opaque: None,
    }))
}

fn end(reason: FinishReason) -> [Step; 2] {
    [
        Step::Chunk(ProviderChunk::Usage(CALL_USAGE)),
        Step::Chunk(ProviderChunk::Finish(reason)),
    ]
}

pub fn answer(text: &str) -> Vec<Step> {
    let args = serde_json::json!({ "content": text }).to_string();
    let mut steps = vec![tool_call("new_answer", &args)];
    steps.extend(end(FinishReason::ToolCalls));
    steps
}

pub fn vote(label: &str, reason: &str) -> Vec<Step> {
    let args = serde_json::json!({ "agent_id": label, "reason": reason }).to_string();
    let mut steps = vec![tool_call("vote", &args)];
    steps.extend(end(FinishReason::ToolCalls));
    steps
}

/// A call that streams `chunks` as text and calls the given tools.
pub fn text_then(chunks: &[&str], calls: Vec<Step>) -> Vec<Step> {
    let mut steps: Vec<Step> = chunks
        .iter()
        .map(|c| Step::Chunk(ProviderChunk::Text(c.to_string())))
        .collect();
    steps.extend(calls);
    steps.extend(end(FinishReason::Stop));
    steps
}

pub fn present(chunks: &[&str]) -> Vec<Step> {
    text_then(chunks, Vec::new())
}

/// `steps` after `secs` seconds (of paused time).
pub fn after(secs: u64, steps: Vec<Step>) -> Vec<Step> {
    let mut out = vec![Step::Sleep(Duration::from_secs(secs))];
    out.extend(steps);
    out
}

pub fn upstream_error(status: u16) -> ProviderError {
    let mut e = ProviderError::new(ProviderErrorKind::Server, "scripted", "upstream is down");
    e.status = Some(status);
    e
}

/// The usual panel member: answers `text` (after `delay` s) while no answer exists, then
/// votes for `target` when it can (else for the first label offered); presents "Final answer".
pub fn member(name: &str, text: &'static str, delay: u64, target: &'static str) -> Scripted {
    Scripted::new(name, move |req, _| {
        if is_presentation(req) {
            return present(&["Final ", "answer"]);
        }
        let labels = vote_enum(req);
        let Some(first) = labels.first() else {
            return after(delay, answer(text));
        };
        let to = if labels.iter().any(|l| l == target) {
            target
        } else {
            first.as_str()
        };
        vote(to, &format!("{to} is best"))
    })
}
