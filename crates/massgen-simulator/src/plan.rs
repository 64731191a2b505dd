//! From a request and a [`Behaviour`] to what the simulated model says.

use serde_json::{Value, json};

use super::behaviour::{Behaviour, Policy, VoteChoice};
use super::forced::Forced;
use super::instance;
use super::text;
use super::truth::Truth;

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
    /// Tool results the model has been given: the `<tool_results>` block of a massgen
    /// prompt, or the content of `role: "tool"` messages after the last user message.
    pub tool_results: Option<String>,
    /// The names of the tools whose results are in: the `result of NAME [id]` lines of
    /// the `<tool_results>` block, or the calls a client's own `role: "tool"` messages
    /// answer.
    pub answered: Vec<String>,
    /// The question's `[sim:args={…}]`: the arguments `policy=client_tool` calls its tool
    /// with, instead of ones made from the tool's schema.
    pub call_args: Option<Value>,
    /// The JSON the reply must be (structured output), when the request asks for it.
    pub json: Option<JsonWanted>,
    /// The tool call the request's `tool_choice` demands, if any.
    pub forced: Option<Forced>,
}

/// A structured-output request: JSON of `schema` (`None`: any object), broken on demand.
#[derive(Debug, Clone, Default)]
pub struct JsonWanted {
    pub schema: Option<Value>,
    pub broken: bool,
}

impl JsonWanted {
    /// From Chat Completions' `response_format`.
    pub fn from_response_format(format: Option<&Value>) -> Option<Self> {
        let format = format?;
        match format.get("type").and_then(Value::as_str)? {
            "json_object" => Some(Self::default()),
            "json_schema" => Some(Self {
                schema: format.pointer("/json_schema/schema").cloned(),
                broken: false,
            }),
            _ => None,
        }
    }

    /// From any format's structured-output field: Chat Completions' `response_format`,
    /// Responses' `text.format`, Anthropic's `output_config.format` (or the beta
    /// `output_format`), Gemini's `generationConfig.responseMimeType`/`responseSchema`.
    pub fn from_body(v: &Value) -> Option<Self> {
        if let Some(wanted) = Self::from_response_format(v.get("response_format")) {
            return Some(wanted);
        }
        let schema_format = |f: &Value| match f.get("type").and_then(Value::as_str) {
            Some("json_object") => Some(Self::default()),
            Some("json_schema") => Some(Self {
                schema: f.get("schema").cloned(),
                broken: false,
            }),
            _ => None,
        };
        for pointer in ["/text/format", "/output_config/format", "/output_format"] {
            if let Some(wanted) = v.pointer(pointer).and_then(schema_format) {
                return Some(wanted);
            }
        }
        let generation = v.get("generationConfig")?;
        (generation.get("responseMimeType").and_then(Value::as_str) == Some("application/json"))
            .then(|| Self {
                schema: generation.get("responseSchema").cloned(),
                broken: false,
            })
    }

    /// Sets `broken` from the prompt's markers; `first_time(key)` says whether a request
    /// with this key is the first one (for `[sim:invalid_json_once]`).
    pub fn mark(&mut self, model: &str, last_user: &str, first_time: impl FnOnce(&str) -> bool) {
        use std::hash::{Hash, Hasher};
        if last_user.contains(instance::INVALID) {
            self.broken = true;
        } else if last_user.contains(instance::INVALID_ONCE) {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            last_user.hash(&mut hasher);
            self.broken = first_time(&format!("{model}\u{1}json_once\u{1}{:x}", hasher.finish()));
        }
    }
}

/// Which workflow tools the request offers.
#[derive(Debug, Clone, Default)]
pub struct Offered {
    pub any_tool: bool,
    pub new_answer: bool,
    /// `Some(enum of agent_id)` when `vote` is offered.
    pub vote: Option<Vec<String>>,
    /// The first offered tool that is not a workflow tool: name and parameters schema.
    pub client: Option<(String, Value)>,
    /// Every offered tool with a name, in order: name and parameters schema (`Null`: none).
    pub tools: Vec<(String, Value)>,
}

impl Offered {
    /// Records one offered tool, in any wire format (an empty name: a tool of another
    /// kind, such as a hosted one, that only counts as "some tool").
    pub fn add(&mut self, name: &str, parameters: Option<&Value>) {
        self.any_tool = true;
        if name.is_empty() {
            return;
        }
        let schema = parameters.cloned().unwrap_or(Value::Null);
        match name {
            "new_answer" => self.new_answer = true,
            "vote" => self.vote = Some(vote_labels(parameters)),
            _ if self.client.is_none() => self.client = Some((name.to_string(), schema.clone())),
            _ => {}
        }
        self.tools.push((name.to_string(), schema));
    }
}

