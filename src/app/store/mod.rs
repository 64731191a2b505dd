//! The store: what the application keeps of its work, by domain. [`sessions`]: every
//! session's record (events, summary), in memory while it runs and in the database once
//! written; [`spend`]: each key's spend per UTC day and the running sessions' cost
//! reservations; [`evals`]: `massgen eval` runs and their items; [`responses`]: stored
//! Responses API responses. [`db`] is the database they share (`--records-db`: SQLite,
//! or PostgreSQL shared by replicas): connecting, the schema, the file lock, the
//! replicas' notifications and the upkeep timer. [`batch`] is the one background writer
//! the records and the stored responses are committed by. Nothing here knows an edge: the
//! doors and `massgen eval` read and write through these modules' public types.

pub mod batch;
pub mod db;
pub mod evals;
pub mod responses;
pub mod sessions;
pub mod spend;

use std::sync::{Mutex, MutexGuard, PoisonError};

pub use db::{Engine, RecordDb, now_ms, safe_error};
pub(crate) use sessions::write_files;
pub use sessions::{
    Cursor, Following, Page, QUESTION_KEPT_BYTES, ReadError, RecordStore, SessionInfo,
    SessionRecord, Summary, list_entry_json, record_json,
};

/// A mutex's guard, whether or not a holder panicked: every value kept behind one here is
/// whole after each statement that changes it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
