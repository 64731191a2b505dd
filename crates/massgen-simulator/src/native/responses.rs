//! The simulator's OpenAI Responses API: streamed events and the non-stream object.

use serde_json::{Value, json};

use super::script::{Frames, Script, frame, short_id};

fn usage(s: &Script, on: bool) -> Value {
    if !on {
        return Value::Null;
    }
    let output = s.output_tokens();
    json!({
        "input_tokens": s.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": s.reasoning_tokens()},
        "total_tokens": s.prompt_tokens + output,
    })
}

/// The output items, complete.
fn items(s: &Script, ids: &Ids) -> Vec<Value> {
    let mut out = Vec::new();
    if !s.reasoning.is_empty() {
        out.push(json!({"id": ids.reasoning, "type": "reasoning",
            "summary": [{"type": "summary_text", "text": s.full_reasoning()}]}));
    }
    if !s.text.is_empty() {
        out.push(
            json!({"id": ids.message, "type": "message", "status": "completed",
            "role": "assistant", "content": [{"type": "output_text", "annotations": [],
            "text": s.full_text()}]}),
        );
    }
    for (call, id) in s.calls.iter().zip(&ids.calls) {
        out.push(
            json!({"id": id, "type": "function_call", "status": "completed",
            "arguments": call.arguments, "call_id": call.id, "name": call.name}),
        );
    }
    out
}

struct Ids {
    response: String,
    reasoning: String,
    message: String,
    calls: Vec<String>,
}

fn ids(s: &Script) -> Ids {
    Ids {
        response: format!("resp_sim{}", short_id()),
        reasoning: format!("rs_sim{}", short_id()),
        message: format!("msg_sim{}", short_id()),
        calls: s
            .calls
            .iter()
            .map(|_| format!("fc_sim{}", short_id()))
            .collect(),
    }
}

fn response(ids: &Ids, model: &str, status: &str, output: Vec<Value>, usage: Value) -> Value {
    json!({"id": ids.response, "object": "response", "created_at": 0, "status": status,
        "model": model, "output": output, "usage": usage})
}

pub fn complete(s: &Script, model: &str, usage_on: bool) -> Value {
    let ids = ids(s);
    response(&ids, model, "completed", items(s, &ids), usage(s, usage_on))
}

pub fn frames(s: &Script, model: &str, usage_on: bool) -> Frames {
    let ids = ids(s);
    let mut seq = 0u64;
    let mut ev = |kind: &str, mut data: Value| {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(seq);
        seq += 1;
        frame(Some(kind), &data)
    };
    let created = response(&ids, model, "in_progress", Vec::new(), Value::Null);
    let head = vec![
        ev("response.created", json!({"response": created.clone()})),
        ev("response.in_progress", json!({"response": created})),
    ];
    let mut body = Vec::new();
    let mut index = 0;
    if !s.reasoning.is_empty() {
        let item = json!({"id": ids.reasoning, "type": "reasoning", "summary": []});
        body.push(ev(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        ));
        body.push(ev("response.reasoning_summary_part.added", json!({"item_id": ids.reasoning,
            "output_index": index, "summary_index": 0, "part": {"type": "summary_text", "text": ""}})));
        for piece in &s.reasoning {
            body.push(ev(
                "response.reasoning_summary_text.delta",
                json!({"item_id": ids.reasoning,
                "output_index": index, "summary_index": 0, "delta": piece}),
            ));
        }
        let done = json!({"id": ids.reasoning, "type": "reasoning",
            "summary": [{"type": "summary_text", "text": s.full_reasoning()}]});
        body.push(ev(
            "response.output_item.done",
            json!({"output_index": index, "item": done}),
        ));
        index += 1;
    }
    if !s.text.is_empty() {
        let item = json!({"id": ids.message, "type": "message", "status": "in_progress",
            "role": "assistant", "content": []});
        body.push(ev(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        ));
        body.push(ev(
            "response.content_part.added",
            json!({"item_id": ids.message,
            "output_index": index, "content_index": 0,
            "part": {"type": "output_text", "annotations": [], "text": ""}}),
        ));
        for piece in &s.text {
            body.push(ev(
                "response.output_text.delta",
                json!({"item_id": ids.message,
                "output_index": index, "content_index": 0, "delta": piece}),
            ));
        }
        body.push(ev(
            "response.output_text.done",
            json!({"item_id": ids.message,
            "output_index": index, "content_index": 0, "text": s.full_text()}),
        ));
        index += 1;
    }
    for (call, id) in s.calls.iter().zip(&ids.calls) {
        let item = json!({"id": id, "type": "function_call", "status": "in_progress",
            "arguments": "", "call_id": call.id, "name": call.name});
        body.push(ev(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        ));
        for piece in &call.fragments {
            body.push(ev(
                "response.function_call_arguments.delta",
                json!({"item_id": id,
                "output_index": index, "delta": piece}),
            ));
        }
        body.push(ev(
            "response.function_call_arguments.done",
            json!({"item_id": id,
            "output_index": index, "arguments": call.arguments}),
        ));
        let done = json!({"id": id, "type": "function_call", "status": "completed",
            "arguments": call.arguments, "call_id": call.id, "name": call.name});
        body.push(ev(
            "response.output_item.done",
            json!({"output_index": index, "item": done}),
        ));
        index += 1;
    }
    let full = response(&ids, model, "completed", items(s, &ids), usage(s, usage_on));
    let tail = vec![ev("response.completed", json!({"response": full}))];
    let error = ev(
        "error",
        json!({"code": "simulated_error",
        "message": "[simulated] The model produced an error mid-stream.", "param": null}),
    );
    Frames {
        head,
        body,
        tail,
        error,
        usage: usage_on.then(|| s.stats_usage()),
    }
}
