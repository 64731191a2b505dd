//! How a session looks to an Anthropic Messages client: a `message` whose content is a
//! `thinking` block (the deliberation), a `text` block (the answer) or the winning
//! `tool_use` blocks, and the streamed events that build it (`message_start`,
//! `content_block_start/delta/stop`, `message_delta`, `message_stop`), each with its
//! `event:` line, as the SDK's accumulator and Claude Code need.
//!
//! Each thinking block is signed (its `signature`, streamed as the block's last delta) so
//! clients can send it back natively and the server can tell it is its own. Usage comes
//! twice: `message_start` carries the request's own prompt as `count_tokens` counts it
//! (all that is known then), `message_delta` and the non-streamed body the session's
//! totals (every agent's calls).

use std::sync::Arc;

use massgen_core::coordination::SessionSummary;
use massgen_core::provider::{FinishReason, ToolCall, Usage};
use serde_json::{Value, json};

use crate::server::doors::limit::{AnswerLimit, Cut, pieces};
use crate::server::doors::reasoning::Signer;

/// Tool input JSON goes out in pieces of at most this many bytes.
const INPUT_PIECE_BYTES: usize = 64;

/// The fixed parts of the message.
#[derive(Debug, Clone)]
pub struct Header {
    /// `msg_<session hex>`.
    pub id: String,
    pub model: String,
    /// Signs the thinking blocks.
    pub signer: Arc<Signer>,
    /// The request's prompt tokens (`count_tokens`' estimate), for `message_start`.
    pub input_tokens: u64,
}

/// Anthropic's usage: `input_tokens` excludes cached input, which is counted apart.
pub fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens.saturating_sub(u.cached_input_tokens),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": u.cached_input_tokens,
        "output_tokens": u.output_tokens,
    })
}

/// `stop_reason` and `stop_sequence`.
fn stop(summary: &SessionSummary, cut: Option<&Cut>) -> (&'static str, Value) {
    match cut {
        Some(Cut::MaxTokens) => ("max_tokens", Value::Null),
        Some(Cut::Stop(seq)) => ("stop_sequence", json!(seq)),
        None if !summary.final_tool_calls.is_empty() => ("tool_use", Value::Null),
        None if summary.finish_reason == FinishReason::Length => ("max_tokens", Value::Null),
        None => ("end_turn", Value::Null),
    }
}

fn thinking_block(text: &str, signer: &Signer) -> Value {
    json!({"type": "thinking", "thinking": text, "signature": signer.sign_thinking(text)})
}

fn tool_use_block(call: &ToolCall) -> Value {
    let input: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input})
}

/// The non-streamed message.
pub fn message(
    header: &Header,
    summary: &SessionSummary,
    reasoning: &str,
    limit: &mut AnswerLimit,
    metadata: Value,
) -> Value {
    let mut content = Vec::new();
    if !reasoning.is_empty() {
        content.push(thinking_block(reasoning, &header.signer));
    }
    let answer = limit.apply(&summary.final_answer);
    if !answer.is_empty() || summary.final_tool_calls.is_empty() {
        content.push(json!({"type": "text", "text": answer}));
    }
    content.extend(summary.final_tool_calls.iter().map(tool_use_block));
    let (reason, sequence) = stop(summary, limit.cut());
    json!({
        "id": header.id,
        "type": "message",
        "role": "assistant",
        "model": header.model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage_json(&summary.usage),
        "massgen_metadata": metadata,
    })
}

