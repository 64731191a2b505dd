//! The one error type of config loading: always names the file, the key path and the problem.

/// A config that cannot be used. Displays as `<file>: <key path>: <problem>` (the key path is
/// left out when the problem is with the file as a whole). Never contains an API key: values
/// are only quoted for keys that cannot hold one (types, names, enum values).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {}{problem}", key_prefix(.key))]
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

/// `key: ` before the problem, nothing for the file as a whole.
fn key_prefix(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!("{key}: ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_file_key_and_problem_without_an_empty_key() {
        let keyed = ConfigError::new("team.yaml", "agents[1].backend.type", "unknown type");
        assert_eq!(
            keyed.to_string(),
            "team.yaml: agents[1].backend.type: unknown type"
        );
        let whole = ConfigError::new("team.yaml", "", "not YAML");
        assert_eq!(whole.to_string(), "team.yaml: not YAML");
    }
}
