//! Hash keys: the request side ([`RequestKey`]) and key templates compiled for rendering
//! without allocation.
//!
//! A key is never built as a string on the pick path. [`CompiledKey::feed`] walks the template
//! and hands each piece — literal text, the client address formatted on the stack, a header
//! value borrowed from the request — to a byte sink, typically a running CRC-32. This is also
//! how nginx hashes: it checksums the key bytes, so piecewise feeding gives the same value.

use std::fmt::{self, Write as _};
use std::net::IpAddr;

use crate::config::{KeyPart, KeyTemplate};

use super::crc32::Crc32;

/// What a balancer may read from a request (or connection) to compute a hash key.
///
/// Listeners implement it over their own request types; [`StaticRequest`] is a plain owned
/// implementation for the simulator and tests. Variables a request does not have (a missing
/// header, any HTTP variable on a TCP connection) render as empty text, as in nginx.
pub trait RequestKey {
    /// The client address (`$remote_addr`, `ip_hash`). Listeners on dual-stack sockets may pass
    /// IPv4-mapped IPv6 addresses; balancers treat them as the IPv4 address they carry.
    fn remote_ip(&self) -> IpAddr;

    /// `$request_uri`: path and query as received.
    fn request_uri(&self) -> Option<&str> {
        None
    }

    /// A request header by name, given lower-case with dashes (`x-user`).
    fn header(&self, name: &str) -> Option<&str> {
        let _ = name;
        None
    }

    /// A cookie of the request by name.
    fn cookie(&self, name: &str) -> Option<&str> {
        let _ = name;
        None
    }
}

impl<T: RequestKey + ?Sized> RequestKey for &T {
    fn remote_ip(&self) -> IpAddr {
        (**self).remote_ip()
    }
    fn request_uri(&self) -> Option<&str> {
        (**self).request_uri()
    }
    fn header(&self, name: &str) -> Option<&str> {
        (**self).header(name)
    }
    fn cookie(&self, name: &str) -> Option<&str> {
        (**self).cookie(name)
    }
}

/// An owned request description: the simulator's `--client IP --key K` and tests use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticRequest {
    /// Client address.
    pub ip: IpAddr,
    /// `$request_uri`, if any.
    pub uri: Option<String>,
    /// Headers as (lower-case name with dashes, value).
    pub headers: Vec<(String, String)>,
    /// Cookies as (name, value).
    pub cookies: Vec<(String, String)>,
}

impl StaticRequest {
    /// A request from `ip` with nothing else.
    pub fn from_ip(ip: IpAddr) -> Self {
        StaticRequest {
            ip,
            uri: None,
            headers: Vec::new(),
            cookies: Vec::new(),
        }
    }

    /// Sets `$request_uri`.
    pub fn with_uri(mut self, uri: impl Into<String>) -> Self {
        self.uri = Some(uri.into());
        self
    }

    /// Adds a header (the name is normalised to lower case with dashes).
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((header_name(name), value.into()));
        self
    }

    /// Adds a cookie.
    pub fn with_cookie(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.cookies.push((name.into(), value.into()));
        self
    }
}

impl RequestKey for StaticRequest {
    fn remote_ip(&self) -> IpAddr {
        self.ip
    }
    fn request_uri(&self) -> Option<&str> {
        self.uri.as_deref()
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    fn cookie(&self, name: &str) -> Option<&str> {
        self.cookies
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The header name a `$http_NAME` variable reads: lower case, `_` written as `-` (nginx's
/// mapping; idempotent, so names already in HTTP form pass through).
pub(crate) fn header_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c == '_' {
                '-'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

/// The client address as balancers see it: IPv4-mapped IPv6 becomes IPv4.
pub(crate) fn client_ip<K: RequestKey + ?Sized>(request: &K) -> IpAddr {
    request.remote_ip().to_canonical()
}

/// Where rendered key bytes go.
pub(crate) trait ByteSink {
    /// Accepts the next piece of the key.
    fn bytes(&mut self, b: &[u8]);
}

impl ByteSink for Crc32 {
    fn bytes(&mut self, b: &[u8]) {
        self.update(b);
    }
}

/// Counts the bytes while checksumming them (nginx falls back to the rotation on an empty key).
#[derive(Debug)]
pub(crate) struct CountingCrc {
    pub(crate) crc: Crc32,
    pub(crate) len: usize,
}

impl ByteSink for CountingCrc {
    fn bytes(&mut self, b: &[u8]) {
        self.crc.update(b);
        self.len += b.len();
    }
}

impl ByteSink for Vec<u8> {
    fn bytes(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
}

/// Adapts a [`ByteSink`] to `fmt::Write`, so `Display` values (addresses) stream into it.
struct FmtSink<'a, S: ByteSink>(&'a mut S);

impl<S: ByteSink> fmt::Write for FmtSink<'_, S> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.bytes(s.as_bytes());
        Ok(())
    }
}

/// One piece of a compiled template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(Box<str>),
    RemoteAddr,
    RequestUri,
    Header(Box<str>),
    Cookie(Box<str>),
}

/// A key template prepared for allocation-free rendering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CompiledKey {
    pieces: Box<[Piece]>,
}

impl CompiledKey {
    /// Compiles `template` (header names normalised once here, not per request).
    pub(crate) fn new(template: &KeyTemplate) -> Self {
        let pieces = template
            .parts
            .iter()
            .map(|p| match p {
                KeyPart::Literal(s) => Piece::Literal(s.as_str().into()),
                KeyPart::RemoteAddr => Piece::RemoteAddr,
                KeyPart::RequestUri => Piece::RequestUri,
                KeyPart::Header(h) => Piece::Header(header_name(h).into()),
                KeyPart::Cookie(c) => Piece::Cookie(c.as_str().into()),
            })
            .collect();
        CompiledKey { pieces }
    }

