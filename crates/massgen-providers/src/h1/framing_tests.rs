//! The client's response framing cut anywhere. Every recorded body of the shared fixtures
//! (and made-up ones) is framed each way a server may send it (Content-Length; chunked
//! with random chunk sizes, size-line extensions, bare-LF lines and trailers;
//! close-delimited), sometimes after an interim head, and followed by what a kept
//! connection could carry next. Cut in two at every framing byte (at every byte of the
//! short ones, at a sample of the data of the long) and in random pieces, it must give the
//! head, the body and its SSE events the whole response gives, and take nothing past the
//! body. Then the same responses go through the real client over loopback, written in
//! random pieces.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic is the test failure

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use http::{HeaderMap, StatusCode};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use super::framing::{Deframer, Step};
use super::take_head;
use super::tests::{client, read_request};
use crate::sse::split_tests::events;
use crate::testing::{self, Rng};

/// Bounds every wait of the loopback test.
const LIMIT: Duration = Duration::from_secs(10);

/// The interim heads a server may send before its response's.
const INTERIM: [&[u8]; 2] = [
    b"HTTP/1.1 100 Continue\r\n\r\n",
    b"HTTP/1.1 103 Early Hints\r\nlink: </s.css>; rel=preload\r\n\r\n",
];

/// More connections than the loopback test can need (one per response).
const MAX_CONNECTIONS: usize = 1024;

/// What may follow a body on a kept connection: never part of it.
const NEXT: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nno";

/// How a response's body is framed.
#[derive(Clone, Copy, Debug, PartialEq)]
enum How {
    Length,
    Chunked,
    Close,
}

/// One response as a server sends it.
struct Framed {
    wire: Vec<u8>,
    /// The bytes after the body: none when it runs to the close.
    after: &'static [u8],
    /// Where the framing is (the heads, chunk-size lines, chunk ends, trailers, the
    /// body's edges): every cut there is checked.
    framing: Vec<std::ops::Range<usize>>,
}

/// `body` framed as `how`, its framing's details drawn from `rng`.
fn frame(rng: &mut Rng, body: &[u8], how: How) -> Framed {
    let mut wire = Vec::new();
    let mut framing = Vec::new();
    let mut mark = |wire: &mut Vec<u8>, bytes: &[u8]| {
        framing.push(wire.len()..wire.len() + bytes.len());
        wire.extend_from_slice(bytes);
    };
    if rng.one_in(3) {
        let interim = *rng.pick(&INTERIM);
        mark(&mut wire, interim);
    }
    let mut head = String::from("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n");
    match how {
        How::Length => head.push_str(&format!("Content-Length: {}\r\n", body.len())),
        How::Chunked => head.push_str("transfer-encoding: chunked\r\n"),
        How::Close if rng.one_in(2) => head.push_str("connection: close\r\n"),
        How::Close => {}
    }
    head.push_str("x-request-id: req_1\r\n\r\n");
    mark(&mut wire, head.as_bytes());
    let body_start = wire.len();
    match how {
        How::Length | How::Close => {
            // The body's end, where a miscounted length shows, is marked below.
            wire.extend_from_slice(body);
        }
        How::Chunked => {
            let eol: &[u8] = if rng.one_in(6) { b"\n" } else { b"\r\n" };
            // Chunks of every size for short bodies; about 32 at most for long ones, so a
            // cut stays cheap.
            let mean = (*rng.pick(&[1, 3, 7, 64, 1024, 16 * 1024])).max(body.len() / 32);
            let mut at = 0;
            while at < body.len() {
                let size = rng.within(1, 2 * mean).min(body.len() - at);
                let line = size_line(rng, size, eol);
                mark(&mut wire, &line);
                wire.extend_from_slice(&body[at..at + size]);
                mark(&mut wire, eol);
                at += size;
            }
            let mut last = size_line(rng, 0, eol);
            for n in 0..rng.below(3) {
                last.extend_from_slice(format!("x-trailer-{n}: {n}").as_bytes());
                last.extend_from_slice(eol);
            }
            last.extend_from_slice(eol);
            mark(&mut wire, &last);
        }
    }
    let end = wire.len();
    framing.push(body_start..body_start + 1);
    framing.push(end.saturating_sub(2)..end);
    let after: &'static [u8] = if how == How::Close { b"" } else { NEXT };
    wire.extend_from_slice(after);
    Framed {
        wire,
        after,
        framing,
    }
}

