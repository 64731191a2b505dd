#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Runs the official `openai` Python SDK (tests/python/test_openai_sdk.py, with pytest)
//! against the real binary. `.ci/run` installs the packages and sets
//! MASSGEN_REQUIRE_PYTHON=1 so that a missing package fails instead of skipping.

mod support;

use std::process::Command;

#[test]
fn openai_python_sdk_and_openapi_conformance() {
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
        return;
    }
    let server = support::serve(&["--demo"]);
    let status = Command::new(&python)
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/python/test_openai_sdk.py",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("MASSGEN_BASE_URL", &server.url)
        .status()
        .expect("run pytest");
    assert!(status.success(), "pytest failed");
}
