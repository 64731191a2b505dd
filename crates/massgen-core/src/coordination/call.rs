//! One attempt of a coordination turn: an upstream call gathered into text, tool calls and
//! usage, repeated while the model uses the agent's own tools (the tool loop).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

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
            ProviderChunk::Reasoning(_) | ProviderChunk::ToolCallStarted { .. } => None,
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

/// What a running attempt has shown so far, for the session loop to read while it runs
/// (one task polls both, so relaxed atomics are enough): whether the model has begun an
/// answer (a `new_answer` or client tool call), and the usage upstreams reported.
#[derive(Debug, Default)]
pub struct Progress {
    /// Tool names that make the turn an answer.
    answer_tools: Vec<String>,
    answering: AtomicBool,
    reported: AtomicBool,
    usage: [AtomicU64; 5],
    /// Upstream calls the attempt has started (its tool loop makes more than one).
    calls: AtomicU32,
}

impl Progress {
    pub fn new(answer_tools: Vec<String>) -> Self {
        Self {
            answer_tools,
            ..Self::default()
        }
    }

    /// The model has begun (or made) a call that answers.
    pub fn answering(&self) -> bool {
        self.answering.load(Ordering::Relaxed)
    }

    /// Upstream calls started so far, cancelled ones included.
    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Usage reported so far by the attempt's calls, if any reported some.
    pub fn usage(&self) -> Option<Usage> {
        self.reported.load(Ordering::Relaxed).then(|| {
            let [a, b, c, d, e] = self.usage.each_ref().map(|n| n.load(Ordering::Relaxed));
            Usage {
                input_tokens: a,
                output_tokens: b,
                total_tokens: c,
                cached_input_tokens: d,
                reasoning_tokens: e,
            }
        })
    }

    fn see(&self, chunk: &ProviderChunk, before: Option<Usage>) {
        let name = match chunk {
            ProviderChunk::ToolCallStarted { name } => name,
            ProviderChunk::ToolCall(call) => &call.name,
            ProviderChunk::Usage(u) => {
                let mut total = before.unwrap_or_default();
                total.add(u);
                let fields = [
                    total.input_tokens,
                    total.output_tokens,
                    total.total_tokens,
                    total.cached_input_tokens,
                    total.reasoning_tokens,
                ];
                for (slot, n) in self.usage.iter().zip(fields) {
                    slot.store(n, Ordering::Relaxed);
                }
                self.reported.store(true, Ordering::Relaxed);
                return;
            }
            _ => return,
        };
        if self.answer_tools.iter().any(|t| t == name) {
            self.answering.store(true, Ordering::Relaxed);
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

/// Where an attempt reports while it runs: its agent's index, the side channel (text
/// deltas when `stream_text` is set, every tool call) and its [`Progress`].
pub struct Report {
    pub agent: usize,
    pub side: mpsc::Sender<(usize, Side)>,
    pub stream_text: bool,
    pub progress: Arc<Progress>,
}

/// Runs one coordination attempt to its end or to `deadline`: one upstream call, or, when
/// the model calls the agent's own tools, several (the tool loop).
pub async fn attempt(
    provider: Arc<dyn Provider>,
    mut request: ProviderRequest,
    deadline: Instant,
    report: Report,
    tools: Option<AttemptTools>,
) -> AttemptDone {
    let agent = report.agent;
    let mut transcript = Vec::new();
    let mut usage: Option<Usage> = None;
    let mut rounds = 0u32;
    let mut limit_noted = false;
    loop {
        // Only the tool loop sends the request again: without tools it is handed over, not
        // copied (with a big question, a copy per agent).
        let this_call = if tools.is_some() {
            request.clone()
        } else {
            std::mem::take(&mut request)
        };
        let (mut gathered, result) = one_call(&provider, this_call, deadline, &report, usage).await;
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
            images: Vec::new(),
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
            let results = join_all(own.iter().map(|c| {
                run_tool(
                    agent,
                    t.tools.as_ref(),
                    c,
                    round,
                    limits,
                    deadline,
                    &report.side,
                )
            }))
            .await;
            transcript.extend(
                own.iter()
                    .zip(results)
                    .map(|(c, text)| Message::tool_result(&c.id, text)),
            );
        }
        // Copies the prompt only on the first round, while the turn still shares it.
        Arc::make_mut(&mut request.messages).extend(
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

/// One upstream call; `before` is the usage of the attempt's earlier calls (tool loop).
async fn one_call(
    provider: &Arc<dyn Provider>,
    request: ProviderRequest,
    deadline: Instant,
    report: &Report,
    before: Option<Usage>,
) -> (Gathered, Result<(), CallError>) {
    report.progress.calls.fetch_add(1, Ordering::Relaxed);
    let mut stream = provider.stream(request);
    let mut gathered = Gathered::default();
    // One timer for the whole call: a `timeout_at` per chunk would register and remove a
    // timer for every token.
    let expiry = tokio::time::sleep_until(deadline);
    tokio::pin!(expiry);
    let result = loop {
        let next = tokio::select! {
            biased;
            next = stream.next() => next,
            () = &mut expiry => break Err(CallError::TimedOut),
        };
        match next {
            None => break Ok(()),
            Some(Err(e)) => break Err(CallError::Provider(e)),
            Some(Ok(chunk)) => {
                report.progress.see(&chunk, before);
                if let Some(text) = gathered.absorb(chunk).filter(|_| report.stream_text) {
                    // The loop owns the receiver; a send can only fail while it shuts down.
                    let _ = report.side.send((report.agent, Side::Delta(text))).await;
                }
            }
        }
    };
    (gathered, result)
}
