//! The parser's rules one by one (line ends, across chunk edges too; the BOM; comments;
//! fields; what it refuses, in `sse-stream`'s words) and its bound: an event of exactly the
//! bound passes, one byte more fails, and an endless line stops at the bound without its
//! buffer growing past it.

use super::*;
use crate::testing::{self, Rng};

/// The events of `pieces` fed in order, with the error that stopped them.
fn parse(pieces: &[&[u8]], max: usize) -> Vec<Result<SseEvent, ParseError>> {
    let mut parser = Parser::new(max);
    let mut out = Vec::new();
    for piece in pieces {
        parser.feed(piece);
        out.extend(std::iter::from_fn(|| parser.next_event()));
    }
    out
}

fn whole(body: &[u8]) -> Vec<Result<SseEvent, ParseError>> {
    parse(&[body], 1024)
}

/// `body` whole, cut at every byte, and byte by byte: one answer.
fn parse_any_way(body: &[u8]) -> Vec<Result<SseEvent, ParseError>> {
    let expected = whole(body);
    for at in 0..=body.len() {
        let (a, b) = body.split_at(at);
        assert_eq!(parse(&[a, b], 1024), expected, "{body:?} cut at {at}");
    }
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(parse(&bytes, 1024), expected, "{body:?} byte by byte");
    expected
}

fn data(text: &str) -> Result<SseEvent, ParseError> {
    Ok(SseEvent {
        data: Some(text.into()),
        ..SseEvent::default()
    })
}

#[test]
fn lf_crlf_and_cr_end_lines_and_a_crlf_split_between_chunks_is_one_end() {
    for end in ["\n", "\r\n", "\r"] {
        let body = format!("data: a{end}data: b{end}{end}data: c{end}{end}").into_bytes();
        assert_eq!(
            parse_any_way(&body),
            vec![data("a\nb"), data("c")],
            "{end:?}"
        );
    }
    // A CR, then an LF in the next chunk: had the LF been a line of its own, the event
    // would have ended after `a`.
    assert_eq!(
        parse(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"], 1024),
        vec![data("a\nb")]
    );
    // CR CR is a blank line; LF CR is two line ends too.
    assert_eq!(
        parse_any_way(b"data: a\r\rdata: b\n\r"),
        vec![data("a"), data("b")]
    );
}

#[test]
fn a_bom_is_skipped_at_the_start_of_the_stream_only() {
    assert_eq!(parse_any_way(b"\xEF\xBB\xBFdata: a\n\n"), vec![data("a")]);
    assert_eq!(
        parse_any_way(b"\xEF\xBB\xBF: hello\n\xEF\xBB\xBFdata: a\n\n"),
        vec![Err(malformed("invalid line"))],
        "a BOM later is part of the line (an unknown field here)"
    );
}

#[test]
fn comments_are_skipped_and_fields_lose_one_leading_space() {
    let body =
        b": keep-alive\nevent: delta\ndata:x\n: in between\ndata:  two\nid: 7\nretry: 300\n\n";
    assert_eq!(
        parse_any_way(body),
        vec![Ok(SseEvent {
            event: Some("delta".into()),
            data: Some("x\n two".into()),
            id: Some("7".into()),
            retry: Some(300),
        })]
    );
    // Only comments between blank lines: no event.
    assert_eq!(
        parse_any_way(b": a\n\n:b\n\n\n\ndata: c\n\n"),
        vec![data("c")]
    );
    // An empty data line is a line of data.
    assert_eq!(
        parse_any_way(b"data\ndata:\n\n"),
        vec![Err(malformed("invalid line"))]
    );
    assert_eq!(parse_any_way(b"data:\ndata:\n\n"), vec![data("\n")]);
}

#[test]
fn an_event_with_fields_but_no_data_is_dispatched_as_sse_stream_did() {
    let ping = SseEvent {
        event: Some("ping".into()),
        ..SseEvent::default()
    };
    assert_eq!(parse_any_way(b"event: ping\n\n"), vec![Ok(ping)]);
}

#[test]
fn an_id_holding_nul_is_ignored() {
    assert_eq!(parse_any_way(b"id: a\0b\ndata: x\n\n"), vec![data("x")]);
}

#[test]
fn the_unfinished_last_event_is_dropped() {
    assert_eq!(parse_any_way(b"data: a\n\ndata: b\n"), vec![data("a")]);
    assert_eq!(parse_any_way(b"data: a\n\ndata: b"), vec![data("a")]);
}

#[test]
fn what_is_not_sse_fails_with_sse_streams_messages_after_the_events_before_it() {
    let reference = |body: &[u8]| {
        let chunks = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::copy_from_slice(body))]);
        let events: Vec<_> = futures::executor::block_on(futures::StreamExt::collect(
            sse_stream::SseStream::from_bytes_stream(chunks),
        ));
        events
            .into_iter()
            .find_map(Result::err)
            .map(|error| error.to_string())
    };
    for body in [
        &b"no colon\n"[..],
        b"unknown: field\n",
        b"event: a\nevent: b\n",
        b"id: 1\nid: 2\n",
        b"retry: 1\nretry: 2\n",
        b"retry: soon\n",
        b"retry: -1\n",
        b"data: \xff\xfe\n",
        b"event: \xc3\n",
    ] {
        let mut prefixed = b"data: first\n\n".to_vec();
        prefixed.extend_from_slice(body);
        prefixed.extend_from_slice(b"\ndata: never\n\n");
        let got = parse_any_way(&prefixed);
        let text = String::from_utf8_lossy(body);
        assert_eq!(got.len(), 2, "{text:?}: {got:?}");
        assert_eq!(got[0], data("first"), "{text:?}");
        let Err(ParseError::Malformed(message)) = &got[1] else {
            panic!("{text:?}: {got:?}");
        };
        assert_eq!(Some(message.clone()), reference(body), "{text:?}");
    }
    // Stopped for good: later chunks bring nothing.
    let mut parser = Parser::new(1024);
    parser.feed(b"oops\n");
    assert!(matches!(parser.next_event(), Some(Err(_))));
    parser.feed(b"data: x\n\n");
    assert!(parser.next_event().is_none() && parser.failed());
}

