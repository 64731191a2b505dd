//! How session events look to a Chat Completions client: chunks, usage and
//! `massgen_metadata`. Only this door knows Chat Completions' response shapes.

use massgen_core::coordination::SessionSummary;
use massgen_core::provider::{FinishReason, ToolCall, Usage};

use axum::body::Bytes;

use crate::server::doors::limit::pieces;
use crate::server::doors::metadata::Metadata;
use serde::Serialize;
use serde_json::{Value, json};

/// Tool-call arguments go out in pieces of at most this many bytes, as OpenAI streams them.
const ARGUMENT_PIECE_BYTES: usize = 64;

pub fn finish_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
    }
}

pub fn usage_json(u: &Usage) -> Value {
    // Integers under string keys: serializing them cannot fail.
    serde_json::to_value(ChatUsage::of(u)).unwrap_or(Value::Null)
}

/// `usage` in Chat Completions' names.
#[derive(Debug, Serialize)]
pub struct ChatUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    prompt_tokens_details: CachedTokens,
    completion_tokens_details: ReasoningTokens,
}

#[derive(Debug, Serialize)]
struct CachedTokens {
    cached_tokens: u64,
}

#[derive(Debug, Serialize)]
struct ReasoningTokens {
    reasoning_tokens: u64,
}

impl ChatUsage {
    fn of(u: &Usage) -> Self {
        Self {
            prompt_tokens: u.input_tokens,
            completion_tokens: u.output_tokens,
            total_tokens: u.total_tokens,
            prompt_tokens_details: CachedTokens {
                cached_tokens: u.cached_input_tokens,
            },
            completion_tokens_details: ReasoningTokens {
                reasoning_tokens: u.reasoning_tokens,
            },
        }
    }
}

/// A stream's last chunk with a choice: an empty delta, the finish reason and
/// `massgen_metadata`. Typed like the token chunks, for the same reason: no `Value` tree.
#[derive(Debug, Serialize)]
pub struct FinishChunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    system_fingerprint: Option<&'static str>,
    choices: [FinishChoice; 1],
    massgen_metadata: Metadata<'a>,
}

#[derive(Debug, Serialize)]
struct FinishChoice {
    index: u32,
    delta: EmptyDelta,
    logprobs: Option<()>,
    finish_reason: &'static str,
}

#[derive(Debug, Serialize)]
struct EmptyDelta {}

/// The usage chunk (`stream_options.include_usage`): no choices.
#[derive(Debug, Serialize)]
pub struct UsageChunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    system_fingerprint: Option<&'static str>,
    choices: [(); 0],
    usage: ChatUsage,
}

/// A `chat.completion.chunk` with one choice and no finish reason, in OpenAI's key order.
#[derive(Debug, Serialize)]
pub struct DeltaChunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    system_fingerprint: Option<&'static str>,
    choices: [DeltaChoice<'a>; 1],
}

#[derive(Debug, Serialize)]
struct DeltaChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: Option<()>,
    finish_reason: Option<&'static str>,
}

#[derive(Debug, Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
}

/// The fixed part of every chunk of one response.
#[derive(Debug, Clone)]
pub struct ChunkHeader {
    // Private: `head` is rendered from them once.
    id: String,
    created: u64,
    model: String,
    /// A text delta's frame up to the delta, rendered once per response: each token's
    /// frame then serializes only its text (a whole chunk was 4,200 instructions, most of
    /// them the same keys, id and model again).
    head: Vec<u8>,
}

/// A text delta's frame after the delta.
const DELTA_TAIL: &[u8] = br#","logprobs":null,"finish_reason":null}]}

"#;

