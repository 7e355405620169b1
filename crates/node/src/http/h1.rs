//! A small HTTP/1.1 codec for the client side of HTTP listeners, used by gtd's own client
//! ([`super::client`]).
//!
//! - [`encode_request`] writes a request head.
//! - [`parse_response`] reads a response head: status, validated headers, and how its body is
//!   framed ([`Framing`], RFC 9112 section 6.3) and whether the connection may carry another
//!   request afterwards.
//! - [`Chunked`] decodes a chunked body incrementally, from whatever bytes have arrived.

use std::mem::MaybeUninit;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};

/// The largest response head accepted (bytes).
pub const MAX_HEAD: usize = 64 * 1024 - 1;
/// The most response header fields accepted.
pub const MAX_HEADERS: usize = 100;
/// The longest chunk-size or trailer line accepted (bytes).
const MAX_LINE: usize = 4096;

/// Appends the head of a request to `out`; its target (origin form) is the concatenation of
/// `target`'s parts.
pub fn encode_request(method: &Method, target: &[&str], headers: &HeaderMap, out: &mut Vec<u8>) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    for part in target {
        out.extend_from_slice(part.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (HEAD, 1xx, 204, 304, or `content-length: 0`).
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// `transfer-encoding: chunked`.
    Chunked,
    /// Everything until the endpoint closes the connection.
    Close,
}

/// A parsed response head.
#[derive(Debug)]
pub struct Head {
    /// The status code.
    pub status: StatusCode,
    /// The header fields, validated, in order; without a `Connection` field that only says
    /// `keep-alive` or `close` (what it says is in `reusable`).
    pub headers: HeaderMap,
    /// How the body is delimited.
    pub framing: Framing,
    /// The connection may carry another request once the body is read.
    pub reusable: bool,
}

/// Why a response head was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Longer than [`MAX_HEAD`] or more than [`MAX_HEADERS`] fields.
    TooLarge,
    /// Not a valid HTTP/1.x response head.
    Invalid(&'static str),
}

/// Parses the response head at the start of `buf`: `Ok(None)` while it is incomplete, else the
/// head, taken out of `buf` (what follows it stays; after an error the connection is not to be
/// read further). Header values share the head's bytes (no copy per field). Interim responses
/// (1xx other than 101) come back like any other: the caller skips them. `head_request`: the
/// request was HEAD (no body follows).
pub fn parse_response(buf: &mut BytesMut, head_request: bool) -> Result<Option<Head>, HeadError> {
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    // Where each field's name and value sit in the head (offsets fit in 16 bits: the head is
    // at most MAX_HEAD bytes), to slice them once it is split off.
    let mut spans = [(0_u16, 0_u16, 0_u16, 0_u16); MAX_HEADERS];
    let (n, code, http10, count) = {
        let mut res = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut res,
            buf,
            &mut fields,
        );
        let n = match parsed {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
                return Err(HeadError::TooLarge);
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
            Err(_) => return Err(HeadError::Invalid("malformed response head")),
        };
        if n > MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
        let base = buf.as_ptr() as usize;
        let at = |s: &[u8]| (s.as_ptr() as usize - base) as u16;
        for (span, field) in spans.iter_mut().zip(res.headers.iter()) {
            *span = (
                at(field.name.as_bytes()),
                field.name.len() as u16,
                at(field.value),
                field.value.len() as u16,
            );
        }
        (n, res.code, res.version == Some(0), res.headers.len())
    };
    let code = code.ok_or(HeadError::Invalid("no status"))?;
    let status = StatusCode::from_u16(code).map_err(|_| HeadError::Invalid("bad status"))?;
    let mut headers = HeaderMap::with_capacity(count);
    let mut length: Option<u64> = None;
    let (mut te, mut chunked, mut close, mut keep_alive) = (false, false, false, false);
    let head = buf.split_to(n).freeze();
    for &(name_at, name_len, value_at, value_len) in &spans[..count] {
        let name = &head[usize::from(name_at)..][..usize::from(name_len)];
        let value_at = usize::from(value_at);
        let value = head.slice(value_at..value_at + usize::from(value_len));
        let name =
            HeaderName::from_bytes(name).map_err(|_| HeadError::Invalid("bad header name"))?;
        if name == header::CONTENT_LENGTH {
            let text = std::str::from_utf8(&value)
                .map_err(|_| HeadError::Invalid("bad content-length"))?;
            // A list of equal values is one value (RFC 9110 8.6); anything else is refused.
            for part in text.split(',') {
                let part = part.trim();
                if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(HeadError::Invalid("bad content-length"));
                }
                let len: u64 = part
                    .parse()
                    .map_err(|_| HeadError::Invalid("bad content-length"))?;
                if length.is_some_and(|l| l != len) {
                    return Err(HeadError::Invalid("conflicting content-length"));
                }
                length = Some(len);
            }
        } else if name == header::TRANSFER_ENCODING {
            te = true;
            // Chunked only when it is the last coding of the last field.
            let text = std::str::from_utf8(&value)
                .map_err(|_| HeadError::Invalid("bad transfer-encoding"))?;
            if let Some(last) = text.rsplit(',').map(str::trim).find(|c| !c.is_empty()) {
                chunked = last.eq_ignore_ascii_case("chunked");
            }
        } else if name == header::CONNECTION {
            let text = std::str::from_utf8(&value).unwrap_or("");
            let mut others = false;
            for token in text.split(',').map(str::trim) {
                let (c, k) = (
                    token.eq_ignore_ascii_case("close"),
                    token.eq_ignore_ascii_case("keep-alive"),
                );
                close |= c;
                keep_alive |= k;
                others |= !token.is_empty() && !c && !k;
            }
            // `Connection: keep-alive` or `close` (nearly every response) concerns this
            // connection only and is consumed here; one naming other fields stays, for the
            // proxy's hop-by-hop removal to read.
            if !others {
                continue;
            }
        }
        let value =
            HeaderValue::from_maybe_shared(value).map_err(|_| HeadError::Invalid("bad header"))?;
        headers.append(name, value);
    }
    let bodiless = head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let framing = if bodiless {
        Framing::Empty
    } else if te {
        if chunked {
            Framing::Chunked
        } else {
            Framing::Close
        }
    } else {
        match length {
            Some(0) => Framing::Empty,
            Some(len) => Framing::Length(len),
            None => Framing::Close,
        }
    };
    // Both Transfer-Encoding and Content-Length: the former wins and the connection is not
    // reused (RFC 9112 6.3, a sign of smuggling). HTTP/1.0 keeps a connection only when asked.
    let reusable =
        !close && (!http10 || keep_alive) && framing != Framing::Close && !(te && length.is_some());
    Ok(Some(Head {
        status,
        headers,
        framing,
        reusable,
    }))
}

