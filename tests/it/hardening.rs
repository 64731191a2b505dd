//! Issue 11's hardening, one test per defect: auth that fails closed, request ids that
//! cannot forge log fields, error classification, request body checks, bounded metric
//! labels, rate limits for traffic without a valid key, connection limits and timeouts.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use massgen::cli::{Fatal, ProductionArgs, resolve_production};
use serde_json::{Value, json};

use crate::support::{
    FAST, Setup, client, env_of, get, panel_yaml, parse_sse, post, question, serve_with_keys, write,
};

fn production(
    keys_file: Option<PathBuf>,
    vars: &[(&str, &str)],
) -> Result<massgen::config::ProductionSettings, Fatal> {
    let args = ProductionArgs {
        api_keys_file: keys_file,
        ..ProductionArgs::default()
    };
    resolve_production(&args, &env_of(vars))
}

#[test]
fn a_key_source_without_keys_is_a_start_up_error() {
    let dir = tempfile::tempdir().unwrap();
    let empty = write(dir.path(), "empty", "");
    let comments = write(dir.path(), "comments", "# rotated out\n\n   \n");
    for file in [&empty, &comments] {
        let e = production(Some(file.clone()), &[]).unwrap_err();
        assert_eq!(e.code, 2, "{}", e.message);
        assert!(
            e.message.contains(&file.display().to_string()),
            "{}",
            e.message
        );
    }
    let e = production(None, &[("MASSGEN_SERVER_API_KEYS", " , ,")]).unwrap_err();
    assert_eq!(e.code, 2);
    assert!(
        e.message.contains("MASSGEN_SERVER_API_KEYS"),
        "{}",
        e.message
    );
    // Keys from the variable do not excuse an empty file: the operator meant to add some.
    let e = production(Some(empty), &[("MASSGEN_SERVER_API_KEYS", "k-1")]).unwrap_err();
    assert_eq!(e.code, 2);
    // An empty variable is not given (as every other variable), and real keys still work.
    let open = production(None, &[("MASSGEN_SERVER_API_KEYS", "  ")]).unwrap();
    assert!(open.api_keys.is_empty());
    let keys = write(dir.path(), "keys", "# ops\nk-2\n");
    let p = production(Some(keys), &[("MASSGEN_SERVER_API_KEYS", "k-1, ,")]).unwrap();
    assert_eq!(p.api_keys.len(), 2);
}

/// Sets one flag of [`ProductionArgs`].
type SetArg = fn(&mut ProductionArgs);

#[test]
fn the_new_limits_refuse_zero_and_default_to_bounded_values() {
    let zero: [(&str, SetArg); 7] = [
        ("--max-connections", |a| a.max_connections = 0),
        ("--body-timeout-seconds", |a| a.body_timeout_seconds = 0),
        ("--idle-timeout-seconds", |a| a.idle_timeout_seconds = 0),
        ("--client-stall-timeout-seconds", |a| {
            a.client_stall_timeout_seconds = 0
        }),
        ("--auth-failures-per-minute", |a| {
            a.auth_failures_per_minute = 0
        }),
        ("--max-subscribers-per-session", |a| {
            a.max_subscribers_per_session = 0
        }),
        ("--max-subscribers-per-key", |a| {
            a.max_subscribers_per_key = 0
        }),
    ];
    for (flag, set) in zero {
        let mut args = ProductionArgs::default();
        set(&mut args);
        let e = resolve_production(&args, &env_of(&[])).unwrap_err();
        assert_eq!(e.code, 2);
        assert!(e.message.contains(flag), "{}", e.message);
    }
    let p = production(None, &[]).unwrap();
    assert_eq!(p.max_connections, 4096);
    assert_eq!(p.body_read_timeout, Duration::from_secs(60));
    assert_eq!(p.idle_timeout, Duration::from_secs(60));
    assert_eq!(p.client_stall_timeout, Duration::from_secs(30));
    assert_eq!(p.auth_failures_per_minute, 30);
    assert_eq!(
        (p.max_subscribers_per_session, p.max_subscribers_per_key),
        (16, 64)
    );
}

