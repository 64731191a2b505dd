//! Stored responses on a real SQLite file: rows, chains, turns, items, each owner's
//! running sum and retention.

use std::sync::Arc;
use std::time::Duration;

use sqlx::Row;

use super::*;
use crate::app::store::db::now_ms;
use crate::config::RecordsDb;

pub(super) fn row(id: &str, owner: &str, created_ms: u64, items: &[(&str, &str)]) -> ResponseRow {
    ResponseRow {
        id: id.into(),
        owner: owner.into(),
        created_ms,
        parent: None,
        conversation: "{}".into(),
        text_bytes: 2,
        body: format!("{{\"id\":\"{id}\"}}"),
        items: items
            .iter()
            .map(|(i, b)| (i.to_string(), b.to_string()))
            .collect(),
        touch: Vec::new(),
    }
}

/// A turn continuing `parent`, holding `text_bytes` of text, created at `at`.
fn turn(id: &str, parent: Option<&str>, at: u64, text_bytes: u64) -> Arc<ResponseRow> {
    let mut row = row(id, "k1", at, &[]);
    row.parent = parent.map(str::to_string);
    row.conversation = format!("{{\"turn\":\"{id}\"}}");
    row.text_bytes = text_bytes;
    Arc::new(row)
}

pub(super) async fn sqlite(dir: &tempfile::TempDir) -> RecordDb {
    RecordDb::open(&RecordsDb::Sqlite(dir.path().join("r.db")))
        .await
        .unwrap()
}

#[tokio::test]
async fn rows_are_read_by_owner_and_age_and_items_by_the_newest_response() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite(&dir).await;
    let now = now_ms();
    let rows = [
        Arc::new(row(
            "resp_a",
            "k1",
            now,
            &[("msg_a", "1"), ("fco_1", "2"), ("fco_1", "3")],
        )),
        Arc::new(row(
            "resp_b",
            "k1",
            now + 1,
            &[("fco_1", "4"), ("id\0nul", "5")],
        )),
    ];
    db.put_responses(&rows).await.unwrap();
    // Again (a retry after a lost commit answer): no error, nothing twice.
    db.put_responses(&rows).await.unwrap();
    let body = db.response_body("resp_a", "k1", 0).await.unwrap().unwrap();
    assert_eq!(body, "{\"id\":\"resp_a\"}");
    assert!(db.response_body("resp_a", "k2", 0).await.unwrap().is_none());
    assert!(
        db.response_body("resp_a", "k1", now + 10)
            .await
            .unwrap()
            .is_none()
    );
    let item = |id: &'static str, owner: &'static str| {
        let db = &db;
        async move { db.response_item(id, owner, 0).await.unwrap() }
    };
    assert_eq!(
        item("msg_a", "k1").await,
        Some(("resp_a".into(), "1".into()))
    );
    assert_eq!(
        item("fco_1", "k1").await,
        Some(("resp_b".into(), "4".into()))
    );
    assert_eq!(
        item("id\0nul", "k1").await,
        Some(("resp_b".into(), "5".into()))
    );
    assert!(item("msg_a", "k2").await.is_none());
    // Per owner, summed: each row's text and its items'.
    let bytes: u64 = rows.iter().map(|r| r.bytes() as u64).sum();
    assert_eq!(db.stored_bytes("k1").await.unwrap(), bytes);
    assert_eq!(db.stored_bytes("k2").await.unwrap(), 0);
    // Keep the newest one: resp_a goes with its own items; fco_1 is resp_b's now.
    db.retain_responses(Duration::from_secs(3600), 1)
        .await
        .unwrap();
    assert!(db.response_body("resp_a", "k1", 0).await.unwrap().is_none());
    assert!(item("msg_a", "k1").await.is_none());
    assert_eq!(
        item("fco_1", "k1").await,
        Some(("resp_b".into(), "4".into()))
    );
    db.retain_responses(Duration::ZERO, 10).await.unwrap();
    assert!(db.response_body("resp_b", "k1", 0).await.unwrap().is_none());
    let left: i64 = sqlx::query("SELECT COUNT(*) FROM response_items")
        .fetch_one(db.pool())
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
    assert_eq!(db.stored_bytes("k1").await.unwrap(), 0);
}

