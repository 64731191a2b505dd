//! The MCP door's tools: `deliberate` (one question, one coordination session) and
//! `list_panels`. Their schemas, the reading of `deliberate`'s arguments into the neutral
//! [`Ask`], and their results as JSON; the session itself is the handler's.

use std::sync::Arc;

use massgen_core::coordination::{SessionInput, SessionSummary};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Map, Value, json};

use super::NAME;
use crate::app::{Caller, Overrides, panels};
use crate::config::{PanelCatalog, PanelConfig};
use crate::server::doors::parse;
use crate::server::doors::session::Ask;
use crate::server::error::ApiError;

pub const DELIBERATE: &str = "deliberate";
pub const LIST_PANELS: &str = "list_panels";

/// The longest `deadline_seconds`: an hour (a session's own timeout is the real bound).
const MAX_DEADLINE_SECONDS: u64 = 3_600;

/// Longest `context`, in characters; the question is bounded the same way. The HTTP body
/// limit bounds both on `/mcp`; stdio has no body, so this is what bounds it there.
const MAX_TEXT_CHARS: usize = 1_000_000;

/// The tools, as `tools/list` lists them.
pub fn list() -> Vec<Tool> {
    vec![deliberate_tool(), list_panels_tool()]
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn deliberate_tool() -> Tool {
    let input = json!({
        "type": "object",
        "properties": {
            "question": {
                "type": "string",
                "description": "What the panel should answer or decide (not empty)."
            },
            "context": {
                "type": "string",
                "description": "Material the agents should read before answering: a diff, a file, a design, logs."
            },
            "panel": {
                "type": "string",
                "description": "A named panel, as massgen/<name> (list_panels lists them); the server's default panel when left out."
            },
            "max_cost_usd": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "Most this deliberation may spend, in USD (lowers the panel's own limit, never raises it)."
            },
            "voting_quorum": {
                "description": "Votes one answer needs to end the deliberation early: \"all\", \"majority\" or a number of votes.",
                "anyOf": [
                    {"type": "string", "enum": ["all", "majority"]},
                    {"type": "integer", "minimum": 1}
                ]
            },
            "deadline_seconds": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": MAX_DEADLINE_SECONDS,
                "description": "Answer within about this many seconds: at the deadline the panel stops deliberating and presents its best answer so far. Set it below your client's tool timeout."
            }
        },
        "required": ["question"],
        "additionalProperties": false
    });
    let output = json!({
        "type": "object",
        "properties": {
            "answer": {"type": "string", "description": "The panel's final answer."},
            "winner": {
                "type": "object",
                "properties": {"agent_id": {"type": "string"}, "label": {"type": "string"}},
                "required": ["agent_id", "label"]
            },
            "session_id": {"type": "string", "description": "As in GET /v1/sessions/{id}."},
            "votes": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "voter": {"type": "object"},
                        "target_label": {"type": "string"},
                        "target_agent_id": {"type": "string"},
                        "reason": {"type": "string"}
                    }
                }
            },
            "consensus_reason": {"type": "string"},
            "usage": {
                "type": "object",
                "properties": {
                    "input_tokens": {"type": "integer"},
                    "output_tokens": {"type": "integer"},
                    "total_tokens": {"type": "integer"}
                }
            },
            "cost_usd": {"type": ["number", "null"], "description": "null when an agent's model has no price."},
            "duration_ms": {"type": "integer"}
        },
        "required": ["answer", "winner", "session_id", "votes", "consensus_reason", "usage", "cost_usd"]
    });
    let mut annotations = ToolAnnotations::default();
    annotations.title = Some("Ask the MassGen panel".into());
    // The panel only answers; it changes nothing outside (its agents' own tools aside).
    annotations.read_only_hint = Some(true);
    annotations.open_world_hint = Some(true);
    Tool::new(
        DELIBERATE,
        "Ask a panel of several LLM agents a question: each answers, they read each other's answers and vote, and the winner presents the final answer. Use it for a second opinion before a risky change (a schema, an API, a migration) or to settle a design question. Slower and costlier than one model: ask one well-posed question, with the material it needs in `context`.",
        object(input),
    )
    .with_raw_output_schema(object(output))
    .with_annotations(annotations)
}

