//! Upstream model providers behind one provider-neutral seam.
//!
//! Every wire format (Chat Completions incl. Azure, OpenAI Responses, Anthropic Messages,
//! Gemini) turns its stream, or its whole response when a request asks for one
//! ([`ProviderRequest::whole`]), into [`ProviderChunk`]s and its failures into
//! [`ProviderError`], over the shared SSE loop (`sse`), whole-body reading (`whole`) and
//! send-and-retry loop (`transport`). [`Upstreams`]
//! builds the provider for a wire format ([`Wire`], the registry) and an [`UpstreamConfig`],
//! over the process's shared HTTP clients ([`http_client`]: reqwest for `https://`, hyper's
//! own lean HTTP/1.1 and h2c clients for `http://`).
//! A wire format is one [`WireFormat`] implementation in its module plus one line in that
//! registry.
//!
//! Nothing here knows about coordination, the config file, metrics or our own HTTP edge:
//! what the application wants to hear about (each retry) comes in as a hook
//! ([`RetryObserver`]).

pub mod anthropic;
pub mod chat_completions;
mod client;
mod connect;
pub(crate) mod errors;
pub mod gemini;
mod h1;
pub mod model_name;
mod pooling;
pub mod presets;
pub mod pricing;
mod response;
pub mod responses;
pub mod retry;
pub(crate) mod settings;
pub(crate) mod sse;
#[cfg(test)]
mod testing;
pub(crate) mod transport;
mod turns;
mod upstream;
mod upstream_http;
mod whole;

/// The neutral types every wire format speaks, re-exported from `massgen-core` so a user
/// of this crate needs one import path.
pub use massgen_core::provider::{
    ChunkStream, FinishReason, Image, ImageSource, Message, OutputFormat, Price, Provider,
    ProviderChunk, ProviderError, ProviderErrorKind, ProviderRequest, Role, Sampling, ToolCall,
    ToolChoice, ToolSpec, Usage,
};

pub use client::{HttpClient, http_client};
pub use connect::{Upstreams, Wire};
pub use pooling::MAX_IDLE_PER_HOST;
pub use presets::check_model;
pub use retry::{CallPolicy, RetryObserver};
pub use sse::{EventDecoder, MAX_ANSWER_BYTES, SseEvent, Step};
pub use upstream::{
    EndpointParts, HttpProvider, UpstreamConfig, WireFormat, decode_stream, decode_whole,
};
pub use upstream_http::{H2C_NEEDS_HTTP, UpstreamHttp};
pub use whole::MAX_WHOLE_BYTES;
