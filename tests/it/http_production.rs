//! Production features against the real binary and the simulator, over loopback: API keys,
//! limits, metrics, OTLP traces, session records, the header timeout.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use serde_json::Value;

use crate::support;
use crate::support::{
    chat, client, get, mock_upstream, panel_yaml, parse_sse, question, sample, write,
};

const FAST: [&str; 3] = [
    "alpha:ttft_ms=20,token_ms=1",
    "beta:ttft_ms=40,token_ms=1",
    "gamma:ttft_ms=60,token_ms=1",
];
const KEY_1: &str = "sk-mg-test-4f1c9a7e0b2d";
const KEY_2: &str = "sk-mg-test-8e3b5d1f6a0c";

/// The binary under test; `MASSGEN_TEST_BIN` points at a private copy when other builds
/// share the target directory and may replace `target/debug/massgen` mid-run.
fn bin() -> String {
    std::env::var("MASSGEN_TEST_BIN").unwrap_or_else(|_| support::bin().to_string())
}

/// `massgen serve` with environment `env`, its stderr captured line by line.
struct Server {
    child: Child,
    url: String,
    logs: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(panel: &str, flags: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = write(dir.path(), "team.yaml", panel);
        let mut cmd = Command::new(bin());
        cmd.args(["serve", "--host", "127.0.0.1", "--port", "0", "--config"])
            .arg(&config)
            .args(flags)
            .current_dir(dir.path())
            // The default records file (SQLite), in this server's own directory: servers
            // sharing $HOME's file would race for it, and tests must not write in $HOME.
            .env("XDG_DATA_HOME", dir.path())
            .env_remove("MASSGEN_SERVER_RECORDS_DB")
            .env("RUST_LOG", "info")
            .env_remove("MASSGEN_SERVER_API_KEYS")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start massgen");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("massgen listening on ") {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let Ok(url) = rx.recv_timeout(Duration::from_secs(20)) else {
            let _ = child.kill();
            panic!("server did not start: {:?}", logs.lock().unwrap());
        };
        Self {
            child,
            url,
            logs,
            _dir: dir,
        }
    }

    /// SIGTERM, then wait (bounded) for the exit and the last log lines.
    fn stop(&mut self) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..300 {
            if let Ok(Some(status)) = self.child.try_wait() {
                std::thread::sleep(Duration::from_millis(100));
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }
}

