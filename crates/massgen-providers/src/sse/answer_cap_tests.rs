//! [`MAX_ANSWER_BYTES`] in every wire format: an upstream that never stops sending text,
//! reasoning, tool-call arguments or items a format holds back is cut at the cap, whatever
//! the field, and stops being read there.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::upstream::decode_stream;
use crate::{ProviderChunk, ProviderErrorKind, WireFormat};
use crate::{anthropic, chat_completions, gemini, responses};

/// The bytes of one repeated piece of answer: 64 KiB.
const PIECE: usize = 64 * 1024;

/// What an endless answer sends: `opening` once, then `event(n)` for n = 0, 1, …
struct Flood {
    what: &'static str,
    opening: &'static str,
    event: fn(usize) -> String,
}

fn x() -> String {
    "x".repeat(PIECE)
}

/// Four times the cap, generated as it is read, with the number of events read so far.
fn endless(
    flood: &Flood,
) -> (
    impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
    Arc<AtomicUsize>,
) {
    let read = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&read);
    let event = flood.event;
    let events = 4 * MAX_ANSWER_BYTES / PIECE;
    let body = futures::stream::iter([Ok(Bytes::from_static(flood.opening.as_bytes()))]).chain(
        futures::stream::iter(0..events).map(move |n| {
            counter.fetch_add(1, Ordering::Relaxed);
            Ok(Bytes::from(event(n)))
        }),
    );
    (body, read)
}

async fn cut<W: WireFormat>(floods: &[Flood]) {
    for flood in floods {
        let (body, read) = endless(flood);
        let mut stream = decode_stream::<W>("test".into(), body, Duration::from_secs(30));
        let mut sent = 0;
        let error = loop {
            match stream.next().await {
                Some(Ok(ProviderChunk::Text(t) | ProviderChunk::Reasoning(t))) => sent += t.len(),
                Some(Ok(_)) => {}
                Some(Err(error)) => break error,
                None => panic!("{}: ended without an error", flood.what),
            }
        };
        assert_eq!(
            error.kind,
            ProviderErrorKind::InvalidResponse,
            "{}: {error:?}",
            flood.what
        );
        assert!(
            error.message.contains("8 MiB"),
            "{}: {}",
            flood.what,
            error.message
        );
        assert!(
            sent <= MAX_ANSWER_BYTES,
            "{}: {sent} bytes went out",
            flood.what
        );
        // Read up to the cap and no further (a piece or two of slack for what an event
        // holds besides its text).
        let read = read.load(Ordering::Relaxed);
        assert!(
            read <= MAX_ANSWER_BYTES / PIECE + 2,
            "{}: {read} events read",
            flood.what
        );
    }
}

use super::MAX_ANSWER_BYTES;

#[tokio::test]
async fn chat_completions() {
    cut::<chat_completions::ChatCompletions>(&[
        Flood {
            what: "content",
            opening: "",
            event: |_| format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n", x()),
        },
        Flood {
            what: "reasoning",
            opening: "",
            event: |_| format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"reasoning_content\":\"{}\"}}}}]}}\n\n", x()),
        },
        Flood {
            what: "tool-call arguments",
            opening: "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}\n\n",
            event: |_| format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":0,\"function\":{{\"arguments\":\"{}\"}}}}]}}}}]}}\n\n", x()),
        },
        Flood {
            // Empty calls, as many as fit in a piece's bytes: each costs its slot.
            what: "tool calls without end",
            opening: "",
            event: |n| {
                let mut event = String::new();
                for i in 0..PIECE / 1024 {
                    let index = n * PIECE / 1024 + i;
                    event.push_str(&format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":{index},\"id\":\"c{index}\"}}]}}}}]}}\n\n"));
                }
                event
            },
        },
    ])
    .await;
}

#[tokio::test]
async fn anthropic() {
    cut::<anthropic::Anthropic>(&[
        Flood {
            what: "text",
            opening: "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            event: |_| format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{}\"}}}}\n\n", x()),
        },
        Flood {
            what: "thinking signature",
            opening: "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
            event: |_| format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"signature_delta\",\"signature\":\"{}\"}}}}\n\n", x()),
        },
        Flood {
            what: "tool input",
            opening: "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}}\n\n",
            event: |_| format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}}}\n\n", x()),
        },
        Flood {
            what: "redacted thinking blocks",
            opening: "",
            event: |n| format!("event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":{n},\"content_block\":{{\"type\":\"redacted_thinking\",\"data\":\"{}\"}}}}\n\n", x()),
        },
    ])
    .await;
}

#[tokio::test]
async fn responses() {
    cut::<responses::Responses>(&[
        Flood {
            what: "text",
            opening: "",
            event: |_| format!("data: {{\"type\":\"response.output_text.delta\",\"delta\":\"{}\"}}\n\n", x()),
        },
        Flood {
            what: "function-call arguments",
            opening: "data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"function_call\",\"id\":\"fc\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"\"}}\n\n",
            event: |_| format!("data: {{\"type\":\"response.function_call_arguments.delta\",\"output_index\":0,\"item_id\":\"fc\",\"delta\":\"{}\"}}\n\n", x()),
        },
        Flood {
            what: "reasoning items",
            opening: "",
            event: |n| format!("data: {{\"type\":\"response.output_item.done\",\"output_index\":{n},\"item\":{{\"type\":\"reasoning\",\"encrypted_content\":\"{}\"}}}}\n\n", x()),
        },
    ])
    .await;
}

#[tokio::test]
async fn gemini() {
    cut::<gemini::Gemini>(&[
        Flood {
            what: "text",
            opening: "",
            event: |_| format!("data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":\"{}\"}}]}}}}]}}\n\n", x()),
        },
        Flood {
            what: "streamed arguments",
            opening: "data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"f\",\"willContinue\":true}}]}}]}\n\n",
            event: |_| format!("data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"functionCall\":{{\"partialArgs\":[{{\"jsonPath\":\"$.a\",\"stringValue\":\"{}\"}}],\"willContinue\":true}}}}]}}}}]}}\n\n", x()),
        },
        Flood {
            what: "whole calls",
            opening: "",
            event: |_| format!("data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"functionCall\":{{\"name\":\"f\",\"args\":{{\"a\":\"{}\"}}}}}}]}}}}]}}\n\n", x()),
        },
    ])
    .await;
}
