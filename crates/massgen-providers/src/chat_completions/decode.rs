//! Decoding a Chat Completions SSE body, or a whole `chat.completion`, into
//! [`ProviderChunk`]s.
//!
//! Text and reasoning go out as they arrive (the engine streams them live), and so does the
//! start of each tool call (its name). Complete tool calls,
//! usage and the finish reason are held until the stream's end (`[DONE]`, or the body's
//! end after a finish reason) because usage usually comes after the finish chunk.
//!
//! `refusal` deltas are emitted as [`ProviderChunk::Text`]: the refusal is the model's
//! answer, and dropping it would leave an agent with an empty answer and no reason.

use crate::sse::SseEvent;

use super::errors::{self, ErrorInfo};
use super::tool_calls::ToolCallAssembler;
use super::wire::{ChunkWire, DeltaWire, UsageWire};
use crate::sse::{EventDecoder, Step};
use crate::{FinishReason, ProviderChunk, ProviderError, ProviderErrorKind, Usage};

/// The state of one stream: what must wait for the end.
/// The stream state of this format ([`crate::WireFormat::Decoder`]).
pub struct Decoder {
    provider: String,
    tool_calls: ToolCallAssembler,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
}

impl EventDecoder for Decoder {
    fn new(provider: String) -> Self {
        Decoder::new(provider)
    }

    fn provider(&self) -> &str {
        &self.provider
    }

    fn on_event(&mut self, event: SseEvent) -> Result<Step, ProviderError> {
        Decoder::on_event(self, event)
    }

    fn on_end_of_body(&mut self) -> Result<Vec<ProviderChunk>, ProviderError> {
        Decoder::on_end_of_body(self)
    }

    fn on_whole_body(&mut self, body: &[u8]) -> Result<Vec<ProviderChunk>, ProviderError> {
        Decoder::on_whole_body(self, body)
    }

    fn held(&self) -> usize {
        self.tool_calls.held()
    }
}

impl Decoder {
    fn new(provider: String) -> Self {
        Self {
            provider,
            tool_calls: ToolCallAssembler::default(),
            usage: None,
            finish: None,
        }
    }

    fn on_event(&mut self, event: SseEvent) -> Result<Step, ProviderError> {
        let Some(data) = event.data else {
            return Ok(Step::More(Vec::new()));
        };
        let data = data.trim();
        if event.event.as_deref() == Some("error") {
            return Err(self.error_event(data));
        }
        if data.is_empty() {
            return Ok(Step::More(Vec::new()));
        }
        if data == "[DONE]" {
            return Ok(Step::Done(self.complete()));
        }
        let chunk: ChunkWire = crate::sse::json_payload(&self.provider, data)?;
        self.on_chunk(chunk).map(Step::More)
    }

    /// A `chat.completion`: its first choice's message is the one delta of a stream that
    /// says everything at once, then the stream's end.
    fn on_whole_body(&mut self, body: &[u8]) -> Result<Vec<ProviderChunk>, ProviderError> {
        let mut whole: ChunkWire = crate::whole::json_body(&self.provider, body)?;
        let mut answered = false;
        for choice in whole.choices.iter_mut().flatten() {
            answered |= choice.index == 0;
            let Some(mut message) = choice.message.take() else {
                continue;
            };
            // A message's calls are whole and usually carry no `index` (Ollama's do): each
            // is a call of its own, not a fragment of the one before.
            for (n, call) in message.tool_calls.iter_mut().flatten().enumerate() {
                call.index
                    .get_or_insert(u32::try_from(n).unwrap_or(u32::MAX));
            }
            choice.delta = Some(message);
        }
        if whole.error.is_none() && !answered {
            return Err(crate::whole::no_answer(&self.provider, "choices"));
        }
        let mut out = self.on_chunk(whole)?;
        out.extend(self.complete());
        Ok(out)
    }

    fn on_chunk(&mut self, chunk: ChunkWire) -> Result<Vec<ProviderChunk>, ProviderError> {
        if let Some(error) = chunk.error {
            return Err(errors::stream_error(
                &self.provider,
                ErrorInfo::from_field(error),
            ));
        }
        // Groq repeats usage in x_groq; the top-level copy wins when both are there.
        if let Some(usage) = chunk.usage.or(chunk.x_groq.and_then(|x| x.usage)) {
            self.usage = Some(map_usage(&usage));
        }
        let mut out = Vec::new();
        // Only the first choice: we never ask for n > 1.
        for choice in chunk.choices.unwrap_or_default() {
            if choice.index != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                self.on_delta(delta, &mut out);
            }
            if let Some(reason) = choice.finish_reason.as_deref().filter(|r| !r.is_empty()) {
                self.finish = Some(map_finish_reason(reason));
            }
        }
        Ok(out)
    }

    fn on_delta(&mut self, delta: DeltaWire, out: &mut Vec<ProviderChunk>) {
        let reasoning = [delta.reasoning_content, delta.reasoning];
        for text in reasoning.into_iter().flatten().filter(|t| !t.is_empty()) {
            out.push(ProviderChunk::Reasoning(text));
        }
        let text = [delta.content, delta.refusal];
        for text in text.into_iter().flatten().filter(|t| !t.is_empty()) {
            out.push(ProviderChunk::Text(text));
        }
        for call in delta.tool_calls.unwrap_or_default() {
            if let Some(name) = self.tool_calls.apply(call) {
                out.push(ProviderChunk::ToolCallStarted { name });
            }
        }
    }

    fn on_end_of_body(&mut self) -> Result<Vec<ProviderChunk>, ProviderError> {
        // A finish reason without [DONE] is a complete answer from a lax server; without
        // either, the connection was cut.
        if self.finish.is_some() {
            Ok(self.complete())
        } else {
            Err(self.error(
                ProviderErrorKind::Connection,
                "stream ended early (no finish_reason and no [DONE])",
            ))
        }
    }

    /// The held-back chunks: tool calls in index order, the last usage, the finish.
    fn complete(&mut self) -> Vec<ProviderChunk> {
        let calls = self.tool_calls.finish();
        let finish = match self.finish {
            // Some servers (older vLLM, Ollama) say "stop" after calling tools.
            Some(FinishReason::Stop) | None if !calls.is_empty() => FinishReason::ToolCalls,
            Some(reason) => reason,
            None => FinishReason::Stop,
        };
        crate::sse::closing_chunks(calls, self.usage.take(), finish)
    }

    fn error_event(&self, data: &str) -> ProviderError {
        let info = errors::parse_error_body(data);
        errors::stream_error(&self.provider, info)
    }

    fn error(&self, kind: ProviderErrorKind, message: impl Into<String>) -> ProviderError {
        ProviderError::new(kind, self.provider.clone(), message)
    }
}

