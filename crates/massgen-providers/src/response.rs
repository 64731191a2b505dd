//! What a call over any of the crate's HTTP clients answers: the response's status and
//! headers with its body still to read ([`Response`]), why a body broke off
//! ([`BodyError`]), and why no response came ([`SendError`]). The clients produce them
//! ([`crate::client`], `h1`) and the retry loop reads them ([`crate::transport`]).

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

/// A response's status and headers, and its body still to read.
pub(crate) struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Body,
}

/// A response body, whichever client read it.
pub(crate) type Body =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<Bytes, BodyError>> + Send>>;

/// Why a response body broke off.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error(transparent)]
    Reqwest(#[from] reqwest::Error),
    #[error(transparent)]
    Hyper(#[from] hyper::Error),
    #[error(transparent)]
    Plain(#[from] std::io::Error),
}

/// Why a request got no response: a timeout (connecting) or anything else.
pub(crate) struct SendError {
    pub timeout: bool,
    pub message: String,
}
