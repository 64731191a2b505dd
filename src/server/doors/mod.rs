//! The server's front doors: one module per client API, each with its own wire types,
//! request parsing into the door-neutral session input, rendering of the session's events
//! and error shape. No door uses another's types; what they share is door-neutral:
//! [`session`] (body, parse → resolve → start, the events as steps) and [`narrate`] (the
//! deliberation as text).

pub mod chat_completions;
pub mod narrate;
pub mod session;
