//! `input`: its wire types and their neutral form. An item is read as one struct holding
//! every item type's fields, not as a serde enum tagged by `type`: serde buffers a tagged
//! enum's content before choosing the variant, and the path of a fault inside an item
//! (`input[2].content[0].text`) would be lost. The `type` is an enum all the same, so an
//! unknown one is refused by name, and the item is checked per type below.

use std::fmt;
use std::marker::PhantomData;

use base64::Engine;
use massgen_core::provider::{Image, Message, Role, ToolCall};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::server::doors::images;
use crate::server::doors::responses::namespaces::flat_name;
use crate::server::error::ApiError;

/// `input` and a message's `content`: a string, or a list.
#[derive(Debug)]
pub(super) enum TextOr<T> {
    Text(String),
    List(Vec<T>),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for TextOr<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Either<T> {
            type Value = TextOr<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(TextOr::Text(s.to_string()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Self::Value, E> {
                Ok(TextOr::Text(s))
            }
            // Element by element through `seq`, so each one's path is tracked.
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut list = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
                while let Some(item) = seq.next_element()? {
                    list.push(item);
                }
                Ok(TextOr::List(list))
            }
        }
        deserializer.deserialize_any(Either(PhantomData))
    }
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ItemKind {
    Message,
    FunctionCall,
    FunctionCallOutput,
    Reasoning,
    ItemReference,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum WireRole {
    System,
    Developer,
    User,
    Assistant,
}

/// One item of `input`, whatever its type (see the module's comment). Fields of other
/// types (`status`, `summary`, a reasoning item's `content` parts) are read and unused.
#[derive(Debug, Deserialize)]
pub(super) struct WireItem {
    #[serde(rename = "type")]
    kind: Option<ItemKind>,
    id: Option<String>,
    role: Option<WireRole>,
    content: Option<TextOr<WirePart>>,
    call_id: Option<String>,
    name: Option<String>,
    /// A namespaced tool's call (Codex's MCP tools): named by its flat name.
    namespace: Option<String>,
    arguments: Option<String>,
    output: Option<TextOr<WirePart>>,
    encrypted_content: Option<String>,
}

/// A content part: `input_text`, `output_text`, `text`, `refusal`, `input_image`, and
/// in a function call's output `input_file`.
#[derive(Debug, Deserialize)]
pub(super) struct WirePart {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    refusal: Option<String>,
    image_url: Option<String>,
    file_id: Option<serde_json::Value>,
    detail: Option<String>,
    file_data: Option<String>,
    file_url: Option<String>,
    filename: Option<String>,
}

/// An input item in neutral form; also what a stored response keeps of its items, so a
/// later request can name them by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Item {
    /// A system or developer message's text.
    System { text: String },
    /// A user or assistant message, or a function call's output (a tool message).
    Message { message: Message },
    /// A function call an assistant made.
    Call { call: ToolCall },
    /// Deliberation: never given to agents.
    Reasoning,
}

/// One item of `input`, read.
#[derive(Debug, Clone)]
pub struct InputItem {
    /// Its position: its path is `input[index]`.
    pub index: usize,
    /// The id it was sent with (clients echo the ids of earlier output).
    pub id: Option<String>,
    pub entry: Entry,
}

#[derive(Debug, Clone)]
pub enum Entry {
    Item(Item),
    /// A reasoning item, with its `encrypted_content` when it has a non-empty one.
    Reasoning(Option<String>),
    /// `{"type": "item_reference", "id": …}`: an item of a stored response.
    Reference(String),
}

/// `input` in neutral form.
/// Items one request may send: each is kept with its response (and may name a stored
/// one), so a body of tiny items must not become hundreds of thousands of them. A long
/// agent session resent whole stays far below it.
pub const MAX_ITEMS: usize = 10_000;

/// Longest item id kept (and looked up): the server's own are ~50 bytes.
pub const MAX_ID_BYTES: usize = 256;

pub(super) fn read(input: TextOr<WireItem>) -> Result<Vec<InputItem>, ApiError> {
    let items = match input {
        TextOr::Text(text) => {
            return Ok(vec![InputItem {
                index: 0,
                id: None,
                entry: Entry::Item(Item::Message {
                    message: Message::user(text),
                }),
            }]);
        }
        TextOr::List(items) => items,
    };
    if items.len() > MAX_ITEMS {
        return Err(ApiError::invalid(
            format!(
                "'input' has {} items; at most {MAX_ITEMS} are accepted (continue a long conversation with 'previous_response_id')",
                items.len()
            ),
            Some("input"),
            "invalid_value",
        ));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            let id = item.id.clone();
            if id.as_ref().is_some_and(|id| id.len() > MAX_ID_BYTES) {
                let path = format!("input[{index}].id");
                return Err(ApiError::invalid_at(
                    format!("{path}: an item id may have at most {MAX_ID_BYTES} bytes"),
                    path,
                    "invalid_value",
                ));
            }
            Ok(InputItem {
                index,
                id,
                entry: entry(index, item)?,
            })
        })
        .collect()
}