fn assert_openai_error(body: &Value, code: &str) {
    let error = &body["error"];
    assert_eq!(error["code"], code, "{body}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(error["type"].is_string(), "{body}");
    assert!(error.get("param").is_some(), "{body}");
}

#[tokio::test]
async fn api_keys_guard_the_api_but_not_health_and_never_reach_the_logs() {
    let mock = mock_upstream();
    let keys = format!("{KEY_1}, {KEY_2}");
    let mut server = Server::start(
        &panel_yaml(&mock.url, &FAST, ""),
        &["--debug", "--protect-metrics"],
        &[
            ("MASSGEN_SERVER_API_KEYS", keys.as_str()),
            ("RUST_LOG", "debug"),
            ("MASSGEN_LOG_FORMAT", "json"),
        ],
    );
    let url = server.url.clone();

    let missing = chat(&url, None, &question(false)).await;
    assert_eq!(missing.status(), 401);
    assert_eq!(missing.headers()["www-authenticate"], "Bearer");
    assert_openai_error(&missing.json().await.unwrap(), "invalid_api_key");
    let wrong = chat(&url, Some("sk-mg-test-wrong"), &question(false)).await;
    assert_eq!(wrong.status(), 401);
    assert_openai_error(&wrong.json().await.unwrap(), "invalid_api_key");
    let almost = chat(&url, Some(&KEY_1[..KEY_1.len() - 1]), &question(false)).await;
    assert_eq!(almost.status(), 401);
    assert_eq!(get(&format!("{url}/v1/models"), None).await.status(), 401);
    assert_eq!(get(&format!("{url}/metrics"), None).await.status(), 401);
    assert_eq!(
        get(&format!("{url}/metrics"), Some(KEY_2)).await.status(),
        200
    );
    let health = get(&format!("{url}/health"), None).await;
    assert_eq!(health.status(), 200);

    for key in [KEY_1, KEY_2] {
        let ok = client()
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(key)
            .header("x-request-id", "req-from-client-42")
            .json(&question(false))
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200);
        assert_eq!(ok.headers()["x-request-id"], "req-from-client-42");
        let body: Value = ok.json().await.unwrap();
        assert!(body["choices"][0]["message"]["content"].is_string());
    }
    // A generated request id comes back when the client sent none.
    let generated = get(&format!("{url}/v1/models"), Some(KEY_1)).await;
    assert!(!generated.headers()["x-request-id"].is_empty());

    assert!(server.stop(), "graceful exit");
    let logs = server.logs();
    assert!(logs.len() > 10, "expected debug logs: {logs:?}");
    for line in &logs {
        for secret in [KEY_1, KEY_2, "sk-mg-test-wrong", &KEY_1[..KEY_1.len() - 1]] {
            assert!(!line.contains(secret), "a key reached the logs: {line}");
        }
    }
    // Every line of a request carries its request id, the session's lines included.
    let started: Vec<&String> = logs
        .iter()
        .filter(|l| l.contains("session started"))
        .collect();
    assert_eq!(started.len(), 2, "{logs:?}");
    for line in started {
        let v: Value = serde_json::from_str(line).expect("JSON log line");
        assert_eq!(v["span"]["request_id"], "req-from-client-42", "{line}");
    }
    assert!(
        logs.iter().any(|l| l.contains("\"session_id\"")
            && l.contains("req-from-client-42")
            && l.contains("\"session\"")),
        "session span lines carry the request id"
    );
}

