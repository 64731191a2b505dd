//! The request scenarios every wire format's request-building snapshots cover (the same
//! ones for each provider). The root crate's black-box tests borrow them too
//! (`tests/it/support/native.rs` includes this file).

use std::sync::Arc;

use massgen_core::coordination::prompt::workflow_tools;
use massgen_providers::{Image, ImageSource, Message, ProviderRequest, Role, ToolCall, ToolChoice};
use serde_json::Value;

const SYSTEM: &str = "You are agent1, one of several agents. End your turn with one tool call.";
const CONTEXT: &str =
    "<original_message>What is 2+2?</original_message>\n<answer label=\"agent2\">4</answer>";

/// A coordination turn: system prompt, the context, both workflow tools, `auto`.
pub fn coordination_turn() -> ProviderRequest {
    ProviderRequest {
        messages: Arc::new(vec![Message::system(SYSTEM), Message::user(CONTEXT)]),
        tools: workflow_tools(true, &["agent1".to_string(), "agent2".to_string()]),
        tool_choice: Some(ToolChoice::Auto),
        parallel_tool_calls: None,
        ..ProviderRequest::default()
    }
}

/// The presentation call: system prompt and context, no tools.
pub fn presentation_turn() -> ProviderRequest {
    ProviderRequest {
        messages: Arc::new(vec![
            Message::system("You are agent2. Write the final answer."),
            Message::user("<original_message>What is 2+2?</original_message>"),
        ]),
        ..ProviderRequest::default()
    }
}

/// A retried turn: the assistant's invalid calls (one with opaque data from `opaque`) and
/// the error results, then a reminder.
pub fn history_with_tool_results(opaque: Option<Value>) -> ProviderRequest {
    let mut request = coordination_turn();
    let messages = Arc::make_mut(&mut request.messages);
    messages.push(Message {
        role: Role::Assistant,
        content: "Let me vote.".into(),
        tool_calls: vec![
            ToolCall {
                id: "call_a".into(),
                name: "vote".into(),
                arguments: r#"{"agent_id":"agent9","reason":"best"}"#.into(),
                opaque,
            },
            ToolCall {
                id: "call_b".into(),
                name: "new_answer".into(),
                arguments: "{not json".into(),
                opaque: None,
            },
        ],
        tool_call_id: None,
        images: Vec::new(),
    });
    messages.push(Message::tool_result(
        "call_a",
        "Error: agent9 is not one of agent1, agent2",
    ));
    messages.push(Message::tool_result(
        "call_b",
        "Error: arguments are not JSON",
    ));
    messages.push(Message::user("Call exactly one of vote or new_answer."));
    request
}

/// Two system messages (agent persona and instructions) around a plain question.
pub fn system_messages() -> ProviderRequest {
    ProviderRequest {
        messages: Arc::new(vec![
            Message::system("You are a careful generalist."),
            Message::system("Answer in one sentence."),
            Message::user("Why is the sky blue?"),
            Message::assistant("Rayleigh scattering."),
            Message::user("Say more."),
        ]),
        ..ProviderRequest::default()
    }
}

/// A 1×1 PNG, base64.
pub const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// Images in two user messages: inline bytes in an earlier turn, an https URL (with
/// OpenAI's `detail`) in the question.
pub fn images_turn() -> ProviderRequest {
    let mut earlier = Message::user("What is this? [image 1]");
    earlier.images = vec![Image {
        source: ImageSource::Base64 {
            media_type: "image/png".into(),
            data: PNG_BASE64.into(),
        },
        detail: None,
    }];
    let mut question = Message::user("And this one? [image 2]");
    question.images = vec![Image {
        source: ImageSource::Url {
            url: "https://example.com/cat.jpg".into(),
        },
        detail: Some("low".into()),
    }];
    ProviderRequest {
        messages: Arc::new(vec![
            Message::system("Describe images."),
            earlier,
            Message::assistant("A dot."),
            question,
        ]),
        ..ProviderRequest::default()
    }
}
