//! The progress line on stderr: items done, spend so far, time left. At most one line a
//! second (and the last), so a long run's log stays readable.

use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const EVERY: Duration = Duration::from_secs(1);

pub struct Progress {
    total: usize,
    state: Mutex<State>,
}

struct State {
    /// Items finished, earlier runs' included.
    done: usize,
    /// Items finished by this invocation (the rate the time left is estimated from).
    done_now: usize,
    /// Items not started (budget reached, or Ctrl-C), and why.
    skipped: usize,
    why: &'static str,
    started: Instant,
    printed: Option<Instant>,
}

impl Progress {
    /// `total` items, `done` of them finished by an earlier run.
    pub fn new(total: usize, done: usize) -> Self {
        if done > 0 {
            line(&format!(
                "eval: resuming: {done} of {total} items already graded"
            ));
        }
        Self {
            total,
            state: Mutex::new(State {
                done,
                done_now: 0,
                skipped: 0,
                why: "",
                started: Instant::now(),
                printed: None,
            }),
        }
    }

    /// An item has no job left: `graded` (else it was not started, for `why`).
    pub fn item_done(&self, spent_usd: f64, graded: bool, why: &'static str) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !graded {
            state.skipped += 1;
            state.why = why;
            return;
        }
        state.done += 1;
        state.done_now += 1;
        let due = state.printed.is_none_or(|at| at.elapsed() >= EVERY);
        if !due && state.done < self.total {
            return;
        }
        state.printed = Some(Instant::now());
        let left = self.total.saturating_sub(state.done);
        let eta = if left == 0 || state.done_now == 0 {
            String::new()
        } else {
            let per_item = state.started.elapsed().as_secs_f64() / state.done_now as f64;
            format!(", about {} left", clock(per_item * left as f64))
        };
        line(&format!(
            "eval: {}/{} items, ${spent_usd:.4} spent{eta}",
            state.done, self.total
        ));
    }

    pub fn finish(&self, spent_usd: f64) {
        let state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let skipped = if state.skipped > 0 {
            format!(" ({} not started: {})", state.skipped, state.why)
        } else {
            String::new()
        };
        line(&format!(
            "eval: done: {}/{} items graded{skipped}, ${spent_usd:.4} spent in {}",
            state.done,
            self.total,
            clock(state.started.elapsed().as_secs_f64())
        ));
    }

    pub fn warn(&self, message: &str) {
        line(&format!("eval: warning: {message}"));
    }
}

fn clock(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

fn line(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{text}");
}

#[cfg(test)]
mod tests {
    #[test]
    fn clock_reads_like_a_clock() {
        assert_eq!(super::clock(4.4), "4s");
        assert_eq!(super::clock(65.0), "1m05s");
        assert_eq!(super::clock(7322.0), "2h02m");
    }
}