fn entry(i: usize, item: WireItem) -> Result<Entry, ApiError> {
    let kind = match (item.kind, item.role) {
        (Some(kind), _) => kind,
        // EasyInputMessage (the Agents SDK's form) has a role and no type.
        (None, Some(_)) => ItemKind::Message,
        (None, None) => return Err(at(format!("input[{i}]"), "needs a 'type'")),
    };
    let required = |value: Option<String>, key: &str| {
        value.ok_or_else(|| {
            at(
                format!("input[{i}].{key}"),
                &format!("needs a '{key}' string"),
            )
        })
    };
    Ok(match kind {
        ItemKind::Message => {
            let role = item
                .role
                .ok_or_else(|| at(format!("input[{i}].role"), "needs a 'role'"))?;
            let (text, images) = content(i, "content", item.content, role == WireRole::User)?;
            Entry::Item(match role {
                WireRole::System | WireRole::Developer => Item::System { text },
                WireRole::User => {
                    let mut message = Message::user(text);
                    message.images = images;
                    Item::Message { message }
                }
                WireRole::Assistant => Item::Message {
                    message: Message::assistant(text),
                },
            })
        }
        ItemKind::FunctionCall => {
            let name = required(item.name, "name")?;
            Entry::Item(Item::Call {
                call: ToolCall {
                    id: required(item.call_id, "call_id")?,
                    name: match item.namespace.as_deref().filter(|ns| !ns.is_empty()) {
                        Some(ns) => flat_name(ns, &name),
                        None => name,
                    },
                    arguments: required(item.arguments, "arguments")?,
                    opaque: None,
                },
            })
        }
        ItemKind::FunctionCallOutput => {
            let call_id = required(item.call_id, "call_id")?;
            // Text, image and file parts: what OpenAI's function call outputs hold.
            let (output, images) = content(i, "output", item.output, true)?;
            let mut message = Message::tool_result(call_id, output);
            message.images = images;
            Entry::Item(Item::Message { message })
        }
        ItemKind::Reasoning => Entry::Reasoning(item.encrypted_content.filter(|c| !c.is_empty())),
        ItemKind::ItemReference => Entry::Reference(required(item.id, "id")?),
    })
}

/// A 400 about the item at `path`, in the door's terms for a bad item.
pub(super) fn at(path: String, problem: &str) -> ApiError {
    ApiError::invalid_at(format!("{path} {problem}"), path, "invalid_message")
}

