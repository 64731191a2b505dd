//! Checks the tool calls of one attempt (docs/protocol.md, "Validating a turn").

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::client_tools::same_calls;
use super::options::Strictness;
use super::prompt::ShownAnswer;
use crate::provider::ToolCall;
use crate::tool_names::{NEW_ANSWER, VOTE};

/// What a valid attempt decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    NewAnswer(String),
    Vote {
        target: String,
        reason: String,
    },
    /// A proposal of client tool calls (arguments valid JSON objects, ids unique).
    ToolCalls(Vec<ToolCall>),
}

/// The reason recorded when a proposal repeats another agent's calls.
pub const SAME_CALLS_REASON: &str = "proposed the same tool calls";

/// The reason recorded when a text answer repeats another agent's current answer.
pub const SAME_ANSWER_REASON: &str = "gave the same answer";

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
    /// Why the agent may not answer now (its own or the panel's answers are used up, or
    /// the fairness cap holds it), as a sentence for the agent; `None`: it may.
    pub answer_limit_reached: Option<&'a str>,
    /// The latest answer of every agent now (duplicates are judged against the present).
    pub current: &'a [ShownAnswer],
    pub novelty: Strictness,
    /// Names of the client tools offered in this turn (empty: none).
    pub client_tools: &'a [String],
    /// The client demands calls: `new_answer` was not offered.
    pub call_required: bool,
    /// `parallel_tool_calls: false`: at most one client call per answer.
    pub one_call_only: bool,
}

