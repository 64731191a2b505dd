//! `POST /v1/responses` and `GET /v1/responses/{id}`: the OpenAI Responses API door (what
//! Codex CLI, the Agents SDK and `client.responses` speak). One request is one session; the
//! deliberation streams as a reasoning summary, the answer as a message or the winning
//! function calls. `previous_response_id` continues a stored conversation. Errors are
//! OpenAI-shaped, in the body before the stream starts and as `error` +
//! `response.failed` events after.

mod history;
mod namespaces;
pub mod render;
pub mod request;
pub mod store;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use massgen_core::coordination::SessionSummary;
use massgen_core::provider::{Message, ToolCall};

use super::conversation;
use super::door::{Door, Live as DoorLive, Prepared, SessionRef};
use super::limit::{self, AnswerLimit};
use super::metadata::metadata_json;
use super::session::Ask;
use super::structured;
use crate::app::Caller;
use crate::server::AppState;
use crate::server::bodies::ShareSlot;
use crate::server::error::{ApiError, PathId};
use crate::server::sse;
use render::{Envelope, Live};
use store::{ResponseStore, Stored};

/// The Responses door.
pub struct Responses;

/// What an answer needs from its request.
pub struct Plan {
    env: Envelope,
    keep: Option<Keep>,
    limit: AnswerLimit,
}

impl Door for Responses {
    const NAME: &'static str = "responses";
    type Plan = Plan;
    type Live = Stream;

    async fn prepare(
        state: &AppState,
        caller: Caller,
        body: &[u8],
        share: Option<&ShareSlot>,
    ) -> Result<Prepared<Plan>, ApiError> {
        let request = request::parse(body)?;
        // Before any stored text is read: the response would not be kept. Its own turn is
        // about its body's size; the answer is not known yet.
        if request.store {
            state
                .edge
                .responses
                .room(&caller, body.len())
                .await
                .map_err(|full| ApiError::StorageFull {
                    stored: full.stored,
                    limit: full.limit,
                })?;
        }
        let history::Conversation {
            system,
            messages,
            turn,
            items,
            used,
        } = history::conversation_so_far(state, &caller, &request, share, body.len()).await?;
        // `instructions` hold for this request only; they are not kept with the conversation.
        let session_system: Vec<String> = request
            .instructions
            .iter()
            .cloned()
            .chain(system.iter().cloned())
            .collect();
        let mut input =
            conversation::session_input(session_system, messages, request.tools.clone(), "input")?;
        input.answer_bounds.max_output_tokens = limit::upstream_cap(request.max_output_tokens);
        input.sampling = request.sampling;
        input.streamed = request.stream;
        input.output = request
            .output
            .clone()
            .map(|format| structured::output(format, request.stream))
            .transpose()?;
        let ask = Ask {
            caller,
            door: Self::NAME,
            model: request.model.clone(),
            route_as: None,
            metadata: request.metadata.clone(),
            input,
            deliberation: request.deliberation,
            overrides: request.overrides.clone(),
            hold: None,
        };
        let env = Envelope {
            // Set once the session has its id.
            id: String::new(),
            created_at: 0,
            model: request.model.clone(),
            instructions: request.instructions.clone(),
            max_output_tokens: request.max_output_tokens,
            text: request.text.clone(),
            previous_response_id: request.previous_response_id.clone(),
            store: request.store,
            tools: request.tools_json.clone(),
            namespaces: request.namespaces.clone(),
            tool_choice: request.tool_choice_json.clone(),
            parallel_tool_calls: request.tools.parallel.unwrap_or(true),
            metadata: request.metadata.clone(),
            seal: request
                .encrypted_reasoning
                .then(|| state.edge.signer.clone()),
        };
        // A stored response keeps its own turn and its parent's id, not the conversation.
        let keep = turn.map(|(system, messages)| Keep {
            store: state.edge.responses.clone(),
            owner: caller,
            parent: request.previous_response_id.clone(),
            system,
            messages,
            items,
            used,
        });
        Ok(Prepared {
            ask,
            stream: request.stream,
            plan: Plan {
                env,
                keep,
                limit: AnswerLimit::new(request.max_output_tokens, Vec::new()),
            },
        })
    }

