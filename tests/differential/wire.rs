//! HTTP/1.1 on the wire, as the recording backend and the test's client read it: a request's
//! framing (to know where it ends) and its normalised form, a response's end, and the client
//! that sends a case and reads what comes back.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout, timeout_at};

use crate::corpus::show;

/// Headers every proxy adds or rewrites as connection management; left out of the comparison.
/// `Content-Length` and `Transfer-Encoding` are left out too: the body is compared decoded
/// (nginx re-frames a chunked body with a length), and a request that arrives with both is
/// marked `cl+te`.
const IGNORED: &[&str] = &[
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-real-ip",
    "forwarded",
    "via",
    "connection",
    "keep-alive",
    "proxy-connection",
    "content-length",
    "transfer-encoding",
];

/// What the start of a buffer holds.
pub(crate) enum Parsed {
    /// Not a whole request yet; `expects_continue` when its head is complete, its body is
    /// still to come and it asked for `100 Continue`.
    Incomplete { expects_continue: bool },
    /// One whole request: its normalised text, how many bytes it took, whether the connection
    /// ends after it.
    Request {
        text: String,
        len: usize,
        close: bool,
        head: bool,
    },
    /// Not HTTP: the endpoint closes.
    Invalid,
}

/// Reads one request from the start of `buf`.
pub(crate) fn parse_request(buf: &[u8]) -> Parsed {
    let mut fields = [httparse::EMPTY_HEADER; 512];
    let mut req = httparse::Request::new(&mut fields);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return Parsed::Incomplete {
                expects_continue: false,
            };
        }
        Err(_) => return Parsed::Invalid,
    };
    let method = req.method.unwrap_or("");
    let version = req.version.unwrap_or(1);
    let (mut length, mut chunked, mut close, mut expects) = (None, false, version == 0, false);
    let mut has_cl = false;
    let mut has_te = false;
    for h in req.headers.iter() {
        let value = String::from_utf8_lossy(h.value).to_ascii_lowercase();
        match h.name.to_ascii_lowercase().as_str() {
            "content-length" => {
                has_cl = true;
                length = length.or(value.trim().parse::<usize>().ok());
            }
            "transfer-encoding" => {
                has_te = true;
                chunked = value.trim().ends_with("chunked");
            }
            "connection" if value.contains("close") => close = true,
            "connection" if value.contains("keep-alive") => close = false,
            "expect" if value.contains("100-continue") => expects = true,
            _ => {}
        }
    }
    let rest = &buf[head_len..];
    let (body, trailers, body_len) = if chunked {
        match dechunk(rest) {
            Some(d) => d,
            None => {
                return Parsed::Incomplete {
                    expects_continue: expects,
                };
            }
        }
    } else if let Some(n) = length {
        if rest.len() < n {
            return Parsed::Incomplete {
                expects_continue: expects,
            };
        }
        (rest[..n].to_vec(), Vec::new(), n)
    } else {
        (Vec::new(), Vec::new(), 0)
    };
    let mut text = describe(&req, &body, &trailers);
    if has_cl && has_te {
        text.push_str("; cl+te");
    }
    Parsed::Request {
        text,
        len: head_len + body_len,
        close,
        head: method == "HEAD",
    }
}

/// A request as the corpus writes it: method, target, `(1.0)` for HTTP/1.0, the fields that
/// matter sorted by name, the decoded body and the trailer fields.
fn describe(req: &httparse::Request<'_, '_>, body: &[u8], trailers: &Fields) -> String {
    let mut headers: Vec<(String, String)> = req
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), show(h.value)))
        .filter(|(n, _)| !IGNORED.contains(&n.as_str()))
        .collect();
    headers.sort_by(|a, b| a.0.cmp(&b.0));
    let mut text = format!("{} {}", req.method.unwrap_or(""), req.path.unwrap_or(""));
    if req.version == Some(0) {
        text.push_str(" (1.0)");
    }
    for (n, v) in headers {
        text.push_str(&format!("; {n}={v}"));
    }
    if !body.is_empty() {
        text.push_str(&format!("; body={}", show(body)));
    }
    for (n, v) in trailers {
        text.push_str(&format!("; trailer {n}={v}"));
    }
    text
}

