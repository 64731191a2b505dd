//! One background writer for every kind of row the store commits ([`BatchWriter`]): the
//! session records' new events and the stored responses. A row is queued without waiting
//! (nothing a session or a request does waits for the database); one task per kind
//! gathers a batch, commits it in one transaction, and when the database fails puts the
//! batch back and retries with a growing pause (failures in a row reopen the idle
//! connections), so it recovers once the database does. The queue is bounded in rows and
//! bytes: past either a row is refused and its kind told ([`RowKind::dropped`]).
//! [`BatchWriter::close`] writes what is left, for at most a deadline (shutdown).
//!
//! What differs between kinds is behind [`RowKind`]: how to write a batch, what a row
//! weighs, which rows of a failed batch go back on the queue, what a committed or a
//! refused row means.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::AbortHandle;

use super::lock;

/// A batch not committed by then counts as failed (a cut network link otherwise holds the
/// writer, and the shutdown, for as long as TCP takes to notice).
pub const BATCH_TIMEOUT: Duration = Duration::from_secs(30);
/// Pauses between failed attempts: doubling from the first to the last.
pub const RETRY_FIRST: Duration = Duration::from_millis(200);
pub const RETRY_MAX: Duration = Duration::from_secs(10);
/// Failed batches in a row after which the pool's idle connections are closed.
pub const RECYCLE_AFTER: u32 = 3;

/// How one kind's rows are batched and bounded.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long the writer gathers after a row reaches an empty queue, and the least time
    /// from one batch's start to the next's (unless a batch was cut at its size): about
    /// this much is lost in a crash, and a busy server writes a batch a window, not one per
    /// row or per commit.
    pub gather: Duration,
    /// What one batch holds, in the kind's measure ([`RowKind::size`]): rows are taken
    /// while the batch is below it (the last one may pass it; a batch has at least one).
    pub batch: usize,
    /// Rows and bytes ([`RowKind::bytes`]) waiting at most, queued or being written: a
    /// database that is down for long must not let the queue grow without bound.
    pub max_rows: usize,
    pub max_bytes: usize,
}

/// A kind of row: how its batches are written and what its rows mean to the writer.
pub trait RowKind: Send + Sync + 'static {
    type Row: Send + Sync + 'static;

    /// Commits `batch` in one transaction: all of it or nothing (a retry after a commit
    /// whose answer was lost must write nothing twice).
    fn write(&self, batch: &[Self::Row]) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Every attempt's outcome (the store's health, its metrics, one warning per run of
    /// failures).
    fn note(&self, result: &Result<(), sqlx::Error>);

    /// Failures persist: the connections are reopened rather than trusted.
    fn reconnect(&self) -> impl Future<Output = ()> + Send;

    /// What `row` counts against [`Limits::max_bytes`], the same each time it is asked.
    fn bytes(&self, _row: &Self::Row) -> usize {
        0
    }

    /// What `row` adds to a batch now ([`Limits::batch`]); `None`: it has nothing left
    /// to write, and leaves the queue unwritten.
    fn size(&self, _row: &Self::Row) -> Option<usize> {
        Some(1)
    }

    /// A batch that failed: the rows to put back at the front of the queue, in order (all
    /// of them, unless the kind queues its rows again itself).
    fn retry(&self, batch: Vec<Self::Row>) -> Vec<Self::Row> {
        batch
    }

    /// Rows are near a bound of the kind's own (records about to be dropped unsaved): the
    /// next batch is written at once instead of waiting out its window.
    fn pressed(&self) -> bool {
        false
    }

    /// A batch the database took.
    fn written(&self, _batch: &[Self::Row]) {}

    /// A row the queue refused (it was full): the database will not see it.
    fn dropped(&self, _row: &Self::Row) {}
}

/// The rows waiting for the writer. Shared with whoever queues them (a session's record
/// queues itself when it has new events).
pub struct Queue<R> {
    state: Mutex<State<R>>,
    /// Woken when a row is queued (the writer waits on it when the queue is empty).
    wake: Notify,
    limits: Limits,
}

struct State<R> {
    rows: VecDeque<R>,
    /// Rows queued or being written, and their bytes: counted when queued, uncounted
    /// once written or given up.
    waiting: usize,
    bytes: usize,
}

