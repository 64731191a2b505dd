//! The conversation a Responses request continues: the stored one `previous_response_id`
//! names, then its `input`, each `item_reference` resolved among the caller's stored
//! items (an id this server gave an output item, or one the client sent an item with).
//! Reasoning goes, by value or by reference: agents never take deliberation as input. A
//! reasoning item's `encrypted_content` must be one this deployment sealed.
//!
//! What a request brings in from storage (the conversation it continues, the items it
//! references) is a few bytes of body that can stand for megabytes: it is bounded per
//! request ([`MAX_REFERENCED_BYTES`], and what the caller's part of
//! `--max-buffered-body-bytes` leaves beside the body) and charged to the request's share
//! of that budget before it is read, as a body of its size would be.

use massgen_core::provider::Message;
use serde_json::Value;

use super::request::{Entry, Item, ResponsesRequest, conversation};
use super::store::chain::{ChainError, MAX_TURNS};
use super::store::item_bytes;
use crate::app::Caller;
use crate::server::AppState;
use crate::server::bodies::ShareSlot;
use crate::server::error::ApiError;

/// Text one request may bring in from storage, all together: the conversation
/// `previous_response_id` continues and the items its `item_reference`s name.
const MAX_REFERENCED_BYTES: usize = 32 * 1024 * 1024;
/// What each referenced item costs besides its text, so a flood of empty items counts.
const PER_ITEM: usize = 64;

/// What a request continues, and what its response keeps.
pub struct Conversation {
    /// System and developer messages of the whole conversation (the stored turns', then
    /// this request's).
    pub system: Vec<String>,
    pub messages: Vec<Message>,
    /// With `store`, this request's own turn (its input's system texts and messages):
    /// what its response keeps, besides its answer and the parent's id.
    pub turn: Option<(Vec<String>, Vec<Message>)>,
    /// The request's items a later request may name by id: those sent with an id.
    pub items: Vec<(String, Item)>,
    /// The stored responses this request used (the turns it continues, the holders of
    /// the items it references): a stored answer renews them.
    pub used: Vec<String>,
}

/// The stored conversation `previous_response_id` names, followed by this request's
/// input. `body_bytes`: the request body's size (its share of the body budget already).
pub async fn conversation_so_far(
    state: &AppState,
    caller: &Caller,
    request: &ResponsesRequest,
    share: Option<&ShareSlot>,
    body_bytes: usize,
) -> Result<Conversation, ApiError> {
    for item in &request.input {
        if let Entry::Reasoning(Some(sealed)) = &item.entry
            && !state.edge.signer.accepts_reasoning(sealed)
        {
            let path = format!("input[{}].encrypted_content", item.index);
            return Err(ApiError::invalid_at(
                format!(
                    "{path} could not be verified: it was not made by this deployment (reasoning from another server, or sealed under another --reasoning-secret, cannot be sent back; leave the item or its encrypted_content out)"
                ),
                path,
                "invalid_value",
            ));
        }
    }
    // What the caller's part of the body budget can ever hold beside this body: more would
    // wait for room that never comes, so it is refused as too large instead of busy. (With
    // the defaults that part is 10 MiB: more text than any model's context window takes.)
    let allowed = MAX_REFERENCED_BYTES.min(state.edge.bodies.part().saturating_sub(body_bytes));
    let charge = |n: usize| async move {
        match share {
            Some(slot) => slot.charge(&state.edge.bodies, n).await,
            None => Ok(()),
        }
    };
    let mut used = Vec::new();
    let (mut system, mut messages, mut brought) = match &request.previous_response_id {
        None => (Vec::new(), Vec::new(), 0),
        Some(previous_id) => {
            let chain = state
                .edge
                .responses
                .chain(previous_id, caller, allowed)
                .await
                .map_err(|e| chain_error(e, previous_id, allowed))?;
            charge(chain.text_bytes).await?;
            let (system, messages) = state
                .edge
                .responses
                .turns(&chain, caller)
                .await
                .map_err(|e| chain_error(e, previous_id, allowed))?;
            used.extend(chain.ids().map(str::to_string));
            (system, messages, chain.text_bytes)
        }
    };
    let mut input = Vec::with_capacity(request.input.len());
    let mut items = Vec::new();
    for sent in &request.input {
        let item = match &sent.entry {
            Entry::Item(item) => item.clone(),
            Entry::Reasoning(_) => Item::Reasoning,
            Entry::Reference(id) => {
                let (holder, item) = state
                    .edge
                    .responses
                    .item(id, caller)
                    .await
                    .map_err(|_| ApiError::RecordsUnavailable)?
                    .ok_or_else(|| unknown_item(id, sent.index))?;
                let size = item_bytes(&item) + PER_ITEM;
                brought = brought.saturating_add(size);
                if brought > allowed {
                    return Err(too_many_references(
                        sent.index,
                        allowed,
                        &request.previous_response_id,
                    ));
                }
                charge(size).await?;
                used.push(holder);
                input.push(item);
                continue;
            }
        };
        if let Some(id) = &sent.id {
            items.push((id.clone(), item.clone()));
        }
        input.push(item);
    }
    let (turn_system, turn_messages) = conversation(input);
    let turn = request
        .store
        .then(|| (turn_system.clone(), turn_messages.clone()));
    system.extend(turn_system);
    messages.extend(turn_messages);
    Ok(Conversation {
        system,
        messages,
        turn,
        items,
        used,
    })
}

