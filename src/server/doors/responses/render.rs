//! How a session looks to a Responses API client: the `response` object (a `reasoning`
//! item carrying the deliberation, then a `message` with `output_text` or the winning
//! `function_call`s), and the streamed events that build it, in the order OpenAI's SDK
//! accumulator and Codex need (see the recorded streams in the shared fixtures).

use std::sync::Arc;

use massgen_core::coordination::SessionSummary;
use massgen_core::provider::{ToolCall, Usage};
use serde_json::{Map, Value, json};

use super::namespaces::{Namespaces, name_fields};
use crate::server::doors::limit::{AnswerLimit, Cut, pieces};
use crate::server::doors::reasoning::Signer;
use crate::server::error::ApiError;

/// Function-call arguments go out in pieces of at most this many bytes.
const ARGUMENT_PIECE_BYTES: usize = 64;

/// The parts of the response object fixed by the request.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// `resp_<session hex>`; item ids share the hex.
    pub id: String,
    pub created_at: u64,
    pub model: String,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u64>,
    /// The request's `text` (its format), echoed.
    pub text: Value,
    pub previous_response_id: Option<String>,
    pub store: bool,
    pub tools: Vec<Value>,
    /// The request's namespaced tools: their calls name the tool and its namespace.
    pub namespaces: Arc<Namespaces>,
    pub tool_choice: Value,
    pub parallel_tool_calls: bool,
    pub metadata: Map<String, Value>,
    /// With `include: ["reasoning.encrypted_content"]`: what seals each reasoning item's
    /// `encrypted_content` (the item has none otherwise).
    pub seal: Option<Arc<Signer>>,
}

impl Envelope {
    fn hex(&self) -> &str {
        self.id.strip_prefix("resp_").unwrap_or(&self.id)
    }

    /// The response object with `status` and `output`; the caller adds what the status
    /// needs (`completed_at`, `usage`, `error`, …).
    pub fn object(&self, status: &str, output: Vec<Value>) -> Value {
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": false,
            "completed_at": null,
            "error": null,
            "incomplete_details": null,
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "max_tool_calls": null,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": self.parallel_tool_calls,
            "previous_response_id": self.previous_response_id,
            "reasoning": {"effort": null, "summary": null},
            "store": self.store,
            "temperature": null,
            "text": self.text,
            "tool_choice": self.tool_choice,
            "tools": self.tools,
            "top_p": null,
            "truncation": "disabled",
            "usage": null,
            "user": null,
            "metadata": self.metadata,
        })
    }

    /// The object of a finished session: `completed`, or `incomplete` when the answer was
    /// cut at `max_output_tokens`.
    pub fn finished(
        &self,
        summary: &SessionSummary,
        output: Vec<Value>,
        cut: Option<&Cut>,
        metadata: Value,
        now: u64,
    ) -> Value {
        let truncated = matches!(cut, Some(Cut::MaxTokens));
        let mut object = self.object(if truncated { "incomplete" } else { "completed" }, output);
        object["completed_at"] = json!(now);
        object["usage"] = usage_json(&summary.usage);
        if truncated {
            object["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        object["massgen_metadata"] = metadata;
        object
    }

    pub fn failed(&self, error: &ApiError, output: Vec<Value>) -> Value {
        let mut object = self.object("failed", output);
        object["error"] = json!({"code": error.code(), "message": error.message()});
        error.add_upstream(&mut object["error"]);
        object
    }

    /// The id of the `n`th item of its kind: unique across responses (the session's hex)
    /// and within one, and the same whether streamed or not, so an `item_reference` to it
    /// finds it.
    fn item_id(&self, prefix: &str, n: usize) -> String {
        match n {
            0 => format!("{prefix}_{}", self.hex()),
            n => format!("{prefix}_{}_{n}", self.hex()),
        }
    }

    /// A reasoning item: its summary, and its `encrypted_content` when asked for (a seal
    /// of its id, which the server verifies when the item comes back).
    fn reasoning_item(&self, id: &str, text: Option<&str>) -> Value {
        let summary: Vec<Value> = text
            .map(|t| json!({"type": "summary_text", "text": t}))
            .into_iter()
            .collect();
        let mut item = json!({"id": id, "type": "reasoning", "summary": summary});
        if let Some(signer) = &self.seal {
            item["encrypted_content"] = signer.seal_reasoning(id).into();
        }
        item
    }
}

pub fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_input_tokens},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.total_tokens,
    })
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text})
}

fn message_item(id: &str, status: &str, text: Option<&str>) -> Value {
    let content: Vec<Value> = text.map(output_text).into_iter().collect();
    json!({"id": id, "type": "message", "status": status, "role": "assistant", "content": content})
}

/// A `function_call` item; a namespaced tool's has its own `name` and its `namespace`.
fn call_item(env: &Envelope, id: &str, status: &str, call: &ToolCall, arguments: &str) -> Value {
    let mut item = json!({"id": id, "type": "function_call", "status": status,
        "arguments": arguments, "call_id": call.id});
    if let Some(object) = item.as_object_mut() {
        name_fields(object, &call.name, &env.namespaces);
    }
    item
}

