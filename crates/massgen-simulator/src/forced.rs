//! A forced tool call: the request's `tool_choice` (or Gemini's `toolConfig`) demands one,
//! and the simulated model obeys as the real APIs do.
//!
//! | format | named tool | any tool |
//! |---|---|---|
//! | Chat Completions | `{"type":"function","function":{"name":N}}` | `"required"` |
//! | Responses | `{"type":"function","name":N}` | `"required"` |
//! | both | `{"type":"allowed_tools", mode "required", one tool}` | … several tools |
//! | Anthropic | `{"type":"tool","name":N}` | `{"type":"any"}` |
//! | Gemini | `functionCallingConfig {mode: ANY, allowedFunctionNames: [N]}` | `mode: ANY` |
//!
//! A reply that already calls allowed tools stays (a coordination turn that must call a
//! tool may still vote); otherwise the reply becomes one call: of the named tool, or of
//! the first allowed tool that is not a workflow tool (`new_answer`/`vote` only when no
//! other is offered). A client tool's arguments are the minimal instance of its
//! parameters schema ([`crate::instance`]). Naming a tool that is not offered is a 400,
//! as upstream.

use serde_json::Value;

use crate::instance;
use crate::plan::{BadRequest, Offered, Reply, ToolCall};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forced {
    /// This tool, by name.
    Tool(String),
    /// One of the offered tools; `allowed` narrows the choice when it is not empty.
    Any(Vec<String>),
}

impl Forced {
    /// From any wire format's request body; `None` when no call is forced (`auto`,
    /// `none`, absent, or a shape this simulator does not know).
    pub fn from_body(v: &Value) -> Option<Self> {
        if let Some(choice) = v.get("tool_choice") {
            return from_choice(choice);
        }
        let config = v
            .pointer("/toolConfig/functionCallingConfig")
            .or_else(|| v.pointer("/tool_config/function_calling_config"))?;
        let mode = config.get("mode").and_then(Value::as_str)?;
        if !mode.eq_ignore_ascii_case("any") {
            return None;
        }
        let names = config
            .get("allowedFunctionNames")
            .or_else(|| config.get("allowed_function_names"));
        Some(narrowed(names_of(names)))
    }

    /// A choice naming a tool the request does not offer is refused, as upstream.
    pub fn check(&self, offered: &Offered) -> Result<(), BadRequest> {
        let names = match self {
            Self::Tool(name) => std::slice::from_ref(name),
            Self::Any(names) => names.as_slice(),
        };
        match names
            .iter()
            .find(|n| !offered.tools.iter().any(|(t, _)| t == *n))
        {
            Some(missing) => Err(BadRequest {
                message: format!(
                    "[simulated] tool_choice names the tool '{missing}', which is not in tools"
                ),
                param: Some("tool_choice"),
            }),
            None => Ok(()),
        }
    }

    fn allows(&self, name: &str) -> bool {
        match self {
            Self::Tool(wanted) => wanted == name,
            Self::Any(names) => names.is_empty() || names.iter().any(|n| n == name),
        }
    }

    /// `reply` made to obey; `answer` and `vote` make the workflow calls when one of them
    /// is the tool to call.
    pub fn honour(
        &self,
        reply: Reply,
        offered: &Offered,
        answer: impl FnOnce() -> ToolCall,
        vote: impl FnOnce() -> ToolCall,
    ) -> Reply {
        let allowed =
            |name: &str| self.allows(name) && offered.tools.iter().any(|(t, _)| t == name);
        if let Reply::Tools(calls) = &reply
            && !calls.is_empty()
            && calls.iter().all(|c| allowed(&c.name))
        {
            return reply;
        }
        let workflow = |name: &str| name == "new_answer" || name == "vote";
        let candidates = || offered.tools.iter().filter(|(name, _)| allowed(name));
        let chosen = candidates()
            .find(|(name, _)| !workflow(name))
            .or_else(|| candidates().next());
        let call = match chosen {
            None => return reply,
            Some((name, _)) if name == "new_answer" => answer(),
            Some((name, _)) if name == "vote" => vote(),
            Some((name, parameters)) => ToolCall {
                name: name.clone(),
                arguments: instance::arguments(parameters, false).to_string(),
            },
        };
        Reply::Tools(vec![call])
    }
}

fn from_choice(choice: &Value) -> Option<Forced> {
    let kind = match choice {
        Value::String(s) => s.as_str(),
        Value::Object(o) => o.get("type").and_then(Value::as_str)?,
        _ => return None,
    };
    match kind {
        "required" | "any" => Some(Forced::Any(Vec::new())),
        "function" | "tool" => name_of(choice).map(Forced::Tool),
        "allowed_tools" => {
            // Chat Completions nests the list under `allowed_tools`; Responses does not.
            let spec = choice.get("allowed_tools").unwrap_or(choice);
            if spec.get("mode").and_then(Value::as_str) != Some("required") {
                return None;
            }
            let names = spec
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(name_of)
                .collect();
            Some(narrowed(names))
        }
        _ => None,
    }
}