/// How much `bytes` is, for messages.
fn mib(bytes: usize) -> String {
    if bytes.is_multiple_of(1024 * 1024) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

fn chain_error(e: ChainError, previous_id: &str, allowed: usize) -> ApiError {
    let param = Some("previous_response_id");
    match e {
        ChainError::NotFound => ApiError::invalid(
            format!(
                "Previous response with id '{previous_id}' not found (responses are kept unless 'store' was false, for a limited time)"
            ),
            param,
            "previous_response_not_found",
        ),
        ChainError::Broken { missing } => ApiError::invalid(
            format!(
                "Previous response '{previous_id}' continues a conversation whose earlier response '{missing}' is no longer stored (responses are kept for a limited time after their conversation was last used); start a new conversation with the messages that matter as input"
            ),
            param,
            "previous_response_not_found",
        ),
        ChainError::TooLarge { bytes } => ApiError::invalid(
            format!(
                "previous_response_id: the conversation it continues holds more than {} of text (at least {bytes} bytes; a request may bring in at most 32 MiB from stored responses, and no more than --max-buffered-body-bytes leaves beside its body); start a new conversation with the messages that matter as input",
                mib(allowed)
            ),
            param,
            "conversation_too_large",
        ),
        ChainError::TooLong => ApiError::invalid(
            format!(
                "previous_response_id: the conversation it continues has more than {MAX_TURNS} turns; start a new conversation with the messages that matter as input"
            ),
            param,
            "conversation_too_large",
        ),
        ChainError::Unavailable => ApiError::RecordsUnavailable,
    }
}

fn too_many_references(index: usize, allowed: usize, previous: &Option<String>) -> ApiError {
    let path = format!("input[{index}]");
    let with = if previous.is_some() {
        " together with the conversation previous_response_id continues"
    } else {
        ""
    };
    ApiError::invalid_at(
        format!(
            "{path}: the items this request references hold more than {} of text{with}; continue with 'previous_response_id' or send fewer references",
            mib(allowed)
        ),
        path,
        "too_many_references",
    )
}

fn unknown_item(id: &str, index: usize) -> ApiError {
    let path = format!("input[{index}]");
    ApiError::invalid_at(
        format!(
            "{path}: item with id '{id}' not found (items of stored responses are kept unless 'store' was false, for a limited time, for the API key that created them)"
        ),
        path,
        "item_not_found",
    )
}

/// The items of a finished response's `output`, by id: what an `item_reference` to them
/// stands for.
pub fn output_items(output: &[Value]) -> Vec<(String, Item)> {
    output
        .iter()
        .filter_map(|item| {
            let id = item["id"].as_str()?.to_string();
            let text = |key: &str| item[key].as_str().unwrap_or_default().to_string();
            let item = match item["type"].as_str()? {
                "reasoning" => Item::Reasoning,
                "message" => Item::Message {
                    message: Message::assistant(super::render::answer_text(std::slice::from_ref(
                        item,
                    ))),
                },
                "function_call" => Item::Call {
                    call: massgen_core::provider::ToolCall {
                        id: text("call_id"),
                        // As the agents knew it: a namespaced tool's flat name.
                        name: match item["namespace"].as_str() {
                            Some(ns) => super::namespaces::flat_name(ns, &text("name")),
                            None => text("name"),
                        },
                        arguments: text("arguments"),
                        opaque: None,
                    },
                },
                _ => return None,
            };
            Some((id, item))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn output_items_stand_for_what_the_client_got() {
        let output = [
            json!({"id": "rs_1", "type": "reasoning", "summary": []}),
            json!({"id": "msg_1", "type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": "Hi."}]}),
            json!({"id": "fc_1", "type": "function_call", "call_id": "call_1",
                "name": "f", "arguments": "{}"}),
            json!({"type": "message"}),
        ];
        let items = output_items(&output);
        assert_eq!(items.len(), 3);
        assert_eq!(items[0], ("rs_1".into(), Item::Reasoning));
        assert!(matches!(&items[1].1, Item::Message { message } if message.content == "Hi."));
        assert!(
            matches!(&items[2].1, Item::Call { call } if call.id == "call_1" && call.name == "f")
        );
    }
}