impl Rules<'_> {
    /// Every tool name this turn offered, for error messages.
    fn available(&self) -> String {
        let mut names: Vec<&str> = Vec::new();
        if !self.vote_labels.is_empty() {
            names.push(VOTE);
        }
        if self.answer_limit_reached.is_none() {
            if !self.call_required {
                names.push(NEW_ANSWER);
            }
            names.extend(self.client_tools.iter().map(String::as_str));
        }
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `streamed` is the text the agent produced in this attempt (used when `new_answer` has
/// no `content`).
pub fn validate(rules: &Rules<'_>, streamed: &str, calls: &[ToolCall]) -> Result<Action, Invalid> {
    let workflow: Vec<&ToolCall> = calls
        .iter()
        .filter(|c| c.name == NEW_ANSWER || c.name == VOTE)
        .collect();
    let client: Vec<&ToolCall> = calls
        .iter()
        .filter(|c| rules.client_tools.contains(&c.name))
        .collect();
    if let Some(unknown) = calls
        .iter()
        .find(|c| c.name != NEW_ANSWER && c.name != VOTE && !rules.client_tools.contains(&c.name))
    {
        return Err(invalid(
            "unknown_tool",
            format!(
                "`{}` is not a tool you can call here. Available tools: {}.",
                unknown.name,
                rules.available()
            ),
        ));
    }
    if !client.is_empty() {
        if !workflow.is_empty() {
            return Err(invalid(
                "mixed_tool_calls",
                format!(
                    "End your turn either with `{VOTE}`, with `{NEW_ANSWER}`, or with calls to the client's tools, not with a mix of them."
                ),
            ));
        }
        return check_calls(rules, &client);
    }
    let call = match workflow.as_slice() {
        [] => {
            return Err(invalid(
                "no_workflow_tool",
                if rules.client_tools.is_empty() {
                    format!("End your turn with exactly one call to `{VOTE}` or `{NEW_ANSWER}`.")
                } else {
                    format!(
                        "End your turn with one call to `{VOTE}` or `{NEW_ANSWER}`, or with calls to the client's tools. Available tools: {}.",
                        rules.available()
                    )
                },
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
    if let Some(why) = rules.answer_limit_reached {
        return Err(invalid(
            "answer_limit_reached",
            format!(
                "{why} Vote for the best answer with `{VOTE}` (valid labels: {}).",
                rules.vote_labels.join(", ")
            ),
        ));
    }
    if rules.call_required {
        return Err(invalid(
            "tool_call_required",
            format!(
                "The client requires the answer to be calls to its tools; `{NEW_ANSWER}` is not available. Available tools: {}.",
                rules.available()
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
    // A proposal of calls is never a text duplicate, whatever its rendering says.
    let texts = || rules.current.iter().filter(|a| a.calls.is_empty());
    // Repeating a current answer word for word is agreeing with it, as with a repeated
    // proposal: refusing it made a deterministic model fail its turn on retries that can
    // only repeat it again. The agent's own answer counts too: repeating it is a vote for
    // itself, which `vote` offers as well. The vote is checked like any other: cast in a
    // turn that did not see that answer (a first turn, or a stale one), it is discarded and
    // the agent takes a fresh turn.
    if let Some(same) = texts().find(|a| a.text.trim() == text) {
        return Ok(Action::Vote {
            target: same.label.clone(),
            reason: SAME_ANSWER_REASON.to_string(),
        });
    }
    let threshold = match rules.novelty {
        Strictness::Lenient => None,
        Strictness::Balanced => Some(0.70),
        Strictness::Strict => Some(0.50),
    };
    if let Some(threshold) = threshold {
        for other in texts() {
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

/// A proposal of client calls. Repeating another agent's current proposal exactly (same
/// tools, same arguments as JSON, any order) is taken as a vote for that agent: the two
/// agents agree, and a second identical answer would only split the votes.
fn check_calls(rules: &Rules<'_>, calls: &[&ToolCall]) -> Result<Action, Invalid> {
    if let Some(why) = rules.answer_limit_reached {
        return Err(invalid(
            "answer_limit_reached",
            format!(
                "{why} A proposal of tool calls is an answer too. Vote for the best answer with `{VOTE}` (valid labels: {}).",
                rules.vote_labels.join(", ")
            ),
        ));
    }
    if rules.one_call_only && calls.len() > 1 {
        return Err(invalid(
            "too_many_tool_calls",
            format!(
                "The client accepts one tool call at a time, and you made {}. Propose a single call.",
                calls.len()
            ),
        ));
    }
    let mut out: Vec<ToolCall> = Vec::with_capacity(calls.len());
    for call in calls {
        parse_args(call)?;
        let arguments = if call.arguments.trim().is_empty() {
            "{}".to_string()
        } else {
            call.arguments.trim().to_string()
        };
        // Clients match results to calls by id: it must be present and unique.
        let id = if call.id.trim().is_empty() || out.iter().any(|c| c.id == call.id) {
            format!("call_{}", uuid::Uuid::now_v7().simple())
        } else {
            call.id.clone()
        };
        out.push(ToolCall {
            id,
            name: call.name.clone(),
            arguments,
            opaque: None,
        });
    }
    if let Some(same) = rules.current.iter().find(|a| same_calls(&a.calls, &out)) {
        return Ok(Action::Vote {
            target: same.label.clone(),
            reason: SAME_CALLS_REASON.to_string(),
        });
    }
    Ok(Action::ToolCalls(out))
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
            calls: Vec::new(),
        }];
        let rules = Rules {
            vote_labels: &labels,
            answer_limit_reached: None,
            current: &current,
            novelty: Strictness::Strict,
            client_tools: &[],
            call_required: false,
            one_call_only: false,
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
            Ok(Action::Vote {
                target: "agent1".into(),
                reason: SAME_ANSWER_REASON.into()
            })
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

    #[test]
    fn an_identical_answer_is_a_vote_only_where_an_answer_could_be_given() {
        let labels = vec!["agent1".to_string(), "agent2".to_string()];
        let current = vec![
            ShownAnswer::proposal("agent1", &[call("get_time", "{}")]),
            ShownAnswer {
                label: "agent2".into(),
                text: "The sky is blue because of Rayleigh scattering.".into(),
                calls: Vec::new(),
            },
        ];
        let mut rules = Rules {
            vote_labels: &labels,
            answer_limit_reached: None,
            current: &current,
            novelty: Strictness::Lenient,
            client_tools: &[],
            call_required: false,
            one_call_only: false,
        };
        let same = r#"{"content":"\nThe sky is blue because of Rayleigh scattering.  "}"#;
        let check = |r: &Rules<'_>, streamed: &str, calls: &[ToolCall]| {
            validate(r, streamed, calls).map_err(|e| e.check)
        };
        let vote_for_agent2 = Ok(Action::Vote {
            target: "agent2".into(),
            reason: SAME_ANSWER_REASON.into(),
        });
        assert_eq!(
            check(&rules, "", &[call("new_answer", same)]),
            vote_for_agent2
        );
        // Blank `content`: the streamed text is the answer, and it is compared the same way.
        assert_eq!(
            check(
                &rules,
                " The sky is blue because of Rayleigh scattering.\n",
                &[call("new_answer", "{}")]
            ),
            vote_for_agent2
        );
        // Only an exact repeat: one word more is a new answer at the lenient level.
        assert!(matches!(
            check(
                &rules,
                "",
                &[call(
                    "new_answer",
                    r#"{"content":"The sky is blue because of Rayleigh scattering. Mostly."}"#
                )]
            ),
            Ok(Action::NewAnswer(_))
        ));
        // An agent that may not answer, or must call tools, is told so first, as with a
        // repeated proposal: a refused answer is not a vote.
        rules.call_required = true;
        assert_eq!(
            check(&rules, "", &[call("new_answer", same)]),
            Err("tool_call_required")
        );
        rules.call_required = false;
        rules.answer_limit_reached = Some("You have used all 1 of your new answers.");
        assert_eq!(
            check(&rules, "", &[call("new_answer", same)]),
            Err("answer_limit_reached")
        );
    }

    #[test]
    fn client_tool_calls() {
        let labels = vec!["agent1".to_string()];
        let current = vec![
            ShownAnswer::proposal("agent1", &[call("get_weather", r#"{"city":"Paris"}"#)]),
            ShownAnswer {
                label: "agent2".into(),
                text: "a b c".into(),
                calls: Vec::new(),
            },
        ];
        let tools = vec!["get_weather".to_string(), "get_time".to_string()];
        let mut rules = Rules {
            vote_labels: &labels,
            answer_limit_reached: None,
            current: &current,
            novelty: Strictness::Strict,
            client_tools: &tools,
            call_required: false,
            one_call_only: true,
        };
        let check = |r: &Rules<'_>, calls: &[ToolCall]| validate(r, "", calls);
        let code = |r: &Rules<'_>, calls: &[ToolCall]| check(r, calls).map_err(|e| e.check);
        assert_eq!(
            code(&rules, &[call("rm_rf", "{}")]).err(),
            Some("unknown_tool")
        );
        assert_eq!(
            code(&rules, &[call("vote", "{}"), call("get_time", "{}")]).err(),
            Some("mixed_tool_calls")
        );
        assert_eq!(
            code(&rules, &[call("get_time", "{}"), call("get_time", "{}")]).err(),
            Some("too_many_tool_calls")
        );
        assert_eq!(
            code(&rules, &[call("get_time", "[1]")]).err(),
            Some("invalid_arguments")
        );
        // The same call as agent1's proposal is a vote for agent1.
        assert_eq!(
            check(&rules, &[call("get_weather", r#"{ "city": "Paris" }"#)]),
            Ok(Action::Vote {
                target: "agent1".into(),
                reason: SAME_CALLS_REASON.into()
            })
        );
        let Ok(Action::ToolCalls(calls)) = check(&rules, &[call("get_time", "")]) else {
            panic!("expected calls");
        };
        assert_eq!(calls[0].arguments, "{}");
        // A text answer equal to the rendering of a proposal is not a duplicate.
        let text = serde_json::json!({ "content": current[0].text }).to_string();
        assert!(matches!(
            check(&rules, &[call("new_answer", &text)]),
            Ok(Action::NewAnswer(_))
        ));
        rules.call_required = true;
        assert_eq!(
            code(&rules, &[call("new_answer", r#"{"content":"x y z"}"#)]).err(),
            Some("tool_call_required")
        );
        rules.answer_limit_reached = Some("You have used all 1 of your new answers.");
        assert_eq!(
            code(&rules, &[call("get_time", "{}")]).err(),
            Some("answer_limit_reached")
        );
    }
}
