//! Criterion micro-benchmarks of the hot paths (`cargo bench --bench hot_paths`):
//! upstream SSE decoding with tool-call assembly, the engine's handling of a turn and of a
//! whole 3-agent session with zero-latency in-process providers, and SSE encoding of the
//! chunks we send.

#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::IntoResponse;
use axum::response::sse::{Event, Sse};
use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use http_body_util::BodyExt;
use massgen::server::doors::chat_completions::render::ChunkHeader;
use massgen_core::coordination::{
    OrchestratorOptions, SessionAgent, SessionInput, SessionSpec, SystemClock, run_session,
};
use massgen_providers::chat_completions::ChatCompletions;
use massgen_providers::decode_stream;
use massgen_providers::{
    ChunkStream, FinishReason, Provider, ProviderChunk, ProviderRequest, ToolCall, Usage,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WORDS: usize = 40;

/// One upstream chunk as OpenAI frames it.
fn chunk(delta: Value, finish: Value) -> String {
    let v = json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1,
        "model": "bench-model", "system_fingerprint": null,
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
    format!("data: {v}\n\n")
}

fn tail(finish: &str) -> Vec<String> {
    let usage = json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1,
        "model": "bench-model", "choices": [],
        "usage": {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940}});
    vec![
        chunk(json!({}), json!(finish)),
        format!("data: {usage}\n\n"),
        "data: [DONE]\n\n".to_string(),
    ]
}

/// A streamed text answer of `words` tokens, one SSE event per network read.
fn text_body(words: usize) -> Vec<Bytes> {
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    events.extend((0..words).map(|i| chunk(json!({"content": format!("word{i} ")}), Value::Null)));
    events.extend(tail("stop"));
    events.into_iter().map(Bytes::from).collect()
}

/// The same body as a fast upstream's reads bring it: 16 KiB at a time, cut wherever that
/// falls (many events per read, and events across two).
fn in_reads(body: &[Bytes], read: usize) -> Vec<Bytes> {
    let whole: Vec<u8> = body.iter().flat_map(|b| b.iter().copied()).collect();
    whole.chunks(read).map(Bytes::copy_from_slice).collect()
}

/// A `new_answer` call whose arguments arrive in 8-byte fragments (as OpenAI sends them).
fn tool_body() -> Vec<Bytes> {
    let answer: String = (0..WORDS).map(|i| format!("word{i} ")).collect();
    let args = json!({"content": answer}).to_string();
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
            "id": "call_1", "type": "function", "function": {"name": "new_answer", "arguments": ""}}]}),
        Value::Null,
    )];
    let bytes = args.as_bytes();
    for piece in bytes.chunks(8) {
        let frag = String::from_utf8_lossy(piece).to_string();
        events.push(chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": frag}}]}),
            Value::Null,
        ));
    }
    events.extend(tail("tool_calls"));
    events.into_iter().map(Bytes::from).collect()
}

async fn drain(body: Vec<Bytes>) -> usize {
    let stream = futures::stream::iter(body.into_iter().map(Ok::<_, std::io::Error>));
    let mut chunks =
        decode_stream::<ChatCompletions>("bench".into(), stream, Duration::from_secs(60));
    let mut n = 0;
    while let Some(c) = chunks.next().await {
        black_box(c.ok());
        n += 1;
    }
    n
}

fn decode(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("upstream_decode");
    // Throughput in events (one per read but in the last), whatever the reads.
    let text_200 = text_body(200);
    let tool = tool_body();
    for (name, events, body) in [
        ("text_40_tokens", WORDS + 4, text_body(WORDS)),
        ("text_200_tokens", text_200.len(), text_200.clone()),
        ("tool_call_fragments", tool.len(), tool),
        (
            "text_200_tokens_16k_reads",
            text_200.len(),
            in_reads(&text_200, 16 * 1024),
        ),
    ] {
        let events = events as u64;
        g.throughput(Throughput::Elements(events));
        g.bench_function(name, |b| b.to_async(&rt).iter(|| drain(body.clone())));
    }
    g.finish();
}

/// Answers `new_answer` when offered alone, votes for agent1 when `vote` is offered, and
/// writes text for the presentation; no latency.
#[derive(Debug)]
struct Instant_;

impl Provider for Instant_ {
    fn provider_name(&self) -> &str {
        "bench"
    }
    fn model(&self) -> &str {
        "bench"
    }
    fn stream(&self, request: ProviderRequest) -> ChunkStream {
        let offered = |n: &str| request.tools.iter().any(|t| t.name == n);
        let usage = ProviderChunk::Usage(Usage {
            input_tokens: 900,
            output_tokens: 40,
            total_tokens: 940,
            ..Usage::default()
        });
        let mut out = Vec::new();
        if offered("vote") {
            out.push(ProviderChunk::ToolCall(ToolCall {
                id: "call_v".into(),
                name: "vote".into(),
                arguments: r#"{"agent_id":"agent1","reason":"clearest"}"#.into(),
                opaque: None,
            }));
            out.push(ProviderChunk::Finish(FinishReason::ToolCalls));
        } else if offered("new_answer") {
            let answer: String = (0..WORDS).map(|i| format!("word{i} ")).collect();
            out.push(ProviderChunk::ToolCall(ToolCall {
                id: "call_a".into(),
                name: "new_answer".into(),
                arguments: json!({"content": answer}).to_string(),
                opaque: None,
            }));
            out.push(ProviderChunk::Finish(FinishReason::ToolCalls));
        } else {
            out.extend((0..WORDS).map(|i| ProviderChunk::Text(format!("word{i} "))));
            out.push(ProviderChunk::Finish(FinishReason::Stop));
        }
        out.insert(out.len() - 1, usage);
        Box::pin(futures::stream::iter(out.into_iter().map(Ok)))
    }
}

