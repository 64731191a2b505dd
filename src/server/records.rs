//! `GET /v1/sessions`, `GET /v1/sessions/{id}` and `GET /v1/sessions/{id}/events`: the
//! session records (`app::store::sessions`) over HTTP.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Extension, Query, State};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use futures::Stream;
use massgen_core::coordination::SessionEvent;

use super::AppState;
use super::auth::Caller;
use super::doors::chat_completions::ChatCompletions;
use super::doors::door::Door;
use super::doors::mcp;
use super::doors::messages::Messages;
use super::doors::responses::Responses;
use super::error::{ApiError, PathId};
use super::limits::SubscriberSlot;
use super::sse;
use crate::app::App;
use crate::app::forward::{self, Weigh};
use crate::app::store::sessions::{Cursor, list_entry_json, record_json};
use tokio_util::task::TaskTracker;

/// Whether the events response is live (`running`) or a replay (`finished`).
pub const STATUS_HEADER: &str = "x-massgen-session-status";

/// Sessions listed when the request names no `limit`, and the most it may name.
const LIST_DEFAULT: usize = 50;
const LIST_MAX: usize = 1000;

/// The caller's newest sessions first, running and finished, as short summaries.
pub async fn list_sessions(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    // Pairs, not a struct: a repeated or unknown parameter must not become axum's
    // plain-text rejection.
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let mut limits = query.iter().filter(|(k, _)| k == "limit");
    let (first, repeated) = (limits.next(), limits.next().is_some());
    let limit = match first.map(|(_, v)| v.as_str()).filter(|_| !repeated) {
        None if first.is_none() => LIST_DEFAULT,
        None => return Err(limit_error()),
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=LIST_MAX).contains(n))
            .ok_or_else(limit_error)?,
    };
    let doors = doors(&query)?;
    let data: Vec<_> = app
        .records()
        .list_all(&caller, limit, doors.as_deref())
        .await
        .map_err(|_| ApiError::RecordsUnavailable)?
        .iter()
        .map(|r| list_entry_json(r))
        .collect();
    Ok(axum::Json(serde_json::json!({"object": "list", "data": data})).into_response())
}

/// Every door a session record names: what `door` and `exclude_door` may list.
const DOORS: [&str; 5] = [
    <ChatCompletions as Door>::NAME,
    <Responses as Door>::NAME,
    <Messages as Door>::NAME,
    mcp::NAME,
    crate::eval::session::DOOR,
];

/// The doors `door=A,B` lists, or the others than `exclude_door=A,B`'s (the page leaves
/// out `eval`'s sessions so); `None` for every door. A name that is no door, either
/// parameter given twice, or both together, is refused: a filter that quietly filtered
/// nothing would show what was meant to be hidden.
fn doors(query: &[(String, String)]) -> Result<Option<Vec<&'static str>>, ApiError> {
    let given = |name: &'static str| -> Result<Option<Vec<&'static str>>, ApiError> {
        let mut values = query.iter().filter(|(k, _)| k == name);
        let Some((_, raw)) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(door_error(name, "must be given once"));
        }
        let mut named = Vec::new();
        for part in raw.split(',') {
            let door = DOORS
                .iter()
                .find(|d| **d == part.trim())
                .ok_or_else(|| door_error(name, "names a door that does not exist"))?;
            if !named.contains(door) {
                named.push(*door);
            }
        }
        Ok(Some(named))
    };
    match (given("door")?, given("exclude_door")?) {
        (Some(_), Some(_)) => Err(door_error(
            "exclude_door",
            "cannot be given with door: name the doors to list, or those to leave out",
        )),
        (Some(only), None) => Ok(Some(only)),
        // "": a record made without a request names no door; it is not left out either.
        (None, Some(out)) => Ok(Some(
            DOORS
                .into_iter()
                .filter(|d| !out.contains(d))
                .chain([""])
                .collect(),
        )),
        (None, None) => Ok(None),
    }
}

fn door_error(param: &'static str, problem: &str) -> ApiError {
    ApiError::invalid(
        format!(
            "{param} {problem}; it is a comma-separated list of {}",
            DOORS.join(", ")
        ),
        Some(param),
        "invalid_value",
    )
}

fn limit_error() -> ApiError {
    ApiError::invalid(
        format!("limit must be given once, as a whole number from 1 to {LIST_MAX}"),
        Some("limit"),
        "invalid_value",
    )
}

/// The caller's record `id` (live here, else from the database); someone else's looks
/// like a missing one.
pub async fn get_session(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    PathId(id): PathId,
) -> Result<Response, ApiError> {
    let record = app
        .records()
        .find(&id, &caller)
        .await
        .map_err(|_| ApiError::RecordsUnavailable)?
        .ok_or(ApiError::SessionNotFound { id })?;
    // Rebuilding the JSON from up to 20,000 events is CPU work: not on a runtime thread.
    let json = tokio::task::spawn_blocking(move || record_json(&record))
        .await
        .map_err(|_| ApiError::Internal)?;
    Ok(axum::Json(json).into_response())
}