/// A chunk-size line: hex digits in either case, leading zeros, extensions (with the
/// whitespace RFC 9112 allows before them).
fn size_line(rng: &mut Rng, size: usize, eol: &[u8]) -> Vec<u8> {
    let hex = if rng.one_in(2) {
        format!("{size:x}")
    } else {
        format!("{size:X}")
    };
    let zeros = "0".repeat(rng.below(3));
    let extension = *rng.pick(&["", "", ";ext", ";a=b", ";name=\"q;v\"", " ;x=1", "\t;y"]);
    let mut line = format!("{zeros}{hex}{extension}").into_bytes();
    line.extend_from_slice(eol);
    line
}

/// What reading a response off a connection gave.
#[derive(Debug, PartialEq)]
struct Read {
    status: Option<StatusCode>,
    body: Vec<u8>,
    /// The bytes past the body (buffered or not yet read), or why reading failed.
    end: Result<Vec<u8>, String>,
}

/// Reads a response arriving in `pieces`, as the client does (the head by `take_head`, the
/// body by its `Deframer`), the connection closing after the last piece. Also gives the
/// body's pieces as the SSE parser would get them.
fn read(pieces: &[&[u8]]) -> (Read, Vec<Bytes>) {
    let mut read = Read {
        status: None,
        body: Vec::new(),
        end: Err("nothing read".into()),
    };
    let mut out = Vec::new();
    let mut buf = BytesMut::new();
    let mut frames: Option<Deframer> = None;
    let past = |frames: &Deframer, n: usize| {
        let mut rest = frames.buf.to_vec();
        pieces[n..]
            .iter()
            .for_each(|piece| rest.extend_from_slice(piece));
        rest
    };
    for (n, piece) in pieces.iter().enumerate() {
        let frames = match frames.as_mut() {
            Some(frames) => {
                frames.buf.extend_from_slice(piece);
                frames
            }
            None => {
                buf.extend_from_slice(piece);
                match take_head(&mut buf) {
                    Ok(Some(head)) => {
                        read.status = Some(head.status);
                        frames.insert(Deframer::new(std::mem::take(&mut buf), head.framing))
                    }
                    Ok(None) => continue,
                    Err(error) => {
                        read.end = Err(error);
                        return (read, out);
                    }
                }
            }
        };
        loop {
            match frames.step() {
                Ok(Step::Data(data)) => {
                    read.body.extend_from_slice(&data);
                    out.push(data);
                }
                Ok(Step::NeedMore) => break,
                Ok(Step::End) => {
                    read.end = Ok(past(frames, n + 1));
                    return (read, out);
                }
                Err(error) => {
                    read.end = Err(error.to_string());
                    return (read, out);
                }
            }
        }
    }
    read.end = match frames.as_mut() {
        None => Err("closed before the head ended".into()),
        Some(frames) => match (frames.closed(), frames.step()) {
            (true, Ok(Step::End)) => Ok(past(frames, pieces.len())),
            (true, other) => Err(format!("after the close: {other:?}")),
            (false, _) => Err("closed before the body ended".into()),
        },
    };
    (read, out)
}

/// Every body these tests frame: the recorded ones and made-up ones, with whether it is
/// an event stream (whose events are compared too).
fn bodies(rng: &mut Rng) -> Vec<(String, Vec<u8>, bool)> {
    let mut bodies: Vec<(String, Vec<u8>, bool)> = testing::recorded()
        .into_iter()
        .map(|(name, bytes)| {
            let sse = name.ends_with(".sse");
            (name, bytes, sse)
        })
        .collect();
    for n in 0..16 {
        let events = rng.within(1, 8);
        bodies.push((
            format!("made-up stream #{n}"),
            testing::made_up_sse(rng, events),
            true,
        ));
        let len = rng.below(600);
        bodies.push((
            format!("made-up bytes #{n}"),
            testing::made_up_bytes(rng, len),
            false,
        ));
    }
    bodies.push(("empty".into(), Vec::new(), false));
    bodies
}

