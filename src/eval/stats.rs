//! The statistics of `massgen eval`: confidence intervals on an arm's accuracy, the paired
//! test of an arm against the panel, the interval of a paired difference and the items a
//! difference needs, latency percentiles and the self-consistency vote.
//! Pure functions; nothing here allocates more than its input.

/// The normal quantile of a two-sided 95% interval.
const Z95: f64 = 1.959_963_984_540_054;

/// The 95% Wilson score interval of `correct` successes out of `n` trials, as
/// `(low, high)` within `[0, 1]`. Wilson rather than the normal approximation because eval
/// runs are small and accuracies near 0 or 1 are common, where the latter leaves [0, 1].
/// `n = 0` says nothing: `(0.0, 1.0)`. `correct > n` is treated as `correct = n`.
pub fn wilson(correct: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let n_f = n as f64;
    let p = correct.min(n) as f64 / n_f;
    let z2 = Z95 * Z95;
    let denom = 1.0 + z2 / n_f;
    let center = (p + z2 / (2.0 * n_f)) / denom;
    let half = Z95 / denom * (p * (1.0 - p) / n_f + z2 / (4.0 * n_f * n_f)).sqrt();
    (
        (center - half).clamp(0.0, 1.0),
        (center + half).clamp(0.0, 1.0),
    )
}

/// `ln C(n, i)` for `i = 0..=m`, one after the other, so that no factorial is ever formed
/// (they overflow `f64` past n = 170).
fn ln_binomials(n: u64, m: u64) -> impl Iterator<Item = f64> {
    let mut acc = 0.0_f64;
    (0..=m).map(move |i| {
        if i > 0 {
            acc += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        acc
    })
}

/// `ln(sum(exp(x)))` without overflow or underflow of the terms.
fn log_sum_exp(terms: &[f64]) -> f64 {
    let max = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return max;
    }
    max + terms.iter().map(|t| (t - max).exp()).sum::<f64>().ln()
}

/// The two-sided exact McNemar p-value for `b` and `c` discordant pairs (pairs where only
/// the first, or only the second, was right): a binomial test of `b` out of `b + c` at 1/2,
/// `min(1, 2 * P(X <= min(b, c)))`. No discordant pair gives no evidence: 1.0. Computed in
/// log space, so `b + c` in the hundreds of thousands stays finite.
pub fn mcnemar_exact(b: u64, c: u64) -> f64 {
    let n = b.saturating_add(c);
    if n == 0 {
        return 1.0;
    }
    let m = b.min(c);
    let terms: Vec<f64> = ln_binomials(n, m).collect();
    let ln_tail = log_sum_exp(&terms) - n as f64 * std::f64::consts::LN_2;
    (2.0 * ln_tail.exp()).min(1.0)
}

/// The normal quantile of 80% power (one-sided 0.2 upper tail).
const Z80: f64 = 0.841_621_233_572_914_3;

/// Two arms' outcomes on the same items, as a 2×2 table: both right, only the first
/// right, only the second right, both wrong (a failed item is wrong).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PairedTable {
    pub both_right: u64,
    pub first_only: u64,
    pub second_only: u64,
    pub both_wrong: u64,
}

impl PairedTable {
    /// Counts one item: whether the first arm and the second were right.
    pub fn add(&mut self, first: bool, second: bool) {
        match (first, second) {
            (true, true) => self.both_right += 1,
            (true, false) => self.first_only += 1,
            (false, true) => self.second_only += 1,
            (false, false) => self.both_wrong += 1,
        }
    }

    pub fn pairs(&self) -> u64 {
        self.both_right + self.first_only + self.second_only + self.both_wrong
    }

    /// The first arm's accuracy minus the second's on these items, as a fraction (the mean
    /// of the per-item differences, each -1, 0 or 1); 0 without items.
    pub fn difference(&self) -> f64 {
        let n = self.pairs();
        if n == 0 {
            return 0.0;
        }
        (self.first_only as f64 - self.second_only as f64) / n as f64
    }

    /// The two-sided exact McNemar p-value of the discordant pairs.
    pub fn p_value(&self) -> f64 {
        mcnemar_exact(self.first_only, self.second_only)
    }

    /// The 95% interval of [`Self::difference`]: [`paired_difference_ci`].
    pub fn ci95(&self) -> (f64, f64) {
        paired_difference_ci(self)
    }

    /// About how many items would settle this difference: [`items_to_settle`].
    pub fn items_to_settle(&self) -> Option<u64> {
        items_to_settle(self)
    }
}

