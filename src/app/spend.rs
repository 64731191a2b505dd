//! What each owner (API key, see [`crate::app::Caller::owner`]) spent today, UTC: the sum
//! of its sessions' `Usage` events, for `--max-key-cost-usd-per-day`. Every process keeps
//! its own ledger of the current day only, so it holds one entry per owner that spent
//! today (owners are the configured keys, so a few at most); with a records database the
//! day's spend of every replica is also kept there (`store::spend`).
//!
//! Checking the spend so far is not enough when sessions run at once: each would be given
//! the whole remainder. So a session *reserves* its maximum cost before its first upstream
//! call ([`reserve`]) and gives back what it did not spend when its coordination ends
//! (dropping its [`Reservation`]); a key's spend plus its reservations never pass its
//! limit. On PostgreSQL the reservation is also made in the database, serialized by a lock
//! on the owner's row of the day, so replicas share one allowance.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

pub use super::quota::{DailyQuota, QuotaSpent, Spent};
use super::quota::{Want, utc_day};
use super::store::{Engine, RecordDb, safe_error};

/// How long the quota check waits for the database before it counts on this process's
/// ledger alone (a database that is down must not hold every new session).
const DB_READ: Duration = Duration::from_secs(2);
/// After a failed read, how long the check counts on the ledger alone without asking the
/// database: only the first new session of an outage waits for [`DB_READ`]. Measured with
/// PostgreSQL stopped under a running server (simulator panel): without this every new
/// session took 2.4 s instead of 0.3-0.6 s; with it the first took 2.3 s, the next 0.3 s.
const DB_RETRY_MS: u64 = 5_000;
/// When its session ends, a database reservation is lowered at once to what the session
/// spent, and deleted this long after: by then the records writer (which gathers 100 ms)
/// has committed that spend, so no replica sees the key's allowance without either.
const DB_SETTLE: Duration = Duration::from_secs(2);
/// Tries to give a database reservation back (a replica that stops meanwhile leaves it to
/// expire with its heartbeat).
const DB_RELEASE_TRIES: u32 = 5;

#[derive(Debug, Default)]
pub struct SpendLedger {
    /// Shared with the reservations, which give their part back when dropped.
    today: Arc<Mutex<Day>>,
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
    /// USD reserved by this process's running sessions, per owner.
    reserved: HashMap<Box<str>, f64>,
}

impl Day {
    /// Moves on to `day` when it is later (a new day starts with nothing spent or
    /// reserved); whether `day` is the ledger's day now.
    fn reach(&mut self, day: u64) -> bool {
        if day > self.day {
            self.day = day;
            self.spent.clear();
            self.reserved.clear();
        }
        day == self.day
    }
}

