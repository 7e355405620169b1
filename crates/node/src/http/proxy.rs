//! One request through an HTTP listener (see the module doc of [`super`]): the listener looked
//! up, the request's head rewritten for the endpoints, then attempt, decide
//! ([`super::retry::next`]), act, until an answer goes back.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;

use gtd_core::balance::RequestKey;
use gtd_core::balance::errors::ErrorKind;
use gtd_core::config::{Listener, Measure};
use gtd_core::health::outlier::Answer;
use gtd_core::split::rules::{Match, RouteRequest};

use super::access::Line;
use super::answers::{bare, class, closing, failed, own};
use super::bodies::{DownBody, EndpointBody, Pooled, Relayed, RequestBody, tunnel, with_line};
use super::conn::{Conn, Exchange, Held, Slot};
use super::failure::Failure;
use super::headers::{
    UPGRADE, authority, forward_headers, refused, strip_hop_by_hop, wants_upgrade,
};
use super::retry::{Ended, Last, Next, Resend};
use super::state::HttpState;
use super::upstream::{Sending, Upstream};
use crate::Inner;
use crate::attempt::{Attempt, Attempts, Budget};
use crate::snapshot::ListenerState;
use crate::timers::{Busy, Pace};

/// An HTTP/2 request the h2 crate passes on that RFC 9113 calls malformed: a field value that
/// starts or ends with a space or tab (§8.2.1; HTTP/1's parser trims them), or userinfo in
/// `:authority` (§8.3.1). The rest of §8 (pseudo-headers, connection-specific fields, `te`,
/// content-length) the h2 crate checks itself (tests/http/h2_conformance.rs).
fn h2_malformed(req: &Request<Incoming>) -> bool {
    let padded = |v: &[u8]| {
        matches!(v.first(), Some(b' ' | b'\t')) || matches!(v.last(), Some(b' ' | b'\t'))
    };
    req.headers().values().any(|v| padded(v.as_bytes()))
        || req
            .uri()
            .authority()
            .is_some_and(|a| a.as_str().contains('@'))
}

/// The request as balancers and rules see it (borrowed, no allocation).
struct View<'a> {
    ip: IpAddr,
    uri: &'a Uri,
    headers: &'a HeaderMap,
}

impl RequestKey for View<'_> {
    fn remote_ip(&self) -> IpAddr {
        self.ip
    }

    fn request_uri(&self) -> Option<&str> {
        Some(
            self.uri
                .path_and_query()
                .map_or(self.uri.path(), |p| p.as_str()),
        )
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)?.to_str().ok()
    }

    fn cookie(&self, name: &str) -> Option<&str> {
        self.headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.trim_matches('"'))
    }
}

impl RouteRequest for View<'_> {
    fn host(&self) -> Option<&str> {
        match authority(self.uri) {
            Some(a) => Some(a),
            None => self.headers.get(header::HOST)?.to_str().ok(),
        }
    }

    fn path(&self) -> &str {
        self.uri.path()
    }

    fn header(&self, name: &str) -> Option<&str> {
        RequestKey::header(self, name)
    }
}

