//! What every access log line is written with, in text and in JSON (docs/logs.md lists the
//! fields of each kind of line): the date, addresses, numbers and durations, spelled by hand for
//! the writer thread.
//!
//! Text: the fields in a fixed order, separated by one space, `-` for one that does not apply;
//! bytes outside printable ASCII, `"` and `\` are written `\xHH`, so a field never holds a space
//! and a line is always one line. JSON: one object per line with the same fields under stable
//! keys, `null` for one that does not apply, and a `type` naming the kind of line.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use gtd_core::calendar::civil;

/// How the node writes its logs: `gtd run --log-format`. The access log follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
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

    /// Appends one line of `fields` to `out` in the format set: one JSON object, or `text`'s
    /// words; then the newline.
    pub(crate) fn line<F: serde::Serialize>(
        &self,
        out: &mut Vec<u8>,
        fields: &F,
        text: fn(&mut Vec<u8>, &F),
    ) {
        match self.format {
            LogFormat::Json => {
                // Serializing these fields into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut *out, fields);
            }
            LogFormat::Text => text(out, fields),
        }
        out.push(b'\n');
    }

    /// The time of `ended` (a monotonic instant) by `clock`, a (wall, monotonic) reading of
    /// one moment.
    pub(crate) fn dated(&mut self, ended: Instant, clock: (SystemTime, Instant)) -> Stamp {
        self.stamp(clock.0 - clock.1.saturating_duration_since(ended))
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
pub(crate) fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
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
pub(crate) fn push_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(decimal(n, &mut [0; 20]));
}

/// A [`Formatter::stamp`]: ASCII.
pub(crate) struct Stamp(pub(crate) [u8; 24]);

impl Stamp {
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

impl Serialize for Stamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The client's address and port as text: `192.0.2.7:51234`, `[2001:db8::1]:51234`.
pub(crate) struct Client {
    text: [u8; 56],
    len: usize,
}

impl Client {
    pub(crate) fn of(addr: std::net::SocketAddr) -> Client {
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

    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.text[..self.len]).unwrap_or("")
    }
}

impl Serialize for Client {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// `field` with every byte outside printable ASCII, `"` and `\\` written `\\xHH`.
pub(crate) fn escaped(out: &mut Vec<u8>, field: &str) {
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

/// A duration in milliseconds with three decimals (microseconds): `12.345`.
pub(crate) struct Millis(pub(crate) Duration);

impl Millis {
    fn micros(&self) -> u64 {
        u64::try_from(self.0.as_micros()).unwrap_or(u64::MAX)
    }

    pub(crate) fn push(&self, out: &mut Vec<u8>) {
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
    fn odd_bytes_are_escaped() {
        let mut s = Vec::new();
        escaped(&mut s, "/a b\"\\é");
        assert_eq!(s, b"/a\\x20b\\x22\\x5C\\xC3\\xA9");
    }
}
