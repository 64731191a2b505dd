//! The response cache (`--cache-ttl-seconds`) through the real binary on the simulator:
//! an identical request is answered again without a session, any change misses, keys do
//! not share, streamed requests get the stream back. Expiry and the bounds are unit tests
//! of `src/server/cache.rs` (paused time).

use std::ffi::OsStr;

use serde_json::{Value, json};

use crate::support::{
    FAST, Proc, Setup, get, mock_stats, mock_upstream, panel_yaml, post, sample, serve_with_keys,
    write,
};

fn ask(question: &str, stream: bool) -> Value {
    json!({"model": "massgen", "stream": stream,
        "messages": [{"role": "user", "content": question}]})
}

async fn send(url: &str, path: &str, key: Option<&str>, body: &Value) -> (String, String) {
    let response = post(url, path, key, body).await;
    assert_eq!(response.status(), 200, "{path}");
    let cache = response
        .headers()
        .get("x-massgen-cache")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (cache, response.text().await.unwrap())
}

async fn calls(mock: &Proc) -> u64 {
    mock_stats(mock).await["requests"].as_u64().unwrap()
}

#[tokio::test]
async fn an_identical_request_is_answered_again_without_a_session() {
    let s = Setup::with_panel(
        |url| panel_yaml(url, &FAST, ""),
        &["--cache-ttl-seconds", "60"],
    );
    let url = &s.server.url;
    let (first, body) = send(url, "/v1/chat/completions", None, &ask("Why?", false)).await;
    assert_eq!(first, "miss");
    let before = calls(&s.mock).await;
    assert!(before > 0);
    // The same request with other whitespace is the same request.
    let spaced = serde_json::to_string_pretty(&ask("Why?", false)).unwrap();
    let response = crate::support::client()
        .post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(spaced)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-massgen-cache"], "hit");
    assert!(response.headers().get("x-massgen-session-id").is_some());
    assert_eq!(
        response.text().await.unwrap(),
        body,
        "the stored response, as it was"
    );
    assert_eq!(calls(&s.mock).await, before, "no upstream call for a hit");

    // Any change is another request.
    for other in [
        ask("Why not?", false),
        json!({"model": "massgen", "messages": [{"role": "user", "content": "Why?"}], "max_tokens": 50}),
    ] {
        let (cache, _) = send(url, "/v1/chat/completions", None, &other).await;
        assert_eq!(cache, "miss", "{other}");
    }
    assert!(calls(&s.mock).await > before);

    // Streamed: the stream comes back as it was sent.
    let (first, stream) = send(url, "/v1/chat/completions", None, &ask("Why?", true)).await;
    assert_eq!(
        first, "miss",
        "a streamed request is not the non-streamed one"
    );
    let before = calls(&s.mock).await;
    let (again, replay) = send(url, "/v1/chat/completions", None, &ask("Why?", true)).await;
    assert_eq!(again, "hit");
    assert_eq!(replay, stream);
    assert!(replay.ends_with("data: [DONE]\n\n"), "{replay}");
    assert_eq!(calls(&s.mock).await, before);

    // The other doors cache too.
    let messages = json!({"model": "massgen", "max_tokens": 100, "messages": [{"role": "user", "content": "Why?"}]});
    let responses = json!({"model": "massgen", "input": "Why?", "stream": true});
    for (path, body) in [("/v1/messages", messages), ("/v1/responses", responses)] {
        let (first, one) = send(url, path, None, &body).await;
        let (second, two) = send(url, path, None, &body).await;
        assert_eq!((first.as_str(), second.as_str()), ("miss", "hit"), "{path}");
        assert_eq!(one, two, "{path}");
    }

    let metrics = get(&format!("{url}/metrics"), None)
        .await
        .text()
        .await
        .unwrap();
    let count = |result| {
        sample(
            &metrics,
            "massgen_response_cache_total",
            &[("result", result)],
        )
    };
    assert_eq!(count("hit"), Some(4.0), "{metrics}");
    assert_eq!(count("stored"), Some(6.0), "{metrics}");
}

#[tokio::test]
async fn keys_do_not_share_and_failures_are_not_kept() {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let models = [FAST[0], "broken:fault=500"];
    let ok = write(
        dir.path(),
        "ok.yaml",
        &panel_yaml(&mock.url, &models[..1], ""),
    );
    write(
        dir.path(),
        "broken.yaml",
        &panel_yaml(&mock.url, &models[1..], ""),
    );
    let args: Vec<&OsStr> = vec![
        OsStr::new("--config"),
        ok.as_os_str(),
        OsStr::new("--configs-dir"),
        dir.path().as_os_str(),
        OsStr::new("--cache-ttl-seconds"),
        OsStr::new("60"),
    ];
    let server = serve_with_keys(&args, "key-one,key-two");
    let url = &server.url;
    let body = ask("Why?", false);
    let (first, _) = send(url, "/v1/chat/completions", Some("key-one"), &body).await;
    let (again, _) = send(url, "/v1/chat/completions", Some("key-one"), &body).await;
    let (other, _) = send(url, "/v1/chat/completions", Some("key-two"), &body).await;
    assert_eq!([first, again, other], ["miss", "hit", "miss"]);

    let broken =
        json!({"model": "massgen/broken", "messages": [{"role": "user", "content": "Why?"}]});
    let mut before = calls(&mock).await;
    for _ in 0..2 {
        let response = post(url, "/v1/chat/completions", Some("key-one"), &broken).await;
        assert_ne!(response.status(), 200);
        assert!(response.headers().get("x-massgen-cache").is_none());
        let now = calls(&mock).await;
        assert!(
            now > before,
            "a failed session is not kept: the retry runs again"
        );
        before = now;
    }
}

#[tokio::test]
async fn off_by_default() {
    let s = Setup::with_panel(|url| panel_yaml(url, &FAST, ""), &[]);
    let response = post(
        &s.server.url,
        "/v1/chat/completions",
        None,
        &ask("Why?", false),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("x-massgen-cache").is_none());
}