impl SpendLedger {
    /// Adds one upstream call's cost, made at `at_ms` (Unix milliseconds). A call of an
    /// earlier day than the ledger's (a session that ran past midnight) is not today's
    /// spend; a later day starts a new ledger.
    pub fn add(&self, owner: &str, at_ms: u64, usd: f64, tokens: u64) {
        let mut today = self.today.lock().unwrap_or_else(PoisonError::into_inner);
        if !today.reach(utc_day(at_ms)) {
            return;
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
        let today = self.today.lock().unwrap_or_else(PoisonError::into_inner);
        if today.day != utc_day(now_ms) {
            return Spent::default();
        }
        today.spent.get(owner).copied().unwrap_or_default()
    }

    /// Reserves for a session of `owner` at most `cap` USD (all that is left without one)
    /// and at least `floor` of `quota` ([`DailyQuota::allowance`]), counting what the
    /// database says the owner spent (`stored`, which may hold other processes' spend) or
    /// this process's count, whichever is more.
    fn reserve_here(
        &self,
        owner: &str,
        now_ms: u64,
        (cap, floor): (Option<f64>, f64),
        quota: DailyQuota,
        stored: Spent,
    ) -> Result<Reservation, QuotaSpent> {
        let day = utc_day(now_ms);
        let mut today = self.today.lock().unwrap_or_else(PoisonError::into_inner);
        today.reach(day);
        let own = today.spent.get(owner).copied().unwrap_or_default();
        let spent = if stored.usd > own.usd { stored } else { own };
        let reserved = today.reserved.get(owner).copied().unwrap_or_default();
        let usd = quota.allowance(spent, reserved, cap, floor)?;
        *today.reserved.entry(owner.into()).or_default() += usd;
        Ok(Reservation {
            today: Arc::clone(&self.today),
            owner: owner.into(),
            day,
            usd,
            spent: 0.0,
            db: None,
        })
    }

    /// USD this process's sessions of `owner` hold reserved today.
    pub fn reserved(&self, owner: &str, now_ms: u64) -> f64 {
        let today = self.today.lock().unwrap_or_else(PoisonError::into_inner);
        if today.day != utc_day(now_ms) {
            return 0.0;
        }
        today.reserved.get(owner).copied().unwrap_or_default()
    }

    /// Whether the database may be asked now: up, and not failing a moment ago.
    fn db_usable<'a>(
        &self,
        db: Option<&'a Arc<RecordDb>>,
        now_ms: u64,
    ) -> Option<&'a Arc<RecordDb>> {
        db.filter(|db| db.is_up() && now_ms >= self.db_retry_at.load(Ordering::Relaxed))
    }

    /// Notes a failed database call: the next [`DB_RETRY_MS`] count on the ledger alone,
    /// with one warning per run of failures.
    fn db_failed(&self, now_ms: u64, why: impl FnOnce() -> String) {
        self.db_retry_at
            .store(now_ms.saturating_add(DB_RETRY_MS), Ordering::Relaxed);
        if !self.db_failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "cannot use today's spend in the records database, counting this process's own only: {}",
                why()
            );
        }
    }

    fn db_answered(&self) {
        if self.db_failing.swap(false, Ordering::Relaxed) {
            tracing::info!("today's spend is read from the records database again");
        }
    }
}

/// A session's share of its owner's daily allowance, held until the session's
/// coordination ends; dropping it gives back the part that was not spent (what was spent
/// stays counted as spend).
pub struct Reservation {
    today: Arc<Mutex<Day>>,
    owner: Box<str>,
    day: u64,
    /// The session's cost limit: it may spend this much.
    pub usd: f64,
    /// What the session spent so far ([`Reservation::spend`]).
    spent: f64,
    /// PostgreSQL: the database's reservation row, given back after [`DB_SETTLE`].
    db: Option<(Arc<RecordDb>, String)>,
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("owner", &self.owner)
            .field("day", &self.day)
            .field("usd", &self.usd)
            .field("db", &self.db.as_ref().map(|(_, id)| id))
            .finish()
    }
}

impl Reservation {
    /// Notes one of the session's upstream call costs (what a database reservation keeps
    /// until the writer has committed the spend).
    pub fn spend(&mut self, usd: f64) {
        if usd.is_finite() && usd > 0.0 {
            self.spent += usd;
        }
    }

    /// Lowers the reservation to `usd` (the database granted less).
    fn shrink(&mut self, usd: f64) {
        let mut today = self.today.lock().unwrap_or_else(PoisonError::into_inner);
        if today.day == self.day
            && let Some(held) = today.reserved.get_mut(&self.owner)
        {
            *held = (*held - (self.usd - usd)).max(0.0);
        }
        self.usd = usd;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let today = Arc::clone(&self.today);
        let (owner, day) = (std::mem::take(&mut self.owner), self.day);
        let runtime = tokio::runtime::Handle::try_current().ok();
        let Some(((db, id), runtime)) = self.db.take().zip(runtime) else {
            give_back(&today, &owner, day, self.usd);
            return;
        };
        // On PostgreSQL what the session spent stays reserved, here as in the database,
        // until the writer has committed it; the rest goes at once.
        let spent = self.spent.min(self.usd);
        give_back(&today, &owner, day, self.usd - spent);
        runtime.spawn(async move {
            release_later(&db, &id, spent).await;
            give_back(&today, &owner, day, spent);
        });
    }
}

