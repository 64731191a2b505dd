//! Upstream model providers behind one provider-neutral seam.
//!
//! Every wire format (Chat Completions incl. Azure, OpenAI Responses, Anthropic Messages,
//! Gemini) turns its stream into [`ProviderChunk`]s and its failures into [`ProviderError`],
//! over the shared SSE loop (`sse`) and send-and-retry loop (`transport`).
//! Nothing here knows about coordination or about our own HTTP edge.

pub mod anthropic;
pub mod chat_completions;
pub(crate) mod errors;
pub mod factory;
pub mod gemini;
pub mod presets;
pub mod responses;
pub mod retry;
pub(crate) mod sse;
pub(crate) mod transport;
mod upstream;

pub use massgen_core::provider::{
    ChunkStream, FinishReason, Message, Provider, ProviderChunk, ProviderError, ProviderErrorKind,
    ProviderRequest, Role, ToolCall, ToolChoice, ToolSpec, Usage,
};

pub use factory::{HttpProviders, ProviderFactory};

pub use upstream::{HttpProvider, UpstreamConfig, WireFormat};
