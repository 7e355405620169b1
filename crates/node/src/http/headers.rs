//! The header rules of HTTP listeners: what is refused (400), which headers are hop-by-hop and
//! removed both ways, what gtd sets towards the endpoint (`X-Forwarded-For/-Proto/-Host`, Host
//! from the authority, `TE: trailers`), and which requests ask for an upgrade.

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Uri, Version};

use super::h1;

/// The `Upgrade` value of an HTTP/1.1 request that asks to switch protocols (`Connection:
/// upgrade`), if it does. `h2c` (`curl --http2` on cleartext) is not one: switching the whole
/// connection to one endpoint would end per-request decisions on it, so the request goes on as
/// HTTP/1.1 (as when gtd answers it itself: hyper does not offer h2c upgrades).
pub(super) fn wants_upgrade(parts: &http::request::Parts) -> Option<HeaderValue> {
    if parts.version != Version::HTTP_11 {
        return None;
    }
    let proto = parts.headers.get(header::UPGRADE)?;
    let h2c = proto.to_str().map_or(true, |p| {
        p.split(',').any(|p| p.trim().eq_ignore_ascii_case("h2c"))
    });
    if h2c {
        return None;
    }
    parts
        .headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
        .then(|| proto.clone())
}

pub(super) static UPGRADE: HeaderValue = HeaderValue::from_static("upgrade");
static XFP_HTTP: HeaderValue = HeaderValue::from_static("http");
static XFP_HTTPS: HeaderValue = HeaderValue::from_static("https");

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Rewrites the client's headers for the endpoint (see the module doc); false when the request
/// names no host (HTTP/1.0 allows that).
pub(super) fn forward_headers(
    headers: &mut HeaderMap,
    uri: &Uri,
    version: Version,
    xff: &HeaderValue,
    https: bool,
) -> bool {
    if strip_hop_by_hop(headers) {
        headers.insert(header::TE, TE_TRAILERS.clone());
        headers.insert(header::CONNECTION, CONNECTION_TE.clone());
    }
    headers.remove(header::EXPECT);
    // HTTP/1.1 endpoints get the request target's authority as Host.
    let host = match authority(uri).and_then(|a| HeaderValue::from_str(a).ok()) {
        Some(h) => {
            headers.insert(header::HOST, h.clone());
            Some(h)
        }
        None => headers.get(header::HOST).cloned(),
    };
    // X-Forwarded-For: what came in, then the client's address, on one line.
    match headers.entry(X_FORWARDED_FOR) {
        header::Entry::Vacant(e) => {
            e.insert(xff.clone());
        }
        header::Entry::Occupied(mut e) => {
            let came = e.iter().filter(|v| v.to_str().is_ok());
            if let Some(v) = joined(came.chain([xff]), b", ") {
                e.insert(v);
            }
        }
    }
    // HTTP/2 clients may send cookies as several fields; an HTTP/1.1 endpoint gets one, joined
    // with "; " (RFC 9113 8.2.3), as nginx, HAProxy and Envoy pass them.
    if version == Version::HTTP_2
        && headers.get_all(header::COOKIE).iter().nth(1).is_some()
        && let Some(v) = joined(headers.get_all(header::COOKIE).iter(), b"; ")
    {
        headers.insert(header::COOKIE, v);
    }
    headers.insert(
        X_FORWARDED_PROTO,
        if https {
            XFP_HTTPS.clone()
        } else {
            XFP_HTTP.clone()
        },
    );
    match host {
        Some(h) => {
            headers.insert(X_FORWARDED_HOST, h);
            true
        }
        None => {
            headers.remove(X_FORWARDED_HOST);
            false
        }
    }
}

