//! How a command fails: a message on stderr and the exit code (1 runtime failure, 2 usage
//! or config error).

use crate::config::ConfigError;

/// A failure that ends the process with `code` after printing `message` to stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fatal {
    pub code: u8,
    pub message: String,
}

impl Fatal {
    pub(super) fn usage(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: message.into(),
        }
    }
    pub(super) fn runtime(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }
}

impl From<ConfigError> for Fatal {
    fn from(e: ConfigError) -> Self {
        Self::usage(e.to_string())
    }
}
