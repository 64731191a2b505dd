//! How session events look to a Chat Completions client: chunks, usage and
//! `massgen_metadata`. Only this door knows Chat Completions' response shapes.

use massgen_core::coordination::SessionSummary;
use massgen_core::provider::{FinishReason, ToolCall, Usage};

use crate::server::doors::limit::pieces;
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
    json!({
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.total_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_input_tokens},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
    })
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
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl ChunkHeader {
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

    pub fn finish(&self, reason: FinishReason, metadata: Value) -> Value {
        let mut chunk = self.delta(json!({}), Some(finish_reason(reason)));
        if let Value::Object(o) = &mut chunk {
            o.insert("massgen_metadata".to_string(), metadata);
        }
        chunk
    }

    pub fn usage(&self, usage: &Usage) -> Value {
        let mut chunk = self.chunk(json!([]));
        if let Value::Object(o) = &mut chunk {
            o.insert("usage".to_string(), usage_json(usage));
        }
        chunk
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
        let h = ChunkHeader {
            id: "chatcmpl-1".into(),
            created: 7,
            model: "massgen".into(),
        };
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

    #[test]
    fn tool_call_deltas_follow_the_contract() {
        let h = ChunkHeader {
            id: "chatcmpl-x".into(),
            created: 1,
            model: "massgen".into(),
        };
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