/// Bytes that are not a whole request, as the corpus writes them: a whole head as
/// [`describe`] writes it and `(unfinished)` (how much of the body came depends on timing), or
/// the bytes themselves, marked `(partial)` (a head that never ended) or `(unparsable)`.
pub(crate) fn unfinished(buf: &[u8]) -> String {
    let mut fields = [httparse::EMPTY_HEADER; 512];
    let mut req = httparse::Request::new(&mut fields);
    let raw = |what: &str| {
        let mut text = show(&buf[..buf.len().min(300)]);
        if buf.len() > 300 {
            text.push('…');
        }
        format!("({what}) {text}")
    };
    match req.parse(buf) {
        Ok(httparse::Status::Complete(_)) => {
            format!("{}; (unfinished)", describe(&req, b"", &Vec::new()))
        }
        Ok(httparse::Status::Partial) => raw("partial"),
        Err(_) => raw("unparsable"),
    }
}

/// Trailer fields: (lowercase name, value).
type Fields = Vec<(String, String)>;

/// A chunked body at the start of `buf`: (data, trailer fields, bytes taken), or `None` when
/// it has not all arrived (a malformed one never completes; the endpoint waits, as a strict
/// server would, and the case shows it as partial).
fn dechunk(buf: &[u8]) -> Option<(Vec<u8>, Fields, usize)> {
    let mut data = Vec::new();
    let mut at = 0;
    loop {
        let line_end = find(&buf[at..], b"\r\n")? + at;
        let line = std::str::from_utf8(&buf[at..line_end]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        at = line_end + 2;
        if size == 0 {
            break;
        }
        if buf.len() < at + size + 2 {
            return None;
        }
        data.extend_from_slice(&buf[at..at + size]);
        at += size + 2;
    }
    let mut trailers = Vec::new();
    loop {
        let line_end = find(&buf[at..], b"\r\n")? + at;
        let line = &buf[at..line_end];
        at = line_end + 2;
        if line.is_empty() {
            return Some((data, trailers, at));
        }
        let text = String::from_utf8_lossy(line);
        let (n, v) = text.split_once(':').unwrap_or((&text, ""));
        trailers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// How a client's read of the responses ended.
enum End {
    /// As many responses as expected came.
    Enough,
    /// The proxy closed the connection.
    Closed,
    /// The proxy stayed silent for the idle bound.
    Silent,
    /// Bytes that are not a response.
    Junk,
}

/// How long a proxy may stay silent before the case counts as `timeout`.
const SILENCE: Duration = Duration::from_secs(3);
/// How long the client keeps listening after the expected responses, for ones nobody asked for
/// (and, meanwhile, for whatever is still on its way to the endpoint).
const AFTERWARDS: Duration = Duration::from_millis(150);

/// Sends `writes` to `addr` and reads responses until `expected` came (then briefly more), the
/// proxy closes, or it stays silent; the statuses as the corpus writes them.
pub(crate) async fn exchange(
    addr: std::net::SocketAddr,
    writes: &[Vec<u8>],
    expected: usize,
    head: bool,
) -> String {
    let Ok(Ok(mut s)) = timeout(Duration::from_secs(10), TcpStream::connect(addr)).await else {
        return "connect failed".into();
    };
    let mut buf = Vec::new();
    for (i, w) in writes.iter().enumerate() {
        if i > 0 {
            // A client that sent `Expect: 100-continue` waits a moment for the interim answer.
            let mut chunk = [0_u8; 4096];
            if let Ok(Ok(n)) = timeout(Duration::from_millis(300), s.read(&mut chunk)).await {
                buf.extend_from_slice(&chunk[..n]);
            }
        }
        // A proxy that answered early and closed may refuse the rest: that is its answer.
        if timeout(Duration::from_secs(10), s.write_all(w))
            .await
            .map_or(true, |r| r.is_err())
        {
            break;
        }
    }
    let mut statuses: Vec<String> = Vec::new();
    let mut at = 0;
    let mut deadline = Instant::now() + SILENCE;
    let mut enough_at: Option<Instant> = None;
    let end = loop {
        while let Some((status, len)) = parse_response(&buf[at..], head) {
            at += len;
            if !(100..200).contains(&status) || status == 101 {
                statuses.push(status.to_string());
            }
        }
        if statuses.len() >= expected && enough_at.is_none() {
            enough_at = Some(Instant::now() + AFTERWARDS);
        }
        if statuses.last().is_some_and(|s| s == "101") {
            break End::Enough;
        }
        if buf.len() > at && parse_response_head_invalid(&buf[at..]) {
            break End::Junk;
        }
        let limit = enough_at.map_or(deadline, |e| e.min(deadline));
        let mut chunk = [0_u8; 16384];
        match timeout_at(limit, s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                if let Some((status, _)) = parse_response_at_close(&buf[at..], head) {
                    statuses.push(status.to_string());
                }
                break End::Closed;
            }
            Ok(Ok(n)) => {
                buf.extend_from_slice(&chunk[..n]);
                deadline = Instant::now() + SILENCE;
            }
            Err(_) if enough_at.is_some() => break End::Enough,
            Err(_) => break End::Silent,
        }
    };
    let enough = statuses.len() >= expected;
    match end {
        End::Enough => {}
        End::Closed if !enough => statuses.push("closed".into()),
        End::Closed => {}
        End::Silent => statuses.push("timeout".into()),
        End::Junk => statuses.push("junk".into()),
    }
    statuses.join(" ")
}

/// A whole response at the start of `buf`: (status, bytes taken); `None` for one still coming
/// (or whose body runs to the close).
fn parse_response(buf: &[u8], head: bool) -> Option<(u16, usize)> {
    let mut fields = [httparse::EMPTY_HEADER; 128];
    let mut resp = httparse::Response::new(&mut fields);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return None,
    };
    let status = resp.code?;
    if head || (100..200).contains(&status) || status == 204 || status == 304 {
        return Some((status, head_len));
    }
    let mut length = None;
    let mut chunked = false;
    for h in resp.headers.iter() {
        let value = String::from_utf8_lossy(h.value).to_ascii_lowercase();
        match h.name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.contains("chunked"),
            _ => {}
        }
    }
    if chunked {
        let (_, _, n) = dechunk(&buf[head_len..])?;
        return Some((status, head_len + n));
    }
    match length {
        Some(n) if buf.len() >= head_len + n => Some((status, head_len + n)),
        Some(_) => None,
        None => None, // to the close
    }
}

/// At the close: a response whose head came (its body ran to the close, or was cut).
fn parse_response_at_close(buf: &[u8], _head: bool) -> Option<(u16, usize)> {
    let mut fields = [httparse::EMPTY_HEADER; 128];
    let mut resp = httparse::Response::new(&mut fields);
    match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => Some((resp.code?, n)),
        _ => None,
    }
}

fn parse_response_head_invalid(buf: &[u8]) -> bool {
    let mut fields = [httparse::EMPTY_HEADER; 128];
    httparse::Response::new(&mut fields).parse(buf).is_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalised_requests() {
        let bytes = b"POST /a HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 1\r\nTransfer-Encoding: chunked\r\n\r\n3;e=1\r\nabc\r\n0\r\nT: v\r\n\r\nGET";
        let Parsed::Request { text, len, .. } = parse_request(bytes) else {
            panic!("a whole request");
        };
        assert_eq!(text, "POST /a; host=x; body=abc; trailer t=v");
        assert_eq!(len, bytes.len() - 3);
        assert!(matches!(
            parse_request(b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nab"),
            Parsed::Incomplete { .. }
        ));
    }
}