impl ChunkHeader {
    pub fn new(id: String, created: u64, model: String) -> Self {
        let mut head = br#"data: {"id":"#.to_vec();
        // Serializing strings cannot fail; the id and model are escaped as serde escapes them.
        let _ = serde_json::to_writer(&mut head, &id);
        head.extend_from_slice(br#","object":"chat.completion.chunk","created":"#);
        head.extend_from_slice(created.to_string().as_bytes());
        head.extend_from_slice(br#","model":"#);
        let _ = serde_json::to_writer(&mut head, &model);
        head.extend_from_slice(br#","system_fingerprint":null,"choices":[{"index":0,"delta":"#);
        Self {
            id,
            created,
            model,
            head,
        }
    }

    /// `data: <chunk>\n\n` of a content delta: the bytes of `sse::data(&self.content(text))`.
    pub fn content_frame(&self, text: &str) -> Bytes {
        self.text_frame(br#"{"content":"#, text)
    }

    /// `data: <chunk>\n\n` of a reasoning delta: the bytes of
    /// `sse::data(&self.reasoning(text))`.
    pub fn reasoning_frame(&self, text: &str) -> Bytes {
        self.text_frame(br#"{"reasoning_content":"#, text)
    }

    fn text_frame(&self, key: &[u8], text: &str) -> Bytes {
        let mut frame =
            Vec::with_capacity(self.head.len() + key.len() + text.len() + 3 + DELTA_TAIL.len());
        frame.extend_from_slice(&self.head);
        frame.extend_from_slice(key);
        let _ = serde_json::to_writer(&mut frame, text);
        frame.push(b'}');
        frame.extend_from_slice(DELTA_TAIL);
        Bytes::from(frame)
    }

    fn chunk(&self, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": choices,
        })
    }

    fn delta(&self, delta: Value, finish: Option<&str>) -> Value {
        self.chunk(json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]))
    }

    /// The chunks sent many times per response are typed and borrow their text: no
    /// `Value` tree is built per token (see benches/hot_paths.rs, `sse_encode`).
    pub fn role(&self) -> DeltaChunk<'_> {
        self.typed(Delta {
            role: Some("assistant"),
            content: Some(""),
            reasoning_content: None,
        })
    }

    pub fn reasoning<'a>(&'a self, text: &'a str) -> DeltaChunk<'a> {
        self.typed(Delta {
            role: None,
            content: None,
            reasoning_content: Some(text),
        })
    }

    pub fn content<'a>(&'a self, text: &'a str) -> DeltaChunk<'a> {
        self.typed(Delta {
            role: None,
            content: Some(text),
            reasoning_content: None,
        })
    }

    fn typed<'a>(&'a self, delta: Delta<'a>) -> DeltaChunk<'a> {
        DeltaChunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            system_fingerprint: None,
            choices: [DeltaChoice {
                index: 0,
                delta,
                logprobs: None,
                finish_reason: None,
            }],
        }
    }

    /// The deltas of the final tool calls (contract: index from 0, `id`, `type` and
    /// `function.name` only on each call's first delta, then the arguments in pieces).
    pub fn tool_call_deltas(&self, calls: &[ToolCall]) -> Vec<Value> {
        let mut out = Vec::new();
        for (index, call) in calls.iter().enumerate() {
            out.push(self.delta(
                json!({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                    "function": {"name": call.name, "arguments": ""}}]}),
                None,
            ));
            for piece in pieces(&call.arguments, ARGUMENT_PIECE_BYTES) {
                out.push(self.delta(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                    None,
                ));
            }
        }
        out
    }

    pub fn finish<'a>(&'a self, reason: FinishReason, metadata: Metadata<'a>) -> FinishChunk<'a> {
        FinishChunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            system_fingerprint: None,
            choices: [FinishChoice {
                index: 0,
                delta: EmptyDelta {},
                logprobs: None,
                finish_reason: finish_reason(reason),
            }],
            massgen_metadata: metadata,
        }
    }

    pub fn usage(&self, usage: &Usage) -> UsageChunk<'_> {
        UsageChunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            system_fingerprint: None,
            choices: [],
            usage: ChatUsage::of(usage),
        }
    }

    /// The non-streaming `chat.completion` object.
    pub fn completion(&self, summary: &SessionSummary, reasoning: &str, metadata: Value) -> Value {
        let mut message = json!({
            "role": "assistant",
            "content": summary.final_answer,
            "refusal": null,
        });
        if !reasoning.is_empty() {
            message["reasoning_content"] = Value::String(reasoning.to_string());
        }
        if !summary.final_tool_calls.is_empty() {
            message["tool_calls"] = tool_calls_json(&summary.final_tool_calls);
            if summary.final_answer.is_empty() {
                message["content"] = Value::Null;
            }
        }
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": finish_reason(summary.finish_reason),
            }],
            "usage": usage_json(&summary.usage),
            "massgen_metadata": metadata,
        })
    }
}

