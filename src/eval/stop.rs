//! When a run starts no new item, and why: the budget spent (`--max-cost-usd`), too many
//! failed results (`--max-failures`, `--max-failure-rate`) or Ctrl-C. Items already
//! started finish on every arm either way, so the comparison stays paired; the report
//! says why it stopped, and the exit code too.

use std::collections::HashMap;

use super::report::{StopReason, Stopped};

/// When failures stop a run: its first `first` results all failed, or, once at least
/// twice that many are in, more than `rate` of them did. A dead upstream, a wrong key or
/// an exhausted quota then costs a few items, not the whole data set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FailureRule {
    pub first: usize,
    pub rate: f64,
}

impl Default for FailureRule {
    fn default() -> Self {
        Self {
            first: 10,
            rate: 0.5,
        }
    }
}

/// This invocation's results so far: how many, how many failed, and with what.
#[derive(Debug, Default)]
pub struct Tally {
    results: usize,
    failed: usize,
    errors: HashMap<String, usize>,
}

impl Tally {
    /// Counts one result (`failed`: its error); says why the run must stop when this
    /// result reached `rule`.
    pub fn count(&mut self, failed: Option<&str>, rule: FailureRule) -> Option<String> {
        self.results += 1;
        if let Some(error) = failed {
            self.failed += 1;
            *self.errors.entry(error.to_string()).or_default() += 1;
        }
        let (results, failed) = (self.results, self.failed);
        if results == rule.first && failed == results {
            return Some(format!("the first {results} results all failed"));
        }
        let floor = rule.first.saturating_mul(2);
        if results >= floor && failed as f64 > rule.rate * results as f64 {
            return Some(format!(
                "{failed} of {results} results failed (more than {}%)",
                percent(rule.rate)
            ));
        }
        None
    }

    pub fn failed(&self) -> usize {
        self.failed
    }

    /// The error most failed results gave (ties: the shortest, then the first in
    /// alphabetical order, so the same run says the same).
    pub fn most_common_error(&self) -> Option<String> {
        self.errors
            .iter()
            .max_by(|(a, n), (b, m)| {
                n.cmp(m)
                    .then_with(|| b.len().cmp(&a.len()))
                    .then_with(|| b.cmp(a))
            })
            .map(|(error, _)| error.clone())
    }
}

fn percent(rate: f64) -> String {
    let p = rate * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{p:.0}")
    } else {
        format!("{p}")
    }
}

/// How a run ended, for the report and the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Every planned item finished.
    Complete,
    /// `--max-cost-usd` left items out (exit 3).
    Budget,
    /// The failure rule was reached (exit 4).
    Failures,
    /// Ctrl-C or SIGTERM (exit 130).
    Interrupted,
}

impl Ending {
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Complete => 0,
            Self::Budget => 3,
            Self::Failures => 4,
            Self::Interrupted => 130,
        }
    }
}

/// What the run learned about stopping while it ran.
#[derive(Debug, Default)]
pub struct Stops {
    /// The first rule reached (budget or failures), and what it said.
    pub reached: Option<(StopReason, String)>,
    /// Ctrl-C or SIGTERM came.
    pub interrupted: bool,
    /// Items not started.
    pub skipped: usize,
    pub total: usize,
}

