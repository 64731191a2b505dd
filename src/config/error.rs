//! The one error type of config loading: always names the file, the key path and the problem.

use std::fmt;

/// A config that cannot be used. Displays as `<file>: <key path>: <problem>` (the key path is
/// left out when the problem is with the file as a whole). Never contains an API key: values
/// are only quoted for keys that cannot hold one (types, names, enum values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file as it was given (or `<built-in demo>`, a directory, …).
    pub file: String,
    /// Dotted path with list indexes, e.g. `agents[1].backend.type`; empty for the whole file.
    pub key: String,
    pub problem: String,
}

impl ConfigError {
    pub fn new(
        file: impl Into<String>,
        key: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        Self {
            file: file.into(),
            key: key.into(),
            problem: problem.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file, self.problem)
        } else {
            write!(f, "{}: {}: {}", self.file, self.key, self.problem)
        }
    }
}

impl std::error::Error for ConfigError {}
