//! One attempt of a coordination turn: an upstream call gathered into text, tool calls and
//! usage, repeated while the model uses the agent's own tools (the tool loop).

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use futures::future::join_all;
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout_at};

use super::agent_tools::{AgentTools, ToolCallRecord, ToolLimits, cap_result};
use crate::provider::{
    FinishReason, Message, Provider, ProviderChunk, ProviderError, ProviderRequest, Role, ToolCall,
    Usage,
};

/// What a call produced so far (kept even when the call fails, for the usage).
#[derive(Debug, Default)]
pub struct Gathered {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<Usage>,
    pub finish: Option<FinishReason>,
}

impl Gathered {
    /// Takes one chunk in; returns the answer text to stream, if any. Reasoning text is
    /// never part of an answer and is not streamed.
    pub fn absorb(&mut self, chunk: ProviderChunk) -> Option<String> {
        match chunk {
            ProviderChunk::Text(t) => {
                self.text.push_str(&t);
                Some(t)
            }
            ProviderChunk::Reasoning(_) => None,
            ProviderChunk::ToolCall(call) => {
                self.tool_calls.push(call);
                None
            }
            ProviderChunk::Usage(u) => {
                self.usage = Some(u);
                None
            }
            ProviderChunk::Finish(reason) => {
                self.finish = Some(reason);
                None
            }
        }
    }
}

#[derive(Debug)]
pub enum CallError {
    Provider(ProviderError),
    /// The turn's deadline passed.
    TimedOut,
}

/// What an attempt reports to the session loop while it runs.
#[derive(Debug)]
pub enum Side {
    /// Answer text (only when the session streams agent text).
    Delta(String),
    /// An agent tool call finished.
    Tool(ToolCallRecord),
}

/// The end of one attempt, reported back to the session loop.
#[derive(Debug)]
pub struct AttemptDone {
    pub agent: usize,
    /// The last upstream call (the one that ended the attempt); `usage` is the sum over
    /// every call of the attempt.
    pub gathered: Gathered,
    pub result: Result<(), CallError>,
    /// Messages added by the tool loop (assistant tool calls and their results), to keep
    /// when the attempt is retried.
    pub transcript: Vec<Message>,
    /// Tool rounds used by this attempt.
    pub tool_rounds: u32,
}

/// The agent's own tools for one attempt: the source, the names it offers, and the tool
/// rounds left in the turn.
pub struct AttemptTools {
    pub tools: Arc<dyn AgentTools>,
    pub names: HashSet<String>,
    pub rounds_left: u32,
}

