//! Decoding an Anthropic Messages SSE stream, or a whole `message`, into
//! [`ProviderChunk`]s.
//!
//! Text and thinking go out as they arrive. A `tool_use` block's input arrives as
//! `input_json_delta` fragments and is emitted when the block stops. Thinking blocks
//! (text + `signature_delta`) and `redacted_thinking` blocks are kept and attached to the
//! next tool call as opaque data, so a replayed assistant turn carries them back. Usage is
//! `message_start`'s (reported at once, so a cancelled call still shows its input), overwritten
//! field by field by the cumulative `message_delta` usage. A `tool_use` block's start is
//! announced as soon as it opens. A whole message goes through the same steps, each block
//! opened whole and closed at once.

use std::collections::HashMap;

use crate::sse::SseEvent;
use serde_json::{Value, json};

use super::errors::stream_error;
use super::request::OPAQUE_KEY;
use super::wire::{BlockWire, DeltaWire, EventWire, MessageDeltaWire, UsageWire, WholeWire};
use crate::sse::{EventDecoder, Held, Step};
use crate::{FinishReason, ProviderChunk, ProviderError, ProviderErrorKind, ToolCall, Usage};

enum Block {
    Thinking {
        text: String,
        signature: String,
    },
    Redacted {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        json: String,
        start_input: Option<Value>,
    },
    Other,
}

/// The stream state of this format ([`crate::WireFormat::Decoder`]).
pub struct Decoder {
    provider: String,
    blocks: HashMap<u32, Block>,
    /// Thinking blocks seen since the last tool call.
    thinking: Vec<Value>,
    calls: Vec<ToolCall>,
    usage: UsageWire,
    saw_usage: bool,
    stop_reason: Option<String>,
    /// What the blocks took in, for the answer's cap.
    held: Held,
}

impl Decoder {
    fn new(provider: String) -> Self {
        Self {
            provider,
            blocks: HashMap::new(),
            thinking: Vec::new(),
            calls: Vec::new(),
            usage: UsageWire::default(),
            saw_usage: false,
            stop_reason: None,
            held: Held::default(),
        }
    }

    fn on_payload(&mut self, event: EventWire) -> Result<Step, ProviderError> {
        let mut out = Vec::new();
        match event {
            EventWire::MessageStart { message } => {
                if let Some(usage) = message.usage {
                    self.merge_usage(usage);
                }
                // The input is billed from here on: a call cancelled mid-stream still
                // reports it (the closing usage replaces this one).
                out.extend(
                    self.saw_usage
                        .then(|| ProviderChunk::Usage(map_usage(&self.usage))),
                );
            }
            EventWire::ContentBlockStart {
                index,
                content_block,
            } => {
                let block = match content_block {
                    BlockWire::Text { text } => {
                        if !text.is_empty() {
                            out.push(ProviderChunk::Text(text));
                        }
                        Block::Other
                    }
                    BlockWire::Thinking {
                        thinking,
                        signature,
                    } => {
                        if !thinking.is_empty() {
                            out.push(ProviderChunk::Reasoning(thinking.clone()));
                        }
                        Block::Thinking {
                            text: thinking,
                            signature,
                        }
                    }
                    BlockWire::RedactedThinking { data } => Block::Redacted { data },
                    BlockWire::ToolUse { id, name, input } => {
                        out.push(ProviderChunk::ToolCallStarted { name: name.clone() });
                        Block::ToolUse {
                            id,
                            name,
                            json: String::new(),
                            start_input: input,
                        }
                    }
                    BlockWire::Other => Block::Other,
                };
                self.blocks.insert(index, block);
            }
            EventWire::ContentBlockDelta { index, delta } => {
                let block = self.blocks.get_mut(&index);
                match (delta, block) {
                    (DeltaWire::TextDelta { text }, _) if !text.is_empty() => {
                        out.push(ProviderChunk::Text(text));
                    }
                    (DeltaWire::ThinkingDelta { thinking }, block) => {
                        if let Some(Block::Thinking { text, .. }) = block {
                            // Kept to be sent back, besides going out: held twice.
                            self.held.add(thinking.len());
                            text.push_str(&thinking);
                        }
                        if !thinking.is_empty() {
                            out.push(ProviderChunk::Reasoning(thinking));
                        }
                    }
                    (
                        DeltaWire::SignatureDelta { signature },
                        Some(Block::Thinking { signature: s, .. }),
                    ) => {
                        self.held.add(signature.len());
                        s.push_str(&signature);
                    }
                    (
                        DeltaWire::InputJsonDelta { partial_json },
                        Some(Block::ToolUse { json, .. }),
                    ) => {
                        self.held.add(partial_json.len());
                        json.push_str(&partial_json);
                    }
                    _ => {}
                }
            }
            EventWire::ContentBlockStop { index } => {
                if let Some(block) = self.blocks.remove(&index) {
                    self.close(block);
                }
            }
            EventWire::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.stop_reason {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = usage {
                    self.merge_usage(usage);
                }
            }
            EventWire::MessageStop => return Ok(Step::Done(self.complete())),
            EventWire::Error { error } => return Err(stream_error(&self.provider, error)),
            EventWire::Ping | EventWire::Unknown => {}
        }
        Ok(Step::More(out))
    }

