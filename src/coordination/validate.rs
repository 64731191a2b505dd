//! Checks the tool calls of one attempt (protocol: "Validating a turn").

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::options::Strictness;
use super::prompt::{NEW_ANSWER, ShownAnswer, VOTE};
use crate::providers::ToolCall;

/// What a valid attempt decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    NewAnswer(String),
    Vote { target: String, reason: String },
}

/// A failed check: `check` is the stable name reported in `turn_invalid` events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub check: &'static str,
    pub message: String,
}

/// What the attempt is checked against.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    /// Labels offered in this turn's `vote` enum (the answers the agent saw).
    pub vote_labels: &'a [String],
    /// `Some(limit)` when the agent has used up `max_new_answers_per_agent`.
    pub answer_limit_reached: Option<u32>,
    /// The latest answer of every agent now (duplicates are judged against the present).
    pub current: &'a [ShownAnswer],
    pub novelty: Strictness,
}

/// `streamed` is the text the agent produced in this attempt (used when `new_answer` has
/// no `content`).
pub fn validate(rules: &Rules<'_>, streamed: &str, calls: &[ToolCall]) -> Result<Action, Invalid> {
    let workflow: Vec<&ToolCall> = calls
        .iter()
        .filter(|c| c.name == NEW_ANSWER || c.name == VOTE)
        .collect();
    let call = match workflow.as_slice() {
        [] => {
            return Err(invalid(
                "no_workflow_tool",
                format!("End your turn with exactly one call to `{VOTE}` or `{NEW_ANSWER}`."),
            ));
        }
        [one] => *one,
        _ => {
            return Err(invalid(
                "multiple_workflow_tools",
                format!(
                    "Call exactly one workflow tool per turn: one `{VOTE}` or one `{NEW_ANSWER}`, not {}.",
                    workflow.len()
                ),
            ));
        }
    };
    let args = parse_args(call)?;
    if call.name == VOTE {
        check_vote(rules, &args)
    } else {
        check_answer(rules, &args, streamed)
    }
}

fn check_vote(rules: &Rules<'_>, args: &Map<String, Value>) -> Result<Action, Invalid> {
    if rules.vote_labels.is_empty() {
        return Err(invalid(
            "vote_without_answers",
            format!(
                "No answers exist yet, so there is nothing to vote for. Submit your answer with `{NEW_ANSWER}`."
            ),
        ));
    }
    let target = match args.get("agent_id") {
        Some(Value::String(s)) => s.trim(),
        _ => {
            return Err(invalid(
                "invalid_arguments",
                format!(
                    "`{VOTE}` needs a string `agent_id` (one of: {}) and a `reason`.",
                    rules.vote_labels.join(", ")
                ),
            ));
        }
    };
    let Some(label) = rules
        .vote_labels
        .iter()
        .find(|l| l.eq_ignore_ascii_case(target))
    else {
        return Err(invalid(
            "unknown_vote_target",
            format!(
                "`{target}` is not a label you can vote for. Valid labels: {}.",
                rules.vote_labels.join(", ")
            ),
        ));
    };
    // A missing reason is tolerated: small models often drop it, and the vote itself is clear.
    let reason = match args.get("reason") {
        Some(Value::String(s)) => s.trim().to_string(),
        _ => String::new(),
    };
    Ok(Action::Vote {
        target: label.clone(),
        reason,
    })
}

