//! The checks every door applies to the client's function tools, whatever their wire
//! shape: a usable name that is not one of the workflow tools every panel offers, a JSON
//! Schema object for the arguments, no name twice, and a `tool_choice` that fits the tools.
//! Any other name is the client's, `mcp__…` included: an agent's own tool of the same name
//! is offered to the agents under an alias (`massgen_core::coordination::own_names`).

use massgen_core::coordination::ClientTools;
use massgen_core::provider::{ToolChoice, ToolSpec};
use massgen_core::tool_names::{self, WORKFLOW_TOOLS};
use serde_json::Value;

use crate::server::error::ApiError;

/// Where a tool sits in the request, for messages in the client's own terms: `at` is the
/// object holding the name (`tools[0].function`), `schema_field` the key of its schema
/// (`parameters`, `input_schema`).
pub struct ToolAt<'a> {
    pub at: &'a str,
    pub schema_field: &'a str,
}

/// One function tool; a name that is a workflow tool's would make the agents' turns
/// ambiguous.
pub fn tool_spec(
    name: &str,
    description: Option<&str>,
    schema: Option<&Value>,
    at: &ToolAt<'_>,
) -> Result<ToolSpec, ApiError> {
    if tool_names::is_reserved(name) {
        return Err(tools_error(
            format!(
                "The client tool '{name}' collides with the panel's own workflow tool '{name}' (every panel offers {} to its agents); rename it",
                WORKFLOW_TOOLS.join(" and ")
            ),
            "tool_name_collision",
        ));
    }
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid_name {
        return Err(tools_error(
            format!("{}.name must match ^[a-zA-Z0-9_-]{{1,64}}$", at.at),
            "invalid_value",
        ));
    }
    let parameters = match schema {
        None | Some(Value::Null) => serde_json::json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(tools_error(
                format!("{}.{} must be a JSON Schema object", at.at, at.schema_field),
                "invalid_type",
            ));
        }
    };
    Ok(ToolSpec {
        name: name.to_string(),
        description: description.unwrap_or_default().to_string(),
        parameters,
    })
}

/// Client tools one request may define (OpenAI allows 128): each is checked against
/// the others and copied into every agent's calls.
pub const MAX_TOOLS: usize = 256;

/// A 400 when a request defines more than [`MAX_TOOLS`] tools.
pub fn check_count(count: usize) -> Result<(), ApiError> {
    if count > MAX_TOOLS {
        return Err(tools_error(
            format!("'tools' has {count} entries; at most {MAX_TOOLS} are accepted"),
            "invalid_value",
        ));
    }
    Ok(())
}

/// Adds `spec` (the `index`th tool) unless its name is already taken.
pub fn push_unique(
    tools: &mut Vec<ToolSpec>,
    index: usize,
    spec: ToolSpec,
) -> Result<(), ApiError> {
    if tools.iter().any(|t| t.name == spec.name) {
        return Err(tools_error(
            format!("tools[{index}]: the name '{}' is used twice", spec.name),
            "invalid_value",
        ));
    }
    tools.push(spec);
    Ok(())
}

/// The tools with the choice, checked against each other. `required` is the door's word
/// for "must call a tool" (`"required"`, `"any"`).
pub fn client_tools(
    tools: Vec<ToolSpec>,
    choice: Option<ToolChoice>,
    parallel: Option<bool>,
    required: &str,
) -> Result<ClientTools, ApiError> {
    if let Some(ToolChoice::Function(name)) = &choice
        && !tools.iter().any(|t| &t.name == name)
    {
        return Err(choice_error(format!(
            "'tool_choice' names the function '{name}', which is not in 'tools'"
        )));
    }
    if tools.is_empty() && matches!(choice, Some(ToolChoice::Required)) {
        return Err(choice_error(format!(
            "'tool_choice' \"{required}\" needs at least one tool in 'tools'"
        )));
    }
    Ok(ClientTools {
        tools: tools.into_iter().map(std::sync::Arc::new).collect(),
        choice,
        parallel,
    })
}

pub fn tools_error(message: String, code: &'static str) -> ApiError {
    ApiError::invalid(message, Some("tools"), code)
}

pub fn choice_error(message: String) -> ApiError {
    ApiError::invalid(message, Some("tool_choice"), "invalid_value")
}
