//! The access log line, in text and in JSON (docs/design.md §7 "Access log" lists the fields):
//! one set of fields, written the two ways, by the writer thread.
//!
//! Text: the fields in a fixed order, separated by one space, `-` for one that does not apply;
//! bytes outside printable ASCII, `"` and `\` are written `\xHH`, so a field never holds a space
//! and a line is always one line. JSON: one object per line with the same fields under stable
//! keys, `null` for one that does not apply, and `"type": "access"`.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::Entry;
use crate::calendar::civil;

/// How the node writes its logs: `gtd run --log-format`. The access log follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Most bytes of a path in the log: a longer one keeps its first bytes and ends in `...`.
pub(crate) const MAX_PATH: usize = 512;

const CUT: &str = "...";

/// A request path, without its query, at most [`MAX_PATH`] bytes (copied into the entry, so a
/// line owes nothing to the request's buffers).
pub(crate) struct Path {
    len: u16,
    cut: bool,
    bytes: [u8; MAX_PATH],
}

impl Path {
    pub(crate) fn of(path: &str) -> Path {
        let (kept, cut) = if path.len() <= MAX_PATH {
            (path, false)
        } else {
            (
                &path[..path.floor_char_boundary(MAX_PATH - CUT.len())],
                true,
            )
        };
        let mut bytes = [0_u8; MAX_PATH];
        bytes[..kept.len()].copy_from_slice(kept.as_bytes());
        Path {
            len: u16::try_from(kept.len()).unwrap_or(0),
            cut,
            bytes,
        }
    }

    fn kept(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

impl Serialize for Path {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!(
            "{}{}",
            self.kept(),
            if self.cut { CUT } else { "" }
        ))
    }
}

/// One line's fields, as both formats write them (JSON keys are the field names; `type` tells
/// the line from the node's other JSON lines, which share `timestamp`).
#[derive(Serialize)]
struct Fields<'a> {
    timestamp: Stamp,
    #[serde(rename = "type")]
    kind: &'static str,
    client: Client,
    listener: Option<&'a str>,
    method: &'a str,
    path: &'a Path,
    protocol: &'static str,
    status: Option<u16>,
    group: Option<&'a str>,
    endpoint: Option<&'a str>,
    retries: u32,
    bytes_in: u64,
    bytes_out: u64,
    total_ms: Millis,
    upstream_ms: Option<Millis>,
    continent: Option<&'static str>,
    country: Option<&'a str>,
}

/// Writes lines in one format. Hand-rolled rather than through `fmt`, which took most of the
/// writer's time; it keeps the date and time of the last second it wrote, which a batch's
/// lines share.
pub(crate) struct Formatter {
    format: LogFormat,
    /// The second (since the epoch) `date` spells, as `YYYY-MM-DDTHH:MM:SS.`.
    second: Option<u64>,
    date: [u8; 20],
}

impl Formatter {
    pub(crate) fn new(format: LogFormat) -> Formatter {
        Formatter {
            format,
            second: None,
            date: [0; 20],
        }
    }

    /// Appends `e`'s line to `out`. `clock` is a (wall, monotonic) reading of one moment,
    /// which dates the line from when its response ended.
    pub(crate) fn write(&mut self, out: &mut Vec<u8>, e: &Entry, clock: (SystemTime, Instant)) {
        let ended = e.ended.unwrap_or(clock.1);
        let at = clock.0 - clock.1.saturating_duration_since(ended);
        let target = e
            .listener
            .as_deref()
            .zip(e.attempt)
            .and_then(|(l, (g, i))| {
                let group = l.groups.get(g)?;
                Some((group.name.as_str(), group.endpoints.get(i)?.address.id()))
            });
        let fields = Fields {
            timestamp: self.stamp(at),
            kind: "access",
            client: Client::of(e.client),
            listener: e.listener.as_deref().map(|l| l.name.as_str()),
            method: e.method.as_str(),
            path: &e.path,
            protocol: protocol(e.version),
            status: e.status,
            group: target.as_ref().map(|t| t.0),
            endpoint: target.as_ref().map(|t| &*t.1),
            retries: e.retries,
            bytes_in: e.upload.as_deref().map_or(0, |p| p.received()),
            bytes_out: e.sent,
            total_ms: Millis(ended.saturating_duration_since(e.started)),
            upstream_ms: e.upstream.map(Millis),
            continent: e.place.map(|p| p.continent.as_str()),
            country: e.place.as_ref().and_then(|p| p.country_str()),
        };
        match self.format {
            LogFormat::Json => {
                // Serializing these fields into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut *out, &fields);
            }
            LogFormat::Text => text(out, &fields),
        }
        out.push(b'\n');
    }