/// The answer to a request gtd does not proxy, if it is one:
/// - more than one Host field, or none in an HTTP/1.1 request whose target does not name one
///   (RFC 9112 section 3.2: 400, as nginx and HAProxy answer; routes and the endpoint would
///   otherwise see different hosts);
/// - a Host value that is not `uri-host [":" port]` (RFC 9112 section 3.2 again: `a b`,
///   `a, b`, `a/x`, `u@a` or `a:xyz` would reach the endpoint as a host other than the one
///   routed by, or as none);
/// - an authority-form target (`GET a.example:80`) with a method other than CONNECT (RFC 9112
///   section 3.2.3), and userinfo in a target (`http://u:p@a/`, RFC 9110 section 4.2.4): gtd
///   used to forward both rewritten into requests the client did not send;
/// - the asterisk target with a method other than OPTIONS (RFC 9112 section 3.2.4);
/// - a transfer coding other than a lone `chunked` (501, RFC 9112 section 6.1: gtd implements
///   no other, and forwarding `gzip, chunked` re-chunked would drop the gzip coding; a list
///   that does not end in `chunked` hyper already refuses with 400, section 6.3);
/// - more than 100 header fields (431): hyper holds HTTP/1.1 heads to that, as HAProxy and
///   Envoy do, and HTTP/2 gets the same here, its cookie fields (browsers send one per cookie)
///   counted as the one field they become.
pub(super) fn refused(parts: &http::request::Parts) -> Option<(StatusCode, &'static str)> {
    let bad = |why| Some((StatusCode::BAD_REQUEST, why));
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => return bad("more than one Host header\n"),
        (None, _) if parts.version == Version::HTTP_11 && authority(&parts.uri).is_none() => {
            return bad("no Host header\n");
        }
        (Some(host), None) if !host_and_port(host.as_bytes()) => {
            return bad("the Host header is not a host[:port]\n");
        }
        _ => {}
    }
    if let Some(a) = parts.uri.authority() {
        if parts.uri.scheme().is_none() && parts.method != Method::CONNECT {
            return bad("an authority-form target is for CONNECT only\n");
        }
        if a.as_str().contains('@') {
            return bad("userinfo in the request target\n");
        }
    }
    if parts.uri.path() == "*" && parts.method != Method::OPTIONS {
        return bad("the target * is for OPTIONS only\n");
    }
    let mut codings = parts.headers.get_all(header::TRANSFER_ENCODING).iter();
    if let Some(first) = codings.next()
        && (codings.next().is_some() || !lone_chunked(first))
    {
        let status = StatusCode::NOT_IMPLEMENTED;
        return Some((status, "only the chunked transfer coding is forwarded\n"));
    }
    let headers = &parts.headers;
    if headers.len() > h1::MAX_HEADERS {
        let cookies = headers.get_all(header::COOKIE).iter().count();
        if headers.len() - cookies.saturating_sub(1) > h1::MAX_HEADERS {
            let status = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
            return Some((status, "more than 100 header fields\n"));
        }
    }
    None
}

/// True for a Host value of the form `uri-host [":" port]` (RFC 3986): an IP literal in
/// brackets, or a registered name / IPv4 address (unreserved characters, `%`-escapes and
/// sub-delimiters, possibly empty), then optionally a colon and digits.
fn host_and_port(value: &[u8]) -> bool {
    let (host, port) = match value.split_first() {
        Some((b'[', rest)) => {
            let Some(end) = rest.iter().position(|&b| b == b']') else {
                return false;
            };
            let literal = &rest[..end];
            let ip = |b: &u8| b.is_ascii_hexdigit() || *b == b':' || *b == b'.';
            if literal.is_empty() || !literal.iter().all(ip) {
                return false;
            }
            (&b""[..], &rest[end + 1..])
        }
        _ => match value.iter().position(|&b| b == b':') {
            Some(i) => value.split_at(i),
            None => (value, &b""[..]),
        },
    };
    let name = |b: &u8| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=".contains(b);
    let digits = |p: &[u8]| p.iter().all(u8::is_ascii_digit);
    host.iter().all(name)
        && port
            .split_first()
            .is_none_or(|(c, p)| *c == b':' && digits(p))
}

/// True for `chunked` alone (any case, optional whitespace around it).
fn lone_chunked(value: &HeaderValue) -> bool {
    let value = value.as_bytes().trim_ascii();
    value.eq_ignore_ascii_case(b"chunked")
}

/// The host (and port) the request target names: HTTP/2's :authority, or the host of an
/// absolute-form HTTP/1.1 target. It wins over a Host header (RFC 9113 8.3.1, RFC 9112 3.2.2),
/// for routes as for the endpoint. Without userinfo, which clients should not send.
pub(super) fn authority(uri: &Uri) -> Option<&str> {
    let a = uri.authority()?.as_str();
    Some(a.rsplit_once('@').map_or(a, |(_, host)| host))
}

