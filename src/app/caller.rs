//! Who a session belongs to: the API key a request authenticated with (its position in the
//! key list, never the key), or nobody on a server without keys. Records and stored
//! responses are readable only by their owner.

use sha2::{Digest, Sha256};

/// A stable, non-secret text id of an API key: the first 16 hex characters of
/// SHA-256("massgen-owner:" + key). Records and spend are kept under it, so it must be the
/// same for one key across restarts and replicas, which the key's list position is not;
/// the prefix and the truncation make it useless for checking a guessed key against the
/// full hashes kept in memory for authentication.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner([u8; 16]);

impl Owner {
    pub fn of_key(key: &str) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let digest = Sha256::new()
            .chain_update(b"massgen-owner:")
            .chain_update(key.as_bytes())
            .finalize();
        let mut text = [0u8; 16];
        for (pair, byte) in text.chunks_exact_mut(2).zip(digest.iter()) {
            pair[0] = HEX[usize::from(byte >> 4)];
            pair[1] = HEX[usize::from(byte & 0x0f)];
        }
        Self(text)
    }

    pub fn as_str(&self) -> &str {
        // Always ASCII hex by construction; the fallback only keeps this total.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Owner({})", self.as_str())
    }
}

/// Which configured key a request used: its list position (what rate limiting is keyed by)
/// and its owner id (what records and spend are kept under), both fixed when keys load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId {
    index: u32,
    owner: Owner,
}

impl KeyId {
    pub fn new(index: u32, owner: Owner) -> Self {
        Self { index, owner }
    }

    /// A key at `index` whose owner id derives from the index: for tests that need distinct
    /// callers without configuring keys.
    #[cfg(test)]
    pub fn from_index(index: u32) -> Self {
        Self::new(index, Owner::of_key(&format!("test-key-{index}")))
    }

    pub fn owner(&self) -> Owner {
        self.owner
    }
}

/// Who is calling: the key it authenticated with, or none when the server has no keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Caller {
    pub key: Option<KeyId>,
}

impl Caller {
    /// The stable id records and spend are kept under: "" on a server without keys.
    pub fn owner(&self) -> &str {
        match &self.key {
            Some(key) => key.owner.as_str(),
            None => "",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_is_the_prefixed_hash_prefix_and_never_the_key() {
        let key = "sk-secret-key";
        let owner = Owner::of_key(key);
        let full = Sha256::digest(format!("massgen-owner:{key}").as_bytes());
        let expected: String = full.iter().take(8).map(|b| format!("{b:02x}")).collect();
        assert_eq!(owner.as_str(), expected);
        assert_eq!(owner.as_str().len(), 16);
        assert!(!owner.as_str().contains(key));
        // Not the plain hash of the key either (that is what authentication keeps).
        let plain: String = Sha256::digest(key.as_bytes())
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_ne!(owner.as_str(), plain);
        assert!(!format!("{owner:?}").contains(key));
    }

    #[test]
    fn owner_is_stable_and_distinct_per_key() {
        assert_eq!(Owner::of_key("a"), Owner::of_key("a"));
        assert_ne!(Owner::of_key("a"), Owner::of_key("b"));
        // A known value, so a change of the derivation (which would orphan stored records
        // and spend) fails here.
        // python3 -c 'import hashlib;print(hashlib.sha256(b"massgen-owner:k-one").hexdigest()[:16])'
        assert_eq!(Owner::of_key("k-one").as_str(), "54483cfad0e410d4");
    }

    #[test]
    fn caller_owner() {
        assert_eq!(Caller::default().owner(), "");
        let caller = Caller {
            key: Some(KeyId::new(3, Owner::of_key("k"))),
        };
        assert_eq!(caller.owner(), Owner::of_key("k").as_str());
    }
}
