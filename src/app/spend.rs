//! What each owner (API key, see [`crate::app::Caller::owner`]) spent today, UTC: the sum
//! of its sessions' `Usage` events, for `--max-key-cost-usd-per-day`. Every process keeps
//! its own ledger of the current day only, so it holds one entry per owner that spent
//! today (owners are the configured keys, so a few at most); with a records database the
//! day's spend of every replica is also kept there (`records::db`), and
//! [`spent_today`] reads both.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::records::db::RecordDb;

/// How long the quota check waits for the database before it counts on this process's
/// ledger alone (a database that is down must not hold every new session).
const DB_READ: Duration = Duration::from_secs(2);
/// After a failed read, how long the check counts on the ledger alone without asking the
/// database: only the first new session of an outage waits for [`DB_READ`]. Measured with
/// PostgreSQL stopped under a running server (simulator panel): without this every new
/// session took 2.4 s instead of 0.3-0.6 s; with it the first took 2.3 s, the next 0.3 s.
const DB_RETRY_MS: u64 = 5_000;

const DAY_MS: u64 = 86_400_000;

/// An owner's spend over one UTC day.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    pub usd: f64,
    /// For information: the limit is in USD.
    pub tokens: u64,
}

#[derive(Debug, Default)]
pub struct SpendLedger {
    today: Mutex<Day>,
    /// The last database read failed: one warning per run of failures.
    db_failing: AtomicBool,
    /// Unix ms before which the database is not asked again after a failed read.
    db_retry_at: AtomicU64,
}

#[derive(Debug, Default)]
struct Day {
    /// Days since the Unix epoch.
    day: u64,
    spent: HashMap<Box<str>, Spent>,
}

impl SpendLedger {
    /// Adds one upstream call's cost, made at `at_ms` (Unix milliseconds). A call of an
    /// earlier day than the ledger's (a session that ran past midnight) is not today's
    /// spend; a later day starts a new ledger.
    pub fn add(&self, owner: &str, at_ms: u64, usd: f64, tokens: u64) {
        let day = utc_day(at_ms);
        let Ok(mut today) = self.today.lock() else {
            return;
        };
        if day < today.day {
            return;
        }
        if day > today.day {
            today.day = day;
            today.spent.clear();
        }
        let spent = today.spent.entry(owner.into()).or_default();
        // A negative or NaN cost (no price is set that way) must not give allowance back.
        if usd.is_finite() && usd > 0.0 {
            spent.usd += usd;
        }
        spent.tokens = spent.tokens.saturating_add(tokens);
    }

    /// What `owner` spent on the UTC day of `now_ms`.
    pub fn today(&self, owner: &str, now_ms: u64) -> Spent {
        let Ok(today) = self.today.lock() else {
            return Spent::default();
        };
        if today.day != utc_day(now_ms) {
            return Spent::default();
        }
        today.spent.get(owner).copied().unwrap_or_default()
    }
}

/// What `owner` spent on the UTC day of `now_ms`: with a database, what every replica
/// committed there, but never less than this process's own count, which also holds the
/// calls its writer has not committed yet (about 100 ms' worth). A database that cannot
/// be read leaves this process's count (sessions still run when the records database is
/// down), with a warning when such a run of failures begins.
pub async fn spent_today(
    ledger: &SpendLedger,
    db: Option<&RecordDb>,
    owner: &str,
    now_ms: u64,
) -> Spent {
    let own = ledger.today(owner, now_ms);
    // A database the writer cannot reach either, or that failed a read a moment ago.
    let Some(db) =
        db.filter(|db| db.is_up() && now_ms >= ledger.db_retry_at.load(Ordering::Relaxed))
    else {
        return own;
    };
    let stored = match tokio::time::timeout(DB_READ, db.spent_on(owner, now_ms)).await {
        Ok(Ok(stored)) => stored,
        failed => {
            ledger
                .db_retry_at
                .store(now_ms.saturating_add(DB_RETRY_MS), Ordering::Relaxed);
            if !ledger.db_failing.swap(true, Ordering::Relaxed) {
                let why = match failed {
                    Ok(Err(e)) => super::records::db::safe_error(&e),
                    _ => format!("no answer within {} s", DB_READ.as_secs()),
                };
                tracing::warn!(
                    "cannot read today's spend from the records database, counting this process's own only: {why}"
                );
            }
            return own;
        }
    };
    if ledger.db_failing.swap(false, Ordering::Relaxed) {
        tracing::info!("today's spend is read from the records database again");
    }
    if stored.usd >= own.usd { stored } else { own }
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

/// An owner whose spend today reached the limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaSpent {
    pub limit_usd: f64,
    pub spent: Spent,
}

impl DailyQuota {
    /// What a new session of an owner who spent `spent` today may still spend.
    pub fn allowance(&self, spent: Spent) -> Result<f64, QuotaSpent> {
        let left = self.limit_usd - spent.usd;
        if left > 0.0 {
            Ok(left)
        } else {
            Err(QuotaSpent {
                limit_usd: self.limit_usd,
                spent,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOON: u64 = 20_000 * DAY_MS + DAY_MS / 2;

    #[test]
    fn spend_adds_up_per_owner_for_today_only() {
        let ledger = SpendLedger::default();
        ledger.add("a", NOON, 0.25, 100);
        ledger.add("a", NOON + 1, 0.5, 50);
        ledger.add("b", NOON, 1.0, 7);
        assert_eq!(
            ledger.today("a", NOON + 2),
            Spent {
                usd: 0.75,
                tokens: 150
            }
        );
        assert_eq!(ledger.today("b", NOON).usd, 1.0);
        assert_eq!(ledger.today("c", NOON), Spent::default());
        // Tomorrow nobody has spent anything, and yesterday's late calls do not count.
        let tomorrow = NOON + DAY_MS;
        assert_eq!(ledger.today("a", tomorrow), Spent::default());
        ledger.add("a", tomorrow, 0.1, 1);
        ledger.add("a", NOON, 5.0, 1);
        assert_eq!(ledger.today("a", tomorrow).usd, 0.1);
        // The previous day was dropped, not kept beside (bounded).
        assert_eq!(ledger.today.lock().unwrap().spent.len(), 1);
        assert_eq!(ledger.today("a", NOON), Spent::default());
    }

    #[test]
    fn a_bad_cost_gives_nothing_back() {
        let ledger = SpendLedger::default();
        ledger.add("a", NOON, 0.5, 1);
        ledger.add("a", NOON, -1.0, 1);
        ledger.add("a", NOON, f64::NAN, 1);
        assert_eq!(ledger.today("a", NOON).usd, 0.5);
        assert_eq!(ledger.today("a", NOON).tokens, 3);
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
        assert_eq!(quota.allowance(spent(0.0)), Ok(1.0));
        assert_eq!(quota.allowance(spent(0.75)), Ok(0.25));
        let refused = quota.allowance(spent(1.0)).unwrap_err();
        assert_eq!(refused.limit_usd, 1.0);
        assert_eq!(refused.spent.tokens, 9);
        assert!(quota.allowance(spent(2.0)).is_err());
    }
}
