//! The corpus file: cases (raw request bytes) with what gtd is expected to do and what nginx and
//! HAProxy were last seen doing. Read with serde; written back (re-recording) by [`render`] in
//! one canonical layout, so a re-record changes only the results that changed.

use std::fmt::Write as _;

use serde::Deserialize;

/// The whole file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Corpus {
    pub(crate) case: Vec<Case>,
}

/// One raw request (or several, pipelined) and its results.
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(crate) struct Case {
    /// Unique, `family-what`.
    pub(crate) name: String,
    /// What the case is about, when the name does not say it.
    #[serde(default)]
    pub(crate) note: String,
    /// The bytes, with two expansions: `{{N*TEXT}}` is TEXT repeated N times, and `{{pause}}`
    /// splits the bytes into writes a moment apart (a client waiting for `100 Continue`).
    pub(crate) request: String,
    /// How many responses a well-behaved proxy sends (pipelined requests); 1 unless told.
    #[serde(default = "one")]
    pub(crate) responses: usize,
    /// Why gtd may differ from both anchors (required when it does).
    #[serde(default)]
    pub(crate) reason: String,
    /// What gtd must do (reviewed, never overwritten by a re-record).
    pub(crate) gtd: Option<Outcome>,
    /// What nginx did when last recorded.
    pub(crate) nginx: Option<Outcome>,
    /// What HAProxy did when last recorded.
    pub(crate) haproxy: Option<Outcome>,
}

fn one() -> usize {
    1
}

/// What one proxy did with a case: what its client got and what reached the endpoint.
#[derive(Deserialize, Clone, PartialEq, Eq, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct Outcome {
    /// The statuses the client got, in order (interim `1xx` left out, `101` kept), then
    /// `closed` when the proxy closed before all expected responses, `timeout` when it went
    /// silent, `junk` when it sent bytes that are not a response.
    pub(crate) status: String,
    /// Each request that reached the endpoint, normalised (`wire::describe`, and
    /// `wire::unfinished` for one that never ended); empty: not forwarded.
    #[serde(default)]
    pub(crate) forwarded: Vec<String>,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.forwarded.is_empty() {
            write!(f, "{} (not forwarded)", self.status)
        } else {
            write!(f, "{} → {}", self.status, self.forwarded.join(" ‖ "))
        }
    }
}

/// The case's bytes, as the writes a client makes.
pub(crate) fn expand(request: &str) -> Vec<Vec<u8>> {
    let mut writes = vec![Vec::new()];
    let mut rest = request;
    while let Some(start) = rest.find("{{") {
        writes.last_mut().unwrap().extend(chars(&rest[..start]));
        let end = rest[start..]
            .find("}}")
            .unwrap_or_else(|| panic!("unclosed {{{{ in {request:?}"))
            + start;
        let inner = &rest[start + 2..end];
        if inner == "pause" {
            writes.push(Vec::new());
        } else {
            let (n, text) = inner
                .split_once('*')
                .unwrap_or_else(|| panic!("{{{{{inner}}}}} is neither N*TEXT nor pause"));
            let n: usize = n.parse().expect("a repeat count");
            let unit = chars(text);
            for _ in 0..n {
                writes.last_mut().unwrap().extend_from_slice(&unit);
            }
        }
        rest = &rest[end + 2..];
    }
    writes.last_mut().unwrap().extend(chars(rest));
    writes
}

/// The text's characters as bytes: U+0000..=U+00FF each as that one byte (so `\u00ff` in the
/// file is the obs-text byte 0xFF), anything above as UTF-8.
fn chars(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match u8::try_from(u32::from(c)) {
            Ok(b) => out.push(b),
            Err(_) => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out
}

/// Bytes as corpus text: printable ASCII as is, others as `\r`, `\n`, `\t` or `\xNN` (the
/// reverse of TOML's escapes is done by [`toml_string`]), runs of one byte over 16 long as
/// `{{N*c}}`.
pub(crate) fn show(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let run = bytes[i..].iter().take_while(|&&c| c == b).count();
        let one = match b {
            b'\r' => "\\r".to_owned(),
            b'\n' => "\\n".to_owned(),
            b'\t' => "\\t".to_owned(),
            b'\\' => "\\\\".to_owned(),
            0x20..=0x7e => (b as char).to_string(),
            _ => format!("\\x{b:02x}"),
        };
        if run > 16 {
            let _ = write!(out, "{{{{{run}*{one}}}}}");
            i += run;
        } else {
            out.push_str(&one);
            i += 1;
        }
    }
    out
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c < ' ' || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The corpus file's text.
pub(crate) fn render(header: &str, cases: &[Case]) -> String {
    let mut out = String::from(header);
    for case in cases {
        out.push_str("\n[[case]]\n");
        let _ = writeln!(out, "name = {}", toml_string(&case.name));
        if !case.note.is_empty() {
            let _ = writeln!(out, "note = {}", toml_string(&case.note));
        }
        let _ = writeln!(out, "request = {}", toml_string(&case.request));
        if case.responses != 1 {
            let _ = writeln!(out, "responses = {}", case.responses);
        }
        if !case.reason.is_empty() {
            let _ = writeln!(out, "reason = {}", toml_string(&case.reason));
        }
        for (who, outcome) in [
            ("gtd", &case.gtd),
            ("nginx", &case.nginx),
            ("haproxy", &case.haproxy),
        ] {
            let Some(o) = outcome else { continue };
            let forwarded: Vec<String> = o.forwarded.iter().map(|f| toml_string(f)).collect();
            let _ = writeln!(
                out,
                "{who} = {{ status = {}, forwarded = [{}] }}",
                toml_string(&o.status),
                forwarded.join(", ")
            );
        }
    }
    out
}

/// The comment lines at the top of the file (kept as they are by a re-record).
pub(crate) fn header(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("[[case]]") {
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansions() {
        assert_eq!(
            expand("A{{3*b\r}}C{{pause}}D\u{ff}"),
            vec![b"Ab\rb\rb\rC".to_vec(), b"D\xff".to_vec()]
        );
        assert_eq!(show(b"x\0\r\nyyyyyyyyyyyyyyyyyyy"), "x\\x00\\r\\n{{19*y}}");
    }
}
