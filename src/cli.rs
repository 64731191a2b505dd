//! Command line: `massgen serve` and `massgen mock-upstream`.

use std::process::ExitCode;

pub fn main() -> ExitCode {
    ExitCode::SUCCESS
}
