//! Simulated text: clearly marked, mentions the question, and differs per model.
//!
//! The server rejects answers too similar to existing ones (word-set Jaccard), so each
//! model draws its sentences from word pools in its own seeded order: two different seeds
//! share little more than the quoted question.

const ADJECTIVES: &[&str] = &[
    "Clear",
    "Careful",
    "Practical",
    "Historical",
    "Concrete",
    "Rigorous",
    "Simple",
    "Balanced",
    "Thorough",
    "Precise",
    "Modern",
    "Classic",
    "Empirical",
    "Structured",
    "Focused",
    "Detailed",
    "Measured",
    "Pragmatic",
    "Candid",
    "Robust",
    "Concise",
    "Transparent",
    "Layered",
    "Grounded",
    "Nuanced",
    "Systematic",
    "Flexible",
    "Tested",
    "Explicit",
    "Holistic",
];
const NOUNS: &[&str] = &[
    "definitions",
    "evidence",
    "examples",
    "context",
    "assumptions",
    "tradeoffs",
    "sources",
    "metrics",
    "comparisons",
    "constraints",
    "observations",
    "principles",
    "analogies",
    "experiments",
    "diagrams",
    "summaries",
    "references",
    "estimates",
    "scenarios",
    "benchmarks",
    "checklists",
    "timelines",
    "counterexamples",
    "models",
    "datasets",
    "narratives",
    "heuristics",
    "proofs",
    "caveats",
    "categories",
];
const VERBS: &[&str] = &[
    "anchor",
    "support",
    "clarify",
    "strengthen",
    "frame",
    "guide",
    "reveal",
    "sharpen",
    "justify",
    "simplify",
    "illuminate",
    "organize",
    "validate",
    "highlight",
    "inform",
    "shape",
    "improve",
    "balance",
    "ground",
    "connect",
    "expose",
    "refine",
    "confirm",
    "motivate",
    "steer",
    "streamline",
    "contextualize",
    "explain",
    "quantify",
    "prioritize",
];
const OBJECTS: &[&str] = &[
    "conclusions",
    "understanding",
    "decisions",
    "judgement",
    "reasoning",
    "interpretation",
    "recommendations",
    "outcomes",
    "insight",
    "accuracy",
    "trust",
    "planning",
    "clarity",
    "learning",
    "answers",
    "choices",
    "priorities",
    "results",
    "arguments",
    "intuition",
    "design",
    "policy",
    "communication",
    "forecasts",
    "strategy",
    "teaching",
    "debate",
    "research",
    "review",
    "consensus",
];
const OPENERS: &[&str] = &[
    "On",
    "Regarding",
    "Answering",
    "About",
    "Considering",
    "Addressing",
    "Concerning",
    "For",
];

/// Longest question quote, in words: a long question would otherwise dominate the answer
/// and make every model's answer look alike.
const QUOTE_WORDS: usize = 12;

/// Longest question quote, in characters (then cut and marked `…`). Without it a question
/// with few spaces was quoted whole: an answer as big as the question, streamed as a
/// `new_answer` call in 8-byte argument fragments with a token delay each (a 20 KB question
/// without spaces took 84 s in the demo) and copied into every later prompt.
const QUOTE_CHARS: usize = 96;

/// A coordination answer: starts with `[simulated]`, exactly `words` whitespace-separated
/// words (never fewer than the marker plus one).
pub fn answer(seed: &str, question: &str, words: usize) -> String {
    compose("[simulated]", seed, question, words)
}

/// The presentation (final answer) text: starts with `[simulated final answer]`.
pub fn final_answer(seed: &str, question: &str, words: usize) -> String {
    compose(
        "[simulated final answer]",
        &format!("final\n{seed}"),
        question,
        words,
    )
}

/// A short reasoning trace streamed as `reasoning_content` with `reasoning=on`.
pub fn reasoning(seed: &str, question: &str) -> String {
    compose(
        "[simulated reasoning]",
        &format!("reasoning\n{seed}"),
        question,
        16,
    )
}

/// The original question: between `<original_message>` tags when present (the coordination
/// prompt), else the whole message.
pub fn question_of(last_user: &str) -> String {
    let inner = between(last_user, "<original_message>", "</original_message>");
    inner.unwrap_or(last_user).trim().to_string()
}

/// The text of the first `<answer …>…</answer>` block, trimmed.
pub fn first_answer_block(text: &str) -> Option<&str> {
    let mut rest = text;
    while let Some(at) = rest.find("<answer") {
        let after = &rest[at + "<answer".len()..];
        if after.starts_with('>') || after.starts_with(char::is_whitespace) {
            let body = &after[after.find('>')? + 1..];
            return Some(body[..body.find("</answer>")?].trim());
        }
        rest = after;
    }
    None
}

