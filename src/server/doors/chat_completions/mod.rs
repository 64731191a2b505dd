//! `POST /v1/chat/completions`: one request, one coordination session, rendered as a
//! `chat.completion` or as Chat Completions SSE. Errors are OpenAI-shaped ([`ApiError`]'s
//! own rendering).

pub mod render;
pub mod request;
mod think;

use axum::body::Bytes;
use massgen_core::coordination::SessionSummary;
use massgen_core::provider::{FinishReason, ToolCall};
use serde_json::{Value, json};

use super::door::{Door, Live, Prepared, SessionRef};
use super::limit::{AnswerLimit, Cut};
use super::metadata::{Metadata, metadata_json};
use super::narrate::Deliberation;
use super::session::Ask;
use crate::app::Caller;
use crate::config::DeliberationFormat;
use crate::server::AppState;
use crate::server::bodies::ShareSlot;
use crate::server::error::ApiError;
use crate::server::sse::{self, data};
use render::ChunkHeader;
use think::ThinkTags;

/// The Chat Completions door.
pub struct ChatCompletions;

/// What an answer needs from its request.
pub struct Plan {
    model: String,
    include_usage: bool,
    format: DeliberationFormat,
    limit: AnswerLimit,
}

impl Door for ChatCompletions {
    const NAME: &'static str = "chat_completions";
    type Plan = Plan;
    type Live = Stream;

    async fn prepare(
        state: &AppState,
        caller: Caller,
        body: &[u8],
        _share: Option<&ShareSlot>,
    ) -> Result<Prepared<Plan>, ApiError> {
        let mut request = request::parse(body)?;
        // The server's default when the request does not say.
        let format = request
            .deliberation_format
            .unwrap_or(state.settings().deliberation_format);
        let deliberation = match format {
            DeliberationFormat::None => Deliberation::Off,
            _ => request.deliberation,
        };
        let ask = Ask {
            caller,
            door: Self::NAME,
            model: request.model.clone(),
            route_as: None,
            metadata: Default::default(),
            input: std::mem::take(&mut request.input),
            deliberation,
            overrides: request.overrides,
            hold: None,
        };
        Ok(Prepared {
            ask,
            stream: request.stream,
            plan: Plan {
                model: request.model,
                include_usage: request.include_usage,
                format,
                limit: AnswerLimit::new(request.max_tokens, request.stop),
            },
        })
    }

    fn live(_: &AppState, plan: Plan, session: &SessionRef) -> Stream {
        Stream {
            header: header(&plan, session),
            think: (plan.format == DeliberationFormat::ThinkTags).then(ThinkTags::default),
            session_id: session.id.to_string(),
            plan,
        }
    }

    fn body(
        _: &AppState,
        mut plan: Plan,
        session: &SessionRef,
        mut reasoning: String,
        mut summary: Box<SessionSummary>,
    ) -> Value {
        let header = header(&plan, session);
        let metadata = metadata_json(&session.id, &summary);
        summary.final_answer = plan.limit.apply(&summary.final_answer);
        summary.finish_reason = finish_reason(&plan.limit, summary.finish_reason);
        if plan.format == DeliberationFormat::ThinkTags {
            summary.final_answer = think::wrap(&reasoning, &summary.final_answer);
            reasoning.clear();
        }
        header.completion(&summary, &reasoning, metadata)
    }
}

fn header(plan: &Plan, session: &SessionRef) -> ChunkHeader {
    ChunkHeader::new(
        format!("chatcmpl-{}", &session.id[5..]),
        session.created,
        plan.model.clone(),
    )
}

/// `length` or `stop` when the client's bounds cut the answer.
fn finish_reason(limit: &AnswerLimit, reason: FinishReason) -> FinishReason {
    match limit.cut() {
        Some(Cut::MaxTokens) => FinishReason::Length,
        Some(Cut::Stop(_)) => FinishReason::Stop,
        None => reason,
    }
}

/// A streamed answer: `chat.completion.chunk`s, then `[DONE]`.
pub struct Stream {
    plan: Plan,
    header: ChunkHeader,
    think: Option<ThinkTags>,
    session_id: String,
}

impl Live for Stream {
    fn start(&mut self) -> Vec<Bytes> {
        vec![data(&self.header.role())]
    }

    fn quiet(&mut self) -> Vec<Bytes> {
        vec![Bytes::from_static(sse::KEEPALIVE_COMMENT)]
    }