/// The text of `content` (a message's) or `output` (a function call's): a string, or
/// text parts joined by line breaks; with `images`, `input_image` parts are read too
/// (user messages, function call outputs), and in `output` `input_file` parts (see
/// [`file`]).
fn content(
    i: usize,
    field: &str,
    content: Option<TextOr<WirePart>>,
    images: bool,
) -> Result<(String, Vec<Image>), ApiError> {
    let parts = match content {
        None => return Ok((String::new(), Vec::new())),
        Some(TextOr::Text(text)) => return Ok((text, Vec::new())),
        Some(TextOr::List(parts)) => parts,
    };
    let mut texts = Vec::with_capacity(parts.len());
    let mut read = Vec::new();
    for (j, part) in parts.into_iter().enumerate() {
        let path = format!("input[{i}].{field}[{j}]");
        let (text, key) = match part.kind.as_str() {
            "input_text" | "output_text" | "text" => (part.text, "text"),
            "refusal" => (part.refusal, "refusal"),
            "input_image" if images => {
                read.push(image(&path, part)?);
                continue;
            }
            "input_image" => {
                return Err(at(
                    path,
                    "is an image part; images are accepted in user messages and function call outputs only",
                ));
            }
            "input_file" if field == "output" => {
                texts.push(file(&path, part)?);
                continue;
            }
            other => {
                let supported = if field == "content" {
                    "text and image parts"
                } else {
                    "text, image and file parts"
                };
                return Err(at(
                    format!("{path}.type"),
                    &format!("is '{other}'; only {supported} are supported here"),
                ));
            }
        };
        // A missing text is the client's mistake, not an empty text.
        let text = text.ok_or_else(|| {
            at(
                format!("{path}.{key}"),
                &format!("is missing: a '{}' part needs a '{key}' string", part.kind),
            )
        })?;
        texts.push(text);
    }
    Ok((texts.join("\n"), read))
}

/// `{"type": "input_image", "image_url": …, "detail": …}`; a `file_id` (OpenAI's file
/// store, which this server does not have) is refused.
fn image(path: &str, part: WirePart) -> Result<Image, ApiError> {
    let Some(url) = part.image_url else {
        let problem = if part.file_id.is_some_and(|f| !f.is_null()) {
            "is an 'input_image' with a 'file_id'; uploaded files are not supported, send 'image_url' (https or data: URL)"
        } else {
            "is an 'input_image' part without an 'image_url' string"
        };
        return Err(at(path.to_string(), problem));
    };
    images::from_url(&url, part.detail.as_deref()).map_err(|refused| {
        ApiError::invalid_at(
            format!("{path}: {}", refused.message),
            path.to_string(),
            refused.code,
        )
    })
}

/// An `input_file` part of a function call's output, as text: a text file's content
/// under its name (`file_data`, a `data:` URL or bare base64, whose type is `text/…` or
/// JSON, or, untyped, valid UTF-8), any other file (a PDF, an archive) or a `file_url` as a
/// line naming it, since no agent here reads one and this server never fetches a URL; a
/// `file_id` is refused (there is no file store).
fn file(path: &str, part: WirePart) -> Result<String, ApiError> {
    let name = part.filename.filter(|n| !n.is_empty());
    let label = |fallback: &str| name.clone().unwrap_or_else(|| fallback.to_string());
    if let Some(data) = part.file_data {
        let (media_type, encoded) = match data.strip_prefix("data:") {
            Some(rest) => match rest.split_once(',') {
                Some((header, encoded)) => (
                    header
                        .strip_suffix(";base64")
                        .map(str::to_ascii_lowercase)
                        .filter(|t| !t.is_empty()),
                    encoded,
                ),
                None => {
                    return Err(at(
                        format!("{path}.file_data"),
                        "is a data: URL without ',' before its data",
                    ));
                }
            },
            None => (None, data.as_str()),
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| at(format!("{path}.file_data"), "is not valid base64"))?;
        let texty = media_type
            .as_deref()
            .is_none_or(|t| t.starts_with("text/") || t == "application/json");
        let text = String::from_utf8(bytes)
            .ok()
            .filter(|t| texty && !t.contains('\0'));
        let label = label("a file");
        return Ok(match text {
            Some(text) => format!("[file {label}]\n{text}"),
            None => format!(
                "[file {label} ({}): not a text file, which the panel cannot read; its content is not shown]",
                media_type.as_deref().unwrap_or("binary")
            ),
        });
    }
    if let Some(url) = part.file_url {
        return Ok(format!(
            "[file {} at {url}: not fetched (this server never fetches a URL); its content is not shown]",
            label("a file")
        ));
    }
    let problem = if part.file_id.is_some_and(|f| !f.is_null()) {
        "is an 'input_file' with a 'file_id'; uploaded files are not supported, send 'file_data'"
    } else {
        "is an 'input_file' part without 'file_data' or 'file_url'"
    };
    Err(at(path.to_string(), problem))
}

