//! A `tool_result`'s content as the agents take it: the neutral tool message's text and
//! images, and the tools it loads. Every block type Anthropic documents there is read:
//! text as it is; an image as an image (shown to agents that see images, a marked note
//! for the others, as in user turns); a document's or a search result's text, with its
//! title and source; a PDF document, which no agent reads here, as a line naming it; a
//! `tool_reference` as a line naming the tool it loaded, which is then offered.

use massgen_core::provider::{Image, Message};

use super::image;
use super::wire::{DocumentSource, ResultBlock, SourceBlock};
use crate::server::doors::parse::shape::{Loose, Obj, TextOrList};
use crate::server::error::ApiError;

/// A tool a `tool_reference` loads, and where it was named (for a 400 when `tools` has no
/// such tool).
pub(super) struct Loaded {
    pub(super) name: String,
    pub(super) path: String,
}

/// The `tool_result` at `path` as a tool message; its references go to `loaded`.
pub(super) fn tool_result(
    tool_use_id: String,
    content: Option<TextOrList<Obj<ResultBlock>>>,
    is_error: bool,
    path: &str,
    loaded: &mut Vec<Loaded>,
) -> Result<Message, ApiError> {
    let mut texts = Vec::new();
    let mut images = Vec::new();
    match content {
        None => {}
        Some(TextOrList::Text(text)) => texts.push(text),
        Some(TextOrList::List(blocks)) => {
            for (k, Obj(block)) in blocks.into_iter().enumerate() {
                let at = format!("{path}.content[{k}]");
                texts.push(block_text(block, &at, &mut images, loaded)?);
            }
        }
    }
    let text = texts.join("\n");
    // The neutral message has no error flag: the agents read it in the text.
    let text = if is_error {
        format!("[error] {text}")
    } else {
        text
    };
    let mut message = Message::tool_result(tool_use_id, text);
    message.images = images;
    Ok(message)
}

/// One block's text (an image's is empty: the prompt marks it in place).
fn block_text(
    block: ResultBlock,
    at: &str,
    images: &mut Vec<Image>,
    loaded: &mut Vec<Loaded>,
) -> Result<String, ApiError> {
    Ok(match block {
        ResultBlock::Text { text } => text,
        ResultBlock::Image { source } => {
            images.push(image(source.0, at)?);
            String::new()
        }
        ResultBlock::Document {
            source,
            title,
            context,
        } => document(source.0, title, context, at, images)?,
        ResultBlock::SearchResult {
            source,
            title,
            content,
        } => {
            let texts: Vec<String> = content.into_iter().map(|b| b.0.text()).collect();
            format!(
                "[search result \"{title}\" from {source}]\n{}",
                texts.join("\n")
            )
        }
        ResultBlock::ToolReference { tool_name } => {
            let text = format!("[tool {tool_name} loaded: it is offered from now on]");
            loaded.push(Loaded {
                name: tool_name,
                path: format!("{at}.tool_name"),
            });
            text
        }
    })
}

/// A document block's text: its title and context, then its text (a `text` source's
/// data, a `content` source's text blocks, whose images join the result's); a PDF is named,
/// not read.
fn document(
    source: DocumentSource,
    title: Loose<String>,
    context: Loose<String>,
    at: &str,
    images: &mut Vec<Image>,
) -> Result<String, ApiError> {
    let refused = |problem: &str| {
        ApiError::invalid_at(
            format!("'{at}.source': {problem}"),
            format!("{at}.source"),
            "invalid_message",
        )
    };
    let name = title.0.map(|t| format!(" \"{t}\"")).unwrap_or_default();
    let body = match source.kind.0.as_deref() {
        Some("text") => source
            .data
            .0
            .ok_or_else(|| refused("a text source needs a 'data' string"))?,
        Some("content") => match source.content {
            None => return Err(refused("a content source needs 'content'")),
            Some(TextOrList::Text(text)) => text,
            Some(TextOrList::List(blocks)) => {
                let mut texts = Vec::new();
                for (k, Obj(block)) in blocks.into_iter().enumerate() {
                    match block {
                        SourceBlock::Text { text } => texts.push(text),
                        SourceBlock::Image { source } => {
                            images.push(image(source.0, &format!("{at}.source.content[{k}]"))?);
                        }
                    }
                }
                texts.join("\n")
            }
        },
        Some("base64") if source.data.0.is_some() => {
            return Ok(format!(
                "[document{name}: a PDF the panel cannot read; its content is not shown]"
            ));
        }
        Some("url") => match source.url.0 {
            Some(url) => {
                return Ok(format!(
                    "[document{name}: the PDF at {url}, which the panel cannot read; its content is not shown]"
                ));
            }
            None => return Err(refused("a url source needs a 'url' string")),
        },
        Some("base64") => return Err(refused("a base64 source needs a 'data' string")),
        other => {
            return Err(refused(&format!(
                "source type '{}' is not supported; only text, content, base64 and url sources are",
                other.unwrap_or("(none)")
            )));
        }
    };
    let mut out = format!("[document{name}]");
    if let Some(context) = context.0.filter(|c| !c.is_empty()) {
        out.push('\n');
        out.push_str(&context);
    }
    out.push('\n');
    out.push_str(&body);
    Ok(out)
}
