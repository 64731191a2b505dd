//! Decoding an OpenAI Responses SSE stream, or a whole `response`, into [`ProviderChunk`]s.
//!
//! Text (`output_text` and `refusal` deltas) and reasoning (`reasoning_summary_text`,
//! and LM Studio's `reasoning_text`) go out as they arrive. Function calls are assembled
//! per output item from `function_call_arguments.delta` and settled by `.done` /
//! `output_item.done`. `response.completed` / `response.incomplete` end the stream with
//! its usage; `error` and `response.failed` end it with an error. A whole response goes
//! through the same steps, as the events its output items would have come in.

use crate::sse::SseEvent;
use serde_json::{Value, json};

use super::request::OPAQUE_KEY;
use super::wire::{ErrorWire, EventWire, ResponseWire, UsageWire, WholeWire};
use crate::errors::{self as common, ErrorInfo};
use crate::sse::{EventDecoder, Held, Step};
use crate::{FinishReason, ProviderChunk, ProviderError, ProviderErrorKind, ToolCall, Usage};

struct Call {
    output_index: Option<u32>,
    item_id: Option<String>,
    call_id: String,
    name: String,
    arguments: String,
    done: bool,
    reasoning: Vec<Value>,
}

/// The stream state of this format ([`crate::WireFormat::Decoder`]).
pub struct Decoder {
    provider: String,
    calls: Vec<Call>,
    /// Reasoning items finished since the last function call began.
    reasoning: Vec<Value>,
    reasoning_seen: bool,
    /// What the calls and reasoning items took in, for the answer's cap.
    held: Held,
}

impl Decoder {
    fn new(provider: String) -> Self {
        Self {
            provider,
            calls: Vec::new(),
            reasoning: Vec::new(),
            reasoning_seen: false,
            held: Held::default(),
        }
    }

    fn call_for(&mut self, output_index: Option<u32>, item_id: Option<&str>) -> Option<&mut Call> {
        self.calls.iter_mut().rev().find(|c| {
            (item_id.is_some() && c.item_id.as_deref() == item_id)
                || (output_index.is_some() && c.output_index == output_index)
        })
    }

    /// One event; `size`: its data's bytes, what an output item it brings is held as.
    fn on_payload(&mut self, event: EventWire, size: usize) -> Result<Step, ProviderError> {
        let mut out = Vec::new();
        let text = |delta: Option<String>| delta.filter(|d| !d.is_empty());
        match event.kind.as_str() {
            "response.output_text.delta" | "response.refusal.delta" => {
                out.extend(text(event.delta).map(ProviderChunk::Text));
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Some(delta) = text(event.delta) {
                    self.reasoning_seen = true;
                    out.push(ProviderChunk::Reasoning(delta));
                }
            }
            "response.reasoning_summary_part.added" if self.reasoning_seen => {
                // Summary parts are paragraphs; keep them apart in the live reasoning text.
                out.push(ProviderChunk::Reasoning("\n\n".into()));
            }
            "response.output_item.added" => {
                out.extend(self.on_item(event.output_index, event.item, false, size));
            }
            "response.output_item.done" => {
                out.extend(self.on_item(event.output_index, event.item, true, size));
            }
            "response.function_call_arguments.delta" => {
                let delta = event.delta.unwrap_or_default();
                if let Some(call) = self.call_for(event.output_index, event.item_id.as_deref())
                    && !call.done
                {
                    call.arguments.push_str(&delta);
                    self.held.add(delta.len());
                }
            }
            "response.function_call_arguments.done" => {
                if let (Some(arguments), Some(call)) = (
                    event.arguments,
                    self.call_for(event.output_index, event.item_id.as_deref()),
                ) {
                    let bytes = arguments.len();
                    call.arguments = arguments;
                    self.held.add(bytes);
                }
            }
            "response.completed" | "response.incomplete" => {
                return Ok(Step::Done(
                    self.complete(event.response.unwrap_or_default()),
                ));
            }
            "response.failed" => {
                let error = event.response.and_then(|r| r.error).unwrap_or_default();
                return Err(self.stream_error(error));
            }
            "error" => {
                let error = event.error.unwrap_or(ErrorWire {
                    code: event.code,
                    message: event.message,
                    error_type: None,
                });
                return Err(self.stream_error(error));
            }
            _ => {}
        }
        Ok(Step::More(out))
    }

    /// A whole `response`: each output item as a stream brings it (a message's text and
    /// refusals, a reasoning item's summary parts or `reasoning_text`, then the item done),
    /// then the stream's end, `response.completed` (or `.incomplete`, `.failed`).
    fn on_whole(&mut self, whole: WholeWire) -> Result<Vec<ProviderChunk>, ProviderError> {
        let status = whole.status.as_deref().unwrap_or("completed");
        if whole.response.error.is_some() || status == "failed" {
            let error = whole.response.error.unwrap_or_default();
            return Err(self.stream_error(error));
        }
        if !matches!(status, "completed" | "incomplete") {
            // `background: true` answers at once with a response still `queued`.
            return Err(ProviderError::new(
                ProviderErrorKind::InvalidResponse,
                self.provider.clone(),
                format!("the upstream answered with a response still {status}"),
            ));
        }
        let Some(items) = whole.output else {
            return Err(crate::whole::no_answer(&self.provider, "output"));
        };
        let mut out = Vec::new();
        for (output_index, item) in (0u32..).zip(items) {
            for (kind, text) in item_texts(&item) {
                let event = EventWire {
                    kind: kind.to_owned(),
                    delta: text,
                    output_index: Some(output_index),
                    ..EventWire::default()
                };
                let (Step::More(chunks) | Step::Done(chunks)) = self.on_payload(event, 0)?;
                out.extend(chunks);
            }
            // Held as the streamed `output_item.done` event would be, by its size.
            let size = item.to_string().len();
            out.extend(self.on_item(Some(output_index), Some(item), true, size));
        }
        out.extend(self.complete(whole.response));
        Ok(out)
    }