/// Where to cut a framed response: everywhere in a short one (up to 768 bytes); in a long
/// one at and around every framing byte, plus 32 random positions in the data.
fn cuts(rng: &mut Rng, framed: &Framed) -> Vec<usize> {
    let len = framed.wire.len();
    if len <= 768 {
        return (0..=len).collect();
    }
    let mut points: Vec<usize> = framed
        .framing
        .iter()
        .flat_map(|range| range.start.saturating_sub(1)..=(range.end + 1).min(len))
        .collect();
    points.extend((0..32).map(|_| rng.below(len + 1)));
    points.extend([0, len]);
    points.sort_unstable();
    points.dedup();
    points
}

#[test]
fn every_response_cut_anywhere_gives_the_same_head_body_and_events() {
    let seed = testing::seed();
    let mut rng = Rng::new(seed);
    let mut checked = 0;
    for (name, body, sse) in bodies(&mut rng) {
        let expected_events = sse.then(|| events(&[&body]));
        for how in [How::Length, How::Chunked, How::Close] {
            let framed = frame(&mut rng, &body, how);
            let case = format!("{name} framed {how:?} (seed {seed})");
            let (whole, _) = read(&[&framed.wire]);
            assert_eq!(whole.status, Some(StatusCode::OK), "{case}");
            assert!(whole.body == body, "{case}: the body differs");
            assert_eq!(
                whole.end.as_deref(),
                Ok(framed.after),
                "{case}: what follows"
            );
            let points = cuts(&mut rng, &framed);
            // The events of a sample of the cuts (each parses the whole body).
            let step = (points.len() / 8).max(1);
            for (n, &at) in points.iter().enumerate() {
                let (a, b) = framed.wire.split_at(at);
                let (cut, pieces) = read(&[a, b]);
                assert!(cut == whole, "{case}: cut at {at} reads differently");
                if let Some(expected) = expected_events.as_ref().filter(|_| n % step == 0) {
                    let pieces: Vec<&[u8]> = pieces.iter().map(|piece| &piece[..]).collect();
                    assert!(
                        events(&pieces) == *expected,
                        "{case}: cut at {at}, the events differ"
                    );
                }
                checked += 1;
            }
            // Byte-sized pieces for all but the longest recordings (a piece costs the
            // same whatever its size).
            let smallest = if framed.wire.len() <= 16 * 1024 {
                1
            } else {
                64
            };
            for most in [1, 5, 64, 4096].map(|most: usize| most.max(smallest)) {
                let pieces = testing::random_pieces(&mut rng, &framed.wire, most);
                let (got, body_pieces) = read(&pieces);
                assert!(
                    got == whole,
                    "{case}: pieces of 1..={most} read differently"
                );
                if let Some(expected) = expected_events.as_ref() {
                    let pieces: Vec<&[u8]> = body_pieces.iter().map(|piece| &piece[..]).collect();
                    assert!(
                        events(&pieces) == *expected,
                        "{case}: pieces of 1..={most}, the events differ"
                    );
                }
            }
        }
    }
    println!("{checked} cuts checked (seed {seed})");
}

/// A response cut short, wherever, is an error (or, close-delimited, a shorter body): never
/// a body that looks whole.
#[test]
fn a_response_cut_short_anywhere_is_never_taken_for_a_whole_one() {
    let seed = testing::seed();
    let mut rng = Rng::new(seed);
    for (name, body, _) in bodies(&mut rng).into_iter().filter(|b| !b.1.is_empty()) {
        for how in [How::Length, How::Chunked] {
            let mut framed = frame(&mut rng, &body, how);
            framed.wire.truncate(framed.wire.len() - framed.after.len());
            let len = framed.wire.len();
            for at in cuts(&mut rng, &framed).into_iter().filter(|&at| at < len) {
                let (got, _) = read(&[&framed.wire[..at]]);
                assert!(
                    got.end.is_err(),
                    "{name} framed {how:?} (seed {seed}): {at} of {len} bytes read as whole"
                );
            }
        }
    }
}