#[tokio::test]
async fn session_cap_and_rate_limit_answer_429_with_retry_after_and_stay_healthy() {
    let mock = mock_upstream();
    // One slow agent holds the only session slot for a while.
    let server = Server::start(
        &panel_yaml(&mock.url, &["slow:ttft_ms=1500,token_ms=1"], ""),
        &["--max-sessions", "1"],
        &[],
    );
    let url = server.url.clone();
    let first = tokio::spawn({
        let url = url.clone();
        async move { chat(&url, None, &question(false)).await.status() }
    });
    // Wait until the first session runs (the simulator sees its call).
    for _ in 0..100 {
        let stats: Value = get(&format!("{}/mock/stats", mock.url), None)
            .await
            .json()
            .await
            .unwrap();
        if stats["active"].as_u64() > Some(0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refused = chat(&url, None, &question(false)).await;
    assert_eq!(refused.status(), 429);
    let wait: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(wait >= 1);
    assert_openai_error(&refused.json().await.unwrap(), "too_many_sessions");
    assert_eq!(get(&format!("{url}/health"), None).await.status(), 200);
    assert_eq!(first.await.unwrap(), 200);
    // The slot is free again.
    assert_eq!(chat(&url, None, &question(false)).await.status(), 200);
    drop(server);

    let keys = format!("{KEY_1},{KEY_2}");
    let server = Server::start(
        &panel_yaml(&mock.url, &FAST, ""),
        &["--rate-limit-per-minute", "1", "--rate-limit-burst", "2"],
        &[("MASSGEN_SERVER_API_KEYS", keys.as_str())],
    );
    let models = format!("{}/v1/models", server.url);
    assert_eq!(get(&models, Some(KEY_1)).await.status(), 200);
    assert_eq!(get(&models, Some(KEY_1)).await.status(), 200);
    let limited = get(&models, Some(KEY_1)).await;
    assert_eq!(limited.status(), 429);
    let wait: u64 = limited.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    assert_openai_error(&limited.json().await.unwrap(), "rate_limit_exceeded");
    let limited_chat = chat(&server.url, Some(KEY_1), &question(false)).await;
    assert_eq!(limited_chat.status(), 429);
    // Another key has its own budget; health is never limited.
    assert_eq!(get(&models, Some(KEY_2)).await.status(), 200);
    for _ in 0..5 {
        assert_eq!(
            get(&format!("{}/health", server.url), None).await.status(),
            200
        );
    }
}

#[tokio::test]
async fn upstream_call_budget_stops_a_session_fast_with_a_clear_error() {
    let mock = mock_upstream();
    let server = Server::start(
        &panel_yaml(&mock.url, &FAST[..2], ""),
        &["--max-upstream-calls", "1"],
        &[],
    );
    let response = chat(&server.url, None, &question(false)).await;
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.unwrap();
    assert_openai_error(&body, "upstream_failed");
    // Refused before it was sent, it counts as that agent's upstream failure.
    let refused = &body["error"]["upstream"][0];
    let message = refused["message"].as_str().unwrap();
    assert!(message.contains("upstream call budget"), "{body}");
    assert!(refused["status"].is_null(), "{body}");
    let stats: Value = get(&format!("{}/mock/stats", mock.url), None)
        .await
        .json()
        .await
        .unwrap();
    let served = stats["completed"].as_u64().unwrap() + stats["cancelled"].as_u64().unwrap();
    assert_eq!(served, 1, "one call reached the upstream: {stats}");
}

#[tokio::test]
async fn metrics_after_a_session_cover_every_family_with_labels() {
    let mock = mock_upstream();
    let models = [
        "alpha:ttft_ms=20,token_ms=1,fault=429,fault_times=1,retry_after_ms=10",
        "beta:ttft_ms=40,token_ms=1",
        "gamma:fault=500",
    ];
    let server = Server::start(&panel_yaml(&mock.url, &models, ""), &[], &[]);
    let response = chat(&server.url, None, &question(true)).await;
    assert_eq!(response.status(), 200);
    let sse = parse_sse(&response.text().await.unwrap());
    assert!(sse.done);
    // The session is over when its record says so.
    let text = get(&format!("{}/metrics", server.url), None)
        .await
        .text()
        .await
        .unwrap();

    let p = ("provider", "chatcompletion");
    let alpha = ("model", models[0]);
    let beta = ("model", models[1]);
    let chat_ok = [
        ("route", "/v1/chat/completions"),
        ("method", "POST"),
        ("status", "200"),
    ];
    assert_eq!(
        sample(&text, "massgen_http_requests_total", &chat_ok),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "massgen_active_sessions", &[]),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "massgen_session_duration_seconds_count",
            &[("outcome", "completed")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "massgen_time_to_first_byte_seconds_count", &[]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "massgen_server_overhead_seconds_count", &[]),
        Some(1.0),
        "{text}"
    );
    let overhead = sample(&text, "massgen_server_overhead_seconds_sum", &[]).unwrap();
    let wall = sample(
        &text,
        "massgen_session_duration_seconds_sum",
        &[("outcome", "completed")],
    )
    .unwrap();
    assert!(
        overhead >= 0.0 && overhead < wall,
        "overhead {overhead} of {wall}"
    );
    assert!(
        sample(
            &text,
            "massgen_upstream_call_duration_seconds_count",
            &[p, beta, ("outcome", "ok")]
        )
        .unwrap()
            >= 2.0,
        "beta answers and votes: {text}"
    );
    assert!(
        sample(
            &text,
            "massgen_upstream_time_to_first_token_seconds_count",
            &[p, alpha]
        )
        .unwrap()
            >= 1.0
    );
    assert_eq!(
        sample(
            &text,
            "massgen_upstream_errors_total",
            &[p, ("kind", "server")]
        ),
        Some(1.0),
        "gamma failed after its retries: {text}"
    );
    // alpha's 429 once and gamma's 500 once (max_attempts 2) were retried.
    assert_eq!(
        sample(
            &text,
            "massgen_upstream_retries_total",
            &[p, ("reason", "rate_limited")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "massgen_upstream_retries_total",
            &[p, ("reason", "server")]
        ),
        Some(1.0)
    );
    let usage = &sse.events.last().unwrap()["usage"];
    let mut total = 0.0;
    for (family, field) in [
        ("massgen_upstream_input_tokens_total", "prompt_tokens"),
        ("massgen_upstream_output_tokens_total", "completion_tokens"),
        ("massgen_upstream_tokens_total", "total_tokens"),
    ] {
        let sum: f64 = [alpha, beta]
            .iter()
            .map(|m| sample(&text, family, &[p, *m]).unwrap())
            .sum();
        assert_eq!(
            sum,
            usage[field].as_f64().unwrap(),
            "{family} vs the client's usage"
        );
        total = sum;
    }
    assert!(total > 0.0);
    assert_eq!(
        sample(
            &text,
            "massgen_agents_failed_total",
            &[("kind", "upstream")]
        ),
        Some(1.0)
    );
    assert_eq!(sample(&text, "massgen_session_votes_count", &[]), Some(1.0));
    assert!(sample(&text, "massgen_session_votes_sum", &[]).unwrap() >= 2.0);
    assert_eq!(
        sample(&text, "massgen_session_restarts_count", &[]),
        Some(1.0)
    );
    assert!(text.contains("# TYPE massgen_http_request_duration_seconds histogram"));
}

#[tokio::test]
async fn session_record_and_live_events_match_what_the_client_received() {
    let mock = mock_upstream();
    let records = tempfile::tempdir().unwrap();
    let records_dir = records.path().to_string_lossy().to_string();
    let keys = format!("{KEY_1},{KEY_2}");
    // token_ms keeps the presentation streaming long enough to subscribe while it runs.
    let models = [
        "alpha:ttft_ms=300,token_ms=15",
        "beta:ttft_ms=300,token_ms=15",
    ];
    let server = Server::start(
        &panel_yaml(&mock.url, &models, ""),
        &["--records-dir", &records_dir],
        &[("MASSGEN_SERVER_API_KEYS", keys.as_str())],
    );
    let url = server.url.clone();
    let response = chat(&url, Some(KEY_1), &question(true)).await;
    assert_eq!(response.status(), 200);
    let id = response.headers()["x-massgen-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    // Subscribe while the session runs.
    let live = client()
        .get(format!("{url}/v1/sessions/{id}/events"))
        .bearer_auth(KEY_1)
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), 200);
    assert_eq!(live.headers()["x-massgen-session-status"], "running");
    assert!(
        live.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let (client_text, live_text) = tokio::join!(response.text(), live.text());
    let sse = parse_sse(&client_text.unwrap());
    assert!(sse.done);
    let live_events = record_events(&live_text.unwrap());

    // Someone else's key sees no such session; no key is a 401.
    let other = get(&format!("{url}/v1/sessions/{id}"), Some(KEY_2)).await;
    assert_eq!(other.status(), 404);
    assert_openai_error(&other.json().await.unwrap(), "session_not_found");
    assert_eq!(
        get(&format!("{url}/v1/sessions/{id}"), None).await.status(),
        401
    );

    let record: Value = get(&format!("{url}/v1/sessions/{id}"), Some(KEY_1))
        .await
        .json()
        .await
        .unwrap();
    let replay_text = get(&format!("{url}/v1/sessions/{id}/events"), Some(KEY_1))
        .await
        .text()
        .await
        .unwrap();
    let replayed = record_events(&replay_text);
    let replay_status = get(&format!("{url}/v1/sessions/{id}/events"), Some(KEY_1)).await;
    assert_eq!(
        replay_status.headers()["x-massgen-session-status"],
        "finished"
    );

    // Live and replayed streams are the same complete, ordered events. The live one has
    // every token delta with its own seq; the replay, once the database has the record,
    // has a call's deltas of one write merged (first seq, the same text in order).
    let seqs = |events: &[Value]| -> Vec<u64> {
        events.iter().map(|e| e["seq"].as_u64().unwrap()).collect()
    };
    assert_eq!(
        seqs(&live_events),
        (0..live_events.len() as u64).collect::<Vec<_>>()
    );
    let replayed_seqs = seqs(&replayed);
    assert!(replayed_seqs.windows(2).all(|w| w[0] < w[1]));
    let is_delta = |e: &&Value| e["type"].as_str().is_some_and(|t| t.ends_with("_delta"));
    let others = |events: &[Value]| -> Vec<Value> {
        events.iter().filter(|e| !is_delta(e)).cloned().collect()
    };
    assert_eq!(others(&live_events), others(&replayed));
    let text_of = |events: &[Value], kind: &str| -> String {
        events
            .iter()
            .filter(|e| e["type"] == kind)
            .map(|e| e["text"].as_str().unwrap())
            .collect()
    };
    assert_eq!(
        text_of(&live_events, "final_delta"),
        text_of(&replayed, "final_delta")
    );
    // A replayed delta starts where a live one did.
    for e in replayed.iter().filter(is_delta) {
        let seq = e["seq"].as_u64().unwrap() as usize;
        assert_eq!(live_events[seq]["at_ms"], e["at_ms"]);
        assert_eq!(live_events[seq]["type"], e["type"]);
    }
    assert_eq!(replayed[0]["type"], "session_started");
    assert!(replayed.iter().all(|e| e["session_id"] == id.as_str()));
    let last = replayed.last().unwrap();
    assert_eq!(last["type"], "session_completed");

    // ... and they match what the client got.
    let final_text: String = replayed
        .iter()
        .filter(|e| e["type"] == "final_delta")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(final_text, sse.content());
    let finish = &sse.events[sse.events.len() - 2];
    let metadata = &finish["massgen_metadata"];
    assert_eq!(
        last["summary"]["winner"]["agent_id"],
        metadata["winner"]["agent_id"]
    );
    let answered = sse.reasoning().matches(" answered (").count();
    assert_eq!(
        replayed.iter().filter(|e| e["type"] == "answer").count(),
        answered
    );
    let usage = &sse.events.last().unwrap()["usage"];
    assert_eq!(record["usage"]["total_tokens"], usage["total_tokens"]);
    assert_eq!(record["usage"]["input_tokens"], usage["prompt_tokens"]);

    assert_eq!(record["id"], id.as_str());
    assert_eq!(record["status"], "completed");
    assert_eq!(record["final_answer"].as_str().unwrap(), sse.content());
    assert_eq!(record["winner"]["agent_id"], metadata["winner"]["agent_id"]);
    assert_eq!(record["answers"].as_array().unwrap().len(), answered);
    assert!(!record["votes"].as_array().unwrap().is_empty());
    assert_eq!(record["agents"].as_array().unwrap().len(), 2);
    assert!(
        record["agents"][0]["usage"]["total_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(record["timings"]["duration_ms"].as_u64().is_some());

    // The files, once the session is over.
    let mut root = None;
    for _ in 0..100 {
        root = std::fs::read_dir(records.path())
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with(&id) && p.join("session.json").exists());
        if root.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let root = root.expect("record directory");
    let events: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("coordination_events.json")).unwrap(),
    )
    .unwrap();
    // Written from the live record: every delta.
    assert_eq!(events.as_array().unwrap().len(), live_events.len());
    let vote: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("vote.json")).unwrap()).unwrap();
    assert_eq!(vote["winner"], record["winner"]);
    assert_eq!(
        std::fs::read_to_string(root.join("final_answer.txt")).unwrap(),
        sse.content()
    );
    assert_eq!(
        std::fs::read_dir(root.join("agent_outputs"))
            .unwrap()
            .count(),
        2
    );
}

