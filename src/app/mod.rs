//! The assembly layer: turns a loaded config into what a session runs on (a provider and
//! the MCP toolbox of each agent) and hands the application's hooks (the retry metric)
//! down to the crates that need them, so no lower layer reaches up.

mod providers;
mod tools;

pub use providers::{HttpProviders, ProviderFactory};
pub use tools::{agent_tools, servers_of};
