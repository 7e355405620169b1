//! The response side of gtd's own HTTP/1.1 client (`crates/node/src/http/h1.rs`): the response head
//! parser and the chunked decoder, on arbitrary bytes from an endpoint.
//!
//! Input: one byte of options, then the bytes the endpoint sends. Option bit 0: the request was
//! `HEAD`; bits 1-7: the size of the pieces the body arrives in (1 to 128 bytes).
//!
//! The bytes are read as the client reads them (`client.rs` `round_trip` and `RawBody`): heads
//! until one that is not interim, then its body by its framing. Checked:
//! - a head is only taken when complete, and every shorter prefix of it waits for more;
//! - the framing follows the head (no body after HEAD, 1xx, 204, 304; a connection is reused
//!   only with a delimited body and never after both Transfer-Encoding and Content-Length);
//! - a chunked body decodes to the same data, trailer fields, outcome and leftover bytes
//!   whether it arrives whole or in pieces (TCP may cut it anywhere).

#![no_main]

use bytes::{Bytes, BytesMut};
use gtd::node::http::h1::{self, Chunked, Framing, HeadError, Step};
use http::{HeaderMap, StatusCode, header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&options, wire)) = data.split_first() else {
        return;
    };
    let head_request = options & 1 == 1;
    let piece = usize::from(options >> 1) + 1;

    let mut buf = BytesMut::from(wire);
    // Interim answers are skipped; each takes at least one byte, so this ends.
    loop {
        let before = buf.len();
        let at = wire.len() - before;
        match h1::parse_response(&mut buf, head_request) {
            Ok(None) => {
                assert_eq!(buf.len(), before, "an incomplete head takes nothing");
                assert!(before <= h1::MAX_HEAD, "an incomplete head past the limit");
                return;
            }
            Err(HeadError::TooLarge | HeadError::Invalid(_)) => return,
            Ok(Some(head)) => {
                let taken = &wire[at..wire.len() - buf.len()];
                check_head(taken, &head, head_request, piece);
                if head.status.is_informational() {
                    if head.status == StatusCode::SWITCHING_PROTOCOLS {
                        return;
                    }
                    continue;
                }
                body(head.framing, buf.freeze(), piece);
                return;
            }
        }
    }
});

fn check_head(taken: &[u8], head: &h1::Head, head_request: bool, piece: usize) {
    // Empty lines before a status line are skipped (httparse, as RFC 9112 2.2 allows).
    let start = taken.iter().position(|&b| b != b'\r' && b != b'\n');
    let status_line = &taken[start.unwrap_or(taken.len())..];
    assert!(status_line.starts_with(b"HTTP/1."), "{taken:?}");
    assert!(taken.ends_with(b"\n"), "a head ends with its empty line");
    assert!(taken.len() <= h1::MAX_HEAD);
    assert!(head.headers.len() <= h1::MAX_HEADERS);
    // Every shorter prefix of a head waits for more (a cut chosen by the options).
    let cut = (piece * 7919) % taken.len();
    assert!(
        matches!(
            h1::parse_response(&mut BytesMut::from(&taken[..cut]), head_request),
            Ok(None)
        ),
        "a prefix of {cut} bytes of a complete head was not incomplete"
    );

    let bodiless = head_request
        || head.status.is_informational()
        || head.status == StatusCode::NO_CONTENT
        || head.status == StatusCode::NOT_MODIFIED;
    let te = head.headers.contains_key(header::TRANSFER_ENCODING);
    let cl = head.headers.contains_key(header::CONTENT_LENGTH);
    match head.framing {
        Framing::Empty => {}
        Framing::Length(n) => assert!(n > 0 && !bodiless && !te),
        Framing::Chunked => assert!(!bodiless && te),
        Framing::Close => assert!(!bodiless && !head.reusable),
    }
    if bodiless {
        assert_eq!(head.framing, Framing::Empty);
    }
    if te && cl {
        assert!(!head.reusable, "both framings: never reused");
    }
    // A Connection field that only says close / keep-alive is consumed.
    for value in head.headers.get_all(header::CONNECTION) {
        let text = value.to_str().unwrap_or("x");
        assert!(
            text.split(',').map(str::trim).any(|t| !t.is_empty()
                && !t.eq_ignore_ascii_case("close")
                && !t.eq_ignore_ascii_case("keep-alive")),
            "{text:?}"
        );
    }
    // The trailer filter keeps a subset, without the fields a trailer may not carry.
    let kept = h1::trailing(head.headers.clone());
    assert!(kept.len() <= head.headers.len());
    for name in [
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::HOST,
    ] {
        assert!(!kept.contains_key(name));
    }
}

/// How a chunked body ended.
#[derive(Debug, PartialEq)]
enum End {
    /// The last chunk and the trailer section were read; what was left after them.
    Done(Option<HeaderMap>, Vec<u8>),
    /// The input ran out first.
    More,
    /// Refused.
    Error(&'static str),
}

fn body(framing: Framing, rest: Bytes, piece: usize) {
    match framing {
        Framing::Empty | Framing::Close => {}
        Framing::Length(n) => assert!(n > 0),
        Framing::Chunked => {
            let whole = dechunk(&rest, rest.len().max(1));
            let pieces = dechunk(&rest, piece);
            assert_eq!(
                whole, pieces,
                "the same body, whole and in {piece}-byte pieces"
            );
        }
    }
}

/// Feeds `input` to a decoder `piece` bytes at a time, as reads from the socket.
fn dechunk(input: &[u8], piece: usize) -> (Vec<u8>, End) {
    let mut decoder = Chunked::default();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut fed = 0;
    loop {
        match decoder.decode(&mut buf) {
            Err(e) => return (out, End::Error(e)),
            Ok(Step::Data(data)) => {
                assert!(!data.is_empty(), "a data step carries data");
                out.extend_from_slice(&data);
            }
            Ok(Step::Done) => {
                let mut left = buf.to_vec();
                left.extend_from_slice(&input[fed..]);
                let trailers = decoder.take_trailers();
                if let Some(t) = &trailers {
                    assert!(!t.is_empty() && t.len() <= h1::MAX_HEADERS);
                }
                // Done stays done.
                assert_eq!(decoder.decode(&mut BytesMut::new()), Ok(Step::Done));
                return (out, End::Done(trailers, left));
            }
            Ok(Step::More) => {
                if fed == input.len() {
                    return (out, End::More);
                }
                let n = piece.min(input.len() - fed);
                buf.extend_from_slice(&input[fed..fed + n]);
                fed += n;
            }
        }
    }
}