/// The text between `open` and the next `close`.
pub fn block<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    between(text, open, close)
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let len = text[start..].find(close)?;
    Some(&text[start..start + len])
}

/// Splits `text` into stream pieces (each word with its leading whitespace), so that the
/// pieces concatenate back to `text`.
pub fn pieces(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    for c in text.chars() {
        if c.is_whitespace() && in_word {
            out.push(std::mem::take(&mut current));
            in_word = false;
        } else if !c.is_whitespace() {
            in_word = true;
        }
        current.push(c);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

fn compose(marker: &str, seed: &str, question: &str, words: usize) -> String {
    let mut rng = SplitMix(fnv1a(seed) ^ fnv1a(question).rotate_left(17));
    let mut out: Vec<String> = marker.split(' ').map(String::from).collect();
    let target = words.max(out.len() + 1);
    if let Some(quoted) = quote(question) {
        let opener = OPENERS[rng.below(OPENERS.len())];
        out.push(opener.to_string());
        let mut quoted_words: Vec<String> = quoted.split(' ').map(String::from).collect();
        if let Some(first) = quoted_words.first_mut() {
            first.insert(0, '“');
        }
        if let Some(last) = quoted_words.last_mut() {
            last.push_str("”:");
        }
        out.extend(quoted_words);
    }
    let pools = [ADJECTIVES, NOUNS, VERBS, OBJECTS];
    let mut orders: Vec<Deck> = pools.iter().map(|p| Deck::new(p.len())).collect();
    while out.len() < target {
        for (slot, pool) in pools.iter().enumerate() {
            let mut word = pool[orders[slot].draw(&mut rng)].to_string();
            if slot == pools.len() - 1 {
                word.push('.');
            }
            out.push(word);
        }
    }
    out.truncate(target);
    if let Some(last) = out.last_mut()
        && !last.ends_with(['.', ':'])
    {
        last.push('.');
    }
    out.join(" ")
}

/// The start of `question` for an answer to quote: at most `QUOTE_WORDS` words and
/// `QUOTE_CHARS` characters, with `…` when cut; `None` for a blank question. Reads only
/// that start, however long the question.
fn quote(question: &str) -> Option<String> {
    let mut words = question.split_whitespace();
    let mut quoted = String::new();
    let mut chars = 0;
    let mut cut = false;
    for word in words.by_ref().take(QUOTE_WORDS) {
        let space = usize::from(!quoted.is_empty());
        let room = QUOTE_CHARS.saturating_sub(chars + space);
        if room == 0 {
            cut = true;
            break;
        }
        if space == 1 {
            quoted.push(' ');
            chars += 1;
        }
        match word.char_indices().nth(room) {
            Some((at, _)) => {
                quoted.push_str(&word[..at]);
                cut = true;
                break;
            }
            None => {
                quoted.push_str(word);
                chars += word.chars().count();
            }
        }
    }
    if quoted.is_empty() {
        return None;
    }
    if cut || words.next().is_some() {
        quoted.push('…');
    }
    Some(quoted)
}

/// Draws pool indices without repetition until the pool is exhausted, then reshuffles, so
/// one answer rarely repeats a word.
struct Deck {
    order: Vec<usize>,
}

impl Deck {
    fn new(len: usize) -> Self {
        Self {
            order: Vec::with_capacity(len),
        }
    }

    fn draw(&mut self, rng: &mut SplitMix) -> usize {
        if self.order.is_empty() {
            self.order = (0..self.order.capacity()).collect();
        }
        let at = rng.below(self.order.len());
        self.order.swap_remove(at)
    }
}

/// A tiny fixed PRNG: simulated text (and `accuracy`'s draws, [`crate::truth`]) must be
/// identical across runs and crate versions.
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes [`fnv1a`] hashes one at a time, as FNV-1a does; it takes the rest 8 bytes a step.
/// Byte by byte, hashing a 9.5 MB prompt (twice a request: the seed and the question) took
/// ~90 ms in a debug build, by words ~5 ms; the texts of prompts up to this size are the
/// same as before.
const FNV_BYTEWISE: usize = 64 * 1024;

pub(crate) fn fnv1a(s: &str) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let step = |h: u64, b: &u8| (h ^ u64::from(*b)).wrapping_mul(PRIME);
    let (head, tail) = s.as_bytes().split_at(s.len().min(FNV_BYTEWISE));
    let h = head.iter().fold(0xcbf2_9ce4_8422_2325, step);
    let (words, rest) = tail.as_chunks::<8>();
    let h = words
        .iter()
        .fold(h, |h, w| (h ^ u64::from_le_bytes(*w)).wrapping_mul(PRIME));
    rest.iter().fold(h, step)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn jaccard(a: &str, b: &str) -> f64 {
        let set =
            |s: &str| -> HashSet<String> { s.split_whitespace().map(str::to_lowercase).collect() };
        let (a, b) = (set(a), set(b));
        a.intersection(&b).count() as f64 / a.union(&b).count() as f64
    }

    #[test]
    fn answer_is_marked_sized_and_quotes_the_question() {
        let a = answer("sim-a", "What is the capital of France?", 30);
        assert!(a.starts_with("[simulated] "), "{a}");
        assert_eq!(a.split_whitespace().count(), 30, "{a}");
        assert!(a.contains("capital of France?"), "{a}");
        let f = final_answer("sim-a", "What is the capital of France?", 30);
        assert!(f.starts_with("[simulated final answer] "), "{f}");
        assert_eq!(answer("sim-a", "q", 1).split_whitespace().count(), 2);
    }

    #[test]
    fn same_seed_same_text_different_seeds_dissimilar() {
        let q = "Explain how vaccines train the immune system";
        assert_eq!(answer("sim-a", q, 30), answer("sim-a", q, 30));
        let names = [
            "sim-a", "sim-b", "sim-c", "agent1", "agent2", "gpt", "claude",
        ];
        for (i, x) in names.iter().enumerate() {
            for y in &names[i + 1..] {
                let j = jaccard(&answer(x, q, 30), &answer(y, q, 30));
                assert!(j < 0.5, "{x} vs {y}: {j}");
            }
        }
    }

    #[test]
    fn long_questions_are_truncated() {
        let q = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen";
        let a = answer("s", q, 40);
        assert!(a.contains("twelve…”:") && !a.contains("thirteen"), "{a}");
    }

    #[test]
    fn quotes_are_capped_in_characters_too() {
        // One 20,000-character "word": quoted whole, it made the answer as long as the
        // question.
        let q = "x".repeat(20_000);
        let a = answer("s", &q, 30);
        assert_eq!(a.split_whitespace().count(), 30, "{a}");
        let quoted = format!("“{}…”:", "x".repeat(QUOTE_CHARS));
        assert!(a.contains(&quoted), "{a}");
        assert!(a.len() < 600, "{} bytes", a.len());
        // Words stop at the cap without a dangling space; short questions are quoted whole.
        let q = format!("{} tail", "y".repeat(QUOTE_CHARS - 1));
        assert_eq!(
            quote(&q).unwrap(),
            format!("{}…", "y".repeat(QUOTE_CHARS - 1))
        );
        assert_eq!(
            quote("  Why is the sky blue? ").unwrap(),
            "Why is the sky blue?"
        );
        assert_eq!(quote(" \n "), None);
        let q = format!("{} é{}", "z".repeat(10), "é".repeat(200));
        let cut = quote(&q).unwrap();
        assert_eq!(cut.chars().count(), QUOTE_CHARS + 1, "{cut}");
    }

    #[test]
    fn fnv1a_is_fnv_1a_then_takes_every_byte_of_long_texts() {
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a("foobar"), 0x8594_4171_f739_67e8);
        let long = "ab".repeat(FNV_BYTEWISE);
        let mut hashes = HashSet::new();
        for at in [0, FNV_BYTEWISE + 1, long.len() - 9, long.len() - 1] {
            let mut changed = long.clone().into_bytes();
            changed[at] = b'c';
            assert!(hashes.insert(fnv1a(&String::from_utf8(changed).unwrap())));
        }
        assert!(hashes.insert(fnv1a(&long)));
        assert!(hashes.insert(fnv1a(&long[1..])));
    }

    #[test]
    fn question_and_answer_blocks_are_found() {
        let msg = "ctx\n<original_message>\nWhy is the sky blue?\n</original_message>\n\
                   <answers><answer label=\"agent1\">\n first text \n</answer>\
                   <answer label=\"agent2\">second</answer></answers>";
        assert_eq!(question_of(msg), "Why is the sky blue?");
        assert_eq!(question_of("  plain  "), "plain");
        assert_eq!(first_answer_block(msg), Some("first text"));
        assert_eq!(first_answer_block("<answers>none</answers>"), None);
    }

    #[test]
    fn pieces_concatenate_back() {
        let t = "[simulated] a  b\nc ";
        let p = pieces(t);
        assert_eq!(p, vec!["[simulated]", " a", "  b", "\nc", " "]);
        assert_eq!(p.concat(), t);
    }
}
