//! From a request and a [`Behaviour`] to what the simulated model says.

use serde_json::{Value, json};

use super::behaviour::{Behaviour, Policy, VoteChoice};
use super::text;

/// The parts of a Chat Completions request the simulator looks at.
#[derive(Debug, Clone)]
pub struct Request {
    pub model: String,
    pub stream: bool,
    pub include_usage: bool,
    pub offered: Offered,
    /// ceil(chars of every message's text / 4): deterministic so callers can check sums.
    pub prompt_tokens: u64,
    pub last_user: String,
}

/// Which workflow tools the request offers.
#[derive(Debug, Clone, Default)]
pub struct Offered {
    pub any_tool: bool,
    pub new_answer: bool,
    /// `Some(enum of agent_id)` when `vote` is offered.
    pub vote: Option<Vec<String>>,
}

/// A request the simulator refuses with 400 before doing anything.
#[derive(Debug, Clone)]
pub struct BadRequest {
    pub message: String,
    pub param: Option<&'static str>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: &'static str,
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Text(String),
    Tools(Vec<ToolCall>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub reasoning: Option<String>,
    pub reply: Reply,
}

pub const VOTE_REASON: &str = "[simulated] clearest answer";
const BAD_LABEL: &str = "agent99";

pub fn parse_request(body: &[u8]) -> Result<Request, BadRequest> {
    let bad = |message: &str, param| BadRequest {
        message: message.to_string(),
        param,
    };
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| bad(&format!("request body is not valid JSON: {e}"), None))?;
    let model = v
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("'model' is a required string property", Some("model")))?;
    let messages = v
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("'messages' is a required array property", Some("messages")))?;
    let chars: usize = messages.iter().map(message_chars).sum();
    let last_user = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(|m| content_text(m.get("content")))
        .unwrap_or_default();
    Ok(Request {
        model: model.to_string(),
        stream: v.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_usage: v
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        offered: offered(v.get("tools")),
        prompt_tokens: chars.div_ceil(4) as u64,
        last_user,
    })
}

/// Text of a message content: a string, or the `text` of its parts.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Characters of a message's text (string content, or the sum of its parts' `text`) plus
/// its tool calls' `function.arguments`.
fn message_chars(m: &Value) -> usize {
    let args: usize = m
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .filter_map(|c| c.pointer("/function/arguments").and_then(Value::as_str))
                .map(|a| a.chars().count())
                .sum()
        })
        .unwrap_or(0);
    let text: usize = match m.get("content") {
        Some(Value::String(s)) => s.chars().count(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(|t| t.chars().count())
            .sum(),
        _ => 0,
    };
    text + args
}

fn offered(tools: Option<&Value>) -> Offered {
    let mut o = Offered::default();
    for tool in tools.and_then(Value::as_array).into_iter().flatten() {
        o.any_tool = true;
        match tool.pointer("/function/name").and_then(Value::as_str) {
            Some("new_answer") => o.new_answer = true,
            Some("vote") => {
                let labels = tool
                    .pointer("/function/parameters/properties/agent_id/enum")
                    .and_then(Value::as_array)
                    .map(|e| {
                        e.iter()
                            .filter_map(Value::as_str)
                            .map(String::from)
                            .collect()
                    })
                    .unwrap_or_default();
                o.vote = Some(labels);
            }
            _ => {}
        }
    }
    o
}

pub fn plan(b: &Behaviour, req: &Request) -> Plan {
    // The full model string and the prompt seed the text: different agents differ, and
    // the same agent writes a new answer when the answer set it sees has changed.
    let seed = format!("{}\n{}", req.model, req.last_user);
    let question = text::question_of(&req.last_user);
    let o = &req.offered;
    let can_vote = o.vote.is_some();
    let answer = || new_answer(text::answer(&seed, &question, b.words));
    let vote = || vote_call(&pick_label(&b.vote, o.vote.as_deref().unwrap_or(&[])));
    let plain = || {
        if o.any_tool {
            Reply::Text(text::answer(&seed, &question, b.words))
        } else {
            Reply::Text(text::final_answer(&seed, &question, b.words))
        }
    };
    let tools = |calls: Vec<ToolCall>| Reply::Tools(calls);
    let reply = match b.policy {
        Policy::NoTool => plain(),
        Policy::BadVote if o.any_tool => tools(vec![vote_call(BAD_LABEL)]),
        Policy::Copy if o.new_answer => {
            match text::first_answer_block(&req.last_user).filter(|t| !t.is_empty()) {
                Some(copied) => tools(vec![new_answer(copied.to_string())]),
                None => tools(vec![answer()]),
            }
        }
        Policy::DoubleVote if can_vote => tools(vec![vote(), vote()]),
        Policy::Answer if o.new_answer => tools(vec![answer()]),
        _ if can_vote => tools(vec![vote()]),
        _ if o.new_answer => tools(vec![answer()]),
        _ => plain(),
    };
    Plan {
        reasoning: b.reasoning.then(|| text::reasoning(&seed, &question)),
        reply,
    }
}

