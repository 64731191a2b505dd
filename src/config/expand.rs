//! `${VAR}` / `${VAR:-default}` expansion of config strings.
//!
//! Rules (as in shells and docker compose, minus nesting):
//! - `${VAR}`: the variable's value; unset is an error naming `VAR`.
//! - `${VAR:-default}`: the value, or `default` when `VAR` is unset *or empty*. The default is
//!   taken literally (no nested `${…}`).
//! - `$$` is a literal `$`; any other `$` (e.g. `$5`, `cost: $`) is left as it is, so prices
//!   and regexes in system messages need no escaping.

use serde_json::Value;

use super::Env;

/// Why a string could not be expanded (the caller adds file and key path).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    #[error("environment variable {0} is not set (use ${{{0}:-default}} for a default)")]
    Unset(String),
    #[error("unterminated '${{' (missing '}}')")]
    Unterminated,
    #[error("invalid variable name '{0}' in '${{…}}'")]
    BadName(String),
}

/// Expands one string.
pub fn expand_str(input: &str, env: &Env) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body.find('}').ok_or(ExpandError::Unterminated)?;
            out.push_str(&substitute(&body[..end], env)?);
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The variables [`expand_str`] would read in `input` (`${VAR}` and `${VAR:-default}`
/// alike), by the same grammar: `$$` escapes, other `$`s are text. An unterminated `${`
/// ends the list (expanding it is an error anyway).
pub fn variables(input: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let Some(end) = body.find('}') else {
                break;
            };
            let expr = &body[..end];
            let name = expr.split_once(":-").map_or(expr, |(name, _)| name);
            names.push(name.to_string());
            rest = &body[end + 1..];
        } else {
            rest = after;
        }
    }
    names
}

/// Whether `name` can be a variable in `${…}`.
pub fn is_variable_name(name: &str) -> bool {
    valid_name(name)
}

fn substitute(expr: &str, env: &Env) -> Result<String, ExpandError> {
    let (name, default) = match expr.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (expr, None),
    };
    if !valid_name(name) {
        return Err(ExpandError::BadName(name.to_string()));
    }
    match (env(name), default) {
        (Some(value), None) => Ok(value),
        (Some(value), Some(_)) if !value.is_empty() => Ok(value),
        (_, Some(default)) => Ok(default.to_string()),
        (None, None) => Err(ExpandError::Unset(name.to_string())),
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Expands every string inside `value` (lists and maps included; keys are left alone).
/// On error returns the key path below `path` where it happened.
pub fn expand_value(value: &mut Value, path: &str, env: &Env) -> Result<(), (String, ExpandError)> {
    match value {
        Value::String(s) => {
            *s = expand_str(s, env).map_err(|e| (path.to_string(), e))?;
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                expand_value(item, &format!("{path}[{i}]"), env)?;
            }
        }
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                expand_value(item, &join(path, key), env)?;
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
    Ok(())
}

/// `a.b` key path join (no leading dot at the root).
pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_what_to_write_instead() {
        let unset = ExpandError::Unset("KEY".into()).to_string();
        assert_eq!(
            unset,
            "environment variable KEY is not set (use ${KEY:-default} for a default)"
        );
        let open = ExpandError::Unterminated.to_string();
        assert_eq!(open, "unterminated '${' (missing '}')");
        let bad = ExpandError::BadName("1x".into()).to_string();
        assert_eq!(bad, "invalid variable name '1x' in '${…}'");
    }

    fn env(name: &str) -> Option<String> {
        match name {
            "A" => Some("alpha".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expands_and_defaults() {
        assert_eq!(expand_str("x${A}y", &env), Ok("xalphay".into()));
        assert_eq!(expand_str("${NOPE:-d:e}", &env), Ok("d:e".into()));
        assert_eq!(expand_str("${EMPTY:-d}", &env), Ok("d".into()));
        assert_eq!(expand_str("${EMPTY}", &env), Ok(String::new()));
        assert_eq!(expand_str("${A:-d}", &env), Ok("alpha".into()));
    }

    #[test]
    fn dollars() {
        assert_eq!(
            expand_str("$$A costs $5 $", &env),
            Ok("$A costs $5 $".into())
        );
        assert_eq!(expand_str("$${A}", &env), Ok("${A}".into()));
    }

    #[test]
    fn variables_follow_the_same_grammar() {
        assert_eq!(
            variables("a ${A} $$${B} $${C} ${D:-x${E}} $5 ${F"),
            ["A", "B", "D"]
        );
        assert!(variables("$$ $ plain").is_empty());
    }

    #[test]
    fn errors() {
        assert_eq!(
            expand_str("${NOPE}", &env),
            Err(ExpandError::Unset("NOPE".into()))
        );
        assert_eq!(expand_str("${A", &env), Err(ExpandError::Unterminated));
        assert_eq!(
            expand_str("${1X}", &env),
            Err(ExpandError::BadName("1X".into()))
        );
    }
}