/// One request, up to its response head (the body follows as the client reads it). Listener
/// lookup and proxying are one async fn, the future hyper stores: nested async calls would
/// each move their (kilobytes of) state into the caller's when first polled. The attempts run
/// as a loop of attempt, decide ([`retry::next`]), act.
pub(super) async fn proxy(
    node: Arc<Inner>,
    conn: Arc<Conn>,
    req: Request<Incoming>,
    exchange: Exchange,
) -> Result<Response<DownBody>, h2::Error> {
    // A malformed HTTP/2 request is a stream error PROTOCOL_ERROR (RFC 9113 §8.1.1), never
    // forwarded: hyper resets the stream with the reason of this error.
    if req.version() == http::Version::HTTP_2 && h2_malformed(&req) {
        return Err(h2::Reason::PROTOCOL_ERROR.into());
    }
    let (listener, mut line) = begin(&node, &conn, &req);
    // The access log line follows the request (each of its calls below is one branch when the
    // log is off) and goes with the response body, or with this future if the client leaves.
    let mut held = None;
    let response = 'request: {
        // The listener on this port was removed or changed protocol by a reload: this request
        // is answered 503 and the connection shut down, so that a keep-alive client does not
        // get 503s for as long as it keeps the connection busy.
        let Some(l) = listener.as_deref() else {
            break 'request listener_gone(&conn, req.version());
        };
        line.listener(&l.cfg);
        let _busy = Busy::new(&conn.inflight);
        l.count_request(conn.place.as_ref());
        let http = l.http.as_deref().expect("looked up with http state");
        let cfg = &l.cfg;
        let (parts, body) = req.into_parts();
        let mut req = match Forward::of(http, &conn, parts) {
            Ok(req) => req,
            // A transfer coding gtd does not implement leaves the body's end unknown: the
            // connection cannot carry another request, so it closes (as nginx and HAProxy do).
            Err((status @ StatusCode::NOT_IMPLEMENTED, why)) => {
                break 'request closing(own(http, status, why));
            }
            Err((status, why)) => break 'request own(http, status, why),
        };
        let mut body = RequestBody::new(body, line.is_on());
        if line.is_on() {
            line.upload(body.upload());
        }
        // A small body is read whole first, so that a retry can send it again; the attempts,
        // and their clocks, start once it is in.
        if body.small()
            && let Err(failure) = Box::pin(body.read_whole(cfg.upstream_timeout)).await
        {
            break 'request failed(http, l, Last::Failed(failure));
        }
        // A place on the client connection (HTTP/2 only: an HTTP/1 connection never has two
        // exchanges at once) and a descriptor for the endpoint connection, kept until the
        // response body ends (see `server::Slot`, `crate::descriptors`).
        let slot = if conn.h2.load(std::sync::atomic::Ordering::Relaxed) {
            let Some(slot) = Slot::take(&conn, cfg.upstream_timeout).await else {
                break 'request own(http, StatusCode::SERVICE_UNAVAILABLE, TOO_MANY_WAITING);
            };
            Some(slot)
        } else {
            None
        };
        let Some(fds) = l.fds.take(1) else {
            l.refused_files();
            break 'request failed(http, l, Last::Failed(Failure::Exhausted));
        };
        held = Some(Held::new(slot, fds));
        // One clock read per attempt and one per response: `now` is when this attempt is
        // decided and sent.
        let mut now = Instant::now();
        // `reuse = "safe"`: a client's first request goes on an endpoint connection of its own,
        // and only a request that may be sent again takes one another request left.
        let first = conn.first_request();
        let safe_to_reuse = !first && body.held() && super::methods::idempotent(&req.method);
        let mut router = Attempts::for_client(l, req.route, conn.peer(), conn.place.as_ref());
        let mut budget = Budget::new(cfg, now);
        let Some(mut attempt) = req.first(http, &conn, &mut router, now) else {
            break 'request failed(http, l, Last::Nothing);
        };
        loop {
            let retry = budget.spend();
            if retry {
                l.metrics.retries.increment(1);
            }
            let Some(up) = l.groups[attempt.group].upstream.as_deref() else {
                break 'request failed(http, l, Last::Nothing);
            };
            let index = attempt.pick.index();
            line.attempt(attempt.group, index, retry);
            let sent_at = now;
            // An HTTP/1.0 request without a host: the endpoint's address, as nginx's default
            // `proxy_set_header Host $proxy_host` gives it (the request goes on as HTTP/1.1).
            if req.hostless
                && let Ok(h) = HeaderValue::from_str(&attempt.pick.address().text)
            {
                req.headers.insert(header::HOST, h);
            }
            let sending = Sending {
                method: &req.method,
                uri: &req.uri,
                headers: &mut req.headers,
                keep_headers: budget.room_for_another(),
                safe_to_reuse,
                body: &mut body,
                upgrade: req.upgrade.is_some(),
                timeout: cfg.upstream_timeout,
                sent_at,
                bytes_up: &l.metrics.bytes_up,
            };
            let result = up.request(index, sending).await;
            now = Instant::now();
            if req.hostless {
                // That address was for this endpoint alone: a retry's hash keys must not see it.
                req.headers.remove(header::HOST);
            }
            let elapsed = now.duration_since(sent_at);
            let resend = Resend::new(&req.method, cfg.retry_non_idempotent, body.replayable());
            let view = req.view(conn.peer());
            let mut decide =
                |ended| super::retry::next(ended, resend, &budget, now, || router.next(&view, now));
            let (response, pooled) = match result {
                Ok(answer) => answer,
                Err(failure) => {
                    // The attempt's pick goes before the next is chosen.
                    unanswered(l, attempt, failure, elapsed, now);
                    match decide(Ended::Failed(failure)) {
                        Next::Retry { to } => attempt = to,
                        Next::GiveUp(last) => break 'request failed(http, l, last),
                        Next::Respond => break 'request failed(http, l, Last::Failed(failure)),
                    }
                    continue;
                }
            };
            line.upstream(elapsed);
            let unhealthy = answered(l, up, &attempt, &response, elapsed, now);
            match decide(Ended::Answered { unhealthy }) {
                Next::Retry { to } => {
                    discard(cfg, &attempt, response, pooled);
                    attempt = to;
                }
                Next::Respond => {
                    break 'request pass_on(
                        http, l, &conn, &mut req, attempt, response, pooled, sent_at,
                    );
                }
                Next::GiveUp(last) => break 'request failed(http, l, last),
            }
        }
    };
    Ok(finish(response, line, held, exchange))
}