fn pick_label(choice: &VoteChoice, labels: &[String]) -> String {
    let first = || labels.first().cloned().unwrap_or_else(|| "agent1".into());
    match choice {
        VoteChoice::First => first(),
        VoteChoice::Last => labels.last().cloned().unwrap_or_else(first),
        VoteChoice::Label(l) if labels.contains(l) => l.clone(),
        VoteChoice::Label(_) => first(),
    }
}

fn new_answer(content: String) -> ToolCall {
    ToolCall {
        name: "new_answer",
        arguments: json!({ "content": content }).to_string(),
    }
}

fn vote_call(label: &str) -> ToolCall {
    ToolCall {
        name: "vote",
        arguments: json!({ "agent_id": label, "reason": VOTE_REASON }).to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;

    fn request(tools: Value, user: &str) -> Request {
        let body = json!({"model": "m", "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": user}], "tools": tools});
        parse_request(body.to_string().as_bytes()).unwrap()
    }

    fn workflow(labels: &[&str]) -> Value {
        let mut tools = vec![json!({"type":"function","function":{"name":"new_answer"}})];
        if !labels.is_empty() {
            tools.push(
                json!({"type":"function","function":{"name":"vote","parameters":
                {"properties":{"agent_id":{"type":"string","enum":labels}}}}}),
            );
        }
        Value::Array(tools)
    }

    fn calls(p: Plan) -> Vec<(String, Value)> {
        match p.reply {
            Reply::Tools(c) => c
                .into_iter()
                .map(|c| {
                    (
                        c.name.to_string(),
                        serde_json::from_str(&c.arguments).unwrap(),
                    )
                })
                .collect(),
            Reply::Text(t) => panic!("text: {t}"),
        }
    }

    fn beh(model: &str) -> Behaviour {
        Behaviour::parse(model).unwrap()
    }

    #[test]
    fn prompt_tokens_count_parts_and_tool_arguments() {
        let body = json!({"model": "m", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "abcd"}, {"type": "text", "text": "é"}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
                "function": {"name": "f", "arguments": "{\"a\":1}"}}]}]});
        // 4 + 1 + 7 = 12 chars -> 3 tokens (a separator between parts would make it 4).
        let req = parse_request(body.to_string().as_bytes()).unwrap();
        assert_eq!(req.prompt_tokens, 3);
    }

    #[test]
    fn prompt_tokens_round_up() {
        // "sys" + "hello" = 8 chars -> 2; one more char -> 3.
        assert_eq!(request(json!([]), "hello").prompt_tokens, 2);
        assert_eq!(request(json!([]), "hello!").prompt_tokens, 3);
    }

    #[test]
    fn auto_policy_follows_the_offered_tools() {
        let r = request(workflow(&[]), "<original_message>Q?</original_message>");
        let c = calls(plan(&beh("a"), &r));
        assert_eq!(c[0].0, "new_answer");
        assert!(
            c[0].1["content"]
                .as_str()
                .unwrap()
                .starts_with("[simulated] ")
        );
        let r = request(workflow(&["agent1", "agent3"]), "x");
        assert_eq!(calls(plan(&beh("a"), &r))[0].1["agent_id"], "agent1");
        assert_eq!(
            calls(plan(&beh("a:vote=last"), &r))[0].1["agent_id"],
            "agent3"
        );
        assert_eq!(
            calls(plan(&beh("a:vote=agent3"), &r))[0].1["agent_id"],
            "agent3"
        );
        assert_eq!(
            calls(plan(&beh("a:vote=agent7"), &r))[0].1["agent_id"],
            "agent1"
        );
        let p = plan(&beh("a"), &request(json!(null), "Q?"));
        assert!(matches!(p.reply, Reply::Text(t) if t.starts_with("[simulated final answer] ")));
    }

    #[test]
    fn faulty_policies() {
        let r = request(
            workflow(&["agent1"]),
            "<answer label=\"agent1\">copied text</answer>",
        );
        let c = calls(plan(&beh("a:policy=double_vote"), &r));
        assert_eq!(c.len(), 2);
        assert_eq!(
            calls(plan(&beh("a:policy=bad_vote"), &r))[0].1["agent_id"],
            "agent99"
        );
        assert_eq!(
            calls(plan(&beh("a:policy=copy"), &r))[0].1["content"],
            "copied text"
        );
        assert_eq!(calls(plan(&beh("a:policy=answer"), &r))[0].0, "new_answer");
        let p = plan(&beh("a:policy=no_tool,reasoning=on"), &r);
        assert!(matches!(p.reply, Reply::Text(t) if t.starts_with("[simulated] ")));
        assert!(p.reasoning.unwrap().starts_with("[simulated reasoning]"));
    }
}