    fn live(state: &AppState, plan: Plan, session: &SessionRef) -> Stream {
        let mut finish = finish(state, plan, session);
        let limit = std::mem::take(&mut finish.limit);
        Stream {
            live: Live::new(finish.env.clone(), limit),
            finish,
        }
    }

    fn body(
        state: &AppState,
        plan: Plan,
        session: &SessionRef,
        reasoning: String,
        summary: Box<SessionSummary>,
    ) -> serde_json::Value {
        let mut finish = finish(state, plan, session);
        let output = render::output(&finish.env, &summary, &reasoning, &mut finish.limit);
        let metadata = metadata_json(&finish.session_id, &summary);
        let object = finish.env.finished(
            &summary,
            output,
            finish.limit.cut(),
            metadata,
            finish.app.sessions().now_secs(),
        );
        finish.store(&object, &summary.final_tool_calls);
        object
    }
}

/// The plan, given its session.
fn finish(state: &AppState, plan: Plan, session: &SessionRef) -> Finish {
    let Plan {
        mut env,
        keep,
        limit,
    } = plan;
    env.id = format!("resp_{}", &session.id[5..]);
    env.created_at = session.created;
    Finish {
        env,
        keep,
        app: Arc::clone(&state.app),
        session_id: session.id.to_string(),
        limit,
    }
}

/// What a stored response keeps besides its object.
struct Keep {
    store: Arc<ResponseStore>,
    owner: Caller,
    /// `previous_response_id`.
    parent: Option<String>,
    /// The request's own turn.
    system: Vec<String>,
    messages: Vec<Message>,
    /// The request's items that can be named by id later.
    items: Vec<(String, request::Item)>,
    /// The stored responses the request used: renewed when this one is stored.
    used: Vec<String>,
}

/// Everything the end of the response needs.
struct Finish {
    env: Envelope,
    keep: Option<Keep>,
    app: Arc<crate::app::App>,
    session_id: String,
    limit: AnswerLimit,
}

impl Finish {
    /// Stores the finished response (unless `store: false`): its object, its turn with
    /// the answer the client got, and its items by id.
    fn store(&mut self, object: &serde_json::Value, calls: &[ToolCall]) {
        let Some(Keep {
            store,
            owner,
            parent,
            system,
            mut messages,
            mut items,
            used,
        }) = self.keep.take()
        else {
            return;
        };
        let empty = Vec::new();
        let output = object["output"].as_array().unwrap_or(&empty);
        let mut answer = Message::assistant(render::answer_text(output));
        answer.tool_calls = calls.to_vec();
        messages.push(answer);
        items.extend(history::output_items(output));
        store.put(
            self.env.id.clone(),
            Stored {
                owner,
                parent,
                system,
                messages,
                response: object.to_string(),
                items,
            },
            used,
        );
    }
}

/// A streamed answer: the Responses API's events.
pub struct Stream {
    live: Live,
    finish: Finish,
}

impl DoorLive for Stream {
    fn start(&mut self) -> Vec<Bytes> {
        frames(self.live.start())
    }

    fn quiet(&mut self) -> Vec<Bytes> {
        frames(self.live.keepalive())
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
        let metadata = metadata_json(&self.finish.session_id, summary);
        let now = self.finish.app.sessions().now_secs();
        let (events, object) = self.live.completed(summary, metadata, now);
        self.finish.store(&object, &summary.final_tool_calls);
        frames(events)
    }

    fn failed(&mut self, error: &ApiError) -> Vec<Bytes> {
        frames(self.live.failed(error))
    }
}

fn frames(events: Vec<render::Event>) -> Vec<Bytes> {
    events
        .into_iter()
        .map(|(kind, payload)| sse::named(kind, &payload))
        .collect()
}

/// `GET /v1/responses/{id}`: a stored response of the caller's.
pub async fn get(
    State(edge): State<Arc<crate::server::Edge>>,
    Extension(caller): Extension<Caller>,
    PathId(id): PathId,
) -> Result<Response, ApiError> {
    let body = edge
        .responses
        .body(&id, &caller)
        .await
        .map_err(|_| ApiError::RecordsUnavailable)?
        .ok_or(ApiError::ResponseNotFound { id })?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}
