//! The questions of a run: a JSONL file, one item a line, all read and checked before any
//! upstream call, so a bad line costs nothing. Every error names the line.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::regular::{self, Links};

/// The most a data file may hold (bytes, lines): a run is paid per line, and the whole file
/// is held in memory.
pub const MAX_DATA_BYTES: u64 = 64 * 1024 * 1024;
pub const MAX_ITEMS: usize = 100_000;

/// What an item asks.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// `question`: one user message.
    Question(String),
    /// `messages`: a conversation in Chat Completions' shape (system, user, assistant, …),
    /// read by the Chat Completions door's own parser.
    Messages(Vec<Value>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// Its `id`, else its line number (from 1).
    pub id: String,
    /// Line number, from 1 (for messages).
    pub line: usize,
    pub prompt: Prompt,
    /// The reference answer, as the data gives it (string, number, list of accepted
    /// answers, any JSON for the JSON Schema grader).
    pub answer: Option<Value>,
}

impl Item {
    /// The question as a grader or the judge shows it: the question, or the conversation's
    /// last user message.
    pub fn question_text(&self) -> String {
        match &self.prompt {
            Prompt::Question(q) => q.clone(),
            Prompt::Messages(messages) => messages
                .iter()
                .rev()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
                .map(|m| match m.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => parts
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join("\n"),
                    _ => String::new(),
                })
                .unwrap_or_default(),
        }
    }
}

/// Reads and checks `path` (a regular file: a FIFO or a device is refused before it is
/// opened); `needs_answer` says whether the grader needs every line's `answer`.
pub fn read(path: &Path, needs_answer: Option<&str>) -> Result<Vec<Item>, String> {
    let shown = path.display();
    let text = regular::read(path, Links::Follow, MAX_DATA_BYTES).map_err(|e| match e {
        regular::Error::TooLarge { .. } => format!("--data {shown}: {e} (split the file)"),
        e => format!("--data {shown}: {e}"),
    })?;
    // Some editors start UTF-8 files with a byte-order mark; JSON has none.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    parse(text, needs_answer).map_err(|e| format!("--data {shown}: {e}"))
}

/// The items of `text`; blank lines are skipped (they keep their numbers).
pub fn parse(text: &str, needs_answer: Option<&str>) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    let mut ids: HashMap<String, usize> = HashMap::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        if items.len() == MAX_ITEMS {
            return Err(format!(
                "line {line}: more than {MAX_ITEMS} items (split the file)"
            ));
        }
        let value: Value =
            serde_json::from_str(raw).map_err(|e| format!("line {line}: not JSON: {e}"))?;
        let Value::Object(object) = value else {
            return Err(format!(
                "line {line}: an item is a JSON object with \"question\" (or \"messages\")"
            ));
        };
        let item = item(line, object, needs_answer)?;
        if let Some(first) = ids.insert(item.id.clone(), line) {
            return Err(format!(
                "line {line}: id {:?} is already the id of line {first}",
                item.id
            ));
        }
        items.push(item);
    }
    if items.is_empty() {
        return Err("no items (one JSON object a line)".to_string());
    }
    Ok(items)
}

fn item(line: usize, mut object: Map<String, Value>, needs: Option<&str>) -> Result<Item, String> {
    for key in object.keys() {
        if !matches!(key.as_str(), "id" | "question" | "messages" | "answer") {
            return Err(format!(
                "line {line}: unknown key {key:?} (an item has \"question\" or \"messages\", and \"answer\" and \"id\")"
            ));
        }
    }
    let id = match object.remove("id") {
        None | Some(Value::Null) => line.to_string(),
        Some(Value::String(s)) if !s.trim().is_empty() && s.len() <= 256 => s,
        Some(Value::Number(n)) => n.to_string(),
        Some(_) => {
            return Err(format!(
                "line {line}: \"id\" must be a non-empty string of at most 256 bytes, or a number"
            ));
        }
    };
    let prompt = match (object.remove("question"), object.remove("messages")) {
        (Some(Value::String(q)), None) if !q.trim().is_empty() => Prompt::Question(q),
        (Some(Value::String(_)), None) => {
            return Err(format!("line {line}: \"question\" is empty"));
        }
        (Some(_), None) => return Err(format!("line {line}: \"question\" must be a string")),
        (None, Some(Value::Array(m))) if !m.is_empty() => Prompt::Messages(m),
        (None, Some(_)) => {
            return Err(format!(
                "line {line}: \"messages\" must be a non-empty array of Chat Completions messages"
            ));
        }
        (Some(_), Some(_)) => {
            return Err(format!(
                "line {line}: give \"question\" or \"messages\", not both"
            ));
        }
        (None, None) => {
            return Err(format!(
                "line {line}: no \"question\" (or \"messages\") to ask"
            ));
        }
    };
    let answer = object.remove("answer").filter(|a| !a.is_null());
    if let (None, Some(grader)) = (&answer, needs) {
        return Err(format!(
            "line {line}: no \"answer\", which the {grader} grader compares with"
        ));
    }
    Ok(Item {
        id,
        line,
        prompt,
        answer,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;

    #[test]
    fn items_take_ids_from_the_data_or_their_line() {
        let text = "{\"question\": \"Q1\", \"answer\": \"a\"}\n\n{\"id\": 7, \"messages\": [{\"role\": \"user\", \"content\": \"Q2\"}], \"answer\": 3}\n";
        let items = parse(text, Some("exact")).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].id, "1");
        assert_eq!(items[1].id, "7");
        assert_eq!(items[1].line, 3);
        assert_eq!(items[1].question_text(), "Q2");
    }

    #[test]
    fn every_error_names_its_line() {
        let cases = [
            (
                "{\"question\": \"Q\"}",
                "line 1: no \"answer\", which the exact grader",
            ),
            ("[1]", "line 1: an item is a JSON object"),
            ("{\"answer\": 1}", "line 1: no \"question\""),
            (
                "{\"question\": \" \", \"answer\": 1}",
                "line 1: \"question\" is empty",
            ),
            (
                "{\"question\": \"Q\", \"messages\": [{}], \"answer\": 1}",
                "not both",
            ),
            (
                "{\"question\": \"Q\", \"answr\": 1}",
                "unknown key \"answr\"",
            ),
            (
                "{\"id\": \"a\", \"question\": \"Q\", \"answer\": 1}\n{\"id\": \"a\", \"question\": \"R\", \"answer\": 2}",
                "line 2: id \"a\" is already the id of line 1",
            ),
            ("{\"question\": ", "line 1: not JSON"),
            ("\n\n", "no items"),
        ];
        for (text, wanted) in cases {
            let error = parse(text, Some("exact")).unwrap_err();
            assert!(error.contains(wanted), "{text}: {error}");
        }
        // Without a grader that needs it, `answer` is optional.
        assert!(parse("{\"question\": \"Q\"}", None).is_ok());
    }
}
