//! Helpers shared by the provider tests: each wire format's fixtures ([`Format`]) decoded
//! cut at several sizes (or whole, for non-streamed responses), the recorded upstream traffic ([`upstream_dir`]), snapshot
//! comparison; a scripted loopback upstream that records what it receives ([`scripted`])
//! and the request scenarios of the request-building snapshots ([`scenarios`]).

mod scenarios;
mod scripted;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use massgen_providers::retry::CallPolicy;
use massgen_providers::{ChunkStream, FinishReason, ProviderChunk, ProviderError, ToolCall, Usage};
use massgen_providers::{
    anthropic, chat_completions, decode_stream, decode_whole, gemini, responses,
};
use serde_json::Value;

pub use scenarios::*;
pub use scripted::*;

pub const SECOND: Duration = Duration::from_secs(1);

/// A wire format as its tests see it: the folder of its fixtures (`tests/fixtures/<dir>`),
/// its stream decoder and its whole-response decoder.
#[derive(Clone, Copy)]
pub struct Format {
    pub dir: &'static str,
    pub decoder: Decode,
    /// The same decoder over a body that may stay open.
    pub live: LiveDecode,
    pub whole: WholeDecode,
}

pub const CHAT: Format = Format {
    dir: "chat",
    decoder: |p, b, t| decode_stream::<chat_completions::ChatCompletions>(p, b, t),
    live: |p, b, t| decode_stream::<chat_completions::ChatCompletions>(p, b, t),
    whole: decode_whole::<chat_completions::ChatCompletions>,
};
pub const RESPONSES: Format = Format {
    dir: "responses",
    decoder: |p, b, t| decode_stream::<responses::Responses>(p, b, t),
    live: |p, b, t| decode_stream::<responses::Responses>(p, b, t),
    whole: decode_whole::<responses::Responses>,
};
pub const ANTHROPIC: Format = Format {
    dir: "anthropic",
    decoder: |p, b, t| decode_stream::<anthropic::Anthropic>(p, b, t),
    live: |p, b, t| decode_stream::<anthropic::Anthropic>(p, b, t),
    whole: decode_whole::<anthropic::Anthropic>,
};
pub const GEMINI: Format = Format {
    dir: "gemini",
    decoder: |p, b, t| decode_stream::<gemini::Gemini>(p, b, t),
    live: |p, b, t| decode_stream::<gemini::Gemini>(p, b, t),
    whole: decode_whole::<gemini::Gemini>,
};

impl Format {
    pub fn fixture(self, name: &str) -> Vec<u8> {
        let path = fixture_path(self.dir, name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// A fixture as text (an SSE body, an error body).
    pub fn text(self, name: &str) -> String {
        String::from_utf8(self.fixture(name)).unwrap()
    }

    /// A fixture as the 200 SSE reply of the scripted upstream.
    pub fn sse(self, name: &str) -> Reply {
        Reply::Sse(self.text(name))
    }

    /// A fixture decoded (cut at every size): its chunks and error.
    pub async fn chunks(self, name: &str) -> (Vec<ProviderChunk>, Option<ProviderError>) {
        decode_bytes(name, self.fixture(name), self.decoder).await
    }

    /// A fixture decoded (cut at every size) and added up.
    pub async fn decode(self, name: &str) -> Outcome {
        let (chunks, error) = self.chunks(name).await;
        outcome(chunks, error)
    }

    /// A whole-response fixture decoded and added up.
    pub fn decode_whole(self, name: &str) -> Outcome {
        match (self.whole)("test", &self.fixture(name)) {
            Ok(chunks) => outcome(chunks, None),
            Err(error) => outcome(Vec::new(), Some(error)),
        }
    }

    /// The chunks a fixture gives when its body stops right after the first event that
    /// names `call` and then stays open: the call must be announced by then, long before
    /// it is complete.
    pub async fn announces_early(self, fixture: &str, call: &str) -> Vec<ProviderChunk> {
        let text = self.text(fixture);
        let at = text
            .find(&format!("\"{call}\""))
            .unwrap_or_else(|| panic!("{fixture} does not name {call}"));
        let end = ["\n\n", "\r\n\r\n"]
            .iter()
            .filter_map(|sep| text[at..].find(sep).map(|e| at + e + sep.len()))
            .min()
            .expect("the event ends");
        let head: Vec<Result<Bytes, std::io::Error>> =
            vec![Ok(Bytes::from(text[..end].to_owned()))];
        let body = futures::stream::iter(head)
            .chain(futures::stream::pending())
            .boxed();
        let mut stream = (self.live)("test".into(), body, Duration::from_secs(3600));
        let mut chunks = Vec::new();
        while let Ok(Some(item)) = tokio::time::timeout(SECOND, stream.next()).await {
            chunks.push(item.expect("no error"));
        }
        assert!(
            !chunks
                .iter()
                .any(|c| matches!(c, ProviderChunk::ToolCall(_))),
            "{fixture}: the call cannot be complete yet: {chunks:?}"
        );
        chunks
    }
}

pub fn fixture_path(dir: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir)
        .join(name)
}

/// A body as a byte stream cut into pieces of `piece` bytes.
pub type Pieces = futures::stream::Iter<std::vec::IntoIter<Result<Bytes, std::io::Error>>>;

pub fn byte_stream(bytes: &[u8], piece: usize) -> Pieces {
    let pieces: Vec<Result<Bytes, std::io::Error>> = bytes
        .chunks(piece.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    futures::stream::iter(pieces)
}

/// The shared fixtures folder: `MASSGEN_SHARED_DIR`, or `../shared` beside the
/// repository (this crate is two folders down in it).
pub fn shared_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("MASSGEN_SHARED_DIR").map(PathBuf::from)
        && dir.is_dir()
    {
        return Some(dir);
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
    dir.is_dir().then_some(dir)
}

/// The recorded upstream traffic (`<shared>/fixtures/upstream`, see [`shared_dir`]);
/// `None` (after saying why) lets the replay tests pass where it is absent.
pub fn upstream_dir() -> Option<PathBuf> {
    let dir = shared_dir().map(|shared| shared.join("fixtures/upstream"));
    if dir.as_ref().is_some_and(|d| d.is_dir()) {
        dir
    } else {
        println!("skipped: ../shared/fixtures/upstream not found");
        None
    }
}

/// The files of `root/dir` whose names end with `suffix`, sorted so runs are repeatable.
pub fn files(root: &Path, dir: &str, suffix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    files.sort();
    files
}

pub type Decode = fn(String, Pieces, Duration) -> ChunkStream;
pub type WholeDecode = fn(&str, &[u8]) -> Result<Vec<ProviderChunk>, ProviderError>;
pub type LiveDecode = fn(
    String,
    futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>>,
    Duration,
) -> ChunkStream;

pub async fn collect(mut stream: ChunkStream) -> (Vec<ProviderChunk>, Option<ProviderError>) {
    let mut chunks = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(chunk) => chunks.push(chunk),
            Err(error) => {
                assert!(stream.next().await.is_none(), "nothing after an error");
                return (chunks, Some(error));
            }
        }
    }
    (chunks, None)
}