/// The values, in order, as one value with `separator` between them.
fn joined<'a>(
    values: impl Iterator<Item = &'a HeaderValue>,
    separator: &[u8],
) -> Option<HeaderValue> {
    let mut out = Vec::new();
    for (i, v) in values.enumerate() {
        if i > 0 {
            out.extend_from_slice(separator);
        }
        out.extend_from_slice(v.as_bytes());
    }
    HeaderValue::from_maybe_shared(Bytes::from(out)).ok()
}

/// Fields `Connection` may name but never removes: the request was routed by its Host and is
/// framed by its Content-Length (Transfer-Encoding is the hop's own, removed with the fixed
/// list and set again for the endpoint). Removing Host made gtd send the endpoint's address
/// instead of the host it routed by.
const KEPT: [HeaderName; 2] = [header::HOST, header::CONTENT_LENGTH];

/// True for the fixed hop-by-hop headers (Proxy-* and `Proxy` itself included: httpoxy).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == header::CONNECTION
        || name == header::TE
        || name == header::TRANSFER_ENCODING
        || name == header::UPGRADE
        || name.as_str() == "keep-alive"
        || name.as_str().starts_with("proxy")
}

/// Removes hop-by-hop headers: those Connection names, then the fixed list. One pass over the
/// names and nothing else when there is none (most requests). True when a `TE` among them
/// listed `trailers` (the sender accepts trailer fields).
pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap) -> bool {
    let mut found = headers.keys().filter(|k| is_hop_by_hop(k));
    match (found.next(), found.next()) {
        (None, _) => return false,
        // `TE` alone (HTTP/2 clients that take trailers: gRPC's): nothing else to look for.
        (Some(k), None) if k == header::TE => {
            let trailers = headers.get_all(header::TE).iter().any(lists_trailers);
            headers.remove(header::TE);
            return trailers;
        }
        // `Connection: keep-alive` alone (most responses): likewise.
        (Some(k), None) if k == header::CONNECTION => {
            let mut values = headers.get_all(header::CONNECTION).iter();
            if let (Some(v), None) = (values.next(), values.next())
                && v.as_bytes().eq_ignore_ascii_case(b"keep-alive")
            {
                headers.remove(header::CONNECTION);
                return false;
            }
        }
        _ => {}
    }
    let trailers = headers.get_all(header::TE).iter().any(lists_trailers);
    if headers.contains_key(header::CONNECTION) {
        let listed: Vec<HeaderValue> = headers
            .get_all(header::CONNECTION)
            .iter()
            .cloned()
            .collect();
        for v in &listed {
            for token in v.to_str().unwrap_or("").split(',') {
                let token = token.trim();
                // keep-alive is in the fixed list, removed below; what the message was routed
                // or framed by is never Connection's to remove.
                if !token.is_empty()
                    && !token.eq_ignore_ascii_case("keep-alive")
                    && !KEPT.iter().any(|k| token.eq_ignore_ascii_case(k.as_str()))
                {
                    headers.remove(token);
                }
            }
        }
    }
    let names: Vec<HeaderName> = headers
        .keys()
        .filter(|k| is_hop_by_hop(k))
        .cloned()
        .collect();
    for n in names {
        headers.remove(n);
    }
    trailers
}

/// True when a `TE` value lists `trailers`.
fn lists_trailers(te: &HeaderValue) -> bool {
    te.to_str().unwrap_or("").split(',').any(|t| {
        t.split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("trailers"))
    })
}