/// Runs one coordination attempt to its end or to `deadline`: one upstream call, or, when
/// the model calls the agent's own tools, several (the tool loop). Text deltas go to `side`
/// when `stream_text` is set; every tool call is reported there too.
pub async fn attempt(
    agent: usize,
    provider: Arc<dyn Provider>,
    mut request: ProviderRequest,
    deadline: Instant,
    side: mpsc::Sender<(usize, Side)>,
    stream_text: bool,
    tools: Option<AttemptTools>,
) -> AttemptDone {
    let mut transcript = Vec::new();
    let mut usage: Option<Usage> = None;
    let mut rounds = 0u32;
    let mut limit_noted = false;
    loop {
        let (mut gathered, result) = one_call(
            agent,
            &provider,
            request.clone(),
            deadline,
            &side,
            stream_text,
        )
        .await;
        if let Some(u) = gathered.usage {
            usage.get_or_insert_with(Usage::default).add(&u);
        }
        gathered.usage = usage;
        let done = |gathered, result, transcript, rounds| AttemptDone {
            agent,
            gathered,
            result,
            transcript,
            tool_rounds: rounds,
        };
        let Some(t) = tools.as_ref().filter(|_| result.is_ok()) else {
            return done(gathered, result, transcript, rounds);
        };
        let (mut own, others): (Vec<ToolCall>, Vec<ToolCall>) = gathered
            .tool_calls
            .drain(..)
            .partition(|c| t.names.contains(&c.name));
        // Results are matched to calls by id; some servers send none.
        for (k, call) in own.iter_mut().enumerate() {
            if call.id.trim().is_empty() {
                call.id = format!("call_{}_{k}", transcript.len());
            }
        }
        // A turn-ending call (vote, answer, client tools) wins over tool use in the same
        // message: the agent's own calls there are dropped.
        if own.is_empty() || !others.is_empty() {
            gathered.tool_calls = others;
            return done(gathered, result, transcript, rounds);
        }
        // Told that the limit is reached and still calling (tools no longer offered):
        // validation rejects the calls like any unknown tool.
        if limit_noted {
            gathered.tool_calls = own;
            return done(gathered, result, transcript, rounds);
        }
        let limits = t.tools.limits();
        let last_round = rounds >= t.rounds_left;
        limit_noted = last_round;
        transcript.push(Message {
            role: Role::Assistant,
            content: std::mem::take(&mut gathered.text),
            tool_calls: own.clone(),
            tool_call_id: None,
        });
        if last_round {
            let note = format!(
                "Error: the tool round limit ({}) of this turn is reached; finish your turn without tools.",
                limits.max_rounds
            );
            transcript.extend(
                own.iter()
                    .map(|c| Message::tool_result(&c.id, note.clone())),
            );
            request.tools.retain(|spec| !t.names.contains(&spec.name));
        } else {
            rounds += 1;
            // Numbered within the turn (earlier attempts of the turn used some rounds).
            let round = limits.max_rounds.saturating_sub(t.rounds_left) + rounds;
            let results = join_all(
                own.iter()
                    .map(|c| run_tool(agent, t.tools.as_ref(), c, round, limits, deadline, &side)),
            )
            .await;
            transcript.extend(
                own.iter()
                    .zip(results)
                    .map(|(c, text)| Message::tool_result(&c.id, text)),
            );
        }
        request.messages.extend(
            transcript[transcript.len() - own.len() - 1..]
                .iter()
                .cloned(),
        );
        if Instant::now() >= deadline {
            return done(gathered, Err(CallError::TimedOut), transcript, rounds);
        }
    }
}

/// One tool call with its timeout and size cap; the text the model sees as the result.
async fn run_tool(
    agent: usize,
    tools: &dyn AgentTools,
    call: &ToolCall,
    round: u32,
    limits: ToolLimits,
    deadline: Instant,
    side: &mpsc::Sender<(usize, Side)>,
) -> String {
    let started = Instant::now();
    let call_deadline = deadline.min(started + limits.call_timeout);
    let outcome = match timeout_at(
        call_deadline,
        tools.call(call.name.clone(), call.arguments.clone()),
    )
    .await
    {
        Ok(outcome) => outcome,
        Err(_) => Err(format!(
            "the tool call timed out after {} ms",
            call_deadline.saturating_duration_since(started).as_millis()
        )),
    };
    let record = ToolCallRecord {
        tool: call.name.clone(),
        round,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        error: outcome.as_ref().err().cloned(),
    };
    // The loop owns the receiver; a send can only fail while it shuts down.
    let _ = side.send((agent, Side::Tool(record))).await;
    match outcome {
        Ok(text) => cap_result(text, limits.max_result_bytes),
        Err(e) => cap_result(format!("Error: {e}"), limits.max_result_bytes),
    }
}

async fn one_call(
    agent: usize,
    provider: &Arc<dyn Provider>,
    request: ProviderRequest,
    deadline: Instant,
    side: &mpsc::Sender<(usize, Side)>,
    stream_text: bool,
) -> (Gathered, Result<(), CallError>) {
    let mut stream = provider.stream(request);
    let mut gathered = Gathered::default();
    let result = loop {
        match timeout_at(deadline, stream.next()).await {
            Err(_) => break Err(CallError::TimedOut),
            Ok(None) => break Ok(()),
            Ok(Some(Err(e))) => break Err(CallError::Provider(e)),
            Ok(Some(Ok(chunk))) => {
                if let Some(text) = gathered.absorb(chunk).filter(|_| stream_text) {
                    // The loop owns the receiver; a send can only fail while it shuts down.
                    let _ = side.send((agent, Side::Delta(text))).await;
                }
            }
        }
    };
    (gathered, result)
}