    /// A whole `message`: its blocks as a stream brings them (each opened whole, then
    /// closed), then its stop reason and usage, then the stream's end.
    fn on_whole(&mut self, whole: WholeWire) -> Result<Vec<ProviderChunk>, ProviderError> {
        if let Some(error) = whole.error {
            return Err(stream_error(&self.provider, error));
        }
        let Some(blocks) = whole.content else {
            return Err(crate::whole::no_answer(&self.provider, "content"));
        };
        let mut out = Vec::new();
        let mut more = |step: Step| {
            let (Step::More(chunks) | Step::Done(chunks)) = step;
            out.extend(chunks);
        };
        for (index, content_block) in (0u32..).zip(blocks) {
            // Held as a streamed block is, from its start (see `on_event`).
            self.held.item(block_bytes(&content_block));
            more(self.on_payload(EventWire::ContentBlockStart {
                index,
                content_block,
            })?);
            more(self.on_payload(EventWire::ContentBlockStop { index })?);
        }
        more(self.on_payload(EventWire::MessageDelta {
            delta: MessageDeltaWire {
                stop_reason: whole.stop_reason,
            },
            usage: whole.usage,
        })?);
        more(self.on_payload(EventWire::MessageStop)?);
        Ok(out)
    }

    fn close(&mut self, block: Block) {
        match block {
            Block::Thinking { text, signature } => self.thinking.push(json!({
                "type": "thinking", "thinking": text, "signature": signature,
            })),
            Block::Redacted { data } => self
                .thinking
                .push(json!({"type": "redacted_thinking", "data": data})),
            Block::ToolUse {
                id,
                name,
                json,
                start_input,
            } => {
                let arguments = if json.trim().is_empty() {
                    start_input.map_or_else(|| "{}".to_owned(), |v| v.to_string())
                } else {
                    json
                };
                let opaque = (!self.thinking.is_empty()).then(
                    || json!({ OPAQUE_KEY: { "thinking": std::mem::take(&mut self.thinking) } }),
                );
                self.calls.push(ToolCall {
                    id,
                    name,
                    arguments,
                    opaque,
                });
            }
            Block::Other => {}
        }
    }

    fn merge_usage(&mut self, usage: UsageWire) {
        // An empty usage object (a proxy that strips it) is no usage, not zero usage.
        self.saw_usage |= usage.input_tokens.is_some() || usage.output_tokens.is_some();
        let u = &mut self.usage;
        u.input_tokens = usage.input_tokens.or(u.input_tokens);
        u.output_tokens = usage.output_tokens.or(u.output_tokens);
        u.cache_creation_input_tokens = usage
            .cache_creation_input_tokens
            .or(u.cache_creation_input_tokens);
        u.cache_read_input_tokens = usage.cache_read_input_tokens.or(u.cache_read_input_tokens);
    }

    fn complete(&mut self) -> Vec<ProviderChunk> {
        // Blocks left open by a lax server still count.
        let mut open: Vec<(u32, Block)> = self.blocks.drain().collect();
        open.sort_by_key(|(index, _)| *index);
        for (_, block) in open {
            self.close(block);
        }
        let calls = std::mem::take(&mut self.calls);
        let finish = match self.stop_reason.as_deref() {
            Some("max_tokens") | Some("model_context_window_exceeded") => FinishReason::Length,
            Some("refusal") => FinishReason::ContentFilter,
            Some("tool_use") => FinishReason::ToolCalls,
            _ if !calls.is_empty() => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        };
        let usage = self.saw_usage.then(|| map_usage(&self.usage));
        crate::sse::closing_chunks(calls, usage, finish)
    }
}

impl EventDecoder for Decoder {
    fn new(provider: String) -> Self {
        Decoder::new(provider)
    }

    fn provider(&self) -> &str {
        &self.provider
    }

    fn on_event(&mut self, event: SseEvent) -> Result<Step, ProviderError> {
        let Some(data) = crate::sse::event_data(&event) else {
            return Ok(Step::More(Vec::new()));
        };
        let payload: EventWire = crate::sse::json_payload(&self.provider, data)?;
        if matches!(payload, EventWire::ContentBlockStart { .. }) {
            // A block is held from its start to its stop, with all its start brought (a
            // thinking block's text and signature, a tool's first input).
            self.held.item(data.len());
        }
        self.on_payload(payload)
    }

    fn on_whole_body(&mut self, body: &[u8]) -> Result<Vec<ProviderChunk>, ProviderError> {
        let whole: WholeWire = crate::whole::json_body(&self.provider, body)?;
        self.on_whole(whole)
    }

    fn on_end_of_body(&mut self) -> Result<Vec<ProviderChunk>, ProviderError> {
        // A stop reason without message_stop is a complete answer from a lax proxy.
        if self.stop_reason.is_some() {
            Ok(self.complete())
        } else {
            Err(ProviderError::new(
                ProviderErrorKind::Connection,
                self.provider.clone(),
                "stream ended early (no message_stop)",
            ))
        }
    }

    fn held(&self) -> usize {
        self.held.bytes()
    }
}

/// The bytes a whole block brings: its text, thinking and signature, or a call's id, name
/// and input.
fn block_bytes(block: &BlockWire) -> usize {
    match block {
        BlockWire::Text { text } => text.len(),
        BlockWire::Thinking {
            thinking,
            signature,
        } => thinking.len() + signature.len(),
        BlockWire::RedactedThinking { data } => data.len(),
        BlockWire::ToolUse { id, name, input } => {
            id.len() + name.len() + input.as_ref().map_or(0, |i| i.to_string().len())
        }
        BlockWire::Other => 0,
    }
}

/// Anthropic's `input_tokens` excludes cached tokens; the neutral input count includes
/// them, as OpenAI's `prompt_tokens` does, so sums compare across providers.
fn map_usage(wire: &UsageWire) -> Usage {
    let cache_read = wire.cache_read_input_tokens.unwrap_or(0);
    let input =
        wire.input_tokens.unwrap_or(0) + wire.cache_creation_input_tokens.unwrap_or(0) + cache_read;
    let output = wire.output_tokens.unwrap_or(0);
    Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: input + output,
        cached_input_tokens: cache_read,
        reasoning_tokens: 0,
    }
}
