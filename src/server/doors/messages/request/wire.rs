//! The Messages request as sent: serde-derived wire types, read through
//! [`json::read`](crate::server::doors::json::read) so a misshapen field is a 400 naming
//! its path. Fields not named here are accepted and ignored (`thinking`,
//! `context_management`, `top_k`, `cache_control` on any block…); [`Loose`] fields are
//! those this door has always ignored when misshapen.

use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::server::doors::parse;
use crate::server::doors::parse::shape::{Loose, Obj, TextOrList};

/// A request body (the fields every door shares are read beside it: `parse::Shared`).
#[derive(Deserialize)]
pub(super) struct Body {
    pub(super) model: Option<String>,
    pub(super) stream: Option<bool>,
    pub(super) system: Option<TextOrList<Obj<TextBlock>>>,
    pub(super) messages: Option<Vec<Obj<Turn>>>,
    pub(super) tools: Option<Vec<Obj<Tool>>>,
    pub(super) tool_choice: Option<Obj<WireToolChoice>>,
    pub(super) metadata: Option<Obj<Metadata>>,
    /// Its other fields (Claude Code's `effort`) are model settings, owned by the panel
    /// config.
    pub(super) output_config: Option<Obj<OutputConfig>>,
    /// The structured-outputs beta's spelling of `output_config.format`.
    pub(super) output_format: Option<Obj<Format>>,
    #[serde(default)]
    pub(super) mcp_servers: Loose<Vec<IgnoredAny>>,
}

/// The answer's bounds as Messages names them.
#[derive(Default, Deserialize)]
#[serde(default)]
pub(super) struct Bounds {
    /// Required by `/v1/messages`, not by `count_tokens`: checked by the route.
    #[serde(deserialize_with = "max_tokens")]
    pub(super) max_tokens: Option<u64>,
    #[serde(deserialize_with = "stop_sequences")]
    pub(super) stop_sequences: Vec<String>,
}

/// Anthropic's bound on `stop_sequences`.
const MAX_STOP_SEQUENCES: usize = 16;

fn max_tokens<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    parse::count(d, "max_tokens")
}

fn stop_sequences<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    parse::stops(d, "stop_sequences", MAX_STOP_SEQUENCES, false)
}

/// Where only text goes (`system`, a search result's content).
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum TextBlock {
    Text { text: String },
}

impl TextBlock {
    pub(super) fn text(self) -> String {
        let Self::Text { text } = self;
        text
    }
}

/// `system` text or blocks as a list of texts.
pub(super) fn texts(content: TextOrList<Obj<TextBlock>>) -> Vec<String> {
    match content {
        TextOrList::Text(text) => vec![text],
        TextOrList::List(blocks) => blocks.into_iter().map(|b| b.0.text()).collect(),
    }
}

#[derive(Deserialize)]
pub(super) struct Turn {
    pub(super) role: Role,
    pub(super) content: TextOrList<Obj<Block>>,
}

impl Turn {
    /// The content as blocks (a string is one text block).
    pub(super) fn blocks(self) -> Vec<Block> {
        match self.content {
            TextOrList::Text(text) => vec![Block::Text { text }],
            TextOrList::List(blocks) => blocks.into_iter().map(|b| b.0).collect(),
        }
    }
}

/// `system` entries are Claude Code's mid-conversation system messages.
#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Role {
    User,
    Assistant,
    System,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Block {
    Text {
        text: String,
    },
    Image {
        source: Obj<ImageSource>,
    },
    ToolUse {
        id: String,
        name: String,
        input: Option<Value>,
    },
    ToolResult {
        tool_use_id: String,
        content: Option<TextOrList<Obj<ResultBlock>>>,
        #[serde(default)]
        is_error: Loose<bool>,
    },
    /// Dropped, so read loosely: only a signature that is there is checked.
    Thinking {
        #[serde(default)]
        thinking: Loose<String>,
        #[serde(default)]
        signature: Loose<String>,
    },
    RedactedThinking {},
}

impl Block {
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Self::Text { .. } => "text",
            Self::Image { .. } => "image",
            Self::ToolUse { .. } => "tool_use",
            Self::ToolResult { .. } => "tool_result",
            Self::Thinking { .. } => "thinking",
            Self::RedactedThinking {} => "redacted_thinking",
        }
    }
}

/// What a `tool_result`'s content may hold: every block type of Anthropic's
/// `ToolResultBlockParam` (text, image, document, search result, tool reference).
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum ResultBlock {
    Text {
        text: String,
    },
    Image {
        source: Obj<ImageSource>,
    },
    Document {
        source: Obj<DocumentSource>,
        #[serde(default)]
        title: Loose<String>,
        #[serde(default)]
        context: Loose<String>,
    },
    SearchResult {
        source: String,
        title: String,
        content: Vec<Obj<TextBlock>>,
    },
    /// A tool the result loads (tool search): a deferred tool is offered from then on.
    ToolReference {
        tool_name: String,
    },
}

/// A document's source: `text` (`data`), `content` (a string or text and image blocks),
/// or a PDF (`base64` `data`, or a `url`). Read field by field, like [`ImageSource`].
#[derive(Deserialize)]
pub(super) struct DocumentSource {
    #[serde(rename = "type", default)]
    pub(super) kind: Loose<String>,
    #[serde(default)]
    pub(super) data: Loose<String>,
    #[serde(default)]
    pub(super) url: Loose<String>,
    pub(super) content: Option<TextOrList<Obj<SourceBlock>>>,
}

/// A block of a `content` document source.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum SourceBlock {
    Text { text: String },
    Image { source: Obj<ImageSource> },
}

/// Read field by field, so each missing part gets its own message.
#[derive(Deserialize)]
pub(super) struct ImageSource {
    #[serde(rename = "type", default)]
    pub(super) kind: Loose<String>,
    #[serde(default)]
    pub(super) media_type: Loose<String>,
    #[serde(default)]
    pub(super) data: Loose<String>,
    #[serde(default)]
    pub(super) url: Loose<String>,
}

#[derive(Deserialize)]
pub(super) struct Tool {
    /// Absent or `custom`; Anthropic's own tool types are refused.
    #[serde(rename = "type", default)]
    pub(super) kind: Loose<String>,
    /// A missing or misshapen name is refused by the name check, with its rule.
    #[serde(default)]
    pub(super) name: Loose<String>,
    #[serde(default)]
    pub(super) description: Loose<String>,
    pub(super) input_schema: Option<Value>,
    /// Tool search: not offered until a `tool_reference` loads it.
    #[serde(default)]
    pub(super) defer_loading: Loose<bool>,
}

#[derive(Deserialize)]
pub(super) struct WireToolChoice {
    #[serde(rename = "type")]
    pub(super) kind: ChoiceKind,
    pub(super) name: Option<String>,
    pub(super) disable_parallel_tool_use: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum ChoiceKind {
    Auto,
    Any,
    Tool,
    None,
}

#[derive(Deserialize)]
pub(super) struct Metadata {
    pub(super) user_id: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct OutputConfig {
    pub(super) format: Option<Obj<Format>>,
}

#[derive(Deserialize)]
pub(super) struct Format {
    #[serde(rename = "type", default)]
    pub(super) kind: Loose<String>,
    pub(super) schema: Option<Value>,
}
