//! The store's bounds, ownership, chains and quota, in memory and on SQLite.

use super::chain::{ChainError, MAX_TURNS};
use super::*;
use crate::app::KeyId;
use crate::config::RecordsDb;

fn key(index: u32) -> Caller {
    Caller {
        key: Some(KeyId::from_index(index)),
    }
}

fn limits(max_count: usize, max_bytes: usize, keys: usize) -> Limits {
    Limits {
        max_count,
        max_age: Duration::from_secs(60),
        max_bytes,
        keys,
        max_bytes_per_key: u64::MAX,
    }
}

fn stored(owner: Caller, text: &str) -> Stored {
    Stored {
        owner,
        parent: None,
        system: vec![],
        messages: vec![Message::user(text)],
        response: "{}".into(),
        items: vec![],
    }
}

/// A turn continuing `parent`: the question `text` and the answer `text!`.
fn turn(owner: Caller, parent: Option<&str>, text: &str) -> Stored {
    Stored {
        parent: parent.map(str::to_string),
        system: vec![format!("system of {text}")],
        messages: vec![Message::user(text), Message::assistant(format!("{text}!"))],
        ..stored(owner, "")
    }
}

fn with_item(owner: Caller, item: &str, text: &str) -> Stored {
    Stored {
        items: vec![(
            item.into(),
            Item::Message {
                message: Message::assistant(text),
            },
        )],
        ..stored(owner, "q")
    }
}

fn text(item: Option<(String, Item)>) -> Option<String> {
    match item?.1 {
        Item::Message { message } => Some(message.content),
        _ => None,
    }
}

fn contents(messages: &[Message]) -> Vec<&str> {
    messages.iter().map(|m| m.content.as_str()).collect()
}

async fn sqlite(dir: &tempfile::TempDir) -> Arc<RecordDb> {
    let db = RecordDb::connect(&RecordsDb::Sqlite(dir.path().join("r.db")))
        .await
        .unwrap();
    db.migrate(usize::MAX).await.unwrap();
    Arc::new(db)
}

#[tokio::test]
async fn bounded_by_count_and_bytes_and_owned_by_the_creating_key() {
    let anyone = Caller::default();
    // 100 bytes of text, and 64 for the one message each stored response holds.
    let store = ResponseStore::new(limits(2, 164, 1));
    store.put("a".into(), stored(anyone, "x"), vec![]);
    store.put("b".into(), stored(anyone, "x"), vec![]);
    store.put("c".into(), stored(anyone, "x"), vec![]);
    assert_eq!(store.len(), 2);
    assert!(store.body("a", &anyone).await.unwrap().is_none());
    assert!(store.body("c", &anyone).await.unwrap().is_some());
    // 60 + 60 bytes (and 64 + 64) > 164: the older one goes.
    store.put("d".into(), stored(anyone, &"y".repeat(58)), vec![]);
    store.put("e".into(), stored(anyone, &"y".repeat(58)), vec![]);
    assert!(store.body("d", &anyone).await.unwrap().is_none());
    assert!(store.body("e", &anyone).await.unwrap().is_some());
    // Larger than the whole budget: not kept at all.
    store.put("f".into(), stored(anyone, &"z".repeat(200)), vec![]);
    assert!(store.body("f", &anyone).await.unwrap().is_none());
    let owner = key(0);
    store.put("g".into(), stored(owner, "x"), vec![]);
    assert_eq!(
        store.body("g", &owner).await.unwrap().as_deref(),
        Some("{}")
    );
    assert!(store.body("g", &anyone).await.unwrap().is_none());
}

#[tokio::test]
async fn a_key_past_its_part_loses_its_own_oldest_never_another_keys() {
    // Two keys: half of 1,000 bytes each (a response of n bytes of text takes n + 66).
    let (one, two) = (key(1), key(2));
    let store = ResponseStore::new(limits(100, 1_000, 2));
    store.put("two".into(), stored(two, "t"), vec![]);
    for n in 0..20 {
        store.put(format!("one_{n}"), stored(one, &"x".repeat(100)), vec![]);
    }
    assert!(store.body("two", &two).await.unwrap().is_some());
    assert!(store.body("one_0", &one).await.unwrap().is_none());
    assert!(store.body("one_19", &one).await.unwrap().is_some());
    let part = |owner: Caller| lock(&store.inner).owners.get(&owner).map(|p| p.bytes);
    assert!(part(one).unwrap() <= 500, "{:?}", part(one));
    // By count too: a quarter of 8 for each of eight keys' shares (four at most).
    let store = ResponseStore::new(limits(8, 1_000_000, 8));
    store.put("two".into(), stored(two, "t"), vec![]);
    for n in 0..10 {
        store.put(format!("one_{n}"), stored(one, "x"), vec![]);
    }
    assert_eq!(store.len(), 3);
    assert!(store.body("two", &two).await.unwrap().is_some());
    // Past the whole (more keys than shares): the largest part gives way, not the small.
    let store = ResponseStore::new(limits(100, 4 * 200, 8));
    store.put("small".into(), stored(two, "t"), vec![]);
    for k in 3..7 {
        store.put(format!("k{k}"), stored(key(k), &"x".repeat(130)), vec![]);
    }
    store.put("big".into(), stored(key(7), &"x".repeat(130)), vec![]);
    assert!(store.body("small", &two).await.unwrap().is_some());
    assert!(store.body("big", &key(7)).await.unwrap().is_some());
    assert!(lock(&store.inner).bytes <= 800);
}

