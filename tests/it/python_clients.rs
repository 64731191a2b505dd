//! Runs the official Python clients (tests/python, with pytest) against the real binary:
//! the `openai` SDK over Chat Completions and the Responses API, the OpenAI Agents SDK, and
//! the `anthropic` SDK over the Messages API, at the versions tests/python/requirements.txt
//! pins. `.ci/run` installs the packages and sets MASSGEN_REQUIRE_PYTHON=1 so that a missing
//! package fails instead of skipping. instructor runs from its own virtualenv
//! (tests/python/instructor/requirements.txt; its `jiter` pin conflicts with our `openai`),
//! whose interpreter is MASSGEN_INSTRUCTOR_PYTHON.

use std::process::Command;
use std::time::Duration;

use crate::support;

/// A file of demo sessions takes under a minute on 2 busy cores; the clients time out
/// each request at 60 s.
const PYTEST_TIMEOUT: Duration = Duration::from_secs(300);

/// The python interpreter, or `None` (skip) when the packages are missing.
fn python() -> Option<String> {
    python_with("")
}

/// [`python`], with `extra` modules too (`, mod`…): the packages only one test needs.
pub(crate) fn python_with(extra: &str) -> Option<String> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
    let probe = Command::new(&python)
        .args([
            "-c",
            &format!(
                "import openai, anthropic, agents, pytest, jsonschema, yaml, httpx, pydantic{extra}"
            ),
        ])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        assert!(
            std::env::var("MASSGEN_REQUIRE_PYTHON").is_err(),
            "python packages missing: pip install -r tests/python/requirements.txt"
        );
        println!("skipped: the packages of tests/python/requirements.txt are not installed");
        return None;
    }
    Some(python)
}

/// The interpreter of instructor's virtualenv (MASSGEN_INSTRUCTOR_PYTHON, which `.ci/run`
/// sets), or `None` (skip) when it is unset or lacks the packages.
fn instructor_python() -> Option<String> {
    let python = std::env::var("MASSGEN_INSTRUCTOR_PYTHON").ok();
    let ready = python.as_ref().is_some_and(|python| {
        Command::new(python)
            .args([
                "-c",
                "import instructor, openai, pytest, jsonschema, yaml, httpx",
            ])
            .status()
            .is_ok_and(|s| s.success())
    });
    if !ready {
        assert!(
            std::env::var("MASSGEN_REQUIRE_PYTHON").is_err(),
            "instructor's virtualenv missing: set MASSGEN_INSTRUCTOR_PYTHON to the python of a \
             venv with tests/python/instructor/requirements.txt installed (as .ci/run does)"
        );
        println!("skipped: MASSGEN_INSTRUCTOR_PYTHON is not a python with instructor installed");
        return None;
    }
    python
}

fn pytest(python: &str, file: &str, base_url: &str) {
    pytest_with(python, file, base_url, &[]);
}

fn pytest_with(python: &str, file: &str, base_url: &str, env: &[(&str, &str)]) {
    let mut cmd = Command::new(python);
    cmd.args(["-m", "pytest", "-q", "-p", "no:cacheprovider", file])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("MASSGEN_BASE_URL", base_url)
        .envs(env.iter().copied());
    support::offline(&mut cmd);
    let output = support::run_bounded(cmd, PYTEST_TIMEOUT);
    assert!(
        output.status.success(),
        "pytest {file} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
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
    let (_mock, server, _dir) = support::client_tool_server(&[]);
    pytest(&python, "tests/python/test_openai_tools.py", &server.url);
}

#[test]
fn openai_python_sdk_responses_api() {
    let Some(python) = python() else { return };
    let server = support::serve(&["--demo"]);
    pytest(&python, "tests/python/test_responses_sdk.py", &server.url);
}

#[test]
fn openai_python_sdk_and_agents_sdk_function_tools_over_responses() {
    let Some(python) = python() else { return };
    let (_mock, server, _dir) = support::client_tool_server(&[]);
    pytest(&python, "tests/python/test_responses_tools.py", &server.url);
}

#[test]
fn anthropic_python_sdk_messages_api() {
    let Some(python) = python() else { return };
    let key = "sk-mg-anthropic-sdk";
    let server = support::serve_with_keys(&["--demo".as_ref()], key);
    pytest_with(
        &python,
        "tests/python/test_anthropic_sdk.py",
        &server.url,
        &[("MASSGEN_API_KEY", key)],
    );
}

#[test]
fn anthropic_python_sdk_tool_use() {
    let Some(python) = python() else { return };
    let (_mock, server, _dir) = support::client_tool_server(&[]);
    pytest(&python, "tests/python/test_anthropic_tools.py", &server.url);
}

#[test]
fn openai_python_sdk_structured_output_parse() {
    let Some(python) = python() else { return };
    let server = support::serve(&["--demo"]);
    pytest(
        &python,
        "tests/python/test_structured_output.py",
        &server.url,
    );
}

#[test]
fn langchain_with_structured_output_json_schema_and_json_mode() {
    let Some(python) = python_with(", langchain_openai") else {
        return;
    };
    let server = support::serve(&["--demo"]);
    pytest(
        &python,
        "tests/python/test_langchain_structured.py",
        &server.url,
    );
}

#[test]
fn instructor_json_mode_and_json_schema_mode() {
    let Some(python) = instructor_python() else {
        return;
    };
    let server = support::serve(&["--demo"]);
    pytest(&python, "tests/python/test_instructor.py", &server.url);
}
