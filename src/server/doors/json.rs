//! The one way a door reads its body into its serde-derived request type: through
//! `serde_path_to_error`, so a 400 names the JSON path of the field at fault
//! (`input[2].content[0].type`), in the door's own error shape. A deserializer that checks
//! a value's range answers with the field's own 400 ([`fault`]), which is kept as it is.

use std::fmt;

use serde::de::DeserializeOwned;

use crate::server::error::ApiError;

/// [`read`], in the OpenAI doors' codes: a fault inside the conversation field `list`
/// (`messages`, `input`) is `invalid_message`, a value of the wrong JSON type elsewhere
/// `invalid_type`.
pub fn read_in<T: DeserializeOwned>(body: &[u8], list: &str) -> Result<T, ApiError> {
    read(body).map_err(|error| in_list(error, list))
}

/// [`read_in`] for a body another edge built as JSON (no bytes to parse).
pub fn read_value_in<T: DeserializeOwned>(
    body: serde_json::Value,
    list: &str,
) -> Result<T, ApiError> {
    if !body.is_object() {
        return Err(not_an_object());
    }
    serde_path_to_error::deserialize(body)
        .map_err(|e| {
            let path = e.path().to_string();
            let message = e.into_inner().to_string();
            if let Some(fault) = unpack(&message) {
                return fault;
            }
            let message = strip_position(&message);
            if path == "." || path.is_empty() {
                ApiError::invalid(message, None, "invalid_value")
            } else {
                ApiError::invalid_at(format!("'{path}': {message}"), path, "invalid_value")
            }
        })
        .map_err(|error| in_list(error, list))
}

/// The codes of a field's fault inside or outside the conversation field `list`.
fn in_list(error: ApiError, list: &str) -> ApiError {
    match error {
        ApiError::InvalidRequest {
            message,
            param: Some(param),
            code: "invalid_value",
        } => {
            let inside = param
                .strip_prefix(list)
                .is_some_and(|rest| rest.starts_with('['));
            let code = if inside {
                "invalid_message"
            } else if message.contains(": invalid type: ") {
                "invalid_type"
            } else {
                "invalid_value"
            };
            ApiError::InvalidRequest {
                message,
                param: Some(param),
                code,
            }
        }
        other => other,
    }
}

/// `body` as a `T`: invalid JSON, a non-object body, or a field of the wrong shape is a
/// 400 (`invalid_json` for the first two, `invalid_value` naming the path otherwise).
pub fn read<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    // Checked first so "not JSON" and "not an object" keep their own messages.
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => {}
        Some(_) if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok() => {
            return Err(not_an_object());
        }
        _ => {
            return Err(not_json(
                serde_json::from_slice::<serde::de::IgnoredAny>(body).err(),
            ));
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // serde_json reports some type mismatches (a number where a unit enum belongs) as
        // syntax errors: the body is JSON, so they are about the field at the path.
        let json = || serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok();
        if inner.is_eof() || inner.is_io() || (inner.is_syntax() && !json()) {
            return not_json(Some(inner));
        }
        let message = inner.to_string();
        if let Some(fault) = unpack(&message) {
            return fault;
        }
        let message = strip_position(&message);
        if path == "." || path.is_empty() {
            ApiError::invalid(message, None, "invalid_value")
        } else {
            ApiError::invalid_at(format!("'{path}': {message}"), path, "invalid_value")
        }
    })?;
    de.end().map_err(|e| not_json(Some(e)))?;
    Ok(value)
}

fn not_json(error: Option<serde_json::Error>) -> ApiError {
    let detail = error.map(|e| format!(": {e}")).unwrap_or_default();
    ApiError::invalid(
        format!("The request body is not valid JSON{detail}"),
        None,
        "invalid_json",
    )
}

fn not_an_object() -> ApiError {
    ApiError::invalid(
        "The request body must be a JSON object",
        None,
        "invalid_json",
    )
}

/// A field's own 400 raised inside a deserializer (a range check: `'temperature' must be a
/// number from 0 to 2`), carried through serde's error, which holds only text, to [`read`]:
/// the door answers with its message, `param` and code as they are, not serde's
/// `'path': message`. Only [`CODES`] travel.
pub fn fault<E: serde::de::Error>(error: ApiError) -> E {
    E::custom(Fault(error))
}

/// The codes a [`fault`] carries (a code is a `&'static str`: read back from this list).
const CODES: [&str; 3] = ["invalid_value", "invalid_type", "unsupported_parameter"];

/// Marks a [`fault`]'s text: a separator no message holds unescaped (JSON escapes it).
const MARK: char = '\u{1f}';

/// A [`fault`] as a value: the error of a `TryFrom` behind `#[serde(try_from)]`.
pub struct Fault(pub ApiError);

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.0.code();
        debug_assert!(CODES.contains(&code), "a fault's code travels: {code}");
        let param = self.0.param().unwrap_or_default();
        // Closed by a last mark: serde_json appends the position after it.
        write!(
            f,
            "{MARK}fault{MARK}{code}{MARK}{param}{MARK}{}{MARK}",
            self.0.message()
        )
    }
}

