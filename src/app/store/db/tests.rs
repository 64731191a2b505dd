//! The database side on real SQLite files (PostgreSQL: tests/it/records_db_pg.rs).

use std::sync::Arc;
use std::time::Duration;

use massgen_core::coordination::{AgentRef, EventKind, SessionEvent};
use sqlx::Row;

use super::upkeep::Upkeep;
use super::*;
use crate::app::Caller;
use crate::app::store::sessions::failed;
use crate::app::store::sessions::{RecordStore, SessionInfo, record_json};

fn sqlite(dir: &tempfile::TempDir) -> RecordsDb {
    RecordsDb::Sqlite(dir.path().join("sub/records.db"))
}

fn event(id: &str, seq: u64, kind: EventKind) -> SessionEvent {
    SessionEvent {
        seq,
        at_ms: 1_000 + seq,
        session_id: id.into(),
        kind,
    }
}

fn agent() -> AgentRef {
    AgentRef {
        agent_id: "a".into(),
        label: "agent1".into(),
    }
}

fn upkeep() -> Upkeep {
    Upkeep {
        heartbeat: Duration::from_secs(3600),
        interrupted_after: Duration::from_secs(60),
        max_age: Duration::from_secs(3600),
        max_sessions: 100,
        retain: true,
    }
}

async fn tables(db: &RecordDb) -> Vec<String> {
    let rows = sqlx::query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .fetch_all(db.pool())
        .await
        .unwrap();
    rows.iter().map(|r| r.get::<String, _>(0)).collect()
}

/// Waits (bounded) until the writer committed everything and let the records go.
async fn saved(store: &RecordStore) {
    for _ in 0..200 {
        if store.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("records still in memory after 5 s: {}", store.len());
}

#[tokio::test]
async fn migrates_an_empty_file_once_with_private_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let db = RecordDb::open(&sqlite(&dir)).await.unwrap();
    assert_eq!(
        tables(&db).await,
        [
            "_sqlx_migrations",
            "eval_items",
            "eval_runs",
            "events",
            "replicas",
            "reservations",
            "response_items",
            "response_owners",
            "responses",
            "sessions",
            "spend"
        ]
    );
    // Again: nothing to do, no error.
    db.migrate(migrate::count()).await.unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path().join("sub")), 0o700);
        assert_eq!(mode(&dir.path().join("sub/records.db")), 0o600);
    }
}

#[tokio::test]
async fn the_first_n_migrations_build_an_older_schema_that_migrates_forward() {
    let dir = tempfile::tempdir().unwrap();
    let db = RecordDb::connect(&sqlite(&dir)).await.unwrap();
    db.migrate(0).await.unwrap();
    assert_eq!(tables(&db).await, ["_sqlx_migrations"]);
    db.migrate(1).await.unwrap();
    assert!(tables(&db).await.contains(&"sessions".to_string()));
    db.migrate(migrate::count()).await.unwrap();
}

#[tokio::test]
async fn a_finished_record_is_written_leaves_memory_and_reads_back_equal() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(RecordDb::open(&sqlite(&dir)).await.unwrap());
    let store = RecordStore::with_db(Arc::clone(&db), upkeep(), 10, None);
    let info = SessionInfo {
        model: "massgen".into(),
        door: "chat_completions".into(),
        question: "why?".into(),
        // Recent: the upkeep's retention (an hour here) deletes older finished ones.
        created_ms: now_ms(),
        ..SessionInfo::default()
    };
    let caller = Caller::default();
    let r = store.insert_with("s1".into(), caller, info);
    r.push(event(
        "s1",
        0,
        EventKind::SessionStarted {
            agents: vec![agent()],
        },
    ));
    r.push(event(
        "s1",
        1,
        EventKind::FinalDelta {
            text: "because".into(),
        },
    ));
    let live_json = record_json(&r);
    assert_eq!(store.len(), 1, "a running record stays");
    r.push(event("s1", 2, failed()));
    let live_json = {
        let mut j = live_json;
        j["status"] = "failed".into();
        j
    };
    let events = r.events();
    drop(r);
    saved(&store).await;

    let back = store.find("s1", &caller).await.unwrap().unwrap();
    assert_eq!(back.events(), events, "events round-trip");
    let json = record_json(&back);
    assert_eq!(json["question"], live_json["question"]);
    assert_eq!(json["status"], "failed");
    assert_eq!(json["door"], "chat_completions");
    let list = store.list_all(&caller, 10, None).await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].summary().status, "failed");
    assert_eq!(list[0].summary().agents, vec![agent()]);
    // Another key's caller sees nothing.
    let other = Caller {
        key: Some(crate::app::KeyId::from_index(3)),
    };
    assert!(store.find("s1", &other).await.unwrap().is_none());
    assert!(store.list_all(&other, 10, None).await.unwrap().is_empty());
    // By door: the record's own, and another (`GET /v1/sessions?door=…`).
    let doors: &[&str] = &["eval", "chat_completions"];
    assert_eq!(
        store
            .list_all(&caller, 10, Some(doors))
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .list_all(&caller, 10, Some(&["eval"]))
            .await
            .unwrap()
            .is_empty()
    );

    // A cursor over the database replays the same events, then ends.
    let mut following = store.follow("s1", &caller).await.unwrap().unwrap();
    assert!(following.finished);
    let page = following.cursor.next_page(2).await;
    let rest = following.cursor.next_page(10).await;
    let replayed: Vec<_> = page.into_iter().chain(rest).collect();
    assert_eq!(replayed, events);
    assert!(following.cursor.next_page(10).await.is_empty());
}

