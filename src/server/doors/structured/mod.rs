//! Structured output on every door: the requested format in neutral form
//! ([`OutputFormat`]), bounded ([`limits`]) and compiled once, and the check of the final
//! answer ([`JsonCheck`]: parses as JSON, then validates against the client's schema with
//! the `jsonschema` crate). The engine calls the check; it knows no JSON Schema crate.
//!
//! No schema can stall the server: patterns run on the `regex` crate's linear-time
//! engine, [`limits`] bounds what a schema holds, and the check runs on a small set of
//! blocking threads ([`CHECK_THREADS`]) under a time budget ([`CHECK_BUDGET`]), never on
//! the async workers that serve every other request.

pub mod limits;

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use jsonschema::error::ValidationErrorKind;
use jsonschema::{PatternOptions, Validator};
use massgen_core::coordination::{AnswerCheck, Rejection, StructuredOutput};
use massgen_core::provider::OutputFormat;
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::server::error::ApiError;

/// Largest schema accepted, serialized: it is sent to every agent in its prompt and to
/// the presenter's upstream, and compiled here.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Longest schema name (OpenAI's bound).
const MAX_NAME_CHARS: usize = 64;
/// Validation errors quoted in the corrective call and the error message.
const MAX_ERRORS: usize = 5;
/// Compiled size of one pattern (the `regex` crate's `size_limit`), and of its lazy DFA's
/// cache: what bounds compiling it and the memory a schema can make the server hold.
pub const PATTERN_SIZE_LIMIT: usize = 64 * 1024;
/// Checks that run at once, each on a thread of tokio's blocking pool. A check past its
/// budget cannot be interrupted; it keeps its slot until it ends, so at most this many
/// threads are ever busy with checks.
pub const CHECK_THREADS: usize = 2;
/// How long one check may take, waiting for a slot included; past it the session fails
/// (`invalid_output`, "could not be checked") rather than retrying what would cost the same.
pub const CHECK_BUDGET: Duration = Duration::from_secs(5);
/// Compiled schemas kept by their text, so the request's schema is compiled once (when
/// the request is read) and a client that sends the same schema each time compiles it
/// once in all.
const COMPILED_KEPT: usize = 8;

static CHECKS: Semaphore = Semaphore::const_new(CHECK_THREADS);
static COMPILED: Mutex<VecDeque<(String, Arc<Validator>)>> = Mutex::new(VecDeque::new());

/// A `json_schema` format: `name` (letters, digits, `_` and `-`, at most 64; clients that
/// send none get `response`), the schema (an object, at most [`MAX_SCHEMA_BYTES`], within
/// the [`limits`], compiled now so a bad one is a 400), the optional description and
/// `strict`.
pub fn json_schema(
    name: Option<&str>,
    description: Option<&str>,
    schema: Option<&Value>,
    strict: bool,
    param: &'static str,
) -> Result<OutputFormat, ApiError> {
    let invalid = |message: String| ApiError::invalid(message, Some(param), "invalid_value");
    let name = name.unwrap_or("response");
    let valid_name = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid_name {
        return Err(invalid(format!(
            "'{param}' needs a name of 1 to {MAX_NAME_CHARS} letters, digits, '_' or '-'"
        )));
    }
    let Some(schema @ Value::Object(_)) = schema else {
        return Err(invalid(format!("'{param}' needs a JSON Schema object")));
    };
    let text = schema.to_string();
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(invalid(format!(
            "the JSON Schema in '{param}' is {} bytes; the limit is {MAX_SCHEMA_BYTES}",
            text.len()
        )));
    }
    limits::check(schema)
        .map_err(|e| invalid(format!("the JSON Schema in '{param}' is refused: {e}")))?;
    compiled(text, schema)
        .map_err(|e| invalid(format!("the JSON Schema in '{param}' is not usable: {e}")))?;
    Ok(OutputFormat::JsonSchema {
        name: name.to_string(),
        description: description.map(str::to_string),
        schema: schema.clone(),
        strict,
    })
}

/// A `json_schema` format from an object with OpenAI's keys (`name`, `description`,
/// `schema`, `strict`): Chat Completions' `response_format.json_schema`, Responses'
/// `text.format`.
pub fn openai_spec(
    spec: &serde_json::Map<String, Value>,
    param: &'static str,
) -> Result<OutputFormat, ApiError> {
    let text = |key: &str| spec.get(key).and_then(Value::as_str);
    json_schema(
        text("name"),
        text("description"),
        spec.get("schema"),
        spec.get("strict").and_then(Value::as_bool).unwrap_or(false),
        param,
    )
}

/// The format with its check, for the session. The schema passed [`json_schema`], so it
/// is in the limits and its compiled form is usually kept.
pub fn output(format: OutputFormat, streamed: bool) -> Result<StructuredOutput, ApiError> {
    let validator = match &format {
        OutputFormat::JsonObject => None,
        OutputFormat::JsonSchema { schema, .. } => {
            Some(compiled(schema.to_string(), schema).map_err(|_| ApiError::Internal)?)
        }
    };
    Ok(StructuredOutput {
        format,
        check: Arc::new(JsonCheck {
            validator,
            budget: CHECK_BUDGET,
        }),
        streamed,
    })
}

