#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The web page in a real headless browser: `massgen serve --demo` (plus a six-agent panel
//! on the simulator in `--configs-dir`) with an API key, driven by `tests/ui/e2e.mjs`
//! (Playwright's `playwright-core` on Debian's Chromium). Skips with a reason when Node.js,
//! Chromium or `tests/ui/node_modules` is missing, unless `MASSGEN_REQUIRE_BROWSER=1`.

mod support;
#[path = "ui/server.rs"]
mod ui_server;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{mock_upstream, panel_yaml, write};

const KEY: &str = "sk-mg-ui-test-5d2e8c41";
/// The script stops itself at 55 s; this is the backstop.
const E2E_LIMIT: Duration = Duration::from_secs(60);

fn chromium() -> PathBuf {
    std::env::var_os("MASSGEN_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// Why the browser test cannot run here, if it cannot.
fn missing(ui_dir: &Path) -> Option<String> {
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !node.is_ok_and(|s| s.success()) {
        return Some("node is not installed".into());
    }
    if !chromium().is_file() {
        return Some(format!(
            "{} not found (apt-get install chromium, or set MASSGEN_CHROMIUM)",
            chromium().display()
        ));
    }
    if !ui_dir
        .join("node_modules/playwright-core/package.json")
        .is_file()
    {
        return Some(
            "tests/ui/node_modules/playwright-core missing (cd tests/ui && npm ci)".into(),
        );
    }
    None
}

#[test]
fn browser_follows_a_live_session_replays_it_and_shows_model_text_as_text() {
    let ui_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui");
    if let Some(why) = missing(&ui_dir) {
        assert!(
            std::env::var("MASSGEN_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "MASSGEN_REQUIRE_BROWSER=1 but the browser test cannot run: {why}"
        );
        eprintln!("SKIPPED browser e2e: {why}");
        return;
    }
    let mock = mock_upstream();
    let configs = tempfile::tempdir().unwrap();
    // The sixth agent answers in plain text instead of calling a workflow tool: its text
    // streams into its column (agent_delta), its turns are invalid and it fails.
    let six: Vec<String> = (1..=6)
        .map(|i| match i {
            6 => "sim6:policy=no_tool,words=12".to_string(),
            _ => format!("sim{i}:vote=agent1"),
        })
        .collect();
    let six: Vec<&str> = six.iter().map(String::as_str).collect();
    write(configs.path(), "six.yaml", &panel_yaml(&mock.url, &six, ""));
    let server = ui_server::serve_with_keys(
        &[
            "--demo".as_ref(),
            "--configs-dir".as_ref(),
            configs.path().as_os_str(),
        ],
        KEY,
    );
    let url = server.url.clone();

    let mut e2e = Command::new("node")
        .arg(ui_dir.join("e2e.mjs"))
        .arg(&url)
        .env("MASSGEN_UI_KEY", KEY)
        .env("MASSGEN_CHROMIUM", chromium())
        .stdin(Stdio::null())
        .spawn()
        .expect("start node");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = e2e.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > E2E_LIMIT {
            let _ = e2e.kill();
            let _ = e2e.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(server);
    let status = status.expect("the browser e2e ran over 60 s");
    assert!(
        status.success(),
        "browser e2e failed ({status}); see its output above"
    );
}
