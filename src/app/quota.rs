//! The values of `--max-key-cost-usd-per-day`: what an owner spent on a UTC day, the
//! quota, what a new session may reserve, and UTC days themselves. Plain values with no
//! storage, so both the ledger (`app::spend`) and the records database (`store::spend`)
//! use them without either reaching into the other.

/// Milliseconds in a day.
pub const DAY_MS: u64 = 86_400_000;

/// An owner's spend over one UTC day.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    pub usd: f64,
    /// For information: the limit is in USD.
    pub tokens: u64,
}

/// What the records database's `reserve` is asked for (`store::spend`).
#[derive(Debug, Clone, Copy)]
pub struct Want {
    /// USD to reserve at most.
    pub usd: f64,
    /// USD to reserve at least: what the session's first round can cost; refused when
    /// less is left.
    pub floor: f64,
    /// The owner's day's limit.
    pub limit: f64,
    /// What this process's other sessions of the owner hold reserved (counted instead of
    /// this replica's rows in the database).
    pub own: f64,
}

/// Days since the Unix epoch of a Unix time in milliseconds, UTC.
pub fn utc_day(at_ms: u64) -> u64 {
    at_ms / DAY_MS
}

/// `YYYY-MM-DD` of a day since the Unix epoch (how the database keys spend).
pub fn day_text(day: u64) -> String {
    let (y, m, d) = civil_date(day);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Year, month and day of a day since the Unix epoch (the proleptic Gregorian calendar:
/// H. Hinnant's civil-from-days, no date crate needed).
pub fn civil_date(days: u64) -> (i64, i64, i64) {
    let z = i64::try_from(days).unwrap_or_default() + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `--max-key-cost-usd-per-day`: USD an owner may spend per UTC day.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DailyQuota {
    pub limit_usd: f64,
}

/// An owner whose spend today, with what its running sessions reserved, reached the limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaSpent {
    pub limit_usd: f64,
    pub spent: Spent,
    /// What running sessions hold reserved (given back as they end).
    pub reserved_usd: f64,
    /// What the refused session had to reserve at least (its first round's cost).
    pub first_round_usd: f64,
}

impl QuotaSpent {
    /// Whether a running session's end can make room: something is reserved and the day's
    /// spend alone leaves room for the session's first round (else only 00:00 UTC helps).
    pub fn may_free_up(&self) -> bool {
        self.reserved_usd > 0.0 && self.spent.usd + self.first_round_usd < self.limit_usd
    }
}

impl DailyQuota {
    /// What a new session of an owner who spent `spent` today, while its running sessions
    /// reserved `reserved`, reserves: all that is left, or `cap` when less, but never less
    /// than `floor` (what its first round can cost: its calls run at once, whatever its
    /// cap); refused when less than that is left.
    pub fn allowance(
        &self,
        spent: Spent,
        reserved: f64,
        cap: Option<f64>,
        floor: f64,
    ) -> Result<f64, QuotaSpent> {
        let left = self.limit_usd - spent.usd - reserved;
        let floor = if floor.is_finite() {
            floor.max(0.0)
        } else {
            left
        };
        if left > 0.0 && left >= floor {
            Ok(cap.map_or(left, |cap| cap.max(floor).min(left)))
        } else {
            Err(QuotaSpent {
                limit_usd: self.limit_usd,
                spent,
                reserved_usd: reserved,
                first_round_usd: floor,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_day_not_yet_spent_may_free_up_when_sessions_end() {
        let refused = |spent: f64, reserved: f64| QuotaSpent {
            limit_usd: 5.0,
            spent: Spent {
                usd: spent,
                tokens: 0,
            },
            reserved_usd: reserved,
            first_round_usd: 0.5,
        };
        assert!(refused(3.0, 2.0).may_free_up());
        // What is left after the spend alone is less than a first round.
        assert!(!refused(4.6, 0.2).may_free_up());
        assert!(!refused(3.0, 0.0).may_free_up());
        // Spent to the limit: a running session's end gives back no room.
        assert!(!refused(5.0, 1.0).may_free_up());
    }

    #[test]
    fn the_day_turns_at_midnight_utc() {
        assert_eq!(utc_day(DAY_MS - 1), 0);
        assert_eq!(utc_day(DAY_MS), 1);
        assert_eq!(day_text(0), "1970-01-01");
        assert_eq!(day_text(utc_day(951_782_400_000)), "2000-02-29");
        // date -u -d @1795392000 +%F
        assert_eq!(day_text(utc_day(1_795_392_000_000)), "2026-11-23");
        assert_eq!(day_text(utc_day(1_795_392_000_000 - 1)), "2026-11-22");
    }

    #[test]
    fn the_allowance_is_what_is_left_and_none_at_the_limit() {
        let quota = DailyQuota { limit_usd: 1.0 };
        let spent = |usd| Spent { usd, tokens: 9 };
        assert_eq!(quota.allowance(spent(0.0), 0.0, None, 0.0), Ok(1.0));
        assert_eq!(quota.allowance(spent(0.75), 0.0, None, 0.0), Ok(0.25));
        assert_eq!(quota.allowance(spent(0.25), 0.5, None, 0.0), Ok(0.25));
        assert_eq!(quota.allowance(spent(0.0), 0.0, Some(0.1), 0.0), Ok(0.1));
        assert_eq!(
            quota
                .allowance(spent(0.0), 0.95, Some(0.1), 0.0)
                .map(|u| (u * 100.0).round()),
            Ok(5.0)
        );
        let refused = quota
            .allowance(spent(1.0), 0.0, Some(0.1), 0.0)
            .unwrap_err();
        assert_eq!(refused.limit_usd, 1.0);
        assert_eq!(refused.spent.tokens, 9);
        assert!(quota.allowance(spent(2.0), 0.0, None, 0.0).is_err());
        let held = quota.allowance(spent(0.5), 0.5, None, 0.0).unwrap_err();
        assert_eq!(held.reserved_usd, 0.5);
    }
}