#[tokio::test]
async fn items_are_found_by_owner_the_newest_wins_and_they_go_with_their_response() {
    let one = key(1);
    let store = ResponseStore::new(limits(2, 10_000, 1));
    store.put("r1".into(), with_item(one, "fco_1", "first"), vec![]);
    store.put("r2".into(), with_item(one, "fco_1", "second"), vec![]);
    let found = store.item("fco_1", &one).await.unwrap();
    assert_eq!(
        found.as_ref().map(|(holder, _)| holder.as_str()),
        Some("r2")
    );
    assert_eq!(text(found).as_deref(), Some("second"));
    assert!(
        store
            .item("fco_1", &Caller::default())
            .await
            .unwrap()
            .is_none()
    );
    // r1 goes (count): the item is r2's and stays.
    store.put("r3".into(), stored(one, "x"), vec![]);
    assert!(store.item("fco_1", &one).await.unwrap().is_some());
    // Referencing it renews r2: r3 goes next instead.
    store.put("r4".into(), stored(one, "x"), vec!["r2".into()]);
    assert!(store.item("fco_1", &one).await.unwrap().is_some());
    assert!(store.body("r3", &one).await.unwrap().is_none());
    // r2 goes: so does the item.
    store.put("r5".into(), stored(one, "x"), vec![]);
    assert!(store.item("fco_1", &one).await.unwrap().is_none());
}

#[tokio::test]
async fn old_responses_expire() {
    let store = ResponseStore::new(Limits {
        max_age: Duration::ZERO,
        ..limits(10, 1000, 1)
    });
    store.put("a".into(), with_item(Caller::default(), "m", "x"), vec![]);
    assert!(store.body("a", &Caller::default()).await.unwrap().is_none());
    assert!(store.item("m", &Caller::default()).await.unwrap().is_none());
    store.expire();
    assert!(store.is_empty());
    let inner = lock(&store.inner);
    assert!(inner.items.is_empty() && inner.owners.is_empty());
}

#[tokio::test]
async fn a_chain_is_walked_back_within_its_bounds_and_renewed_by_use() {
    let one = key(1);
    let store = ResponseStore::new(limits(4, 1_000_000, 1));
    store.put("r1".into(), turn(one, None, "a"), vec![]);
    store.put("r2".into(), turn(one, Some("r1"), "b"), vec!["r1".into()]);
    store.put(
        "r3".into(),
        turn(one, Some("r2"), "c"),
        vec!["r2".into(), "r1".into()],
    );
    let chain = store.chain("r3", &one, usize::MAX).await.unwrap();
    assert_eq!(chain.ids().collect::<Vec<_>>(), ["r3", "r2", "r1"]);
    // Each turn: its system text (11 bytes) and two messages (1 + 2 bytes, 64 each).
    assert_eq!(chain.text_bytes, 3 * 142);
    let (system, messages) = store.turns(&chain, &one).await.unwrap();
    assert_eq!(system, ["system of a", "system of b", "system of c"]);
    assert_eq!(contents(&messages), ["a", "a!", "b", "b!", "c", "c!"]);
    // Refused as soon as the text passes the bound, whatever is left to walk.
    assert_eq!(
        store.chain("r3", &one, 2 * 142).await.err(),
        Some(ChainError::TooLarge { bytes: 3 * 142 })
    );
    assert_eq!(
        store.chain("r3", &key(2), usize::MAX).await.err(),
        Some(ChainError::NotFound)
    );
    // Used by r3, r1 is newer than an unrelated response stored before r3: that one goes
    // first when the count is passed.
    store.put("other".into(), stored(one, "x"), vec![]);
    store.put(
        "r4".into(),
        turn(one, Some("r3"), "d"),
        vec!["r3".into(), "r2".into(), "r1".into()],
    );
    assert!(store.body("other", &one).await.unwrap().is_none());
    assert!(store.chain("r4", &one, usize::MAX).await.is_ok());
    // A conversation with a turn gone is broken, not shortened.
    store.put("x1".into(), stored(one, "x"), vec![]);
    assert_eq!(
        store.chain("r4", &one, usize::MAX).await.err(),
        Some(ChainError::Broken {
            missing: "r3".into()
        })
    );
}