#[test]
fn an_event_of_exactly_the_bound_passes_and_one_byte_more_fails() {
    for end in ["\n", "\r\n", "\r"] {
        // The event's bytes: its lines with their ends, the blank line not counted.
        let event = format!(": c{end}data: 0123{end}data: 45{end}");
        let max = event.len();
        let body = format!("{event}{end}{event}{end}").into_bytes();
        let pieces: Vec<&[u8]> = body.chunks(1).collect();
        for pieces in [vec![&body[..]], pieces] {
            assert_eq!(
                parse(&pieces, max),
                vec![data("0123\n45"), data("0123\n45")],
                "{end:?}: blank lines end the count"
            );
            assert_eq!(
                parse(&pieces, max - 1),
                vec![Err(ParseError::EventTooLarge(max - 1))],
                "{end:?}"
            );
        }
    }
    assert_eq!(
        ParseError::EventTooLarge(16 * 1024 * 1024).to_string(),
        "the upstream sent an event of more than 16 MiB"
    );
}

#[test]
fn an_endless_line_fails_at_the_bound_and_never_holds_more() {
    let max = 64 * 1024;
    let seed = testing::seed();
    let mut rng = Rng::new(seed);
    for round in 0..4 {
        let mut parser = Parser::new(max);
        parser.feed(b"data: ");
        let mut fed = 6;
        let error = loop {
            let n = rng.within(1, 4096);
            parser.feed(&vec![b'z'; n]);
            fed += n;
            assert!(
                parser.line.capacity() <= max,
                "round {round}: {} bytes held (seed {seed})",
                parser.line.capacity()
            );
            if let Some(next) = parser.next_event() {
                break next;
            }
            assert!(fed <= max, "round {round}: past the bound (seed {seed})");
        };
        assert_eq!(error, Err(ParseError::EventTooLarge(max)));
        assert!(fed > max, "round {round}: {fed} bytes (seed {seed})");
        assert_eq!(parser.line.capacity(), 0, "dropped once failed");
    }
    // `data:` lines without the blank line: the same.
    let line = b"data: 0123456789abcdef\n";
    let mut parser = Parser::new(max);
    let mut fed = 0;
    while parser.next_event().is_none() {
        assert!(fed <= max, "{fed}");
        parser.feed(line);
        fed += line.len();
    }
    assert!(fed > max && fed <= max + line.len(), "{fed}");
}

#[test]
fn a_large_line_buffer_is_let_go_once_its_line_is_read() {
    let mut parser = Parser::new(1024 * 1024);
    parser.feed(b"data: ");
    parser.feed(&vec![b'x'; 512 * 1024]);
    parser.feed(b"\n\n");
    assert_eq!(
        parser
            .next_event()
            .map(|e| e.map(|e| e.data.map(|d| d.len()))),
        Some(Ok(Some(512 * 1024)))
    );
    assert!(parser.line.capacity() <= KEEP_LINE_CAPACITY);
}

#[test]
fn the_line_end_search_finds_what_a_plain_search_finds() {
    let seed = testing::seed();
    let mut rng = Rng::new(seed);
    // Every byte value around the two, at every offset in a word and past the words.
    for _ in 0..20_000 {
        let len = rng.below(40);
        let bytes: Vec<u8> = (0..len)
            .map(|_| match rng.below(6) {
                0 => b'\n',
                1 => b'\r',
                2 => rng.below(256) as u8,
                3 => 0x80 | rng.below(128) as u8,
                _ => rng.within(b' ' as usize, b'~' as usize) as u8,
            })
            .collect();
        let plain = bytes.iter().position(|&b| b == b'\n' || b == b'\r');
        assert_eq!(find_line_end(&bytes), plain, "{bytes:?} (seed {seed})");
    }
}