/// One step of a chunked body.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Body bytes.
    Data(Bytes),
    /// More input is needed.
    More,
    /// The body is over (last chunk and trailers read).
    Done,
}

/// An incremental decoder of `transfer-encoding: chunked` (RFC 9112 section 7.1). Chunk
/// extensions are ignored; trailer fields are kept for [`Chunked::take_trailers`], bar those a
/// trailer may not carry and malformed ones, which are dropped (RFC 9110 section 6.5.1 lets a
/// recipient discard them).
#[derive(Debug, Default)]
pub struct Chunked {
    state: State,
    remaining: u64,
    /// Trailer lines and bytes read, the dropped ones included (bounded as a head is:
    /// [`MAX_HEADERS`] lines, [`MAX_HEAD`] bytes).
    trailer_lines: usize,
    trailer_bytes: usize,
    /// Boxed: most bodies have none, and the decoder lives in every response body.
    trailers: Option<Box<HeaderMap>>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a chunk-size line.
    #[default]
    Size,
    /// Inside a chunk's data.
    Data,
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer fields, up to the empty line.
    Trailer,
    /// The body is over.
    Done,
}

impl Chunked {
    /// Decodes from `buf` (consuming what it uses): data as soon as some is there.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Step, &'static str> {
        loop {
            match self.state {
                State::Size => {
                    let Some(line) = take_line(buf)? else {
                        return Ok(Step::More);
                    };
                    let digits = line.split(|&b| b == b';').next().unwrap_or(&[]);
                    let digits = trim(digits);
                    if digits.is_empty() || digits.len() > 16 {
                        return Err("bad chunk size");
                    }
                    let mut size: u64 = 0;
                    for &d in digits {
                        let v = (d as char).to_digit(16).ok_or("bad chunk size")?;
                        size = (size << 4) | u64::from(v);
                    }
                    if size == 0 {
                        self.state = State::Trailer;
                    } else {
                        self.remaining = size;
                        self.state = State::Data;
                    }
                }
                State::Data => {
                    if buf.is_empty() {
                        return Ok(Step::More);
                    }
                    let n = usize::try_from(self.remaining)
                        .unwrap_or(usize::MAX)
                        .min(buf.len());
                    let data = buf.split_to(n).freeze();
                    self.remaining -= n as u64;
                    if self.remaining == 0 {
                        self.state = State::DataEnd;
                    }
                    return Ok(Step::Data(data));
                }
                State::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Step::More);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err("chunk data not followed by CRLF");
                    }
                    buf.advance(2);
                    self.state = State::Size;
                }
                State::Trailer => {
                    let Some(line) = take_line(buf)? else {
                        return Ok(Step::More);
                    };
                    if line.is_empty() {
                        self.state = State::Done;
                    } else {
                        self.trailer_field(&line)?;
                    }
                }
                State::Done => return Ok(Step::Done),
            }
        }
    }

    /// The trailer fields, once the body is [`Step::Done`] (`None` when there were none).
    pub fn take_trailers(&mut self) -> Option<HeaderMap> {
        self.trailers.take().map(|fields| *fields)
    }

    fn trailer_field(&mut self, line: &[u8]) -> Result<(), &'static str> {
        self.trailer_lines += 1;
        self.trailer_bytes += line.len() + 2;
        if self.trailer_lines > MAX_HEADERS || self.trailer_bytes > MAX_HEAD {
            return Err("trailer section too large");
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Ok(());
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(trim(&line[colon + 1..])),
        ) else {
            return Ok(());
        };
        if may_trail(&name) {
            self.trailers
                .get_or_insert_with(Box::default)
                .append(name, value);
        }
        Ok(())
    }
}

