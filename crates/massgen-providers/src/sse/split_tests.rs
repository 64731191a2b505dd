//! The SSE layer cut anywhere: every recorded event stream (and made-up ones with every
//! line end) split at every byte, in random pieces and byte by byte, gives the events it
//! gives whole, which are the events `sse-stream` (the parser before ours) gave; the bound
//! behind [`MAX_EVENT_BYTES`] is the same however the bytes arrive, and holds at its real
//! size under random pieces.

use std::convert::Infallible;

use bytes::Bytes;
use futures::StreamExt;

use super::*;
use crate::testing::{self, Rng};

/// The events the stream decoder sees for a body arriving in `pieces` (at most `max_event`
/// bytes per event), with the error that ended them, as the call would report it.
pub(crate) fn events_bounded(pieces: &[&[u8]], max_event: usize) -> Vec<Result<SseEvent, String>> {
    let body: Vec<Result<Bytes, Infallible>> = pieces
        .iter()
        .map(|piece| Ok(Bytes::copy_from_slice(piece)))
        .collect();
    let events = Events::new(futures::stream::iter(body), max_event);
    futures::executor::block_on(
        events
            .map(|event| event.map_err(|e| body_error("test", &e).message))
            .collect(),
    )
}

/// As [`events_bounded`], at the bound the decoder uses.
pub(crate) fn events(pieces: &[&[u8]]) -> Vec<Result<SseEvent, String>> {
    events_bounded(pieces, MAX_EVENT_BYTES)
}

/// The events `sse-stream` 0.2 gave for the same pieces (with no bound).
fn sse_stream_events(pieces: &[&[u8]]) -> Vec<Result<SseEvent, String>> {
    let body: Vec<Result<Bytes, Infallible>> = pieces
        .iter()
        .map(|piece| Ok(Bytes::copy_from_slice(piece)))
        .collect();
    let events = sse_stream::SseStream::from_bytes_stream(futures::stream::iter(body));
    futures::executor::block_on(
        events
            .map(|event| {
                event
                    .map(|sse| SseEvent {
                        event: sse.event,
                        data: sse.data,
                        id: sse.id,
                        retry: sse.retry,
                    })
                    .map_err(|e| e.to_string())
            })
            .collect(),
    )
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
fn every_stream_cut_anywhere_gives_the_same_events_as_sse_stream() {
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
        assert!(
            whole == sse_stream_events(&[&bytes]),
            "{name}: the events differ from sse-stream's"
        );
        let starts = event_starts(&bytes);
        let mut parsed = std::collections::HashMap::new();
        // Every position; each cut checked on the events around it.
        for at in 0..=bytes.len() {
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
        // The whole body byte by byte, in 3 to 5 pieces cut anywhere, and in random pieces
        // as a client reads them; sse-stream's events for some of them too.
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        assert!(events(&bytewise) == whole, "{name} byte by byte");
        for round in 0..4 {
            let mut cuts: Vec<usize> = (0..rng.within(2, 4))
                .map(|_| rng.below(bytes.len() + 1))
                .collect();
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                pieces.push(&bytes[from..cut]);
                from = cut;
            }
            assert!(
                events(&pieces) == whole,
                "{name} in pieces {round} (seed {seed}): the events differ"
            );
            assert!(
                sse_stream_events(&pieces) == whole,
                "{name} in pieces {round} (seed {seed}): sse-stream's events differ"
            );
        }
        for most in [3, 16, 256] {
            let pieces = testing::random_pieces(&mut rng, &bytes, most);
            assert!(
                events(&pieces) == whole,
                "{name} in pieces of 1..={most} (seed {seed}): the events differ"
            );
        }
    }
    println!("{cuts} cuts checked (seed {seed})");
}

/// The bytes of the largest event in `bytes` as the bound counts them: its lines with their
/// line ends (a CRLF two bytes), from the blank line before it to the one after.
fn largest_event(bytes: &[u8]) -> usize {
    let (mut largest, mut event, mut line) = (0, 0, 0);
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\r' | b'\n' => {
                let end = if bytes[i..].starts_with(b"\r\n") {
                    2
                } else {
                    1
                };
                event = if line == 0 { 0 } else { event + line + end };
                largest = largest.max(event);
                line = 0;
                i += end;
            }
            _ => {
                line += 1;
                i += 1;
            }
        }
    }
    largest.max(event + line)
}

/// Whatever the pieces, the largest event of each stream passes a bound of its own size
/// and fails one a byte smaller.
#[test]
fn an_events_byte_count_does_not_depend_on_how_its_bytes_arrive() {
    let seed = testing::seed();
    let mut rng = Rng::new(seed);
    for (name, bytes) in streams(&mut rng) {
        let largest = largest_event(&bytes);
        let whole = events(&[&bytes]);
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        let random = testing::random_pieces(&mut rng, &bytes, 64);
        for (how, pieces) in [
            ("whole", vec![&bytes[..]]),
            ("bytewise", bytewise),
            ("random", random),
        ] {
            assert!(
                events_bounded(&pieces, largest) == whole,
                "{name} {how}: a bound of {largest} bytes (seed {seed})"
            );
            let cut = events_bounded(&pieces, largest - 1);
            assert!(
                cut.last()
                    .is_some_and(|last| last.as_ref().is_err_and(|e| e.contains("MiB"))),
                "{name} {how}: {largest} - 1 bytes allowed, yet no error (seed {seed})"
            );
        }
    }
}

/// The real bound, 16 MiB, under random pieces (1 byte to 64 KiB): an event of exactly
/// that size passes, one a byte larger fails, and so does one that never ends.
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
    // One byte larger: refused whatever the pieces (the count is checked at each line's
    // end and before an unfinished line is kept).
    let mut over = exact.clone();
    over.insert(6, b'y');
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
    // takes it past the bound.
    let mut pieces = vec![Bytes::from_static(b"data: ")];
    let mut total = pieces[0].len();
    while total <= MAX_EVENT_BYTES + 64 * 1024 {
        let n = rng.within(1, 64 * 1024);
        pieces.push(Bytes::from(vec![b'z'; n]));
        total += n;
    }
    let body = futures::stream::iter(pieces.into_iter().map(Ok::<_, Infallible>));
    let got: Vec<_> = futures::executor::block_on(Events::new(body, MAX_EVENT_BYTES).collect());
    assert_eq!(got.len(), 1, "seed {seed}");
    let error = body_error("test", got[0].as_ref().map(|_| "an event").unwrap_err());
    assert_eq!(error.kind, ProviderErrorKind::InvalidResponse);
    assert_eq!(
        error.message, "the upstream sent an event of more than 16 MiB",
        "seed {seed}"
    );
}
