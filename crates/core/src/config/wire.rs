//! The config values gtd writes onto the wire: a health check's path, Host, header names and
//! values, a group's `path_prefix` (put in front of every request target). Each has one
//! constructor here, built on the `http` types the node sends them as, so that `gtd check`
//! refuses (with the value's position) exactly what the node could not send or would send as
//! something else: a space or CR/LF in a request line ends it early, and what follows becomes
//! headers of the endpoint's request.
//!
//! A request target is stricter than what `http::uri::PathAndQuery` takes: no fragment (`#`,
//! which it drops without a word) and ASCII only (it takes UTF-8 as is, which is no request
//! line, RFC 9112 §3.2); a character that does not belong is refused with its percent-encoding
//! to write instead.

use http::header::{HeaderName, HeaderValue};
use http::uri::PathAndQuery;

use super::document::quote;
use super::syntax;

/// A check's `path`: an origin-form request target (`/path?query`), sent as written.
pub(crate) fn path(s: &str) -> Result<PathAndQuery, String> {
    target(s, true)
}

/// A group's `path_prefix`: a path (no query) put in front of each request's own.
pub(crate) fn path_prefix(s: &str) -> Result<PathAndQuery, String> {
    target(s, false)
}

/// A header name, as the node sends it (an RFC 9110 token).
pub(crate) fn header_name(s: &str) -> Result<HeaderName, String> {
    HeaderName::try_from(s).map_err(|_| format!("{} is not a valid header name", quote(s)))
}

/// A header value, as the node sends it: no control byte but tab (CR and LF would end it and
/// start another header).
pub(crate) fn header_value(s: &str) -> Result<HeaderValue, String> {
    HeaderValue::try_from(s).map_err(|_| {
        let (i, c) = s
            .chars()
            .enumerate()
            .find(|&(_, c)| c.is_ascii_control() && c != '\t')
            .unwrap_or((0, '?'));
        format!(
            "value {} cannot be sent in a header: {} at character {}",
            quote(s),
            describe(c),
            i + 1
        )
    })
}

/// A Host header: a host name or IP address, with an optional port (`api.example.com`,
/// `10.0.0.1:8080`, `[2001:db8::1]:443`).
pub(crate) fn host(s: &str) -> Result<HeaderValue, String> {
    let (name, port) = syntax::split_route_host(s);
    let name_ok = syntax::is_host_name(name)
        || syntax::is_ipv6_literal(name)
        || name.parse::<std::net::Ipv4Addr>().is_ok();
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
    match HeaderValue::try_from(s) {
        Ok(v) if name_ok && port_ok => Ok(v),
        _ => Err(format!(
            "{} is not a host name or IP address with an optional port, like \
             \"api.example.com\" or \"api.example.com:8443\"",
            quote(s)
        )),
    }
}

/// `s` as an origin-form target: `query` says whether `?` may start a query.
fn target(s: &str, query: bool) -> Result<PathAndQuery, String> {
    if !s.starts_with('/') {
        return Err(format!("{} must start with \"/\"", quote(s)));
    }
    // The first character that cannot be there, judged by the constructor itself on each
    // prefix (so that what it accepts and what this says never differ).
    let bad = s.char_indices().find(|&(i, c)| {
        let end = i + c.len_utf8();
        !c.is_ascii_graphic()
            || c == '#'
            || (c == '?' && !query)
            || PathAndQuery::try_from(&s[..end]).is_err()
    });
    match bad {
        None => PathAndQuery::try_from(s).map_err(|e| format!("{}: {e}", quote(s))),
        Some((_, '?')) => Err(format!(
            "{} holds a query (\"?\"): a prefix is a path; write \"%3F\" for a \"?\" in it",
            quote(s)
        )),
        Some((i, c)) => {
            let at = s[..i].chars().count() + 1;
            let mut utf8 = [0; 4];
            let encoded: String = c
                .encode_utf8(&mut utf8)
                .bytes()
                .map(|b| format!("%{b:02X}"))
                .collect();
            Err(format!(
                "{} cannot be sent in a request line: {} at character {at}; write it \
                 percent-encoded, {encoded}",
                quote(s),
                describe(c)
            ))
        }
    }
}

/// A character, named so that an operator can find it.
fn describe(c: char) -> String {
    match c {
        ' ' => "a space".to_owned(),
        '\r' => "a carriage return (CR)".to_owned(),
        '\n' => "a line feed (LF)".to_owned(),
        '\t' => "a tab".to_owned(),
        '#' => "\"#\" (a fragment, which is never sent)".to_owned(),
        c if c.is_control() => format!("the control character U+{:04X}", c as u32),
        c if !c.is_ascii() => format!("the non-ASCII character {}", quote(&c.to_string())),
        c => quote(&c.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_the_character_and_its_encoding() {
        let cases: &[(&str, bool, Result<&str, &str>)] = &[
            ("/health", true, Ok("/health")),
            ("/health?full=1", true, Ok("/health?full=1")),
            ("/v1", false, Ok("/v1")),
            ("/a%20b", false, Ok("/a%20b")),
            (
                "/a b",
                true,
                Err(
                    "\"/a b\" cannot be sent in a request line: a space at character 3; write it percent-encoded, %20",
                ),
            ),
            (
                "/a\r\nX: 1",
                false,
                Err(
                    "\"/a\\r\\nX: 1\" cannot be sent in a request line: a carriage return (CR) at character 3; write it percent-encoded, %0D",
                ),
            ),
            (
                "/é",
                true,
                Err(
                    "\"/é\" cannot be sent in a request line: the non-ASCII character \"é\" at character 2; write it percent-encoded, %C3%A9",
                ),
            ),
            (
                "/<x>",
                true,
                Err(
                    "\"/<x>\" cannot be sent in a request line: \"<\" at character 2; write it percent-encoded, %3C",
                ),
            ),
            (
                "/a#b",
                true,
                Err(
                    "\"/a#b\" cannot be sent in a request line: \"#\" (a fragment, which is never sent) at character 3; write it percent-encoded, %23",
                ),
            ),
            (
                "/a?b",
                false,
                Err(
                    "\"/a?b\" holds a query (\"?\"): a prefix is a path; write \"%3F\" for a \"?\" in it",
                ),
            ),
            ("", true, Err("\"\" must start with \"/\"")),
        ];
        for (s, query, expected) in cases {
            let got = target(s, *query);
            match expected {
                Ok(p) => assert_eq!(got.unwrap().as_str(), *p),
                Err(m) => assert_eq!(got.unwrap_err(), *m, "{s:?}"),
            }
        }
    }

    #[test]
    fn hosts_and_header_values() {
        for ok in [
            "a.example",
            "a.example:8443",
            "10.0.0.1",
            "[2001:db8::1]:443",
        ] {
            assert!(host(ok).is_ok(), "{ok}");
        }
        for bad in [
            "a b",
            "a\r\nX: 1",
            "a.example:0",
            "a.example:x",
            "é.example",
            "u@a",
        ] {
            assert!(host(bad).is_err(), "{bad}");
        }
        assert_eq!(
            header_value("a\nb").unwrap_err(),
            "value \"a\\nb\" cannot be sent in a header: a line feed (LF) at character 2"
        );
        assert!(header_value("a\tb é").is_ok());
    }
}
