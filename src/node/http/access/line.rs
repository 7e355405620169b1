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
    timestamp: Time,
    #[serde(rename = "type")]
    kind: &'static str,
    client: std::net::SocketAddr,
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
}

/// Appends `e`'s line to `out`. `clock` is a (wall, monotonic) reading of one moment, which
/// dates the line from when its response ended.
pub(crate) fn write(out: &mut Vec<u8>, e: &Entry, format: LogFormat, clock: (SystemTime, Instant)) {
    let ended = e.ended.unwrap_or(clock.1);
    let at = clock.0 - clock.1.saturating_duration_since(ended);
    let target = e
        .listener
        .as_deref()
        .zip(e.attempt)
        .and_then(|(l, (g, i))| {
            let group = l.groups.get(g)?;
            Some((
                group.name.as_str(),
                group.endpoints.get(i)?.address.text.as_str(),
            ))
        });
    let fields = Fields {
        timestamp: Time(at),
        kind: "access",
        client: e.client,
        listener: e.listener.as_deref().map(|l| l.name.as_str()),
        method: e.method.as_str(),
        path: &e.path,
        protocol: protocol(e.version),
        status: e.status,
        group: target.map(|t| t.0),
        endpoint: target.map(|t| t.1),
        retries: e.retries,
        bytes_in: e.upload.as_deref().map_or(0, |p| p.received()),
        bytes_out: e.sent,
        total_ms: Millis(ended.saturating_duration_since(e.started)),
        upstream_ms: e.upstream.map(Millis),
    };
    match format {
        LogFormat::Json => {
            // Serializing these fields into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *out, &fields);
        }
        LogFormat::Text => text(out, &fields),
    }
    out.push(b'\n');
}

fn text(out: &mut Vec<u8>, f: &Fields<'_>) {
    use std::io::Write as _;
    let _ = write!(out, "{} {} ", f.timestamp, f.client);
    escaped(out, f.listener.unwrap_or("-"));
    out.push(b' ');
    escaped(out, f.method);
    out.push(b' ');
    escaped(out, f.path.kept());
    if f.path.cut {
        out.extend_from_slice(CUT.as_bytes());
    }
    let _ = write!(out, " {} ", f.protocol);
    match f.status {
        Some(code) => {
            let _ = write!(out, "{code}");
        }
        None => out.push(b'-'),
    }
    for field in [f.group, f.endpoint] {
        out.push(b' ');
        escaped(out, field.unwrap_or("-"));
    }
    let _ = write!(
        out,
        " {} {} {} {}",
        f.retries, f.bytes_in, f.bytes_out, f.total_ms
    );
    match &f.upstream_ms {
        Some(ms) => {
            let _ = write!(out, " {ms}");
        }
        None => out.extend_from_slice(b" -"),
    }
}

/// `field` with every byte outside printable ASCII, `"` and `\` written `\xHH`.
fn escaped(out: &mut Vec<u8>, field: &str) {
    for b in field.bytes() {
        if (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\' {
            out.push(b);
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
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
    fn micros(&self) -> u128 {
        self.0.as_micros()
    }
}

impl std::fmt::Display for Millis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let us = self.micros();
        write!(f, "{}.{:03}", us / 1000, us % 1000)
    }
}

impl Serialize for Millis {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // The nearest double to a whole number of microseconds over 1000 prints as that
        // decimal (12.345, 0.5, 3.0).
        s.serialize_f64(self.micros() as f64 / 1000.0)
    }
}

/// A wall-clock time as RFC 3339 in UTC with milliseconds: `2025-06-01T08:30:00.250Z`.
struct Time(SystemTime);

impl std::fmt::Display for Time {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let since = self.0.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = since.as_secs();
        let (year, month, day) = civil(secs / 86_400);
        let s = secs % 86_400;
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            s / 3600,
            s / 60 % 60,
            s % 60,
            since.subsec_millis()
        )
    }
}

impl Serialize for Time {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The (year, month, day) of a day counted from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc_with_milliseconds() {
        let at = |secs: u64, ms: u64| {
            Time(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(ms)).to_string()
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a century leap year), 23:59:59.999.
        assert_eq!(at(951_868_799, 999), "2000-02-29T23:59:59.999Z");
        assert_eq!(at(1_748_766_600, 250), "2025-06-01T08:30:00.250Z");
        // 2100 is not a leap year: its 1 March follows 28 February.
        assert_eq!(at(4_107_542_400, 0), "2100-03-01T00:00:00.000Z");
    }

    #[test]
    fn durations_are_milliseconds_to_the_microsecond() {
        assert_eq!(Millis(Duration::from_micros(12_345)).to_string(), "12.345");
        assert_eq!(Millis(Duration::from_nanos(999)).to_string(), "0.000");
        assert_eq!(Millis(Duration::from_secs(3)).to_string(), "3000.000");
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
