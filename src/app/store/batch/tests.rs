//! The writer against a scripted sink, in paused time: each attempt's outcome is set in
//! advance and every call is recorded with the (virtual) time it came.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::*;

/// What one attempt does.
enum Step {
    Fail,
    /// Never answers (the batch timeout ends it).
    Hang,
    /// Waits for a permit, then succeeds (a batch in flight for as long as a test likes).
    Wait(Arc<Semaphore>),
}

/// Rows are numbers; a row weighs its value in bytes, and row 0 has nothing to write.
#[derive(Default)]
struct Script {
    /// The outcome of each attempt in turn; once they are used up, every attempt succeeds.
    steps: Mutex<VecDeque<Step>>,
    /// Every attempt: when, and its rows.
    attempts: Mutex<Vec<(Instant, Vec<u32>)>>,
    notes: Mutex<Vec<bool>>,
    reconnects: Mutex<Vec<Instant>>,
    written: Mutex<Vec<u32>>,
    dropped: Mutex<Vec<u32>>,
    /// `retry` keeps only the even rows (else all of them, the default).
    keep_even: bool,
    /// What `pressed` says.
    pressed: Mutex<bool>,
}

impl Script {
    fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        Self {
            steps: Mutex::new(steps.into_iter().collect()),
            ..Self::default()
        }
    }
}

impl RowKind for Arc<Script> {
    type Row = u32;

    async fn write(&self, batch: &[u32]) -> Result<(), sqlx::Error> {
        lock(&self.attempts).push((Instant::now(), batch.to_vec()));
        let step = lock(&self.steps).pop_front();
        match step {
            None => Ok(()),
            Some(Step::Fail) => Err(sqlx::Error::Protocol("scripted failure".into())),
            Some(Step::Hang) => std::future::pending().await,
            Some(Step::Wait(permits)) => {
                let _permit = permits.acquire().await;
                Ok(())
            }
        }
    }

    fn note(&self, result: &Result<(), sqlx::Error>) {
        lock(&self.notes).push(result.is_ok());
    }

    async fn reconnect(&self) {
        lock(&self.reconnects).push(Instant::now());
    }

    fn bytes(&self, row: &u32) -> usize {
        *row as usize
    }

    fn size(&self, row: &u32) -> Option<usize> {
        (*row != 0).then_some(1)
    }

    fn retry(&self, batch: Vec<u32>) -> Vec<u32> {
        if self.keep_even {
            batch.into_iter().filter(|row| row % 2 == 0).collect()
        } else {
            batch
        }
    }

    fn pressed(&self) -> bool {
        *lock(&self.pressed)
    }

    fn written(&self, batch: &[u32]) {
        lock(&self.written).extend_from_slice(batch);
    }

    fn dropped(&self, row: &u32) {
        lock(&self.dropped).push(*row);
    }
}

const LIMITS: Limits = Limits {
    gather: Duration::from_millis(100),
    batch: 2,
    max_rows: 4,
    max_bytes: 100,
};

/// A writer whose task waits for rows (as it does long before the first one comes).
async fn start(script: &Arc<Script>, limits: Limits) -> BatchWriter<Arc<Script>> {
    let writer = BatchWriter::start(Arc::clone(script), Arc::new(Queue::new(limits)));
    tokio::task::yield_now().await;
    writer
}

/// The pauses between one attempt and the next.
fn gaps(script: &Script) -> Vec<Duration> {
    let attempts = lock(&script.attempts);
    attempts.windows(2).map(|w| w[1].0 - w[0].0).collect()
}

