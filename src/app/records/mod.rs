//! Session records: every session's events, kept in memory while the session runs and, by
//! default, in a database (SQLite, or PostgreSQL shared by replicas) once written; with
//! `--records-db memory` in memory only (bounded in count and age). Optionally also
//! written as files in MassGen's log layout. The server serves them as
//! `GET /v1/sessions/{id}` and `/v1/sessions/{id}/events` (live while the session runs,
//! replayed after, both read through a [`Cursor`]). A record belongs to the API key that
//! created its session.

mod cursor;
pub mod db;
mod files;
mod live;
mod store;
mod tee;
mod view;

pub use cursor::Cursor;
pub use live::{Page, QUESTION_KEPT_BYTES, SessionInfo, SessionRecord, Summary};
pub use store::{Following, ReadError, RecordStore};
pub(crate) use tee::{SessionStart, tee};
pub use view::{list_entry_json, record_json};