/// A request the simulator refuses with 400 before doing anything.
#[derive(Debug, Clone)]
pub struct BadRequest {
    pub message: String,
    pub param: Option<&'static str>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
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
/// Claude Code's tool search: the tool that loads deferred tools (`select:NAME`).
pub const TOOL_SEARCH: &str = "ToolSearch";
/// The question marker whose JSON object is the arguments of a `client_tool` call.
pub const ARGS_MARKER: &str = "[sim:args=";
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
    let tool_results = prompt_tool_results(&last_user).or_else(|| direct_tool_results(messages));
    let answered = match prompt_tool_results(&last_user) {
        Some(_) => prompt_answered(&last_user),
        None => direct_answered(messages),
    };
    let call_args = call_args(&last_user)?;
    let offered = offered(v.get("tools"));
    let forced = Forced::from_body(&v);
    if let Some(forced) = &forced {
        forced.check(&offered)?;
    }
    Ok(Request {
        tool_results,
        answered,
        call_args,
        forced,
        model: model.to_string(),
        stream: v.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_usage: v
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        offered,
        prompt_tokens: chars.div_ceil(4) as u64,
        last_user,
        json: JsonWanted::from_body(&v),
    })
}

/// `role: "tool"` contents after the last user message, joined (a client's own tool loop).
/// The `<tool_results>` block of a massgen prompt, when the last user message has one.
pub fn prompt_tool_results(last_user: &str) -> Option<String> {
    text::block(last_user, "<tool_results>", "</tool_results>").map(|b| b.trim().to_string())
}

/// The tools named by the `result of NAME [id]` lines of the `<tool_results>` block.
pub fn prompt_answered(last_user: &str) -> Vec<String> {
    let Some(block) = prompt_tool_results(last_user) else {
        return Vec::new();
    };
    block
        .lines()
        .filter_map(|line| line.strip_prefix("result of "))
        .filter_map(|rest| rest.split_once(" [").map(|(name, _)| name.to_string()))
        .collect()
}

/// The question's `[sim:args={…}]` object; a marker not followed by a JSON object is a 400.
pub fn call_args(last_user: &str) -> Result<Option<Value>, BadRequest> {
    let Some(at) = last_user.find(ARGS_MARKER) else {
        return Ok(None);
    };
    let rest = &last_user[at + ARGS_MARKER.len()..];
    match serde_json::Deserializer::from_str(rest)
        .into_iter::<Value>()
        .next()
    {
        Some(Ok(args @ Value::Object(_))) => Ok(Some(args)),
        _ => Err(BadRequest {
            message: format!("{ARGS_MARKER}…] must hold a JSON object, the tool call's arguments"),
            param: Some("messages"),
        }),
    }
}

/// The names of the calls that `role: "tool"` messages after the last user message answer.
fn direct_answered(messages: &[Value]) -> Vec<String> {
    let Some(last_user) = messages
        .iter()
        .rposition(|m| m.get("role").and_then(Value::as_str) == Some("user"))
    else {
        return Vec::new();
    };
    let after = &messages[last_user..];
    let names: std::collections::HashMap<&str, &str> = after
        .iter()
        .filter_map(|m| m.get("tool_calls").and_then(Value::as_array))
        .flatten()
        .filter_map(|c| {
            let id = c.get("id").and_then(Value::as_str)?;
            Some((id, c.pointer("/function/name").and_then(Value::as_str)?))
        })
        .collect();
    after
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .filter_map(|m| m.get("tool_call_id").and_then(Value::as_str))
        .filter_map(|id| names.get(id).map(|n| n.to_string()))
        .collect()
}

fn direct_tool_results(messages: &[Value]) -> Option<String> {
    let role = |m: &Value| m.get("role").and_then(Value::as_str).map(str::to_owned);
    let last_user = messages
        .iter()
        .rposition(|m| role(m).as_deref() == Some("user"))?;
    let results: Vec<String> = messages[last_user..]
        .iter()
        .filter(|m| role(m).as_deref() == Some("tool"))
        .map(|m| content_text(m.get("content")))
        .collect();
    (!results.is_empty()).then(|| results.join("; "))
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
        let name = tool.pointer("/function/name").and_then(Value::as_str);
        o.add(
            name.unwrap_or_default(),
            tool.pointer("/function/parameters"),
        );
    }
    o
}

