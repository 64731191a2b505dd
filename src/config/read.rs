//! Reading one config file: [`Cx`] turns problems into [`ConfigError`]s naming the file and
//! key path, collects the warnings (keys accepted but not used) and the errors of every
//! section, and reads typed values (which also accept strings, because `${VAR}` yields
//! text).

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Map, Value};

use super::expand::expand_value;
use super::{ConfigError, Env};

/// A key that is accepted but has no effect (or a fallback taken), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// Dotted key path, e.g. `agents[0].backend.cwd`.
    pub key: String,
    pub why: String,
}

impl std::fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.why)
    }
}

/// Logs `warning` once per process (per key path): every config of a configs dir, and
/// every reload, would repeat it otherwise.
pub(super) fn log_once(file: &str, warning: &ConfigWarning) {
    static SEEN: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Mutex::default);
    let first = match seen.lock() {
        Ok(mut set) => set.insert(format!("{file}\u{0}{}", warning.key)),
        Err(_) => true,
    };
    if first {
        tracing::warn!(file = %file, key = %warning.key, "config key ignored: {}", warning.why);
    }
}

/// One file's parsing context.
pub(super) struct Cx<'a> {
    pub file: String,
    pub env: &'a Env,
    warnings: RefCell<Vec<ConfigWarning>>,
    errors: RefCell<Vec<ConfigError>>,
}

impl<'a> Cx<'a> {
    pub fn new(file: String, env: &'a Env) -> Self {
        Self {
            file,
            env,
            warnings: RefCell::default(),
            errors: RefCell::default(),
        }
    }

    pub fn err(&self, key: &str, problem: impl Into<String>) -> ConfigError {
        ConfigError::new(self.file.clone(), key, problem)
    }

    /// Records that `key` is accepted but not used (or used with a fallback), and why.
    pub fn warn(&self, key: &str, why: impl Into<String>) {
        self.warnings.borrow_mut().push(ConfigWarning {
            key: key.to_string(),
            why: why.into(),
        });
    }

    /// The value of a section, or `None` with its error recorded: the other sections are
    /// still read, so `check-config` lists every problem.
    pub fn keep<T>(&self, result: Result<T, ConfigError>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(error) => {
                self.errors.borrow_mut().push(error);
                None
            }
        }
    }

    /// The errors and warnings recorded.
    pub fn finish(self) -> (Vec<ConfigError>, Vec<ConfigWarning>) {
        (self.errors.into_inner(), self.warnings.into_inner())
    }

    /// Unknown keys of `map` (at `path`) are errors naming the known ones.
    pub fn only_known(
        &self,
        map: &Map<String, Value>,
        path: &str,
        known: &[&str],
    ) -> Result<(), ConfigError> {
        match map.keys().find(|k| !known.contains(&k.as_str())) {
            Some(key) => Err(self.err(
                &super::expand::join(path, key),
                format!("unknown key (known: {})", known.join(", ")),
            )),
            None => Ok(()),
        }
    }

    /// A copy of `value` with every `${…}` expanded.
    pub fn expanded(&self, value: &Value, key: &str) -> Result<Value, ConfigError> {
        let mut value = value.clone();
        expand_value(&mut value, key, self.env).map_err(|(at, e)| self.err(&at, e.to_string()))?;
        Ok(value)
    }

    /// A mapping section, `None` when absent or null.
    pub fn section<'v>(
        &self,
        value: Option<&'v Value>,
        key: &str,
    ) -> Result<Option<&'v Map<String, Value>>, ConfigError> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(_) => Err(self.err(key, "must be a mapping")),
        }
    }

    /// A string (numbers are accepted as their text), expanded; `None` when absent or null.
    pub fn string(&self, value: Option<&Value>, key: &str) -> Result<Option<String>, ConfigError> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(v @ Value::String(_)) => match self.expanded(v, key)? {
                Value::String(s) => Ok(Some(s)),
                _ => Err(self.err(key, "must be a string")),
            },
            Some(_) => Err(self.err(key, "must be a string")),
        }
    }

    pub fn number(&self, value: Option<&Value>, key: &str) -> Result<Option<f64>, ConfigError> {
        let bad = || self.err(key, "must be a number");
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n.as_f64().map(Some).ok_or_else(bad),
            Some(Value::String(_)) => {
                let text = self.string(value, key)?.unwrap_or_default();
                text.trim().parse::<f64>().map(Some).map_err(|_| bad())
            }
            Some(_) => Err(bad()),
        }
    }

    pub fn integer(&self, value: Option<&Value>, key: &str) -> Result<Option<i64>, ConfigError> {
        let bad = || self.err(key, "must be a whole number");
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(bad),
            Some(Value::String(_)) => {
                let text = self.string(value, key)?.unwrap_or_default();
                text.trim().parse::<i64>().map(Some).map_err(|_| bad())
            }
            Some(_) => Err(bad()),
        }
    }

    pub fn boolean(&self, value: Option<&Value>, key: &str) -> Result<Option<bool>, ConfigError> {
        let bad = || self.err(key, "must be true or false");
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(_)) => {
                let text = self.string(value, key)?.unwrap_or_default();
                match text.trim().to_ascii_lowercase().as_str() {
                    "true" => Ok(Some(true)),
                    "false" => Ok(Some(false)),
                    _ => Err(bad()),
                }
            }
            Some(_) => Err(bad()),
        }
    }

    /// A count in `min..=max`.
    pub fn count(
        &self,
        value: Option<&Value>,
        key: &str,
        min: i64,
        max: i64,
    ) -> Result<Option<i64>, ConfigError> {
        match self.integer(value, key)? {
            Some(n) if n < min || n > max => {
                Err(self.err(key, format!("must be between {min} and {max} (got {n})")))
            }
            other => Ok(other),
        }
    }

    /// Seconds (or, with `unit_ms`, milliseconds) as a duration; must be > 0 unless `allow_zero`.
    pub fn duration(
        &self,
        value: Option<&Value>,
        key: &str,
        unit_ms: bool,
        allow_zero: bool,
    ) -> Result<Option<Duration>, ConfigError> {
        let Some(n) = self.number(value, key)? else {
            return Ok(None);
        };
        let unit = if unit_ms { "milliseconds" } else { "seconds" };
        let ok = n.is_finite() && (n > 0.0 || (allow_zero && n == 0.0));
        let secs = if unit_ms { n / 1000.0 } else { n };
        match Duration::try_from_secs_f64(secs) {
            Ok(d) if ok => Ok(Some(d)),
            _ => Err(self.err(
                key,
                if allow_zero {
                    format!("must be zero or a positive number of {unit} (got {n})")
                } else {
                    format!("must be a positive number of {unit} (got {n})")
                },
            )),
        }
    }

    pub fn string_list(
        &self,
        value: Option<&Value>,
        key: &str,
    ) -> Result<Option<Vec<String>>, ConfigError> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let k = format!("{key}[{i}]");
                    self.string(Some(v), &k)?
                        .ok_or_else(|| self.err(&k, "must be a string"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(self.err(key, "must be a list of strings")),
        }
    }
}