/// One response of the loopback test, as written.
struct Case {
    name: String,
    body: Vec<u8>,
    sse: bool,
    how: How,
    pieces: Vec<Piece>,
}

/// A write of the loopback server, and whether it pauses after it (else it only yields).
#[derive(Clone)]
struct Piece {
    bytes: Vec<u8>,
    pause: bool,
}

/// The real client over loopback: each body, framed a random way, written in random pieces
/// (sometimes with a pause between them) is read whole, its connection kept when the
/// framing allows.
#[tokio::test]
async fn the_client_reads_every_response_written_in_random_pieces() {
    let seed = testing::seed();
    let mut rng = Rng::new(seed);
    let mut cases = Vec::new();
    for (name, body, sse) in bodies(&mut rng) {
        let how = *rng.pick(&[How::Length, How::Chunked, How::Close]);
        let mut framed = frame(&mut rng, &body, how);
        // Nothing after the body: the connection is clean for the next call.
        framed.wire.truncate(framed.wire.len() - framed.after.len());
        let most = *rng.pick(&[1, 7, 512, 4096, 64 * 1024]);
        let mut at = 0;
        let mut pieces = Vec::new();
        // At most 64 pieces, the last taking what is left.
        while at < framed.wire.len() {
            let take = if pieces.len() == 63 {
                framed.wire.len() - at
            } else {
                rng.within(1, most).min(framed.wire.len() - at)
            };
            pieces.push(Piece {
                bytes: framed.wire[at..at + take].to_vec(),
                pause: rng.one_in(8),
            });
            at += take;
        }
        cases.push(Case {
            name,
            body,
            sse,
            how,
            pieces,
        });
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let writes: Vec<(Vec<Piece>, bool)> = cases
        .iter()
        .map(|case| (case.pieces.clone(), case.how == How::Close))
        .collect();
    let server = tokio::spawn(async move {
        let mut writes = writes.into_iter();
        // A connection per close-delimited response at most: bounded by the cases.
        'connections: for _ in 0..MAX_CONNECTIONS {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            conn.set_nodelay(true).unwrap();
            while read_request(&mut conn).await.is_some() {
                let Some((pieces, close)) = writes.next() else {
                    return;
                };
                for piece in pieces {
                    conn.write_all(&piece.bytes).await.unwrap();
                    if piece.pause {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    } else {
                        tokio::task::yield_now().await;
                    }
                }
                if close {
                    continue 'connections;
                }
            }
        }
    });
    let client = client();
    let target = super::Target::parse(&format!("http://{address}/v1/x")).unwrap();
    for Case {
        name,
        body,
        sse,
        how,
        ..
    } in &cases
    {
        let case = format!("{name} framed {how:?} (seed {seed})");
        let response = tokio::time::timeout(
            LIMIT,
            client.post(&target, &HeaderMap::new(), Bytes::from_static(b"{}")),
        )
        .await
        .unwrap()
        .map_err(|error| error.message)
        .unwrap();
        assert_eq!(response.status, StatusCode::OK, "{case}");
        let mut stream = response.body;
        let mut pieces = Vec::new();
        while let Some(piece) = tokio::time::timeout(LIMIT, stream.next()).await.unwrap() {
            pieces.push(piece.unwrap());
        }
        let read: Vec<u8> = pieces.concat();
        assert!(read == *body, "{case}: the body differs");
        if *sse {
            let pieces: Vec<&[u8]> = pieces.iter().map(|piece| &piece[..]).collect();
            assert!(
                events(&pieces) == events(&[body]),
                "{case}: the events differ"
            );
        }
        let kept = usize::from(*how != How::Close);
        assert_eq!(client.pool.idle(&address), kept, "{case}: connection kept");
    }
    server.abort();
}