/// `items` as a conversation: system texts apart, the rest as messages, an assistant's
/// calls joined to its turn. Reasoning goes: agents never take deliberation as input.
pub fn conversation(items: impl IntoIterator<Item = Item>) -> (Vec<String>, Vec<Message>) {
    let mut system = Vec::new();
    let mut messages: Vec<Message> = Vec::new();
    for item in items {
        match item {
            Item::System { text } => system.push(text),
            Item::Message { message } => messages.push(message),
            // Calls of one turn follow each other (after the turn's text, if any).
            Item::Call { call } => match messages.last_mut() {
                Some(last) if last.role == Role::Assistant => last.tool_calls.push(call),
                _ => {
                    let mut turn = Message::assistant(String::new());
                    turn.tool_calls.push(call);
                    messages.push(turn);
                }
            },
            Item::Reasoning => {}
        }
    }
    (system, messages)
}

#[cfg(test)]
mod tests {
    use super::super::{ResponsesRequest, parse};
    use super::*;
    use serde_json::{Value, json};

    fn parse_json(v: Value) -> Result<ResponsesRequest, ApiError> {
        parse(v.to_string().as_bytes())
    }

    fn code(v: Value) -> &'static str {
        match parse_json(v) {
            Err(e) => e.code(),
            Ok(_) => "ok",
        }
    }

    fn param(v: Value) -> String {
        match parse_json(v) {
            Err(e) => e.param().unwrap_or_default().to_string(),
            Ok(_) => "ok".into(),
        }
    }

    #[test]
    fn references_and_encrypted_content_are_kept_for_the_server() {
        let req = parse_json(json!({"input": [
            {"role": "user", "content": "Hi"},
            {"type": "item_reference", "id": "msg_1"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "mg1.x.y"},
            {"type": "reasoning", "summary": [], "encrypted_content": ""}
        ]}))
        .unwrap();
        assert!(matches!(&req.input[1].entry, Entry::Reference(id) if id == "msg_1"));
        assert_eq!(req.input[1].index, 1);
        assert!(matches!(&req.input[2].entry, Entry::Reasoning(Some(c)) if c == "mg1.x.y"));
        assert!(matches!(req.input[3].entry, Entry::Reasoning(None)));
        let bad = json!({"input": [{"type": "item_reference"}]});
        assert_eq!(
            (code(bad.clone()), param(bad)),
            ("invalid_message", "input[0].id".into())
        );
    }

    #[test]
    fn faults_name_their_json_path() {
        for (body, path, code_wanted) in [
            (
                json!({"input": [{"role": "user", "content": "x"},
                    {"role": "user", "content": [{"type": "input_text", "text": 5}]}]}),
                "input[1].content[0].text",
                "invalid_message",
            ),
            (
                json!({"input": [{"type": "web_search_call"}]}),
                "input[0].type",
                "invalid_message",
            ),
            (
                json!({"input": [{"role": "tool", "content": "x"}]}),
                "input[0].role",
                "invalid_message",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_file"}]}]}),
                "input[0].content[0].type",
                "invalid_message",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}),
                "input[0].content[0].text",
                "invalid_message",
            ),
            (
                json!({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}),
                "input[0].arguments",
                "invalid_message",
            ),
            (
                json!({"input": [{"content": "x"}]}),
                "input[0]",
                "invalid_message",
            ),
            (json!({"input": 3}), "input", "invalid_type"),
            (
                json!({"input": "x", "stream": "yes"}),
                "stream",
                "invalid_type",
            ),
            (
                json!({"input": "x", "tools": [{"type": "function", "name": 3}]}),
                "tools[0].name",
                "invalid_type",
            ),
            (json!({"input": "x", "tools": {}}), "tools", "invalid_type"),
            (
                json!({"input": "x", "text": {"format": 1}}),
                "text.format",
                "invalid_type",
            ),
            (
                json!({"input": "x", "metadata": []}),
                "metadata",
                "invalid_type",
            ),
            (
                json!({"input": "x", "max_output_tokens": 1.5}),
                "max_output_tokens",
                "invalid_value",
            ),
            (
                json!({"input": "x", "temperature": 3}),
                "temperature",
                "invalid_value",
            ),
            (
                json!({"input": "x", "massgen": {"deliberation": "loud"}}),
                "massgen.deliberation",
                "invalid_value",
            ),
        ] {
            let e = parse_json(body.clone()).unwrap_err();
            assert_eq!(
                (e.param(), e.code()),
                (Some(path), code_wanted),
                "{body}: {}",
                e.message()
            );
        }
        let e = parse_json(json!({"input": [{"role": "user",
            "content": [{"type": "input_text", "text": 5}]}]}))
        .unwrap_err();
        assert!(
            e.message()
                .starts_with("'input[0].content[0].text': invalid type"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn function_call_outputs_take_text_image_and_file_parts() {
        use base64::Engine;
        let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
        let output = json!([
            {"type": "input_text", "text": "Read 3 files"},
            {"type": "input_image", "image_url": "https://example.com/shot.png", "detail": "low"},
            {"type": "input_file", "filename": "notes.md",
                "file_data": format!("data:text/markdown;base64,{}", b64("# notes"))},
            {"type": "input_file", "filename": "raw.txt", "file_data": b64("plain")},
            {"type": "input_file", "filename": "spec.pdf",
                "file_data": format!("data:application/pdf;base64,{}", b64("%PDF-1.7"))},
            {"type": "input_file", "file_url": "https://example.com/big.zip"}
        ]);
        let req = parse_json(json!({"input": [
            {"role": "user", "content": "x"},
            {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": output}]}))
        .unwrap();
        let Entry::Item(Item::Message { message }) = &req.input[2].entry else {
            panic!("a tool message")
        };
        assert_eq!(message.images.len(), 1);
        assert_eq!(message.images[0].detail.as_deref(), Some("low"));
        assert_eq!(
            message.content,
            "Read 3 files\n[file notes.md]\n# notes\n[file raw.txt]\nplain\n\
             [file spec.pdf (application/pdf): not a text file, which the panel cannot read; its content is not shown]\n\
             [file a file at https://example.com/big.zip: not fetched (this server never fetches a URL); its content is not shown]"
        );
        let with = |part: Value| {
            json!({"input": [{"role": "user", "content": "x"},
                {"type": "function_call_output", "call_id": "c1", "output": [part]}]})
        };
        let cases = [
            (
                json!({"type": "input_file", "file_id": "file_1"}),
                "file_id",
            ),
            (
                json!({"type": "input_file", "file_data": "%%%"}),
                "not valid base64",
            ),
            (
                json!({"type": "input_audio"}),
                "only text, image and file parts",
            ),
        ];
        for (part, problem) in cases {
            let e = parse_json(with(part)).unwrap_err();
            assert_eq!(e.code(), "invalid_message");
            assert!(e.message().contains(problem), "{}", e.message());
        }
        // Files stay out of messages.
        let e = parse_json(json!({"input": [{"role": "user",
            "content": [{"type": "input_file", "file_data": "eA=="}]}]}))
        .unwrap_err();
        assert_eq!(e.param(), Some("input[0].content[0].type"));
    }

    #[test]
    fn item_counts_and_id_lengths_are_bounded() {
        let item = json!({"type": "reasoning", "id": "rs_1", "summary": []});
        let many = vec![item.clone(); MAX_ITEMS + 1];
        let e = parse_json(json!({"input": many})).unwrap_err();
        assert_eq!((e.param(), e.code()), (Some("input"), "invalid_value"));
        assert!(parse_json(json!({"input": vec![item; MAX_ITEMS]})).is_ok());
        let long = "x".repeat(MAX_ID_BYTES + 1);
        let e = parse_json(json!({"input": [{"type": "item_reference", "id": long}]})).unwrap_err();
        assert_eq!(e.param(), Some("input[0].id"));
    }

    #[test]
    fn a_request_defines_at_most_max_tools_tools() {
        let tool =
            |i: usize| json!({"type": "function", "name": format!("t{i}"), "parameters": {}});
        let tools: Vec<Value> = (0..=crate::server::doors::tools::MAX_TOOLS)
            .map(tool)
            .collect();
        let e = parse_json(json!({"input": "hi", "tools": tools})).unwrap_err();
        assert_eq!(e.param(), Some("tools"));
        let fewer: Vec<Value> = (0..crate::server::doors::tools::MAX_TOOLS)
            .map(tool)
            .collect();
        assert!(parse_json(json!({"input": "hi", "tools": fewer})).is_ok());
    }
}