    fn reasoning(&mut self, line: &str) -> Vec<Bytes> {
        match self.think.as_mut() {
            Some(tags) => {
                let text = tags.line(line);
                if text.is_empty() {
                    Vec::new()
                } else {
                    vec![self.header.content_frame(&text)]
                }
            }
            None => vec![self.header.reasoning_frame(line)],
        }
    }

    fn text(&mut self, text: &str) -> Vec<Bytes> {
        let mut frames = self.close_think();
        let text = self.plan.limit.push(text);
        if !text.is_empty() {
            frames.push(self.header.content_frame(&text));
        }
        frames
    }

    fn tool_calls(&mut self, calls: &[ToolCall]) -> Vec<Bytes> {
        let mut frames = self.close_think();
        frames.extend(self.header.tool_call_deltas(calls).iter().map(data));
        frames
    }

    fn completed(&mut self, summary: &SessionSummary) -> Vec<Bytes> {
        let mut frames = self.close_think();
        let header = &self.header;
        let held = self.plan.limit.finish();
        if !held.is_empty() {
            frames.push(header.content_frame(&held));
        }
        let metadata = Metadata::new(&self.session_id, summary);
        let reason = finish_reason(&self.plan.limit, summary.finish_reason);
        frames.push(data(&header.finish(reason, metadata)));
        if self.plan.include_usage {
            frames.push(data(&header.usage(&summary.usage)));
        }
        frames.push(done());
        frames
    }

    fn failed(&mut self, error: &ApiError) -> Vec<Bytes> {
        let mut frames = self.close_think();
        frames.push(error_data(error));
        frames.push(done());
        frames
    }
}

impl Stream {
    /// Whatever follows the deliberation closes its think block first.
    fn close_think(&mut self) -> Vec<Bytes> {
        self.think
            .as_mut()
            .and_then(ThinkTags::close)
            .map(|close| vec![self.header.content_frame(&close)])
            .unwrap_or_default()
    }
}

/// An error after the 200 went out: an object with `error` and no `choices`, as
/// OpenAI-compatible clients expect.
fn error_data(error: &ApiError) -> Bytes {
    let body: Value = json!({ "error": error.body() });
    data(&body)
}

fn done() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(format: DeliberationFormat) -> Stream {
        let plan = Plan {
            model: "massgen".into(),
            include_usage: false,
            format,
            limit: AnswerLimit::new(None, Vec::new()),
        };
        let session = SessionRef {
            id: "sess_1".into(),
            created: 1,
        };
        Stream {
            header: header(&plan, &session),
            think: (format == DeliberationFormat::ThinkTags).then(ThinkTags::default),
            session_id: "sess_1".into(),
            plan,
        }
    }

    /// The `content` of each frame (none for `[DONE]` or an error).
    fn contents(frames: &[Bytes]) -> Vec<String> {
        frames
            .iter()
            .filter_map(|f| std::str::from_utf8(f).ok()?.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .filter_map(|v| Some(v["choices"][0]["delta"]["content"].as_str()?.to_string()))
            .collect()
    }

    /// Whatever follows the deliberation closes its think block first, once: the answer,
    /// tool calls, the end or an error.
    #[test]
    fn each_step_after_the_deliberation_closes_the_think_block() {
        let mut s = stream(DeliberationFormat::ThinkTags);
        assert_eq!(
            contents(&s.reasoning("[agent1] answered\n")),
            ["<think>\n[agent1] answered\n"]
        );
        assert_eq!(contents(&s.text("Hi")), ["</think>", "Hi"]);
        assert_eq!(contents(&s.text(" there")), [" there"]);
        assert!(contents(&s.reasoning("late\n")).is_empty());

        let calls = [ToolCall {
            id: "call_1".into(),
            name: "f".into(),
            arguments: "{}".into(),
            opaque: None,
        }];
        let mut s = stream(DeliberationFormat::ThinkTags);
        s.reasoning("a");
        let frames = s.tool_calls(&calls);
        assert_eq!(contents(&frames), ["\n</think>"]);
        assert!(frames.len() > 1, "the calls follow");

        let mut s = stream(DeliberationFormat::ThinkTags);
        s.reasoning("a\n");
        let frames = s.failed(&ApiError::Internal);
        assert_eq!(contents(&frames), ["</think>"]);
        assert!(
            frames
                .last()
                .is_some_and(|f| f.as_ref() == b"data: [DONE]\n\n")
        );

        let mut s = stream(DeliberationFormat::Reasoning);
        let frames = s.reasoning("a\n");
        assert!(
            contents(&frames).is_empty(),
            "reasoning_content, not content"
        );
        assert_eq!(contents(&s.text("Hi")), ["Hi"]);
    }
}
