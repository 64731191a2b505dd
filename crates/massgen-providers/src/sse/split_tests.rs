//! The SSE layer cut anywhere: every recorded event stream (and made-up ones with every
//! line end) split at every byte, or in random pieces, gives the events it gives whole;
//! the per-event count behind [`MAX_EVENT_BYTES`] is the same however the bytes arrive,
//! and the bound holds at its real size under random pieces.

use std::convert::Infallible;

use bytes::Bytes;
use futures::StreamExt;

use super::*;
use crate::testing::{self, Rng};

/// The events the stream decoder sees for a body arriving in `pieces` (bounded at
/// `max_event` bytes per event, then parsed), with the error that ended them, if any.
pub(crate) fn events_bounded(pieces: &[&[u8]], max_event: usize) -> Vec<Result<Sse, String>> {
    let body: Vec<Result<Bytes, Infallible>> = pieces
        .iter()
        .map(|piece| Ok(Bytes::copy_from_slice(piece)))
        .collect();
    let events = SseStream::from_bytes_stream(bounded(futures::stream::iter(body), max_event));
    futures::executor::block_on(
        events
            .map(|event| event.map_err(|e| e.to_string()))
            .collect(),
    )
}

/// As [`events_bounded`], at the bound the decoder uses.
pub(crate) fn events(pieces: &[&[u8]]) -> Vec<Result<Sse, String>> {
    events_bounded(pieces, MAX_EVENT_BYTES)
}

/// The streams these tests cut: every recorded `.sse` body, and made-up ones.
fn streams(rng: &mut Rng) -> Vec<(String, Vec<u8>)> {
    let mut streams: Vec<(String, Vec<u8>)> = testing::recorded()
        .into_iter()
        .filter(|(name, _)| name.ends_with(".sse"))
        .collect();
    for n in 0..24 {
        let events = rng.within(1, 12);
        streams.push((format!("made-up #{n}"), testing::made_up_sse(rng, events)));
    }
    streams
}

/// Where each event of an SSE body starts: 0, and after each blank line (two line ends,
/// a CRLF being one). The parser holds nothing across these, so the stretch between two
/// of them parses within it as within the whole body: a cut is checked on the events
/// around it, and costs what they do, not what the whole recording does.
fn event_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = vec![0];
    let mut line_empty = true;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\r' | b'\n' => {
                if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                if line_empty {
                    starts.push(i + 1);
                }
                line_empty = true;
            }
            _ => line_empty = false,
        }
        i += 1;
    }
    starts.dedup();
    starts
}

/// The stretch of the body from the start of the event at `at` to the end of the one after
/// it (whose parsing a cut could upset too).
fn around(starts: &[usize], len: usize, at: usize) -> (usize, usize) {
    let k = starts
        .partition_point(|&start| start <= at)
        .saturating_sub(1);
    (starts[k], starts.get(k + 2).copied().unwrap_or(len))
}

#[test]
fn every_stream_cut_anywhere_gives_the_same_events() {
    let seed = testing::seed();
    let mut rng = Rng::new(seed);
    let mut cuts = 0;
    for (name, bytes) in streams(&mut rng) {
        let whole = events(&[&bytes]);
        assert!(
            !whole.is_empty() && whole.iter().all(Result::is_ok),
            "{name}: {} events, an error among them",
            whole.len()
        );
        let starts = event_starts(&bytes);
        let mut parsed = std::collections::HashMap::new();
        // Every position of the short recordings (half of them); of the others, the first
        // and last 1,024 and 2,048 more at random.
        for at in testing::cut_points(&mut rng, bytes.len(), 4 * 1024) {
            let (from, to) = around(&starts, bytes.len(), at);
            let stretch = &bytes[from..to];
            let expected = parsed
                .entry((from, to))
                .or_insert_with(|| events(&[stretch]));
            let (a, b) = stretch.split_at(at - from);
            assert!(
                events(&[a, b]) == *expected,
                "{name} cut at {at} (seed {seed}): the events differ"
            );
            cuts += 1;
        }
        // The whole body in random pieces, as a client reads it; byte-sized ones for all
        // but the longest recordings (a piece costs the same whatever its size).
        let smallest = if bytes.len() <= 16 * 1024 { 1 } else { 64 };
        for most in [1, 3, 16, 256].map(|most: usize| most.max(smallest)) {
            let pieces = testing::random_pieces(&mut rng, &bytes, most);
            assert!(
                events(&pieces) == whole,
                "{name} in pieces of 1..={most} (seed {seed}): the events differ"
            );
        }
    }
    println!("{cuts} cuts checked (seed {seed})");
}

/// The counter's state: bytes of the event being received, and where in a line end it is.
fn state(count: &EventBytes) -> (usize, bool, bool) {
    (count.since_end, count.at_line_end, count.after_cr)
}

/// The counter's state after each byte fed alone: what any way of cutting must agree with.
fn byte_by_byte(bytes: &[u8]) -> Vec<(usize, bool, bool)> {
    let mut count = EventBytes::default();
    let mut states = vec![state(&count)];
    for byte in bytes {
        count.feed(std::slice::from_ref(byte), usize::MAX);
        states.push(state(&count));
    }
    states
}

