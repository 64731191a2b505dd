//! How a command fails: a message on stderr and the exit code (1 runtime failure, 2 usage
//! or config error; `massgen eval` adds its own, see docs/eval.md).

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
    /// An exit the command has already explained on stderr (`massgen eval` stopped by
    /// its budget, by failures or by Ctrl-C): nothing more is printed.
    pub(super) fn quiet(code: u8) -> Self {
        Self {
            code,
            message: String::new(),
        }
    }
}

impl From<ConfigError> for Fatal {
    fn from(e: ConfigError) -> Self {
        Self::usage(e.to_string())
    }
}
