//! The HTTP request's line, in text and in JSON (docs/logs.md "The access log" lists the
//! fields): one set of fields, written the two ways, by the writer thread.

use std::time::{Instant, SystemTime};

use serde::Serialize;

use super::Entry;
use crate::access::Record;
use crate::access::line::{Client, Formatter, Millis, Stamp, escaped, push_u64};

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

impl Record for Entry {
    /// The request's line, dated from when its response ended.
    fn write(&self, f: &mut Formatter, out: &mut Vec<u8>, clock: (SystemTime, Instant)) {
        let e = self;
        let ended = e.ended.unwrap_or(clock.1);
        let target = e
            .listener
            .as_deref()
            .zip(e.attempt)
            .and_then(|(l, (g, i))| {
                let group = l.groups.get(g)?;
                Some((group.name.as_str(), group.endpoints.get(i)?.address.id()))
            });
        let fields = Fields {
            timestamp: f.dated(ended, clock),
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
        f.line(out, &fields, text);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_paths_are_cut() {
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
    }
}