/// Gives `usd` of `owner`'s reservations of `day` back to this process's ledger.
fn give_back(today: &Mutex<Day>, owner: &str, day: u64, usd: f64) {
    let mut today = today.lock().unwrap_or_else(PoisonError::into_inner);
    if today.day == day
        && let Some(held) = today.reserved.get_mut(owner)
    {
        *held -= usd;
        // Sums of floats drift: a last reservation given back leaves none.
        if *held <= 1e-12 {
            today.reserved.remove(owner);
        }
    }
}

/// Gives a database reservation back: at once all but what the session spent, the rest
/// once that spend is committed, retrying a database that fails meanwhile.
async fn release_later(db: &RecordDb, id: &str, spent: f64) {
    if spent > 0.0 {
        // Failing, the whole reservation is kept until it is deleted below.
        let _ = tokio::time::timeout(DB_READ, db.settle_reservation(id, spent)).await;
        tokio::time::sleep(DB_SETTLE).await;
    } else if tokio::time::timeout(DB_READ, db.release_reservation(id))
        .await
        .is_ok_and(|r| r.is_ok())
    {
        // Nothing spent, so nothing for the writer to commit first. (A reservation
        // whose answer was lost is passed 0 too; its row may commit after this delete,
        // so it is deleted again below, after the pause.)
        tokio::time::sleep(DB_SETTLE).await;
    }
    for attempt in 1..=DB_RELEASE_TRIES {
        match tokio::time::timeout(DB_READ, db.release_reservation(id)).await {
            Ok(Ok(())) => return,
            Ok(Err(e)) if attempt == DB_RELEASE_TRIES => tracing::warn!(
                "cannot give a session's cost reservation back to the records database (it \
                 expires when this replica stops): {}",
                safe_error(&e)
            ),
            _ => tokio::time::sleep(DB_SETTLE * attempt).await,
        }
    }
}

/// Reserves a new session's maximum cost for `owner` under `quota`: at most `cap` (the
/// session's own cost limit), else all that is left of the day, and at least `floor`
/// (what its first round can cost, [`crate::app::estimate`]). Refused when less than that
/// is left: spent, or reserved by the owner's running sessions. With PostgreSQL the
/// reservation is made in the database too (every replica's sessions count), and it may
/// be smaller there; a database that cannot be reached leaves this process's ledger
/// (sessions still run when the records database is down), as for the spend.
/// `stale_after`: another replica's reservations count until its heartbeat is this old.
pub async fn reserve(
    ledger: &SpendLedger,
    db: Option<&Arc<RecordDb>>,
    quota: DailyQuota,
    owner: &str,
    now_ms: u64,
    (cap, floor): (Option<f64>, f64),
    stale_after: Duration,
) -> Result<Reservation, QuotaSpent> {
    let usable = ledger.db_usable(db, now_ms);
    let shared = usable.filter(|db| db.engine() == Engine::Postgres);
    // SQLite has one process per file: the stored spend is earlier runs', and this
    // process's ledger is the whole truth about the running ones.
    let stored = match usable.filter(|_| shared.is_none()) {
        Some(db) => match tokio::time::timeout(DB_READ, db.spent_on(owner, now_ms)).await {
            Ok(Ok(stored)) => {
                ledger.db_answered();
                stored
            }
            failed => {
                ledger.db_failed(now_ms, || failure(failed.map(|r| r.map(drop))));
                Spent::default()
            }
        },
        None => Spent::default(),
    };
    let mut reservation = ledger.reserve_here(owner, now_ms, (cap, floor), quota, stored)?;
    let Some(db) = shared else {
        return Ok(reservation);
    };
    let id = uuid::Uuid::now_v7().to_string();
    // This process's other reservations, as its ledger holds them now (its rows in the
    // database may lag: one given back a moment ago is still being updated there).
    let own = (ledger.reserved(owner, now_ms) - reservation.usd).max(0.0);
    let want = Want {
        usd: reservation.usd,
        floor,
        limit: quota.limit_usd,
        own,
    };
    let asked = db.reserve(&id, owner, now_ms, want, stale_after);
    match tokio::time::timeout(DB_READ, asked).await {
        Ok(Ok(Ok(usd))) => {
            ledger.db_answered();
            reservation.shrink(usd);
            reservation.db = Some((Arc::clone(db), id));
            Ok(reservation)
        }
        Ok(Ok(Err(refused))) => {
            ledger.db_answered();
            Err(QuotaSpent {
                limit_usd: quota.limit_usd,
                ..refused
            })
        }
        failed => {
            ledger.db_failed(now_ms, || failure(failed.map(|r| r.map(drop))));
            // Its commit may have happened with the answer lost, and may still land after
            // an immediate delete: give it back as a finished session's is, after the
            // settling pause and with retries.
            let db = Arc::clone(db);
            tokio::spawn(async move { release_later(&db, &id, 0.0).await });
            Ok(reservation)
        }
    }
}