/// Two agents whose first token comes long after their turn's time limit.
fn too_slow(mock_url: &str) -> String {
    panel_yaml(
        mock_url,
        &["a:ttft_ms=20000", "b:ttft_ms=20000"],
        "orchestrator:\n  agent_turn_timeout_seconds: 0.3\n",
    )
}

#[tokio::test]
async fn every_agent_timed_out_is_a_504_on_every_door() {
    let setup = Setup::with_panel(too_slow, &[]);
    let url = &setup.server.url;
    let text = "Why is the sky blue?";
    let doors = [
        ("/v1/chat/completions", question(false)),
        ("/v1/responses", json!({"model": "massgen", "input": text})),
        (
            "/v1/messages",
            json!({"model": "massgen", "max_tokens": 64, "messages": [{"role": "user", "content": text}]}),
        ),
    ];
    for (path, body) in doors {
        let r = post(url, path, None, &body).await;
        assert_eq!(r.status(), 504, "{path}");
        let v: Value = r.json().await.unwrap();
        if path == "/v1/messages" {
            assert_eq!(v["type"], "error", "{v}");
            assert_eq!(v["error"]["type"], "timeout_error", "{v}");
        } else {
            assert_eq!(v["error"]["type"], "timeout_error", "{v}");
            assert_eq!(v["error"]["code"], "agents_timed_out", "{v}");
        }
    }
}

#[tokio::test]
async fn a_session_cancelled_by_shutdown_says_so() {
    let records = tempfile::tempdir().unwrap();
    let dir = records.path().to_str().unwrap();
    let flags = ["--shutdown-grace-seconds", "1", "--records-dir", dir];
    let mut setup = Setup::with_panel(too_slow_for_grace, &flags);
    let url = setup.server.url.clone();
    let response = client()
        .post(format!("{url}/v1/chat/completions"))
        .json(&question(true))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let stop = tokio::task::spawn_blocking(move || {
        let status = setup.server.terminate(Duration::from_secs(20));
        (setup, status)
    });
    let sse = parse_sse(&response.text().await.unwrap());
    let (_setup, status) = stop.await.unwrap();
    assert!(status.is_some(), "the server did not stop");
    let error = sse
        .events
        .iter()
        .find_map(|e| e.get("error"))
        .unwrap_or_else(|| panic!("no error chunk: {}", sse.raw));
    assert_eq!(error["code"], "session_cancelled", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("shutting down"), "{message}");
    assert!(!message.contains("client went away"), "{message}");
    // The stored record says so too (it used to say the client went away).
    let folder = std::fs::read_dir(records.path()).unwrap().next().unwrap();
    let record = std::fs::read_to_string(folder.unwrap().path().join("session.json")).unwrap();
    let record: Value = serde_json::from_str(&record).unwrap();
    let stored = record["outcome"]["message"].as_str().unwrap_or_default();
    assert!(stored.contains("shutting down"), "{record}");
}

/// Agents slower than the shutdown grace period (and with time to spare in their turn).
fn too_slow_for_grace(mock_url: &str) -> String {
    panel_yaml(mock_url, &["a:ttft_ms=15000", "b:ttft_ms=15000"], "")
}

/// Three fast agents; `extra` flags.
fn fast(extra: &[&str]) -> Setup {
    Setup::with_panel(|url| panel_yaml(url, &FAST, ""), extra)
}

