//! What the crate's split tests share: a seeded generator (xorshift64*: a failure names
//! the seed that reproduces it), the recorded upstream bodies of the shared fixtures (read
//! at test time, never copied into the repository), bodies made up to reach what the
//! recordings do not, and the ways a byte string is cut into pieces.

use std::path::{Path, PathBuf};

/// A small deterministic generator: the same seed gives the same cases on every machine.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        // splitmix64 of the seed: xorshift needs a state that is not zero, and nearby
        // seeds should not give nearby sequences.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Self((z ^ (z >> 31)) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A number in `low..=high`.
    pub(crate) fn within(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high - low + 1)
    }

    /// True once in `n` times.
    pub(crate) fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The seed of a run: `MASSGEN_TEST_SEED` when set (to try other cases), else a fixed one
/// so that every run checks the same cases.
pub(crate) fn seed() -> u64 {
    std::env::var("MASSGEN_TEST_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or(0x006d_6173_7367_656e)
}

/// The shared fixtures folder: `MASSGEN_SHARED_DIR`, or `../shared` beside the repository
/// (this crate is two folders down in it).
fn shared_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("MASSGEN_SHARED_DIR").map(PathBuf::from)
        && dir.is_dir()
    {
        return Some(dir);
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
    dir.is_dir().then_some(dir)
}

/// Every recorded response body (`.sse` and `.json`) under `<shared>/fixtures/upstream`,
/// named by its path there, in a stable order; none (after saying so) where the folder is
/// absent, and the made-up bodies still run.
pub(crate) fn recorded() -> Vec<(String, Vec<u8>)> {
    let Some(root) = shared_dir().map(|dir| dir.join("fixtures/upstream")) else {
        println!("../shared/fixtures/upstream not found: made-up bodies only");
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut folders = vec![root.clone()];
    // The fixtures are two levels deep; the bound keeps a stray link from looping.
    while let Some(folder) = folders.pop().filter(|_| found.len() < 10_000) {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for path in entries.filter_map(|entry| entry.ok().map(|entry| entry.path())) {
            if path.is_dir() {
                folders.push(path);
            } else if path
                .extension()
                .is_some_and(|ext| ext == "sse" || ext == "json")
            {
                let name = path.strip_prefix(&root).unwrap_or(&path);
                let name = name.to_string_lossy().into_owned();
                match std::fs::read(&path) {
                    Ok(bytes) => found.push((name, bytes)),
                    Err(error) => panic!("{}: {error}", path.display()),
                }
            }
        }
    }
    found.sort();
    found
}

/// A made-up event stream of `events` events, with what recordings rarely have: every
/// line end (LF, CRLF, CR), comments, `event:`/`id:`/`retry:` fields, data of several
/// lines, and data that looks like HTTP framing (chunk-size lines, `0\r\n\r\n`, a status
/// line) or holds multi-byte UTF-8.
pub(crate) fn made_up_sse(rng: &mut Rng, events: usize) -> Vec<u8> {
    const TEXT: &[&str] = &[
        "{\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}",
        "0\r\n\r\n",
        "1a;ext=1",
        "HTTP/1.1 200 OK",
        "ünïcödé ✓ 🦀",
        "[DONE]",
        "a: b",
        "",
        " leading space",
    ];
    // One line end for the whole stream, as real servers do; CR alone is legal SSE.
    let end = *rng.pick(&["\n", "\r\n", "\r"]);
    let mut out = String::new();
    if rng.one_in(4) {
        out.push('\u{feff}');
    }
    for n in 0..events {
        if rng.one_in(3) {
            out.push_str(": keep-alive");
            out.push_str(end);
        }
        if rng.one_in(2) {
            out.push_str(&format!("event: e{n}{end}"));
        }
        if rng.one_in(4) {
            out.push_str(&format!("id: {n}{end}"));
        }
        if rng.one_in(8) {
            out.push_str(&format!("retry: {}{end}", rng.below(5000)));
        }
        for _ in 0..rng.within(1, 3) {
            let mut text = (*rng.pick(TEXT)).replace(['\r', '\n'], "");
            text.push_str(&"x".repeat(rng.below(40)));
            out.push_str(&format!("data: {text}{end}"));
        }
        out.push_str(end);
    }
    out.into_bytes()
}

/// Made-up bytes of no format (a `.json` body, say), with line ends and framing-like text.
pub(crate) fn made_up_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    const BYTES: &[u8] = b"\r\n;:0123456789abcdefABCDEF {}\"xyz\t";
    (0..len).map(|_| *rng.pick(BYTES)).collect()
}

/// `bytes` cut into pieces of random sizes in `1..=most`.
pub(crate) fn random_pieces<'a>(rng: &mut Rng, bytes: &'a [u8], most: usize) -> Vec<&'a [u8]> {
    let mut pieces = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let take = rng.within(1, most).min(bytes.len() - at);
        pieces.push(&bytes[at..at + take]);
        at += take;
    }
    pieces
}