impl Stops {
    /// The report's `stopped` and how the run ended. A reached failure rule stops the run
    /// even when every item had already started (their results are what failed); the
    /// budget and Ctrl-C only when they left an item out.
    pub fn verdict(&self, tally: &Tally) -> (Option<Stopped>, Ending) {
        let left_out = if self.skipped == 0 {
            "every item had started".to_string()
        } else {
            format!("{} of {} items not started", self.skipped, self.total)
        };
        let stopped = match &self.reached {
            Some((StopReason::Failures, why)) => Some(Stopped {
                reason: StopReason::Failures,
                message: format!("{why}; {left_out}."),
                most_common_error: tally.most_common_error(),
            }),
            Some((reason, why)) if self.skipped > 0 => Some(Stopped {
                reason: *reason,
                message: format!("{why}; {left_out}."),
                most_common_error: None,
            }),
            _ if self.interrupted && self.skipped > 0 => Some(Stopped {
                reason: StopReason::Interrupted,
                message: format!("interrupted (Ctrl-C or SIGTERM); {left_out}."),
                most_common_error: None,
            }),
            _ => None,
        };
        let ending = if self.interrupted {
            Ending::Interrupted
        } else {
            match stopped.as_ref().map(|s| s.reason) {
                Some(StopReason::Failures) => Ending::Failures,
                Some(StopReason::Budget) => Ending::Budget,
                Some(StopReason::Interrupted) => Ending::Interrupted,
                None => Ending::Complete,
            }
        };
        (stopped, ending)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;

    /// The result count at which `outcomes` (true: failed) first reach `rule`.
    fn stops_at(outcomes: impl IntoIterator<Item = bool>, rule: FailureRule) -> Option<usize> {
        let mut tally = Tally::default();
        outcomes
            .into_iter()
            .position(|failed| tally.count(failed.then_some("down"), rule).is_some())
            .map(|i| i + 1)
    }

    #[test]
    fn the_first_results_all_failing_or_most_of_many_stop_the_run() {
        let rule = FailureRule::default();
        assert_eq!(stops_at(std::iter::repeat_n(true, 100), rule), Some(10));
        // One success among the first ten: the rate decides, from the twentieth on.
        let mostly = std::iter::once(false).chain(std::iter::repeat_n(true, 99));
        assert_eq!(stops_at(mostly, rule), Some(20));
        // Half is not more than half (a success first: never more failures than half).
        let half = (0..100).map(|i| i % 2 == 1);
        assert_eq!(stops_at(half, rule), None);
        let none = std::iter::repeat_n(false, 100);
        assert_eq!(stops_at(none, rule), None);
        // A late outage: 30 fine, then failures until more than half of all failed.
        let late = std::iter::repeat_n(false, 30).chain(std::iter::repeat_n(true, 100));
        assert_eq!(stops_at(late, rule), Some(61));
        let strict = FailureRule {
            first: 3,
            rate: 0.0,
        };
        assert_eq!(stops_at([true, true, true], strict), Some(3));
        assert_eq!(
            stops_at([false, false, false, false, false, true], strict),
            Some(6)
        );
        let lenient = FailureRule {
            first: 5,
            rate: 1.0,
        };
        assert_eq!(
            stops_at([false].into_iter().chain([true; 50]), lenient),
            None
        );
    }

    #[test]
    fn the_verdict_names_the_reason_and_the_most_common_error() {
        let mut tally = Tally::default();
        let rule = FailureRule::default();
        for error in ["b: 500", "a: refused", "a: refused", "b: 500", "a: refused"] {
            tally.count(Some(error), rule);
        }
        assert_eq!(tally.most_common_error().as_deref(), Some("a: refused"));
        let stops = Stops {
            reached: Some((
                StopReason::Failures,
                "the first 10 results all failed".into(),
            )),
            interrupted: false,
            skipped: 17,
            total: 20,
        };
        let (stopped, ending) = stops.verdict(&tally);
        let stopped = stopped.unwrap();
        assert_eq!(ending, Ending::Failures);
        assert_eq!(ending.exit_code(), 4);
        assert_eq!(
            stopped.message,
            "the first 10 results all failed; 17 of 20 items not started."
        );
        assert_eq!(stopped.most_common_error.as_deref(), Some("a: refused"));
        // A budget reached with nothing left to start stops nothing.
        let spent = Stops {
            reached: Some((StopReason::Budget, "spent".into())),
            skipped: 0,
            total: 3,
            interrupted: false,
        };
        assert_eq!(spent.verdict(&tally), (None, Ending::Complete));
        let budget = Stops {
            skipped: 1,
            ..spent
        };
        assert_eq!(budget.verdict(&tally).1.exit_code(), 3);
        // Ctrl-C is the user's word: 130 whatever else happened.
        let interrupted = Stops {
            interrupted: true,
            ..budget
        };
        let (stopped, ending) = interrupted.verdict(&tally);
        assert_eq!(stopped.unwrap().reason, StopReason::Budget);
        assert_eq!(ending.exit_code(), 130);
    }
}