/// Each door's path with a question whose only text part is `part`.
fn with_part(part: Value) -> [(&'static str, Value); 3] {
    [
        (
            "/v1/chat/completions",
            json!({"model": "massgen", "messages": [{"role": "user", "content": [part.clone()]}]}),
        ),
        (
            "/v1/responses",
            json!({"model": "massgen", "input": [{"role": "user", "content": [part.clone()]}]}),
        ),
        (
            "/v1/messages",
            json!({"model": "massgen", "max_tokens": 64, "messages": [{"role": "user", "content": [part]}]}),
        ),
    ]
}

/// The error's code (OpenAI shape) or type (Anthropic shape, on `/v1/messages`).
async fn error_of(path: &str, response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let v: Value = response.json().await.unwrap();
    let what = if path == "/v1/messages" {
        assert_eq!(v["type"], "error", "{v}");
        v["error"]["type"].as_str().unwrap().to_string()
    } else {
        v["error"]["code"].as_str().unwrap().to_string()
    };
    (status, what)
}

/// What [`error_of`] says for a client error with `code`: Anthropic has one type for them.
fn bad_request<'a>(path: &str, code: &'a str) -> &'a str {
    if path == "/v1/messages" {
        "invalid_request_error"
    } else {
        code
    }
}

#[tokio::test]
async fn compressed_bodies_are_refused_with_415_on_every_door() {
    let setup = fast(&[]);
    let url = &setup.server.url;
    for (path, body) in with_part(json!({"type": "text", "text": "hi"})) {
        for encoding in ["gzip", "br", "deflate, gzip"] {
            let r = client()
                .post(format!("{url}{path}"))
                .header("content-type", "application/json")
                .header("content-encoding", encoding)
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            let (status, what) = error_of(path, r).await;
            assert_eq!(status, 415, "{path} {encoding}");
            assert_eq!(what, bad_request(path, "unsupported_content_encoding"));
        }
        // `identity` is no encoding at all.
        let r = client()
            .post(format!("{url}{path}"))
            .header("content-type", "application/json")
            .header("content-encoding", "identity")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
}

#[tokio::test]
async fn a_text_part_whose_text_is_not_a_string_is_a_400_on_every_door() {
    let setup = fast(&[]);
    let url = &setup.server.url;
    for text in [json!(42), json!(["a"]), json!(null), json!({"t": "x"})] {
        for (path, body) in with_part(json!({"type": "text", "text": text})) {
            let (status, what) = error_of(path, post(url, path, None, &body).await).await;
            assert_eq!(status, 400, "{path} {text}");
            assert_eq!(what, bad_request(path, "invalid_message"));
        }
    }
    let system = json!({"model": "massgen", "max_tokens": 64,
        "system": [{"type": "text", "text": 7}], "messages": [{"role": "user", "content": "hi"}]});
    let r = post(url, "/v1/messages", None, &system).await;
    assert_eq!(r.status(), 400);
}

#[cfg(unix)]
#[tokio::test]
async fn record_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let records = tempfile::tempdir().unwrap();
    let dir = records.path().join("records");
    let setup = fast(&["--records-dir", dir.to_str().unwrap()]);
    let r = post(
        &setup.server.url,
        "/v1/chat/completions",
        None,
        &question(false),
    )
    .await;
    assert_eq!(r.status(), 200);
    // The files are written once the session's record is complete, just after the answer.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let session = loop {
        let found = std::fs::read_dir(&dir)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.join("session.json").exists());
        if let Some(path) = found {
            break path;
        }
        assert!(std::time::Instant::now() < deadline, "no record files");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stack = vec![dir];
    let mut files = 0;
    while let Some(path) = stack.pop() {
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        if path.is_dir() {
            assert_eq!(mode, 0o700, "{}", path.display());
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else {
            assert_eq!(mode, 0o600, "{}", path.display());
            files += 1;
        }
    }
    assert!(files >= 5, "{files} files under {}", session.display());
}

