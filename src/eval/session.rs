//! One session of a run, through the server's own use case (the same panels, providers,
//! retries, limits and records as a request to a door), and what it came to.

use std::sync::Arc;
use std::time::{Duration, Instant};

use massgen_core::coordination::{EventKind, SessionInput};
use serde_json::{Map, Value, json};

use super::data::{Item, Prompt};
use crate::app::{App, Ask, Caller, Deliberation, Overrides};
use crate::config::PanelConfig;
use crate::server::error::ApiError;

/// The door name the records give eval sessions.
pub const DOOR: &str = "eval";

/// What one session gave.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The record's id; `None` when the session was refused before it started.
    pub id: Option<String>,
    /// The final answer; `None` when the session failed (see `error`).
    pub text: Option<String>,
    pub error: Option<String>,
    /// `None` when a call had no price.
    pub cost_usd: Option<f64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub elapsed: Duration,
    /// What each agent of the session said last, in the order the session lists them.
    pub said: Vec<Said>,
}

/// One agent's last answer and its last counted vote in a session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Said {
    pub agent: String,
    pub answer: Option<String>,
    /// The agent id it voted for.
    pub vote: Option<String>,
}

/// Which session of which run this is, kept with its record (`metadata`).
pub struct Label<'a> {
    /// Whose sessions these are (`MASSGEN_EVAL_KEY`'s owner, else nobody's).
    pub caller: Caller,
    pub run: &'a str,
    pub item: &'a str,
    pub arm: &'a str,
}

/// The session input for `item`: its question (or conversation) as the Chat Completions
/// door reads it, `instruction` as a system message, and the JSON Schema as structured
/// output when the grader has one.
pub fn input(
    item: &Item,
    instruction: Option<&str>,
    schema: Option<&Value>,
) -> Result<SessionInput, String> {
    let mut messages: Vec<Value> = Vec::new();
    if let Some(instruction) = instruction.filter(|i| !i.trim().is_empty()) {
        messages.push(json!({"role": "system", "content": instruction}));
    }
    match &item.prompt {
        Prompt::Question(q) => messages.push(json!({"role": "user", "content": q})),
        Prompt::Messages(list) => messages.extend(list.iter().cloned()),
    }
    let mut body = json!({"model": "massgen", "messages": messages});
    if let Some(schema) = schema {
        body["response_format"] = json!({"type": "json_schema", "json_schema": {
            "name": "answer", "schema": schema, "strict": false}});
    }
    let request = crate::server::doors::chat_completions::request::from_value(body)
        .map_err(|e| format!("line {}: {}", item.line, e.message()))?;
    Ok(request.input)
}

/// Runs `input` on `panel` and waits for its end.
pub async fn run(
    app: &App,
    panel: Arc<PanelConfig>,
    input: SessionInput,
    label: &Label<'_>,
) -> Outcome {
    let started = Instant::now();
    let mut metadata = Map::new();
    metadata.insert("eval_run".into(), Value::String(label.run.into()));
    metadata.insert("eval_item".into(), Value::String(label.item.into()));
    metadata.insert("eval_arm".into(), Value::String(label.arm.into()));
    let ask = Ask {
        caller: label.caller,
        door: DOOR,
        model: format!("eval:{}", label.arm),
        route_as: None,
        metadata,
        input,
        deliberation: Deliberation::Off,
        overrides: Overrides::default(),
        hold: None,
    };
    let mut opened = match app.open_on(ask, panel).await {
        Ok(opened) => opened,
        Err(refusal) => {
            // Refused before any upstream call: it cost nothing.
            return Outcome {
                error: Some(ApiError::from(refusal).message()),
                cost_usd: Some(0.0),
                elapsed: started.elapsed(),
                ..Outcome::default()
            };
        }
    };
    let mut outcome = Outcome {
        id: Some(opened.id.to_string()),
        error: Some("the session ended without a result".to_string()),
        ..Outcome::default()
    };
    while let Some(event) = opened.events.recv().await {
        match event.kind {
            EventKind::SessionStarted { agents } => {
                outcome.said = agents
                    .into_iter()
                    .map(|a| Said {
                        agent: a.agent_id,
                        ..Said::default()
                    })
                    .collect();
            }
            EventKind::Answer { answer } => {
                if let Some(said) = said_by(&mut outcome.said, &answer.agent.agent_id) {
                    said.answer = Some(answer.content.as_text());
                }
            }
            EventKind::Vote { vote } => {
                if let Some(said) = said_by(&mut outcome.said, &vote.voter.agent_id) {
                    said.vote = Some(vote.target_agent_id);
                }
            }
            EventKind::SessionCompleted { summary } => {
                // The votes that counted in the end (a vote cast before newer answers
                // arrived may have been replaced by an answer of its own).
                for said in &mut outcome.said {
                    said.vote = summary
                        .votes
                        .iter()
                        .rfind(|v| v.voter.agent_id == said.agent)
                        .map(|v| v.target_agent_id.clone());
                }
                outcome.text = Some(summary.final_answer);
                outcome.error = None;
                outcome.cost_usd = summary.cost_usd;
                outcome.input_tokens = summary.usage.input_tokens;
                outcome.output_tokens = summary.usage.output_tokens;
            }
            EventKind::SessionFailed { error } => {
                outcome.error = Some(error.message);
                outcome.cost_usd = error.cost_usd;
                outcome.input_tokens = error.usage.input_tokens;
                outcome.output_tokens = error.usage.output_tokens;
            }
            _ => {}
        }
    }
    outcome.elapsed = started.elapsed();
    outcome
}

fn said_by<'a>(said: &'a mut [Said], agent: &str) -> Option<&'a mut Said> {
    said.iter_mut().find(|s| s.agent == agent)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;

    fn item(prompt: Prompt) -> Item {
        Item {
            id: "1".into(),
            line: 4,
            prompt,
            answer: None,
            metadata: Map::new(),
        }
    }

    #[test]
    fn questions_and_conversations_become_the_doors_input() {
        let input = input(
            &item(Prompt::Question("What is 6 x 7?".into())),
            Some("End with Answer: X"),
            None,
        )
        .unwrap();
        assert_eq!(input.question, "What is 6 x 7?");
        assert_eq!(input.extra_system.as_deref(), Some("End with Answer: X"));
        assert!(input.output.is_none());
        let conversation = item(Prompt::Messages(vec![
            json!({"role": "user", "content": "Hi"}),
            json!({"role": "assistant", "content": "Hello"}),
            json!({"role": "user", "content": "And 2+2?"}),
        ]));
        let schema = json!({"type": "object"});
        let input = super::input(&conversation, None, Some(&schema)).unwrap();
        assert_eq!(input.question, "And 2+2?");
        assert_eq!(input.history.len(), 2);
        assert!(input.output.is_some());
        let bad = item(Prompt::Messages(vec![
            json!({"role": "robot", "content": "x"}),
        ]));
        assert!(
            super::input(&bad, None, None)
                .unwrap_err()
                .starts_with("line 4: ")
        );
    }
}
