//! One upstream call of a coordination turn, gathered into text, tool calls and usage.

use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout_at};

use crate::providers::{
    FinishReason, Provider, ProviderChunk, ProviderError, ProviderRequest, ToolCall, Usage,
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

/// The end of one attempt, reported back to the session loop.
#[derive(Debug)]
pub struct AttemptDone {
    pub agent: usize,
    pub gathered: Gathered,
    pub result: Result<(), CallError>,
}

/// Runs one coordination call to its end or to `deadline`. Text deltas go to `deltas`
/// (tagged with the agent index) when the session streams agent text.
pub async fn attempt(
    agent: usize,
    provider: Arc<dyn Provider>,
    request: ProviderRequest,
    deadline: Instant,
    deltas: Option<mpsc::Sender<(usize, String)>>,
) -> AttemptDone {
    let mut stream = provider.stream(request);
    let mut gathered = Gathered::default();
    let result = loop {
        match timeout_at(deadline, stream.next()).await {
            Err(_) => break Err(CallError::TimedOut),
            Ok(None) => break Ok(()),
            Ok(Some(Err(e))) => break Err(CallError::Provider(e)),
            Ok(Some(Ok(chunk))) => {
                if let (Some(text), Some(tx)) = (gathered.absorb(chunk), &deltas) {
                    // The loop owns the receiver; a send can only fail while it shuts down.
                    let _ = tx.send((agent, text)).await;
                }
            }
        }
    };
    AttemptDone {
        agent,
        gathered,
        result,
    }
}
