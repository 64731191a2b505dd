//! Session records: every session's events, kept in memory while the session runs and, by
//! default, in a database (SQLite, or PostgreSQL shared by replicas) once written; with
//! `--records-db memory` in memory only (bounded in count and age). Optionally also
//! written as files in MassGen's log layout. The server serves them as
//! `GET /v1/sessions/{id}` and `/v1/sessions/{id}/events` (live while the session runs,
//! replayed after, both read through a [`Cursor`]). A record belongs to the API key that
//! created its session.
//!
//! In memory: `live` (one record), `held` (the records held, bounded), `store`
//! ([`RecordStore`], what the rest of the application uses), `cursor`, `view` (the JSON of
//! the routes) and `files` (`--records-dir`). In the database: `rows` (a session's row),
//! `read` (the routes' reads), `flush` (one batch's transaction) and `writer` (the records
//! as a kind of row for the store's batch writer).

mod cursor;
mod files;
mod flush;
mod held;
mod live;
mod read;
pub(in crate::app::store) mod rows;
mod store;
mod view;
mod writer;

use std::path::PathBuf;
use std::sync::Arc;

pub use cursor::Cursor;
pub use live::{Page, QUESTION_KEPT_BYTES, SessionInfo, SessionRecord, Summary};
pub use store::{Following, ReadError, RecordStore};
pub use view::{list_entry_json, record_json};

#[cfg(test)]
pub(in crate::app::store) use store::tests::{event, failed};

/// Writes the ended session's record files (`--records-dir`), off the async workers.
pub(crate) async fn write_files(dir: PathBuf, record: Arc<SessionRecord>) {
    let written = tokio::task::spawn_blocking(move || {
        let json = record_json(&record);
        files::write(&dir, &record.id, &record.events(), &json)
    })
    .await;
    match written {
        Ok(Ok(path)) => tracing::debug!(path = %path.display(), "session record written"),
        Ok(Err(e)) => tracing::warn!("cannot write the session record files: {e}"),
        Err(e) => tracing::warn!("writing the session record files failed: {e}"),
    }
}
