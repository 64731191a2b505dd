//! The web page's HTTP side, black-box on the real binary: the page and its files load
//! without a key and forbid everything but this origin; `GET /v1/sessions` lists only the
//! caller's own sessions, with the question, panel, status, winner, duration and tokens.

use serde_json::{Value, json};

use crate::support;
use crate::support::{chat, client, get, mock_upstream, panel_yaml, write};

const KEY_1: &str = "sk-mg-ui-http-3a9f0c2b";
const KEY_2: &str = "sk-mg-ui-http-7e1d4b6a";

async fn ask(url: &str, key: &str, question: &str) -> String {
    let body =
        json!({"model": "massgen/fast", "messages": [{"role": "user", "content": question}]});
    let response = chat(url, Some(key), &body).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["massgen_metadata"]["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn page_loads_without_a_key_and_sessions_list_only_the_callers_own() {
    let mock = mock_upstream();
    let configs = tempfile::tempdir().unwrap();
    write(
        configs.path(),
        "fast.yaml",
        &panel_yaml(&mock.url, &["a", "b"], ""),
    );
    let server = support::serve_with_keys(
        &["--configs-dir".as_ref(), configs.path().as_os_str()],
        &format!("{KEY_1},{KEY_2}"),
    );
    let url = server.url.clone();

    // The page and its files need no key; the API still does.
    for path in ["/", "/ui", "/ui/"] {
        let page = get(&format!("{url}{path}"), None).await;
        assert_eq!(page.status(), 200, "{path}");
        let csp = page.headers()["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self'") && csp.contains("default-src 'none'"));
        assert!(
            page.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        assert!(
            page.text()
                .await
                .unwrap()
                .contains(r#"<script src="/ui/app.js""#)
        );
    }
    for (path, kind) in [
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
    ] {
        let asset = get(&format!("{url}{path}"), None).await;
        assert_eq!(asset.status(), 200, "{path}");
        assert!(
            asset.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(kind)
        );
        assert_eq!(asset.headers()["x-content-type-options"], "nosniff");
    }
    assert_eq!(
        get(&format!("{url}/ui/missing.js"), None).await.status(),
        404
    );
    assert_eq!(get(&format!("{url}/v1/sessions"), None).await.status(), 401);
    let post = client().post(format!("{url}/")).send().await.unwrap();
    assert_eq!(post.status(), 401, "only reading the page is open");

    let long = format!("What about {}?", "very ".repeat(60));
    let (mine, theirs) = tokio::join!(
        ask(&url, KEY_1, "Why is the sky blue?"),
        ask(&url, KEY_2, &long)
    );
    let mine_later = ask(&url, KEY_1, "And the sunset red?").await;

    let list: Value = get(&format!("{url}/v1/sessions"), Some(KEY_1))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(list["object"], "list");
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [mine_later.as_str(), mine.as_str()],
        "newest first, own only"
    );
    let entry = &list["data"][1];
    assert_eq!(entry["object"], "massgen.session.summary");
    assert_eq!(entry["question"], "Why is the sky blue?");
    assert_eq!(entry["model"], "massgen/fast");
    assert_eq!(entry["panel"], "fast");
    assert_eq!(entry["status"], "completed");
    assert_eq!(entry["agents"].as_array().unwrap().len(), 2);
    assert!(
        entry["winner"]["label"]
            .as_str()
            .unwrap()
            .starts_with("agent")
    );
    assert!(entry["usage"]["total_tokens"].as_u64().unwrap() > 0);
    assert!(entry["duration_ms"].is_u64() && entry["created_at_ms"].as_u64().unwrap() > 0);
    assert!(entry["answers"].as_u64().unwrap() >= 2 && entry["votes"].as_u64().unwrap() >= 2);

    // The record carries the request's question and panel as well.
    let record: Value = get(&format!("{url}/v1/sessions/{mine}"), Some(KEY_1))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(record["question"], "Why is the sky blue?");
    assert_eq!(record["panel"], "fast");

    let theirs_list: Value = get(&format!("{url}/v1/sessions?limit=5"), Some(KEY_2))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(theirs_list["data"].as_array().unwrap().len(), 1);
    assert_eq!(theirs_list["data"][0]["id"], theirs.as_str());
    let shown = theirs_list["data"][0]["question"].as_str().unwrap();
    assert_eq!(
        shown.chars().count(),
        201,
        "long questions are cut in the list"
    );
    assert!(shown.ends_with('…'));

    let one: Value = get(&format!("{url}/v1/sessions?limit=1"), Some(KEY_1))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(one["data"].as_array().unwrap().len(), 1);
    for bad in ["0", "1001", "x", "-1", "1&limit=2", "%FF"] {
        let response = get(&format!("{url}/v1/sessions?limit={bad}"), Some(KEY_1)).await;
        assert_eq!(response.status(), 400, "limit={bad}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_value");
        assert_eq!(body["error"]["param"], "limit");
    }
}
