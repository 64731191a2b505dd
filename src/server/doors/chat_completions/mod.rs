//! `POST /v1/chat/completions`: one request, one coordination session, rendered as a
//! `chat.completion` or as Chat Completions SSE. Errors are OpenAI-shaped ([`ApiError`]'s
//! own rendering).

pub mod render;
pub mod request;
mod think;

use axum::body::Bytes;
use massgen_core::coordination::SessionSummary;
use massgen_core::provider::FinishReason;
use serde_json::{Value, json};

use super::door::{Door, Live, Prepared, SessionRef};
use super::limit::{AnswerLimit, Cut};
use super::metadata::metadata_json;
use super::narrate::Deliberation;
use super::session::{Ask, Step};
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
    ChunkHeader {
        id: format!("chatcmpl-{}", &session.id[5..]),
        created: session.created,
        model: plan.model.clone(),
    }
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

    fn step(&mut self, step: Step) -> Vec<Bytes> {
        let header = &self.header;
        let mut frames = Vec::new();
        // Whatever follows the deliberation closes its think block first.
        if !matches!(step, Step::Reasoning(_))
            && let Some(close) = self.think.as_mut().and_then(ThinkTags::close)
        {
            frames.push(data(&header.content(&close)));
        }
        match step {
            Step::Reasoning(line) => match self.think.as_mut() {
                Some(tags) => {
                    let text = tags.line(&line);
                    if !text.is_empty() {
                        frames.push(data(&header.content(&text)));
                    }
                }
                None => frames.push(data(&header.reasoning(&line))),
            },
            Step::Text(text) => {
                let text = self.plan.limit.push(&text);
                if !text.is_empty() {
                    frames.push(data(&header.content(&text)));
                }
            }
            Step::ToolCalls(calls) => {
                frames.extend(header.tool_call_deltas(&calls).iter().map(data));
            }
            Step::Completed(summary) => {
                let held = self.plan.limit.finish();
                if !held.is_empty() {
                    frames.push(data(&header.content(&held)));
                }
                let metadata = metadata_json(&self.session_id, &summary);
                let reason = finish_reason(&self.plan.limit, summary.finish_reason);
                frames.push(data(&header.finish(reason, metadata)));
                if self.plan.include_usage {
                    frames.push(data(&header.usage(&summary.usage)));
                }
                frames.push(done());
            }
            Step::Failed(error) => {
                frames.push(error_data(&ApiError::Session(error)));
                frames.push(done());
            }
            Step::Lost => {
                frames.push(error_data(&ApiError::Internal));
                frames.push(done());
            }
        }
        frames
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