#[tokio::test]
async fn massgen_model_can_be_turned_off() {
    let ask = |url: &str, model: &str| {
        let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
        let url = url.to_string();
        async move { post(&url, "/v1/chat/completions", None, &body).await }
    };
    let off = fast(&["--allow-model-override=false"]);
    let r = ask(&off.server.url, "massgen/model:x").await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "model_override_disabled", "{v}");
    assert_eq!(v["error"]["param"], "model", "{v}");
    let r = ask(&off.server.url, "massgen").await;
    assert_eq!(r.status(), 200, "the configured panel still answers");
    // On by default: the panel runs with the model the request chose.
    let on = fast(&[]);
    let r = ask(&on.server.url, &format!("massgen/model:{}", FAST[0])).await;
    assert_eq!(r.status(), 200);
}

/// A client whose connections come from `ip` (any 127.0.0.0/8 address reaches loopback).
fn client_from(ip: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(ip))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn status(request: reqwest::RequestBuilder) -> u16 {
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn traffic_without_a_valid_key_is_limited_per_address() {
    let flags = [
        "--demo",
        "--rate-limit-per-minute",
        "2",
        "--auth-failures-per-minute",
        "3",
    ];
    let flags: Vec<&OsStr> = flags.iter().map(OsStr::new).collect();
    let server = serve_with_keys(&flags, "k-right");
    let page = format!("{}/", server.url);
    let models = format!("{}/v1/models", server.url);
    let (a, b) = (client_from([127, 0, 0, 1]), client_from([127, 0, 0, 2]));
    // Page loads without a key: one address spends its own bucket, not everybody's.
    for want in [200, 200, 429] {
        assert_eq!(status(a.get(&page)).await, want);
    }
    assert_eq!(status(b.get(&page)).await, 200);
    assert_eq!(status(a.get(&models).bearer_auth("k-right")).await, 200);
    // Wrong keys: three 401s, then 429 for that address only; the right key still works.
    for want in [401, 401, 401, 429, 429] {
        assert_eq!(status(a.get(&models).bearer_auth("k-wrong")).await, want);
    }
    let limited = a
        .get(&models)
        .header("x-api-key", "k-guess")
        .send()
        .await
        .unwrap();
    assert_eq!(limited.status(), 429);
    assert!(limited.headers().contains_key("retry-after"));
    assert_eq!(status(b.get(&models).bearer_auth("k-wrong")).await, 401);
    assert_eq!(status(a.get(&models).bearer_auth("k-right")).await, 200);
}

/// Reads `stream` until the peer closes it (or `within` passes): what arrived, and whether
/// it was closed in time.
async fn read_until_closed(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    within: Duration,
) -> (String, bool) {
    use tokio::io::AsyncReadExt;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&seen).into_owned(), false),
            Ok(Ok(0) | Err(_)) => return (String::from_utf8_lossy(&seen).into_owned(), true),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

async fn connect(url: &str) -> tokio::net::TcpStream {
    tokio::net::TcpStream::connect(url.trim_start_matches("http://"))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_trickled_body_is_cut_with_408() {
    use tokio::io::AsyncWriteExt;
    let setup = fast(&["--body-timeout-seconds", "1"]);
    let (mut reader, mut writer) = connect(&setup.server.url).await.into_split();
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{";
    writer.write_all(head.as_bytes()).await.unwrap();
    // A byte every 200 ms (100 bytes would take 20 s): never a gap a read timeout sees.
    let trickle = async move {
        for _ in 0..99 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if writer.write_all(b" ").await.is_err() {
                break;
            }
        }
    };
    let trickle = tokio::spawn(trickle);
    let (answer, _) = read_until_closed(&mut reader, Duration::from_secs(10)).await;
    trickle.abort();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
}

#[tokio::test]
async fn idle_connections_are_closed_http1_and_http2() {
    use tokio::io::AsyncWriteExt;
    let setup = fast(&["--idle-timeout-seconds", "1"]);
    // HTTP/2 prior knowledge: the preface and an empty SETTINGS frame, then nothing.
    let mut h2 = connect(&setup.server.url).await;
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    // HTTP/1.1 keep-alive: one request answered, then nothing.
    let mut h1 = connect(&setup.server.url).await;
    h1.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let ((_, h2_closed), (h1_seen, h1_closed)) = tokio::join!(
        read_until_closed(&mut h2, Duration::from_secs(10)),
        read_until_closed(&mut h1, Duration::from_secs(10)),
    );
    assert!(h2_closed, "the idle HTTP/2 connection stayed open");
    assert!(h1_closed, "the idle HTTP/1 connection stayed open");
    assert!(h1_seen.starts_with("HTTP/1.1 200"), "{h1_seen}");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "closed before the timeout"
    );
}