fn failure(failed: Result<Result<(), sqlx::Error>, tokio::time::error::Elapsed>) -> String {
    match failed {
        Ok(Err(e)) => safe_error(&e),
        _ => format!("no answer within {} s", DB_READ.as_secs()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::quota::DAY_MS;

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
    fn reservations_hold_the_day_and_give_back_what_was_not_spent() {
        let ledger = SpendLedger::default();
        let quota = DailyQuota { limit_usd: 5.0 };
        let none = Spent::default();
        let reserve = |cap| ledger.reserve_here("a", NOON, (cap, 0.0), quota, none);
        // Five sessions capped at $1 fit in a $5 day; the sixth does not.
        let held: Vec<_> = (0..5).map(|_| reserve(Some(1.0)).unwrap()).collect();
        let refused = reserve(Some(1.0)).unwrap_err();
        assert_eq!(refused.reserved_usd, 5.0);
        assert_eq!(ledger.reserved("a", NOON), 5.0);
        // Another owner has its own day.
        assert!(
            ledger
                .reserve_here("b", NOON, (None, 0.0), quota, none)
                .is_ok()
        );
        // Two sessions spent 0.25 each; all end: the spend stays, the rest comes back.
        ledger.add("a", NOON, 0.25, 1);
        ledger.add("a", NOON, 0.25, 1);
        drop(held);
        assert_eq!(ledger.reserved("a", NOON), 0.0);
        // Without a cap a session reserves all that is left: the next one waits for it.
        let all = reserve(None).unwrap();
        assert_eq!(all.usd, 4.5);
        assert!(reserve(Some(0.01)).is_err());
        drop(all);
        // What the database says was spent (other processes) counts when it is more.
        let stored = Spent {
            usd: 4.9,
            tokens: 1,
        };
        let rest = ledger
            .reserve_here("a", NOON, (None, 0.0), quota, stored)
            .unwrap();
        assert!((rest.usd - 0.1).abs() < 1e-9);
        drop(rest);
        // A reservation of yesterday given back today leaves today alone.
        let late = reserve(Some(1.0)).unwrap();
        let tomorrow = NOON + DAY_MS;
        let today = ledger
            .reserve_here("a", tomorrow, (Some(2.0), 0.0), quota, none)
            .unwrap();
        drop(late);
        assert_eq!(ledger.reserved("a", tomorrow), 2.0);
        drop(today);
        assert_eq!(ledger.reserved("a", tomorrow), 0.0);
    }
}