/// What is left of a client's `TE` on the way to the endpoint: gtd forwards trailer fields, so
/// it may say it accepts them (RFC 9110 section 10.1.4, which also asks for `Connection: te`);
/// transfer codings are the hop's own.
static TE_TRAILERS: HeaderValue = HeaderValue::from_static("trailers");
static CONNECTION_TE: HeaderValue = HeaderValue::from_static("te");

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A header map of `(name, value)` pairs, in order.
    pub(in crate::http) fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::try_from(*k).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn hop_by_hop_headers_go() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Secret"),
            ("connection", "x-other, TE"),
            ("x-secret", "1"),
            ("x-other", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-authorization", "Basic x"),
            ("proxy-connection", "keep-alive"),
            ("proxy", "http://evil"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("x-kept", "yes"),
            ("cookie", "a=b"),
            // It names end-to-end fields (RFC 9110 section 6.6.2); hyper sends the trailer
            // fields it names, and only those.
            ("trailer", "x-sum"),
        ]);
        assert!(strip_hop_by_hop(&mut h), "TE listed trailers");
        let mut names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["cookie", "trailer", "x-kept"]);
        let mut h = map(&[("te", "gzip;q=0.5"), ("te", "Trailers;q=1, deflate")]);
        assert!(strip_hop_by_hop(&mut h) && h.is_empty());
        // Alone (an HTTP/2 client's `te: trailers`), or without trailers.
        let mut h = map(&[("te", "trailers"), ("x-a", "1")]);
        assert!(strip_hop_by_hop(&mut h) && h.len() == 1);
        let mut h = map(&[("te", "gzip, deflate")]);
        assert!(!strip_hop_by_hop(&mut h) && h.is_empty());

        // The common response: `Connection: keep-alive` alone.
        let mut h = map(&[("connection", "Keep-Alive"), ("content-length", "3")]);
        strip_hop_by_hop(&mut h);
        let names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["content-length"]);
        let mut h = map(&[("connection", "x-a"), ("x-a", "1"), ("x-b", "1")]);
        strip_hop_by_hop(&mut h);
        let names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["x-b"]);

        // What the request was routed and framed by stays, whatever Connection names.
        let mut h = map(&[
            ("connection", "Host, content-length, x-a"),
            ("host", "routed.example"),
            ("content-length", "5"),
            ("x-a", "1"),
        ]);
        strip_hop_by_hop(&mut h);
        let mut names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["content-length", "host"]);
    }

    #[test]
    fn forwarded_headers_are_set_and_appended() {
        let uri: Uri = "/p".parse().unwrap();
        let xff = HeaderValue::from_static("192.0.2.7");
        let mut h = map(&[
            ("host", "example.com:8080"),
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-for", "10.0.0.2"),
            ("x-forwarded-proto", "http"),
            ("expect", "100-continue"),
        ]);
        forward_headers(&mut h, &uri, Version::HTTP_11, &xff, true);
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 10.0.0.2, 192.0.2.7");
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "example.com:8080");
        assert!(!h.contains_key("expect"));

        // HTTP/2: no Host header, the authority becomes Host.
        let uri: Uri = "https://h2.example.com/p".parse().unwrap();
        let mut h = HeaderMap::new();
        forward_headers(&mut h, &uri, Version::HTTP_2, &xff, true);
        assert_eq!(h["host"], "h2.example.com");
        assert_eq!(h["x-forwarded-host"], "h2.example.com");
        assert_eq!(h["x-forwarded-for"], "192.0.2.7");
    }

    /// The head of `METHOD TARGET` with `headers`, as the server hands it over.
    fn head(method: &str, target: &str, headers: &[(&str, &str)]) -> http::request::Parts {
        let mut req = http::Request::builder().method(method).uri(target);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.body(()).unwrap().into_parts().0
    }

    #[test]
    fn a_host_that_is_not_host_and_port_and_targets_with_the_wrong_form_are_refused() {
        for host in [
            "a.example",
            "a.example:8080",
            "a_b.example",
            "A.EXAMPLE.",
            "a%2eexample",
            "[::1]:80",
            "[::1]",
            "127.0.0.1:80",
            "",
        ] {
            let parts = head("GET", "/", &[("host", host)]);
            assert_eq!(refused(&parts), None, "Host: {host:?}");
        }
        for host in [
            "a b",
            "a.example, b.example",
            "a.example/x",
            "::1",
            "a.example:xyz",
            "a.example:80:80",
            "u@a.example",
            "[::1",
            "[a.example]",
            "a\"b",
        ] {
            let parts = head("GET", "/", &[("host", host)]);
            assert_eq!(
                refused(&parts).map(|(s, _)| s),
                Some(StatusCode::BAD_REQUEST),
                "Host: {host:?}"
            );
        }
        let bad = Some(StatusCode::BAD_REQUEST);
        let h = [("host", "a.example")];
        // Authority-form is CONNECT's alone (RFC 9112 3.2.3); userinfo is an error (RFC 9110
        // 4.2.4).
        assert_eq!(refused(&head("GET", "a.example:80", &h)).map(|r| r.0), bad);
        let userinfo = head("GET", "http://u:p@a.example/x", &h);
        assert_eq!(refused(&userinfo).map(|r| r.0), bad);
        assert_eq!(refused(&head("GET", "http://a.example/x", &h)), None);
        assert_eq!(refused(&head("OPTIONS", "*", &h)), None);
    }
}
