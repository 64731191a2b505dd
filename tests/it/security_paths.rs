//! Issue 23 item 5 and item 9 (images, vision): a request cannot read what the server wrote
//! nor its environment (`massgen/path:` only under the configs root, never where the server
//! writes, and only the variables the operator lists); images must parse as what they
//! claim; request-chosen models see images by the same table as configured ones.
//!
//! The caller's host is the simulator served in this process behind a layer that records
//! every request's `Authorization` header: a secret that reached it would be there.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::support::native::PNG_BASE64;
use crate::support::serving::{serve_command, serve_router, start_up_error};
use crate::support::{FAST, Proc, Setup, bin, get_json, offline, panel_yaml, post, start, write};

const SECRET: &str = "s3cr3t-from-the-servers-environment";
const PROVIDER_KEY: &str = "sk-the-operators-own-provider-key";
const ALLOWED: &str = "allowed-key-value";

/// The `Authorization` header of every request the caller's host received.
type Seen = Arc<Mutex<Vec<String>>>;

async fn record(State(seen): State<Seen>, request: Request, next: Next) -> Response {
    let auth = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    seen.lock().unwrap().push(auth);
    next.run(request).await
}

/// A server with `--configs-dir root --allow-config-paths --records-dir records`, `SECRET`
/// and `OPENAI_API_KEY` in its environment, `ALLOWED_KEY` listed by --config-paths-env.
struct Attack {
    server: Proc,
    host: String,
    seen: Seen,
    dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Attack {
    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
    fn records(&self) -> PathBuf {
        self.dir.path().join("records")
    }
    fn outside(&self) -> PathBuf {
        self.dir.path().join("outside")
    }

    /// A panel on the caller's host whose backend has `backend` (YAML flow-map entries).
    fn panel(&self, backend: &str) -> String {
        format!(
            "agents:\n  - id: leak\n    backend: {{type: chatcompletion, base_url: \"{}/v1\", model: \"leak:ttft_ms=1,token_ms=1\", {backend}}}\n",
            self.host
        )
    }

    fn auth_seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    async fn ask(&self, model: &str) -> (u16, Value) {
        let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
        let r = post(&self.server.url, "/v1/chat/completions", None, &body).await;
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// A 400 with `code`, `param: "model"`, that reveals no secret.
    async fn refused(&self, model: &str, code: &str) -> String {
        let (status, body) = self.ask(model).await;
        assert_eq!(status, 400, "{model}: {body}");
        assert_eq!(body["error"]["code"], code, "{model}: {body}");
        assert_eq!(body["error"]["param"], "model", "{model}: {body}");
        let text = body.to_string();
        assert!(
            !text.contains(SECRET) && !text.contains(PROVIDER_KEY),
            "{text}"
        );
        body["error"]["message"].as_str().unwrap_or("").to_string()
    }
}

async fn attack() -> Attack {
    let seen: Seen = Arc::default();
    let router = massgen_simulator::router()
        .layer(middleware::from_fn_with_state(Arc::clone(&seen), record));
    let (host, stop) = serve_router(router).await;
    let dir = tempfile::tempdir().unwrap();
    for sub in ["root", "records", "outside"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    let root = dir.path().join("root");
    // The operator's own panel: no secrets.
    write(
        &root,
        "team.yaml",
        &panel_yaml(
            &host,
            &["sim:ttft_ms=1,token_ms=1", "sim2:ttft_ms=2,token_ms=1"],
            "",
        ),
    );
    let mut cmd = serve_command(bin());
    cmd.arg("--configs-dir")
        .arg(&root)
        .arg("--allow-config-paths")
        .arg("--records-dir")
        .arg(dir.path().join("records"))
        .args(["--config-paths-env", "ALLOWED_KEY"])
        .env("SECRET", SECRET)
        .env("OPENAI_API_KEY", PROVIDER_KEY)
        .env("ALLOWED_KEY", ALLOWED);
    let server = tokio::task::spawn_blocking(move || start(cmd, "massgen listening on"))
        .await
        .unwrap();
    Attack {
        server,
        host,
        seen,
        dir,
        _stop: stop,
    }
}

/// Issue 23's attack: a config the caller controls (outside the root, reached by `..` or a
/// symlink, or in the records folder the server writes) with `api_key: ${SECRET}` and the
/// caller's `base_url`. Every path is a 400 and the caller's host sees nothing.
#[tokio::test]
async fn path_configs_outside_the_root_or_where_the_server_writes_are_refused() {
    let a = attack().await;
    let evil = a.panel("api_key: \"${SECRET}\"");
    let outside = write(&a.outside(), "evil.yaml", &evil);
    write(&a.records(), "evil.yaml", &evil);
    std::os::unix::fs::symlink(&outside, a.root().join("link.yaml")).unwrap();
    std::os::unix::fs::symlink(a.records(), a.root().join("records")).unwrap();
    std::os::unix::fs::symlink(a.outside(), a.root().join("out")).unwrap();
    let records_evil = a.records().join("evil.yaml");
    for path in [
        outside.display().to_string(),
        "../outside/evil.yaml".to_string(),
        format!("{}/../outside/evil.yaml", a.root().display()),
        "link.yaml".to_string(),
        "out/evil.yaml".to_string(),
        "records/evil.yaml".to_string(),
        records_evil.display().to_string(),
        "/etc/passwd".to_string(),
    ] {
        a.refused(&format!("massgen/path:{path}"), "config_path_not_allowed")
            .await;
    }
    // Not a YAML file, even under the root.
    write(&a.root(), "notes.txt", &evil);
    let message = a
        .refused("massgen/path:notes.txt", "config_path_not_allowed")
        .await;
    assert!(message.contains(".yaml"), "{message}");

    // What the server itself wrote for a session it ran (final_answer.txt and the rest).
    let (status, body) = a.ask("massgen/team").await;
    assert_eq!(status, 200, "{body}");
    // The files are written as the session ends, maybe just after the response.
    let mut written = Vec::new();
    for _ in 0..100 {
        written = files_under(&a.records(), 20);
        if written
            .iter()
            .any(|p| p.file_name().is_some_and(|n| n == "final_answer.txt"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        written
            .iter()
            .any(|p| p.file_name().is_some_and(|n| n == "final_answer.txt")),
        "{written:?}"
    );
    for file in &written {
        a.refused(
            &format!("massgen/path:{}", file.display()),
            "config_path_not_allowed",
        )
        .await;
    }
    // Only the operator's own session reached the host, without a key.
    assert!(
        a.auth_seen().iter().all(|h| !h.contains(SECRET)),
        "{:?}",
        a.auth_seen()
    );
}

/// A config under the root reads only the variables --config-paths-env lists: `${SECRET}`
/// (with or without a default) is a 400 naming SECRET, a provider's implicit key variable
/// is not read, and a listed variable works.
#[tokio::test]
async fn path_configs_expand_only_the_variables_the_operator_lists() {
    let a = attack().await;
    write(&a.root(), "leak.yaml", &a.panel("api_key: \"${SECRET}\""));
    write(
        &a.root(),
        "leak_default.yaml",
        &a.panel("api_key: \"x${SECRET:-none}\""),
    );
    // The variable hidden in a section the server ignores still names it.
    write(
        &a.root(),
        "leak_elsewhere.yaml",
        &format!("{}ui:\n  title: \"${{SECRET}}\"\n", a.panel("api_key: k")),
    );
    for name in ["leak", "leak_default", "leak_elsewhere"] {
        let message = a
            .refused(
                &format!("massgen/path:{name}.yaml"),
                "config_variable_not_allowed",
            )
            .await;
        assert!(message.contains("SECRET"), "{message}");
        assert!(message.contains("--config-paths-env"), "{message}");
    }
    // `type: openai` without `api_key` would read OPENAI_API_KEY: not for a request's file.
    write(
        &a.root(),
        "implicit.yaml",
        &format!(
            "agents:\n  - id: leak\n    backend: {{type: openai, base_url: \"{}/v1\", model: \"leak:ttft_ms=1\"}}\n",
            a.host
        ),
    );
    let (status, body) = a.ask("massgen/path:implicit.yaml").await;
    assert_ne!(status, 200, "{body}");
    assert!(!body.to_string().contains(PROVIDER_KEY), "{body}");
    assert!(a.auth_seen().is_empty(), "{:?}", a.auth_seen());

    // The listed variable is expanded and sent; nothing else ever was.
    write(
        &a.root(),
        "ok.yaml",
        &a.panel("api_key: \"${ALLOWED_KEY}\""),
    );
    let (status, body) = a.ask("massgen/path:ok.yaml").await;
    assert_eq!(status, 200, "{body}");
    let seen = a.auth_seen();
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|h| h == &format!("Bearer {ALLOWED}")),
        "{seen:?}"
    );
    // An absolute path under the root is the same file.
    let absolute = a.root().join("ok.yaml");
    let (status, body) = a.ask(&format!("massgen/path:{}", absolute.display())).await;
    assert_eq!(status, 200, "{body}");
}

/// Every file under `dir` (at most `depth` levels), sorted.
fn files_under(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![(dir.to_path_buf(), 0)];
    while let Some((d, level)) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() && level < depth {
                todo.push((path, level + 1));
            } else if path.is_file() {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// `massgen serve ARGS` in `cwd`, which must exit 2 before listening; its stderr.
fn refused_start(cwd: &Path, args: &[&str], records_db: &str) -> String {
    let mut cmd = serve_command(bin());
    cmd.args(args)
        .current_dir(cwd)
        .env("MASSGEN_SERVER_RECORDS_DB", records_db)
        .env("RUST_LOG", "error");
    offline(&mut cmd);
    start_up_error(cmd, Duration::from_secs(20), &format!("{args:?}")).1
}

#[test]
fn config_paths_need_a_root_apart_from_what_the_server_writes() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    std::fs::create_dir_all(cwd.join("configs/records")).unwrap();
    std::fs::create_dir_all(cwd.join("configs/db")).unwrap();
    write(
        &cwd.join("configs"),
        "team.yaml",
        &panel_yaml("http://127.0.0.1:9", &FAST, ""),
    );
    let memory = "memory";
    // The records folder reached through a symlink (`rec`) is the same folder.
    std::os::unix::fs::symlink(cwd.join("configs/records"), cwd.join("rec")).unwrap();
    let db = format!("sqlite://{}", cwd.join("configs/db/records.db").display());
    let team = "configs/team.yaml";
    let allow = "--allow-config-paths";
    let cases: [(Vec<&str>, &str, &str); 6] = [
        (vec!["--config", team, allow], memory, "--config-paths-root"),
        (
            vec![allow, "--config-paths-root", "missing", "--config", team],
            memory,
            "missing",
        ),
        (
            vec![
                allow,
                "--configs-dir",
                "configs",
                "--records-dir",
                "configs/records",
            ],
            memory,
            "--records-dir",
        ),
        (
            vec![
                allow,
                "--configs-dir",
                "configs",
                "--records-dir",
                "rec/sub",
            ],
            memory,
            "--records-dir",
        ),
        (vec![allow, "--configs-dir", "configs"], &db, "--records-db"),
        // The root inside the records folder is refused too.
        (
            vec![
                allow,
                "--config-paths-root",
                "configs/records",
                "--config",
                team,
                "--records-dir",
                "configs",
            ],
            memory,
            "--records-dir",
        ),
    ];
    for (args, records_db, named) in cases {
        let e = refused_start(cwd, &args, records_db);
        assert!(e.contains(named), "{e}");
    }
}

// ---------------------------------------------------------------------------------------
// Images (item 9)

/// A PNG signature and IHDR chunk of `width` x `height` (the CRC is not checked by anyone
/// who reads only the header).
fn png_header(width: u32, height: u32) -> String {
    let mut bytes = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
    bytes.extend_from_slice(&width.to_be_bytes());
    bytes.extend_from_slice(&height.to_be_bytes());
    bytes.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
    STANDARD.encode(bytes)
}

fn image_question(media_type: &str, data: &str, models: Option<Value>) -> Value {
    let mut body = json!({"model": "massgen", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": format!("data:{media_type};base64,{data}")}}]}]});
    if let Some(models) = models {
        body["massgen"] = json!({ "models": models });
    }
    body
}

#[tokio::test]
async fn images_must_parse_as_their_type_with_sane_dimensions() {
    let setup = Setup::with_panel(|url| panel_yaml(url, &FAST, ""), &[]);
    let url = &setup.server.url;
    let signature_only = STANDARD.encode(b"\x89PNG\r\n\x1a\n");
    let padded_signature = STANDARD.encode(b"\x89PNG\r\n\x1a\n0123456789abcdef0123456789");
    let jpeg_start = STANDARD.encode(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00");
    let webp_shell = STANDARD.encode(b"RIFF\x04\x00\x00\x00WEBP");
    let cases = [
        ("image/png", signature_only.clone(), "invalid_image"),
        ("image/png", padded_signature, "invalid_image"),
        ("image/png", png_header(0, 10), "invalid_image"),
        ("image/png", png_header(10, 0), "invalid_image"),
        ("image/jpeg", jpeg_start, "invalid_image"),
        ("image/webp", webp_shell, "invalid_image"),
        ("image/webp", PNG_BASE64.to_string(), "invalid_image"),
        ("image/png", png_header(9000, 10), "image_too_large"),
        ("image/png", png_header(7500, 7500), "image_too_large"),
    ];
    for (media_type, data, code) in cases {
        let r = post(
            url,
            "/v1/chat/completions",
            None,
            &image_question(media_type, &data, None),
        )
        .await;
        assert_eq!(r.status(), 400, "{media_type} {data}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{media_type} {data}: {body}");
        assert_eq!(body["error"]["param"], "messages", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("messages[0]"), "{message}");
    }
    // The Messages door refuses in its own shape.
    let r = post(
        url,
        "/v1/messages",
        None,
        &json!({"model": "massgen", "max_tokens": 64, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": signature_only}}]}]}),
    )
    .await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    // A real image within the bounds passes (1 x 1, and 7000 x 7000 = 49 megapixels).
    for data in [PNG_BASE64.to_string(), png_header(7000, 7000)] {
        let r = post(
            url,
            "/v1/chat/completions",
            None,
            &image_question("image/png", &data, None),
        )
        .await;
        assert_eq!(r.status(), 200, "{data}");
    }
}

/// Who saw the images of session `id`, by agent id: (seen_by, not_seen_by).
async fn seen_by(url: &str, body: &Value) -> (Vec<String>, Vec<String>) {
    let id = body["massgen_metadata"]["session_id"].as_str().unwrap();
    let record = get_json(&format!("{url}/v1/sessions/{id}")).await;
    let ids = |key: &str| -> Vec<String> {
        record["images"][key]
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|a| a["agent_id"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    (ids("seen_by"), ids("not_seen_by"))
}

/// The JSON answer to `body` on Chat Completions, which must be a 200.
async fn answered(url: &str, body: &Value) -> Value {
    let r = post(url, "/v1/chat/completions", None, body).await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// Models a request chooses (`massgen.models`, `massgen/model:`) see images by the vision
/// table, as configured agents do, not by the configured agent they borrow a backend from.
#[tokio::test]
async fn request_chosen_models_see_images_by_the_vision_table() {
    // Two blind configured agents (the simulator's model names are in no vision family);
    // the OpenAI one lends its backend to `openai/…` entries.
    let panel = |url: &str| {
        format!(
            "agents:
  - id: cc
    backend: {{type: chatcompletion, base_url: \"{url}/v1\", model: \"{}\"}}
  - id: gpt
    backend: {{type: openai, base_url: \"{url}/v1\", api_key: sim, model: \"{}\"}}
",
            FAST[0], FAST[1]
        )
    };
    let setup = Setup::with_panel(panel, &["--allow-request-panels"]);
    let url = &setup.server.url;
    let seeing = "openai/gpt-4o:ttft_ms=5,token_ms=1";
    let blind = "openai/gpt-3.5-turbo:ttft_ms=10,token_ms=1";
    let body = image_question("image/png", PNG_BASE64, Some(json!([seeing, blind])));
    let v = answered(url, &body).await;
    assert_eq!(
        seen_by(url, &v).await,
        (vec![seeing.into()], vec![blind.into()])
    );

    // The override: every agent of the (blind) default panel becomes gpt-4o.
    let mut body = image_question("image/png", PNG_BASE64, None);
    body["model"] = json!("massgen/model:gpt-4o:ttft_ms=5,token_ms=1");
    let v = answered(url, &body).await;
    let (seen, not_seen) = seen_by(url, &v).await;
    assert_eq!((seen.len(), not_seen.len()), (2, 0), "{v}");
    // And a blind override model is told, not shown.
    body["model"] = json!("massgen/model:gpt-3.5-turbo:ttft_ms=5,token_ms=1");
    let v = answered(url, &body).await;
    let (seen, not_seen) = seen_by(url, &v).await;
    assert_eq!((seen.len(), not_seen.len()), (0, 2), "{v}");
}
