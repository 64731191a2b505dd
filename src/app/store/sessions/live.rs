//! One session's record in memory: its events (bounded), a running summary, and a watch
//! signal readers wait on. A running session's record lives here; with a database a
//! finished one leaves once the writer committed it, and one read back from the database
//! is rebuilt here for the length of a request.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use massgen_core::coordination::{AgentRef, EventKind, SessionEvent};
use massgen_core::provider::Usage;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::app::Caller;
use crate::app::store::batch::Queue;
use crate::app::store::lock;

/// Events kept per session; the rest (token deltas of a very long answer) are counted only.
pub const MAX_EVENTS: usize = 20_000;
/// Bytes of the question a record keeps (a 9 MB question is not kept whole: its size and
/// SHA-256 are).
pub const QUESTION_KEPT_BYTES: usize = 16 * 1024;

/// The writer's queue of records with events not yet written, by id.
pub type Dirty = Queue<Arc<str>>;

pub struct SessionRecord {
    pub id: Arc<str>,
    pub owner: Caller,
    pub info: SessionInfo,
    log: Mutex<Log>,
    /// Ticks on every stored event: subscribers wait on it, then read the log. (A
    /// per-session broadcast buffer of 1,024 events used to cost ~200 KB per record, kept
    /// for as long as the record.)
    grew: watch::Sender<()>,
    /// With a database: where a new event tells the writer this record has something to
    /// write. The flag makes that one queue push per flush, not one per event.
    dirty: Option<Arc<Dirty>>,
    queued: AtomicBool,
    /// Events of the log already committed (only the writer moves it).
    committed: AtomicUsize,
}

/// What the request said about a session, for the session list and the record.
#[derive(Debug, Clone, Default)]
pub struct SessionInfo {
    /// The `model` the client asked for (`massgen`, `massgen/<name>`).
    pub model: String,
    /// The API the request came through (`chat_completions`, `responses`, `messages`).
    pub door: Cow<'static, str>,
    /// The panel that ran it.
    pub panel: String,
    /// The last user message, cut to [`QUESTION_KEPT_BYTES`] once recorded.
    pub question: String,
    /// The whole question's size in bytes and SHA-256 (hex), set when recorded.
    pub question_bytes: usize,
    pub question_sha256: String,
    /// What the request said about itself (Responses `metadata`, Anthropic
    /// `metadata.user_id`), bounded by the doors.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Unix time in milliseconds when the request arrived.
    pub created_ms: u64,
}

/// Kept up to date on every event so listing many sessions never rescans their events.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// `running`, `completed`, `failed` or (read from a database) `interrupted`.
    pub status: &'static str,
    pub agents: Vec<AgentRef>,
    pub winner: Option<AgentRef>,
    pub usage: Usage,
    pub answers: u32,
    pub votes: u32,
    pub started_ms: Option<u64>,
    pub ended_ms: Option<u64>,
}

impl Summary {
    fn update(&mut self, event: &SessionEvent) {
        self.started_ms.get_or_insert(event.at_ms);
        match &event.kind {
            EventKind::SessionStarted { agents } => self.agents.clone_from(agents),
            EventKind::Answer { .. } => self.answers += 1,
            EventKind::Vote { .. } => self.votes += 1,
            EventKind::Consensus { winner, .. } => self.winner = Some(winner.clone()),
            EventKind::Usage { usage, .. } => self.usage.add(usage),
            EventKind::SessionCompleted { summary } => {
                self.status = "completed";
                self.winner = Some(summary.winner.clone());
                self.ended_ms = Some(event.at_ms);
            }
            EventKind::SessionFailed { .. } => {
                self.status = "failed";
                self.ended_ms = Some(event.at_ms);
            }
            _ => {}
        }
    }
}

struct Log {
    /// Shared with subscribers page by page, never copied whole.
    events: Vec<Arc<SessionEvent>>,
    dropped: u64,
    finished: Option<Instant>,
    summary: Summary,
}

impl Default for Log {
    fn default() -> Self {
        Self {
            events: Vec::new(),
            dropped: 0,
            finished: None,
            summary: Summary {
                status: "running",
                ..Summary::default()
            },
        }
    }
}

/// What the writer commits of a record in one batch.
pub struct Unwritten {
    /// Events after the committed ones (at most the batch's share).
    pub events: Vec<Arc<SessionEvent>>,
    /// The log's length once these are written.
    pub upto: usize,
    /// Nothing was committed yet (the row's `info` is written with the first batch).
    pub first: bool,
    pub summary: Summary,
    pub dropped: u64,
}

impl SessionRecord {
    pub(super) fn new(
        id: Arc<str>,
        owner: Caller,
        mut info: SessionInfo,
        dirty: Option<Arc<Dirty>>,
    ) -> Self {
        keep_question(&mut info);
        Self {
            id,
            owner,
            info,
            log: Mutex::new(Log::default()),
            grew: watch::Sender::new(()),
            dirty,
            queued: AtomicBool::new(false),
            committed: AtomicUsize::new(0),
        }
    }

