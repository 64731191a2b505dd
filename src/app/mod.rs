//! The assembly layer: what a session runs on. [`Sessions`] owns the provider factory, the
//! MCP tool registry, the clock, instrumentation and the session records, behind one
//! [`Sessions::start`]; the doors of the HTTP edge only translate. The application's hooks
//! (the retry metric) are handed down to the crates that need them, so no lower layer
//! reaches up.

mod caller;
pub mod descriptors;
mod estimate;
pub mod forward;
mod observer;
mod open;
pub mod panels;
pub mod permits;
mod providers;
pub mod quota;
pub mod records;
mod refusal;
mod sessions;
pub mod spend;
mod tools;

pub use caller::{Caller, KeyId, Owner};
pub use open::{Ask, Deliberation, Opened, UseCase};
pub use providers::{HttpProviders, ProviderFactory};
pub use refusal::Refusal;
pub use sessions::{
    Overrides, SHUTDOWN_CANCELLED, SessionRequest, Sessions, SessionsConfig, StartError, Started,
};
pub use tools::{agent_tools, servers_of};
