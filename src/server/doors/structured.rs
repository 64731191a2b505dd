//! Structured output on every door: the requested format in neutral form
//! ([`OutputFormat`]), bounded and compiled once, and the check of the final answer
//! ([`JsonCheck`]: parses as JSON, then validates against the client's schema with the
//! `jsonschema` crate). The engine calls the check; it knows no JSON Schema crate.

use std::fmt;
use std::sync::Arc;

use massgen_core::coordination::{AnswerCheck, StructuredOutput};
use massgen_core::provider::OutputFormat;
use serde_json::Value;

use crate::server::error::ApiError;

/// Largest schema accepted, serialized: it is sent to every agent in its prompt and to
/// the presenter's upstream, and compiled here.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Longest schema name (OpenAI's bound).
const MAX_NAME_CHARS: usize = 64;
/// Validation errors quoted in the corrective call and the error message.
const MAX_ERRORS: usize = 5;

/// A `json_schema` format: `name` (letters, digits, `_` and `-`, at most 64; clients that
/// send none get `response`), the schema (an object, at most [`MAX_SCHEMA_BYTES`],
/// compiled now so a bad one is a 400), the optional description and `strict`.
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
    let size = schema.to_string().len();
    if size > MAX_SCHEMA_BYTES {
        return Err(invalid(format!(
            "the JSON Schema in '{param}' is {size} bytes; the limit is {MAX_SCHEMA_BYTES}"
        )));
    }
    compile(schema)
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

/// The format with its check, for the session.
pub fn output(format: OutputFormat, streamed: bool) -> Result<StructuredOutput, ApiError> {
    let validator = match &format {
        OutputFormat::JsonObject => None,
        OutputFormat::JsonSchema { schema, .. } => {
            Some(compile(schema).map_err(|_| ApiError::Internal)?)
        }
    };
    Ok(StructuredOutput {
        format,
        check: Arc::new(JsonCheck { validator }),
        streamed,
    })
}

/// No remote or file `$ref`s: the crate's resolvers are not built in (no default
/// features), so such a schema fails to compile instead of making the server fetch.
fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::validator_for(schema).map_err(|e| e.to_string())
}

/// The answer must be JSON: an object (JSON mode), or valid against the schema.
pub struct JsonCheck {
    validator: Option<jsonschema::Validator>,
}

impl fmt::Debug for JsonCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonCheck")
            .field("schema", &self.validator.is_some())
            .finish()
    }
}

impl AnswerCheck for JsonCheck {
    fn check(&self, answer: &str) -> Result<(), String> {
        let value: Value = serde_json::from_str(answer.trim())
            .map_err(|e| format!("it is not valid JSON ({e})"))?;
        let Some(validator) = &self.validator else {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(format: OutputFormat, answer: &str) -> Result<(), String> {
        output(format, false).unwrap().check.check(answer)
    }

    #[test]
    fn answers_are_parsed_then_validated() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
            "required": ["n"], "additionalProperties": false});
        let format = json_schema(Some("count"), None, Some(&schema), true, "p").unwrap();
        assert_eq!(check(format.clone(), r#" {"n": 3} "#), Ok(()));
        let e = check(format.clone(), r#"{"n": "3"}"#).unwrap_err();
        assert!(e.contains("at /n") && e.contains("integer"), "{e}");
        let e = check(format.clone(), r#"{}"#).unwrap_err();
        assert!(e.contains("\"n\" is a required property"), "{e}");
        let e = check(format, "Sure! {\"n\": 3}").unwrap_err();
        assert!(e.starts_with("it is not valid JSON"), "{e}");
        assert_eq!(check(OutputFormat::JsonObject, r#"{"a": 1}"#), Ok(()));
        assert!(check(OutputFormat::JsonObject, "[1]").is_err());
    }

    #[test]
    fn bad_names_schemas_and_sizes_are_400s() {
        let code = |r: Result<OutputFormat, ApiError>| r.err().map(|e| e.code());
        let obj = json!({"type": "object"});
        assert_eq!(
            code(json_schema(Some("a b"), None, Some(&obj), false, "p")),
            Some("invalid_value")
        );
        assert_eq!(
            code(json_schema(Some("a"), None, None, false, "p")),
            Some("invalid_value")
        );
        assert_eq!(
            code(json_schema(
                Some("a"),
                None,
                Some(&json!({"type": 7})),
                false,
                "p"
            )),
            Some("invalid_value")
        );
        let remote = json!({"$ref": "https://example.com/schema.json"});
        assert_eq!(
            code(json_schema(Some("a"), None, Some(&remote), false, "p")),
            Some("invalid_value")
        );
        let big = json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)});
        assert_eq!(
            code(json_schema(Some("a"), None, Some(&big), false, "p")),
            Some("invalid_value")
        );
        assert_eq!(code(json_schema(None, None, Some(&obj), false, "p")), None);
    }
}