fn check_answer(
    rules: &Rules<'_>,
    args: &Map<String, Value>,
    streamed: &str,
) -> Result<Action, Invalid> {
    if let Some(limit) = rules.answer_limit_reached {
        return Err(invalid(
            "answer_limit_reached",
            format!(
                "You have used all {limit} of your new answers. Vote for the best answer with `{VOTE}` (valid labels: {}).",
                rules.vote_labels.join(", ")
            ),
        ));
    }
    let content = match args.get("content") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => {
            return Err(invalid(
                "invalid_arguments",
                format!("`{NEW_ANSWER}` needs `content` as a string."),
            ));
        }
    };
    let text = if content.trim().is_empty() {
        streamed.trim()
    } else {
        content.trim()
    };
    if text.is_empty() {
        return Err(invalid(
            "empty_answer",
            format!(
                "The answer is empty. Call `{NEW_ANSWER}` with the complete answer as `content`."
            ),
        ));
    }
    for other in rules.current {
        if other.text.trim() == text {
            return Err(invalid(
                "duplicate_answer",
                format!(
                    "Your answer is identical to {}'s current answer. Vote for it with `{VOTE}`, or submit a substantially different answer.",
                    other.label
                ),
            ));
        }
    }
    let threshold = match rules.novelty {
        Strictness::Lenient => None,
        Strictness::Balanced => Some(0.70),
        Strictness::Strict => Some(0.50),
    };
    if let Some(threshold) = threshold {
        for other in rules.current {
            let similarity = jaccard(text, &other.text);
            if similarity > threshold {
                return Err(invalid(
                    "too_similar_answer",
                    format!(
                        "Your answer is too similar to {}'s current answer ({:.0}% word overlap). Vote for it with `{VOTE}`, or submit a substantially different answer.",
                        other.label,
                        similarity * 100.0
                    ),
                ));
            }
        }
    }
    Ok(Action::NewAnswer(text.to_string()))
}

fn parse_args(call: &ToolCall) -> Result<Map<String, Value>, Invalid> {
    if call.arguments.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(&call.arguments) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(invalid(
            "invalid_arguments",
            format!("The arguments of `{}` must be a JSON object.", call.name),
        )),
        Err(e) => Err(invalid(
            "invalid_arguments",
            format!("The arguments of `{}` are not valid JSON: {e}.", call.name),
        )),
    }
}

fn invalid(check: &'static str, message: String) -> Invalid {
    Invalid { check, message }
}

/// Jaccard similarity of the lower-cased word sets (words split at non-alphanumerics, so
/// trailing punctuation does not make two words differ).
pub fn jaccard(a: &str, b: &str) -> f64 {
    fn words(s: &str) -> HashSet<String> {
        s.to_lowercase()
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect()
    }
    let (a, b) = (words(a), words(b));
    let union = a.union(&b).count();
    if union == 0 {
        return 1.0;
    }
    a.intersection(&b).count() as f64 / union as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments: args.into(),
            opaque: None,
        }
    }

    #[test]
    fn jaccard_counts_shared_words() {
        assert!((jaccard("The cat sat.", "the CAT sat") - 1.0).abs() < 1e-9);
        assert!((jaccard("a b c d", "a b c e") - 0.6).abs() < 1e-9);
    }

    #[test]
    fn checks_in_order() {
        let labels = vec!["agent1".to_string()];
        let current = vec![ShownAnswer {
            label: "agent1".into(),
            text: "a b c d".into(),
        }];
        let rules = Rules {
            vote_labels: &labels,
            answer_limit_reached: None,
            current: &current,
            novelty: Strictness::Strict,
        };
        let check = |calls: &[ToolCall]| validate(&rules, "streamed", calls).map_err(|e| e.check);
        assert_eq!(check(&[]), Err("no_workflow_tool"));
        assert_eq!(
            check(&[call("vote", "{}"), call("new_answer", "{}")]),
            Err("multiple_workflow_tools")
        );
        assert_eq!(check(&[call("vote", "{bad")]), Err("invalid_arguments"));
        assert_eq!(
            check(&[call("vote", r#"{"agent_id":"agent9"}"#)]),
            Err("unknown_vote_target")
        );
        assert_eq!(
            check(&[call("new_answer", r#"{"content":" a b c d "}"#)]),
            Err("duplicate_answer")
        );
        assert_eq!(
            check(&[call("new_answer", r#"{"content":"a b c e"}"#)]),
            Err("too_similar_answer")
        );
        assert_eq!(
            check(&[call("new_answer", "")]),
            Ok(Action::NewAnswer("streamed".into()))
        );
        assert_eq!(
            check(&[call("vote", r#"{"agent_id":"Agent1","reason":"ok"}"#)]),
            Ok(Action::Vote {
                target: "agent1".into(),
                reason: "ok".into()
            })
        );
    }
}
