//! The deliberation inside `<think>…</think>` at the start of `content`
//! (`deliberation_format: think_tags`), the convention chat UIs render as reasoning; the
//! answer follows the closing tag at once, so a client that cuts the block off (a chat UI,
//! pydantic-ai) holds the answer as it was written, from its first character.

const OPEN: &str = "<think>\n";
const CLOSE: &str = "</think>";

/// Puts the tags around the deliberation lines of one response: opened with the first
/// line, closed before whatever follows (the answer, tool calls, the end or an error).
#[derive(Debug, Default)]
pub struct ThinkTags {
    open: bool,
    closed: bool,
    at_line_start: bool,
}

impl ThinkTags {
    /// The `content` text for one deliberation line; empty once the block is closed: a
    /// second block after the answer started would land in the middle of the answer.
    pub fn line(&mut self, line: &str) -> String {
        if self.closed || line.is_empty() {
            return String::new();
        }
        self.at_line_start = line.ends_with('\n');
        if self.open {
            return line.to_string();
        }
        self.open = true;
        format!("{OPEN}{line}")
    }

    /// The closing tag on a line of its own, once, if the block was opened.
    pub fn close(&mut self) -> Option<String> {
        if !self.open || self.closed {
            return None;
        }
        self.closed = true;
        Some(if self.at_line_start {
            CLOSE.to_string()
        } else {
            format!("\n{CLOSE}")
        })
    }
}

/// A whole (non-streamed) `content`: the deliberation in tags, then the answer; the answer
/// alone when there was no deliberation.
pub fn wrap(deliberation: &str, answer: &str) -> String {
    let mut tags = ThinkTags::default();
    let mut content = tags.line(deliberation);
    content.push_str(&tags.close().unwrap_or_default());
    content.push_str(answer);
    content
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_opens_once_closes_once_and_ends_on_its_own_line() {
        let mut t = ThinkTags::default();
        assert_eq!(t.close(), None);
        assert_eq!(t.line("a answered\n"), "<think>\na answered\n");
        assert_eq!(t.line("[b] partial"), "[b] partial");
        assert_eq!(t.close().as_deref(), Some("\n</think>"));
        assert_eq!(t.close(), None);
        assert_eq!(t.line("late\n"), "");
        assert_eq!(
            wrap("x voted\n", "Answer"),
            "<think>\nx voted\n</think>Answer"
        );
        assert_eq!(
            wrap("x voted", "Answer"),
            "<think>\nx voted\n</think>Answer"
        );
        assert_eq!(wrap("", "Answer"), "Answer");
    }
}
