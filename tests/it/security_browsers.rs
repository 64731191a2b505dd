//! Browsers cannot drive the server (issue 36, finding 6): on a keyless server (the quick
//! start) a page of another origin cannot start a session, a page whose name was rebound
//! to the server (DNS rebinding) cannot read it, and clients that are not browsers are
//! unaffected. Over HTTP with the headers a browser sends, and in a real headless Chromium
//! (`tests/ui/browsers.mjs`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::serving::assert_door_error;
use crate::support::{self, FAST, Setup, client, mock_stats, panel_yaml};

fn keyless(extra: &[&str]) -> Setup {
    Setup::with_panel(|url| panel_yaml(url, &FAST, ""), extra)
}

fn door_body(door: &str) -> Value {
    let messages = json!([{"role": "user", "content": "Why is the sky blue?"}]);
    match door {
        "/v1/responses" => json!({"model": "massgen", "input": "Why is the sky blue?"}),
        "/v1/messages" => json!({"model": "massgen", "max_tokens": 64, "messages": messages}),
        _ => json!({"model": "massgen", "messages": messages}),
    }
}

const DOORS: [&str; 3] = ["/v1/chat/completions", "/v1/responses", "/v1/messages"];

#[tokio::test]
async fn foreign_origins_rebound_hosts_and_plain_text_posts_are_refused() {
    let setup = keyless(&[]);
    let url = &setup.server.url;
    let authority = url.trim_start_matches("http://");
    for door in DOORS {
        let body = door_body(door).to_string();
        // A page of another site: its no-cors text/plain POST, and a JSON one.
        for content_type in ["text/plain", "application/json"] {
            let r = client()
                .post(format!("{url}{door}"))
                .header("origin", "http://evil.example")
                .header("content-type", content_type)
                .body(body.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 403, "{door} {content_type}");
            let error: Value = r.json().await.unwrap();
            assert_door_error(
                door,
                &error,
                "origin_not_allowed",
                "permission_error",
                "origin",
            );
        }
        // A rebound name: the server's own page, under the attacker's name.
        let r = client()
            .post(format!("{url}{door}"))
            .header(
                "host",
                format!("attacker.example:{}", authority.split(':').nth(1).unwrap()),
            )
            .header(
                "origin",
                format!(
                    "http://attacker.example:{}",
                    authority.split(':').nth(1).unwrap()
                ),
            )
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{door} rebound");
        let error: Value = r.json().await.unwrap();
        assert_door_error(door, &error, "host_not_allowed", "permission_error", "host");
        // No Origin but not JSON (a form, or curl -d without a content type): 415.
        let r = client()
            .post(format!("{url}{door}"))
            .header("content-type", "text/plain")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 415, "{door} text/plain");
        let error: Value = r.json().await.unwrap();
        assert_door_error(
            door,
            &error,
            "unsupported_media_type",
            "invalid_request_error",
            "type",
        );
    }
    // Reads under a rebound name too, and the page itself.
    for path in ["/v1/sessions", "/v1/models", "/"] {
        let r = client()
            .get(format!("{url}{path}"))
            .header("host", "attacker.example")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{path}");
    }
    // Nothing above reached an agent.
    assert_eq!(mock_stats(&setup.mock).await["requests"], 0);
    assert_eq!(
        support::get_json(&format!("{url}/v1/sessions")).await["data"],
        json!([])
    );
    // The server's own page (same origin) and clients without an Origin still work; a
    // probe addressing the server by another name still gets /health.
    let r = client()
        .post(format!("{url}/v1/chat/completions"))
        .header("origin", url.as_str())
        .json(&door_body("/v1/chat/completions"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = client()
        .post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json; charset=utf-8")
        .body(door_body("/v1/chat/completions").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let health = client()
        .get(format!("{url}/health"))
        .header("host", "massgen-0.massgen.svc")
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn names_the_operator_lists_are_served() {
    let setup = keyless(&["--allowed-hosts", "api.example.com,*.corp.example"]);
    let url = &setup.server.url;
    for (host, status) in [
        ("api.example.com", 200),
        ("team.corp.example:8443", 200),
        ("127.0.0.1", 200),
        ("localhost", 200),
        ("evil.example", 403),
    ] {
        let r = client()
            .get(format!("{url}/v1/models"))
            .header("host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "{host}");
    }
    // A listed origin is allowed (CORS lists them), any other refused.
    let cors = keyless(&["--cors-origins", "https://app.example.com"]);
    for (origin, status) in [
        ("https://app.example.com", 200),
        ("https://evil.example", 403),
    ] {
        let r = client()
            .get(format!("{}/v1/models", cors.server.url))
            .header("origin", origin)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "{origin}");
    }
}

#[test]
fn a_page_in_chromium_cannot_start_a_session_or_read_a_rebound_server() {
    let ui_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui");
    if let Some(why) = crate::ui_e2e::missing(&ui_dir) {
        assert!(
            std::env::var("MASSGEN_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "MASSGEN_REQUIRE_BROWSER=1 but the browser test cannot run: {why}"
        );
        eprintln!("SKIPPED browser test: {why}");
        return;
    }
    let setup = keyless(&[]);
    let mut child = Command::new("node")
        .arg(ui_dir.join("browsers.mjs"))
        .arg(&setup.server.url)
        .env("MASSGEN_CHROMIUM", crate::ui_e2e::chromium())
        .stdin(Stdio::null())
        .spawn()
        .expect("start node");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(45) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let status = status.expect("the browser test ran over 45 s");
    assert!(
        status.success(),
        "browsers.mjs failed ({status}); see its output above"
    );
    // The foreign page's POST reached no agent and started no session.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        assert_eq!(mock_stats(&setup.mock).await["requests"], 0);
        let sessions = support::get_json(&format!("{}/v1/sessions", setup.server.url)).await;
        assert_eq!(sessions["data"], json!([]), "{sessions}");
    });
}
