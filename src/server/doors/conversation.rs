//! A conversation in neutral messages becomes the session input every door hands to the
//! engine: the system texts joined, the history, the last user message as the question,
//! and what followed it (the assistant's tool calls and the client's results) apart.

use massgen_core::coordination::{ClientTools, SessionInput};
use massgen_core::provider::{Message, Role};

use super::{images, reasoning};
use crate::server::error::ApiError;

/// `param` names the request field the messages came from (`messages`, `input`), for
/// errors in the client's own terms.
pub fn session_input(
    system: Vec<String>,
    mut messages: Vec<Message>,
    tools: ClientTools,
    param: &'static str,
) -> Result<SessionInput, ApiError> {
    // Agents never take the deliberation as input, in whatever form it came back.
    reasoning::strip_from_history(&mut messages);
    images::check_count(&messages).map_err(|r| r.at(param, &format!("'{param}'")))?;
    let Some(last_user) = messages.iter().rposition(|m| m.role == Role::User) else {
        return Err(ApiError::invalid(
            format!("'{param}' must contain a user message"),
            Some(param),
            "missing_user_message",
        ));
    };
    // What follows the question (an assistant's tool calls and the client's results) is
    // shown apart from the earlier conversation; anything else stays in the history.
    let after: Vec<Message> = messages.split_off(last_user + 1);
    let mut after_question = 0;
    let followup = if after
        .iter()
        .any(|m| m.role == Role::Tool || !m.tool_calls.is_empty())
    {
        after
    } else {
        after_question = after.len();
        messages.extend(after);
        Vec::new()
    };
    let question = messages.remove(last_user);
    let (question, question_images) = (question.content, question.images);
    if question.trim().is_empty() && question_images.is_empty() {
        return Err(ApiError::invalid(
            "The last user message is empty",
            Some(param),
            "empty_message",
        ));
    }
    let extra_system = (!system.is_empty()).then(|| system.join("\n\n"));
    Ok(SessionInput {
        history: messages,
        question,
        question_images,
        extra_system,
        followup,
        tools,
        after_question,
        ..SessionInput::default()
    })
}
