//! The application layer: [`App`], built once, owns what sessions run on and is what every
//! edge (HTTP, `massgen mcp`, `massgen eval`) stands on: [`App::open`] is the use case.
//! [`Sessions`] owns the provider factory, the MCP tool registry, the clock,
//! instrumentation and the session records, behind one [`Sessions::start`]. Nothing here
//! knows an edge; the application's hooks (the retry metric) are handed down to the crates
//! that need them, so no lower layer reaches up.

#[allow(clippy::module_inception)] // the application object, in the application layer
mod app;
mod caller;
pub mod descriptors;
mod estimate;
pub mod evals;
pub mod forward;
mod observer;
mod open;
pub mod panels;
pub mod permits;
mod providers;
pub mod quota;
mod refusal;
mod sessions;
pub mod spend;
pub mod store;
mod tools;

pub use app::{App, AppParts};
pub use caller::{Caller, KeyId, Owner};
pub use open::{Ask, Deliberation, Opened};
pub use providers::{HttpProviders, ProviderFactory};
pub use refusal::Refusal;
pub use sessions::{
    Overrides, SHUTDOWN_CANCELLED, SessionRequest, Sessions, SessionsConfig, StartError, Started,
};
pub use tools::{agent_tools, servers_of};