fn record_events(raw: &str) -> Vec<Value> {
    let mut events = Vec::new();
    for block in raw.split("\n\n") {
        let kind = block.lines().find_map(|l| l.strip_prefix("event: "));
        if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) {
            let event: Value = serde_json::from_str(data).unwrap();
            assert_eq!(Some(event["type"].as_str().unwrap()), kind);
            events.push(event);
        }
    }
    events
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_header_timeout() {
    let mock = mock_upstream();
    let server = Server::start(
        &panel_yaml(&mock.url, &FAST, ""),
        &["--header-timeout-seconds", "1"],
        &[],
    );
    let addr = server.url.trim_start_matches("http://").to_string();
    let handles: Vec<_> = ["", "GET /health HTTP/1.1\r\nHost: x\r\n"]
        .into_iter()
        .map(|partial| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut stream = std::net::TcpStream::connect(addr).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(15)))
                    .unwrap();
                stream.write_all(partial.as_bytes()).unwrap();
                let mut buf = Vec::new();
                // EOF (or a reset) before our read timeout: the server hung up.
                match stream.read_to_end(&mut buf) {
                    Ok(_) => true,
                    Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
                }
            })
        })
        .collect();
    for h in handles {
        assert!(
            h.join().unwrap(),
            "the server kept a silent connection open"
        );
    }
    assert_eq!(
        get(&format!("{}/health", server.url), None).await.status(),
        200
    );
}