    /// Streams the key for `request` into `sink`.
    pub(crate) fn feed<K: RequestKey + ?Sized, S: ByteSink>(&self, request: &K, sink: &mut S) {
        for piece in self.pieces.iter() {
            match piece {
                Piece::Literal(s) => sink.bytes(s.as_bytes()),
                Piece::RemoteAddr => {
                    // Formatting an address writes into the sink piece by piece; no allocation.
                    let _ = write!(FmtSink(sink), "{}", client_ip(request));
                }
                Piece::RequestUri => sink.bytes(request.request_uri().unwrap_or("").as_bytes()),
                Piece::Header(h) => sink.bytes(request.header(h).unwrap_or("").as_bytes()),
                Piece::Cookie(c) => sink.bytes(request.cookie(c).unwrap_or("").as_bytes()),
            }
        }
    }

    /// CRC-32 of the key and its length in bytes.
    pub(crate) fn crc32<K: RequestKey + ?Sized>(&self, request: &K) -> (u32, usize) {
        let mut sink = CountingCrc {
            crc: Crc32::new(),
            len: 0,
        };
        self.feed(request, &mut sink);
        (sink.crc.finish(), sink.len)
    }

    /// CRC-32 of `prefix` followed by the key (nginx's rehash rounds).
    pub(crate) fn crc32_with_prefix<K: RequestKey + ?Sized>(
        &self,
        prefix: &[u8],
        request: &K,
    ) -> u32 {
        let mut crc = Crc32::new();
        crc.update(prefix);
        self.feed(request, &mut crc);
        crc.finish()
    }

    /// The key as a string (tests, and a pick's explanation); allocates.
    pub(crate) fn render<K: RequestKey + ?Sized>(&self, request: &K) -> String {
        let mut out = Vec::new();
        self.feed(request, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// Writes `n` in decimal into `buf`, returning the digits (nginx's `%ui`).
pub(crate) fn decimal(mut n: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::crc32::crc32;

    fn template(parts: Vec<KeyPart>) -> KeyTemplate {
        KeyTemplate {
            text: String::new(),
            parts,
        }
    }

    #[test]
    fn renders_every_kind_of_part() {
        let t = template(vec![
            KeyPart::Literal("u:".into()),
            KeyPart::Header("X_User".into()),
            KeyPart::Literal("/".into()),
            KeyPart::Cookie("sid".into()),
            KeyPart::Literal("-".into()),
            KeyPart::RequestUri,
            KeyPart::Literal("@".into()),
            KeyPart::RemoteAddr,
        ]);
        let key = CompiledKey::new(&t);
        let req = StaticRequest::from_ip("::ffff:10.1.2.3".parse().unwrap())
            .with_uri("/a?b=1")
            .with_header("X-User", "ann")
            .with_cookie("sid", "42");
        assert_eq!(key.render(&req), "u:ann/42-/a?b=1@10.1.2.3");
        let (crc, len) = key.crc32(&req);
        assert_eq!(crc, crc32(b"u:ann/42-/a?b=1@10.1.2.3"));
        assert_eq!(len, 24);
    }

    #[test]
    fn missing_variables_render_empty() {
        let key = CompiledKey::new(&template(vec![
            KeyPart::Header("x-a".into()),
            KeyPart::RequestUri,
        ]));
        let req = StaticRequest::from_ip("192.0.2.1".parse().unwrap());
        assert_eq!(key.crc32(&req), (0, 0));
    }

    #[test]
    fn ipv6_addresses_render_in_rfc5952_form() {
        let key = CompiledKey::new(&template(vec![KeyPart::RemoteAddr]));
        let req = StaticRequest::from_ip("2001:db8:0:0:0:0:0:1".parse().unwrap());
        assert_eq!(key.render(&req), "2001:db8::1");
    }

    #[test]
    fn prefix_rounds_and_decimal() {
        let mut buf = [0u8; 10];
        assert_eq!(decimal(0, &mut buf), b"0");
        assert_eq!(decimal(17, &mut buf), b"17");
        assert_eq!(decimal(u32::MAX, &mut buf), b"4294967295");
        let key = CompiledKey::new(&template(vec![KeyPart::Literal("abc".into())]));
        let req = StaticRequest::from_ip("192.0.2.1".parse().unwrap());
        assert_eq!(key.crc32_with_prefix(b"12", &req), crc32(b"12abc"));
    }
}