fn list_panels_tool() -> Tool {
    let output = json!({
        "type": "object",
        "properties": {
            "panels": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "panel": {"type": "string", "description": "What `deliberate`'s `panel` takes."},
                        "default": {"type": "boolean"},
                        "agents": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "id": {"type": "string"},
                                    "backend": {"type": "string"},
                                    "model": {"type": "string"}
                                }
                            }
                        }
                    },
                    "required": ["panel", "default", "agents"]
                }
            }
        },
        "required": ["panels"]
    });
    let mut annotations = ToolAnnotations::default();
    annotations.title = Some("List the MassGen panels".into());
    annotations.read_only_hint = Some(true);
    annotations.open_world_hint = Some(false);
    Tool::new(
        LIST_PANELS,
        "The panels this server offers for `deliberate` (its default and named panels), with their agents' models.",
        object(json!({"type": "object", "properties": {}, "additionalProperties": false})),
    )
    .with_raw_output_schema(object(output))
    .with_annotations(annotations)
}

/// `list_panels`' result: the default panel (`massgen`) first, then the named ones.
pub fn panels(catalog: &PanelCatalog) -> Value {
    let describe = |id: String, panel: &PanelConfig, default: bool| {
        let agents: Vec<Value> = panel
            .agents
            .iter()
            .map(|a| json!({"id": a.id, "backend": a.backend.backend_type, "model": a.backend.model}))
            .collect();
        json!({"panel": id, "default": default, "agents": agents})
    };
    let list: Vec<Value> = panels::model_ids(catalog)
        .into_iter()
        .filter_map(|id| {
            let (panel, default) = match id.strip_prefix("massgen/") {
                Some(name) => (catalog.named.get(name)?, false),
                None => (catalog.default.as_ref()?, true),
            };
            Some(describe(id, panel, default))
        })
        .collect();
    json!({ "panels": list })
}

/// `list_panels`' text: one line a panel.
pub fn panels_text(value: &Value) -> String {
    let Some(list) = value["panels"].as_array() else {
        return String::new();
    };
    if list.is_empty() {
        return "No panels.".into();
    }
    list.iter()
        .map(|p| {
            let agents: Vec<String> = p["agents"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| {
                    format!(
                        "{} ({})",
                        a["id"].as_str().unwrap_or_default(),
                        a["model"].as_str().unwrap_or_default()
                    )
                })
                .collect();
            let default = if p["default"] == true {
                " (default)"
            } else {
                ""
            };
            format!(
                "{}{default}: {}",
                p["panel"].as_str().unwrap_or_default(),
                agents.join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `deliberate`'s arguments as the session's [`Ask`]; the error says what is wrong, in the
/// HTTP doors' words where they have the same field.
pub fn deliberate_ask(caller: Caller, arguments: Option<&JsonObject>) -> Result<Ask, ApiError> {
    let empty = Map::new();
    let args = arguments.unwrap_or(&empty);
    if let Some(unknown) = args.keys().find(|k| {
        ![
            "question",
            "context",
            "panel",
            "max_cost_usd",
            "voting_quorum",
            "deadline_seconds",
        ]
        .contains(&k.as_str())
    }) {
        return Err(invalid(
            format!(
                "unknown argument '{unknown}': deliberate takes question, context, panel, max_cost_usd, voting_quorum and deadline_seconds"
            ),
            "arguments",
        ));
    }
    let question = text(args, "question")?
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .ok_or_else(|| invalid("'question' must be a non-empty string", "question"))?;
    let context = text(args, "context")?
        .map(str::trim)
        .filter(|c| !c.is_empty());
    let model = match text(args, "panel")?.map(str::trim) {
        None | Some("") => "massgen".to_string(),
        Some(panel) if panel == "massgen" || panel.starts_with("massgen/") => panel.to_string(),
        // A bare name is what a client that read only the description may send.
        Some(name) => format!("massgen/{name}"),
    };
    let voting_quorum = present(args, "voting_quorum")
        .map(|v| parse::quorum(v, "voting_quorum"))
        .transpose()?;
    let max_cost_usd = present(args, "max_cost_usd")
        .map(|v| parse::max_cost(v, "max_cost_usd"))
        .transpose()?;
    let deadline_at = present(args, "deadline_seconds")
        .map(deadline)
        .transpose()?;
    Ok(Ask {
        caller,
        door: NAME,
        model,
        route_as: None,
        metadata: Map::new(),
        input: SessionInput {
            question: with_context(question, context),
            ..SessionInput::default()
        },
        deliberation: crate::app::Deliberation::Summary,
        overrides: Overrides {
            voting_quorum,
            max_cost_usd,
            models: Vec::new(),
            deadline: deadline_at,
        },
        hold: None,
    })
}

/// `deadline_seconds`: a number of seconds above 0, at most [`MAX_DEADLINE_SECONDS`].
fn deadline(value: &Value) -> Result<std::time::Duration, ApiError> {
    value
        .as_f64()
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= MAX_DEADLINE_SECONDS as f64)
        .map(std::time::Duration::from_secs_f64)
        .ok_or_else(|| {
            invalid(
                format!(
                    "'deadline_seconds' must be a number above 0 and at most {MAX_DEADLINE_SECONDS}"
                ),
                "deadline_seconds",
            )
        })
}

/// The question the agents read: the material first, marked off, then the question (what
/// they answer is the last thing they read).
fn with_context(question: &str, context: Option<&str>) -> String {
    match context {
        None => question.to_string(),
        Some(context) => {
            format!("<context>\n{context}\n</context>\n\n{question}")
        }
    }
}

fn present<'a>(args: &'a JsonObject, key: &str) -> Option<&'a Value> {
    args.get(key).filter(|v| !v.is_null())
}

fn text<'a>(args: &'a JsonObject, key: &'static str) -> Result<Option<&'a str>, ApiError> {
    match present(args, key) {
        None => Ok(None),
        Some(Value::String(s)) if s.chars().count() > MAX_TEXT_CHARS => Err(invalid(
            format!("'{key}' is longer than {MAX_TEXT_CHARS} characters"),
            key,
        )),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(format!("'{key}' must be a string"), key)),
    }
}