/// A minimal OTLP/HTTP collector: stores every `POST /v1/traces` body.
async fn collector() -> (String, Arc<Mutex<Vec<bytes::Bytes>>>) {
    let bodies: Arc<Mutex<Vec<bytes::Bytes>>> = Arc::default();
    let sink = bodies.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: bytes::Bytes| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push(body);
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, bodies)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_export_carries_the_span_tree_with_genai_attributes() {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message;

    let (endpoint, bodies) = collector().await;
    let mock = mock_upstream();
    let mut server = Server::start(
        &panel_yaml(&mock.url, &FAST[..2], ""),
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_SERVICE_NAME", "massgen-under-test"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("RUST_LOG", "warn"),
        ],
    );
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let parent_id = "b7ad6b7169203331";
    let response = client()
        .post(format!("{}/v1/chat/completions", server.url))
        .header("traceparent", format!("00-{trace_id}-{parent_id}-01"))
        .json(&question(false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let session_id = response.headers()["x-massgen-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let body: Value = response.json().await.unwrap();
    // Shutdown flushes whatever the batch exporter still holds.
    assert!(
        tokio::task::spawn_blocking(move || server.stop())
            .await
            .unwrap()
    );

    let mut spans = Vec::new();
    let mut service = None;
    for raw in bodies.lock().unwrap().iter() {
        let request = ExportTraceServiceRequest::decode(raw.as_ref()).expect("OTLP protobuf");
        for rs in request.resource_spans {
            for kv in rs.resource.iter().flat_map(|r| r.attributes.iter()) {
                if kv.key == "service.name" {
                    service = kv.value.clone().and_then(|v| v.value);
                }
            }
            spans.extend(rs.scope_spans.into_iter().flat_map(|s| s.spans));
        }
    }
    assert_eq!(service, Some(Any::StringValue("massgen-under-test".into())));
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let attr = |span: &opentelemetry_proto::tonic::trace::v1::Span, key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone())
            .and_then(|v| v.value)
    };
    let request = spans
        .iter()
        .find(|s| s.name == "POST /v1/chat/completions")
        .unwrap_or_else(|| {
            panic!(
                "no request span in {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        });
    assert_eq!(
        hex(&request.trace_id),
        trace_id,
        "the client's trace is continued"
    );
    assert_eq!(hex(&request.parent_span_id), parent_id);
    let session = spans
        .iter()
        .find(|s| s.name == "massgen.session")
        .expect("session span");
    assert_eq!(session.parent_span_id, request.span_id);
    assert_eq!(
        attr(session, "massgen.session_id"),
        Some(Any::StringValue(session_id.clone()))
    );
    let calls: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    // Two answers, two votes, one presentation at least.
    assert!(calls.len() >= 5, "{}", calls.len());
    let (mut input, mut output) = (0, 0);
    for call in &calls {
        assert_eq!(hex(&call.trace_id), trace_id);
        assert_eq!(
            call.parent_span_id, session.span_id,
            "upstream calls nest in the session"
        );
        assert_eq!(
            attr(call, "gen_ai.operation.name"),
            Some(Any::StringValue("chat".into()))
        );
        assert_eq!(
            attr(call, "gen_ai.provider.name"),
            Some(Any::StringValue("chatcompletion".into()))
        );
        let Some(Any::StringValue(model)) = attr(call, "gen_ai.request.model") else {
            panic!("model")
        };
        assert_eq!(call.name, format!("chat {model}"));
        assert_eq!(
            attr(call, "massgen.session_id"),
            Some(Any::StringValue(session_id.clone()))
        );
        assert!(attr(call, "massgen.agent_id").is_some());
        let Some(Any::IntValue(i)) = attr(call, "gen_ai.usage.input_tokens") else {
            panic!("input tokens: {:?}", call.attributes)
        };
        let Some(Any::IntValue(o)) = attr(call, "gen_ai.usage.output_tokens") else {
            panic!("output tokens")
        };
        input += i;
        output += o;
    }
    assert_eq!(input, body["usage"]["prompt_tokens"].as_i64().unwrap());
    assert_eq!(output, body["usage"]["completion_tokens"].as_i64().unwrap());
}

#[tokio::test]
async fn healthcheck_subcommand_exits_0_on_a_healthy_server_and_1_otherwise() {
    let mock = mock_upstream();
    let server = Server::start(&panel_yaml(&mock.url, &FAST, ""), &[], &[]);
    let run = |url: String| {
        std::thread::spawn(move || {
            Command::new(bin())
                .args(["healthcheck", "--url", &url, "--timeout-seconds", "5"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap()
                .code()
        })
    };
    assert_eq!(
        run(format!("{}/health", server.url)).join().unwrap(),
        Some(0)
    );
    // A 404 and a closed port both fail the check.
    assert_eq!(run(format!("{}/nope", server.url)).join().unwrap(), Some(1));
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    assert_eq!(
        run(format!("http://{addr}/health")).join().unwrap(),
        Some(1)
    );
}

#[tokio::test]
async fn sigterm_lets_a_running_stream_finish_and_refuses_new_connections() {
    let mock = mock_upstream();
    let slow = ["t1:ttft_ms=700,token_ms=5", "t2:ttft_ms=800,token_ms=5"];
    let mut server = Server::start(
        &panel_yaml(&mock.url, &slow, ""),
        &["--shutdown-grace-seconds", "20"],
        &[],
    );
    let url = server.url.clone();
    let response = chat(&url, None, &question(true)).await;
    assert_eq!(response.status(), 200);
    // The stream is open (role chunk sent); now ask the server to stop.
    let stopper = tokio::task::spawn_blocking(move || {
        let ok = server.stop();
        (ok, server)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = client().get(format!("{url}/health")).send().await;
    assert!(
        refused.is_err(),
        "a new connection was accepted during shutdown"
    );
    let sse = parse_sse(&response.text().await.unwrap());
    assert!(sse.done, "the running stream was cut: {}", sse.raw);
    let finish = &sse.events[sse.events.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert!(sse.content().starts_with("[simulated final answer]"));
    let (exited_cleanly, _server) = stopper.await.unwrap();
    assert!(exited_cleanly);
}