#[tokio::test(start_paused = true)]
async fn a_failed_batch_is_retried_after_doubling_pauses_and_reconnects_every_third_failure() {
    let script = Arc::new(Script::new((0..8).map(|_| Step::Fail)));
    let writer = start(&script, LIMITS).await;
    assert!(writer.push(7));
    tokio::time::sleep(Duration::from_secs(120)).await;
    let ms = Duration::from_millis;
    assert_eq!(
        gaps(&script),
        [
            ms(200),
            ms(400),
            ms(800),
            ms(1_600),
            ms(3_200),
            ms(6_400),
            ms(10_000),
            ms(10_000)
        ],
        "doubling from 200 ms, at most 10 s"
    );
    // The same row each time, written once in the end.
    assert!(lock(&script.attempts).iter().all(|(_, rows)| rows == &[7]));
    assert_eq!(*lock(&script.written), [7]);
    assert_eq!(
        *lock(&script.notes),
        [[false; 8].as_slice(), &[true]].concat()
    );
    // After the 3rd and the 6th failure in a row, before the pause.
    let attempts = lock(&script.attempts);
    assert_eq!(
        *lock(&script.reconnects),
        [attempts[2].0, attempts[5].0],
        "reconnected after every third failure"
    );
    assert_eq!(writer.queue().waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_success_starts_the_pauses_over() {
    let script = Arc::new(Script::new([Step::Fail, Step::Fail]));
    let writer = start(&script, LIMITS).await;
    assert!(writer.push(1));
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Failures again after a success: the first pause again, and no reconnect (three
    // failures, but not in a row).
    lock(&script.steps).push_back(Step::Fail);
    assert!(writer.push(2));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let ms = Duration::from_millis;
    let gaps = gaps(&script);
    assert_eq!(gaps[..2], [ms(200), ms(400)]);
    assert_eq!(gaps[3], ms(200), "{gaps:?}");
    assert!(lock(&script.reconnects).is_empty());
    assert_eq!(*lock(&script.written), [1, 2]);
}

#[tokio::test(start_paused = true)]
async fn rows_are_gathered_then_written_in_batches_of_the_limit_in_order() {
    let script = Arc::new(Script::default());
    let writer = start(&script, LIMITS).await;
    let queued_at = Instant::now();
    assert!(writer.push(1));
    // Within the gathering window: part of the first batches.
    tokio::time::sleep(Duration::from_millis(50)).await;
    for row in [2, 3] {
        assert!(writer.push(row));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let attempts = lock(&script.attempts);
    let batches: Vec<&[u32]> = attempts.iter().map(|(_, rows)| rows.as_slice()).collect();
    assert_eq!(batches, [[1, 2].as_slice(), &[3]]);
    assert_eq!(attempts[0].0 - queued_at, Duration::from_millis(100));
    assert_eq!(attempts[1].0, attempts[0].0, "the rest at once");
    drop(attempts);
    assert_eq!(*lock(&script.written), [1, 2, 3]);
}

/// Queues a row, and another while the first batch is written (from 100 ms until `slow`
/// lets it go at 130 ms); returns when the first row was queued.
async fn a_row_during_the_first_write(
    writer: &BatchWriter<Arc<Script>>,
    slow: &Semaphore,
) -> Instant {
    let queued_at = Instant::now();
    assert!(writer.push(1));
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(writer.push(2));
    tokio::time::sleep(Duration::from_millis(10)).await;
    slow.add_permits(1);
    queued_at
}

/// When each attempt came, from `from`.
fn attempts_since(script: &Script, from: Instant) -> Vec<Duration> {
    lock(&script.attempts)
        .iter()
        .map(|(t, _)| *t - from)
        .collect()
}

/// Rows that come while a batch is written are the next window's, not a batch of their own
/// at once; a write longer than the window is followed at once.
#[tokio::test(start_paused = true)]
async fn rows_that_come_during_a_write_wait_for_the_next_window() {
    let ms = Duration::from_millis;
    let (slow, slower) = (Arc::new(Semaphore::new(0)), Arc::new(Semaphore::new(0)));
    let script = Arc::new(Script::new([
        Step::Wait(Arc::clone(&slow)),
        Step::Wait(Arc::clone(&slower)),
    ]));
    let writer = start(&script, LIMITS).await;
    let queued_at = a_row_during_the_first_write(&writer, &slow).await;
    // The second waits for its window (200 ms), and is written until 400 ms.
    tokio::time::sleep(ms(120)).await;
    assert!(writer.push(3));
    tokio::time::sleep(ms(150)).await;
    slower.add_permits(1);
    tokio::time::sleep(ms(500)).await;
    let batches: Vec<Vec<u32>> = lock(&script.attempts)
        .iter()
        .map(|(_, rows)| rows.clone())
        .collect();
    assert_eq!(batches, [vec![1], vec![2], vec![3]]);
    assert_eq!(
        attempts_since(&script, queued_at),
        [ms(100), ms(200), ms(400)],
        "a window each, or at once after a long write"
    );
}

/// A kind pressed for room (records near being dropped unsaved) has what came during a
/// write written at once.
#[tokio::test(start_paused = true)]
async fn a_pressed_kind_is_written_without_waiting_for_the_window() {
    let ms = Duration::from_millis;
    let slow = Arc::new(Semaphore::new(0));
    let script = Arc::new(Script::new([Step::Wait(Arc::clone(&slow))]));
    *lock(&script.pressed) = true;
    let writer = start(&script, LIMITS).await;
    let queued_at = a_row_during_the_first_write(&writer, &slow).await;
    tokio::time::sleep(ms(500)).await;
    assert_eq!(attempts_since(&script, queued_at), [ms(100), ms(130)]);
}

#[tokio::test(start_paused = true)]
async fn past_the_bound_a_row_is_refused_and_its_kind_told_until_rows_are_written() {
    let script = Arc::new(Script::new((0..3).map(|_| Step::Fail)));
    let writer = start(&script, LIMITS).await;
    // By count: 4 rows wait at most, queued or being written.
    for row in [1, 2, 3, 4] {
        assert!(writer.push(row));
    }
    assert!(!writer.push(5), "a fifth row");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!writer.push(6), "a failed batch still waits");
    assert_eq!(writer.queue().waiting(), 4);
    // By bytes: once the database takes the rows, room again, up to 100 bytes.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(writer.queue().waiting(), 0);
    assert!(writer.push(60));
    assert!(!writer.push(41), "60 + 41 bytes");
    assert!(writer.push(40));
    assert_eq!(*lock(&script.dropped), [5, 6, 41]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*lock(&script.written), [1, 2, 3, 4, 60, 40]);
}

#[tokio::test(start_paused = true)]
async fn a_batch_the_database_never_answers_fails_at_the_timeout_and_is_retried() {
    let script = Arc::new(Script::new([Step::Hang]));
    let writer = start(&script, LIMITS).await;
    assert!(writer.push(1));
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(gaps(&script), [BATCH_TIMEOUT + RETRY_FIRST]);
    assert_eq!(*lock(&script.notes), [false, true]);
    assert_eq!(*lock(&script.written), [1]);
}

#[tokio::test(start_paused = true)]
async fn a_failed_batch_goes_back_as_the_kind_says_and_rows_with_nothing_to_write_leave() {
    let script = Arc::new(Script {
        keep_even: true,
        ..Script::new([Step::Fail])
    });
    let writer = start(
        &script,
        Limits {
            batch: 10,
            ..LIMITS
        },
    )
    .await;
    for row in [1, 2, 0, 4] {
        assert!(writer.push(row));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let attempts = lock(&script.attempts);
    let batches: Vec<&[u32]> = attempts.iter().map(|(_, rows)| rows.as_slice()).collect();
    assert_eq!(batches, [[1, 2, 4].as_slice(), &[2, 4]]);
    drop(attempts);
    assert_eq!(writer.queue().waiting(), 0, "1 given up, 0 never written");
}

#[tokio::test(start_paused = true)]
async fn close_waits_for_the_batch_in_flight() {
    let permits = Arc::new(Semaphore::new(0));
    let script = Arc::new(Script::new([Step::Wait(Arc::clone(&permits))]));
    let writer = Arc::new(start(&script, LIMITS).await);
    assert!(writer.push(1));
    tokio::time::sleep(Duration::from_millis(150)).await;
    // The batch left the queue: nothing is queued, yet it is not written.
    assert_eq!(lock(&script.attempts).len(), 1, "a batch in flight");
    assert!(writer.queue().is_empty());
    let closing = tokio::spawn({
        let writer = Arc::clone(&writer);
        async move { writer.close(Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !closing.is_finished(),
        "closed while a batch was being written"
    );
    permits.add_permits(1);
    assert_eq!(closing.await.unwrap(), 0, "all written");
    assert_eq!(*lock(&script.written), [1]);
}

#[tokio::test(start_paused = true)]
async fn close_writes_what_is_queued_without_waiting_out_the_pause() {
    let script = Arc::new(Script::new((0..5).map(|_| Step::Fail)));
    let writer = start(&script, LIMITS).await;
    assert!(writer.push(1));
    // Five failures: the task now pauses 3.2 s before its next attempt.
    tokio::time::sleep(Duration::from_millis(3_200)).await;
    assert_eq!(lock(&script.attempts).len(), 5);
    assert!(writer.push(2));
    let began = Instant::now();
    assert_eq!(writer.close(Duration::from_secs(10)).await, 0);
    assert_eq!(began.elapsed(), Duration::ZERO);
    assert_eq!(*lock(&script.written), [1, 2]);
}

#[tokio::test(start_paused = true)]
async fn close_gives_up_at_its_deadline_and_says_what_is_left() {
    let script = Arc::new(Script::new((0..100).map(|_| Step::Fail)));
    let writer = start(&script, LIMITS).await;
    writer.stop();
    for row in [1, 2, 3] {
        assert!(writer.push(row));
    }
    let began = Instant::now();
    assert_eq!(writer.close(Duration::from_secs(1)).await, 3);
    assert_eq!(began.elapsed(), Duration::from_secs(1));
    // It retried meanwhile, every first pause.
    assert_eq!(lock(&script.attempts).len(), 5);
    assert!(lock(&script.written).is_empty());
}
