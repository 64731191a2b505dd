//! Session records: every session's events, kept in memory (bounded in count and age) and
//! optionally written as files in MassGen's log layout. The server serves them as
//! `GET /v1/sessions/{id}` and `/v1/sessions/{id}/events` (live while the session runs,
//! replayed after, both read through a [`Cursor`]). A record belongs to the API key that
//! created its session.

mod cursor;
mod files;
mod store;
mod tee;
mod view;

pub use cursor::Cursor;
pub use store::{Page, QUESTION_KEPT_BYTES, RecordStore, SessionInfo, SessionRecord, Summary};
pub(crate) use tee::{SessionStart, tee};
pub use view::{list_entry_json, record_json};
