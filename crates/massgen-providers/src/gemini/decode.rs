//! Decoding a Gemini `streamGenerateContent?alt=sse` stream, or a whole `generateContent`
//! response, into [`ProviderChunk`]s.
//!
//! Every chunk is a whole `GenerateContentResponse`: text parts (`thought: true` ones are
//! reasoning) go out as they arrive; `functionCall` parts (several per chunk possible, the
//! arguments an object, usually no id) become tool calls with ids synthesized as
//! `call_<n>`, their `thoughtSignature` kept as opaque data. Vertex's streamed arguments
//! (`partialArgs`, `willContinue`, an empty `functionCall` closing the call) are assembled
//! too; each call is announced when its name arrives. `usageMetadata` is on every chunk: it
//! is reported whenever it changes, and the last one wins. There is no end marker: the
//! stream is complete when the body ends after a `finishReason`.

use crate::sse::SseEvent;
use serde_json::{Map, Value, json};

use super::errors::stream_error;
use super::request::OPAQUE_KEY;
use super::wire::{ChunkWire, FunctionCallWire, PartWire, UsageWire};
use crate::sse::{EventDecoder, Held, Step};
use crate::{FinishReason, ProviderChunk, ProviderError, ProviderErrorKind, ToolCall, Usage};

/// A call whose arguments are still streaming (Vertex `partialArgs`).
struct Partial {
    id: Option<String>,
    name: String,
    args: Map<String, Value>,
    signature: Option<String>,
}

/// The stream state of this format ([`crate::WireFormat::Decoder`]).
pub struct Decoder {
    provider: String,
    calls: Vec<ToolCall>,
    partial: Option<Partial>,
    usage: Option<UsageWire>,
    finish: Option<String>,
    blocked: bool,
    /// What the calls took in, for the answer's cap.
    held: Held,
}

impl Decoder {
    fn new(provider: String) -> Self {
        Self {
            provider,
            calls: Vec::new(),
            partial: None,
            usage: None,
            finish: None,
            blocked: false,
            held: Held::default(),
        }
    }

    fn on_chunk(&mut self, chunk: ChunkWire) -> Result<Vec<ProviderChunk>, ProviderError> {
        if let Some(error) = chunk.error {
            return Err(stream_error(&self.provider, error));
        }
        let mut out = Vec::new();
        if let Some(usage) = chunk.usage_metadata {
            // Reported as it grows, so a call cancelled mid-stream still shows what it
            // used; the closing chunks repeat the last one.
            let usage = Some(usage);
            if usage != self.usage {
                out.extend(usage.as_ref().map(|u| ProviderChunk::Usage(map_usage(u))));
                self.usage = usage;
            }
        }
        if chunk.prompt_feedback.and_then(|f| f.block_reason).is_some() {
            self.blocked = true;
        }
        // Only the first candidate: we never ask for more.
        for candidate in chunk.candidates.unwrap_or_default() {
            if candidate.index.unwrap_or(0) != 0 {
                continue;
            }
            let parts = candidate.content.and_then(|c| c.parts).unwrap_or_default();
            for part in parts {
                self.on_part(part, &mut out);
            }
            if let Some(reason) = candidate.finish_reason.filter(|r| !r.is_empty()) {
                self.finish = Some(reason);
            }
        }
        Ok(out)
    }

    fn on_part(&mut self, part: PartWire, out: &mut Vec<ProviderChunk>) {
        if let Some(call) = part.function_call {
            out.extend(self.on_call(call, part.thought_signature));
            return;
        }
        if let Some(text) = part.text.filter(|t| !t.is_empty()) {
            if part.thought == Some(true) {
                out.push(ProviderChunk::Reasoning(text));
            } else {
                out.push(ProviderChunk::Text(text));
            }
        }
    }

    /// Assembles a call; a call that starts here is announced.
    fn on_call(
        &mut self,
        call: FunctionCallWire,
        signature: Option<String>,
    ) -> Option<ProviderChunk> {
        let name = call.name.filter(|n| !n.is_empty());
        let has_partial = call.partial_args.as_ref().is_some_and(|p| !p.is_empty());
        if let Some(partial) = self.partial.as_mut().filter(|_| name.is_none()) {
            for arg in call.partial_args.unwrap_or_default() {
                let Some(key) = arg
                    .json_path
                    .as_deref()
                    .and_then(|p| p.strip_prefix("$."))
                    .map(str::to_owned)
                else {
                    continue;
                };
                let value = if let Some(piece) = arg.string_value {
                    self.held.add(key.len() + piece.len());
                    // Appended where it is: rebuilding the string for every piece cost
                    // time in the square of the argument's length.
                    if let Some(Value::String(so_far)) = partial.args.get_mut(&key) {
                        so_far.push_str(&piece);
                        continue;
                    }
                    Value::String(piece)
                } else if let Some(number) = arg.number_value {
                    self.held.add(key.len() + 8);
                    number
                } else if let Some(flag) = arg.bool_value {
                    self.held.add(key.len() + 1);
                    Value::Bool(flag)
                } else {
                    self.held.add(key.len());
                    Value::Null
                };
                partial.args.insert(key, value);
            }
            if !has_partial && call.will_continue != Some(true) {
                self.close_partial();
            }
            return None;
        }
        let name = name?;
        self.close_partial();
        let started = ProviderChunk::ToolCallStarted { name: name.clone() };
        if call.will_continue == Some(true) && call.args.is_none() {
            let id_len = call.id.as_ref().map_or(0, String::len);
            let signature_len = signature.as_ref().map_or(0, String::len);
            self.held.item(id_len + name.len() + signature_len);
            self.partial = Some(Partial {
                id: call.id,
                name,
                args: Map::new(),
                signature,
            });
            return Some(started);
        }
        let arguments = call.args.unwrap_or_else(|| json!({})).to_string();
        let id_len = call.id.as_ref().map_or(0, String::len);
        let signature_len = signature.as_ref().map_or(0, String::len);
        self.held
            .item(id_len + name.len() + arguments.len() + signature_len);
        self.push_call(call.id, name, arguments, signature);
        Some(started)
    }

