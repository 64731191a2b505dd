//! One streaming session as a client sees it: when the first SSE byte came, when
//! `[DONE]` came, and whether the answer is the right one.

use std::time::Instant;

use futures::StreamExt;
use serde_json::{Value, json};

#[derive(Debug, Clone)]
pub struct Outcome {
    pub start: Instant,
    pub first_byte: Option<Instant>,
    pub end: Instant,
    pub done: bool,
    pub winner: Option<String>,
    /// (label, votes) from `massgen_metadata.tally`.
    pub tally: Vec<(String, u64)>,
    pub finish: Option<String>,
    pub content: String,
    pub error: Option<String>,
}

impl Outcome {
    pub fn wall_ms(&self) -> f64 {
        (self.end - self.start).as_secs_f64() * 1e3
    }

    pub fn ttfb_ms(&self) -> Option<f64> {
        self.first_byte
            .map(|t| (t - self.start).as_secs_f64() * 1e3)
    }

    /// Completed with `[DONE]`, no error chunk, `finish_reason: stop`, a winner with the
    /// most votes and the simulator's final-answer text.
    pub fn check(&self) -> Result<(), String> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if !self.done {
            return Err("no [DONE]".into());
        }
        if self.finish.as_deref() != Some("stop") {
            return Err(format!("finish_reason {:?}", self.finish));
        }
        let most = self.tally.iter().map(|t| t.1).max().unwrap_or(0);
        let winner_votes = self
            .tally
            .iter()
            .find(|t| Some(&t.0) == self.winner.as_ref())
            .map(|t| t.1);
        if most == 0 || winner_votes != Some(most) {
            return Err(format!(
                "winner {:?} with tally {:?}",
                self.winner, self.tally
            ));
        }
        if !self.content.starts_with("[simulated final answer]") {
            return Err(format!("unexpected answer: {:.80}", self.content));
        }
        Ok(())
    }
}

pub fn chat_body(question: &str, stream: bool) -> Value {
    json!({
        "model": "massgen",
        "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": question}],
    })
}

pub async fn stream_session(http: &reqwest::Client, url: &str, question: &str) -> Outcome {
    let start = Instant::now();
    let mut out = Outcome {
        start,
        first_byte: None,
        end: start,
        done: false,
        winner: None,
        tally: Vec::new(),
        finish: None,
        content: String::new(),
        error: None,
    };
    let sent = http
        .post(format!("{url}/v1/chat/completions"))
        .json(&chat_body(question, true))
        .send()
        .await;
    let response = match sent {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => {
            out.error = Some(format!("HTTP {}", r.status()));
            out.end = Instant::now();
            return out;
        }
        Err(e) => {
            out.error = Some(format!("request failed: {e}"));
            out.end = Instant::now();
            return out;
        }
    };
    let mut body = response.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(piece) = body.next().await {
        let piece = match piece {
            Ok(p) => p,
            Err(e) => {
                out.error = Some(format!("body: {e}"));
                break;
            }
        };
        out.first_byte.get_or_insert_with(Instant::now);
        buf.extend_from_slice(&piece);
        while let Some(pos) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..pos + 2).collect();
            on_event(&mut out, &event);
        }
        if out.done {
            break;
        }
    }
    out.end = Instant::now();
    out
}

fn on_event(out: &mut Outcome, event: &[u8]) {
    let text = String::from_utf8_lossy(event);
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            out.done = true;
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            out.error = Some(format!("bad chunk: {data:.80}"));
            continue;
        };
        if let Some(e) = v.get("error") {
            out.error = Some(format!("error chunk: {e}"));
        }
        if let Some(label) = v.pointer("/massgen_metadata/winner/label") {
            out.winner = label.as_str().map(String::from);
        }
        if let Some(tally) = v
            .pointer("/massgen_metadata/tally")
            .and_then(Value::as_array)
        {
            out.tally = tally
                .iter()
                .filter_map(|t| {
                    Some((
                        t.get("label")?.as_str()?.to_string(),
                        t.get("votes")?.as_u64()?,
                    ))
                })
                .collect();
        }
        let Some(choice) = v.pointer("/choices/0") else {
            continue;
        };
        if let Some(t) = choice.pointer("/delta/content").and_then(Value::as_str) {
            out.content.push_str(t);
        }
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            out.finish = Some(f.to_string());
        }
    }
}