    /// Tracks a function-call item; a call seen for the first time is announced. An item
    /// kept is held as `size` bytes (its event's).
    fn on_item(
        &mut self,
        output_index: Option<u32>,
        item: Option<Value>,
        done: bool,
        size: usize,
    ) -> Option<ProviderChunk> {
        let item = item?;
        let field = |key: &str| item.get(key).and_then(Value::as_str).map(str::to_owned);
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                self.held.item(size);
                let item_id = field("id");
                let arguments = field("arguments");
                if let Some(call) = self.call_for(output_index, item_id.as_deref()) {
                    if done {
                        if let Some(arguments) = arguments.filter(|a| !a.is_empty()) {
                            call.arguments = arguments;
                        }
                        call.done = true;
                    }
                    return None;
                }
                let reasoning = std::mem::take(&mut self.reasoning);
                let name = field("name").unwrap_or_default();
                self.calls.push(Call {
                    output_index,
                    item_id,
                    call_id: field("call_id").unwrap_or_default(),
                    name: name.clone(),
                    arguments: arguments.unwrap_or_default(),
                    done,
                    reasoning,
                });
                Some(ProviderChunk::ToolCallStarted { name })
            }
            Some("reasoning") if done => {
                self.held.item(size);
                self.reasoning.push(item);
                None
            }
            _ => None,
        }
    }

    fn complete(&mut self, response: ResponseWire) -> Vec<ProviderChunk> {
        let calls: Vec<ToolCall> = std::mem::take(&mut self.calls)
            .into_iter()
            .enumerate()
            .map(|(n, call)| {
                let mut opaque = serde_json::Map::new();
                if !call.reasoning.is_empty() {
                    opaque.insert("reasoning".into(), Value::Array(call.reasoning));
                }
                if let Some(id) = call.item_id {
                    opaque.insert("item_id".into(), Value::String(id));
                }
                ToolCall {
                    id: if call.call_id.is_empty() {
                        format!("call_{n}")
                    } else {
                        call.call_id
                    },
                    name: call.name,
                    arguments: call.arguments,
                    opaque: (!opaque.is_empty()).then(|| json!({ OPAQUE_KEY: opaque })),
                }
            })
            .collect();
        let finish = match response
            .incomplete_details
            .and_then(|d| d.reason)
            .as_deref()
        {
            Some("max_output_tokens") => FinishReason::Length,
            Some("content_filter") => FinishReason::ContentFilter,
            _ if !calls.is_empty() => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        };
        crate::sse::closing_chunks(calls, response.usage.as_ref().map(map_usage), finish)
    }

    fn stream_error(&self, error: ErrorWire) -> ProviderError {
        let code = match error.code {
            Some(Value::String(code)) if !code.is_empty() => Some(code),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        let info = ErrorInfo {
            message: common::truncate(&error.message.unwrap_or_default()),
            error_type: error.error_type,
            code,
            status: None,
        };
        common::stream_error(&self.provider, info)
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
        let payload: EventWire = crate::sse::json_payload(&self.provider, data)?;
        self.on_payload(payload, data.len())
    }

    fn on_whole_body(&mut self, body: &[u8]) -> Result<Vec<ProviderChunk>, ProviderError> {
        let whole: WholeWire = crate::whole::json_body(&self.provider, body)?;
        self.on_whole(whole)
    }

    fn on_end_of_body(&mut self) -> Result<Vec<ProviderChunk>, ProviderError> {
        Err(ProviderError::new(
            ProviderErrorKind::Connection,
            self.provider.clone(),
            "stream ended early (no response.completed)",
        ))
    }

    fn held(&self) -> usize {
        self.held.bytes()
    }
}

/// The streamed events an output item's text would have come in, in order: `(type,
/// delta)`, a summary part's start carrying no text.
fn item_texts(item: &Value) -> Vec<(&'static str, Option<String>)> {
    let parts = |key: &str| {
        item.get(key)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
    };
    let text = |part: &Value, key: &str| part.get(key).and_then(Value::as_str).map(str::to_owned);
    let mut events = Vec::new();
    match item.get("type").and_then(Value::as_str) {
        Some("message") => {
            for part in parts("content") {
                match part.get("type").and_then(Value::as_str) {
                    Some("output_text") => {
                        events.push(("response.output_text.delta", text(part, "text")));
                    }
                    Some("refusal") => {
                        events.push(("response.refusal.delta", text(part, "refusal")));
                    }
                    _ => {}
                }
            }
        }
        Some("reasoning") => {
            for part in parts("summary") {
                events.push(("response.reasoning_summary_part.added", None));
                events.push(("response.reasoning_summary_text.delta", text(part, "text")));
            }
            // LM Studio's reasoning is the item's content.
            for part in parts("content") {
                if part.get("type").and_then(Value::as_str) == Some("reasoning_text") {
                    events.push(("response.reasoning_text.delta", text(part, "text")));
                }
            }
        }
        _ => {}
    }
    events
}

fn map_usage(wire: &UsageWire) -> Usage {
    let input = wire.input_tokens.unwrap_or(0);
    let output = wire.output_tokens.unwrap_or(0);
    Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: wire.total_tokens.unwrap_or(input + output),
        cached_input_tokens: wire
            .input_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0),
        reasoning_tokens: wire
            .output_tokens_details
            .as_ref()
            .and_then(|d| d.reasoning_tokens)
            .unwrap_or(0),
    }
}
