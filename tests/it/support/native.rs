//! What the black-box tests borrow from the provider tests (which live in their crate,
//! `crates/massgen-providers/tests/providers`): the scripted loopback upstream that records
//! what it receives, the request scenarios (one source, included from there), and the
//! recorded upstream traffic's folder.

use std::path::PathBuf;

// One source with the provider tests, which use all of it; this binary (and tests/mcp.rs,
// which compiles these helpers without the tests that use them) only a part.
#[allow(dead_code)]
#[path = "../../../crates/massgen-providers/tests/providers/support/scenarios.rs"]
mod scenarios;
#[allow(dead_code)]
#[path = "../../../crates/massgen-providers/tests/providers/support/scripted.rs"]
mod scripted;

#[allow(unused_imports)]
pub use scenarios::{PNG_BASE64, coordination_turn};
#[allow(unused_imports)]
pub use scripted::{Reply, Upstream, serve};

/// The recorded upstream traffic (`<shared>/fixtures/upstream`, see
/// [`shared_dir`](super::shared_dir)); `None` (after saying why) lets the replay tests
/// pass where it is absent.
pub fn upstream_dir() -> Option<PathBuf> {
    let dir = super::shared_dir().map(|shared| shared.join("fixtures/upstream"));
    if dir.as_ref().is_some_and(|d| d.is_dir()) {
        dir
    } else {
        println!("skipped: ../shared/fixtures/upstream not found");
        None
    }
}
