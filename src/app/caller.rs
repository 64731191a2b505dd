//! Who a session belongs to: the API key a request authenticated with (its position in the
//! key list, never the key), or nobody on a server without keys. Records and stored
//! responses are readable only by their owner.

/// Which configured key a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId(u32);

impl KeyId {
    /// The key at `index` of the server's key list.
    pub fn from_index(index: u32) -> Self {
        Self(index)
    }
}

/// Who is calling: the key it authenticated with, or none when the server has no keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Caller {
    pub key: Option<KeyId>,
}