/// SSE: `event: <type>` + `data: <SessionEvent JSON>` per event, the stored ones first,
/// then live ones until the session ends; `: keep-alive` comments while quiet. A session
/// and a key have a bounded number of readers; a reader that stops reading is dropped.
pub async fn session_events(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    PathId(id): PathId,
) -> Result<Response, ApiError> {
    // The place first: a reader over the limits costs no database lookup.
    let session: Arc<str> = Arc::from(id.as_str());
    let slot = state.edge.limits.try_subscriber(caller.key, &session)?;
    let following = state
        .app
        .records()
        .follow(&id, &caller)
        .await
        .map_err(|_| ApiError::RecordsUnavailable)?
        .ok_or(ApiError::SessionNotFound { id })?;
    let status = if following.interrupted {
        "interrupted"
    } else if following.finished {
        "finished"
    } else {
        "running"
    };
    let session = Arc::clone(&following.id);
    let frames = frames(following.cursor, state.settings().keepalive);
    let stall = state.settings().production.client_stall_timeout;
    let tasks = state.app.sessions().tasks();
    let mut response = sse::response(bounded(tasks, frames, slot, stall, session));
    response
        .headers_mut()
        .insert(STATUS_HEADER, HeaderValue::from_static(status));
    Ok(response)
}

/// Chunks held for one reader between the record and its connection.
const READER_BUFFER: usize = 2;

impl Weigh for Bytes {
    fn weight(&self) -> usize {
        self.len()
    }
}

/// Moves `frames` to the response through [`READER_BUFFER`] chunks and one read ahead
/// ([`forward`], on the app's tracked tasks, so shutdown waits for it), so a reader holds
/// at most about three chunks whatever the record's size. A reader that leaves the buffer
/// full for `stall` (it stopped reading, or its HTTP/2 window is 0) is dropped as the
/// chat streams drop theirs: its place (`slot`) is freed at once, and the response ends in
/// an error, which closes the connection (HTTP/1) or resets the stream (HTTP/2) as soon
/// as the reader takes what was already buffered.
fn bounded(
    tasks: &TaskTracker,
    frames: impl Stream<Item = Bytes> + Send + 'static,
    slot: SubscriberSlot,
    stall: Duration,
    session: Arc<str>,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let bounds = forward::Bounds {
        capacity: READER_BUFFER,
        // The record waits for its reader: one chunk read ahead at most.
        ahead_bytes: 0,
        source_waits: true,
        stall,
    };
    let (mut from, stalled) = forward::spawn(tasks, frames, bounds, slot, (), move |_, _| {
        tracing::warn!(
            session_id = %session,
            stall_seconds = stall.as_secs_f64(),
            "a reader of the session's events stopped reading: dropping it"
        );
    });
    async_stream::stream! {
        while let Some(chunk) = from.recv().await {
            yield Ok(chunk);
        }
        if stalled.load(Ordering::Relaxed) {
            yield Err(std::io::Error::other("the reader stopped reading"));
        }
    }
}

/// Events read from the record at a time.
const PAGE_EVENTS: usize = 64;
/// A chunk of frames is sent once it holds this many bytes (one event may make it larger):
/// what a subscriber holds at once, whatever the record's size.
pub const CHUNK_BYTES: usize = 16 * 1024;
const CHUNK_CAPACITY: usize = CHUNK_BYTES + 4 * 1024;

/// The record as SSE frames, serialised as the client reads: one chunk of at most about
/// [`CHUNK_BYTES`] at a time, never the whole record.
pub fn frames(mut cursor: Cursor, keepalive: Duration) -> impl Stream<Item = Bytes> + Send {
    async_stream::stream! {
        loop {
            let page = tokio::select! {
                page = cursor.next_page(PAGE_EVENTS) => page,
                () = tokio::time::sleep(keepalive) => {
                    yield Bytes::from_static(sse::KEEPALIVE_COMMENT);
                    continue;
                }
            };
            if page.is_empty() {
                return;
            }
            // Sized for a full chunk and the event that tops it up: grown by doubling, a
            // chunk just past CHUNK_BYTES held twice that for as long as it was queued.
            let mut chunk = Vec::with_capacity(CHUNK_CAPACITY);
            for event in &page {
                frame(event, &mut chunk);
                if chunk.len() >= CHUNK_BYTES {
                    yield Bytes::from(std::mem::replace(
                        &mut chunk,
                        Vec::with_capacity(CHUNK_CAPACITY),
                    ));
                }
            }
            if !chunk.is_empty() {
                chunk.shrink_to_fit();
                yield Bytes::from(chunk);
            }
        }
    }
}

fn frame(event: &SessionEvent, into: &mut Vec<u8>) {
    let value = serde_json::to_value(event).unwrap_or_default();
    into.extend_from_slice(&sse::named(
        value["type"].as_str().unwrap_or("event"),
        &value,
    ));
}

#[cfg(test)]
mod door_names_tests {
    use super::DOORS;

    /// A door added to the registry must be one `door=`/`exclude_door=` can name, or
    /// `exclude_door` would quietly stop listing its sessions.
    #[test]
    fn every_registered_door_can_be_filtered_by() {
        for entry in crate::server::doors::registry::DOORS {
            assert!(
                DOORS.contains(&entry.name),
                "{} is not in DOORS",
                entry.name
            );
        }
    }
}