/// The labels a `vote` tool's parameter schema offers (`agent_id`'s enum), in every wire
/// format's tool shape.
pub fn vote_labels(parameters: Option<&Value>) -> Vec<String> {
    parameters
        .and_then(|p| p.pointer("/properties/agent_id/enum"))
        .and_then(Value::as_array)
        .map(|e| {
            e.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// The plan of a one-off request: every `accuracy` draw is the pair's first (draw 0).
/// A server numbers the draws with [`plan_with`].
pub fn plan(b: &Behaviour, req: &Request) -> Plan {
    plan_with(b, req, &|_| 0)
}

/// The plan; `next_draw(key)` says how many `accuracy` draws this simulator instance
/// already made for `key` (and counts the one being made).
pub fn plan_with(b: &Behaviour, req: &Request, next_draw: &dyn Fn(&str) -> u64) -> Plan {
    // The full model string and the prompt seed the text: different agents differ, and
    // the same agent writes a new answer when the answer set it sees has changed.
    let seed = format!("{}\n{}", req.model, req.last_user);
    let question = text::question_of(&req.last_user);
    let o = &req.offered;
    let truth = Truth::new(b, &req.model, &question, &req.last_user, next_draw);
    let can_vote = o.vote.is_some();
    let answer = || new_answer(truth.answer(text::answer(&seed, &question, b.words)));
    let vote = || {
        let labels = o.vote.as_deref().unwrap_or(&[]);
        vote_call(
            &truth
                .vote(labels)
                .unwrap_or_else(|| pick_label(&b.vote, labels)),
        )
    };
    let results = req.tool_results.as_deref();
    let with_results = |text: String| match results {
        Some(r) => format!("{text} Tool results used: {}", one_line(r)),
        None => text,
    };
    // `quote_results`: the text also quotes the tool results (before any `Answer:` line,
    // which must stay last).
    let plain = |quote_results: bool| {
        let quoted = |text: String| {
            if quote_results {
                with_results(text)
            } else {
                text
            }
        };
        if let (Some(json), false) = (&req.json, o.any_tool) {
            return Reply::Text(quoted(instance::answer(json.schema.as_ref(), json.broken)));
        }
        let text = if o.any_tool {
            text::answer(&seed, &question, b.words)
        } else {
            text::final_answer(&seed, &question, b.words)
        };
        let text = quoted(text);
        match truth.restated(o) {
            Some(line) => Reply::Text(text + &line),
            None => Reply::Text(truth.answer(text)),
        }
    };
    let tools = |calls: Vec<ToolCall>| Reply::Tools(calls);
    let next_call = match b.policy {
        Policy::ClientTool => client_call(b, req),
        _ => None,
    };
    let reply = match b.policy {
        Policy::ClientTool if can_vote => tools(vec![vote()]),
        Policy::ClientTool if next_call.is_some() => tools(next_call.into_iter().collect()),
        Policy::ClientTool if results.is_some() && o.new_answer => tools(vec![new_answer(
            truth.answer(with_results(text::answer(&seed, &question, b.words))),
        )]),
        Policy::ClientTool if results.is_some() => plain(true),
        Policy::NoTool => plain(false),
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
        _ => plain(false),
    };
    // The misbehaving policies keep misbehaving (like an upstream that ignores
    // `tool_choice`); every other one obeys a forced call.
    let obeys = !matches!(
        b.policy,
        Policy::NoTool | Policy::BadVote | Policy::DoubleVote
    );
    let reply = match &req.forced {
        Some(forced) if obeys => forced.honour(reply, o, answer, vote),
        _ => reply,
    };
    Plan {
        reasoning: b.reasoning.then(|| text::reasoning(&seed, &question)),
        reply,
    }
}

/// The client tool `policy=client_tool` calls next, if any. Before any result: the first
/// offered tool whose name starts with `call=` (else the first client tool). With results
/// in: only a `call=` tool without a result yet (one a tool search has just loaded), so a
/// loop ends. A `call=` tool that is not offered, with Claude Code's `ToolSearch` offered,
/// is searched for first (`select:PREFIX`), as a model does with a deferred tool. The
/// question's `[sim:args={…}]` are the call's arguments, else they are made from its schema.
fn client_call(b: &Behaviour, req: &Request) -> Option<ToolCall> {
    let o = &req.offered;
    let results_in = req.tool_results.is_some();
    let done = |name: &str| req.answered.iter().any(|a| a == name);
    let wanted = b
        .call
        .as_deref()
        .map(|prefix| (prefix, o.tools.iter().find(|(n, _)| n.starts_with(prefix))));
    let (name, params) = match wanted {
        Some((_, Some(tool))) if !(results_in && done(&tool.0)) => tool.clone(),
        Some((prefix, None))
            if o.tools.iter().any(|(n, _)| n == TOOL_SEARCH) && !done(TOOL_SEARCH) =>
        {
            return Some(ToolCall {
                name: TOOL_SEARCH.to_string(),
                arguments: json!({ "query": format!("select:{prefix}") }).to_string(),
            });
        }
        _ if results_in => return None,
        _ => o.client.clone()?,
    };
    let arguments = match &req.call_args {
        Some(args) => args.clone(),
        None => instance::arguments(&params, true),
    };
    Some(ToolCall {
        arguments: arguments.to_string(),
        name,
    })
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
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
        name: "new_answer".into(),
        arguments: json!({ "content": content }).to_string(),
    }
}

fn vote_call(label: &str) -> ToolCall {
    ToolCall {
        name: "vote".into(),
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

    #[test]
    fn client_tool_policy_calls_then_uses_results() {
        let weather = json!({"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}, "days": {"type": "integer"}}}}});
        let mut tools = workflow(&[]);
        tools.as_array_mut().unwrap().push(weather.clone());
        let b = beh("a:policy=client_tool");
        let c = calls(plan(
            &b,
            &request(tools.clone(), "<original_message>Q?</original_message>"),
        ));
        assert_eq!(c[0].0, "get_weather");
        assert_eq!(c[0].1, json!({"city": "simulated", "unit": "c", "days": 1}));
        // With results in the prompt it answers, quoting them.
        let prompt = "<original_message>Q?</original_message>\n<tool_results>\nresult of get_weather [c1]: 18C sunny\n</tool_results>";
        let c = calls(plan(&b, &request(tools, prompt)));
        assert_eq!(c[0].0, "new_answer");
        assert!(c[0].1["content"].as_str().unwrap().contains("18C sunny"));
        // A client's own loop: tool messages after the user message.
        let body = json!({"model": "a:policy=client_tool", "tools": [weather], "messages": [
            {"role": "user", "content": "Q?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "rainy"}]});
        let req = parse_request(body.to_string().as_bytes()).unwrap();
        assert!(matches!(plan(&b, &req).reply, Reply::Text(t) if t.contains("rainy")));
        // `call=PREFIX` picks the first tool whose name starts so (else the first).
        let mut two = workflow(&[]);
        two.as_array_mut().unwrap().push(weather.clone());
        two.as_array_mut().unwrap().push(json!({"type": "function",
            "function": {"name": "mcp__gh__search", "parameters": {"type": "object"}}}));
        let q = "<original_message>Q?</original_message>";
        let pick = |model: &str| {
            calls(plan(&beh(model), &request(two.clone(), q)))[0]
                .0
                .clone()
        };
        assert_eq!(pick("a:policy=client_tool,call=mcp__"), "mcp__gh__search");
        assert_eq!(pick("a:policy=client_tool,call=nothing"), "get_weather");
    }

    #[test]
    fn a_deferred_tool_is_searched_for_then_called_once_loaded() {
        let tool = |name: &str| {
            json!({"type": "function", "function": {"name": name, "parameters": {"type": "object",
                "properties": {"query": {"type": "string"}}, "required": ["query"]}}})
        };
        let b = beh("a:policy=client_tool,call=mcp__massgen__list_panels");
        let q = "<original_message>Q?</original_message>";
        let mut before = workflow(&[]);
        before.as_array_mut().unwrap().push(tool("Bash"));
        before.as_array_mut().unwrap().push(tool("ToolSearch"));
        let c = calls(plan(&b, &request(before.clone(), q)));
        assert_eq!(
            c,
            [(
                "ToolSearch".to_string(),
                json!({"query": "select:mcp__massgen__list_panels"})
            )]
        );
        // Loaded: the tool is offered and has no result yet, so it is called now.
        let mut after = before.clone();
        after
            .as_array_mut()
            .unwrap()
            .push(tool("mcp__massgen__list_panels"));
        let searched = "<original_message>Q?</original_message>\n<tool_results>\ncalled ToolSearch(query=select:mcp__massgen__list_panels) [t1]\nresult of ToolSearch [t1]: [tool mcp__massgen__list_panels loaded: it is offered from now on]\n</tool_results>";
        let c = calls(plan(&b, &request(after.clone(), searched)));
        assert_eq!(c[0].0, "mcp__massgen__list_panels");
        // Its result in too: the answer, quoting both.
        let both = searched.replace(
            "</tool_results>",
            "result of mcp__massgen__list_panels [t2]: massgen, massgen/solo\n</tool_results>",
        );
        let c = calls(plan(&b, &request(after, &both)));
        assert_eq!(c[0].0, "new_answer");
        assert!(c[0].1["content"].as_str().unwrap().contains("massgen/solo"));
        // A search that loaded nothing is not repeated: the agent answers.
        let found_nothing = "<original_message>Q?</original_message>\n<tool_results>\nresult of ToolSearch [t1]: No matching deferred tools found\n</tool_results>";
        let c = calls(plan(&b, &request(before, found_nothing)));
        assert_eq!(c[0].0, "new_answer");
    }

    #[test]
    fn the_questions_args_marker_is_the_calls_arguments() {
        let read = json!([{"type": "function", "function": {"name": "Read", "parameters":
            {"type": "object", "properties": {"file_path": {"type": "string"},
            "pages": {"type": "string"}}, "required": ["file_path"]}}}]);
        let b = beh("a:policy=client_tool,call=Read");
        let q = r#"Look at it [sim:args={"file_path": "pixel.png"}] please"#;
        let c = calls(plan(&b, &request(read.clone(), q)));
        assert_eq!(c, [("Read".to_string(), json!({"file_path": "pixel.png"}))]);
        for bad in [
            "[sim:args=pixel.png]",
            "[sim:args=[1]]",
            "[sim:args={\"a\":",
        ] {
            let body = json!({"model": "m", "tools": read,
                "messages": [{"role": "user", "content": bad}]});
            let e = parse_request(body.to_string().as_bytes()).unwrap_err();
            assert!(e.message.contains("JSON object"), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn a_clients_own_loop_ends_once_the_called_tool_answered() {
        let b = beh("a:policy=client_tool,call=get_weather");
        let body = json!({"model": "m", "tools": [{"type": "function", "function":
            {"name": "get_weather", "parameters": {"type": "object"}}}], "messages": [
            {"role": "user", "content": "Q?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "rainy"}]});
        let req = parse_request(body.to_string().as_bytes()).unwrap();
        assert_eq!(req.answered, ["get_weather"]);
        assert!(matches!(plan(&b, &req).reply, Reply::Text(t) if t.contains("rainy")));
    }

    #[test]
    fn a_forced_call_is_obeyed_in_coordination_and_by_clients() {
        let search = json!({"type": "function", "function": {"name": "search", "parameters":
            {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer",
            "minimum": 5}}, "required": ["q", "n"]}}});
        let forced = |tools: Value, choice: Value, model: &str| {
            let body = json!({"model": model, "tools": tools, "tool_choice": choice,
                "messages": [{"role": "user", "content": "<original_message>Q?</original_message>"}]});
            let req = parse_request(body.to_string().as_bytes()).unwrap();
            plan(&beh(model), &req)
        };
        // A client's one tool, forced by name or `required`: a valid call of it.
        for choice in [
            json!("required"),
            json!({"type": "function", "function": {"name": "search"}}),
        ] {
            let c = calls(forced(json!([search.clone()]), choice, "a"));
            assert_eq!(
                c,
                [("search".to_string(), json!({"q": "simulated", "n": 5}))]
            );
        }
        // A coordination turn that must call (no `new_answer`): the client tool, or a vote
        // once there are answers to vote for.
        let mut tools = workflow(&["agent1"]);
        tools.as_array_mut().unwrap().remove(0);
        tools.as_array_mut().unwrap().push(search.clone());
        assert_eq!(calls(forced(tools, json!("required"), "a"))[0].0, "vote");
        // A faulty policy keeps ignoring it.
        let p = forced(
            json!([search.clone()]),
            json!("required"),
            "a:policy=no_tool",
        );
        assert!(matches!(p.reply, Reply::Text(_)));
        // Naming a tool that is not offered is a 400.
        let body = json!({"model": "a", "tools": [search], "messages": [],
            "tool_choice": {"type": "function", "function": {"name": "other"}}});
        let e = parse_request(body.to_string().as_bytes()).unwrap_err();
        assert_eq!(e.param, Some("tool_choice"));
    }
}
