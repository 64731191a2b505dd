//! Writing stored responses: a batch of rows in one transaction, each owner's running sum
//! of stored bytes kept with them, and retention (by age of last use, then by count).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::{Any, Row, Transaction};

use super::{IDS_PER_QUERY, ResponseRow, placeholders, text_column};
use crate::app::store::db::sql::to_db;
use crate::app::store::db::{RecordDb, now_ms, roll_back};

/// Item rows per INSERT statement (4 parameters each).
const ITEMS_PER_INSERT: usize = 200;

impl RecordDb {
    /// Writes `rows` in one transaction (again: the newer row wins, so a retry after a
    /// commit whose answer was lost is harmless).
    pub async fn put_responses(&self, rows: &[Arc<ResponseRow>]) -> Result<(), sqlx::Error> {
        let mut tx = self.begin_write().await?;
        let mut result = Ok(());
        for row in rows {
            result = put_one(&mut tx, row).await;
            if result.is_err() {
                break;
            }
        }
        match result {
            Ok(()) => tx.commit().await,
            Err(e) => {
                roll_back(tx).await;
                Err(e)
            }
        }
    }

    /// Deletes responses not used for `max_age`, then the least recently used beyond the
    /// newest `max_count` (the session records' retention), with their items. A
    /// conversation's earlier turns are used whenever a later one is stored, so they go
    /// after (or with) the turns that continue them, never before.
    pub async fn retain_responses(
        &self,
        max_age: Duration,
        max_count: usize,
    ) -> Result<(), sqlx::Error> {
        let cutoff =
            to_db(now_ms().saturating_sub(u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX)));
        let oldest_kept = "(SELECT used_ms FROM responses ORDER BY used_ms DESC LIMIT 1 OFFSET $1)";
        let mut tx = self.begin_write().await?;
        // What each owner loses, from the rows this transaction deleted (RETURNING): a
        // replica that deletes the same rows at once deletes none of them.
        let mut freed: HashMap<String, i64> = HashMap::new();
        let by_age = "WHERE used_ms < $1";
        let by_count = format!("WHERE used_ms <= {oldest_kept}");
        for (filter, bound) in [
            (by_age, cutoff),
            (by_count.as_str(), to_db(max_count as u64)),
        ] {
            sqlx::query(&format!(
                "DELETE FROM response_items WHERE response_id IN (SELECT id FROM responses {filter})"
            ))
            .bind(bound)
            .execute(&mut *tx)
            .await?;
            let deleted = sqlx::query(&format!(
                "DELETE FROM responses {filter} RETURNING owner, bytes"
            ))
            .bind(bound)
            .fetch_all(&mut *tx)
            .await?;
            for row in deleted {
                let bytes: i64 = row.try_get(1)?;
                *freed.entry(row.try_get(0)?).or_default() += bytes;
            }
        }
        for (owner, bytes) in freed {
            add_owner_bytes(&mut tx, &owner, -bytes).await?;
        }
        sqlx::query("DELETE FROM response_owners WHERE bytes <= 0")
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }
}

/// Adds `delta` to `owner`'s running sum of stored bytes.
async fn add_owner_bytes(
    tx: &mut Transaction<'static, Any>,
    owner: &str,
    delta: i64,
) -> Result<(), sqlx::Error> {
    if delta == 0 {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO response_owners (owner, bytes) VALUES ($1, $2) \
         ON CONFLICT (owner) DO UPDATE SET bytes = response_owners.bytes + excluded.bytes",
    )
    .bind(owner)
    .bind(delta)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn put_one(tx: &mut Transaction<'static, Any>, row: &ResponseRow) -> Result<(), sqlx::Error> {
    // The row it replaces (a retry after a commit whose answer was lost) no longer counts.
    let replaced = sqlx::query("SELECT owner, bytes FROM responses WHERE id = $1")
        .bind(&*text_column(&row.id))
        .fetch_optional(&mut **tx)
        .await?;
    let bytes = to_db(row.bytes() as u64);
    match replaced {
        Some(old) => {
            let (owner, old_bytes): (String, i64) = (old.try_get(0)?, old.try_get(1)?);
            if owner == row.owner {
                add_owner_bytes(tx, &row.owner, bytes - old_bytes).await?;
            } else {
                add_owner_bytes(tx, &owner, -old_bytes).await?;
                add_owner_bytes(tx, &row.owner, bytes).await?;
            }
        }
        None => add_owner_bytes(tx, &row.owner, bytes).await?,
    }
    sqlx::query(
        "INSERT INTO responses (id, owner, created_ms, used_ms, parent, conversation, text_bytes, bytes, body) \
         VALUES ($1, $2, $3, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, parent = excluded.parent, \
         conversation = excluded.conversation, text_bytes = excluded.text_bytes, \
         bytes = excluded.bytes, body = excluded.body",
    )
    .bind(&*text_column(&row.id))
    .bind(&row.owner)
    .bind(to_db(row.created_ms))
    .bind(row.parent.as_deref().map(|p| text_column(p).into_owned()))
    .bind(&row.conversation)
    .bind(to_db(row.text_bytes))
    .bind(bytes)
    .bind(&row.body)
    .execute(&mut **tx)
    .await?;
    // Only rows whose time moves: an update rewrites a row, and a conversation's earlier
    // turns are touched by every later one.
    for chunk in row.touch.chunks(IDS_PER_QUERY) {
        let sql = format!(
            "UPDATE responses SET used_ms = $1 WHERE owner = $2 AND used_ms < $1 AND id IN ({})",
            placeholders(3, chunk.len())
        );
        let mut query = sqlx::query(&sql)
            .bind(to_db(row.created_ms))
            .bind(&row.owner);
        for id in chunk {
            query = query.bind(text_column(id).into_owned());
        }
        query.execute(&mut **tx).await?;
    }
    // One statement may not update a row twice (PostgreSQL refuses it): the last of a
    // repeated id wins, as it would over two statements.
    let mut seen = std::collections::HashSet::with_capacity(row.items.len());
    let mut items: Vec<(std::borrow::Cow<'_, str>, &str)> = row
        .items
        .iter()
        .rev()
        .map(|(id, body)| (text_column(id), body.as_str()))
        .filter(|(id, _)| seen.insert(id.clone()))
        .collect();
    items.reverse();
    for chunk in items.chunks(ITEMS_PER_INSERT) {
        let mut sql =
            String::from("INSERT INTO response_items (owner, id, response_id, body) VALUES ");
        for i in 0..chunk.len() {
            let n = i * 4;
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("(${}, ${}, ${}, ${})", n + 1, n + 2, n + 3, n + 4));
        }
        sql.push_str(
            " ON CONFLICT (owner, id) DO UPDATE SET response_id = excluded.response_id, body = excluded.body",
        );
        let response_id = text_column(&row.id);
        let mut query = sqlx::query(&sql);
        for (id, body) in chunk {
            query = query
                .bind(&row.owner)
                .bind(&**id)
                .bind(&*response_id)
                .bind(*body);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}