#[tokio::test]
async fn a_chain_is_read_back_by_parents_within_its_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite(&dir).await;
    let now = now_ms();
    db.put_responses(&[
        turn("r1", None, now, 100),
        turn("r2", Some("r1"), now + 1, 10),
        turn("r3", Some("r2"), now + 2, 1),
        // Another key's response is never part of k1's chain.
        Arc::new(ResponseRow {
            parent: Some("r3".into()),
            ..row("x1", "k2", now + 3, &[])
        }),
    ])
    .await
    .unwrap();
    let links = |id: &'static str, max_bytes: u64, max_links: usize| {
        let db = &db;
        async move {
            db.response_chain(id, "k1", 0, max_bytes, max_links)
                .await
                .unwrap()
                .into_iter()
                .map(|l| (l.id, l.parent, l.text_bytes))
                .collect::<Vec<_>>()
        }
    };
    let some = |s: &str| Some(s.to_string());
    assert_eq!(
        links("r3", 1_000, 10).await,
        [
            ("r3".into(), some("r2"), 1),
            ("r2".into(), some("r1"), 10),
            ("r1".into(), None, 100)
        ]
    );
    // Stops after the link that passes the bytes (r1's text is never needed), or at
    // the count: the last link's parent says where.
    assert_eq!(links("r3", 5, 10).await.len(), 2);
    assert_eq!(links("r3", 1_000, 2).await[1].1, some("r1"));
    assert!(links("x1", 1_000, 10).await.is_empty());
    assert!(
        db.response_chain("r3", "k1", now + 10, 1_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let mut turns = Vec::new();
    db.response_turns(
        "k1",
        &["r1".into(), "r3".into(), "x1".into()],
        |id, text| {
            turns.push((id, text));
            Ok(())
        },
    )
    .await
    .unwrap();
    turns.sort();
    assert_eq!(
        turns,
        [
            ("r1".into(), "{\"turn\":\"r1\"}".into()),
            ("r3".into(), "{\"turn\":\"r3\"}".into())
        ]
    );
}

#[tokio::test]
async fn a_later_turn_renews_the_ones_it_used_so_retention_keeps_the_chain_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite(&dir).await;
    let hour_ago = now_ms() - 3_600_000;
    db.put_responses(&[
        turn("r1", None, hour_ago, 1),
        turn("r2", Some("r1"), hour_ago + 1, 1),
        turn("other", None, hour_ago + 2, 1),
    ])
    .await
    .unwrap();
    let mut r3 = (*turn("r3", Some("r2"), now_ms(), 1)).clone();
    r3.touch = vec!["r2".into(), "r1".into(), "not-there".into()];
    db.put_responses(&[Arc::new(r3)]).await.unwrap();
    // Older than 30 minutes goes: the unrelated response, not the chain's first turns.
    db.retain_responses(Duration::from_secs(1_800), 100)
        .await
        .unwrap();
    assert!(db.response_body("other", "k1", 0).await.unwrap().is_none());
    assert_eq!(
        db.response_chain("r3", "k1", 0, 1_000, 10)
            .await
            .unwrap()
            .len(),
        3
    );
    // By count: the least recently used first, and a chain goes as a whole.
    let new = turn("new", None, now_ms() + 1_000, 1);
    db.put_responses(std::slice::from_ref(&new)).await.unwrap();
    db.retain_responses(Duration::from_secs(1_800), 1)
        .await
        .unwrap();
    assert!(db.response_body("new", "k1", 0).await.unwrap().is_some());
    // The key's running sum lost what was deleted, and only that.
    assert_eq!(db.stored_bytes("k1").await.unwrap(), new.bytes() as u64);
    for id in ["r1", "r2", "r3"] {
        assert!(
            db.response_body(id, "k1", 0).await.unwrap().is_none(),
            "{id}"
        );
    }
}

#[tokio::test]
async fn rows_stored_before_chains_read_as_a_first_turn() {
    let dir = tempfile::tempdir().unwrap();
    let db = RecordDb::connect(&RecordsDb::Sqlite(dir.path().join("r.db")))
        .await
        .unwrap();
    db.migrate(5).await.unwrap();
    let now = to_db(now_ms());
    sqlx::query(
        "INSERT INTO responses (id, owner, created_ms, conversation, body) \
             VALUES ('old', 'k1', $1, '{\"system\":[],\"messages\":[]}', '{\"id\":\"old\"}')",
    )
    .bind(now)
    .execute(db.pool())
    .await
    .unwrap();
    sqlx::query(
            "INSERT INTO response_items (owner, id, response_id, body) VALUES ('k1', 'msg', 'old', 'xyz')",
        )
        .execute(db.pool())
        .await
        .unwrap();
    db.migrate(usize::MAX).await.unwrap();
    let conversation = "{\"system\":[],\"messages\":[]}";
    assert_eq!(
        db.response_chain("old", "k1", 0, 1_000, 10).await.unwrap(),
        [ChainLink {
            id: "old".into(),
            parent: None,
            text_bytes: conversation.len() as u64
        }]
    );
    assert_eq!(
        db.stored_bytes("k1").await.unwrap(),
        (conversation.len() + "{\"id\":\"old\"}".len() + "msg".len() + "xyz".len()) as u64
    );
    assert!(db.response_body("old", "k1", 0).await.unwrap().is_some());
}
