//! Runs the official `openai` Python SDK (tests/python/test_openai_sdk.py, with pytest)
//! against the real binary. `.ci/run` installs the packages and sets
//! MASSGEN_REQUIRE_PYTHON=1 so that a missing package fails instead of skipping.

use std::process::Command;

use crate::support;

/// The python interpreter, or `None` (skip) when the packages are missing.
fn python() -> Option<String> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let probe = Command::new(&python)
        .args(["-c", "import openai, pytest, jsonschema, yaml, httpx"])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        assert!(
            std::env::var("MASSGEN_REQUIRE_PYTHON").is_err(),
            "python packages missing: pip install -r tests/python/requirements.txt"
        );
        println!("skipped: python packages openai/pytest/jsonschema/pyyaml/httpx not installed");
        return None;
    }
    Some(python)
}

fn pytest(python: &str, file: &str, base_url: &str) {
    let status = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", file])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("MASSGEN_BASE_URL", base_url)
        .status()
        .expect("run pytest");
    assert!(status.success(), "pytest {file} failed");
}

#[test]
fn openai_python_sdk_and_openapi_conformance() {
    let Some(python) = python() else { return };
    let server = support::serve(&["--demo"]);
    pytest(&python, "tests/python/test_openai_sdk.py", &server.url);
}

#[test]
fn openai_python_sdk_client_tool_calls() {
    let Some(python) = python() else { return };
    let mock = support::mock_upstream();
    let dir = tempfile::tempdir().expect("tempdir");
    let models = [
        "a:policy=client_tool,ttft_ms=10,token_ms=1",
        "b:policy=client_tool,ttft_ms=40,token_ms=1",
    ];
    let config = support::write(
        dir.path(),
        "tools.yaml",
        &support::panel_yaml(&mock.url, &models, ""),
    );
    let server = support::serve(&["--config", config.to_str().expect("utf-8 path")]);
    pytest(&python, "tests/python/test_openai_tools.py", &server.url);
}
