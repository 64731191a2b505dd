//! Issue 23 item 1 and item 9 (upstream errors, logs): a model name never changes where an
//! upstream call goes; clients never see upstream hosts or URLs; questions and answers stay
//! out of the log below `--debug`.
//!
//! The real binary serves; a scripted loopback listener (`support::native::serve`) stands in
//! for the Gemini and Azure upstreams and records the exact path and query of every call.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::native::{Reply, Upstream, serve};
use crate::support::serving::{
    Lines, assert_door_error, bin_from_env, serve_command, start_logged, start_up_error,
};
use crate::support::{self, FAST, Proc, mock_upstream, panel_yaml, post, write};

/// The names of the issue: each would leave its path segment if spliced in as it is.
const BAD_NAMES: [&str; 3] = [
    "../../../v1beta/cachedContents?x=1#",
    "../../../openai/batches?api-version=2024-10-21#",
    "a%2F..%2Fb",
];

const AZURE_VERSION: &str = "2024-10-21";

/// The binary under test; `MASSGEN_TEST_BIN` points at another build (the one before this
/// change, to see these tests fail there).
fn bin() -> String {
    bin_from_env("MASSGEN_TEST_BIN")
}

/// `massgen serve` with its stderr (the log) captured line by line.
struct Server {
    _proc: Proc,
    url: String,
    logs: Lines,
    _dir: tempfile::TempDir,
}

impl Server {
    /// `log_filter`: `RUST_LOG`, or `None` for the server's own default (info).
    fn start(panel: &str, flags: &[&str], log_filter: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = write(dir.path(), "team.yaml", panel);
        let mut cmd = serve_command(bin());
        cmd.arg("--config")
            .arg(&config)
            .args(flags)
            .current_dir(dir.path())
            .env("XDG_DATA_HOME", dir.path())
            .env(
                "MASSGEN_SERVER_RECORDS_DB",
                format!("sqlite://{}", dir.path().join("records.db").display()),
            )
            .env_remove("RUST_LOG")
            .env_remove("MASSGEN_SERVER_DEBUG")
            .env_remove("MASSGEN_SERVER_API_KEYS")
            .env_remove("MASSGEN_SERVER_DEFAULT_MODEL")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
        if let Some(filter) = log_filter {
            cmd.env("RUST_LOG", filter);
        }
        support::offline(&mut cmd);
        let (proc, logs) = start_logged(cmd, "massgen listening on");
        Self {
            url: proc.url.clone(),
            _proc: proc,
            logs,
            _dir: dir,
        }
    }

    /// The log so far, after a moment for the last lines to arrive.
    fn log(&self) -> String {
        std::thread::sleep(Duration::from_millis(300));
        self.logs.text()
    }
}

/// An upstream that fails every call with a 500 and its own words.
async fn failing_upstream() -> (String, Arc<Upstream>) {
    serve(vec![Reply::Status(
        500,
        vec![("content-type", "application/json".to_string())],
        r#"{"error":{"message":"upstream exploded","type":"server_error"}}"#.to_string(),
    )])
    .await
}

/// One Gemini agent and one Azure agent on `upstream`, each called once per turn.
fn gemini_and_azure(upstream: &str) -> String {
    format!(
        "agents:
  - id: gem
    backend:
      type: gemini
      model: gemini-2.0-flash
      base_url: {upstream}/v1beta
      api_key: test-gemini-key
  - id: az
    backend:
      type: azure_openai
      model: my-deployment
      base_url: {upstream}
      api_version: \"{AZURE_VERSION}\"
      api_key: test-azure-key
retry:
  max_attempts: 1
"
    )
}

/// The same question on each door, with `model` and `massgen` as given.
fn on_each_door(model: &str, massgen: Option<Value>) -> [(&'static str, Value); 3] {
    let messages = json!([{"role": "user", "content": "Why is the sky blue?"}]);
    let mut bodies = [
        (
            "/v1/chat/completions",
            json!({"model": model, "messages": messages}),
        ),
        (
            "/v1/responses",
            json!({"model": model, "input": "Why is the sky blue?"}),
        ),
        (
            "/v1/messages",
            json!({"model": model, "max_tokens": 64, "messages": messages}),
        ),
    ];
    if let Some(massgen) = massgen {
        for (_, body) in &mut bodies {
            body["massgen"] = massgen.clone();
        }
    }
    bodies
}

/// A 400 in the door's own shape: `invalid_value` on `model` (OpenAI shape), or Anthropic's
/// `invalid_request_error`.
async fn assert_refused(path: &str, what: &str, response: reqwest::Response) {
    let status = response.status().as_u16();
    let v: Value = response.json().await.unwrap();
    assert_eq!(status, 400, "{path} {what}: {v}");
    assert_door_error(path, &v, "invalid_value", "invalid_request_error", what);
    if path != "/v1/messages" {
        assert_eq!(v["error"]["param"], "model", "{path} {what}: {v}");
    }
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("path segment"), "{path} {what}: {v}");
}

