use std::time::Instant;

use super::*;
use serde_json::json;

async fn check(format: OutputFormat, answer: &str) -> Result<(), Rejection> {
    output(format, false).unwrap().check.check(answer).await
}

fn mismatch(r: Result<(), Rejection>) -> String {
    match r {
        Err(Rejection::Mismatch(problem)) => problem,
        other => panic!("not a mismatch: {other:?}"),
    }
}

#[tokio::test]
async fn answers_are_parsed_then_validated() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
        "required": ["n"], "additionalProperties": false});
    let format = json_schema(Some("count"), None, Some(&schema), true, "p").unwrap();
    assert_eq!(check(format.clone(), r#" {"n": 3} "#).await, Ok(()));
    let e = mismatch(check(format.clone(), r#"{"n": "3"}"#).await);
    assert!(e.contains("at /n") && e.contains("integer"), "{e}");
    let e = mismatch(check(format.clone(), r#"{}"#).await);
    assert!(e.contains("\"n\" is a required property"), "{e}");
    let e = mismatch(check(format, "Sure! {\"n\": 3}").await);
    assert!(e.starts_with("it is not valid JSON"), "{e}");
    assert_eq!(check(OutputFormat::JsonObject, r#"{"a": 1}"#).await, Ok(()));
    assert!(check(OutputFormat::JsonObject, "[1]").await.is_err());
}

#[tokio::test]
async fn formats_are_checked_and_unknown_ones_are_annotations() {
    let schema = json!({"type": "object", "properties": {
        "when": {"type": "string", "format": "date-time"},
        "who": {"type": "string", "format": "email"},
        "what": {"type": "string", "format": "x-custom"}}});
    let format = json_schema(None, None, Some(&schema), false, "p").unwrap();
    let good = r#"{"when": "2026-01-01T00:00:00Z", "who": "a@example.com", "what": "?"}"#;
    assert_eq!(check(format.clone(), good).await, Ok(()));
    let e = mismatch(check(format.clone(), r#"{"when": "yesterday"}"#).await);
    assert!(e.contains("date-time"), "{e}");
    let e = mismatch(check(format, r#"{"who": "nobody"}"#).await);
    assert!(e.contains("email"), "{e}");
}

#[tokio::test]
async fn a_backtracking_shaped_pattern_is_linear() {
    let branches: Vec<Value> = (0..limits::MAX_PATTERNS)
        .map(|n| json!({"pattern": format!("^(a|aa)+c{{0,{n}}}$")}))
        .collect();
    let schema = json!({"type": "object", "properties": {"a": {"anyOf": branches}}});
    let format = json_schema(None, None, Some(&schema), false, "p").unwrap();
    let answer = json!({"a": "a".repeat(5_000) + "b"}).to_string();
    let started = Instant::now();
    let e = mismatch(check(format, &answer).await);
    assert!(e.contains("does not match"), "{e}");
    // Generous (a debug build): a backtracking engine would not end at all.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn bad_names_schemas_patterns_and_sizes_are_400s() {
    let refused = |r: Result<OutputFormat, ApiError>| match r {
        Err(e) => {
            assert_eq!(e.code(), "invalid_value");
            e.message()
        }
        Ok(_) => panic!("accepted"),
    };
    let obj = json!({"type": "object"});
    refused(json_schema(Some("a b"), None, Some(&obj), false, "p"));
    refused(json_schema(Some("a"), None, None, false, "p"));
    refused(json_schema(
        Some("a"),
        None,
        Some(&json!({"type": 7})),
        false,
        "p",
    ));
    let remote = json!({"$ref": "https://example.com/schema.json"});
    refused(json_schema(Some("a"), None, Some(&remote), false, "p"));
    let big = json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)});
    refused(json_schema(Some("a"), None, Some(&big), false, "p"));
    assert!(json_schema(None, None, Some(&obj), false, "p").is_ok());

    // ECMA-262 syntax the linear-time engine has no equivalent for, named by path.
    let ecma = json!({"properties": {"x": {"pattern": "[^]"}}});
    let e = refused(json_schema(None, None, Some(&ecma), false, "p"));
    assert!(
        e.contains("/properties/x/pattern") && e.contains("linear-time"),
        "{e}"
    );
    // Within the pattern's length but past its compiled size.
    let huge = json!({"pattern": "((a{100}){100}){100}"});
    let e = refused(json_schema(None, None, Some(&huge), false, "p"));
    assert!(e.contains("/pattern") && e.contains("KiB"), "{e}");
}

#[test]
fn the_request_compiles_the_schema_and_the_session_reuses_it() {
    let schema = json!({"type": "object", "title": "reused-once"});
    let format = json_schema(None, None, Some(&schema), false, "p").unwrap();
    let first = output(format.clone(), false).unwrap();
    let second = output(format, false).unwrap();
    let text = schema.to_string();
    let held = COMPILED
        .lock()
        .unwrap()
        .iter()
        .filter(|(kept, _)| *kept == text)
        .count();
    assert_eq!(held, 1);
    assert!(format!("{first:?}{second:?}").contains("schema: true"));
}

/// The check runs off this (single-threaded) runtime: a timer still fires on time while it
/// runs, and past its budget the answer is "unchecked", not a mismatch.
#[tokio::test]
async fn a_check_past_its_budget_is_unchecked_and_never_blocks_the_runtime() {
    let branches: Vec<Value> = (0..limits::MAX_PATTERNS)
        .map(|n| json!({"pattern": format!(".{{1,200}}[a-z]{{1,100}}Q{{0,{n}}}")}))
        .collect();
    let schema = json!({"anyOf": branches});
    json_schema(None, None, Some(&schema), false, "p").unwrap();
    let check = JsonCheck {
        validator: Some(Arc::new(compile(&schema).unwrap())),
        budget: Duration::from_millis(1),
    };
    let answer = json!("é".repeat(20_000)).to_string();
    let started = Instant::now();
    let timer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        started.elapsed()
    });
    let verdict = check.check(&answer).await;
    match verdict {
        Err(Rejection::Unchecked(reason)) => assert!(reason.contains("too costly"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // Generous: the check itself takes a quarter of a second on a debug build.
    assert!(timer.await.unwrap() < Duration::from_millis(500));
}