impl<R> Queue<R> {
    pub fn new(limits: Limits) -> Self {
        Self {
            state: Mutex::new(State {
                rows: VecDeque::new(),
                waiting: 0,
                bytes: 0,
            }),
            wake: Notify::new(),
            limits: Limits {
                batch: limits.batch.max(1),
                ..limits
            },
        }
    }

    /// Queues `row`, which weighs `bytes`; `Err` with the row when the queue is full.
    pub fn push(&self, row: R, bytes: usize) -> Result<(), R> {
        let mut state = lock(&self.state);
        if state.waiting >= self.limits.max_rows
            || state.bytes.saturating_add(bytes) > self.limits.max_bytes
        {
            return Err(row);
        }
        state.waiting += 1;
        state.bytes += bytes;
        state.rows.push_back(row);
        drop(state);
        self.wake.notify_one();
        Ok(())
    }

    /// Rows queued now (not those of a batch being written).
    pub fn len(&self) -> usize {
        lock(&self.state).rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows queued or being written.
    pub fn waiting(&self) -> usize {
        lock(&self.state).waiting
    }

    /// The first row queued; it still counts as waiting.
    pub(in crate::app::store) fn pop(&self) -> Option<R> {
        lock(&self.state).rows.pop_front()
    }

    /// Puts rows taken by [`Self::pop`] back at the front, in order.
    fn put_back(&self, rows: Vec<R>) {
        let mut state = lock(&self.state);
        for row in rows.into_iter().rev() {
            state.rows.push_front(row);
        }
    }

    /// `rows` taken rows weighing `bytes` no longer wait.
    fn done(&self, rows: usize, bytes: usize) {
        let mut state = lock(&self.state);
        state.waiting = state.waiting.saturating_sub(rows);
        state.bytes = state.bytes.saturating_sub(bytes);
    }
}

/// The writer of one kind of row: its queue and the task that commits it. Dropping it
/// stops the task; [`Self::close`] first to write what is left.
pub struct BatchWriter<K: RowKind> {
    shared: Arc<Shared<K>>,
    task: AbortHandle,
}

struct Shared<K: RowKind> {
    kind: K,
    queue: Arc<Queue<K::Row>>,
    /// Held while a batch is written. The task and [`BatchWriter::close`] are two writers
    /// of one queue: a batch in flight has left the queue, so "nothing queued" only means
    /// "all written" while this is held.
    busy: tokio::sync::Mutex<()>,
}

impl<K: RowKind> BatchWriter<K> {
    /// Starts the writer of `queue`'s rows (inside a Tokio runtime).
    pub fn start(kind: K, queue: Arc<Queue<K::Row>>) -> Self {
        let shared = Arc::new(Shared {
            kind,
            queue,
            busy: tokio::sync::Mutex::new(()),
        });
        let task = tokio::spawn(Arc::clone(&shared).run()).abort_handle();
        Self { shared, task }
    }

    /// Queues `row`; `false` when the queue is full and the row was dropped (its kind was
    /// told).
    pub fn push(&self, row: K::Row) -> bool {
        let bytes = self.shared.kind.bytes(&row);
        match self.shared.queue.push(row, bytes) {
            Ok(()) => true,
            Err(row) => {
                self.shared.kind.dropped(&row);
                false
            }
        }
    }

    pub fn queue(&self) -> &Arc<Queue<K::Row>> {
        &self.shared.queue
    }

    pub fn kind(&self) -> &K {
        &self.shared.kind
    }

    /// Writes one batch now; `Err` when it failed (its rows are queued again as the kind
    /// says). A test drives the writer with it.
    #[cfg(test)]
    pub(in crate::app::store) async fn write_once(&self) -> Result<(), ()> {
        self.shared.write_once().await
    }

    /// Writes everything queued, retrying until `within` is over (shutdown). Returns the
    /// rows the database has not taken (0: all written).
    pub async fn close(&self, within: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + within;
        let shared = &self.shared;
        loop {
            // Waits out the task's batch in flight (a failed one is queued again).
            let Ok(idle) = tokio::time::timeout_at(deadline, shared.busy.lock()).await else {
                break;
            };
            let done = shared.queue.is_empty();
            drop(idle);
            if done {
                return 0;
            }
            // Checked here, not only by the timeouts: they poll what they wait for first,
            // so past the deadline a database that fails at once would be tried again and
            // again without a pause.
            if tokio::time::Instant::now() >= deadline {
                break;
            }
            match tokio::time::timeout_at(deadline, shared.write_once()).await {
                Ok(Ok(())) => {}
                Ok(Err(())) => {
                    let next = tokio::time::Instant::now() + RETRY_FIRST;
                    tokio::time::sleep_until(next.min(deadline)).await;
                }
                Err(_) => break,
            }
        }
        shared.queue.waiting()
    }