fn invalid(message: impl Into<String>, param: &'static str) -> ApiError {
    ApiError::invalid(message, Some(param), "invalid_value")
}

/// `deliberate`'s `structuredContent`.
pub fn outcome(session_id: &str, s: &SessionSummary) -> Value {
    json!({
        "answer": s.final_answer,
        "winner": {"agent_id": s.winner.agent_id, "label": s.winner.label},
        "session_id": session_id,
        "votes": s.votes,
        "consensus_reason": s.consensus_reason,
        "usage": s.usage,
        "cost_usd": s.cost_usd,
        "duration_ms": s.duration_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(v: Value) -> Result<Ask, ApiError> {
        let Value::Object(map) = v else {
            panic!("an object")
        };
        deliberate_ask(Caller::default(), Some(&map))
    }

    #[test]
    fn arguments_become_the_ask() {
        let a = ask(
            json!({"question": " Why? ", "context": "diff", "panel": "team",
            "voting_quorum": "majority", "max_cost_usd": 0.5}),
        )
        .unwrap();
        assert_eq!(a.model, "massgen/team");
        assert_eq!(a.door, "mcp");
        assert_eq!(a.input.question, "<context>\ndiff\n</context>\n\nWhy?");
        assert_eq!(
            a.overrides.voting_quorum,
            Some(massgen_core::coordination::Quorum::Majority)
        );
        assert_eq!(a.overrides.max_cost_usd, Some(0.5));
        let timed = ask(json!({"question": "q", "deadline_seconds": 4.5})).unwrap();
        assert_eq!(
            timed.overrides.deadline,
            Some(std::time::Duration::from_millis(4500))
        );
        assert_eq!(
            ask(json!({"question": "q", "panel": "massgen/x"}))
                .unwrap()
                .model,
            "massgen/x"
        );
        assert_eq!(ask(json!({"question": "q"})).unwrap().model, "massgen");
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        for (v, words) in [
            (json!({}), "'question' must be a non-empty string"),
            (
                json!({"question": "  "}),
                "'question' must be a non-empty string",
            ),
            (json!({"question": 3}), "'question' must be a string"),
            (
                json!({"question": "q", "voting_quorum": 0}),
                "'voting_quorum' must be",
            ),
            (json!({"question": "q", "max_cost_usd": -1}), "above 0"),
            (
                json!({"question": "q", "deadline_seconds": 0}),
                "'deadline_seconds' must be",
            ),
            (
                json!({"question": "q", "deadline_seconds": "soon"}),
                "'deadline_seconds' must be",
            ),
            (
                json!({"question": "q", "nope": 1}),
                "unknown argument 'nope'",
            ),
        ] {
            let e = ask(v.clone()).err().unwrap();
            assert!(e.message().contains(words), "{v}: {}", e.message());
        }
        assert!(deliberate_ask(Caller::default(), None).is_err());
    }

    #[test]
    fn tools_declare_their_output() {
        let tools = list();
        assert_eq!(tools.len(), 2);
        assert!(tools.iter().all(|t| t.output_schema.is_some()));
    }
}