/// `schema` (serialized as `text`) compiled, from the kept ones when it is there.
fn compiled(text: String, schema: &Value) -> Result<Arc<Validator>, String> {
    let kept = |compiled: &VecDeque<(String, Arc<Validator>)>| {
        compiled
            .iter()
            .find(|(t, _)| *t == text)
            .map(|(_, v)| Arc::clone(v))
    };
    if let Some(validator) = kept(&COMPILED.lock().unwrap_or_else(PoisonError::into_inner)) {
        return Ok(validator);
    }
    let validator = Arc::new(off_the_worker(|| compile(schema))?);
    let mut compiled = COMPILED.lock().unwrap_or_else(PoisonError::into_inner);
    if kept(&compiled).is_none() {
        if compiled.len() >= COMPILED_KEPT {
            compiled.pop_front();
        }
        compiled.push_back((text, Arc::clone(&validator)));
    }
    Ok(validator)
}

/// Runs `work` (compiling a schema: under 100 ms within the limits, measured on a debug
/// build) after handing this async worker's other tasks to another thread, where the
/// runtime can (multi-threaded).
fn off_the_worker<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// Patterns on the linear-time `regex` engine, bounded in compiled size; `format`s are
/// checked (the common ones the crate knows: date-time, date, time, duration, email,
/// hostname, ipv4, ipv6, uri, uuid, …; unknown ones are annotations). No remote or file
/// `$ref`s: the crate's resolvers are not built in (no default features), so such a
/// schema fails to compile instead of making the server fetch.
fn compile(schema: &Value) -> Result<Validator, String> {
    let patterns = PatternOptions::regex()
        .size_limit(PATTERN_SIZE_LIMIT)
        .dfa_size_limit(PATTERN_SIZE_LIMIT);
    jsonschema::options()
        .with_pattern_options(patterns)
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| {
            let at = e.schema_path().to_string();
            match e.kind() {
                ValidationErrorKind::Format { format } if format == "regex" => format!(
                    "the pattern at {at} cannot run on the linear-time engine: it takes \
                     Rust's `regex` syntax (no backreferences, no look-around) and at most \
                     {} KiB compiled",
                    PATTERN_SIZE_LIMIT / 1024
                ),
                _ if at.is_empty() => e.to_string(),
                _ => format!("{e} (at {at})"),
            }
        })
}

/// The answer must be JSON: an object (JSON mode), or valid against the schema.
pub struct JsonCheck {
    validator: Option<Arc<Validator>>,
    /// [`CHECK_BUDGET`]; shorter in tests.
    budget: Duration,
}

impl fmt::Debug for JsonCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonCheck")
            .field("schema", &self.validator.is_some())
            .finish()
    }
}

impl AnswerCheck for JsonCheck {
    fn check<'a>(&'a self, answer: &'a str) -> BoxFuture<'a, Result<(), Rejection>> {
        Box::pin(async move {
            let Some(validator) = &self.validator else {
                // Parsing is linear in the answer: no need to leave this thread.
                return verdict(None, answer).map_err(Rejection::Mismatch);
            };
            let (validator, answer) = (Arc::clone(validator), answer.to_string());
            // The wait for a slot has its own budget: other requests' costly checks must
            // not make this one read as "too costly" (a check past its budget keeps its
            // slot until it ends).
            let slot = match tokio::time::timeout(self.budget, CHECKS.acquire()).await {
                Ok(Ok(slot)) => slot,
                Ok(Err(_)) => {
                    return Err(Rejection::Unchecked(
                        "the check of the JSON Schema failed".to_string(),
                    ));
                }
                Err(_) => {
                    tracing::warn!(
                        checks_at_once = CHECK_THREADS,
                        "a structured-output check could not start: every check slot is busy"
                    );
                    return Err(Rejection::Unchecked(format!(
                        "the server is busy checking other answers against their JSON Schemas \
                         (at most {CHECK_THREADS} at once) and this check could not start \
                         within {:?}; retry",
                        self.budget
                    )));
                }
            };
            let run = tokio::task::spawn_blocking(move || {
                let _slot = slot;
                verdict(Some(&validator), &answer)
            });
            match tokio::time::timeout(self.budget, run).await {
                Ok(Ok(verdict)) => verdict.map_err(Rejection::Mismatch),
                Ok(Err(_)) => {
                    tracing::error!("a structured-output check ended without a verdict (panicked)");
                    Err(Rejection::Unchecked(
                        "the check of the JSON Schema failed".to_string(),
                    ))
                }
                Err(_) => {
                    // It goes on in the background, holding its slot, until it ends.
                    tracing::warn!(
                        budget = ?self.budget,
                        "a structured-output check ran past its budget"
                    );
                    Err(Rejection::Unchecked(format!(
                        "the JSON Schema is too costly to check: the check did not end within {:?}",
                        self.budget
                    )))
                }
            }
        })
    }
}

/// `Err(problem)`, in words a model can act on, when `answer` does not fit.
fn verdict(validator: Option<&Validator>, answer: &str) -> Result<(), String> {
    let value: Value =
        serde_json::from_str(answer.trim()).map_err(|e| format!("it is not valid JSON ({e})"))?;
    let Some(validator) = validator else {
        return if value.is_object() {
            Ok(())
        } else {
            Err("it is JSON but not a JSON object".to_string())
        };
    };
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .take(MAX_ERRORS)
        .map(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            format!("at {at}: {e}")
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "it does not match the JSON Schema: {}",
            errors.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests;
