//! The conversation a Responses request continues: the stored one `previous_response_id`
//! names, then its `input`, each `item_reference` resolved among the caller's stored
//! items (an id this server gave an output item, or one the client sent an item with).
//! Reasoning goes, by value or by reference: agents never take deliberation as input. A
//! reasoning item's `encrypted_content` must be one this deployment sealed.

use massgen_core::provider::Message;
use serde_json::Value;

use super::request::{Entry, Item, ResponsesRequest, conversation};
use crate::app::Caller;
use crate::server::AppState;
use crate::server::error::ApiError;

/// Text the `item_reference`s of one request may bring in, all together: a reference is
/// a few bytes of body that can stand for a whole stored answer, so the body limit alone
/// does not bound what a request makes the server hold.
const MAX_REFERENCED_BYTES: usize = 32 * 1024 * 1024;

/// What a request continues, and what its response keeps.
pub struct Conversation {
    /// System and developer messages of the conversation's inputs.
    pub system: Vec<String>,
    pub messages: Vec<Message>,
    /// The request's items a later request may name by id: those sent with an id, and
    /// those it named (kept again, so a conversation's items live as long as it goes on).
    pub items: Vec<(String, Item)>,
}

/// The stored conversation `previous_response_id` names, followed by this request's input.
pub async fn conversation_so_far(
    state: &AppState,
    caller: &Caller,
    request: &ResponsesRequest,
) -> Result<Conversation, ApiError> {
    for item in &request.input {
        if let Entry::Reasoning(Some(sealed)) = &item.entry
            && !state.signer.accepts_reasoning(sealed)
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
    let (mut system, mut messages) = match &request.previous_response_id {
        None => (Vec::new(), Vec::new()),
        Some(previous_id) => {
            let previous = state
                .responses
                .get(previous_id, caller)
                .await
                .map_err(|_| ApiError::RecordsUnavailable)?
                .ok_or_else(|| {
                    ApiError::invalid(
                        format!(
                            "Previous response with id '{previous_id}' not found (responses are kept unless 'store' was false, for a limited time)"
                        ),
                        Some("previous_response_id"),
                        "previous_response_not_found",
                    )
                })?;
            (previous.system.clone(), previous.messages.clone())
        }
    };
    let mut input = Vec::with_capacity(request.input.len());
    let mut items = Vec::new();
    let mut referenced = 0usize;
    for sent in &request.input {
        let item = match &sent.entry {
            Entry::Item(item) => item.clone(),
            Entry::Reasoning(_) => Item::Reasoning,
            Entry::Reference(id) => {
                let item = state
                    .responses
                    .item(id, caller)
                    .await
                    .map_err(|_| ApiError::RecordsUnavailable)?
                    .ok_or_else(|| unknown_item(id, sent.index))?;
                referenced += size(&item);
                if referenced > MAX_REFERENCED_BYTES {
                    let path = format!("input[{}]", sent.index);
                    return Err(ApiError::invalid_at(
                        format!(
                            "{path}: the items this request references hold more than {} MiB of text together; continue with 'previous_response_id' or send fewer references",
                            MAX_REFERENCED_BYTES >> 20
                        ),
                        path,
                        "too_many_references",
                    ));
                }
                items.push((id.clone(), item.clone()));
                input.push(item);
                continue;
            }
        };
        if let Some(id) = &sent.id {
            items.push((id.clone(), item.clone()));
        }
        input.push(item);
    }
    let (more_system, more_messages) = conversation(input);
    system.extend(more_system);
    messages.extend(more_messages);
    Ok(Conversation {
        system,
        messages,
        items,
    })
}

/// About how much text an item holds.
fn size(item: &Item) -> usize {
    // Each one also costs its bookkeeping, so a flood of empty items counts too.
    let text = match item {
        Item::System { text } => text.len(),
        Item::Message { message } => {
            message.content.len()
                + message
                    .tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len())
                    .sum::<usize>()
        }
        Item::Call { call } => call.name.len() + call.arguments.len(),
        Item::Reasoning => 0,
    };
    text + 64
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
                        name: text("name"),
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