    /// `at` as RFC 3339 in UTC with milliseconds: `2025-06-01T08:30:00.250Z`.
    fn stamp(&mut self, at: SystemTime) -> Stamp {
        let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = since.as_secs();
        if self.second != Some(secs) {
            let (year, month, day) = civil(secs / 86_400);
            let s = secs % 86_400;
            let mut d = [0_u8; 20];
            digits(&mut d[0..4], year);
            d[4] = b'-';
            digits(&mut d[5..7], month);
            d[7] = b'-';
            digits(&mut d[8..10], day);
            d[10] = b'T';
            digits(&mut d[11..13], s / 3600);
            d[13] = b':';
            digits(&mut d[14..16], s / 60 % 60);
            d[16] = b':';
            digits(&mut d[17..19], s % 60);
            d[19] = b'.';
            self.date = d;
            self.second = Some(secs);
        }
        let mut t = [0_u8; 24];
        t[..20].copy_from_slice(&self.date);
        digits(&mut t[20..23], u64::from(since.subsec_millis()));
        t[23] = b'Z';
        Stamp(t)
    }
}

/// `n`'s last `out.len()` decimal digits, zero-padded.
fn digits(out: &mut [u8], mut n: u64) {
    for d in out.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// `n` in decimal, written at the end of `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
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

/// Appends `n` in decimal.
fn push_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(decimal(n, &mut [0; 20]));
}

/// A [`Formatter::stamp`]: ASCII.
struct Stamp([u8; 24]);

impl Stamp {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

impl Serialize for Stamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The client's address and port as text: `192.0.2.7:51234`, `[2001:db8::1]:51234`.
struct Client {
    text: [u8; 56],
    len: usize,
}

impl Client {
    fn of(addr: std::net::SocketAddr) -> Client {
        let mut text = [0_u8; 56];
        let len = match addr {
            std::net::SocketAddr::V4(a) => {
                let mut at = 0;
                let mut put = |bytes: &[u8]| {
                    text[at..at + bytes.len()].copy_from_slice(bytes);
                    at += bytes.len();
                };
                let mut buf = [0_u8; 20];
                for (i, octet) in a.ip().octets().into_iter().enumerate() {
                    if i > 0 {
                        put(b".");
                    }
                    put(decimal(u64::from(octet), &mut buf));
                }
                put(b":");
                put(decimal(u64::from(a.port()), &mut buf));
                at
            }
            // Rare enough for fmt (at most 47 characters with the port and brackets).
            std::net::SocketAddr::V6(a) => {
                let mut cursor = std::io::Cursor::new(&mut text[..]);
                let _ = std::io::Write::write_fmt(&mut cursor, format_args!("{a}"));
                usize::try_from(cursor.position()).unwrap_or(0)
            }
        };
        Client { text, len }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.text[..self.len]).unwrap_or("")
    }
}

impl Serialize for Client {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

fn text(out: &mut Vec<u8>, f: &Fields<'_>) {
    out.extend_from_slice(&f.timestamp.0);
    out.push(b' ');
    out.extend_from_slice(f.client.as_str().as_bytes());
    out.push(b' ');
    escaped(out, f.listener.unwrap_or("-"));
    out.push(b' ');
    escaped(out, f.method);
    out.push(b' ');
    escaped(out, f.path.kept());
    if f.path.cut {
        out.extend_from_slice(CUT.as_bytes());
    }
    out.push(b' ');
    out.extend_from_slice(f.protocol.as_bytes());
    out.push(b' ');
    match f.status {
        Some(code) => push_u64(out, u64::from(code)),
        None => out.push(b'-'),
    }
    for field in [f.group, f.endpoint] {
        out.push(b' ');
        escaped(out, field.unwrap_or("-"));
    }
    for n in [u64::from(f.retries), f.bytes_in, f.bytes_out] {
        out.push(b' ');
        push_u64(out, n);
    }
    out.push(b' ');
    f.total_ms.push(out);
    out.push(b' ');
    match &f.upstream_ms {
        Some(ms) => ms.push(out),
        None => out.push(b'-'),
    }
    for field in [f.continent, f.country] {
        out.push(b' ');
        escaped(out, field.unwrap_or("-"));
    }
}

/// `field` with every byte outside printable ASCII, `"` and `\\` written `\\xHH`.
fn escaped(out: &mut Vec<u8>, field: &str) {
    let plain = |b: u8| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\';
    if field.bytes().all(plain) {
        out.extend_from_slice(field.as_bytes());
        return;
    }
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in field.bytes() {
        if plain(b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]);
        }
    }
}