/// The response as it goes to the client: its body holds what the exchange keeps until it
/// ends (the endpoint connection's place and descriptor, the exchange's count) and the access
/// log line. The line goes into the body in place (not by rebuilding the response, a move of
/// a few hundred bytes per request), and only when it travels at all.
#[inline]
fn finish(
    mut response: Response<DownBody>,
    mut line: Line,
    held: Option<Held>,
    exchange: Exchange,
) -> Response<DownBody> {
    if let Some(held) = held {
        line.hold(held);
    }
    if line.travels() {
        with_line(&mut response, line);
    }
    response.body_mut().ends(exchange);
    response
}

/// The HTTP listener on the connection's port as the running snapshot has it (`None` when a
/// reload removed it or changed its protocol), and the request's access log line (off when
/// the log is).
fn begin(node: &Inner, conn: &Conn, req: &Request<Incoming>) -> (Option<Arc<ListenerState>>, Line) {
    let snap = node.snapshot.load();
    let l = snap
        .listener_on(conn.port, false)
        .filter(|l| l.http.is_some())
        .cloned();
    let line = match snap.access.as_ref() {
        Some(log) => Line::begin(log, conn.client, conn.place, req),
        None => Line::off(),
    };
    (l, line)
}

/// The answer to a request whose listener is gone: 503, and the connection told to shut
/// down. HTTP/1 says so in the answer (HTTP/2 has its GOAWAY), so that the client sends no
/// other request on a connection about to close.
fn listener_gone(conn: &Conn, version: http::Version) -> Response<DownBody> {
    conn.listener_gone.notify_one();
    let mut gone = bare(StatusCode::SERVICE_UNAVAILABLE, "no such listener\n");
    if version < http::Version::HTTP_2 {
        gone.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    gone
}

/// An unhealthy answer the client will not see, as a retry follows: its connection goes back
/// to the pool when nothing of its body is left to read.
fn discard(
    cfg: &Listener,
    attempt: &Attempt,
    response: Response<EndpointBody>,
    pooled: Option<Pooled>,
) {
    if hyper::body::Body::is_end_stream(response.body())
        && let Some(pooled) = pooled
    {
        pooled.release();
    }
    tracing::debug!(listener = %cfg.name, endpoint = %attempt.pick.address(), status = %response.status(), "unhealthy status; retrying");
}

/// The endpoint's answer goes to the client: as a response, or as the switch to the protocol
/// the request asked for.
#[allow(clippy::too_many_arguments)]
fn pass_on(
    http: &HttpState,
    l: &ListenerState,
    conn: &Conn,
    req: &mut Forward,
    attempt: Attempt,
    response: Response<EndpointBody>,
    pooled: Option<Pooled>,
    sent_at: Instant,
) -> Response<DownBody> {
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        respond(http, l, attempt, req.sticky, response, pooled, sent_at)
    } else if let Some((_, client)) = req.upgrade.take() {
        switch(l, conn, attempt, response, pooled, client)
    } else {
        own(http, StatusCode::BAD_GATEWAY, SWITCHED_UNASKED)
    }
}

const TOO_MANY_WAITING: &str = "too many requests of this connection wait for an endpoint\n";
const SWITCHED_UNASKED: &str = "the endpoint switched protocols unasked\n";

/// The request as it goes to the endpoints: its head rewritten for them (see the module doc),
/// the forwarding rule it matched, the endpoint its sticky cookie names, and the upgrade it
/// asks for (the protocol, and hyper's handle on the client's connection).
struct Forward {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    /// An HTTP/1.0 request naming no host: each attempt names its endpoint.
    hostless: bool,
    route: Option<usize>,
    sticky: Option<(usize, usize)>,
    upgrade: Option<(HeaderValue, OnUpgrade)>,
}

