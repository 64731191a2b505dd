//! The questions of a run: a JSONL file, one item a line, all read and checked before any
//! upstream call, so a bad line costs nothing. Every error names the line.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::regular::{self, Links};
use crate::app::evals::ItemResult;

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
    /// The keys of the line eval does not read itself, kept with its results.
    pub metadata: Map<String, Value>,
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

/// The keys that may give an item's question, and its reference answer: the first of each
/// list is eval's own name, the others what other eval tools call it. An item gives at
/// most one of each list.
const QUESTION_KEYS: [&str; 3] = ["question", "input", "prompt"];
const ANSWER_KEYS: [&str; 4] = ["answer", "target", "ideal", "expected"];

/// The one key of `names` that `object` holds (taken out of it), or an error naming both
/// when it holds two.
fn one_of(
    line: usize,
    object: &mut Map<String, Value>,
    names: &[&'static str],
) -> Result<Option<(&'static str, Value)>, String> {
    let mut found: Option<(&'static str, Value)> = None;
    for name in names {
        if let Some(value) = object.remove(*name) {
            if let Some((first, _)) = &found {
                return Err(format!(
                    "line {line}: give \"{first}\" or \"{name}\", not both (they are one field)"
                ));
            }
            found = Some((name, value));
        }
    }
    Ok(found)
}

fn item(line: usize, mut object: Map<String, Value>, needs: Option<&str>) -> Result<Item, String> {
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
    let question = one_of(line, &mut object, &QUESTION_KEYS)?;
    let prompt = match (question, object.remove("messages")) {
        (Some((_, Value::String(q))), None) if !q.trim().is_empty() => Prompt::Question(q),
        (Some((key, Value::String(_))), None) => {
            return Err(format!("line {line}: \"{key}\" is empty"));
        }
        // `input` (OpenAI's evals) and `prompt` may hold a conversation.
        (Some((key, Value::Array(m))), None) if key != "question" => messages(line, key, m)?,
        (Some((key, _)), None) => {
            let or_list = if key == "question" {
                ""
            } else {
                " (or a list of Chat Completions messages)"
            };
            return Err(format!("line {line}: \"{key}\" must be a string{or_list}"));
        }
        (None, Some(Value::Array(m))) => messages(line, "messages", m)?,
        (None, Some(_)) => {
            return Err(format!(
                "line {line}: \"messages\" must be a non-empty array of Chat Completions messages"
            ));
        }
        (Some((key, _)), Some(_)) => {
            return Err(format!(
                "line {line}: give \"{key}\" or \"messages\", not both"
            ));
        }
        (None, None) => {
            return Err(format!(
                "line {line}: no \"question\" (or \"messages\", \"input\", \"prompt\") to ask"
            ));
        }
    };
    let answer = one_of(line, &mut object, &ANSWER_KEYS)?.filter(|(_, a)| !a.is_null());
    if let Some(grader) = needs {
        match &answer {
            None => {
                return Err(format!(
                    "line {line}: no \"answer\" (or \"target\", \"ideal\", \"expected\"), which the {grader} grader compares with"
                ));
            }
            Some((key, value)) if blank(value) => {
                return Err(format!(
                    "line {line}: \"{key}\" is empty, and the {grader} grader compares with it"
                ));
            }
            Some(_) => {}
        }
    }
    Ok(Item {
        id,
        line,
        prompt,
        answer: answer.map(|(_, value)| value),
        metadata: metadata(line, object)?,
    })
}

fn messages(line: usize, key: &str, list: Vec<Value>) -> Result<Prompt, String> {
    if list.is_empty() {
        return Err(format!(
            "line {line}: \"{key}\" must be a non-empty array of Chat Completions messages"
        ));
    }
    Ok(Prompt::Messages(list))
}

/// A reference that says nothing: an empty (or white) string, or a list of only such.
fn blank(value: &Value) -> bool {
    match value {
        Value::String(s) => s.trim().is_empty(),
        Value::Array(list) => list.iter().all(blank),
        _ => false,
    }
}

/// The keys left once eval's own are taken: the item's metadata, kept with its results
/// (and what `--group-by` groups by). A `metadata` object's keys are taken as the item's
/// own, as other eval tools nest them.
fn metadata(line: usize, mut rest: Map<String, Value>) -> Result<Map<String, Value>, String> {
    let Some(Value::Object(nested)) = rest.get("metadata").cloned() else {
        return Ok(rest);
    };
    rest.remove("metadata");
    for (key, value) in nested {
        if rest.contains_key(&key) {
            return Err(format!(
                "line {line}: \"{key}\" is both a key of the item and of its \"metadata\""
            ));
        }
        rest.insert(key, value);
    }
    Ok(rest)
}

/// The items a run's results were graded on (`--regrade`, which has no data file): each
/// item's question, reference and metadata as its newest line keeps them, in the order the
/// items first appear. `line` is the item's newest line in `items.jsonl`.
pub fn from_results(results: &[ItemResult]) -> Result<Vec<Item>, String> {
    let mut items: Vec<Item> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (n, result) in results.iter().enumerate() {
        let Some(question) = result.question.clone() else {
            return Err(format!(
                "line {}: item {:?} keeps no question (an earlier version of massgen eval \
                 wrote it): rerun with --data and the panel's flags instead of --regrade",
                n + 1,
                result.item
            ));
        };
        let item = Item {
            id: result.item.clone(),
            line: n + 1,
            prompt: Prompt::Question(question),
            answer: result.reference.clone(),
            metadata: result.metadata.clone(),
        };
        match index.get(result.item.as_str()) {
            Some(&i) => items[i] = item,
            None => {
                index.insert(&result.item, items.len());
                items.push(item);
            }
        }
    }
    Ok(items)
}

/// Every item has a reference the grader can compare with (`--regrade`: the data's
/// reading of it is long past). Errors name the item's line in `items.jsonl`.
pub fn check_references(items: &[Item], grader: &str) -> Result<(), String> {
    for item in items {
        if item.answer.as_ref().is_none_or(blank) {
            return Err(format!(
                "line {}: item {:?} has no reference answer, which the {grader} grader compares with",
                item.line, item.id
            ));
        }
    }
    Ok(())
}

/// `items` in an order drawn from `seed` (Fisher-Yates over SplitMix64, both written out
/// here so one seed picks the same items on every platform and version).
pub fn shuffle(items: &mut [Item], seed: u64) {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for i in (1..items.len()).rev() {
        // The modulo's bias is below 2^-40 for any file eval reads (at most 100,000 items).
        let j = (next() % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

/// `--group-by KEY`: some item must have it in its metadata, else it groups nothing.
pub fn check_group_key(items: &[Item], key: &str) -> Result<(), String> {
    if items.iter().any(|item| item.metadata.contains_key(key)) {
        return Ok(());
    }
    let mut known: Vec<&str> = items
        .iter()
        .flat_map(|item| item.metadata.keys().map(String::as_str))
        .collect();
    known.sort_unstable();
    known.dedup();
    known.truncate(20);
    Err(if known.is_empty() {
        format!(
            "--group-by {key}: no item has metadata (keys beyond question, answer and id) to group by"
        )
    } else {
        format!("--group-by {key}: no item has the key {key:?} (their metadata keys: {known:?})")
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
                "which the exact grader compares with",
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
            // A key eval does not read is metadata, so a misspelt answer is no answer.
            (
                "{\"question\": \"Q\", \"answr\": 1}",
                "line 1: no \"answer\" (or \"target\"",
            ),
            (
                "{\"question\": \"Q\", \"input\": \"R\", \"answer\": 1}",
                "line 1: give \"question\" or \"input\", not both",
            ),
            (
                "{\"prompt\": \"Q\", \"answer\": 1, \"ideal\": 1}",
                "line 1: give \"answer\" or \"ideal\", not both",
            ),
            (
                "{\"prompt\": \"Q\", \"target\": \" \"}",
                "line 1: \"target\" is empty, and the exact grader compares with it",
            ),
            (
                "{\"question\": \"Q\", \"answer\": [\"\", \"\"]}",
                "line 1: \"answer\" is empty",
            ),
            (
                "{\"question\": [\"Q\"], \"answer\": 1}",
                "line 1: \"question\" must be a string",
            ),
            (
                "{\"input\": [], \"answer\": 1}",
                "line 1: \"input\" must be a non-empty array",
            ),
            (
                "{\"question\": \"Q\", \"answer\": 1, \"topic\": \"a\", \"metadata\": {\"topic\": \"b\"}}",
                "line 1: \"topic\" is both a key of the item and of its \"metadata\"",
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
        // Without a grader that needs it, `answer` is optional, and may be empty.
        assert!(parse("{\"question\": \"Q\"}", None).is_ok());
        assert!(parse("{\"question\": \"Q\", \"answer\": \"\"}", None).is_ok());
    }

    #[test]
    fn other_tools_names_and_unknown_keys_are_read() {
        let text = concat!(
            "{\"input\": \"Q1\", \"ideal\": \"a\", \"category\": \"geo\", \"difficulty\": 3}\n",
            "{\"prompt\": \"Q2\", \"target\": 2, \"metadata\": {\"category\": \"math\"}}\n",
            "{\"input\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"Q3\"}], \"expected\": [\"x\", \"y\"]}\n",
        );
        let items = parse(text, Some("exact")).unwrap();
        assert_eq!(items[0].prompt, Prompt::Question("Q1".into()));
        assert_eq!(items[0].answer, Some(Value::from("a")));
        assert_eq!(
            Value::Object(items[0].metadata.clone()),
            serde_json::json!({"category": "geo", "difficulty": 3})
        );
        assert_eq!(items[1].answer, Some(Value::from(2)));
        assert_eq!(items[1].metadata["category"], "math");
        assert!(matches!(&items[2].prompt, Prompt::Messages(m) if m.len() == 2));
        assert_eq!(items[2].question_text(), "Q3");
        assert!(items[2].metadata.is_empty());
        assert!(check_group_key(&items, "category").is_ok());
        let error = check_group_key(&items, "level").unwrap_err();
        assert!(error.contains("\"category\", \"difficulty\""), "{error}");
    }

    #[test]
    fn a_seed_shuffles_the_same_way_every_time() {
        let text: String = (1..=50)
            .map(|i| format!("{{\"question\": \"Q{i}\", \"answer\": {i}}}\n"))
            .collect();
        let items = parse(&text, Some("exact")).unwrap();
        let order = |seed: u64| {
            let mut items = items.clone();
            shuffle(&mut items, seed);
            items.into_iter().map(|i| i.id).collect::<Vec<_>>()
        };
        assert_eq!(order(7), order(7));
        assert_ne!(order(7), order(8));
        let mut sorted = order(7);
        assert_ne!(sorted, (1..=50).map(|i| i.to_string()).collect::<Vec<_>>());
        sorted.sort_by_key(|id| id.parse::<u32>().unwrap());
        assert_eq!(sorted, (1..=50).map(|i| i.to_string()).collect::<Vec<_>>());
        // Written out here, so fixed across versions: seed 1's first five.
        assert_eq!(order(1)[..5], ["1", "41", "43", "35", "27"]);
    }
}
