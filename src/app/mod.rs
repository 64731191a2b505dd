//! The assembly layer: turns a loaded config into what a session runs on (a provider per
//! agent) and hands the application's hooks (the retry metric) down to the crates that
//! need them, so no lower layer reaches up.

mod providers;

pub use providers::{HttpProviders, ProviderFactory};