impl Forward {
    /// The request of `parts` on its way to the endpoints, or the status and text of gtd's own
    /// answer (CONNECT, a request refused for its head, no route).
    fn of(
        http: &HttpState,
        conn: &Conn,
        mut parts: http::request::Parts,
    ) -> Result<Forward, (StatusCode, &'static str)> {
        if parts.method == Method::CONNECT {
            return Err((StatusCode::METHOD_NOT_ALLOWED, "CONNECT is not proxied\n"));
        }
        if let Some(refusal) = refused(&parts) {
            return Err(refusal);
        }
        let view = View {
            ip: conn.peer(),
            uri: &parts.uri,
            headers: &parts.headers,
        };
        let route = match http.rules.find(&view) {
            Match::Default => None,
            Match::Route(i) => Some(i),
            Match::NotFound => {
                return Err((StatusCode::NOT_FOUND, "no route for this path\n"));
            }
        };
        let sticky = http
            .sticky
            .as_ref()
            .and_then(|s| view.cookie(&s.table.cookie).and_then(|v| s.table.target(v)));
        let upgrade = wants_upgrade(&parts)
            .and_then(|proto| Some((proto, parts.extensions.remove::<OnUpgrade>()?)));
        let hostless = !forward_headers(
            &mut parts.headers,
            &parts.uri,
            parts.version,
            &conn.xff,
            conn.https,
        );
        if let Some((proto, _)) = &upgrade {
            // A tunnel has no trailers: the TE kept above goes, with its `Connection: te`.
            parts.headers.remove(header::TE);
            parts.headers.insert(header::CONNECTION, UPGRADE.clone());
            parts.headers.insert(header::UPGRADE, proto.clone());
        }
        Ok(Forward {
            method: parts.method,
            uri: parts.uri,
            headers: parts.headers,
            hostless,
            route,
            sticky,
            upgrade,
        })
    }

    /// The request as balancers see it.
    fn view(&self, ip: IpAddr) -> View<'_> {
        View {
            ip,
            uri: &self.uri,
            headers: &self.headers,
        }
    }

    /// The first attempt: the endpoint the sticky cookie names when it may serve, else the
    /// walk's first.
    fn first(
        &self,
        http: &HttpState,
        conn: &Conn,
        router: &mut Attempts<'_>,
        now: Instant,
    ) -> Option<Attempt> {
        let bound = self.sticky.and_then(|(g, e)| router.bound(g, e, now));
        if bound.is_some() {
            http.sticky_hits.increment(1);
        }
        bound.or_else(|| router.next(&self.view(conn.peer()), now))
    }
}

/// The endpoint answered `response` to `attempt` after `elapsed`: timed, counted, fed to
/// outlier detection and passive health. True when its status is one of `unhealthy_status`.
fn answered(
    l: &ListenerState,
    up: &Upstream,
    attempt: &Attempt,
    response: &Response<EndpointBody>,
    elapsed: Duration,
    now: Instant,
) -> bool {
    up.response_seconds.record(elapsed.as_secs_f64());
    attempt.pick.record_timing(Measure::Header, elapsed);
    if let Some(name) = &up.feedback
        && let Some(value) = response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
    {
        attempt.pick.record_feedback(value);
    }
    let status = response.status();
    let endpoint = &l.groups[attempt.group].endpoints[attempt.pick.index()];
    endpoint.requests[class(status)].increment(1);
    if status.is_server_error() {
        attempt.pick.error(ErrorKind::Status5xx, now);
    }
    l.answered(
        attempt.group,
        &attempt.pick,
        Answer::of_status(status.as_u16()),
        now,
    );
    let unhealthy = l.cfg.unhealthy_status.contains(status.as_u16());
    if unhealthy {
        l.attempt_failed(attempt.group, &attempt.pick, &status);
    } else {
        l.attempt_succeeded(attempt.group, &attempt.pick, now);
    }
    unhealthy
}