#[tokio::test]
async fn a_chain_longer_than_the_turn_bound_is_refused() {
    let one = key(1);
    let store = ResponseStore::new(limits(MAX_TURNS + 2, usize::MAX, 1));
    let mut parent: Option<String> = None;
    for n in 0..=MAX_TURNS {
        let id = format!("r{n}");
        store.put(id.clone(), turn(one, parent.as_deref(), "t"), vec![]);
        parent = Some(id);
    }
    let last = parent.unwrap();
    assert_eq!(
        store.chain(&last, &one, usize::MAX).await.err(),
        Some(ChainError::TooLong)
    );
    assert!(store.chain("r9999", &one, usize::MAX).await.is_ok());
}

#[tokio::test]
async fn the_quota_counts_what_a_key_stores_in_memory_and_in_the_database() {
    let (one, two) = (key(1), key(2));
    let memory = ResponseStore::new(Limits {
        max_bytes_per_key: 1_000,
        ..limits(100, 1_000_000, 2)
    });
    memory.put("a".into(), stored(one, &"x".repeat(500)), vec![]);
    assert!(memory.room(&one, 100).await.is_ok());
    let full = memory.room(&one, 500).await.unwrap_err();
    assert_eq!((full.stored, full.limit), (566, 1_000));
    assert!(memory.room(&two, 900).await.is_ok());

    let dir = tempfile::tempdir().unwrap();
    let db = sqlite(&dir).await;
    let quota = Limits {
        max_bytes_per_key: 10_000,
        ..limits(100, 1_000_000, 2)
    };
    let first = ResponseStore::with_db(quota, Some(db.clone()));
    first.put("a".into(), stored(one, &"x".repeat(6_000)), vec![]);
    // Queued or written, it counts at once.
    assert!(first.room(&one, 5_000).await.is_err());
    first.close(Duration::from_secs(10)).await;
    // Another process on the database (its memory empty) counts it too.
    let second = ResponseStore::with_db(quota, Some(db.clone()));
    let full = second.room(&one, 5_000).await.unwrap_err();
    assert!(full.stored > 6_000, "{full:?}");
    assert!(second.room(&one, 1_000).await.is_ok());
    assert!(second.room(&two, 9_000).await.is_ok());
}

#[tokio::test]
async fn with_a_database_a_new_store_finds_what_an_earlier_one_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite(&dir).await;
    let owner = key(0);
    let first = ResponseStore::with_db(limits(10, 10_000, 1), Some(db.clone()));
    let mut kept = with_item(owner, "msg_1", "Hello.");
    kept.system = vec!["Be brief.".into()];
    kept.response = "{\"id\":\"resp_1\"}".into();
    first.put("resp_1".into(), kept, vec![]);
    first.put(
        "resp_2".into(),
        turn(owner, Some("resp_1"), "b"),
        vec!["resp_1".into()],
    );
    first.close(Duration::from_secs(10)).await;
    let second = ResponseStore::with_db(limits(10, 10_000, 1), Some(db.clone()));
    assert_eq!(
        second.body("resp_1", &owner).await.unwrap().as_deref(),
        Some("{\"id\":\"resp_1\"}")
    );
    // The next turn in memory, the ones it continues in the database.
    second.put("resp_3".into(), turn(owner, Some("resp_2"), "c"), vec![]);
    let chain = second.chain("resp_3", &owner, usize::MAX).await.unwrap();
    assert_eq!(
        chain.ids().collect::<Vec<_>>(),
        ["resp_3", "resp_2", "resp_1"]
    );
    let (system, messages) = second.turns(&chain, &owner).await.unwrap();
    assert_eq!(system, ["Be brief.", "system of b", "system of c"]);
    assert_eq!(contents(&messages), ["q", "b", "b!", "c", "c!"]);
    assert_eq!(
        second.chain("resp_2", &owner, 100).await.err(),
        Some(ChainError::TooLarge { bytes: 142 })
    );
    assert_eq!(
        second
            .chain("resp_2", &Caller::default(), usize::MAX)
            .await
            .err(),
        Some(ChainError::NotFound)
    );
    assert_eq!(
        text(second.item("msg_1", &owner).await.unwrap()).as_deref(),
        Some("Hello.")
    );
    assert!(
        second
            .body("resp_1", &Caller::default())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        second
            .item("msg_1", &Caller::default())
            .await
            .unwrap()
            .is_none()
    );
    // A database that cannot be read is an error, not a missing response.
    db.close().await;
    assert!(second.body("resp_9", &owner).await.is_err());
    assert!(second.item("msg_2", &owner).await.is_err());
    assert_eq!(
        second.chain("resp_9", &owner, usize::MAX).await.err(),
        Some(ChainError::Unavailable)
    );
}
