//! Stored Responses API responses in the records database (issue 24), on the real binary:
//! after a restart on the same SQLite file, and on another server sharing PostgreSQL,
//! `GET /v1/responses/{id}`, `previous_response_id`, `item_reference` and the
//! `encrypted_content` of reasoning items all work, for the key that stored them only.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::postgres::PgServer;
use crate::support::serving::serve_on_db;
use crate::support::{FAST, Proc, bin, client, mock_upstream, panel_yaml, post, write};

/// Shared by the servers of a test, so reasoning sealed by one verifies on the other.
const SECRET: &str = "responses-store-test-secret";
const KEYS: &str = "store-key-one,store-key-two";
const ONE: &str = "store-key-one";
const TWO: &str = "store-key-two";

async fn create(url: &str, key: Option<&str>, body: Value) -> (u16, Value) {
    let r = post(url, "/v1/responses", key, &body).await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn fetch(url: &str, key: Option<&str>, id: &str) -> (u16, Value) {
    let mut request = client().get(format!("{url}/v1/responses/{id}"));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Polls (every 50 ms, at most 10 s) until `id` reads 200 on `url`.
async fn fetch_when_there(url: &str, key: Option<&str>, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = fetch(url, key, id).await;
        if status == 200 {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{url}: {id} still {status}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn item<'a>(object: &'a Value, kind: &str) -> &'a Value {
    object["output"]
        .as_array()
        .unwrap_or_else(|| panic!("no output: {object}"))
        .iter()
        .find(|i| i["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} item: {object}"))
}

/// A second turn that names every piece of `first`: `previous_response_id` when `chained`,
/// otherwise the question again and the output by reference, its reasoning sent back
/// sealed as well.
fn next_turn(first: &Value, chained: bool) -> Value {
    let rs = item(first, "reasoning");
    if chained {
        return json!({"previous_response_id": first["id"], "input": "And at sunset?"});
    }
    json!({"input": [
        {"role": "user", "content": "Why is the sky blue?"},
        {"type": "item_reference", "id": rs["id"]},
        {"type": "reasoning", "summary": [], "encrypted_content": rs["encrypted_content"]},
        {"type": "item_reference", "id": item(first, "message")["id"]},
        {"role": "user", "content": "And at sunset?"}
    ]})
}

fn first_turn() -> Value {
    json!({"input": "Why is the sky blue?", "include": ["reasoning.encrypted_content"]})
}

fn serve(config: &std::path::Path, db: &str, keys: Option<&str>) -> Proc {
    let mut args = vec![
        "--config".to_string(),
        config.display().to_string(),
        "--reasoning-secret".to_string(),
        SECRET.to_string(),
    ];
    if let Some(keys) = keys {
        // Through the flag's file: the key list is the only difference between servers.
        let file = config.with_file_name("keys.txt");
        std::fs::write(&file, keys.replace(',', "\n")).unwrap();
        args.extend(["--api-keys-file".to_string(), file.display().to_string()]);
    }
    serve_on_db(bin(), &args, db)
}

#[tokio::test]
async fn stored_responses_survive_a_restart_on_sqlite() {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "team.yaml", &panel_yaml(&mock.url, &FAST, ""));
    let db = format!("sqlite://{}", dir.path().join("records.db").display());
    let mut server = serve(&config, &db, None);
    let (status, first) = create(&server.url, None, first_turn()).await;
    assert_eq!(status, 200, "{first}");
    let id = first["id"].as_str().unwrap().to_string();
    // Found the moment it is stored (before the database has it, maybe).
    assert_eq!(fetch(&server.url, None, &id).await, (200, first.clone()));
    let (status, _) = create(&server.url, None, json!({"input": "x", "store": false})).await;
    assert_eq!(status, 200);
    assert!(server.terminate(Duration::from_secs(20)).is_some());

    let server = serve(&config, &db, None);
    assert_eq!(fetch(&server.url, None, &id).await, (200, first.clone()));
    for chained in [true, false] {
        let (status, second) = create(&server.url, None, next_turn(&first, chained)).await;
        assert_eq!(status, 200, "chained {chained}: {second}");
        if chained {
            assert_eq!(second["previous_response_id"], id.as_str());
        }
        let (status, _) = fetch(&server.url, None, second["id"].as_str().unwrap()).await;
        assert_eq!(status, 200);
    }
    let (status, body) = fetch(&server.url, None, "resp_0000").await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn servers_on_one_postgres_share_stored_responses_per_key() {
    let Some(pg) = PgServer::start() else {
        return;
    };
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "team.yaml", &panel_yaml(&mock.url, &FAST, ""));
    let (a, b) = (
        serve(&config, &pg.url(), Some(KEYS)),
        serve(&config, &pg.url(), Some(KEYS)),
    );
    let (status, first) = create(&a.url, Some(ONE), first_turn()).await;
    assert_eq!(status, 200, "{first}");
    let id = first["id"].as_str().unwrap();
    assert_eq!(fetch_when_there(&b.url, Some(ONE), id).await, first);
    assert_eq!(fetch(&b.url, Some(TWO), id).await.0, 404);
    for chained in [true, false] {
        let (status, second) = create(&b.url, Some(ONE), next_turn(&first, chained)).await;
        assert_eq!(status, 200, "chained {chained}: {second}");
        // And back on the first server.
        fetch_when_there(&a.url, Some(ONE), second["id"].as_str().unwrap()).await;
        let (status, refused) = create(&b.url, Some(TWO), next_turn(&first, chained)).await;
        assert_eq!(status, 400, "{refused}");
        let code = if chained {
            "previous_response_not_found"
        } else {
            "item_not_found"
        };
        assert_eq!(refused["error"]["code"], code, "{refused}");
    }
}
