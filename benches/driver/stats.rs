//! Percentiles and the critical path.

use super::mock::Call;

/// Nearest-rank percentile (`q` in 0..=100) of unsorted samples; 0 for none.
pub fn pct(samples: &[f64], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((q / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

/// The heaviest chain of upstream calls that ran one after another (each started after
/// the previous one's response ended), as (sum of their durations in ms, chain length).
/// Everything else in a session's wall time is time the server and client added: no
/// upstream work was on the way.
pub fn critical_path(calls: &[Call]) -> (f64, usize) {
    let mut calls: Vec<&Call> = calls.iter().collect();
    calls.sort_by_key(|c| c.end);
    // best[i]: heaviest chain ending with calls[i] (weighted interval scheduling).
    let mut best: Vec<(f64, usize)> = Vec::with_capacity(calls.len());
    for (i, c) in calls.iter().enumerate() {
        let before = (0..i)
            .filter(|&j| calls[j].end <= c.start)
            .map(|j| best[j])
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .unwrap_or((0.0, 0));
        best.push((before.0 + c.ms(), before.1 + 1));
    }
    best.into_iter()
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap_or((0.0, 0))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn call(start_ms: u64, end_ms: u64, t0: Instant) -> Call {
        Call {
            start: t0 + Duration::from_millis(start_ms),
            end: t0 + Duration::from_millis(end_ms),
        }
    }

    #[test]
    fn the_chain_skips_overlapping_calls() {
        let t0 = Instant::now();
        let calls = [
            call(0, 100, t0),
            call(1, 102, t0),
            call(103, 150, t0),
            call(101, 120, t0),
        ];
        let (ms, n) = critical_path(&calls);
        assert_eq!(n, 2);
        // 101 + 47: the second call then the third beats 100 + 19 and 100 + 47.
        assert!((ms - 148.0).abs() < 1e-6, "{ms}");
        assert_eq!(pct(&[3.0, 1.0, 2.0, 4.0], 50.0), 2.0);
        assert_eq!(pct(&[3.0, 1.0, 2.0, 4.0], 99.0), 4.0);
    }
}
