//! Answers of a known accuracy, so that an evaluation (`massgen eval`) can be tested offline
//! against accuracies it should measure.
//!
//! - `accuracy=P` with a `[sim:truth=V]` marker in the question ([`crate::text::question_of`]):
//!   every answer text ends with a line `Answer: V` with probability P, else with the one
//!   distractor (V+1 for an integer V, `not V` otherwise). Each request draws anew from a
//!   SplitMix seeded by (`seed`, the model string, the question, the draw number n for
//!   this pair in this simulator instance), so k identical requests make k independent
//!   draws and a fresh instance repeats the same sequence.
//! - Votes (with `accuracy` or `policy=judge`) go to the first shown answer of the value
//!   most shown answers state (their last `Answer:` or `VERDICT:` line); the final
//!   presentation restates its own answer's value (or else the most common one) without a
//!   draw.
//! - `policy=judge` compares the question's `<candidate_answer>` with its
//!   `<reference_answer>` and ends with `VERDICT: CORRECT` or `VERDICT: INCORRECT`; with
//!   `accuracy=P` the verdict is right with probability P.

use std::cell::OnceCell;

use crate::behaviour::{Behaviour, Policy};
use crate::plan::Offered;
use crate::text::{self, SplitMix, fnv1a};

/// Opens the ground-truth marker of a question; the value runs to the next `]`.
pub const TRUTH_MARKER: &str = "[sim:truth=";
/// The sentence of massgen's presentation prompt naming the presenter's own answer.
const OWN_LABEL: &str = "Your own answer is the one labelled ";
const ANSWER: &str = "Answer:";
const VERDICT: &str = "VERDICT:";

/// Which kind of line stated a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Answer,
    Verdict,
}

/// A value an answer states, and the kind of line it was on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stated {
    pub value: String,
    pub kind: Kind,
}

impl Stated {
    /// The line that states it again, with the newline before it.
    pub fn line(&self) -> String {
        let prefix = match self.kind {
            Kind::Answer => ANSWER,
            Kind::Verdict => VERDICT,
        };
        format!("\n{prefix} {}", self.value)
    }
}

/// One `<answer label="…">` block of a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub label: String,
    pub stated: Option<Stated>,
}

/// The ground truth of a question: the marker's value, trimmed; `None` without a marker,
/// without its closing `]`, or with an empty value.
pub fn truth_of(question: &str) -> Option<&str> {
    let start = question.find(TRUTH_MARKER)? + TRUTH_MARKER.len();
    let rest = &question[start..];
    let value = rest[..rest.find(']')?].trim();
    (!value.is_empty()).then_some(value)
}

/// The one wrong answer to `truth`: the next integer, or `not <truth>`.
pub fn distractor(truth: &str) -> String {
    match truth.parse::<i128>().ok().and_then(|t| t.checked_add(1)) {
        Some(next) => next.to_string(),
        None => format!("not {truth}"),
    }
}

/// Draw number `n` for this seed, model string and question: uniform in [0, 1).
pub fn draw(seed: u64, model: &str, question: &str, n: u64) -> f64 {
    let mut rng = SplitMix(fnv1a(&format!("{seed}\u{1}{model}\u{1}{n}\u{1}{question}")));
    // The top 53 bits: every such value is exact in an f64, and the result stays below 1.
    (rng.next() >> 11) as f64 / (1u64 << 53) as f64
}

/// The key under which a simulator instance numbers the draws of a (model, question) pair.
/// The question is hashed: keys are kept for the instance's lifetime and questions can be
/// megabytes long.
pub fn counter_key(model: &str, question: &str) -> String {
    format!("{model}\u{1}truth\u{1}{:016x}", fnv1a(question))
}

/// Lowercased, trimmed, whitespace runs as one space, one trailing `.` dropped.
pub fn normalise(s: &str) -> String {
    let collapsed = s
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let stripped = collapsed.strip_suffix('.').unwrap_or(&collapsed);
    stripped.trim_end().to_string()
}

/// The value of an answer: its last line starting with `Answer:` or `VERDICT:` (what
/// follows the colon, trimmed); `None` when there is none or it is empty.
pub fn value_of(text: &str) -> Option<Stated> {
    last_line(text, &[(ANSWER, Kind::Answer), (VERDICT, Kind::Verdict)])
}

fn last_line(text: &str, prefixes: &[(&str, Kind)]) -> Option<Stated> {
    text.lines()
        .rev()
        .find_map(|line| {
            let line = line.trim_start();
            let (prefix, kind) = prefixes.iter().find(|(p, _)| line.starts_with(p))?;
            Some(Stated {
                value: line[prefix.len()..].trim().to_string(),
                kind: *kind,
            })
        })
        .filter(|s| !s.value.is_empty())
}

/// The answer blocks of a prompt, in the order shown (inside `<current_answers>` when the
/// prompt has that block, so a question quoting such tags is not read as answers).
pub fn shown_answers(prompt: &str) -> Vec<Shown> {
    let region = text::block(prompt, "<current_answers>", "</current_answers>").unwrap_or(prompt);
    let mut out = Vec::new();
    let mut rest = region;
    while let Some(at) = rest.find("<answer") {
        let after = &rest[at + "<answer".len()..];
        if !(after.starts_with('>') || after.starts_with(char::is_whitespace)) {
            rest = after;
            continue;
        }
        let Some(tag_end) = after.find('>') else {
            break;
        };
        let tail = &after[tag_end + 1..];
        let Some(end) = tail.find("</answer>") else {
            break;
        };
        if let Some(label) = label_of(&after[..tag_end]) {
            out.push(Shown {
                label: label.to_string(),
                stated: value_of(&tail[..end]),
            });
        }
        rest = &tail[end + "</answer>".len()..];
    }
    out
}

