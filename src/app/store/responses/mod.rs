//! Stored Responses API responses in the records database (`responses`,
//! `response_items` and `response_owners`, migrations 4 and 6): written by one queue per
//! process that never makes a request wait ([`ResponseWriter`]), read by id and owner,
//! walked along a conversation by parent ids ([`RecordDb::response_chain`]), deleted by
//! the records' retention. Each owner's stored bytes are a running sum that the writes
//! and deletes keep (the stored-bytes quota reads it). Rows hold JSON text the Responses
//! door writes and reads; nothing here knows its shape.

mod write;
mod writer;

use sqlx::Row;

use crate::app::store::db::RecordDb;
use crate::app::store::db::sql::{from_db, to_db};

pub use writer::ResponseWriter;

/// Ids per `IN (…)` list (touched responses, turns read at once): well under both
/// engines' parameter limits, and a bounded amount of text per query when reading turns.
const IDS_PER_QUERY: usize = 64;

/// One stored response as its rows hold it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseRow {
    pub id: String,
    /// `Caller::owner()`.
    pub owner: String,
    pub created_ms: u64,
    /// The response this one continued (`previous_response_id`).
    pub parent: Option<String>,
    /// This response's own turn, JSON.
    pub conversation: String,
    /// The text the turn brings to a conversation that continues it (the door's count).
    pub text_bytes: u64,
    /// The response object, JSON.
    pub body: String,
    /// The items that can be named by id: (id, item JSON).
    pub items: Vec<(String, String)>,
    /// Earlier responses of the owner's this one used (the turns it continued, the
    /// holders of items it referenced): their `used_ms` becomes this one's creation.
    pub touch: Vec<String>,
}

impl ResponseRow {
    /// What the row and its items take: the per-owner quota counts this.
    pub fn bytes(&self) -> usize {
        self.conversation.len()
            + self.body.len()
            + self
                .items
                .iter()
                .map(|(id, body)| id.len() + body.len())
                .sum::<usize>()
    }
}

/// One response of a chain, as [`RecordDb::response_chain`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainLink {
    pub id: String,
    pub parent: Option<String>,
    pub text_bytes: u64,
}

/// A value for a plain TEXT column (ids come from clients): PostgreSQL refuses NUL in
/// text. Applied to what is written and to what is looked up alike.
fn text_column(value: &str) -> std::borrow::Cow<'_, str> {
    if value.contains('\0') {
        value.replace('\0', "\u{FFFD}").into()
    } else {
        value.into()
    }
}

/// `$first, $first+1, …` for `n` values.
fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl RecordDb {
    /// The object of response `id` if `owner` stored it and it was used at or after
    /// `since_ms`.
    pub async fn response_body(
        &self,
        id: &str,
        owner: &str,
        since_ms: u64,
    ) -> Result<Option<String>, sqlx::Error> {
        let row = sqlx::query(
            "SELECT body FROM responses WHERE id = $1 AND owner = $2 AND used_ms >= $3",
        )
        .bind(&*text_column(id))
        .bind(owner)
        .bind(to_db(since_ms))
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| r.try_get(0)).transpose()
    }

    /// Response `id` of `owner`'s (used at or after `since_ms`) and the responses it
    /// continues, newest first, by parent ids: one recursive query that carries ids and
    /// sizes only, and stops after the response that takes the sum of `text_bytes` past
    /// `max_bytes`, or at `max_links`. The last link's `parent` is set when the chain
    /// goes on beyond what was read (a limit, or a parent this database does not hold).
    pub async fn response_chain(
        &self,
        id: &str,
        owner: &str,
        since_ms: u64,
        max_bytes: u64,
        max_links: usize,
    ) -> Result<Vec<ChainLink>, sqlx::Error> {
        let rows = sqlx::query(
            "WITH RECURSIVE chain(id, parent, text_bytes, total, depth) AS ( \
               SELECT id, parent, text_bytes, text_bytes, CAST(1 AS BIGINT) FROM responses \
                 WHERE id = $1 AND owner = $2 AND used_ms >= $3 \
               UNION ALL \
               SELECT r.id, r.parent, r.text_bytes, c.total + r.text_bytes, c.depth + 1 \
                 FROM chain c JOIN responses r ON r.id = c.parent \
                 WHERE r.owner = $2 AND c.total <= $4 AND c.depth < $5 \
             ) SELECT id, parent, text_bytes FROM chain ORDER BY depth",
        )
        .bind(&*text_column(id))
        .bind(owner)
        .bind(to_db(since_ms))
        .bind(to_db(max_bytes))
        .bind(to_db(max_links as u64))
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(ChainLink {
                    id: r.try_get(0)?,
                    parent: r.try_get(1)?,
                    text_bytes: from_db(r.try_get(2)?),
                })
            })
            .collect()
    }

    /// The turns (the `conversation` column) of `owner`'s responses `ids`, a bounded
    /// number of rows per query, each handed to `take` as it is read: the text of one
    /// query is all that is held at once besides what `take` keeps. Missing ids are
    /// missing from what `take` gets.
    pub async fn response_turns(
        &self,
        owner: &str,
        ids: &[String],
        mut take: impl FnMut(String, String) -> Result<(), sqlx::Error>,
    ) -> Result<(), sqlx::Error> {
        for chunk in ids.chunks(IDS_PER_QUERY) {
            let sql = format!(
                "SELECT id, conversation FROM responses WHERE owner = $1 AND id IN ({})",
                placeholders(2, chunk.len())
            );
            let mut query = sqlx::query(&sql).bind(owner);
            for id in chunk {
                query = query.bind(text_column(id).into_owned());
            }
            for row in query.fetch_all(self.pool()).await? {
                take(row.try_get(0)?, row.try_get(1)?)?;
            }
        }
        Ok(())
    }

    /// Item `id` of `owner`'s responses used at or after `since_ms`: the response that
    /// holds it, and its JSON.
    pub async fn response_item(
        &self,
        id: &str,
        owner: &str,
        since_ms: u64,
    ) -> Result<Option<(String, String)>, sqlx::Error> {
        let row = sqlx::query(
            "SELECT i.response_id, i.body FROM response_items i JOIN responses r ON r.id = i.response_id \
             WHERE i.owner = $1 AND i.id = $2 AND r.used_ms >= $3",
        )
        .bind(owner)
        .bind(&*text_column(id))
        .bind(to_db(since_ms))
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose()
    }

    /// The bytes `owner`'s stored responses take: its running sum, one row.
    pub async fn stored_bytes(&self, owner: &str) -> Result<u64, sqlx::Error> {
        let row = sqlx::query("SELECT bytes FROM response_owners WHERE owner = $1")
            .bind(owner)
            .fetch_optional(self.pool())
            .await?;
        row.map_or(Ok(0), |r| Ok(from_db(r.try_get(0)?)))
    }
}

#[cfg(test)]
mod tests;