/// An error read from a value a body held (at `path` in it), raised again by the body's
/// deserializer: a [`fault`] as it is, another as a fault naming its path, worded as
/// [`read`] words it.
pub fn refault<E: serde::de::Error>(path: String, error: &serde_json::Error) -> E {
    let message = error.to_string();
    if unpack(&message).is_some() {
        return E::custom(message);
    }
    E::custom(Fault(ApiError::invalid_at(
        format!("'{path}': {}", strip_position(&message)),
        path,
        "invalid_value",
    )))
}

/// The [`fault`] whose text `message` begins with.
fn unpack(message: &str) -> Option<ApiError> {
    let rest = message.strip_prefix(MARK)?.strip_prefix("fault")?;
    let rest = rest.strip_prefix(MARK)?;
    let (code, rest) = rest.split_once(MARK)?;
    let (param, rest) = rest.split_once(MARK)?;
    let (text, _position) = rest.rsplit_once(MARK)?;
    let code = CODES.into_iter().find(|c| *c == code)?;
    Some(if param.is_empty() {
        ApiError::invalid(text, None, code)
    } else {
        ApiError::invalid_at(text, param.to_string(), code)
    })
}

/// serde_json ends data errors with " at line 1 column 57": the path says where.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) if message[at..].contains(" column ") => message[..at].to_string(),
        _ => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Body {
        model: String,
        #[serde(default)]
        input: Vec<Item>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Item {
        content: String,
    }

    fn param(body: &str) -> (Option<String>, String) {
        let e = read::<Body>(body.as_bytes()).unwrap_err();
        (e.param().map(str::to_string), e.message())
    }

    #[test]
    fn names_the_path_of_the_field_at_fault() {
        let (p, m) = param(r#"{"model":"m","input":[{"content":"a"},{"content":7}]}"#);
        assert_eq!(p.as_deref(), Some("input[1].content"));
        assert!(m.starts_with("'input[1].content': invalid type"), "{m}");
        assert!(!m.contains("line 1"), "{m}");
        let (p, m) = param(r#"{"input":[]}"#);
        assert_eq!(p, None);
        assert!(m.contains("missing field `model`"), "{m}");
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Roles {
        messages: Vec<Role>,
        kind: Option<Kind>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Role {
        role: Kind,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        User,
    }

    #[test]
    fn a_number_for_an_enum_is_a_fault_of_its_field_with_the_doors_codes() {
        let e = read_in::<Roles>(br#"{"messages":[{"role":5}]}"#, "messages").unwrap_err();
        assert_eq!(e.param(), Some("messages[0].role"), "{}", e.message());
        assert_eq!(e.code(), "invalid_message");
        let e = read_in::<Roles>(br#"{"messages":[],"kind":7}"#, "messages").unwrap_err();
        assert_eq!(e.param(), Some("kind"), "{}", e.message());
        let e = read_in::<Roles>(br#"{"messages":3}"#, "messages").unwrap_err();
        assert_eq!((e.param(), e.code()), (Some("messages"), "invalid_type"));
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Checked {
        #[serde(default, deserialize_with = "positive")]
        n: Option<i64>,
        #[serde(default)]
        list: Vec<Checked>,
    }

    fn positive<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        match Option::<i64>::deserialize(d)? {
            Some(n) if n < 1 => Err(fault(ApiError::invalid(
                "'n' must be positive (at line 3 column 4 of the manual)",
                Some("n"),
                "invalid_value",
            ))),
            n => Ok(n),
        }
    }

    #[test]
    fn a_fault_is_answered_as_raised_wherever_it_is() {
        let wanted = (
            Some("n"),
            "'n' must be positive (at line 3 column 4 of the manual)".to_string(),
            "invalid_value",
        );
        for body in [&br#"{"n": 0}"#[..], br#"{"list": [{"n": 1}, {"n": -2}]}"#] {
            let e = read::<Checked>(body).unwrap_err();
            assert_eq!((e.param(), e.message(), e.code()), wanted);
            let value: serde_json::Value = serde_json::from_slice(body).unwrap();
            let e = read_value_in::<Checked>(value, "list").unwrap_err();
            assert_eq!((e.param(), e.message(), e.code()), wanted);
        }
        // Another error carried out of a value keeps its path.
        let e: serde_json::Error = refault(
            "a.b".into(),
            &serde_json::from_str::<i64>("\"x\"").unwrap_err(),
        );
        let e = unpack(&e.to_string()).unwrap();
        assert_eq!(e.param(), Some("a.b"));
        assert!(
            e.message().starts_with("'a.b': invalid type"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn not_json_and_not_an_object_keep_their_messages() {
        let e = read::<Body>(b"[1]").unwrap_err();
        assert_eq!(e.message(), "The request body must be a JSON object");
        let e = read::<Body>(b"{\"model\":").unwrap_err();
        assert!(
            e.message()
                .starts_with("The request body is not valid JSON")
        );
        let e = read::<Body>(b"").unwrap_err();
        assert!(
            e.message()
                .starts_with("The request body is not valid JSON")
        );
        let e = read::<Body>(b"{\"model\":\"m\"} x").unwrap_err();
        assert!(
            e.message()
                .starts_with("The request body is not valid JSON")
        );
        assert!(read::<Body>(b" {\"model\":\"m\"} ").is_ok());
    }
}