/// Token deltas go to the database one row per call and write (issue 37): the text comes
/// back whole and in order, seqs keep the session's numbering with gaps, and a cursor that
/// pages through the rows misses nothing.
#[tokio::test]
async fn a_calls_token_deltas_are_stored_merged_with_the_same_text_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(RecordDb::open(&sqlite(&dir)).await.unwrap());
    let store = RecordStore::with_db(Arc::clone(&db), upkeep(), 10, None);
    let info = SessionInfo {
        created_ms: now_ms(),
        ..SessionInfo::default()
    };
    let caller = Caller::default();
    let r = store.insert_with("m".into(), caller, info);
    let other = AgentRef {
        agent_id: "b".into(),
        label: "agent2".into(),
    };
    let mut seq = 0;
    let mut push = |kind: EventKind| {
        r.push(event("m", seq, kind));
        seq += 1;
    };
    push(EventKind::SessionStarted {
        agents: vec![agent(), other.clone()],
    });
    for i in 0..300 {
        let (who, word) = if i % 3 == 2 {
            (other.clone(), format!("b{i} "))
        } else {
            (agent(), format!("a{i} "))
        };
        push(EventKind::AgentDelta {
            agent: who,
            text: word,
        });
    }
    for i in 0..200 {
        push(EventKind::FinalDelta {
            text: format!("f{i} "),
        });
    }
    push(failed());
    let live = r.events();
    assert_eq!(live.len(), 502, "the live log keeps every delta");
    drop(r);
    saved(&store).await;

    let stored: i64 = sqlx::query("SELECT COUNT(*) FROM events WHERE session_id = 'm'")
        .fetch_one(db.pool())
        .await
        .unwrap()
        .get(0);
    assert!(
        stored < 20,
        "502 events stored as {stored} rows: deltas are not merged"
    );
    let texts = |events: &[Arc<SessionEvent>]| {
        let (mut a, mut b, mut f) = (String::new(), String::new(), String::new());
        for e in events {
            match &e.kind {
                EventKind::AgentDelta { agent, text } if agent.agent_id == "a" => a += text,
                EventKind::AgentDelta { text, .. } => b += text,
                EventKind::FinalDelta { text } => f += text,
                _ => {}
            }
        }
        (a, b, f)
    };
    let back = store.find("m", &caller).await.unwrap().unwrap().events();
    assert_eq!(back.len() as i64, stored);
    assert_eq!(texts(&back), texts(&live));
    assert!(back.windows(2).all(|w| w[0].seq < w[1].seq), "in seq order");
    assert_eq!(back.first().unwrap().seq, 0);
    assert_eq!(back.last().unwrap().seq, 501, "the end keeps its seq");
    // The first final delta's seq and time (the agents' runs end before it).
    let first_final = back
        .iter()
        .find(|e| matches!(e.kind, EventKind::FinalDelta { .. }))
        .unwrap();
    assert_eq!((first_final.seq, first_final.at_ms), (301, 1_301));

    // Paging two rows at a time reads every row once.
    let mut following = store.follow("m", &caller).await.unwrap().unwrap();
    let mut replayed = Vec::new();
    for _ in 0..100 {
        let page = following.cursor.next_page(2).await;
        if page.is_empty() {
            break;
        }
        replayed.extend(page);
    }
    assert_eq!(replayed, back);
}