fn map_usage(wire: &UsageWire) -> Usage {
    let input = wire.prompt_tokens.unwrap_or(0);
    let output = wire.completion_tokens.unwrap_or(0);
    Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: wire.total_tokens.unwrap_or(input + output),
        cached_input_tokens: wire
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0),
        reasoning_tokens: wire
            .completion_tokens_details
            .as_ref()
            .and_then(|d| d.reasoning_tokens)
            .unwrap_or(0),
    }
}

fn map_finish_reason(reason: &str) -> FinishReason {
    match reason {
        "length" | "max_tokens" => FinishReason::Length,
        "tool_calls" | "function_call" | "tool_use" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        // "stop", "eos", "end_turn" and anything new: the model ended on its own.
        _ => FinishReason::Stop,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;

    fn data(json: &str) -> SseEvent {
        SseEvent {
            data: Some(json.into()),
            ..SseEvent::default()
        }
    }

    #[test]
    fn top_level_usage_wins_over_x_groq() {
        let mut decoder = Decoder::new("groq".into());
        let chunk = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],
            "x_groq":{"usage":{"prompt_tokens":1,"completion_tokens":1}},
            "usage":{"prompt_tokens":7,"completion_tokens":2}}"#;
        assert!(decoder.on_event(data(chunk)).is_ok());
        let Ok(Step::Done(chunks)) = decoder.on_event(data("[DONE]")) else {
            panic!("[DONE] ends the stream");
        };
        assert_eq!(
            chunks,
            vec![
                ProviderChunk::Usage(Usage {
                    input_tokens: 7,
                    output_tokens: 2,
                    total_tokens: 9,
                    ..Usage::default()
                }),
                ProviderChunk::Finish(FinishReason::Stop),
            ]
        );
    }

    #[test]
    fn stop_with_tool_calls_becomes_tool_calls_and_other_choices_are_ignored() {
        let mut decoder = Decoder::new("vllm".into());
        let chunk = r#"{"choices":[
            {"index":1,"delta":{"content":"other choice"},"finish_reason":"length"},
            {"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{}"}}]},"finish_reason":"stop"}]}"#;
        let Ok(Step::More(live)) = decoder.on_event(data(chunk)) else {
            panic!("a chunk is not the end");
        };
        // Only the first choice's call, announced as soon as it is named.
        assert_eq!(
            live,
            vec![ProviderChunk::ToolCallStarted { name: "f".into() }]
        );
        let Ok(end) = decoder.on_end_of_body() else {
            panic!("a finish reason was seen");
        };
        assert_eq!(
            end,
            vec![
                ProviderChunk::ToolCall(crate::ToolCall {
                    id: "call_0".into(),
                    name: "f".into(),
                    arguments: "{}".into(),
                    opaque: None,
                }),
                ProviderChunk::Finish(FinishReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn a_whole_messages_calls_are_calls_of_their_own_with_or_without_ids() {
        // No `index` on a message's calls, and here no ids either: each is a call.
        let body = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"",
            "tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}},
            {"type":"function","function":{"name":"g","arguments":"{\"x\":1}"}}]},
            "finish_reason":"stop"}]}"#;
        let chunks = Decoder::new("vllm".into()).on_whole_body(body).unwrap();
        let call = |id: &str, name: &str, arguments: &str| {
            ProviderChunk::ToolCall(crate::ToolCall {
                id: id.into(),
                name: name.into(),
                arguments: arguments.into(),
                opaque: None,
            })
        };
        assert_eq!(
            chunks,
            vec![
                ProviderChunk::ToolCallStarted { name: "f".into() },
                ProviderChunk::ToolCallStarted { name: "g".into() },
                call("call_0", "f", "{}"),
                call("call_1", "g", r#"{"x":1}"#),
                // "stop" after calls, as some servers say: a tool-calls finish.
                ProviderChunk::Finish(FinishReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn finish_reason_names() {
        assert_eq!(map_finish_reason("length"), FinishReason::Length);
        assert_eq!(map_finish_reason("tool_calls"), FinishReason::ToolCalls);
        assert_eq!(map_finish_reason("function_call"), FinishReason::ToolCalls);
        assert_eq!(
            map_finish_reason("content_filter"),
            FinishReason::ContentFilter
        );
        assert_eq!(map_finish_reason("eos"), FinishReason::Stop);
    }
}
