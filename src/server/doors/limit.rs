//! Bounds on the final answer a client asked for (`max_output_tokens`, `max_tokens`,
//! `stop_sequences`), applied where the answer leaves the server: the winner's
//! presentation runs as the panel config says, and the text the client gets stops at the
//! first stop sequence or at the token budget.
//!
//! Tokens are estimated, not counted: one token per four characters (OpenAI's and
//! Anthropic's rule of thumb for English text), since the panel's models do not share a
//! tokenizer. The same estimate answers `count_tokens`.

/// Characters per estimated token.
const CHARS_PER_TOKEN: u64 = 4;

/// The estimated tokens of `text`, rounded up.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(CHARS_PER_TOKEN)
}

/// Largest client token limit passed on to the presentation call upstream. Clients send
/// large values as a matter of course (the Messages API requires one; Claude Code sends
/// 32000), and one above the presenter's own output limit would make its upstream refuse
/// the call. Every current model writes at least this many; above it only the server's cut
/// applies.
pub const UPSTREAM_MAX_TOKENS: u64 = 8192;

/// The client's limit as the presentation call's, when it is at most
/// [`UPSTREAM_MAX_TOKENS`].
pub fn upstream_cap(max_tokens: Option<u64>) -> Option<u64> {
    max_tokens.filter(|n| *n <= UPSTREAM_MAX_TOKENS)
}

/// Why the answer was cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    MaxTokens,
    /// The stop sequence that was found (not sent).
    Stop(String),
}

/// Cuts a streamed answer. Text that could be the start of a stop sequence is held back
/// until the next piece shows whether it is one.
#[derive(Debug, Default)]
pub struct AnswerLimit {
    budget_chars: Option<u64>,
    stops: Vec<String>,
    sent_chars: u64,
    held: String,
    cut: Option<Cut>,
}

impl AnswerLimit {
    pub fn new(max_tokens: Option<u64>, stops: Vec<String>) -> Self {
        Self {
            budget_chars: max_tokens.map(|t| t.saturating_mul(CHARS_PER_TOKEN)),
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            ..Self::default()
        }
    }

    /// The part of `piece` that may go out now ("" once the answer was cut).
    pub fn push(&mut self, piece: &str) -> String {
        if self.cut.is_some() {
            return String::new();
        }
        self.held.push_str(piece);
        let found = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, _)| *at);
        let ready = match found {
            Some((at, stop)) => {
                let stop = stop.clone();
                let ready = self.held[..at].to_string();
                self.held.clear();
                self.cut = Some(Cut::Stop(stop));
                ready
            }
            None => {
                let keep = self.partial_stop_len();
                let split = self.held.len() - keep;
                let rest = self.held.split_off(split);
                std::mem::replace(&mut self.held, rest)
            }
        };
        self.within_budget(ready)
    }

    /// What is still held back, at the end of the answer.
    pub fn finish(&mut self) -> String {
        let held = std::mem::take(&mut self.held);
        if self.cut.is_some() {
            return String::new();
        }
        self.within_budget(held)
    }

    /// The whole answer at once.
    pub fn apply(&mut self, answer: &str) -> String {
        let mut out = self.push(answer);
        out.push_str(&self.finish());
        out
    }

    pub fn cut(&self) -> Option<&Cut> {
        self.cut.as_ref()
    }

    /// Bytes at the end of `held` that begin some stop sequence.
    fn partial_stop_len(&self) -> usize {
        let held = self.held.as_str();
        self.stops
            .iter()
            .flat_map(|stop| {
                stop.char_indices()
                    .skip(1)
                    .map(|(i, _)| &stop[..i])
                    .filter(|prefix| held.ends_with(prefix))
                    .map(str::len)
            })
            .max()
            .unwrap_or(0)
    }

    fn within_budget(&mut self, text: String) -> String {
        let Some(budget) = self.budget_chars else {
            return text;
        };
        let left = budget.saturating_sub(self.sent_chars);
        let chars = text.chars().count() as u64;
        if chars <= left {
            self.sent_chars += chars;
            return text;
        }
        self.sent_chars = budget;
        self.cut = Some(Cut::MaxTokens);
        self.held.clear();
        text.chars()
            .take(usize::try_from(left).unwrap_or(usize::MAX))
            .collect()
    }
}

/// `text` cut into pieces of at most `max` bytes, never inside a character (tool-call
/// arguments go out in pieces, as the APIs stream them).
pub fn pieces(text: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + max).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if end == start {
            // A character wider than `max`: take it whole.
            end = start + text[start..].chars().next().map_or(1, char::len_utf8);
        }
        out.push(&text[start..end]);
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(limit: &mut AnswerLimit, pieces: &[&str]) -> String {
        let mut out: String = pieces.iter().map(|p| limit.push(p)).collect();
        out.push_str(&limit.finish());
        out
    }

    #[test]
    fn a_stop_sequence_split_across_pieces_is_found_and_not_sent() {
        let mut limit = AnswerLimit::new(None, vec!["END".into()]);
        assert_eq!(stream(&mut limit, &["one E", "N", "D two"]), "one ");
        assert_eq!(limit.cut(), Some(&Cut::Stop("END".into())));
        // A prefix that turns out not to be a stop is sent after all.
        let mut limit = AnswerLimit::new(None, vec!["END".into()]);
        assert_eq!(stream(&mut limit, &["one E", "Nx"]), "one ENx");
        assert_eq!(limit.cut(), None);
        let mut limit = AnswerLimit::new(None, vec!["END".into()]);
        assert_eq!(stream(&mut limit, &["tail E"]), "tail E");
    }

    #[test]
    fn the_earliest_stop_wins() {
        let mut limit = AnswerLimit::new(None, vec!["b".into(), "a".into()]);
        assert_eq!(limit.apply("xxaxb"), "xx");
        assert_eq!(limit.cut(), Some(&Cut::Stop("a".into())));
    }

    #[test]
    fn the_token_budget_cuts_at_four_characters_a_token() {
        let mut limit = AnswerLimit::new(Some(2), vec![]);
        assert_eq!(stream(&mut limit, &["abcdé", "fgh", "ij"]), "abcdéfgh");
        assert_eq!(limit.cut(), Some(&Cut::MaxTokens));
        let mut limit = AnswerLimit::new(Some(2), vec![]);
        assert_eq!(limit.apply("abcdefgh"), "abcdefgh");
        assert_eq!(limit.cut(), None);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(pieces("abc", 2), ["ab", "c"]);
        assert_eq!(pieces("éé", 1), ["é", "é"]);
        assert_eq!(estimate_tokens(""), 0);
    }
}