    /// Stops the task (a test drives the writer itself).
    #[cfg(test)]
    pub(in crate::app::store) fn stop(&self) {
        self.task.abort();
    }

    /// The lock a batch in flight holds (a test stands in for one).
    #[cfg(test)]
    pub(in crate::app::store) fn busy(&self) -> &tokio::sync::Mutex<()> {
        &self.shared.busy
    }
}

impl<K: RowKind> Drop for BatchWriter<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K: RowKind> Shared<K> {
    /// Runs until the writer is dropped.
    async fn run(self: Arc<Self>) {
        let gather = self.queue.limits.gather;
        let mut pause = RETRY_FIRST;
        let mut failures = 0u32;
        let mut started = tokio::time::Instant::now();
        let mut full = false;
        loop {
            if self.queue.is_empty() {
                self.queue.wake.notified().await;
                if !gather.is_zero() {
                    tokio::time::sleep(gather).await;
                }
            } else if !full && !gather.is_zero() && !self.kind.pressed() {
                // Rows that came while the last batch was written wait out the rest of its
                // window: a busy server commits once a window with every session that ran
                // in it. Written back to back, a batch held what came during the last
                // commit (a few sessions), and every commit rewrote the same last pages of
                // each table and index: about 80 commits a second at 400 streamed requests
                // a second, 7.5 page writes and 1.6 round trips to SQLite's thread a request.
                tokio::time::sleep_until(started + gather).await;
            }
            started = tokio::time::Instant::now();
            match self.write_batch().await {
                Ok(cut) => {
                    // A batch cut at its size leaves a full one behind: written at once
                    // (as are rows the kind is pressed to write).
                    full = cut;
                    pause = RETRY_FIRST;
                    failures = 0;
                }
                Err(()) => {
                    full = false;
                    failures += 1;
                    if failures.is_multiple_of(RECYCLE_AFTER) {
                        // Failures that persist ("database is locked" after the disk
                        // came back): reopen rather than trust the connections.
                        self.kind.reconnect().await;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RETRY_MAX);
                }
            }
        }
    }

    async fn write_once(&self) -> Result<(), ()> {
        self.write_batch().await.map(|_cut| ())
    }

    /// Writes one batch; `Ok(true)` when it was cut at the batch size with rows left.
    async fn write_batch(&self) -> Result<bool, ()> {
        let _one = self.busy.lock().await;
        let (batch, cut) = self.take();
        if batch.is_empty() {
            return Ok(false);
        }
        let result = tokio::time::timeout(BATCH_TIMEOUT, self.kind.write(&batch))
            .await
            .unwrap_or_else(|_| {
                Err(sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the batch was not committed within {BATCH_TIMEOUT:?}"),
                )))
            });
        self.kind.note(&result);
        let rows = batch.len();
        let bytes = self.bytes(&batch);
        if result.is_ok() {
            self.kind.written(&batch);
            self.queue.done(rows, bytes);
            return Ok(cut);
        }
        let again = self.kind.retry(batch);
        self.queue.done(
            rows.saturating_sub(again.len()),
            bytes.saturating_sub(self.bytes(&again)),
        );
        self.queue.put_back(again);
        Err(())
    }

    /// The next batch: rows off the queue while it is below the batch size (those with
    /// nothing left to write leave the queue here), and whether rows were left behind.
    fn take(&self) -> (Vec<K::Row>, bool) {
        let mut batch = Vec::new();
        let mut size = 0usize;
        while batch.is_empty() || size < self.queue.limits.batch {
            let Some(row) = self.queue.pop() else {
                return (batch, false);
            };
            match self.kind.size(&row) {
                Some(n) => {
                    size = size.saturating_add(n);
                    batch.push(row);
                }
                None => self.queue.done(1, self.kind.bytes(&row)),
            }
        }
        (batch, !self.queue.is_empty())
    }

    fn bytes(&self, rows: &[K::Row]) -> usize {
        rows.iter().map(|row| self.kind.bytes(row)).sum()
    }
}

#[cfg(test)]
mod tests;