/// `fields` without those a trailer must not carry (see [`may_trail`]).
pub fn trailing(fields: HeaderMap) -> HeaderMap {
    if fields.keys().all(may_trail) {
        return fields;
    }
    let mut kept = HeaderMap::with_capacity(fields.len());
    let mut name = None;
    for (next, value) in fields {
        if next.is_some() {
            name = next;
        }
        if let Some(name) = name.as_ref().filter(|n| may_trail(n)) {
            kept.append(name.clone(), value);
        }
    }
    kept
}

/// False for the fields a trailer must not carry: framing, routing, authentication and
/// connection-specific ones (RFC 9110 section 6.5.1, RFC 9113 section 8.2.2; hyper's list).
fn may_trail(name: &HeaderName) -> bool {
    ![
        header::AUTHORIZATION,
        header::CACHE_CONTROL,
        header::CONNECTION,
        header::CONTENT_ENCODING,
        header::CONTENT_LENGTH,
        header::CONTENT_RANGE,
        header::CONTENT_TYPE,
        header::HOST,
        header::MAX_FORWARDS,
        header::SET_COOKIE,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ]
    .contains(name)
        && name.as_str() != "keep-alive"
        && !name.as_str().starts_with("proxy")
}

/// Takes one CRLF-terminated line off `buf` (without the CRLF), if a whole one is there.
fn take_line(buf: &mut BytesMut) -> Result<Option<Bytes>, &'static str> {
    match buf.windows(2).position(|w| w == b"\r\n") {
        Some(end) if end > MAX_LINE => Err("line too long"),
        Some(end) => {
            let line = buf.split_to(end).freeze();
            buf.advance(2);
            Ok(Some(line))
        }
        // A CR at the end may be the first half of the line's CRLF: not counted, so that a
        // line of MAX_LINE bytes is taken whether its CR and LF arrive together or apart.
        None if buf.len() - usize::from(buf.ends_with(b"\r")) > MAX_LINE => Err("line too long"),
        None => Ok(None),
    }
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str, head_request: bool) -> Result<Option<Head>, HeadError> {
        parse_response(&mut BytesMut::from(text), head_request)
    }

    fn framing(text: &str) -> (Framing, bool) {
        let h = head(text, false).unwrap().unwrap();
        (h.framing, h.reusable)
    }

    #[test]
    fn request_head_is_written_in_order() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("example"));
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append("x-a", HeaderValue::from_static("2"));
        let mut out = Vec::new();
        encode_request(&Method::GET, &["/p", "?q=1"], &headers, &mut out);
        assert_eq!(
            out,
            b"GET /p?q=1 HTTP/1.1\r\nhost: example\r\nx-a: 1\r\nx-a: 2\r\n\r\n"
        );
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let ok = "HTTP/1.1 200 OK\r\n";
        assert_eq!(
            framing(&format!("{ok}content-length: 5\r\n\r\n")),
            (Framing::Length(5), true)
        );
        assert_eq!(
            framing(&format!("{ok}content-length: 0\r\n\r\n")),
            (Framing::Empty, true)
        );
        assert_eq!(
            framing(&format!("{ok}content-length: 5, 5\r\n\r\n")),
            (Framing::Length(5), true)
        );
        assert_eq!(
            framing(&format!("{ok}transfer-encoding: chunked\r\n\r\n")),
            (Framing::Chunked, true)
        );
        assert_eq!(
            framing(&format!("{ok}transfer-encoding: gzip, chunked\r\n\r\n")),
            (Framing::Chunked, true)
        );
        assert_eq!(
            framing(&format!("{ok}transfer-encoding: chunked, gzip\r\n\r\n")),
            (Framing::Close, false)
        );
        // Both: chunked wins, the connection is not reused.
        assert_eq!(
            framing(&format!(
                "{ok}content-length: 3\r\ntransfer-encoding: chunked\r\n\r\n"
            )),
            (Framing::Chunked, false)
        );
        assert_eq!(framing(&format!("{ok}\r\n")), (Framing::Close, false));
        assert_eq!(
            framing(&format!(
                "{ok}connection: close\r\ncontent-length: 1\r\n\r\n"
            )),
            (Framing::Length(1), false)
        );
        assert_eq!(
            framing("HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n"),
            (Framing::Length(1), false)
        );
        assert_eq!(
            framing("HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 1\r\n\r\n"),
            (Framing::Length(1), true)
        );
        for status in [
            "204 No Content",
            "304 Not Modified",
            "100 Continue",
            "101 Switching Protocols",
        ] {
            let text = format!("HTTP/1.1 {status}\r\ncontent-length: 9\r\n\r\n");
            assert_eq!(framing(&text).0, Framing::Empty, "{status}");
        }
        let h = head(&format!("{ok}content-length: 9\r\n\r\n"), true)
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, Framing::Empty, "a HEAD response has no body");
    }

    #[test]
    fn bad_heads_are_refused() {
        let bad = |text: &str| head(text, false).unwrap_err();
        assert_eq!(
            bad("HTTP/1.1 200 OK\r\ncontent-length: 5, 6\r\n\r\n"),
            HeadError::Invalid("conflicting content-length")
        );
        assert_eq!(
            bad("HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n"),
            HeadError::Invalid("conflicting content-length")
        );
        assert_eq!(
            bad("HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n"),
            HeadError::Invalid("bad content-length")
        );
        assert_eq!(
            bad("HTTP/1.1 200 OK\r\ncontent-length: +1\r\n\r\n"),
            HeadError::Invalid("bad content-length")
        );
        assert!(matches!(bad("NOTHTTP\r\n\r\n"), HeadError::Invalid(_)));
        let many: String = (0..=MAX_HEADERS).map(|i| format!("x-{i}: v\r\n")).collect();
        assert_eq!(
            bad(&format!("HTTP/1.1 200 OK\r\n{many}\r\n")),
            HeadError::TooLarge
        );
        let long = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD + 1));
        assert_eq!(bad(&long), HeadError::TooLarge);
    }

    #[test]
    fn partial_heads_wait_for_more() {
        let full = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-y: z\r\n\r\nok";
        for cut in 0..full.len() - 2 {
            assert!(head(&full[..cut], false).unwrap().is_none(), "{cut}");
        }
        let mut buf = BytesMut::from(full);
        let h = parse_response(&mut buf, false).unwrap().unwrap();
        assert_eq!(&buf[..], b"ok", "the body stays");
        assert_eq!(h.headers["x-y"], "z");
        assert_eq!(h.status, StatusCode::OK);
    }

    #[test]
    fn repeated_fields_keep_their_order_and_share_the_head() {
        let mut buf = BytesMut::from(
            "HTTP/1.1 200 OK\r\nset-cookie: a=1\r\nx-y: z\r\nSet-Cookie: b=2\r\n\r\nrest",
        );
        let h = parse_response(&mut buf, false).unwrap().unwrap();
        let cookies: Vec<_> = h.headers.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        assert_eq!(h.headers["x-y"], "z");
        assert_eq!(&buf[..], b"rest");
        let bad = parse_response(
            &mut BytesMut::from("HTTP/1.1 200 OK\r\nx: a\x7fb\r\n\r\n"),
            false,
        );
        assert!(bad.is_err(), "a control character in a value is refused");
        // Connection saying only keep-alive or close is consumed; one naming fields stays.
        let mut buf = BytesMut::from(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\ncontent-length: 0\r\n\r\n",
        );
        let h = parse_response(&mut buf, false).unwrap().unwrap();
        assert!(!h.headers.contains_key("connection") && h.reusable);
        let mut buf = BytesMut::from(
            "HTTP/1.1 200 OK\r\nConnection: close, x-trace\r\ncontent-length: 0\r\n\r\n",
        );
        let h = parse_response(&mut buf, false).unwrap().unwrap();
        assert_eq!(h.headers["connection"], "close, x-trace");
        assert!(!h.reusable);
    }

    /// Feeds `input` to a decoder `piece` bytes at a time; the body, or the error.
    /// Body, bytes left after it, and the trailer fields kept.
    type Dechunked = (Vec<u8>, usize, Option<HeaderMap>);

    fn dechunk(input: &[u8], piece: usize) -> Result<Dechunked, &'static str> {
        let mut d = Chunked::default();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut fed = 0;
        loop {
            match d.decode(&mut buf)? {
                Step::Data(b) => out.extend_from_slice(&b),
                Step::Done => {
                    let left = buf.len() + input.len() - fed;
                    return Ok((out, left, d.take_trailers()));
                }
                Step::More => {
                    if fed == input.len() {
                        return Err("ended early");
                    }
                    let n = piece.min(input.len() - fed);
                    buf.extend_from_slice(&input[fed..fed + n]);
                    fed += n;
                }
            }
        }
    }

    #[test]
    fn chunked_bodies_decode_in_any_pieces() {
        let body =
            b"5;ext=1\r\nhello\r\n1 \r\n,\r\nB\r\n 0123456789\r\n0\r\nx-trailer: t\r\n\r\nNEXT";
        for piece in [1, 2, 3, 7, 64] {
            let (out, left, trailers) = dechunk(body, piece).unwrap();
            assert_eq!(out, b"hello, 0123456789", "piece {piece}");
            assert!(left <= 4, "what follows the body stays: {left}");
            assert_eq!(trailers.unwrap()["x-trailer"], "t");
        }
        let (out, _, trailers) = dechunk(b"0\r\n\r\n", 1).unwrap();
        assert_eq!((out.as_slice(), trailers), (&b""[..], None));
    }

    #[test]
    fn trailers_keep_what_may_trail_and_drop_the_rest() {
        let body = b"0\r\nGrpc-Status: 0\r\ncontent-length: 9\r\nx-sum:\t abc \r\nno colon\r\n\
                     bad name: 1\r\nx-sum: def\r\nproxy-x: 1\r\nSet-Cookie: a=b\r\n\r\n";
        let trailers = dechunk(body, 5).unwrap().2.unwrap();
        let sums: Vec<&str> = trailers
            .get_all("x-sum")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(sums, ["abc", "def"]);
        assert_eq!(trailers["grpc-status"], "0");
        assert_eq!(trailers.len(), 3);
        // The same rule for fields another decoder read.
        let mut read = trailers.clone();
        read.append(header::CONTENT_LENGTH, HeaderValue::from_static("9"));
        read.append("x-sum", HeaderValue::from_static("ghi"));
        let kept = trailing(read);
        assert_eq!(kept.get_all("x-sum").iter().count(), 3);
        assert_eq!((kept.len(), kept.get(header::CONTENT_LENGTH)), (4, None));
        assert_eq!(trailing(trailers.clone()), trailers);
        // Only dropped fields: no trailers at all.
        assert_eq!(dechunk(b"0\r\nTE: x\r\n\r\n", 64).unwrap().2, None);
        let many = format!("0\r\n{}\r\n", "x-a: 1\r\n".repeat(MAX_HEADERS + 1));
        assert_eq!(
            dechunk(many.as_bytes(), 64),
            Err("trailer section too large")
        );
        let long = format!(
            "0\r\n{}\r\n",
            format!("x-a: {}\r\n", "v".repeat(4000)).repeat(17)
        );
        assert_eq!(
            dechunk(long.as_bytes(), 64),
            Err("trailer section too large")
        );
    }

    #[test]
    fn a_line_at_the_limit_is_read_however_its_crlf_arrives() {
        // A chunk-size line (long through its extension) and a trailer line of exactly
        // MAX_LINE bytes: taken whether the CR and LF arrive together or apart.
        let size = format!("1;{}", "e".repeat(MAX_LINE - 2));
        let trailer = format!("x-t: {}", "v".repeat(MAX_LINE - 5));
        let body = format!("{size}\r\nx\r\n0\r\n{trailer}\r\n\r\n");
        for piece in [1, MAX_LINE + 1, body.len()] {
            let (out, left, trailers) = dechunk(body.as_bytes(), piece).unwrap();
            assert_eq!((out.as_slice(), left), (&b"x"[..], 0), "piece {piece}");
            assert_eq!(trailers.unwrap()["x-t"].len(), MAX_LINE - 5);
        }
        // Found by fuzz/ h1_response: a 4096-byte line ending in LF, then CRLF, arriving
        // byte by byte, was refused as too long; whole, it was read.
        let found = [&b"1;"[..], &[b'e'; 4093], b"\n\r\n"].concat();
        assert_eq!(dechunk(&found, 1), dechunk(&found, found.len()));
        assert_eq!(dechunk(&found, 1), Err("ended early"));
        // One byte more is too long, however it arrives.
        let long = format!("1;{}\r\nx\r\n0\r\n\r\n", "e".repeat(MAX_LINE - 1));
        for piece in [1, MAX_LINE + 1, long.len()] {
            assert_eq!(dechunk(long.as_bytes(), piece), Err("line too long"));
        }
    }

    #[test]
    fn bad_chunked_bodies_are_refused() {
        assert_eq!(dechunk(b"x\r\n", 8), Err("bad chunk size"));
        assert_eq!(dechunk(b"\r\n", 8), Err("bad chunk size"));
        assert_eq!(dechunk(b"11111111111111111\r\n", 64), Err("bad chunk size"));
        assert_eq!(
            dechunk(b"2\r\nabXY", 8),
            Err("chunk data not followed by CRLF")
        );
        let long = vec![b'1'; MAX_LINE + 10];
        assert_eq!(dechunk(&long, 64), Err("line too long"));
        assert_eq!(dechunk(b"5\r\nhel", 8), Err("ended early"));
    }

    mod props {
        use super::*;
        use proptest::collection::vec;
        use proptest::prelude::*;

        /// A valid response head: status, then fields named from a small set of tokens.
        fn head_text() -> impl Strategy<Value = (u16, Vec<(String, String)>, String)> {
            let field = ("x-[a-z]{1,8}", "[!-~]([ -~]{0,20}[!-~])?");
            (100u16..600, vec(field, 0..12)).prop_map(|(status, fields)| {
                let mut text = format!("HTTP/1.1 {status} Whatever\r\n");
                for (name, value) in &fields {
                    text.push_str(&format!("{name}: {value}\r\n"));
                }
                text.push_str("content-length: 0\r\n\r\n");
                (status, fields, text)
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn any_body_in_any_chunks_and_pieces_decodes_to_itself(
                chunks in vec(vec(any::<u8>(), 1..300), 0..8),
                piece in 1_usize..64,
                extension in any::<bool>(),
            ) {
                let mut wire = Vec::new();
                for c in &chunks {
                    let ext = if extension { ";name=value" } else { "" };
                    wire.extend_from_slice(format!("{:X}{ext}\r\n", c.len()).as_bytes());
                    wire.extend_from_slice(c);
                    wire.extend_from_slice(b"\r\n");
                }
                wire.extend_from_slice(b"0\r\nx-trailer: t\r\n\r\nNEXT");
                let (out, left, trailers) = dechunk(&wire, piece).unwrap();
                prop_assert_eq!(out, chunks.concat());
                prop_assert_eq!(&trailers.unwrap()["x-trailer"], "t");
                // The decoder stops at the body's end: at most the 4 bytes after it are left.
                prop_assert!(left <= 4);
            }

            #[test]
            fn a_head_is_incomplete_until_its_last_byte_then_parsed_whole(
                (status, fields, text) in head_text(),
                cut in any::<prop::sample::Index>(),
            ) {
                let bytes = text.as_bytes();
                let at = cut.index(bytes.len());
                prop_assert_eq!(parse_response(&mut BytesMut::from(&bytes[..at]), false).unwrap().map(|h| h.status), None);
                let mut buf = BytesMut::from(bytes);
                buf.extend_from_slice(b"NEXT");
                let h = parse_response(&mut buf, false).unwrap().unwrap();
                prop_assert_eq!(h.status.as_u16(), status);
                prop_assert_eq!(&buf[..], b"NEXT");
                for (name, value) in &fields {
                    let all: Vec<&[u8]> = h.headers.get_all(name.as_str()).iter().map(|v| v.as_bytes()).collect();
                    prop_assert!(all.contains(&value.as_bytes()), "{} missing", name);
                }
            }

            #[test]
            fn arbitrary_bytes_are_refused_or_waited_for_never_misread(
                input in (
                    any::<bool>(),
                    vec(
                        prop_oneof![
                            4 => any::<u8>(),
                            1 => Just(b'\r'),
                            1 => Just(b'\n'),
                            1 => Just(b':'),
                            1 => Just(b' '),
                        ],
                        0..400,
                    ),
                )
                    .prop_map(|(status_line, tail)| {
                        let start: &[u8] = if status_line { b"HTTP/1.1 200 OK\r\n" } else { b"" };
                        [start, &tail].concat()
                    }),
                piece in 1_usize..32,
            ) {
                let mut buf = BytesMut::from(&input[..]);
                if let Ok(Some(_)) = parse_response(&mut buf, false) {
                    // Only a head that starts like one and ends with an empty line is taken.
                    prop_assert!(input.starts_with(b"HTTP/1."));
                    let taken = input.len() - buf.len();
                    prop_assert!(input[..taken].ends_with(b"\n"));
                }
                // The chunked decoder either decodes, waits, or refuses: never panics or loops.
                let _ = dechunk(&input, piece);
            }
        }
    }
}
