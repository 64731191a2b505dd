//! What the stateless Streamable HTTP door remembers: nothing per MCP session, only the
//! calls running in this process, so that a client can still cancel one.
//!
//! Clients expect an `Mcp-Session-Id` from `initialize` and send it on every later
//! message; MCP's cancellation (`notifications/cancelled`, naming a request id) and a
//! session's end (`DELETE`) only make sense together with it, since request ids are
//! numbered per client. So `initialize` hands out a session id that is a token, not a
//! table entry: `mcp1.<owner>.<nonce>`, the owner id of the key that opened it (`anon`
//! without keys) and 128 random bits. Every replica reads it the same way, nothing of it
//! is kept or expires, and it answers only the key that opened it: a request that carries
//! another key's, or one that is not ours, is 404 (MCP's answer for an unknown session).
//!
//! A running `deliberate` is registered under its session id and request id while it
//! runs; `notifications/cancelled` cancels it, and `DELETE` cancels every call of its
//! session, on the replica that runs them (closing the call's POST cancels it anywhere).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::app::Caller;

/// The header that carries the session id.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// What every token starts with, so another format fails fast and this one can change.
const VERSION: &str = "mcp1";
/// Bodies longer than this are never `initialize` or a notification worth reading here:
/// they are left to the transport unread.
const PROBE_BYTES: usize = 64 * 1024;

/// A new session id for `caller`.
pub fn new_session(caller: &Caller) -> String {
    format!(
        "{VERSION}.{}.{}",
        owner_part(caller),
        uuid::Uuid::new_v4().simple()
    )
}

/// Whether `token` is a session id this server handed to `caller` (any replica, any
/// time: it holds no state).
pub fn owns(caller: &Caller, token: &str) -> bool {
    let mut parts = token.split('.');
    let (Some(VERSION), Some(owner), Some(nonce), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    owner == owner_part(caller) && nonce.len() == 32 && nonce.bytes().all(|b| b.is_ascii_hexdigit())
}

fn owner_part(caller: &Caller) -> &str {
    match caller.owner() {
        "" => "anon",
        owner => owner,
    }
}

/// What the door needs to know of a POSTed message before the transport reads it.
#[derive(Debug, Default, PartialEq)]
pub struct Probe {
    /// `initialize`: the response gets a session id.
    pub initialize: bool,
    /// `notifications/cancelled`: the request id it names, as JSON text.
    pub cancels: Option<String>,
}

impl Probe {
    /// Reads `body` when it is small enough to be one of the messages above.
    pub fn of(body: &[u8]) -> Self {
        #[derive(Deserialize)]
        struct Message<'a> {
            #[serde(borrow)]
            method: Option<&'a str>,
            params: Option<Params>,
        }
        #[derive(Deserialize)]
        struct Params {
            #[serde(rename = "requestId")]
            request_id: Option<serde_json::Value>,
        }
        if body.len() > PROBE_BYTES {
            return Self::default();
        }
        let Ok(message) = serde_json::from_slice::<Message<'_>>(body) else {
            return Self::default();
        };
        match message.method {
            Some("initialize") => Self {
                initialize: true,
                cancels: None,
            },
            Some("notifications/cancelled") => Self {
                initialize: false,
                cancels: message
                    .params
                    .and_then(|p| p.request_id)
                    .map(|id| id.to_string()),
            },
            _ => Self::default(),
        }
    }
}

type Running = HashMap<(String, String), Vec<(u64, CancellationToken)>>;

/// The `deliberate` calls running in this process, by session id and request id (a
/// client may reuse an id; each registration has its own serial).
#[derive(Clone, Default)]
pub struct Calls {
    running: Arc<Mutex<Running>>,
    serial: Arc<AtomicU64>,
}

impl Calls {
    /// Registers a call of `session` with JSON-RPC id `request` (as JSON text); cancelled
    /// by [`Calls::cancel`] or [`Calls::end_session`], forgotten when the guard drops.
    pub fn register(&self, session: &str, request: String) -> (CancellationToken, Registered) {
        let token = CancellationToken::new();
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let key = (session.to_string(), request);
        self.lock()
            .entry(key.clone())
            .or_default()
            .push((serial, token.clone()));
        let registered = Registered {
            calls: self.clone(),
            key,
            serial,
        };
        (token, registered)
    }

    /// Cancels the calls of `session` with id `request`; how many there were.
    pub fn cancel(&self, session: &str, request: &str) -> usize {
        let key = (session.to_string(), request.to_string());
        self.lock().get(&key).map_or(0, |tokens| {
            tokens.iter().for_each(|(_, t)| t.cancel());
            tokens.len()
        })
    }

    /// Cancels every call of `session`; how many there were.
    pub fn end_session(&self, session: &str) -> usize {
        self.lock()
            .iter()
            .filter(|((s, _), _)| s == session)
            .flat_map(|(_, tokens)| tokens)
            .inspect(|(_, t)| t.cancel())
            .count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Running> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// A registered call; dropping it forgets the call.
pub struct Registered {
    calls: Calls,
    key: (String, String),
    serial: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut running = self.calls.lock();
        if let Some(tokens) = running.get_mut(&self.key) {
            tokens.retain(|(serial, _)| *serial != self.serial);
            if tokens.is_empty() {
                running.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::{KeyId, Owner};

    fn keyed(key: &str) -> Caller {
        Caller {
            key: Some(KeyId::new(0, Owner::of_key(key))),
        }
    }

    #[test]
    fn a_session_id_answers_only_the_key_that_opened_it() {
        let a = keyed("k-a");
        let b = keyed("k-b");
        let token = new_session(&a);
        assert!(owns(&a, &token));
        assert!(!owns(&b, &token));
        assert!(!owns(&Caller::default(), &token));
        let anon = new_session(&Caller::default());
        assert!(owns(&Caller::default(), &anon));
        assert!(!owns(&a, &anon));
        for bad in [
            "",
            "mcp1",
            "mcp1.x.y",
            &format!("{token}.x"),
            "mcp2.anon.0123",
        ] {
            assert!(!owns(&Caller::default(), bad), "{bad}");
        }
        assert!(token.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        assert_ne!(new_session(&a), token);
    }

    #[test]
    fn probes_read_initialize_and_cancellations_only() {
        let init = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
        assert!(Probe::of(init).initialize);
        let cancel = br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"timeout"}}"#;
        assert_eq!(Probe::of(cancel).cancels.as_deref(), Some("7"));
        let named =
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"r-1"}}"#;
        assert_eq!(Probe::of(named).cancels.as_deref(), Some("\"r-1\""));
        assert_eq!(Probe::of(b"not json"), Probe::default());
        let call = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}"#;
        assert_eq!(Probe::of(call), Probe::default());
    }

    #[test]
    fn a_call_is_cancelled_by_its_session_and_id_and_forgotten_when_it_ends() {
        let calls = Calls::default();
        let (first, guard) = calls.register("s1", "3".into());
        let (other, other_guard) = calls.register("s2", "3".into());
        assert_eq!(calls.cancel("s1", "4"), 0);
        assert_eq!(calls.cancel("s1", "3"), 1);
        assert!(first.is_cancelled());
        assert!(
            !other.is_cancelled(),
            "another session's call with the same id"
        );
        drop(guard);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls.end_session("s2"), 1);
        assert!(other.is_cancelled());
        drop(other_guard);
        assert_eq!(calls.len(), 0);
    }
}
