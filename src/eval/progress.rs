//! The progress line on stderr: items done of all, failed results, spend so far, time
//! left. On a terminal it is one line redrawn in place (`\r`); elsewhere (a log, a CI
//! job) plain lines, the first item's and then at most one every ten seconds, and the
//! last, so a long run's log stays readable.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A terminal's line is redrawn at most this often.
const REDRAW: Duration = Duration::from_millis(200);
/// A plain line is written at most this often.
const EVERY: Duration = Duration::from_secs(10);

pub struct Progress {
    total: usize,
    terminal: bool,
    state: Mutex<State>,
}

struct State {
    /// Items finished, earlier runs' included.
    done: usize,
    /// Items finished by this invocation (the rate the time left is estimated from).
    done_now: usize,
    /// Results of this invocation that failed.
    failed: usize,
    /// Items not started (budget reached, failures, or Ctrl-C), and why.
    skipped: usize,
    why: &'static str,
    started: Instant,
    printed: Option<Instant>,
}

impl Progress {
    /// `total` items, `done` of them finished by an earlier run.
    pub fn new(total: usize, done: usize) -> Self {
        if done > 0 {
            say(&format!(
                "eval: resuming: {done} of {total} items already graded"
            ));
        }
        Self {
            total,
            terminal: std::io::stderr().is_terminal(),
            state: Mutex::new(State {
                done,
                done_now: 0,
                skipped: 0,
                failed: 0,
                why: "",
                started: Instant::now(),
                printed: None,
            }),
        }
    }

    /// A result failed (it shows in the count).
    pub fn failed(&self) {
        self.state().failed += 1;
    }

    /// An item has no job left: `graded` (else it was not started, for `why`).
    pub fn item_done(&self, spent_usd: f64, graded: bool, why: &'static str) {
        let mut state = self.state();
        if !graded {
            state.skipped += 1;
            state.why = why;
            return;
        }
        state.done += 1;
        state.done_now += 1;
        let every = if self.terminal { REDRAW } else { EVERY };
        let due = state.printed.is_none_or(|at| at.elapsed() >= every);
        if !due && state.done < self.total {
            return;
        }
        state.printed = Some(Instant::now());
        let line = progress_line(&state, self.total, spent_usd);
        if self.terminal {
            redraw(&line);
        } else {
            say(&line);
        }
    }

    pub fn finish(&self, spent_usd: f64) {
        let state = self.state();
        let skipped = if state.skipped > 0 {
            format!(" ({} not started: {})", state.skipped, state.why)
        } else {
            String::new()
        };
        let failed = match state.failed {
            0 => String::new(),
            1 => ", 1 result failed".to_string(),
            n => format!(", {n} results failed"),
        };
        say(&format!(
            "eval: done: {}/{} items graded{skipped}{failed}, ${spent_usd:.4} spent in {}",
            state.done,
            self.total,
            clock(state.started.elapsed().as_secs_f64())
        ));
    }

    pub fn warn(&self, message: &str) {
        say(&format!("eval: warning: {message}"));
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn progress_line(state: &State, total: usize, spent_usd: f64) -> String {
    let left = total.saturating_sub(state.done);
    let eta = if left == 0 || state.done_now == 0 {
        String::new()
    } else {
        let per_item = state.started.elapsed().as_secs_f64() / state.done_now as f64;
        format!(", about {} left", clock(per_item * left as f64))
    };
    let failed = match state.failed {
        0 => String::new(),
        n => format!(", {n} failed"),
    };
    format!(
        "eval: {}/{total} items{failed}, ${spent_usd:.4} spent{eta}",
        state.done
    )
}

fn clock(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

/// A line of its own on stderr. On a terminal the progress line is cleared first (it is
/// redrawn at the next item), so nothing is written over it.
pub fn say(text: &str) {
    let mut err = std::io::stderr().lock();
    let clear = if std::io::stderr().is_terminal() {
        "\r\x1b[2K"
    } else {
        ""
    };
    let _ = writeln!(err, "{clear}{text}");
}

/// The progress line, drawn over the last one (no newline: the next line clears it).
fn redraw(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r\x1b[2K{text}");
    let _ = err.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_reads_like_a_clock() {
        assert_eq!(super::clock(4.4), "4s");
        assert_eq!(super::clock(65.0), "1m05s");
        assert_eq!(super::clock(7322.0), "2h02m");
    }

    #[test]
    fn the_line_says_items_failures_spend_and_time_left() {
        let mut state = State {
            done: 5,
            done_now: 5,
            failed: 0,
            skipped: 0,
            why: "",
            started: Instant::now(),
            printed: None,
        };
        let line = progress_line(&state, 20, 0.0123);
        assert!(
            line.starts_with("eval: 5/20 items, $0.0123 spent, about "),
            "{line}"
        );
        state.failed = 3;
        state.done = 20;
        assert_eq!(
            progress_line(&state, 20, 1.0),
            "eval: 20/20 items, 3 failed, $1.0000 spent"
        );
    }
}
