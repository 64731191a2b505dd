//! The server's front doors: one module per client API, each with its own wire types,
//! request parsing into the door-neutral session input, rendering of the session's events
//! and error shape. No door uses another's types; what they share is door-neutral:
//! [`session`] (body, parse → resolve → start, the events as steps), [`narrate`] (the
//! deliberation as text), [`conversation`] (messages → session input), [`tools`] (client
//! tool checks), [`images`] (image checks and limits), [`limit`] (answer bounds),
//! [`structured`] (response formats and their check), [`parse`] and [`metadata`]; and the
//! server's [`sse`](super::sse)
//! frames.

pub mod chat_completions;
pub mod mcp;
pub mod messages;
pub mod responses;

pub mod conversation;
pub mod door;
pub mod images;
pub mod json;
pub mod limit;
pub mod metadata;
pub mod narrate;
pub mod parse;
pub mod reasoning;
pub mod registry;
pub mod session;
pub mod structured;
pub mod tools;
