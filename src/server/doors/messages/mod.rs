//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: the Anthropic Messages door
//! (what Claude Code and the `anthropic` SDKs speak). One request is one session; the
//! deliberation streams as a `thinking` block, the answer as a `text` block or the winning
//! `tool_use` blocks; `ping` keeps quiet streams alive. Errors are Anthropic-shaped
//! ([`error`]), in the body before the stream starts and as `error` events after.

pub mod error;
pub mod render;
pub mod request;

use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use massgen_core::coordination::{AnswerBounds, SessionSummary};
use massgen_core::provider::ToolCall;
use serde_json::{Map, Value, json};

use super::conversation;
use super::door::{Door, Live as DoorLive, Prepared, SessionRef};
use super::limit::{self, AnswerLimit};
use super::metadata::metadata_json;
use super::session::{Ask, Incoming};
use super::structured;
use crate::app::Caller;
use crate::server::AppState;
use crate::server::bodies::ShareSlot;
use crate::server::error::ApiError;
use crate::server::sse;
use render::{Header, Live};
use request::MessagesRequest;

/// The Anthropic Messages door.
pub struct Messages;

/// What an answer needs from its request.
pub struct Plan {
    model: String,
    limit: AnswerLimit,
    /// Signs the thinking blocks.
    signer: std::sync::Arc<super::reasoning::Signer>,
    /// The request's prompt tokens, for `message_start`.
    input_tokens: u64,
}

impl Door for Messages {
    const NAME: &'static str = "messages";
    type Plan = Plan;
    type Live = Stream;

    async fn prepare(
        state: &AppState,
        caller: Caller,
        body: &[u8],
        _share: Option<&ShareSlot>,
    ) -> Result<Prepared<Plan>, ApiError> {
        let mut request = request::parse(body, true, &state.edge.signer)?;
        let mut input = conversation::session_input(
            request.system.clone(),
            std::mem::take(&mut request.messages),
            request.tools.clone(),
            "messages",
        )?;
        input.answer_bounds = AnswerBounds {
            max_output_tokens: limit::upstream_cap(Some(request.max_tokens)),
            stop: request.stop_sequences.clone(),
        };
        input.sampling = request.sampling;
        input.streamed = request.stream;
        input.output = request
            .output
            .clone()
            .map(|format| structured::output(format, request.stream))
            .transpose()?;
        let mut metadata = Map::new();
        if let Some(user) = &request.user_id {
            metadata.insert("user_id".into(), Value::String(user.clone()));
        }
        let ask = Ask {
            caller,
            door: Self::NAME,
            model: request.model.clone(),
            route_as: route_as(
                &request.model,
                state.settings().messages_default_panel.as_deref(),
            ),
            metadata,
            input,
            deliberation: request.deliberation,
            overrides: request.overrides.clone(),
            hold: None,
        };
        Ok(Prepared {
            ask,
            stream: request.stream,
            plan: Plan {
                limit: limit_of(&request),
                signer: std::sync::Arc::clone(&state.edge.signer),
                input_tokens: request.prompt_tokens,
                model: request.model,
            },
        })
    }

    fn live(_: &AppState, plan: Plan, session: &SessionRef) -> Stream {
        Stream {
            live: Live::new(header(&plan, session), plan.limit),
            session_id: session.id.to_string(),
        }
    }

    fn body(
        _: &AppState,
        mut plan: Plan,
        session: &SessionRef,
        reasoning: String,
        summary: Box<SessionSummary>,
    ) -> Value {
        let metadata = metadata_json(&session.id, &summary);
        let header = header(&plan, session);
        render::message(&header, &summary, &reasoning, &mut plan.limit, metadata)
    }
}

fn header(plan: &Plan, session: &SessionRef) -> Header {
    Header {
        id: format!("msg_{}", &session.id[5..]),
        model: plan.model.clone(),
        signer: std::sync::Arc::clone(&plan.signer),
        input_tokens: plan.input_tokens,
    }
}

/// Claude Code sends its own model names (`claude-…`); with `--messages-default-panel`
/// they go to that panel. `massgen` and `massgen/<name>` route as on every door.
fn route_as(model: &str, default_panel: Option<&str>) -> Option<String> {
    let ours = model == "massgen" || model.starts_with("massgen/");
    match default_panel {
        Some(panel) if !ours => Some(format!("massgen/{panel}")),
        _ => None,
    }
}

fn limit_of(request: &MessagesRequest) -> AnswerLimit {
    AnswerLimit::new(Some(request.max_tokens), request.stop_sequences.clone())
}

/// A streamed answer: Anthropic's events, `ping` in quiet spells.
pub struct Stream {
    live: Live,
    session_id: String,
}

impl DoorLive for Stream {
    fn start(&mut self) -> Vec<Bytes> {
        frames(self.live.start())
    }

    fn quiet(&mut self) -> Vec<Bytes> {
        frames(vec![render::ping()])
    }

    fn reasoning(&mut self, line: &str) -> Vec<Bytes> {
        frames(self.live.reasoning(line))
    }

    fn text(&mut self, text: &str) -> Vec<Bytes> {
        frames(self.live.text(text))
    }

    fn tool_calls(&mut self, calls: &[ToolCall]) -> Vec<Bytes> {
        frames(self.live.tool_calls(calls))
    }

    fn completed(&mut self, summary: &SessionSummary) -> Vec<Bytes> {
        let metadata = metadata_json(&self.session_id, summary);
        frames(self.live.completed(summary, metadata))
    }

    fn failed(&mut self, error: &ApiError) -> Vec<Bytes> {
        frames(vec![error_event(error)])
    }
}

fn frames(events: Vec<render::Event>) -> Vec<Bytes> {
    events
        .into_iter()
        .map(|(kind, payload)| sse::named(kind, &payload))
        .collect()
}

/// An error after the 200 went out.
fn error_event(error: &ApiError) -> render::Event {
    (
        "error",
        json!({"type": "error", "error": error::error_object(error)}),
    )
}

/// `POST /v1/messages/count_tokens`: an estimate (one token per four characters of the
/// system text, messages and tool definitions), not a model's tokenizer; the panel's
/// models do not share one. `max_tokens` is not needed here.
pub async fn count_tokens(incoming: Incoming) -> Result<Response, ApiError> {
    let request = request::parse(&incoming.body, false, &incoming.state.edge.signer)?;
    Ok(axum::Json(json!({"input_tokens": request.prompt_tokens})).into_response())
}