/// The 95% interval of the difference of two paired proportions, `p1 - p2` with
/// `p1 = (both_right + first_only) / n` and `p2 = (both_right + second_only) / n`:
/// Newcombe's hybrid score interval for paired data (method 10 of R. G. Newcombe,
/// "Improved confidence intervals for the difference between binomial proportions based
/// on paired data", Statistics in Medicine 17:2635-2650, 1998). Each proportion gets its
/// Wilson interval `[l, u]`; the two are combined through the correlation `phi` of the
/// 2×2 table (0 when a margin is empty, as Newcombe sets it):
/// `p1 - p2 - sqrt((p1-l1)^2 - 2 phi (p1-l1)(u2-p2) + (u2-p2)^2)` to
/// `p1 - p2 + sqrt((u1-p1)^2 - 2 phi (u1-p1)(p2-l2) + (p2-l2)^2)`.
/// Unlike the normal interval on the mean difference it stays inside [-1, 1] and keeps
/// its coverage for small tables and accuracies near 0 or 1, and it is not empty when
/// no pair is discordant. No pairs say nothing: `(-1.0, 1.0)`.
pub fn paired_difference_ci(table: &PairedTable) -> (f64, f64) {
    let n = table.pairs();
    if n == 0 {
        return (-1.0, 1.0);
    }
    let (a, b, c, d) = (
        table.both_right as f64,
        table.first_only as f64,
        table.second_only as f64,
        table.both_wrong as f64,
    );
    let n_f = n as f64;
    let (p1, p2) = ((a + b) / n_f, (a + c) / n_f);
    let (l1, u1) = wilson(table.both_right + table.first_only, n);
    let (l2, u2) = wilson(table.both_right + table.second_only, n);
    let margins = (a + b) * (c + d) * (a + c) * (b + d);
    let phi = if margins > 0.0 {
        (a * d - b * c) / margins.sqrt()
    } else {
        0.0
    };
    // Rounding can leave a hair below 0 where the exact value is 0.
    let root = |x: f64, y: f64| (x * x - 2.0 * phi * x * y + y * y).max(0.0).sqrt();
    let theta = p1 - p2;
    (
        (theta - root(p1 - l1, u2 - p2)).clamp(-1.0, 1.0),
        (theta + root(u1 - p1, p2 - l2)).clamp(-1.0, 1.0),
    )
}

/// About how many items a run needs for McNemar's test at the 5% level to find a
/// difference this size 8 times out of 10, if the share of items where only one arm is
/// right, and which one, stays as observed: Connor's sample size for the paired design
/// (R. J. Connor, "Sample size for testing differences in proportions for the
/// paired-sample design", Biometrics 43:207-211, 1987),
/// `(z_0.975 sqrt(psi) + z_0.8 sqrt(psi - delta^2))^2 / delta^2`, with `psi` the share of
/// discordant items and `delta` the observed difference, rounded up. A normal
/// approximation: rough when few items are discordant. `None` when the observed
/// difference is 0 (no number of items settles it) or there are no items.
pub fn items_to_settle(table: &PairedTable) -> Option<u64> {
    let n = table.pairs();
    if n == 0 || table.first_only == table.second_only {
        return None;
    }
    let n_f = n as f64;
    let psi = (table.first_only + table.second_only) as f64 / n_f;
    let delta = table.difference();
    let root = Z95 * psi.sqrt() + Z80 * (psi - delta * delta).max(0.0).sqrt();
    let needed = (root * root / (delta * delta)).ceil();
    // `as` saturates; the value is finite here (delta is not 0).
    Some(needed as u64)
}