async fn session(agents: usize, options: OrchestratorOptions) -> usize {
    let provider: Arc<dyn Provider> = Arc::new(Instant_);
    let spec = SessionSpec {
        session_id: "sess_bench".into(),
        agents: (0..agents)
            .map(|i| SessionAgent {
                id: format!("a{i}"),
                system_message: None,
                provider: provider.clone(),
                tools: None,
                price: None,
                vision: false,
            })
            .collect(),
        options,
        input: SessionInput {
            question: "How should a team adopt Rust?".into(),
            ..SessionInput::default()
        },
        stream_agent_text: false,
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel(256);
    let run = run_session(spec, tx, CancellationToken::new(), Arc::new(SystemClock));
    let drain = async {
        let mut n = 0;
        while rx.recv().await.is_some() {
            n += 1;
        }
        n
    };
    let (outcome, n) = tokio::join!(run, drain);
    assert!(outcome.is_ok());
    n
}

fn engine(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("engine");
    let one_turn = OrchestratorOptions {
        skip_final_presentation: true,
        ..OrchestratorOptions::default()
    };
    g.bench_function("one_turn", |b| {
        b.to_async(&rt).iter(|| session(1, one_turn.clone()))
    });
    g.bench_function("three_agent_session", |b| {
        b.to_async(&rt)
            .iter(|| session(3, OrchestratorOptions::default()))
    });
    g.finish();
}

fn sse_line(value: &impl serde::Serialize) -> Bytes {
    // As src/server/doors/chat_completions/mod.rs frames every chunk.
    let mut buf = Vec::with_capacity(256);
    buf.extend_from_slice(b"data: ");
    let _ = serde_json::to_writer(&mut buf, value);
    buf.extend_from_slice(b"\n\n");
    Bytes::from(buf)
}

fn encode(c: &mut Criterion) {
    let header = ChunkHeader::new(
        "chatcmpl-01a1fccafda974da85ea64ba66bc4465".into(),
        1_763_700_000,
        "massgen".into(),
    );
    let mut g = c.benchmark_group("sse_encode");
    g.throughput(Throughput::Elements(1));
    g.bench_function("content_chunk", |b| {
        b.iter(|| sse_line(&header.content(black_box("word17 "))))
    });
    // What the door sends: the same bytes, around the head rendered once per response.
    g.bench_function("content_frame", |b| {
        b.iter(|| header.content_frame(black_box("word17 ")))
    });
    g.bench_function("reasoning_chunk", |b| {
        b.iter(|| {
            sse_line(&header.reasoning(black_box(
                "[agent3] voted for agent1: [simulated] clearest answer\n",
            )))
        })
    });
    // The same chunk as an axum SSE `Event` (what `Sse` would send): serialized through
    // its data writer, which scans every write for line breaks.
    g.bench_function("content_chunk_axum_event", |b| {
        b.iter(|| Event::default().json_data(header.content(black_box("word17 "))))
    });
    g.finish();

    // A whole answer through the response body, hand-rolled frames vs axum's `Sse`: what a
    // client's stream costs per token either way.
    let words: Vec<String> = (0..WORDS).map(|i| format!("word{i} ")).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("sse_body");
    g.throughput(Throughput::Elements(WORDS as u64));
    g.bench_function("hand_rolled_40_chunks", |b| {
        b.to_async(&rt).iter(|| {
            let frames = words
                .iter()
                .map(|w| Ok::<_, std::convert::Infallible>(sse_line(&header.content(w))))
                .collect::<Vec<_>>();
            drain_body(Body::from_stream(futures::stream::iter(frames)))
        })
    });
    g.bench_function("axum_sse_40_chunks", |b| {
        b.to_async(&rt).iter(|| {
            let events = words
                .iter()
                .map(|w| Event::default().json_data(header.content(w)))
                .collect::<Vec<_>>();
            drain_body(
                Sse::new(futures::stream::iter(events))
                    .into_response()
                    .into_body(),
            )
        })
    });
    g.finish();
}

async fn drain_body(body: Body) -> usize {
    let mut body = body;
    let mut n = 0;
    while let Some(frame) = body.frame().await {
        n += black_box(frame.unwrap().into_data().map_or(0, |d| d.len()));
    }
    n
}

criterion_group!(benches, decode, engine, encode);
criterion_main!(benches);