/// `attempt` got no answer to pass on: the endpoint's failure (refused, timed out, broken) is
/// counted and fed to passive health and outlier detection; one that is nobody's or the
/// client's (out of open files, the upload broke off or stalled, a response head gtd does not
/// pass on, a target that cannot be made) is only logged. The pick is released on return.
fn unanswered(
    l: &ListenerState,
    attempt: Attempt,
    failure: Failure,
    elapsed: Duration,
    now: Instant,
) {
    let endpoint = attempt.pick.address();
    match failure {
        Failure::BadTarget => {}
        Failure::Exhausted
        | Failure::ClientGone
        | Failure::ClientStalled
        | Failure::BadResponse => {
            // The endpoint's doing, yet no health matter (see Failure::BadResponse): the
            // operator hears of it, at most every 10 s, as nginx logs "upstream sent too big
            // header".
            static BAD_HEADS: Pace = Pace::new();
            if failure == Failure::BadResponse && BAD_HEADS.due() {
                tracing::warn!(listener = %l.cfg.name, %endpoint, "the endpoint sent a response head gtd does not pass on (invalid, or over 64 KiB or 100 fields); the client got 502");
            } else {
                tracing::debug!(listener = %l.cfg.name, %endpoint, %failure, "attempt ended");
            }
        }
        Failure::Connect(_) | Failure::Timeout | Failure::Broken => {
            tracing::debug!(listener = %l.cfg.name, %endpoint, ?failure, "attempt failed");
            if failure == Failure::Timeout {
                attempt.pick.record_timing(Measure::Header, elapsed);
            }
            if matches!(failure, Failure::Connect(_)) {
                l.groups[attempt.group].endpoints[attempt.pick.index()]
                    .failures
                    .increment(1);
                attempt.pick.error(ErrorKind::Connect, now);
            } else if failure == Failure::Timeout {
                attempt.pick.error(ErrorKind::Timeout, now);
            }
            l.attempt_failed(attempt.group, &attempt.pick, &failure);
            // No answer at all (refused, timed out, broken): a gateway failure.
            l.answered(attempt.group, &attempt.pick, Answer::GatewayFailure, now);
        }
    }
}

/// The endpoint's response on its way to the client; a sticky listener sets its cookie when the
/// request did not carry the one naming this endpoint.
fn respond(
    http: &HttpState,
    l: &ListenerState,
    attempt: Attempt,
    sticky: Option<(usize, usize)>,
    response: Response<EndpointBody>,
    pooled: Option<Pooled>,
    sent_at: Instant,
) -> Response<DownBody> {
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let index = attempt.pick.index();
    if let Some(s) = &http.sticky
        && sticky != Some((attempt.group, index))
    {
        parts.headers.append(
            header::SET_COOKIE,
            s.set_cookie[attempt.group][index].clone(),
        );
    }
    let body = Relayed::new(
        body,
        pooled,
        attempt.pick,
        sent_at,
        l.metrics.bytes_down.clone(),
    );
    Response::from_parts(parts, DownBody::relayed(body))
}

/// The endpoint agreed to switch protocols: the client gets its `101` (with the endpoint's
/// `Upgrade`), and the connection's task relays both upgraded connections once hyper hands them
/// over (see the module doc).
fn switch(
    l: &ListenerState,
    conn: &Conn,
    attempt: Attempt,
    mut response: Response<EndpointBody>,
    pooled: Option<Pooled>,
    client: OnUpgrade,
) -> Response<DownBody> {
    let upstream = hyper::upgrade::on(&mut response);
    let (mut parts, _) = response.into_parts();
    let proto = parts.headers.get(header::UPGRADE).cloned();
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.insert(header::CONNECTION, UPGRADE.clone());
    if let Some(proto) = proto {
        parts.headers.insert(header::UPGRADE, proto);
    }
    let relay = tunnel(
        client,
        upstream,
        pooled,
        attempt.pick,
        l.cfg.idle_timeout,
        [l.metrics.bytes_up.clone(), l.metrics.bytes_down.clone()],
    );
    conn.upgrade(Box::pin(relay));
    Response::from_parts(parts, DownBody::empty())
}

#[cfg(test)]
mod tests {
    use super::super::headers::tests::map;
    use super::*;

    #[test]
    fn cookies_are_found_without_copies() {
        let uri: Uri = "/x?y=1".parse().unwrap();
        let headers = map(&[("cookie", "a=1; gtd_route=\"abc\""), ("cookie", "b=2")]);
        let view = View {
            ip: "192.0.2.1".parse().unwrap(),
            uri: &uri,
            headers: &headers,
        };
        assert_eq!(view.cookie("gtd_route"), Some("abc"));
        assert_eq!(view.cookie("b"), Some("2"));
        assert_eq!(view.cookie("c"), None);
        assert_eq!(view.request_uri(), Some("/x?y=1"));
    }
}