#[tokio::test]
async fn running_sessions_of_a_silent_replica_are_interrupted_at_their_last_event() {
    let dir = tempfile::tempdir().unwrap();
    let db_a = Arc::new(RecordDb::open(&sqlite(&dir)).await.unwrap());
    let store = RecordStore::with_db(Arc::clone(&db_a), upkeep(), 10, None);
    let r = store.insert("s2".into(), Caller::default());
    r.push(event(
        "s2",
        0,
        EventKind::SessionStarted {
            agents: vec![agent()],
        },
    ));
    r.push(event("s2", 1, EventKind::FinalDelta { text: "x".into() }));
    // Written, still running.
    for _ in 0..200 {
        if db_a.events("s2", 0, 10).await.unwrap().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    db_a.heartbeat().await.unwrap();
    drop(store);
    // Another process on the same file: A's heartbeat is fresh, nothing happens...
    let db_b = RecordDb::connect(&sqlite(&dir)).await.unwrap();
    assert_eq!(
        db_b.mark_interrupted(Duration::from_secs(60))
            .await
            .unwrap(),
        0
    );
    assert_eq!(db_b.status("s2").await.unwrap(), Some("running"));
    // ...until it is older than the limit.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        db_b.mark_interrupted(Duration::from_millis(10))
            .await
            .unwrap(),
        1
    );
    assert_eq!(db_b.status("s2").await.unwrap(), Some("interrupted"));
    let row = db_b.session("s2", "").await.unwrap().unwrap();
    assert_eq!(row.summary.ended_ms, Some(1_001), "the last event's time");
    // Idempotent.
    assert_eq!(
        db_b.mark_interrupted(Duration::from_millis(10))
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn retention_deletes_old_and_surplus_finished_sessions_never_running_ones() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(RecordDb::open(&sqlite(&dir)).await.unwrap());
    let store = RecordStore::with_db(Arc::clone(&db), upkeep(), 10, None);
    let now = now_ms();
    for (i, (id, finished)) in [("old", true), ("a", true), ("b", true), ("running", false)]
        .iter()
        .enumerate()
    {
        let created_ms = if *id == "old" { 1 } else { now + i as u64 };
        let info = SessionInfo {
            created_ms,
            ..SessionInfo::default()
        };
        let r = store.insert_with((*id).into(), Caller::default(), info);
        r.push(event(id, 0, EventKind::FinalDelta { text: "x".into() }));
        if *finished {
            r.push(event(id, 1, failed()));
        }
    }
    for _ in 0..200 {
        if store.len() == 1 && db.status("running").await.unwrap().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    db.retain(Duration::from_secs(3600), 2).await.unwrap();
    let ids: Vec<_> = db
        .list("", None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id.to_string())
        .collect();
    assert_eq!(ids, ["running", "b"], "old by age, a beyond the newest 2");
    assert!(db.events("a", 0, 10).await.unwrap().is_empty());
    assert!(db.events("old", 0, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn an_unusable_location_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let err = RecordDb::open(&RecordsDb::Sqlite(file.join("records.db")))
        .await
        .err()
        .unwrap();
    assert!(err.contains("records.db"), "{err}");
}

#[test]
fn postgres_is_described_without_its_password() {
    let db = RecordsDb::parse("postgres://massgen:hunter2@db.internal:6543/records").unwrap();
    let described = db.describe();
    assert_eq!(described, "postgres://db.internal:6543/records");
    assert!(!format!("{db:?}").contains("hunter2"));
    assert!(RecordsDb::parse("mysql://x").is_err());
    assert_eq!(RecordsDb::parse("memory").unwrap(), RecordsDb::Memory);
    assert_eq!(
        RecordsDb::parse("sqlite:///var/lib/massgen/records.db").unwrap(),
        RecordsDb::Sqlite("/var/lib/massgen/records.db".into())
    );
    assert_eq!(
        RecordsDb::default_sqlite(None, Some("/home/u")).unwrap(),
        RecordsDb::Sqlite("/home/u/.local/share/massgen/records.db".into())
    );
    assert_eq!(
        RecordsDb::default_sqlite(Some("/x"), Some("/home/u")).unwrap(),
        RecordsDb::Sqlite("/x/massgen/records.db".into())
    );
}

/// SQLite ends a transaction itself on some errors (a full disk); sqlx then still counts
/// it, its rollback fails, and the connection would open savepoints in a transaction that
/// never ends: writes "committed" there never reach the file. The pool closes such a
/// connection instead of reusing it.
#[tokio::test]
async fn a_connection_left_in_a_transaction_is_closed_not_reused() {
    let dir = tempfile::tempdir().unwrap();
    let db = RecordDb::open(&sqlite(&dir)).await.unwrap();
    let insert = |n: i64| {
        sqlx::query("INSERT INTO replicas (id, started_ms, heartbeat_ms) VALUES ($1, 1, 1)")
            .bind(format!("r{n}"))
    };
    let mut tx = db.pool().begin().await.unwrap();
    sqlx::query("ROLLBACK").execute(&mut *tx).await.unwrap();
    assert!(tx.rollback().await.is_err(), "sqlx still counts it");
    tokio::time::sleep(Duration::from_millis(50)).await;
    for n in 0..4 {
        // A failed transaction, rolled back, then a committed one.
        let mut tx = db.pool().begin().await.unwrap();
        assert!(
            sqlx::query("INSERT INTO nowhere VALUES (1)")
                .execute(&mut *tx)
                .await
                .is_err()
        );
        tx.rollback().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut tx = db.pool().begin().await.unwrap();
        insert(n).execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Another connection (another process's view) sees every commit.
    let outside = RecordDb::connect(&sqlite(&dir)).await.unwrap();
    let count = tokio::time::timeout(
        Duration::from_secs(3),
        sqlx::query("SELECT COUNT(*) FROM replicas").fetch_one(outside.pool()),
    )
    .await
    .expect("not locked")
    .unwrap();
    assert_eq!(count.get::<i64, _>(0), 4);
}

/// One process per file: sessions an earlier process left `running` are `interrupted` as
/// soon as the next one opens the file, whatever their replica's heartbeat says.
#[tokio::test]
async fn opening_the_file_interrupts_what_an_earlier_process_left_running() {
    let dir = tempfile::tempdir().unwrap();
    let earlier = Arc::new(RecordDb::connect(&sqlite(&dir)).await.unwrap());
    earlier.migrate(migrate::count()).await.unwrap();
    let store = RecordStore::with_db(Arc::clone(&earlier), upkeep(), 10, None);
    let r = store.insert("s9".into(), Caller::default());
    r.push(event(
        "s9",
        0,
        EventKind::SessionStarted {
            agents: vec![agent()],
        },
    ));
    for _ in 0..200 {
        if earlier.events("s9", 0, 10).await.unwrap().len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    earlier.heartbeat().await.unwrap();
    drop(store);
    let db = RecordDb::open(&sqlite(&dir)).await.unwrap();
    assert!(db.owns_file());
    assert_eq!(db.status("s9").await.unwrap(), Some("interrupted"));
    // The next process on the file is refused while this one holds it.
    let err = RecordDb::open(&sqlite(&dir)).await.err().unwrap();
    assert!(err.contains("in use by another massgen process"), "{err}");
}

/// A door's newest sessions are read along `sessions_by_owner_door`, already in order:
/// SQLite stops at the limit instead of reading (and sorting) every row of the owner's
/// other doors.
#[tokio::test]
async fn sessions_of_one_door_are_read_along_their_index() {
    let dir = tempfile::tempdir().unwrap();
    let db = RecordDb::open(&sqlite(&dir)).await.unwrap();
    let plan: Vec<String> = sqlx::query(
        "EXPLAIN QUERY PLAN SELECT id FROM sessions WHERE owner = $1 AND door = $2 \
         ORDER BY created_ms DESC LIMIT $3",
    )
    .bind("")
    .bind("eval")
    .bind(10_i64)
    .fetch_all(db.pool())
    .await
    .unwrap()
    .iter()
    .map(|r| r.get::<String, _>("detail"))
    .collect();
    assert!(
        plan.iter().any(|d| d.contains("sessions_by_owner_door")),
        "{plan:?}"
    );
    assert!(!plan.iter().any(|d| d.contains("TEMP B-TREE")), "{plan:?}");
}
