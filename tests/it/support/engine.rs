//! The scripted provider and session runner of the engine tests, for the tests here that
//! run the engine in-process (doors over scripted agents): massgen-core's test support
//! (feature `test-support`, turned on in this package's dev-dependencies).

pub use massgen_core::testing::*;