/// The `output` of a non-streamed response: the deliberation, then the answer (cut by
/// `limit`) or the winning calls.
pub fn output(
    env: &Envelope,
    summary: &SessionSummary,
    reasoning: &str,
    limit: &mut AnswerLimit,
) -> Vec<Value> {
    let mut out = Vec::new();
    if !reasoning.is_empty() {
        out.push(env.reasoning_item(&env.item_id("rs", 0), Some(reasoning)));
    }
    let answer = limit.apply(&summary.final_answer);
    if !answer.is_empty() || summary.final_tool_calls.is_empty() {
        out.push(message_item(
            &env.item_id("msg", 0),
            "completed",
            Some(&answer),
        ));
    }
    for (n, call) in summary.final_tool_calls.iter().enumerate() {
        out.push(call_item(
            env,
            &env.item_id("fc", n),
            "completed",
            call,
            &call.arguments,
        ));
    }
    out
}

/// The text the client got, from a finished response's `output` (for the stored
/// conversation).
pub fn answer_text(output: &[Value]) -> String {
    output
        .iter()
        .filter(|item| item["type"] == "message")
        .flat_map(|item| item["content"].as_array().into_iter().flatten())
        .filter_map(|part| part["text"].as_str())
        .collect()
}

/// One event: its type and its payload (with `type` and `sequence_number`).
pub type Event = (&'static str, Value);

/// An item being streamed.
struct Open {
    id: String,
    index: usize,
    text: String,
}

/// Builds the event stream of one response, step by step.
pub struct Live {
    env: Envelope,
    seq: u64,
    /// Finished items, in output order.
    done: Vec<Value>,
    reasoning: Option<Open>,
    reasoning_items: usize,
    message: Option<Open>,
    messages: usize,
    /// Deliberation lines that came after the answer began: a trailing reasoning item.
    late: String,
    answer_began: bool,
    calls: usize,
    limit: AnswerLimit,
}

impl Live {
    pub fn new(env: Envelope, limit: AnswerLimit) -> Self {
        Self {
            env,
            seq: 0,
            done: Vec::new(),
            reasoning: None,
            reasoning_items: 0,
            message: None,
            messages: 0,
            late: String::new(),
            answer_began: false,
            calls: 0,
            limit,
        }
    }

    fn event(&mut self, kind: &'static str, fields: Value) -> Event {
        let mut payload = json!({"type": kind});
        if let (Value::Object(p), Value::Object(f)) = (&mut payload, fields) {
            p.extend(f);
            p.insert("sequence_number".into(), self.seq.into());
        }
        self.seq += 1;
        (kind, payload)
    }

    fn next_index(&self) -> usize {
        self.done.len()
            + usize::from(self.reasoning.is_some())
            + usize::from(self.message.is_some())
    }

    /// `response.created` and `response.in_progress`.
    pub fn start(&mut self) -> Vec<Event> {
        let object = self.env.object("in_progress", Vec::new());
        vec![
            self.event("response.created", json!({"response": object.clone()})),
            self.event("response.in_progress", json!({"response": object})),
        ]
    }

    /// A real event while the deliberation is quiet: Codex's idle timer ignores SSE
    /// comments, and every client knows `response.in_progress`.
    pub fn keepalive(&mut self) -> Vec<Event> {
        let object = self.env.object("in_progress", Vec::new());
        vec![self.event("response.in_progress", json!({"response": object}))]
    }

    pub fn reasoning(&mut self, line: &str) -> Vec<Event> {
        if self.answer_began {
            self.late.push_str(line);
            return Vec::new();
        }
        let mut out = Vec::new();
        if self.reasoning.is_none() {
            out.extend(self.open_reasoning());
        }
        let Some(open) = self.reasoning.as_mut() else {
            return out;
        };
        open.text.push_str(line);
        let (id, index) = (open.id.clone(), open.index);
        out.push(self.event(
            "response.reasoning_summary_text.delta",
            json!({"item_id": id, "output_index": index, "summary_index": 0, "delta": line}),
        ));
        out
    }

    fn open_reasoning(&mut self) -> Vec<Event> {
        let id = self.env.item_id("rs", self.reasoning_items);
        self.reasoning_items += 1;
        let index = self.next_index();
        let mut out = vec![self.event(
            "response.output_item.added",
            json!({"item": self.env.reasoning_item(&id, None), "output_index": index}),
        )];
        out.push(self.event(
            "response.reasoning_summary_part.added",
            json!({"item_id": id, "output_index": index, "summary_index": 0,
                "part": {"type": "summary_text", "text": ""}}),
        ));
        self.reasoning = Some(Open {
            id,
            index,
            text: String::new(),
        });
        out
    }

    fn close_reasoning(&mut self) -> Vec<Event> {
        let Some(Open { id, index, text }) = self.reasoning.take() else {
            return Vec::new();
        };
        let part = json!({"type": "summary_text", "text": text});
        let item = self.env.reasoning_item(&id, Some(&text));
        let out = vec![
            self.event(
                "response.reasoning_summary_text.done",
                json!({"item_id": id, "output_index": index, "summary_index": 0, "text": text}),
            ),
            self.event(
                "response.reasoning_summary_part.done",
                json!({"item_id": id, "output_index": index, "summary_index": 0, "part": part}),
            ),
            self.event(
                "response.output_item.done",
                json!({"item": item.clone(), "output_index": index}),
            ),
        ];
        self.done.push(item);
        out
    }

    pub fn text(&mut self, piece: &str) -> Vec<Event> {
        let mut out = self.begin_answer();
        let piece = self.limit.push(piece);
        out.extend(self.send_text(&piece));
        out
    }

    fn begin_answer(&mut self) -> Vec<Event> {
        self.answer_began = true;
        self.close_reasoning()
    }

    fn send_text(&mut self, piece: &str) -> Vec<Event> {
        if piece.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        if self.message.is_none() {
            out.extend(self.open_message());
        }
        let Some(open) = self.message.as_mut() else {
            return out;
        };
        open.text.push_str(piece);
        let (id, index) = (open.id.clone(), open.index);
        out.push(self.event(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": piece,
                "logprobs": []}),
        ));
        out
    }

    fn open_message(&mut self) -> Vec<Event> {
        let id = self.env.item_id("msg", self.messages);
        self.messages += 1;
        let index = self.next_index();
        let out = vec![
            self.event(
                "response.output_item.added",
                json!({"item": message_item(&id, "in_progress", None), "output_index": index}),
            ),
            self.event(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                    "part": output_text("")}),
            ),
        ];
        self.message = Some(Open {
            id,
            index,
            text: String::new(),
        });
        out
    }

    fn close_message(&mut self) -> Vec<Event> {
        let held = self.limit.finish();
        let mut out = self.send_text(&held);
        let Some(Open { id, index, text }) = self.message.take() else {
            return out;
        };
        let item = message_item(&id, "completed", Some(&text));
        out.push(self.event(
            "response.output_text.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "text": text,
                "logprobs": []}),
        ));
        out.push(self.event(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": 0,
                "part": output_text(&text)}),
        ));
        out.push(self.event(
            "response.output_item.done",
            json!({"item": item.clone(), "output_index": index}),
        ));
        self.done.push(item);
        out
    }

    pub fn tool_calls(&mut self, calls: &[ToolCall]) -> Vec<Event> {
        let mut out = self.begin_answer();
        out.extend(self.close_message());
        for call in calls {
            let id = self.env.item_id("fc", self.calls);
            self.calls += 1;
            let index = self.next_index();
            out.push(self.event(
                "response.output_item.added",
                json!({"item": call_item(&self.env, &id, "in_progress", call, ""), "output_index": index}),
            ));
            for piece in pieces(&call.arguments, ARGUMENT_PIECE_BYTES) {
                out.push(self.event(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": index, "delta": piece}),
                ));
            }
            let mut done = json!({"item_id": id, "output_index": index,
                "arguments": call.arguments});
            if let Some(object) = done.as_object_mut() {
                name_fields(object, &call.name, &self.env.namespaces);
            }
            out.push(self.event("response.function_call_arguments.done", done));
            let item = call_item(&self.env, &id, "completed", call, &call.arguments);
            out.push(self.event(
                "response.output_item.done",
                json!({"item": item.clone(), "output_index": index}),
            ));
            self.done.push(item);
        }
        out
    }

    /// Closes what is open, adds the late deliberation, and ends with
    /// `response.completed` (or `response.incomplete` when the answer was cut at
    /// `max_output_tokens`). Returns the events and the final object.
    pub fn completed(
        &mut self,
        summary: &SessionSummary,
        metadata: Value,
        now: u64,
    ) -> (Vec<Event>, Value) {
        let mut out = self.begin_answer();
        out.extend(self.close_message());
        if self.calls == 0 && !self.done.iter().any(|i| i["type"] == "message") {
            // No text arrived (an empty answer): the client still gets a message item.
            out.extend(self.open_message());
            out.extend(self.close_message());
        }
        if !self.late.is_empty() {
            let late = std::mem::take(&mut self.late);
            self.answer_began = false;
            out.extend(self.reasoning(&late));
            out.extend(self.close_reasoning());
        }
        let object = self
            .env
            .finished(summary, self.done.clone(), self.limit.cut(), metadata, now);
        let kind = if object["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        out.push(self.event(kind, json!({"response": object.clone()})));
        (out, object)
    }

    /// Closes what is open, then an `error` event (nested shape, as OpenAI sends it) and
    /// `response.failed`.
    pub fn failed(&mut self, error: &ApiError) -> Vec<Event> {
        let mut out = self.close_reasoning();
        out.extend(self.close_message());
        let object = self.env.failed(error, self.done.clone());
        let mut body = json!({"type": error.error_type(), "code": error.code(),
            "message": error.message(), "param": error.param()});
        error.add_upstream(&mut body);
        out.extend([
            self.event("error", json!({ "error": body })),
            self.event("response.failed", json!({"response": object})),
        ]);
        out
    }
}