fn protocol(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_11 => "HTTP/1.1",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "-",
    }
}

/// A duration in milliseconds with three decimals (microseconds): `12.345`.
struct Millis(Duration);

impl Millis {
    fn micros(&self) -> u64 {
        u64::try_from(self.0.as_micros()).unwrap_or(u64::MAX)
    }

    fn push(&self, out: &mut Vec<u8>) {
        let us = self.micros();
        push_u64(out, us / 1000);
        let mut frac = [b'.', 0, 0, 0];
        digits(&mut frac[1..], us % 1000);
        out.extend_from_slice(&frac);
    }
}

impl Serialize for Millis {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // The nearest double to a whole number of microseconds over 1000 prints as that
        // decimal (12.345, 0.5, 3.0).
        s.serialize_f64(self.micros() as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc_with_milliseconds() {
        let mut f = Formatter::new(LogFormat::Text);
        let mut at = |secs: u64, ms: u64| {
            let t = UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(ms);
            f.stamp(t).as_str().to_owned()
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a century leap year), 23:59:59.999.
        assert_eq!(at(951_868_799, 999), "2000-02-29T23:59:59.999Z");
        assert_eq!(at(1_748_766_600, 250), "2025-06-01T08:30:00.250Z");
        // 2100 is not a leap year: its 1 March follows 28 February.
        assert_eq!(at(4_107_542_400, 0), "2100-03-01T00:00:00.000Z");
        // The same second again, from the date kept.
        assert_eq!(at(4_107_542_400, 7), "2100-03-01T00:00:00.007Z");
    }

    #[test]
    fn clients_and_numbers_are_spelled_as_display_would() {
        for addr in [
            "192.0.2.7:51234",
            "0.0.0.0:0",
            "255.255.255.255:65535",
            "[2001:db8::1]:443",
        ] {
            let a: std::net::SocketAddr = addr.parse().unwrap();
            assert_eq!(Client::of(a).as_str(), addr);
        }
        for n in [0, 7, 10, 65_535, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
        }
    }

    #[test]
    fn durations_are_milliseconds_to_the_microsecond() {
        let text = |d: Duration| {
            let mut out = Vec::new();
            Millis(d).push(&mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(text(Duration::from_micros(12_345)), "12.345");
        assert_eq!(text(Duration::from_nanos(999)), "0.000");
        assert_eq!(text(Duration::from_secs(3)), "3000.000");
        let json = serde_json::to_string(&Millis(Duration::from_micros(12_345))).unwrap();
        assert_eq!(json, "12.345");
    }

    #[test]
    fn long_paths_are_cut_and_odd_bytes_escaped() {
        let long = format!("/{}", "a".repeat(2000));
        let p = Path::of(&long);
        assert!(p.cut);
        assert_eq!(p.kept().len() + CUT.len(), MAX_PATH);
        // A cut never splits a character.
        let wide = format!("/{}", "é".repeat(600));
        let p = Path::of(&wide);
        assert!(p.cut && p.kept().len() <= MAX_PATH - CUT.len());
        assert!(p.kept().ends_with('é'));
        let short = Path::of("/a b");
        assert!(!short.cut);
        let mut s = Vec::new();
        escaped(&mut s, "/a b\"\\é");
        assert_eq!(s, b"/a\\x20b\\x22\\x5C\\xC3\\xA9");
    }
}
