//! The simulator's Gemini API: `streamGenerateContent?alt=sse` chunks and the
//! `generateContent` response. Every chunk carries the usage so far (as Gemini does), every
//! function call of an answer arrives in one chunk, and the first call carries a
//! `thoughtSignature`.

use serde_json::{Value, json};

use super::script::{Frames, Script, frame};

/// The simulated thought signature.
pub const SIGNATURE: &str = "c2ltdWxhdGVkLXRob3VnaHQ=";

fn usage(s: &Script, thoughts: u64, candidates: u64) -> Value {
    json!({"promptTokenCount": s.prompt_tokens, "candidatesTokenCount": candidates,
        "thoughtsTokenCount": thoughts,
        "totalTokenCount": s.prompt_tokens + candidates + thoughts})
}

fn chunk(parts: Vec<Value>, finish: Option<&str>, usage: Option<Value>, model: &str) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(reason) = finish {
        candidate["finishReason"] = json!(reason);
    }
    let mut out = json!({"candidates": [candidate], "modelVersion": model});
    if let Some(usage) = usage {
        out["usageMetadata"] = usage;
    }
    out
}

fn call_parts(s: &Script) -> Vec<Value> {
    s.calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let args: Value = serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({}));
            let mut part = json!({"functionCall": {"name": call.name, "args": args}});
            if i == 0 {
                part["thoughtSignature"] = json!(SIGNATURE);
            }
            part
        })
        .collect()
}

fn call_tokens(s: &Script) -> u64 {
    s.calls.iter().map(|c| c.fragments.len() as u64).sum()
}

pub fn complete(s: &Script, model: &str, usage_on: bool) -> Value {
    let mut parts = Vec::new();
    if !s.reasoning.is_empty() {
        parts.push(json!({"text": s.full_reasoning(), "thought": true}));
    }
    if !s.text.is_empty() {
        parts.push(json!({"text": s.full_text()}));
    }
    parts.extend(call_parts(s));
    let thoughts = s.reasoning_tokens();
    let usage = usage_on.then(|| usage(s, thoughts, s.output_tokens() - thoughts));
    chunk(parts, Some("STOP"), usage, model)
}

pub fn frames(s: &Script, model: &str, usage_on: bool) -> Frames {
    let mut body = Vec::new();
    let (mut thoughts, mut candidates) = (0, 0);
    let so_far = |t, c| usage_on.then(|| usage(s, t, c));
    for piece in &s.reasoning {
        thoughts += 1;
        let parts = vec![json!({"text": piece, "thought": true})];
        body.push(frame(
            None,
            &chunk(parts, None, so_far(thoughts, candidates), model),
        ));
    }
    for piece in &s.text {
        candidates += 1;
        let parts = vec![json!({"text": piece})];
        body.push(frame(
            None,
            &chunk(parts, None, so_far(thoughts, candidates), model),
        ));
    }
    if !s.calls.is_empty() {
        candidates += call_tokens(s);
        let calls = chunk(call_parts(s), None, so_far(thoughts, candidates), model);
        body.push(frame(None, &calls));
    }
    // Gemini often ends with a chunk holding an empty text part and the finish reason.
    let last = vec![json!({"text": ""})];
    let tail = vec![frame(
        None,
        &chunk(last, Some("STOP"), so_far(thoughts, candidates), model),
    )];
    let error = frame(
        None,
        &json!({"error": {"code": 500, "status": "INTERNAL",
        "message": "[simulated] The model produced an error mid-stream."}}),
    );
    Frames {
        head: Vec::new(),
        body,
        tail,
        error,
        usage: usage_on.then(|| s.stats_usage()),
    }
}
