//! Session records: every session's events, kept in memory (bounded in count and age) and
//! optionally written as files in MassGen's log layout. `GET /v1/sessions/{id}` serves the
//! record, `GET /v1/sessions/{id}/events` the events as SSE (live while the session runs,
//! replayed after). A record belongs to the API key that created its session.

mod files;
pub mod routes;
mod store;
mod tee;
mod view;

pub use store::{RecordStore, SessionInfo, SessionRecord, Summary};
pub use tee::{SessionStart, tee};
pub use view::{list_entry_json, record_json};