/// Path and query of every call the upstream received, sorted, without repeats.
fn paths(upstream: &Upstream) -> Vec<String> {
    let mut seen: Vec<String> = upstream.requests().into_iter().map(|s| s.uri).collect();
    seen.sort();
    seen.dedup();
    seen
}

fn gemini_path(segment: &str) -> String {
    format!("/v1beta/models/{segment}:streamGenerateContent?alt=sse")
}

fn azure_path(segment: &str) -> String {
    format!("/openai/deployments/{segment}/chat/completions?api-version={AZURE_VERSION}")
}

#[tokio::test]
async fn a_request_chosen_model_name_is_one_path_segment_or_a_400_on_every_door() {
    let (upstream_url, upstream) = failing_upstream().await;
    let server = Server::start(
        &gemini_and_azure(&upstream_url),
        &["--allow-request-panels"],
        Some("error"),
    );
    let url = &server.url;

    // Refused names: a 400 on every door, for the override and for request panels, and
    // no upstream call at all.
    let request_panels = [
        "gemini/../../../admin?x=1#",
        "gemini/a%2F..%2Fb",
        "azure_openai/../../../openai/batches?api-version=2024-10-21#",
        "azure_openai/deployment/../../other",
    ];
    for name in BAD_NAMES {
        let model = format!("massgen/model:{name}");
        for (path, body) in on_each_door(&model, None) {
            assert_refused(path, name, post(url, path, None, &body).await).await;
        }
    }
    for entry in request_panels {
        for (path, body) in on_each_door("massgen", Some(json!({"models": [entry]}))) {
            assert_refused(path, entry, post(url, path, None, &body).await).await;
        }
    }
    assert_eq!(paths(&upstream), Vec::<String>::new());

    // Accepted names stay one segment: unreserved characters as they are, anything else
    // percent-encoded.
    let body = on_each_door("massgen/model:gemini-1.5_pro~x", None)[0]
        .1
        .clone();
    let status = post(url, "/v1/chat/completions", None, &body)
        .await
        .status();
    assert_eq!(status, 502, "the upstream fails every call");
    let body = on_each_door("massgen/model:tuned:v1@ä", None)[0].1.clone();
    let _ = post(url, "/v1/chat/completions", None, &body).await;
    let panel = json!({"models": ["gemini/pick=me", "azure_openai/dep+1"]});
    let body = on_each_door("massgen", Some(panel))[2].1.clone();
    let status = post(url, "/v1/messages", None, &body).await.status();
    assert_eq!(status, 502);
    let mut expected = vec![
        gemini_path("gemini-1.5_pro~x"),
        azure_path("gemini-1.5_pro~x"),
        gemini_path("tuned%3Av1%40%C3%A4"),
        azure_path("tuned%3Av1%40%C3%A4"),
        gemini_path("pick%3Dme"),
        azure_path("dep%2B1"),
    ];
    expected.sort();
    assert_eq!(paths(&upstream), expected);
}

