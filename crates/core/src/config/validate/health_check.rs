//! `[listener.group.health_check]` (docs/design.md §5): protocol, interval and timeouts (never above the
//! interval), thresholds, and the keys of HTTP checks.

use std::collections::BTreeMap;
use std::time::Duration;

use super::fields::{choice, only_for, status_set};
use crate::config::document::{Ctx, Table, format_duration, quote};
use crate::config::model::*;
use crate::config::{syntax, wire};

const CHECK_KEYS: &[&str] = &[
    "protocol",
    "port",
    "interval",
    "timeout",
    "connect_timeout",
    "read_timeout",
    "healthy_threshold",
    "unhealthy_threshold",
    "method",
    "path",
    "host",
    "headers",
    "body",
    "expect_status",
    "expect_headers",
    "expect_body",
    "id_header",
    "essential",
    "explicit",
    // L4 checks that talk.
    "send",
    "expect",
];

/// Keys that only mean something when the check sends an HTTP request.
const CHECK_HTTP_KEYS: &[&str] = &[
    "method",
    "path",
    "host",
    "headers",
    "body",
    "expect_status",
    "expect_headers",
    "expect_body",
    "id_header",
    "explicit",
];

pub(super) fn health_check(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> Option<HealthCheck> {
    t.check_keys(ctx, CHECK_KEYS);
    let protocol = choice(
        ctx,
        t,
        "protocol",
        &[
            ("tcp", CheckProtocol::Tcp),
            ("http", CheckProtocol::Http),
            ("https", CheckProtocol::Https),
            ("udp", CheckProtocol::Udp),
        ],
    );
    // No protocol means tcp; an invalid one (already reported) leaves other keys unjudged.
    let unknown = protocol.is_none() && t.has("protocol");
    let is = |p: CheckProtocol| unknown || protocol.map_or(CheckProtocol::Tcp, |x| x.v) == p;
    let http = is(CheckProtocol::Http) || is(CheckProtocol::Https);
    let udp = is(CheckProtocol::Udp);
    // A check known to be udp (not merely possibly, with an unknown protocol).
    let sure_udp = protocol.is_some_and(|p| p.v == CheckProtocol::Udp);
    let (send, expect) = l4_exchange(ctx, t, is(CheckProtocol::Tcp) || udp, sure_udp);
    // Checks that read an answer have a read phase; a UDP check has no connect.
    let reads = http || udp || send.is_some() || expect.is_some();
    let read_timeout_ok = only_for(
        ctx,
        t,
        "read_timeout",
        reads && !sure_udp,
        "http/https health checks and tcp ones with send or expect (a udp check has \"timeout\" alone)",
    );
    let connect_timeout_ok = only_for(
        ctx,
        t,
        "connect_timeout",
        !sure_udp,
        "tcp/http/https health checks (a udp check has \"timeout\" alone)",
    );
    // With a tcp check, HTTP keys are reported and then not read.
    let mut http_ok = |key: &str| only_for(ctx, t, key, http, "http/https health checks");
    let allowed: Vec<&str> = CHECK_HTTP_KEYS
        .iter()
        .copied()
        .filter(|k| http_ok(k))
        .collect();
    let read = |key: &str| allowed.contains(&key);

    let port = t.port(ctx, "port").map(|p| p.v);
    let interval = interval(ctx, t);
    let (connect_timeout, read_timeout, timeout) = if connect_timeout_ok {
        check_timeouts(ctx, t, interval, reads && read_timeout_ok)
    } else {
        let d = interval.min(HealthCheck::DEFAULT_TIMEOUT);
        let d = single_timeout(ctx, t, "timeout", interval, d);
        (d, d, d)
    };
    let healthy_threshold = t
        .u32(ctx, "healthy_threshold", 1, None)
        .map_or(HealthCheck::DEFAULT_HEALTHY_THRESHOLD, |n| n.v);
    let unhealthy_threshold = t
        .u32(ctx, "unhealthy_threshold", 1, None)
        .map_or(HealthCheck::DEFAULT_UNHEALTHY_THRESHOLD, |n| n.v);
    let request = http_request(ctx, t, &allowed);
    let expected = http_expected(ctx, t, &allowed);
    let id_header = read("id_header") && t.bool(ctx, "id_header").unwrap_or(false);
    let essential = t.bool(ctx, "essential").unwrap_or(false);
    let explicit = read("explicit") && t.bool(ctx, "explicit").unwrap_or(false);

    Some(HealthCheck {
        protocol: protocol.map_or(CheckProtocol::default(), |p| p.v),
        port,
        interval,
        timeout,
        connect_timeout,
        read_timeout,
        healthy_threshold,
        unhealthy_threshold,
        method: request.method,
        path: request.path,
        host: request.host,
        headers: request.headers,
        body: request.body,
        expect_status: expected.status,
        expect_headers: expected.headers,
        expect_body: expected.body,
        id_header,
        essential,
        explicit,
        send,
        expect,
    })
}

/// `interval`: at least 1s.
fn interval(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> Duration {
    match t.positive_duration(ctx, "interval") {
        Some(d) if d.v < Duration::from_secs(1) => {
            let msg = format!(
                "interval {} is below the minimum of 1s",
                format_duration(d.v)
            );
            ctx.error(d.at, &t.path, msg);
            HealthCheck::DEFAULT_INTERVAL
        }
        Some(d) => d.v,
        None => HealthCheck::DEFAULT_INTERVAL,
    }
}

/// What an HTTP check sends.
struct HttpRequest {
    method: CheckMethod,
    path: String,
    host: Option<String>,
    headers: BTreeMap<String, String>,
    body: Option<String>,
}

/// `method`, `path`, `host`, `headers` and `body`, those of them `allowed` (an HTTP check's).
fn http_request(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, allowed: &[&str]) -> HttpRequest {
    let read = |key: &str| allowed.contains(&key);
    let mut method = CheckMethod::default();
    if read("method") {
        let methods = [
            ("GET", CheckMethod::Get),
            ("PUT", CheckMethod::Put),
            ("POST", CheckMethod::Post),
            ("DELETE", CheckMethod::Delete),
        ];
        method = choice(ctx, t, "method", &methods).map_or(method, |m| m.v);
    }
    let mut path = HealthCheck::DEFAULT_PATH.to_owned();
    if read("path")
        && let Some(p) = t.str(ctx, "path")
    {
        match wire::path(p.v) {
            Ok(_) => path = p.v.to_owned(),
            Err(e) => ctx.error(p.at, &t.path, format!("path {e}")),
        }
    }
    let host = if read("host") {
        t.nonempty_str(ctx, "host")
            .and_then(|h| match wire::host(h.v) {
                Ok(_) => Some(h.v.to_owned()),
                Err(e) => {
                    ctx.error(h.at, &t.path, format!("host {e}"));
                    None
                }
            })
    } else {
        None
    };
    let headers = if read("headers") {
        header_map(ctx, t, "headers", true)
    } else {
        BTreeMap::new()
    };
    let body = if read("body") {
        t.str(ctx, "body").map(|b| b.v.to_owned())
    } else {
        None
    };
    HttpRequest {
        method,
        path,
        host,
        headers,
        body,
    }
}

/// What an HTTP check expects back.
struct HttpExpected {
    status: StatusSet,
    headers: BTreeMap<String, String>,
    body: Option<String>,
}

/// `expect_status` (not empty), `expect_headers` and `expect_body`, those of them `allowed`.
fn http_expected(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, allowed: &[&str]) -> HttpExpected {
    let read = |key: &str| allowed.contains(&key);
    let ok = HealthCheck::DEFAULT_EXPECT_STATUS;
    let mut status = StatusSet(vec![ok..=ok]);
    if read("expect_status")
        && let Some(set) = status_set(ctx, t, "expect_status")
    {
        // Entries that did not parse were reported already; only a list written empty is.
        let written_empty = t
            .value("expect_status")
            .and_then(|v| v.get_ref().as_array())
            .is_some_and(|a| a.is_empty());
        if written_empty {
            let at = t.value_at("expect_status").unwrap_or(t.at);
            ctx.error(
                at,
                &t.path,
                "\"expect_status\" must list at least one status, like [200]",
            );
        } else if !set.is_empty() {
            status = set;
        }
    }
    let headers = if read("expect_headers") {
        header_map(ctx, t, "expect_headers", false)
    } else {
        BTreeMap::new()
    };
    let body = if read("expect_body") {
        t.str(ctx, "expect_body").map(|b| b.v.to_owned())
    } else {
        None
    };
    HttpExpected {
        status,
        headers,
        body,
    }
}

/// `send` and `expect` of tcp and udp checks (`allowed`), escapes decoded; a udp check
/// (`udp`) must send something.
fn l4_exchange(
    ctx: &mut Ctx<'_>,
    t: &Table<'_, '_>,
    allowed: bool,
    udp: bool,
) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let mut read = |key: &str| {
        if !only_for(ctx, t, key, allowed, "tcp/udp health checks") {
            return None;
        }
        let s = t.str(ctx, key)?;
        match syntax::unescape_bytes(s.v) {
            Ok(b) => Some(b),
            Err(e) => {
                ctx.error(s.at, &t.path, format!("{}: {e}", quote(key)));
                None
            }
        }
    };
    let send = read("send");
    let expect = read("expect");
    if udp && !t.has("send") {
        ctx.error(
            t.at,
            &t.path,
            "a udp health check sends a datagram and waits for the reply: set send = \"...\" \
             (escapes such as \\x00 and \\r\\n are allowed)",
        );
    }
    if let Some(s) = &send
        && s.is_empty()
        && !udp
    {
        let at = t.value_at("send").unwrap_or(t.at);
        ctx.error(
            at,
            &t.path,
            "\"send\" is empty: remove it, or give the bytes to write",
        );
    }
    (send, expect)
}

/// One health-check timeout `key`, which may not exceed `interval` (checks would overlap);
/// `default` when unset or wrong.
fn single_timeout(
    ctx: &mut Ctx<'_>,
    t: &Table<'_, '_>,
    key: &str,
    interval: Duration,
    default: Duration,
) -> Duration {
    match t.positive_duration(ctx, key) {
        Some(d) if d.v > interval => {
            let msg = format!(
                "{key} {} is above interval {}; checks would overlap",
                format_duration(d.v),
                format_duration(interval)
            );
            ctx.error(d.at, &t.path, msg);
            default
        }
        Some(d) => d.v,
        None => default,
    }
}

/// `timeout`, or `connect_timeout` + `read_timeout`; never above `interval`.
/// Returns (connect, read, whole check).
fn check_timeouts(
    ctx: &mut Ctx<'_>,
    t: &Table<'_, '_>,
    interval: Duration,
    http: bool,
) -> (Duration, Duration, Duration) {
    let default = interval.min(HealthCheck::DEFAULT_TIMEOUT);
    let split = t.has("connect_timeout") || (http && t.has("read_timeout"));
    if t.has("timeout") && split {
        for key in ["connect_timeout", "read_timeout"] {
            if let Some(at) = t.key_at(key) {
                let msg =
                    "set either \"timeout\" or \"connect_timeout\" and \"read_timeout\", not both";
                ctx.error(at, &t.path, msg);
            }
        }
        return (default, default, default);
    }
    if !split {
        let d = single_timeout(ctx, t, "timeout", interval, default);
        return (d, d, d);
    }
    if !http {
        // A tcp check only connects; read_timeout mirrors connect_timeout and is unused.
        let d = single_timeout(ctx, t, "connect_timeout", interval, default);
        return (d, d, d);
    }
    let connect = t.positive_duration(ctx, "connect_timeout");
    let read = t.positive_duration(ctx, "read_timeout");
    for (key, other) in [
        ("connect_timeout", "read_timeout"),
        ("read_timeout", "connect_timeout"),
    ] {
        if let (Some(at), false) = (t.key_at(key), t.has(other)) {
            let msg = format!(
                "{} needs {} too (or use \"timeout\" alone)",
                quote(key),
                quote(other)
            );
            ctx.error(at, &t.path, msg);
        }
    }
    match (connect, read) {
        (Some(c), Some(r)) if c.v + r.v > interval => {
            let msg = format!(
                "connect_timeout {} + read_timeout {} is above interval {}; checks would overlap",
                format_duration(c.v),
                format_duration(r.v),
                format_duration(interval)
            );
            ctx.error(c.at.max(r.at), &t.path, msg);
            (default, default, default)
        }
        (Some(c), Some(r)) => (c.v, r.v, c.v + r.v),
        _ => (default, default, default),
    }
}

/// A table of header name → value with valid names; values too when they are `sent` (an
/// expected value is only compared).
fn header_map(
    ctx: &mut Ctx<'_>,
    t: &Table<'_, '_>,
    key: &str,
    sent: bool,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, value) in t.string_map(ctx, key).unwrap_or_default() {
        let value_ok = match wire::header_value(value.v) {
            Err(e) if sent => {
                ctx.error(value.at, &t.path, format!("header {}: {e}", quote(name.v)));
                false
            }
            _ => true,
        };
        match wire::header_name(name.v) {
            Ok(_) if value_ok => {
                out.insert(name.v.to_owned(), value.v.to_owned());
            }
            Ok(_) => {}
            Err(e) => ctx.error(name.at, &t.path, e),
        }
    }
    out
}