/// The `q`-th quantile (`q` in [0, 1], clamped) of ascending `sorted` values, by linear
/// interpolation between the closest ranks (the "type 7" definition of R and NumPy's
/// default): `q = 0.5` of `[1, 2, 3, 4]` is 2.5. Empty input, or a NaN `q`: `None`.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() || q.is_nan() {
        return None;
    }
    let h = (sorted.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    let frac = h - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

/// The most frequent non-null value; a tie goes to the value that appears first, so the
/// vote does not depend on hashing. All null (or empty): `None`.
pub fn majority<'a>(values: &[Option<&'a str>]) -> Option<&'a str> {
    // (value, count) in order of first appearance; k is small (the samples of one item).
    let mut counts: Vec<(&'a str, usize)> = Vec::new();
    for v in values.iter().flatten() {
        match counts.iter_mut().find(|(seen, _)| seen == v) {
            Some((_, count)) => *count += 1,
            None => counts.push((v, 1)),
        }
    }
    let mut best: Option<(&'a str, usize)> = None;
    for (v, count) in counts {
        // Strictly greater: an equal count later on does not displace the first.
        if best.is_none_or(|(_, c)| count > c) {
            best = Some((v, count));
        }
    }
    best.map(|(v, _)| v)
}

/// The probability that more than `k / 2` of `k` independent Bernoulli(`p`) trials succeed
/// (a strict majority: with `k` even a tie is not one). `p` is clamped to [0, 1]; `k = 0`
/// gives 0. This is the accuracy of self-consistency over `k` samples right with
/// probability `p` when every wrong sample gives the same wrong answer (the simulator's
/// one distractor); wrong answers that differ make the plurality right more often.
pub fn binomial_majority(p: f64, k: u32) -> f64 {
    if k == 0 || p.is_nan() || p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    let (ln_p, ln_q) = (p.ln(), (1.0 - p).ln());
    let k64 = u64::from(k);
    let first = k64 / 2 + 1;
    let terms: Vec<f64> = ln_binomials(k64, k64)
        .enumerate()
        .skip(first as usize)
        .map(|(i, ln_c)| ln_c + i as f64 * ln_p + (k64 - i as u64) as f64 * ln_q)
        .collect();
    log_sum_exp(&terms).exp().clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn wilson_known_values() {
        let (lo, hi) = wilson(7, 10);
        assert!(close(lo, 0.3968, 1e-4), "{lo}");
        assert!(close(hi, 0.8922, 1e-4), "{hi}");
        let (lo, hi) = wilson(0, 10);
        assert!(close(lo, 0.0, 1e-12), "{lo}");
        assert!(close(hi, 0.2775, 1e-4), "{hi}");
        let (lo, hi) = wilson(10, 10);
        assert!(close(lo, 0.7225, 1e-4), "{lo}");
        assert!(close(hi, 1.0, 1e-12), "{hi}");
        // 78/100: the example of the report's format.
        let (lo, hi) = wilson(78, 100);
        assert!(close(lo, 0.6893, 1e-4), "{lo}");
        assert!(close(hi, 0.8500, 1e-4), "{hi}");
    }

    #[test]
    fn wilson_edge_cases() {
        assert_eq!(wilson(0, 0), (0.0, 1.0));
        assert_eq!(wilson(12, 10), wilson(10, 10));
        let (lo, hi) = wilson(500_000, 1_000_000);
        assert!(lo < 0.5 && hi > 0.5 && hi - lo < 0.002);
    }

    #[test]
    fn mcnemar_known_values() {
        assert!(close(mcnemar_exact(0, 5), 0.0625, 1e-12));
        assert!(close(mcnemar_exact(5, 0), 0.0625, 1e-12));
        assert_eq!(mcnemar_exact(10, 10), 1.0);
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        assert_eq!(mcnemar_exact(1, 0), 1.0);
        // 2 * (1 + 10 + 45) / 1024.
        assert!(close(mcnemar_exact(2, 8), 112.0 / 1024.0, 1e-12));
        // 2 * (1 + 12) / 4096.
        assert!(close(mcnemar_exact(1, 11), 26.0 / 4096.0, 1e-12));
    }

    #[test]
    fn mcnemar_large_counts_stay_finite() {
        let p = mcnemar_exact(50_000, 50_000);
        assert_eq!(p, 1.0);
        let p = mcnemar_exact(49_000, 51_000);
        // Reference values from ln-gamma sums in double precision.
        assert!(close(p / 2.588_716_038_7e-10, 1.0, 1e-6), "{p}");
        let p = mcnemar_exact(0, 100_000);
        assert!(p.is_finite() && (0.0..1e-300).contains(&p), "{p}");
        let p = mcnemar_exact(49_900, 50_100);
        assert!(close(p, 0.529_157_294_2, 1e-6), "{p}");
    }

    fn table(a: u64, b: u64, c: u64, d: u64) -> PairedTable {
        PairedTable {
            both_right: a,
            first_only: b,
            second_only: c,
            both_wrong: d,
        }
    }

    #[test]
    fn paired_interval_known_values() {
        // Reference values: the same formula computed apart, in Python's double precision.
        // (1, 1, 7, 12) is Fagerland, Lydersen and Laake's example (Stat Med 2014).
        for (t, diff, lo, hi) in [
            (
                table(1, 1, 7, 12),
                -0.285_714_285_7,
                -0.501_662_540_3,
                -0.036_052_553_5,
            ),
            (
                table(30, 4, 10, 16),
                -0.1,
                -0.214_400_068_7,
                0.019_221_403_7,
            ),
            (table(37, 4, 10, 9), -0.1, -0.218_206_377_2, 0.020_430_415_7),
        ] {
            assert!(close(t.difference(), diff, 1e-9), "{t:?}");
            let (l, h) = t.ci95();
            assert!(close(l, lo, 1e-9), "{t:?}: {l}");
            assert!(close(h, hi, 1e-9), "{t:?}: {h}");
        }
    }

    #[test]
    fn paired_interval_edge_cases() {
        assert_eq!(paired_difference_ci(&PairedTable::default()), (-1.0, 1.0));
        // No discordant pair: the difference is 0 and the interval still has a width.
        let (l, h) = table(30, 0, 0, 10).ci95();
        assert!(l < 0.0 && h > 0.0 && h - l < 0.2, "{l} {h}");
        // Both always right: the margins are empty (phi = 0) and the interval symmetric.
        let (l, h) = table(20, 0, 0, 0).ci95();
        let (wl, _) = wilson(20, 20);
        assert!(
            close(l, -(1.0 - wl), 1e-12) && close(h, 1.0 - wl, 1e-12),
            "{l} {h}"
        );
        // One arm always right, the other never: inside [-1, 1], near its end.
        let (l, h) = table(0, 25, 0, 0).ci95();
        assert!(l > 0.8 && h == 1.0, "{l} {h}");
        let (l, h) = table(0, 0, 25, 0).ci95();
        assert!(l == -1.0 && h < -0.8, "{l} {h}");
        let mut t = PairedTable::default();
        for (x, y) in [
            (true, true),
            (true, false),
            (false, true),
            (false, false),
            (true, false),
        ] {
            t.add(x, y);
        }
        assert_eq!(t, table(1, 2, 1, 1));
        assert_eq!(t.pairs(), 5);
        assert!(close(t.difference(), 0.2, 1e-12));
        assert_eq!(t.p_value(), mcnemar_exact(2, 1));
    }

    #[test]
    fn items_to_settle_by_connor() {
        // 60 items, 4 and 10 discordant: (1.96 sqrt(0.2333) + 0.8416 sqrt(0.2233))^2 / 0.01.
        assert_eq!(table(37, 4, 10, 9).items_to_settle(), Some(181));
        // The same rates at ten times the items: the same answer, it depends on rates only.
        assert_eq!(table(370, 40, 100, 90).items_to_settle(), Some(181));
        // A larger difference needs fewer items.
        assert!(table(37, 2, 12, 9).items_to_settle().unwrap() < 181);
        assert_eq!(table(37, 5, 5, 9).items_to_settle(), None);
        assert_eq!(table(37, 0, 0, 9).items_to_settle(), None);
        assert_eq!(PairedTable::default().items_to_settle(), None);
        // Every item discordant one way: psi = delta = 1, so z^2 = 3.84, 4 items.
        assert_eq!(table(0, 0, 3, 0).items_to_settle(), Some(4));
    }

    #[test]
    fn percentile_interpolates() {
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&[1.0], f64::NAN), None);
        assert_eq!(percentile(&[3.0], 0.95), Some(3.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.5), Some(2.5));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.0), Some(1.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 1.0), Some(4.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 7.0), Some(4.0));
        let v: Vec<f64> = (1..=11).map(f64::from).collect();
        let p95 = percentile(&v, 0.95).unwrap();
        assert!(close(p95, 10.5, 1e-12), "{p95}");
    }

    #[test]
    fn majority_votes_and_breaks_ties_by_first() {
        assert_eq!(majority(&[]), None);
        assert_eq!(majority(&[None, None]), None);
        assert_eq!(majority(&[Some("a"), Some("b"), Some("b")]), Some("b"));
        assert_eq!(
            majority(&[Some("b"), Some("a"), Some("a"), Some("b")]),
            Some("b")
        );
        assert_eq!(majority(&[None, Some("x"), None, Some("y")]), Some("x"));
        assert_eq!(
            majority(&[Some("a"), None, None, Some("c"), Some("c")]),
            Some("c")
        );
    }

    #[test]
    fn binomial_majority_known_values() {
        assert!(close(binomial_majority(0.7, 3), 0.784, 1e-12));
        assert!(close(binomial_majority(0.7, 1), 0.7, 1e-12));
        // k = 2: both must succeed.
        assert!(close(binomial_majority(0.7, 2), 0.49, 1e-12));
        // 10 p^3 q^2 + 5 p^4 q + p^5 at p = 0.6.
        assert!(close(binomial_majority(0.6, 5), 0.68256, 1e-12));
        assert!(close(binomial_majority(0.5, 101), 0.5, 1e-9));
        assert_eq!(binomial_majority(0.0, 5), 0.0);
        assert_eq!(binomial_majority(1.0, 5), 1.0);
        assert_eq!(binomial_majority(f64::NAN, 5), 0.0);
        assert_eq!(binomial_majority(0.9, 0), 0.0);
        // Large k: the running sums of logs lose about 1e-10, nothing more.
        let big = binomial_majority(0.6, 100_001);
        assert!(close(big, 1.0, 1e-9), "{big}");
        let half = binomial_majority(0.5, 100_001);
        assert!(close(half, 0.5, 1e-9), "{half}");
    }
}
