//! Which HTTP a provider speaks to its upstream (a backend's `h2c` key): chosen by the
//! application, read by the client that routes the calls ([`crate::client`]) and by the
//! constructors that take it ([`crate::connect`], [`crate::upstream`]). Its own module so
//! that those three import it from below instead of from each other.

/// Which HTTP a provider speaks to its upstream (a backend's `h2c` key).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UpstreamHttp {
    /// HTTP/1.1 over `http://` (a connection per in-flight call); over `https://`, HTTP/2
    /// where TLS (ALPN) agrees on it.
    #[default]
    Negotiated,
    /// HTTP/2 with prior knowledge over `http://` (h2c): every call to one host is a stream
    /// of one connection. Only for an upstream known to speak it.
    H2c,
}

/// Why h2c is refused on a base URL that is not `http://` (the config check says the same).
pub const H2C_NEEDS_HTTP: &str = "h2c (HTTP/2 over cleartext with prior knowledge) is for \
    http:// base URLs; over https:// HTTP/2 is negotiated by TLS (ALPN) already, without this \
    key";