#[tokio::test]
async fn over_max_connections_health_fails_fast_then_answers_again() {
    let setup = fast(&["--max-connections", "2"]);
    let url = &setup.server.url;
    // Two connections that send nothing hold both slots (until the header timeout).
    let held = [connect(url).await, connect(url).await];
    // Give the accept loop the moment it needs to take them.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    // Answered, not reset: a 503 the client can read, in the door's shape.
    let refused = client().get(format!("{url}/health")).send().await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "server_busy", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("maximum of connections"),
        "{body}"
    );
    let anthropic = client()
        .post(format!("{url}/v1/messages"))
        .json(&serde_json::json!({"model": "massgen", "max_tokens": 5, "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(anthropic.status(), 503);
    let body: serde_json::Value = anthropic.json().await.unwrap();
    assert_eq!(body["type"], "error", "the Messages door's shape: {body}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "did not fail fast"
    );
    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        // Refused (503) until the server has seen the held connections close.
        if let Ok(r) = client().get(format!("{url}/health")).send().await
            && r.status() == 200
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/health never answered again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_client_that_stops_reading_is_dropped_and_frees_its_slot() {
    // A few thousand final-answer deltas: far more than the server buffers for a client.
    let long = "long:words=1000,token_ms=0,ttft_ms=1";
    let setup = Setup::with_panel(
        |url| panel_yaml(url, &[long, long], ""),
        &["--max-sessions", "1", "--client-stall-timeout-seconds", "1"],
    );
    let url = &setup.server.url;
    // HTTP/2 with a zero window: the response headers arrive, no byte of the body can.
    let stalled = reqwest::Client::builder()
        .http2_prior_knowledge()
        .http2_initial_stream_window_size(Some(0))
        .http2_initial_connection_window_size(Some(0))
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let held = stalled
        .post(format!("{url}/v1/chat/completions"))
        .json(&question(true))
        .send()
        .await
        .unwrap();
    assert_eq!(held.status(), 200);
    assert_eq!(held.version(), reqwest::Version::HTTP_2);
    // It reads nothing. Its session holds the only slot until the server drops it.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = post(url, "/v1/chat/completions", None, &question(true)).await;
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 429);
        assert!(
            std::time::Instant::now() < deadline,
            "the stalled client kept its session slot"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(held);
}

#[tokio::test]
async fn models_a_request_chose_never_become_metric_label_values() {
    let setup = fast(&[]);
    let url = &setup.server.url;
    let chosen: Vec<String> = (1..=4)
        .map(|n| format!("client-{n}:ttft_ms=5,token_ms=1,words={n}"))
        .collect();
    for model in &chosen {
        let body = json!({"model": format!("massgen/model:{model}"),
            "messages": [{"role": "user", "content": "hi"}]});
        let r = post(url, "/v1/chat/completions", None, &body).await;
        assert_eq!(r.status(), 200, "{model}");
    }
    let metrics = get(&format!("{url}/metrics"), None).await.text().await;
    let metrics = metrics.unwrap();
    assert!(metrics.contains("(set by request)"), "{metrics}");
    for model in &chosen {
        let name = model.split(':').next().unwrap();
        assert!(!metrics.contains(name), "{name} is a label value");
    }
}
