//! The simulator's Anthropic Messages API: streamed events and the non-stream message.

use serde_json::{Value, json};

use super::script::{Frames, Script, frame, short_id};

/// The simulated thinking signature (opaque to clients, checked by our round-trip tests).
pub const SIGNATURE: &str = "c2ltdWxhdGVkLXNpZ25hdHVyZQ==";

fn stop_reason(s: &Script) -> &'static str {
    if s.calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

fn usage(s: &Script, output: u64, on: bool) -> Value {
    if !on {
        return json!({});
    }
    json!({"input_tokens": s.prompt_tokens, "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0, "output_tokens": output})
}

fn blocks(s: &Script) -> Vec<Value> {
    let mut out = Vec::new();
    if !s.reasoning.is_empty() {
        out.push(
            json!({"type": "thinking", "thinking": s.full_reasoning(), "signature": SIGNATURE}),
        );
    }
    if !s.text.is_empty() {
        out.push(json!({"type": "text", "text": s.full_text()}));
    }
    for call in &s.calls {
        let input: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
        out.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
    }
    out
}

fn message(id: &str, model: &str, content: Vec<Value>, stop: Value, usage: Value) -> Value {
    json!({"id": id, "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage})
}

pub fn complete(s: &Script, model: &str, usage_on: bool) -> Value {
    let id = format!("msg_sim{}", short_id());
    message(
        &id,
        model,
        blocks(s),
        json!(stop_reason(s)),
        usage(s, s.output_tokens(), usage_on),
    )
}

pub fn frames(s: &Script, model: &str, usage_on: bool) -> Frames {
    let ev = |kind: &str, mut data: Value| {
        data["type"] = json!(kind);
        frame(Some(kind), &data)
    };
    let id = format!("msg_sim{}", short_id());
    let start = message(&id, model, Vec::new(), Value::Null, usage(s, 1, usage_on));
    let head = vec![
        ev("message_start", json!({"message": start})),
        ev("ping", json!({})),
    ];
    let mut body = Vec::new();
    let mut index = 0;
    let delta = |index: u32, delta: Value| {
        ev(
            "content_block_delta",
            json!({"index": index, "delta": delta}),
        )
    };
    let stop = |index: u32| ev("content_block_stop", json!({"index": index}));
    if !s.reasoning.is_empty() {
        body.push(ev(
            "content_block_start",
            json!({"index": index,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ));
        for piece in &s.reasoning {
            body.push(delta(
                index,
                json!({"type": "thinking_delta", "thinking": piece}),
            ));
        }
        body.push(delta(
            index,
            json!({"type": "signature_delta", "signature": SIGNATURE}),
        ));
        body.push(stop(index));
        index += 1;
    }
    if !s.text.is_empty() {
        body.push(ev(
            "content_block_start",
            json!({"index": index,
            "content_block": {"type": "text", "text": ""}}),
        ));
        for piece in &s.text {
            body.push(delta(index, json!({"type": "text_delta", "text": piece})));
        }
        body.push(stop(index));
        index += 1;
    }
    for call in &s.calls {
        body.push(ev(
            "content_block_start",
            json!({"index": index,
            "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}}),
        ));
        for piece in &call.fragments {
            body.push(delta(
                index,
                json!({"type": "input_json_delta", "partial_json": piece}),
            ));
        }
        body.push(stop(index));
        index += 1;
    }
    let final_usage = if usage_on {
        usage(s, s.output_tokens(), true)
    } else {
        json!({})
    };
    let tail = vec![
        ev(
            "message_delta",
            json!({"delta": {"stop_reason": stop_reason(s), "stop_sequence": null},
            "usage": final_usage}),
        ),
        ev("message_stop", json!({})),
    ];
    let error = ev(
        "error",
        json!({"error": {"type": "overloaded_error",
        "message": "[simulated] Overloaded"}}),
    );
    Frames {
        head,
        body,
        tail,
        error,
        usage: usage_on.then(|| s.stats_usage()),
    }
}