/// One event: its type (the `event:` line) and its payload.
pub type Event = (&'static str, Value);

fn event(kind: &'static str, fields: Value) -> Event {
    let mut payload = json!({"type": kind});
    if let (Value::Object(p), Value::Object(f)) = (&mut payload, fields) {
        p.extend(f);
    }
    (kind, payload)
}

pub fn ping() -> Event {
    event("ping", json!({}))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
}

/// Builds the event stream of one message, step by step.
pub struct Live {
    header: Header,
    /// The index the next block gets.
    next: usize,
    open: Option<Block>,
    /// A text block was opened (an empty answer still gets one).
    text_block: bool,
    answer_began: bool,
    /// The open thinking block's text so far: what its signature covers.
    thinking: String,
    /// Deliberation lines after the answer began: a trailing thinking block.
    late: String,
    limit: AnswerLimit,
}

impl Live {
    pub fn new(header: Header, limit: AnswerLimit) -> Self {
        Self {
            header,
            next: 0,
            open: None,
            text_block: false,
            answer_began: false,
            thinking: String::new(),
            late: String::new(),
            limit,
        }
    }

    /// `message_start` and a first `ping`. Its usage is the request's own prompt (what
    /// clients such as LangChain's read input tokens from); the session's totals are known
    /// only at the end, in `message_delta`.
    pub fn start(&self) -> Vec<Event> {
        let usage = json!({
            "input_tokens": self.header.input_tokens, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0, "output_tokens": 0,
        });
        let message = json!({
            "id": self.header.id, "type": "message", "role": "assistant",
            "model": self.header.model, "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": usage,
        });
        vec![event("message_start", json!({"message": message})), ping()]
    }

    fn open(&mut self, block: Block) -> Vec<Event> {
        if self.open == Some(block) {
            return Vec::new();
        }
        let mut out = self.close();
        let content = match block {
            Block::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
            Block::Text => json!({"type": "text", "text": ""}),
        };
        out.push(event(
            "content_block_start",
            json!({"index": self.next, "content_block": content}),
        ));
        self.open = Some(block);
        self.text_block |= block == Block::Text;
        out
    }

    /// Ends the open block (a thinking block with its `signature_delta`, over the text of
    /// its `thinking_delta`s, which the SDK's accumulator and Claude Code expect before the
    /// stop).
    fn close(&mut self) -> Vec<Event> {
        let Some(block) = self.open.take() else {
            return Vec::new();
        };
        let index = self.next;
        self.next += 1;
        let mut out = Vec::new();
        if block == Block::Thinking {
            let signature = self.header.signer.sign_thinking(&self.thinking);
            self.thinking.clear();
            out.push(event(
                "content_block_delta",
                json!({"index": index, "delta": {"type": "signature_delta", "signature": signature}}),
            ));
        }
        out.push(event("content_block_stop", json!({"index": index})));
        out
    }

    pub fn reasoning(&mut self, line: &str) -> Vec<Event> {
        if self.answer_began {
            self.late.push_str(line);
            return Vec::new();
        }
        let mut out = self.open(Block::Thinking);
        self.thinking.push_str(line);
        out.push(event(
            "content_block_delta",
            json!({"index": self.next, "delta": {"type": "thinking_delta", "thinking": line}}),
        ));
        out
    }

    pub fn text(&mut self, piece: &str) -> Vec<Event> {
        self.answer_began = true;
        let piece = self.limit.push(piece);
        self.send_text(&piece)
    }

    fn send_text(&mut self, piece: &str) -> Vec<Event> {
        if piece.is_empty() {
            return Vec::new();
        }
        let mut out = self.open(Block::Text);
        out.push(event(
            "content_block_delta",
            json!({"index": self.next, "delta": {"type": "text_delta", "text": piece}}),
        ));
        out
    }

    pub fn tool_calls(&mut self, calls: &[ToolCall]) -> Vec<Event> {
        self.answer_began = true;
        let held = self.limit.finish();
        let mut out = self.send_text(&held);
        out.extend(self.close());
        for call in calls {
            let index = self.next;
            self.next += 1;
            out.push(event(
                "content_block_start",
                json!({"index": index, "content_block":
                    {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}}),
            ));
            for piece in pieces(&call.arguments, INPUT_PIECE_BYTES) {
                out.push(event(
                    "content_block_delta",
                    json!({"index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}),
                ));
            }
            out.push(event("content_block_stop", json!({"index": index})));
        }
        out
    }

    /// Closes what is open (an empty answer still gets its text block), adds the late
    /// deliberation, then `message_delta` with the stop reason, the summed usage and
    /// `massgen_metadata`, and `message_stop`.
    pub fn completed(&mut self, summary: &SessionSummary, metadata: Value) -> Vec<Event> {
        self.answer_began = true;
        let held = self.limit.finish();
        let mut out = self.send_text(&held);
        if !self.text_block && summary.final_tool_calls.is_empty() {
            out.extend(self.open(Block::Text));
        }
        out.extend(self.close());
        if !self.late.is_empty() {
            let late = std::mem::take(&mut self.late);
            self.answer_began = false;
            out.extend(self.reasoning(&late));
            out.extend(self.close());
        }
        let (reason, sequence) = stop(summary, self.limit.cut());
        out.push(event(
            "message_delta",
            json!({"delta": {"stop_reason": reason, "stop_sequence": sequence},
                "usage": usage_json(&summary.usage), "massgen_metadata": metadata}),
        ));
        out.push(event("message_stop", json!({})));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use massgen_core::Secret;

    fn live(signer: &Arc<Signer>) -> Live {
        let header = Header {
            id: "msg_1".into(),
            model: "massgen".into(),
            signer: Arc::clone(signer),
            input_tokens: 42,
        };
        Live::new(header, AnswerLimit::new(None, Vec::new()))
    }

    #[test]
    fn a_streamed_thinking_block_is_signed_over_its_deltas() {
        let signer = Arc::new(Signer::new(Some(&Secret::new("s"))));
        let mut live = live(&signer);
        let start = live.start();
        assert_eq!(start[0].1["message"]["usage"]["input_tokens"], 42);
        let mut events = live.reasoning("[agent1] answered\n");
        events.extend(live.reasoning("[agent2] voted for agent1.1\n"));
        events.extend(live.text("The answer."));
        let signatures: Vec<&str> = events
            .iter()
            .filter_map(|(_, e)| e["delta"]["signature"].as_str())
            .collect();
        assert_eq!(signatures.len(), 1);
        assert!(signer.verify_thinking(
            "[agent1] answered\n[agent2] voted for agent1.1\n",
            signatures[0]
        ));
    }
}
