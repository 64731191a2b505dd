//! Reading a recorded request: its texts, the tools offered, the labels a vote may name.

use crate::provider::{ProviderRequest, Role};

/// The first user message's text (the prompt of a turn or the presentation).
pub fn user_text(req: &ProviderRequest) -> String {
    req.messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(|m| m.content.clone())
        .unwrap_or_default()
}

pub fn system_text(req: &ProviderRequest) -> String {
    req.messages
        .iter()
        .find(|m| m.role == Role::System)
        .map(|m| m.content.clone())
        .unwrap_or_default()
}

pub fn tool_names(req: &ProviderRequest) -> Vec<String> {
    req.tools.iter().map(|t| t.name.clone()).collect()
}

/// The labels the `vote` tool offers (empty in a turn that cannot vote).
pub fn vote_enum(req: &ProviderRequest) -> Vec<String> {
    req.tools
        .iter()
        .find(|t| t.name == "vote")
        .and_then(|t| {
            t.parameters["properties"]["agent_id"]["enum"]
                .as_array()
                .cloned()
        })
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// Whether the request shows `label`'s answer (`agent2`).
pub fn shows(req: &ProviderRequest, label: &str) -> bool {
    user_text(req).contains(&format!("<answer label=\"{label}\">"))
}

/// A call offered no tools: the presentation (in these scripts' panels).
pub fn is_presentation(req: &ProviderRequest) -> bool {
    req.tools.is_empty()
}