/// Any cutting is a series of pieces, so this is the whole property: from the state at
/// any position, a piece (one byte, a few, or up to the end of its event as providers
/// send them, which takes the fast path) leads to the state byte-by-byte feeding reaches.
#[test]
fn an_events_byte_count_does_not_depend_on_how_its_bytes_arrive() {
    let seed = testing::seed();
    let mut rng = Rng::new(seed);
    let mut pieces = 0;
    for (name, bytes) in streams(&mut rng) {
        let expected = byte_by_byte(&bytes);
        let starts = event_starts(&bytes);
        for from in 0..bytes.len() {
            let next_start = starts
                .get(starts.partition_point(|&start| start <= from))
                .copied()
                .unwrap_or(bytes.len());
            let short = (from + rng.within(1, 64)).min(bytes.len());
            for to in [from + 1, short, next_start] {
                let (since_end, at_line_end, after_cr) = expected[from];
                let mut count = EventBytes {
                    since_end,
                    at_line_end,
                    after_cr,
                };
                count.feed(&bytes[from..to], usize::MAX);
                assert_eq!(
                    state(&count),
                    expected[to],
                    "{name}: bytes {from}..{to} in one piece (seed {seed})"
                );
                pieces += 1;
            }
        }
        // So the bound's verdict is the byte-wise count at the pieces' ends: fed byte by
        // byte (every count checked), the largest event passes a bound of its own size
        // and fails one a byte smaller. Through the parser, for the short streams.
        if bytes.len() <= 16 * 1024 {
            let largest = expected.iter().map(|state| state.0).max().unwrap_or(0);
            let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
            assert!(
                events_bounded(&bytewise, largest) == events(&[&bytes]),
                "{name}: a bound of {largest} bytes"
            );
            let cut = events_bounded(&bytewise, largest - 1);
            assert!(
                cut.last()
                    .is_some_and(|last| last.as_ref().is_err_and(|e| e.contains("MiB"))),
                "{name}: {largest} - 1 bytes allowed, yet no error"
            );
        }
    }
    println!("{pieces} pieces checked (seed {seed})");
}

/// The real bound, 16 MiB, under random pieces (1 byte to 64 KiB): an event of exactly
/// that size passes, one that never ends fails once it is past it, by one piece at most.
#[test]
fn the_16_mib_event_bound_holds_however_the_bytes_arrive() {
    let seed = testing::seed();
    let mut rng = Rng::new(seed);
    // "data: " + payload + "\n" is the event's count; its blank line ends it.
    let payload = MAX_EVENT_BYTES - "data: \n".len();
    let mut exact = Vec::with_capacity(MAX_EVENT_BYTES + 2);
    exact.extend_from_slice(b"data: ");
    exact.resize(6 + payload, b'x');
    exact.extend_from_slice(b"\n\n");
    for round in 0..2 {
        let pieces = testing::random_pieces(&mut rng, &exact, 64 * 1024);
        let got = events(&pieces);
        assert_eq!(got.len(), 1, "round {round} (seed {seed})");
        let data = got[0].as_ref().ok().and_then(|event| event.data.as_ref());
        assert_eq!(
            data.map(String::len),
            Some(payload),
            "round {round} (seed {seed})"
        );
    }
    // Larger by more than one piece: refused whatever the pieces (the count is checked
    // at each piece's end, so an event's last piece may take it past the bound unseen;
    // that piece is in memory already).
    let mut over = exact.clone();
    over.splice(6..6, std::iter::repeat_n(b'y', 64 * 1024 + 1));
    for round in 0..2 {
        let pieces = testing::random_pieces(&mut rng, &over, 64 * 1024);
        let got = events(&pieces);
        assert_eq!(
            got.len(),
            1,
            "round {round}: no event got through (seed {seed})"
        );
        let error = got[0].as_ref().map(|_| "an event").unwrap_err();
        assert!(
            error.contains("16 MiB"),
            "round {round}: {error} (seed {seed})"
        );
    }
    // An event that never ends, in random pieces: the stream stops at the piece that
    // takes it past the bound, having passed on no more than the bound.
    let mut pieces = vec![Bytes::from_static(b"data: ")];
    let mut total = pieces[0].len();
    while total <= MAX_EVENT_BYTES + 64 * 1024 {
        let n = rng.within(1, 64 * 1024);
        pieces.push(Bytes::from(vec![b'z'; n]));
        total += n;
    }
    let body = futures::stream::iter(pieces.into_iter().map(Ok::<_, Infallible>));
    let got: Vec<_> = futures::executor::block_on(bounded(body, MAX_EVENT_BYTES).collect());
    assert!(
        matches!(got.last(), Some(Err(BodyError::EventTooLarge(_)))),
        "seed {seed}"
    );
    let passed: usize = got
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(Bytes::len)
        .sum();
    assert!(passed <= MAX_EVENT_BYTES, "{passed} (seed {seed})");
    assert!(got[..got.len() - 1].iter().all(Result::is_ok));
}