/// Decodes `bytes` cut into pieces of several sizes; every cut must give the same result.
pub async fn decode_bytes(
    label: &str,
    bytes: Vec<u8>,
    decode: Decode,
) -> (Vec<ProviderChunk>, Option<ProviderError>) {
    let whole = bytes.len();
    let mut results = Vec::new();
    for piece in [1, 7, 64, whole] {
        let stream = decode("test".into(), byte_stream(&bytes, piece), SECOND);
        results.push(collect(stream).await);
    }
    let first = results[0].clone();
    for other in &results[1..] {
        assert_eq!(
            &first, other,
            "{label}: result depends on how bytes are split"
        );
    }
    first
}

/// What a decoded stream adds up to.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Outcome {
    pub text: String,
    pub reasoning: String,
    /// Names of the `ToolCallStarted` announcements, in order.
    pub started: Vec<String>,
    pub calls: Vec<ToolCall>,
    pub usage: Option<Usage>,
    pub finish: Option<FinishReason>,
    pub error: Option<ProviderError>,
}

pub fn outcome(chunks: Vec<ProviderChunk>, error: Option<ProviderError>) -> Outcome {
    let mut out = Outcome {
        error,
        ..Outcome::default()
    };
    for chunk in chunks {
        match chunk {
            ProviderChunk::Text(t) => out.text.push_str(&t),
            ProviderChunk::Reasoning(t) => out.reasoning.push_str(&t),
            ProviderChunk::ToolCallStarted { name } => out.started.push(name),
            ProviderChunk::ToolCall(c) => {
                out.calls.push(c);
                assert_announced(&out.started, &out.calls, false);
            }
            ProviderChunk::Usage(u) => out.usage = Some(u),
            ProviderChunk::Finish(f) => {
                assert!(out.finish.is_none(), "two finishes");
                out.finish = Some(f);
                assert_announced(&out.started, &out.calls, true);
            }
        }
    }
    out
}

/// What the upstream reported so far is passed on before the end (a cancelled call still
/// counts its input).
pub fn assert_usage_so_far(chunks: &[ProviderChunk]) {
    assert!(
        chunks
            .iter()
            .any(|c| matches!(c, ProviderChunk::Usage(u) if u.input_tokens > 0)),
        "{chunks:?}"
    );
}

/// Every complete call was announced before it (`ToolCallStarted` with its name), once per
/// call; with `finished`, every announced call also completed.
pub fn assert_announced(started: &[String], calls: &[ToolCall], finished: bool) {
    for call in calls {
        let made = calls.iter().filter(|c| c.name == call.name).count();
        let announced = started.iter().filter(|n| **n == call.name).count();
        assert!(
            announced >= made,
            "{} made {made} time(s), announced {announced}: {started:?}",
            call.name
        );
    }
    if finished {
        assert_eq!(
            started.len(),
            calls.len(),
            "announced {started:?}, made {calls:?}"
        );
    }
}

pub fn usage(input: u64, output: u64, total: u64, cached: u64, reasoning: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: total,
        cached_input_tokens: cached,
        reasoning_tokens: reasoning,
    }
}

pub fn fast_policy(max_attempts: u32) -> CallPolicy {
    CallPolicy {
        max_attempts,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        max_retry_after: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(2),
        first_byte_timeout: Duration::from_secs(5),
        whole_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
    }
}

/// Compares `actual` with the snapshot `tests/fixtures/<dir>/<name>.json`; with
/// `MASSGEN_UPDATE_SNAPSHOTS=1` (re)writes it instead. A missing snapshot fails.
pub fn snapshot(dir: &str, name: &str, actual: &Value) {
    let path = fixture_path(dir, &format!("{name}.json"));
    let pretty = serde_json::to_string_pretty(actual).unwrap() + "\n";
    if std::env::var_os("MASSGEN_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &pretty).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with MASSGEN_UPDATE_SNAPSHOTS=1 to write it)",
            path.display()
        )
    });
    let expected: Value = serde_json::from_str(&expected).unwrap();
    assert_eq!(
        &expected,
        actual,
        "{} differs; actual:\n{pretty}",
        path.display()
    );
}