    /// A record read back from a database, for the length of one request: `summary`
    /// carries the stored status (`interrupted` included), `events` are the stored ones.
    pub(super) fn stored(
        id: Arc<str>,
        owner: Caller,
        info: SessionInfo,
        summary: Summary,
        dropped: u64,
        events: Vec<SessionEvent>,
    ) -> Self {
        let finished = (summary.status != "running").then(Instant::now);
        let record = Self {
            id,
            owner,
            info,
            log: Mutex::new(Log {
                events: events.into_iter().map(Arc::new).collect(),
                dropped,
                finished,
                summary,
            }),
            grew: watch::Sender::new(()),
            dirty: None,
            queued: AtomicBool::new(false),
            committed: AtomicUsize::new(0),
        };
        record
            .committed
            .store(lock(&record.log).events.len(), Ordering::Relaxed);
        record
    }

    pub fn push(&self, event: SessionEvent) {
        let mut log = lock(&self.log);
        let last = matches!(
            event.kind,
            EventKind::SessionCompleted { .. } | EventKind::SessionFailed { .. }
        );
        if last {
            log.finished = Some(Instant::now());
        }
        log.summary.update(&event);
        if log.events.len() < MAX_EVENTS || last {
            log.events.push(Arc::new(event));
        } else {
            log.dropped += 1;
        }
        if last {
            // A finished record only shrinks from here: give back the growth headroom.
            log.events.shrink_to_fit();
        }
        drop(log);
        // Nobody follows most sessions: a send wakes nobody, yet locks the value and each
        // of the channel's notify shards, once per token. A reader subscribes before it
        // reads the log (`Cursor`), and this event is in the log before the count is read,
        // so a reader counted as absent here still finds it.
        if self.grew.receiver_count() > 0 {
            self.grew.send_replace(());
        }
        self.mark_dirty();
    }

    /// Queues the record for the writer unless it is queued already (the session's hot
    /// path: an atomic swap, and a short lock once per batch).
    pub(super) fn mark_dirty(&self) {
        if let Some(dirty) = &self.dirty
            && !self.queued.swap(true, Ordering::AcqRel)
            && dirty.push(Arc::clone(&self.id), 0).is_err()
        {
            // Not queued after all (the queue has no bound of its own: see
            // `writer::LIMITS`): the next event tries again.
            self.queued.store(false, Ordering::Release);
        }
    }

    /// The writer takes the record off the queue before reading it, so an event stored
    /// after the read queues it again.
    pub(super) fn unqueue(&self) {
        self.queued.store(false, Ordering::Release);
    }

    /// At most `max` events past the committed ones, with the state to write along.
    pub(super) fn unwritten(&self, max: usize) -> Unwritten {
        let log = lock(&self.log);
        let from = self.committed.load(Ordering::Acquire).min(log.events.len());
        let events: Vec<_> = log.events[from..].iter().take(max).cloned().collect();
        let upto = from + events.len();
        Unwritten {
            first: from == 0,
            upto,
            events,
            summary: log.summary.clone(),
            dropped: log.dropped,
        }
    }

    /// The writer committed the log up to `upto`.
    pub(super) fn committed(&self, upto: usize) {
        self.committed.fetch_max(upto, Ordering::AcqRel);
    }

    /// Events stored but not committed yet.
    pub(super) fn has_unwritten(&self) -> bool {
        self.unwritten_count() > 0
    }

    /// How many events are stored but not committed yet.
    pub(super) fn unwritten_count(&self) -> usize {
        let stored = lock(&self.log).events.len();
        stored.saturating_sub(self.committed.load(Ordering::Acquire))
    }

    /// Finished and every event committed: the database has all of it (a record read
    /// back from the database, once finished, too; never one of the memory store).
    pub(super) fn is_saved(&self) -> bool {
        let log = lock(&self.log);
        log.finished.is_some() && self.committed.load(Ordering::Acquire) >= log.events.len()
    }

    /// Every stored event (shared, not copied).
    pub fn events(&self) -> Vec<Arc<SessionEvent>> {
        lock(&self.log).events.clone()
    }

    /// At most `max` stored events from position `from` on, and whether the session had
    /// ended when they were read (then nothing follows the last of them).
    pub fn read(&self, from: usize, max: usize) -> Page {
        let log = lock(&self.log);
        let events = log.events.get(from..).unwrap_or_default();
        Page {
            events: events.iter().take(max).cloned().collect(),
            finished: log.finished.is_some(),
        }
    }

    /// Woken on every stored event ([`Cursor`](super::Cursor) waits on it).
    pub(super) fn changes(&self) -> watch::Receiver<()> {
        self.grew.subscribe()
    }

    pub fn summary(&self) -> Summary {
        lock(&self.log).summary.clone()
    }

    pub fn dropped(&self) -> u64 {
        lock(&self.log).dropped
    }

    pub fn is_finished(&self) -> bool {
        lock(&self.log).finished.is_some()
    }

    pub(super) fn finished_at(&self) -> Option<Instant> {
        lock(&self.log).finished
    }
}

/// A run of stored events.
pub struct Page {
    pub events: Vec<Arc<SessionEvent>>,
    /// The session had ended when the page was read.
    pub finished: bool,
}

/// Cuts a huge question to its first [`QUESTION_KEPT_BYTES`] (on a character boundary),
/// noting the whole one's size and hash.
fn keep_question(info: &mut SessionInfo) {
    let question = &mut info.question;
    info.question_bytes = question.len();
    info.question_sha256 = format!("{:x}", Sha256::digest(question.as_bytes()));
    if question.len() > QUESTION_KEPT_BYTES {
        let cut = (0..=QUESTION_KEPT_BYTES)
            .rev()
            .find(|&i| question.is_char_boundary(i))
            .unwrap_or(0);
        question.truncate(cut);
        question.shrink_to_fit();
    }
}