#[test]
fn a_configured_model_name_that_leaves_its_segment_stops_the_start_up_naming_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let start = |config: &std::path::Path, extra: &[&str], what: &str| {
        let mut cmd = serve_command(bin());
        cmd.arg("--config")
            .arg(config)
            .args(extra)
            .current_dir(dir.path())
            .env("XDG_DATA_HOME", dir.path())
            .env_remove("MASSGEN_SERVER_DEFAULT_MODEL")
            .env_remove("MASSGEN_SERVER_API_KEYS")
            .env("RUST_LOG", "error");
        support::offline(&mut cmd);
        start_up_error(cmd, Duration::from_secs(20), what).1
    };
    for (kind, name) in [
        ("gemini", BAD_NAMES[0]),
        ("azure_openai", BAD_NAMES[1]),
        ("gemini", BAD_NAMES[2]),
    ] {
        let panel = format!(
            "agents:
  - id: honest-agent
    backend: {{type: chatcompletion, model: gpt-4o-mini, base_url: http://127.0.0.1:9/v1}}
  - id: sneaky-agent
    backend:
      type: {kind}
      model: \"{name}\"
      base_url: http://127.0.0.1:9
      api_key: k
"
        );
        let config = write(dir.path(), "bad.yaml", &panel);
        let stderr = start(&config, &[], &format!("{kind} {name}"));
        assert!(
            stderr.contains("sneaky-agent") && stderr.contains("path segment"),
            "{kind} {name}: {stderr}"
        );
    }

    // `--default-model` replaces every default agent's model: checked against each.
    let good = "agents:
  - id: gem-agent
    backend: {type: gemini, model: gemini-2.0-flash, base_url: http://127.0.0.1:9/v1beta, api_key: k}
";
    let config = write(dir.path(), "good.yaml", good);
    let stderr = start(
        &config,
        &["--default-model", BAD_NAMES[0]],
        "--default-model",
    );
    assert!(
        stderr.contains("--default-model") && stderr.contains("gem-agent"),
        "{stderr}"
    );
}

#[tokio::test]
async fn upstream_failures_tell_clients_no_host_port_or_url_but_the_log_does() {
    let (failing_url, _failing) = failing_upstream().await;
    // A loopback port where nothing listens.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let failing_port = failing_url.rsplit(':').next().unwrap().to_string();
    let panel = format!(
        "agents:
  - id: refused
    backend: {{type: chatcompletion, model: m1, base_url: \"http://127.0.0.1:{closed}/v1\"}}
  - id: broken
    backend: {{type: chatcompletion, model: m2, base_url: \"{failing_url}/v1\"}}
retry:
  max_attempts: 1
"
    );
    let server = Server::start(&panel, &[], None);
    for (path, body) in on_each_door("massgen", None) {
        let response = post(&server.url, path, None, &body).await;
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        assert_eq!(status, 502, "{path}: {text}");
        for leak in [
            "127.0.0.1",
            "http://",
            "localhost",
            &closed.to_string(),
            &failing_port,
        ] {
            assert!(!text.contains(leak), "{path} shows {leak:?}: {text}");
        }
        let v: Value = serde_json::from_str(&text).unwrap();
        let upstream = v["error"]["upstream"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(upstream.len(), 2, "{path}: {v}");
        let refused = upstream
            .iter()
            .find(|u| u["agent_id"] == "refused")
            .unwrap();
        assert_eq!(refused["kind"], "connection", "{v}");
        assert_eq!(refused["provider"], "chatcompletion", "{v}");
        let broken = upstream.iter().find(|u| u["agent_id"] == "broken").unwrap();
        assert_eq!(broken["status"], 500, "{v}");
        assert_eq!(broken["kind"], "server", "{v}");
        assert!(
            broken["message"]
                .as_str()
                .is_some_and(|m| m.contains("upstream exploded")),
            "{v}"
        );
    }
    // Where the calls went is the operator's to read.
    let log = server.log();
    assert!(
        log.contains(&format!("127.0.0.1:{closed}")),
        "the log names the refused upstream: {log}"
    );
}

/// A question and an answer nobody else would write: the simulator quotes the question in
/// its answers, and gives a schema's `const` as the structured answer.
const QUESTION: &str = "Describe the QUOKKAQUESTION-3141 migration";
const QUESTION_MARK: &str = "QUOKKAQUESTION-3141";
const ANSWER_MARK: &str = "ZEBRACORN-ANSWER-4711";

/// Runs the requests that log: an ordinary session, a structured answer that fails its
/// schema (the error quotes the answer), an upstream 500 retried.
async fn provoke_logs(url: &str) {
    let ask = |extra: Value| {
        let mut body = json!({
            "model": "massgen",
            "messages": [{"role": "user", "content": QUESTION}],
        });
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            body[k] = v;
        }
        body
    };
    let ok = post(url, "/v1/chat/completions", None, &ask(json!({}))).await;
    assert_eq!(ok.status(), 200);
    let text = ok.text().await.unwrap();
    assert!(text.contains(QUESTION_MARK), "the answer quotes it: {text}");

    // Valid JSON the simulator writes from the `const`, refused by `maxProperties`.
    let schema = json!({
        "type": "object",
        "required": ["secret"],
        "properties": {"secret": {"const": ANSWER_MARK}},
        "maxProperties": 0,
    });
    let format = json!({"response_format": {"type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema}}});
    let failed = post(url, "/v1/chat/completions", None, &ask(format)).await;
    let status = failed.status().as_u16();
    let text = failed.text().await.unwrap();
    assert_eq!(status, 502, "{text}");
    assert!(
        text.contains(ANSWER_MARK),
        "the client sees its answer: {text}"
    );

    let retried = ask(json!({"model": "massgen/model:sim:fault=500,fault_times=1,token_ms=1"}));
    let _ = post(url, "/v1/chat/completions", None, &retried).await;
}

#[tokio::test]
async fn questions_and_answers_reach_the_log_only_with_debug() {
    let mock = mock_upstream();
    let panel = panel_yaml(&mock.url, &FAST[..2], "");

    let server = Server::start(&panel, &[], None);
    provoke_logs(&server.url).await;
    let log = server.log();
    assert!(
        log.contains("session failed"),
        "failures are still logged: {log}"
    );
    assert!(log.contains("retrying upstream call"), "{log}");
    for text in [QUESTION_MARK, ANSWER_MARK] {
        assert!(
            !log.contains(text),
            "{text} in the log without --debug:\n{log}"
        );
    }
    drop(server);

    // With --debug the same texts are there: the check above can see them.
    let server = Server::start(&panel, &["--debug"], None);
    provoke_logs(&server.url).await;
    let log = server.log();
    assert!(log.contains(ANSWER_MARK), "with --debug: {log}");
}
