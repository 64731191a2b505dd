//! `GET /v1/sessions?door=…` and `?exclude_door=…` on the real binary: an eval run's
//! sessions (door `eval`, written by `massgen eval --records-db`) and a served chat
//! session in one SQLite records database; the filters list each side alone, no filter
//! lists both, and a door that does not exist, a repeated parameter or both together are
//! a 400 in the API's error format.

use std::process::Command;

use serde_json::Value;

use crate::eval::{eval, ok, setup};
use crate::support::{self, chat, get, question};

async fn listed(url: &str, query: &str) -> Vec<(String, String)> {
    let response = get(&format!("{url}/v1/sessions?{query}"), None).await;
    assert_eq!(response.status(), 200, "{query}");
    let body: Value = response.json().await.unwrap();
    body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_string(),
                s["door"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn eval_sessions_are_listed_apart_from_served_ones() {
    let (_mock, dir, config, data) = setup(4, false);
    let db = format!("sqlite://{}", dir.path().join("records.db").display());
    let out = dir.path().join("run");
    let output = eval(
        dir.path(),
        &[
            "--data",
            data.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--baselines",
            "none",
            // One session at a time: each starts in its own millisecond, so the order
            // newest first is one order.
            "--concurrency",
            "1",
            "--records-db",
            &db,
        ],
    );
    ok(&output);

    let mut cmd = Command::new(support::bin());
    cmd.args(["serve", "--host", "127.0.0.1", "--port", "0", "--config"])
        .arg(&config)
        .env("MASSGEN_SERVER_RECORDS_DB", &db);
    let server = support::start(cmd, "massgen listening on");
    let response = chat(&server.url, None, &question(false)).await;
    assert_eq!(response.status(), 200);
    let served = response.headers()["x-massgen-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let _ = response.bytes().await;

    let all = listed(&server.url, "limit=1000").await;
    let evals: Vec<&(String, String)> = all.iter().filter(|(_, d)| d == "eval").collect();
    assert_eq!(evals.len(), 4, "one session per item on the panel: {all:?}");
    assert_eq!(all.len(), 5, "{all:?}");
    assert_eq!(
        all[0],
        (served.clone(), "chat_completions".into()),
        "newest: {all:?}"
    );

    let only_served = vec![(served.clone(), "chat_completions".to_string())];
    assert_eq!(listed(&server.url, "exclude_door=eval").await, only_served);
    assert_eq!(
        listed(&server.url, "door=chat_completions").await,
        only_served
    );
    assert_eq!(
        listed(&server.url, "door=responses,messages,mcp").await,
        Vec::new()
    );
    let mut eval_only = listed(&server.url, "door=eval").await;
    let mut expected: Vec<(String, String)> = evals.into_iter().cloned().collect();
    eval_only.sort();
    expected.sort();
    assert_eq!(eval_only, expected);
    // The limit counts the sessions listed: the two newest eval sessions, though the
    // served one is newer than all of them.
    let newest_two = listed(&server.url, "door=eval&limit=2").await;
    assert_eq!(newest_two, all[1..3].to_vec(), "{all:?}");

    for (query, param) in [
        ("door=serve", "door"),
        ("door=", "door"),
        ("exclude_door=eval,nope", "exclude_door"),
        ("door=eval&door=eval", "door"),
        ("door=eval&exclude_door=eval", "exclude_door"),
    ] {
        let response = get(&format!("{}/v1/sessions?{query}", server.url), None).await;
        assert_eq!(response.status(), 400, "{query}");
        let body: Value = response.json().await.unwrap();
        let error = &body["error"];
        assert_eq!(error["param"], param, "{query}: {body}");
        assert_eq!(error["code"], "invalid_value", "{query}: {body}");
        assert_eq!(error["type"], "invalid_request_error", "{query}: {body}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("chat_completions, responses"),
            "{query}: {body}"
        );
    }
}