    fn close_partial(&mut self) {
        if let Some(p) = self.partial.take() {
            self.push_call(p.id, p.name, Value::Object(p.args).to_string(), p.signature);
        }
    }

    fn push_call(
        &mut self,
        id: Option<String>,
        name: String,
        arguments: String,
        signature: Option<String>,
    ) {
        let n = self.calls.len();
        let id = id.filter(|id| !id.is_empty());
        // What goes back with the call: its signature, and whether the id is Gemini's own
        // (then the call and its response carry it) or ours.
        let mut opaque = serde_json::Map::new();
        if let Some(signature) = signature {
            opaque.insert("thought_signature".into(), Value::String(signature));
        }
        if id.is_some() {
            opaque.insert("upstream_id".into(), Value::Bool(true));
        }
        self.calls.push(ToolCall {
            id: id.unwrap_or_else(|| format!("call_{n}")),
            name,
            arguments,
            opaque: (!opaque.is_empty()).then(|| json!({ OPAQUE_KEY: opaque })),
        });
    }

    fn complete(&mut self) -> Vec<ProviderChunk> {
        self.close_partial();
        let calls = std::mem::take(&mut self.calls);
        let finish = match self.finish.as_deref() {
            Some("MAX_TOKENS") => FinishReason::Length,
            Some(
                "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII"
                | "IMAGE_SAFETY",
            ) => FinishReason::ContentFilter,
            None if self.blocked => FinishReason::ContentFilter,
            // Gemini says STOP after function calls too.
            _ if !calls.is_empty() => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        };
        crate::sse::closing_chunks(calls, self.usage.as_ref().map(map_usage), finish)
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
        // Neither format ends with `[DONE]`; a proxy that adds one is ignored.
        let Some(data) = crate::sse::event_data(&event).filter(|d| *d != "[DONE]") else {
            return Ok(Step::More(Vec::new()));
        };
        let chunk: ChunkWire = crate::sse::json_payload(&self.provider, data)?;
        self.on_chunk(chunk).map(Step::More)
    }

    /// A `generateContent` response is one `GenerateContentResponse`, as each streamed
    /// chunk is: that one chunk, then the stream's end.
    fn on_whole_body(&mut self, body: &[u8]) -> Result<Vec<ProviderChunk>, ProviderError> {
        let chunk: ChunkWire = crate::whole::json_body(&self.provider, body)?;
        let answered = chunk.error.is_some()
            || chunk.prompt_feedback.is_some()
            || chunk.candidates.as_ref().is_some_and(|c| !c.is_empty());
        if !answered {
            return Err(crate::whole::no_answer(&self.provider, "candidates"));
        }
        let mut out = self.on_chunk(chunk)?;
        out.extend(self.complete());
        Ok(out)
    }

    fn on_end_of_body(&mut self) -> Result<Vec<ProviderChunk>, ProviderError> {
        if self.finish.is_some() || self.blocked {
            Ok(self.complete())
        } else {
            Err(ProviderError::new(
                ProviderErrorKind::Connection,
                self.provider.clone(),
                "stream ended early (no finishReason)",
            ))
        }
    }

    fn held(&self) -> usize {
        self.held.bytes()
    }
}

/// Thought tokens are billed as output (as OpenAI counts reasoning inside
/// `completion_tokens`), so they are part of `output_tokens` and also reported apart.
fn map_usage(wire: &UsageWire) -> Usage {
    let input =
        wire.prompt_token_count.unwrap_or(0) + wire.tool_use_prompt_token_count.unwrap_or(0);
    let thoughts = wire.thoughts_token_count.unwrap_or(0);
    let output = wire.candidates_token_count.unwrap_or(0) + thoughts;
    Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: wire.total_token_count.unwrap_or(input + output),
        cached_input_tokens: wire.cached_content_token_count.unwrap_or(0),
        reasoning_tokens: thoughts,
    }
}
