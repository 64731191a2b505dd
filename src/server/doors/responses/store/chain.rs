//! A stored conversation walked back from the response `previous_response_id` names to
//! its first turn, by parent ids: sizes first ([`ResponseStore::chain`]), in memory as far
//! as the front holds the turns and in the database for the rest (one recursive query
//! that carries ids and sizes, no text), stopping as soon as the text passes what the
//! request may bring in or the chain passes [`MAX_TURNS`]; then, once the caller has
//! accepted the size, the turns themselves ([`ResponseStore::turns`]).

use std::collections::HashMap;
use std::sync::Arc;

use massgen_core::provider::Message;

use super::{ResponseStore, Stored, StoredTurn, read_failed, unreadable};
use crate::app::Caller;

/// Turns one conversation may have: a bound on the walk, whatever their size.
pub const MAX_TURNS: usize = 10_000;

/// A conversation's responses, newest first, and the text they hold together.
pub struct Chain {
    links: Vec<Link>,
    pub text_bytes: usize,
}

struct Link {
    id: String,
    /// `None`: in the database.
    held: Option<Arc<Stored>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainError {
    /// The response named is not stored (or not the caller's, or expired).
    NotFound,
    /// An earlier response of the conversation is no longer stored.
    Broken { missing: String },
    /// The conversation holds more than the text allowed: at least `bytes`.
    TooLarge { bytes: usize },
    /// More than [`MAX_TURNS`] turns.
    TooLong,
    /// The database cannot be read now.
    Unavailable,
}

impl Chain {
    /// The responses of the conversation, newest first.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.links.iter().map(|link| link.id.as_str())
    }
}

impl ResponseStore {
    /// The conversation response `id` (the caller's) ends, within `max_bytes` of text.
    pub async fn chain(
        &self,
        id: &str,
        caller: &Caller,
        max_bytes: usize,
    ) -> Result<Chain, ChainError> {
        let mut links: Vec<Link> = Vec::new();
        let mut total = 0usize;
        let mut next = Some(id.to_string());
        let gone = |links: &[Link], id: String| {
            if links.is_empty() {
                ChainError::NotFound
            } else {
                ChainError::Broken { missing: id }
            }
        };
        // Each pass adds at least one link or ends the walk.
        while let Some(id) = next.take() {
            if links.len() >= MAX_TURNS {
                return Err(ChainError::TooLong);
            }
            if let Some(held) = self.in_memory(&id) {
                if held.owner != *caller {
                    return Err(gone(&links, id));
                }
                total = total.saturating_add(held.text_bytes());
                if total > max_bytes {
                    return Err(ChainError::TooLarge { bytes: total });
                }
                next = held.parent.clone();
                links.push(Link {
                    id,
                    held: Some(held),
                });
                continue;
            }
            let Some((db, _)) = &self.db else {
                return Err(gone(&links, id));
            };
            let read = db
                .response_chain(
                    &id,
                    caller.owner(),
                    self.since_ms(),
                    (max_bytes - total) as u64,
                    MAX_TURNS - links.len(),
                )
                .await
                .map_err(|e| {
                    read_failed(e);
                    ChainError::Unavailable
                })?;
            if read.is_empty() {
                return Err(gone(&links, id));
            }
            for link in read {
                total =
                    total.saturating_add(usize::try_from(link.text_bytes).unwrap_or(usize::MAX));
                if total > max_bytes {
                    return Err(ChainError::TooLarge { bytes: total });
                }
                // The last one's parent, when set, is where the query stopped: a limit
                // (checked above on the next pass) or a parent the database does not hold
                // (maybe still on its way there, in memory).
                next = link.parent;
                links.push(Link {
                    id: link.id,
                    held: None,
                });
            }
        }
        Ok(Chain {
            links,
            text_bytes: total,
        })
    }

    /// The system texts and messages of `chain`, first turn first. A turn the database
    /// no longer holds (retention ran since [`Self::chain`]) breaks the chain.
    pub async fn turns(
        &self,
        chain: &Chain,
        caller: &Caller,
    ) -> Result<(Vec<String>, Vec<Message>), ChainError> {
        let stored: Vec<String> = chain
            .links
            .iter()
            .filter(|link| link.held.is_none())
            .map(|link| link.id.clone())
            .collect();
        let mut read: HashMap<String, StoredTurn> = HashMap::with_capacity(stored.len());
        if let Some((db, _)) = self.db.as_ref().filter(|_| !stored.is_empty()) {
            let mut bad = None;
            db.response_turns(caller.owner(), &stored, |id, text| {
                match serde_json::from_str::<StoredTurn>(&text) {
                    Ok(turn) => {
                        read.insert(id, turn);
                    }
                    Err(e) => bad = Some(e),
                }
                Ok(())
            })
            .await
            .map_err(|e| {
                read_failed(e);
                ChainError::Unavailable
            })?;
            if let Some(e) = bad {
                unreadable(e);
                return Err(ChainError::Unavailable);
            }
        }
        let mut system = Vec::new();
        let mut messages = Vec::new();
        for link in chain.links.iter().rev() {
            match &link.held {
                Some(held) => {
                    system.extend(held.system.iter().cloned());
                    messages.extend(held.messages.iter().cloned());
                }
                None => {
                    let turn = read.remove(&link.id).ok_or_else(|| ChainError::Broken {
                        missing: link.id.clone(),
                    })?;
                    system.extend(turn.system);
                    messages.extend(turn.messages);
                }
            }
        }
        Ok((system, messages))
    }
}