/// One allowed name is that tool; none or several, any of them.
fn narrowed(names: Vec<String>) -> Forced {
    match <[String; 1]>::try_from(names) {
        Ok([one]) => Forced::Tool(one),
        Err(names) => Forced::Any(names),
    }
}

/// `function.name` (Chat Completions) or `name` (the others).
fn name_of(v: &Value) -> Option<String> {
    v.pointer("/function/name")
        .or_else(|| v.get("name"))
        .and_then(Value::as_str)
        .map(String::from)
}

fn names_of(list: Option<&Value>) -> Vec<String> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(String::from)
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_format_spells_it() {
        let f = |v: Value| Forced::from_body(&v);
        let tool = |n: &str| Some(Forced::Tool(n.into()));
        let any = Some(Forced::Any(Vec::new()));
        assert_eq!(f(json!({"tool_choice": "required"})), any);
        assert_eq!(f(json!({"tool_choice": "auto"})), None);
        assert_eq!(f(json!({"tool_choice": "none"})), None);
        assert_eq!(
            f(json!({"tool_choice": {"type": "function", "function": {"name": "w"}}})),
            tool("w")
        );
        assert_eq!(
            f(json!({"tool_choice": {"type": "function", "name": "w"}})),
            tool("w")
        );
        assert_eq!(
            f(json!({"tool_choice": {"type": "tool", "name": "w"}})),
            tool("w")
        );
        assert_eq!(f(json!({"tool_choice": {"type": "any"}})), any);
        assert_eq!(f(json!({"tool_choice": {"type": "auto"}})), None);
        assert_eq!(
            f(
                json!({"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "required",
                "tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "b"}}]}}})
            ),
            Some(Forced::Any(vec!["a".into(), "b".into()]))
        );
        assert_eq!(
            f(json!({"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}})),
            None
        );
        assert_eq!(
            f(json!({"toolConfig": {"functionCallingConfig": {"mode": "ANY"}}})),
            any
        );
        assert_eq!(
            f(
                json!({"toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["w"]}}})
            ),
            tool("w")
        );
        assert_eq!(
            f(json!({"toolConfig": {"functionCallingConfig": {"mode": "AUTO"}}})),
            None
        );
    }

    fn offered(names: &[&str]) -> Offered {
        let mut o = Offered::default();
        for name in names {
            o.add(name, Some(&json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})));
        }
        o
    }

    fn call(name: &str) -> ToolCall {
        ToolCall {
            name: name.into(),
            arguments: "{}".into(),
        }
    }

    fn names(reply: &Reply) -> Vec<String> {
        match reply {
            Reply::Tools(calls) => calls.iter().map(|c| c.name.clone()).collect(),
            Reply::Text(t) => vec![format!("text: {t}")],
        }
    }

    #[test]
    fn text_becomes_a_call_and_allowed_calls_stay() {
        let o = offered(&["vote", "search", "lookup"]);
        let text = || Reply::Text("hi".into());
        let any = Forced::Any(Vec::new());
        let r = any.honour(text(), &o, || call("new_answer"), || call("vote"));
        assert_eq!(names(&r), ["search"]);
        let Reply::Tools(calls) = &r else { panic!() };
        assert_eq!(calls[0].arguments, r#"{"q":"simulated"}"#);
        // A vote is a call of an offered tool: it stays.
        let voted = Reply::Tools(vec![call("vote")]);
        assert_eq!(
            names(&any.honour(voted.clone(), &o, || call("x"), || call("y"))),
            ["vote"]
        );
        // A named tool replaces any other call.
        let named = Forced::Tool("lookup".into());
        assert_eq!(
            names(&named.honour(voted, &o, || call("x"), || call("y"))),
            ["lookup"]
        );
        // Only workflow tools offered: the workflow call.
        let o = offered(&["new_answer"]);
        assert_eq!(
            names(&any.honour(text(), &o, || call("new_answer"), || call("vote"))),
            ["new_answer"]
        );
        // Nothing offered: nothing to call.
        assert_eq!(
            names(&any.honour(text(), &Offered::default(), || call("a"), || call("b"))),
            ["text: hi"]
        );
    }

    #[test]
    fn a_missing_named_tool_is_refused() {
        let o = offered(&["search"]);
        assert!(Forced::Tool("search".into()).check(&o).is_ok());
        let e = Forced::Tool("nope".into()).check(&o).unwrap_err();
        assert!(e.message.contains("'nope'"), "{}", e.message);
        assert!(Forced::Any(Vec::new()).check(&Offered::default()).is_ok());
    }
}