/// `message.tool_calls` of a non-streaming response.
pub fn tool_calls_json(calls: &[ToolCall]) -> Value {
    Value::Array(
        calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_chunks_match_the_value_shape() {
        let h = ChunkHeader::new("chatcmpl-1".into(), 7, "massgen".into());
        let as_value = |c: DeltaChunk<'_>| serde_json::to_value(c).unwrap();
        assert_eq!(
            as_value(h.role()),
            h.delta(json!({"role": "assistant", "content": ""}), None)
        );
        assert_eq!(
            as_value(h.content("a \"quoted\"\n token")),
            h.delta(json!({"content": "a \"quoted\"\n token"}), None)
        );
        assert_eq!(
            as_value(h.reasoning("[agent1] answered")),
            h.delta(json!({"reasoning_content": "[agent1] answered"}), None)
        );
        // Keys come in OpenAI's order.
        let text = serde_json::to_string(&h.content("x")).unwrap();
        assert!(text.starts_with(r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","#));
    }

    /// The frames written around the pre-rendered head are byte for byte the typed chunks'.
    #[test]
    fn text_frames_are_the_typed_chunks_bytes() {
        use crate::server::sse::data;
        let texts = [
            String::new(),
            "x".into(),
            "a \"quoted\"\n token".into(),
            "é\u{0}\u{1f}\\/\u{7f}\u{2028}😀".into(),
            "long ".repeat(200),
        ];
        for (id, created, model) in [
            ("chatcmpl-1", 7, "massgen"),
            ("chatcmpl-\"odd\"\\", u64::MAX, "massgen/model:a\nb"),
        ] {
            let h = ChunkHeader::new(id.into(), created, model.into());
            for text in &texts {
                assert_eq!(h.content_frame(text), data(&h.content(text)), "{text:?}");
                assert_eq!(
                    h.reasoning_frame(text),
                    data(&h.reasoning(text)),
                    "{text:?}"
                );
            }
        }
    }

    /// The typed last chunks are the `Value`s they replaced.
    #[test]
    fn finish_and_usage_chunks_match_the_value_shape() {
        let h = ChunkHeader::new("chatcmpl-1".into(), 7, "massgen".into());
        let summary: SessionSummary = serde_json::from_value(json!({
            "winner": {"agent_id": "a1", "label": "agent1"},
            "consensus_reason": "single_agent", "final_answer": "x", "finish_reason": "stop",
            "presentation": "presented", "answers": [], "votes": [], "tally": [], "agents": [],
            "usage": {"input_tokens": 6, "output_tokens": 8, "total_tokens": 14,
                "cached_input_tokens": 2, "reasoning_tokens": 3},
            "cost_usd": 0.25, "max_cost_usd": null, "duration_ms": 12,
        }))
        .unwrap();
        let metadata = crate::server::doors::metadata::metadata_json("sess_1", &summary);
        let mut finish = h.delta(json!({}), Some("length"));
        finish["massgen_metadata"] = metadata;
        let typed = h.finish(FinishReason::Length, Metadata::new("sess_1", &summary));
        assert_eq!(serde_json::to_value(typed).unwrap(), finish);

        let mut usage = h.chunk(json!([]));
        usage["usage"] = json!({
            "prompt_tokens": 6, "completion_tokens": 8, "total_tokens": 14,
            "prompt_tokens_details": {"cached_tokens": 2},
            "completion_tokens_details": {"reasoning_tokens": 3},
        });
        assert_eq!(
            serde_json::to_value(h.usage(&summary.usage)).unwrap(),
            usage
        );
        let text = serde_json::to_string(&h.usage(&summary.usage)).unwrap();
        assert!(text.starts_with(r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","#));
    }

    #[test]
    fn tool_call_deltas_follow_the_contract() {
        let h = ChunkHeader::new("chatcmpl-x".into(), 1, "massgen".into());
        let long = format!(r#"{{"q":"{}é"}}"#, "x".repeat(100));
        let calls = [
            ToolCall {
                id: "call_a".into(),
                name: "search".into(),
                arguments: long.clone(),
                opaque: None,
            },
            ToolCall {
                id: "call_b".into(),
                name: "get_time".into(),
                arguments: "{}".into(),
                opaque: None,
            },
        ];
        let chunks = h.tool_call_deltas(&calls);
        let entries: Vec<&Value> = chunks
            .iter()
            .map(|c| &c["choices"][0]["delta"]["tool_calls"][0])
            .collect();
        assert_eq!(entries[0]["index"], 0);
        assert_eq!(entries[0]["id"], "call_a");
        assert_eq!(entries[0]["function"]["name"], "search");
        let mut args = [String::new(), String::new()];
        for e in &entries {
            let i = e["index"].as_u64().unwrap() as usize;
            args[i].push_str(e["function"]["arguments"].as_str().unwrap());
        }
        assert_eq!(args[0], long);
        assert_eq!(args[1], "{}");
        // id and name only on the first delta of each call.
        let heads: Vec<_> = entries.iter().filter(|e| e.get("id").is_some()).collect();
        assert_eq!(heads.len(), 2);
        assert!(entries.iter().filter(|e| e["index"] == 0).count() > 2);
        assert!(
            entries
                .iter()
                .filter(|e| e.get("id").is_none())
                .all(|e| e["function"].get("name").is_none())
        );
    }
}