fn label_of(tag: &str) -> Option<&str> {
    let start = tag.find("label=\"")? + "label=\"".len();
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

/// The first shown answer (among those `allowed`) of the value most of them state; ties go
/// to the value shown first. `None` when no allowed answer states a value.
pub fn majority(shown: &[Shown], allowed: impl Fn(&str) -> bool) -> Option<&Shown> {
    let valued: Vec<(&Shown, String)> = shown
        .iter()
        .filter(|s| allowed(&s.label))
        .filter_map(|s| Some((s, normalise(&s.stated.as_ref()?.value))))
        .collect();
    let mut best: Option<(usize, &Shown)> = None;
    for (i, (answer, value)) in valued.iter().enumerate() {
        if valued[..i].iter().any(|(_, v)| v == value) {
            continue;
        }
        let count = valued.iter().filter(|(_, v)| v == value).count();
        if best.is_none_or(|(most, _)| count > most) {
            best = Some((count, answer));
        }
    }
    best.map(|(_, answer)| answer)
}

/// The label massgen's presentation prompt names as the presenter's own answer.
fn own_label(prompt: &str) -> Option<&str> {
    let start = prompt.rfind(OWN_LABEL)? + OWN_LABEL.len();
    let word = prompt[start..].split_whitespace().next()?;
    Some(word.trim_end_matches('.'))
}

/// What a final presentation restates: its own answer's value, else the most common value
/// among the shown answers.
pub fn restate(prompt: &str) -> Option<Stated> {
    let shown = shown_answers(prompt);
    let own = own_label(prompt)
        .and_then(|label| shown.iter().find(|s| s.label == label))
        .and_then(|s| s.stated.clone());
    own.or_else(|| majority(&shown, |_| true).and_then(|s| s.stated.clone()))
}

/// Whether the question's candidate answer matches its reference answer; `None` when either
/// tag is missing. The candidate's value is what its last `Answer:` line states, else all
/// of it.
pub fn judge(question: &str) -> Option<bool> {
    let reference = text::block(question, "<reference_answer>", "</reference_answer>")?;
    let candidate = text::block(question, "<candidate_answer>", "</candidate_answer>")?;
    let value = last_line(candidate, &[(ANSWER, Kind::Answer)]).map(|s| s.value);
    let value = value.as_deref().unwrap_or(candidate);
    Some(normalise(reference) == normalise(value))
}

/// What `accuracy` and `policy=judge` make of one request. Draws at most once, however
/// many times the plan asks (a forced tool call can rebuild an answer).
pub struct Truth<'a> {
    behaviour: &'a Behaviour,
    model: &'a str,
    question: &'a str,
    prompt: &'a str,
    next_draw: &'a dyn Fn(&str) -> u64,
    right: OnceCell<bool>,
}

impl<'a> Truth<'a> {
    /// `prompt`: the last user message; `next_draw(key)`: how many draws the instance
    /// already made for `key` (see [`crate::stats::Stats::next_draw`]).
    pub fn new(
        behaviour: &'a Behaviour,
        model: &'a str,
        question: &'a str,
        prompt: &'a str,
        next_draw: &'a dyn Fn(&str) -> u64,
    ) -> Self {
        Self {
            behaviour,
            model,
            question,
            prompt,
            next_draw,
            right: OnceCell::new(),
        }
    }

    /// Whether votes and presentations follow the stated values.
    fn active(&self) -> bool {
        self.behaviour.accuracy.is_some() || self.behaviour.policy == Policy::Judge
    }

    /// Whether this request's answer is right (always, without `accuracy`).
    fn right(&self) -> bool {
        *self.right.get_or_init(|| match self.behaviour.accuracy {
            None => true,
            Some(p) => {
                let n = (self.next_draw)(&counter_key(self.model, self.question));
                draw(self.behaviour.seed, self.model, self.question, n) < p.get()
            }
        })
    }

    /// An answer text: `base` itself, `base` ending with `Answer: V` (with `accuracy` and a
    /// truth marker), or a judge's verdict.
    pub fn answer(&self, base: String) -> String {
        if self.behaviour.policy == Policy::Judge {
            return self.verdict();
        }
        let truth = self.behaviour.accuracy.and(truth_of(self.question));
        let Some(truth) = truth else {
            return base;
        };
        let value = if self.right() {
            truth.to_string()
        } else {
            distractor(truth)
        };
        format!("{base}\n{ANSWER} {value}")
    }

    fn verdict(&self) -> String {
        let Some(matches) = judge(self.question) else {
            return format!(
                "[simulated judge] no reference or candidate answer\n{VERDICT} INCORRECT"
            );
        };
        if matches == self.right() {
            format!("[simulated judge] the candidate matches the reference\n{VERDICT} CORRECT")
        } else {
            format!(
                "[simulated judge] the candidate differs from the reference\n{VERDICT} INCORRECT"
            )
        }
    }

    /// The label to vote for: the majority value's first answer among `labels` (every
    /// shown answer when the vote tool lists none); `None` to vote as usual.
    pub fn vote(&self, labels: &[String]) -> Option<String> {
        if !self.active() {
            return None;
        }
        let shown = shown_answers(self.prompt);
        let offered = |label: &str| labels.is_empty() || labels.iter().any(|l| l == label);
        majority(&shown, offered).map(|s| s.label.clone())
    }

    /// The line a final presentation (no workflow tools offered, answers shown) ends with;
    /// `None` when this is no such call or no shown answer states a value.
    pub fn restated(&self, offered: &Offered) -> Option<String> {
        if !self.active() || offered.new_answer || offered.vote.is_some() {
            return None;
        }
        restate(self.prompt).map(|s| s.line())
    }
}

#[cfg(test)]
#[path = "truth_tests.rs"]
mod tests;
