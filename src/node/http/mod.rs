//! HTTP and HTTPS listeners: hyper serves HTTP/1.1 and HTTP/2 (h2c prior knowledge on
//! cleartext, ALPN on TLS); every request gets its own decision and is proxied to an endpoint.
//!
//! One request, in order:
//! 1. the listener is looked up in the current snapshot (so a reload applies to the next request
//!    of a keep-alive connection too);
//! 2. the forwarding rules pick a route (or 404), see [`crate::split::rules`];
//! 3. a valid sticky cookie names a (group, endpoint) that is eligible and may serve: the first
//!    attempt goes there;
//! 4. otherwise, and for every retry, [`Attempts`] walks the route's cascade: the chosen group's
//!    balancer, the group's other usable endpoints, then the highest-priority eligible group not
//!    yet tried;
//! 5. connect errors, timeouts and `unhealthy_status` answers are passive failures
//!    ([`crate::balance::Pick::failure`]); a retry happens while `retry`, `tries` and
//!    `retry_timeout` allow, the body can be sent again (there is none, or no byte of it left),
//!    and the method is idempotent, nothing was sent (connect error) or `retry_non_idempotent`;
//!    A client whose request body breaks off or stops coming for `upstream_timeout` (while the
//!    endpoint waits for it) fails no endpoint: the request ends there with 400 or 408;
//! 6. the last attempt's unhealthy answer goes back as is; no answer at all gives 502 (504 when
//!    the last attempt timed out); no route gives 503.
//!
//! Request headers towards the endpoint: hop-by-hop headers removed (Connection and the headers
//! it names, Keep-Alive, Proxy-*, TE bar its `trailers` (gtd forwards trailer fields both ways),
//! Transfer-Encoding, Upgrade; Expect too, since gtd answers `100 Continue` itself),
//! `X-Forwarded-For` appended (one line, comma-separated, as nginx's
//! `$proxy_add_x_forwarded_for`), `X-Forwarded-Proto` and `X-Forwarded-Host` set; the client's
//! Host is passed through (from `:authority` for HTTP/2 clients). Hash keys (`$http_NAME`,
//! `$cookie_NAME`) read the request as it is forwarded. Endpoints are spoken to in HTTP/1.1.
//!
//! Upgrades (WebSocket and any other `Upgrade` protocol, HTTP/1.1 clients): a request with
//! `Connection: upgrade` keeps its `Upgrade` header on the way to the endpoint; when the endpoint
//! answers `101 Switching Protocols`, gtd answers the client the same and then relays bytes both
//! ways between the two connections until both sides close or nothing moves for the listener's
//! `idle_timeout`. The tunnel counts as the client connection's (`max_connections`, drain) and
//! holds its endpoint pick (`least_conn` counts it) until it ends. Any other answer goes back as
//! an ordinary response.

pub(crate) mod access;
pub(crate) mod answers;
pub mod bodies;
pub mod client;
pub(crate) mod failure;
pub mod h1;
mod headers;
pub(crate) mod pool;
mod server;

pub(crate) use server::serve;

use self::access::Line;
use self::answers::{Last, bare, class, failed, own};
use self::headers::{
    UPGRADE, authority, forward_headers, refused, strip_hop_by_hop, wants_upgrade,
};
use self::server::{Conn, Held, Slot};
pub mod upstream;

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use metrics::Counter;

use tokio_rustls::TlsAcceptor;

use crate::balance::RequestKey;
use crate::config::{Listener, Measure, Protocol};
use crate::health::outlier::Answer;
use crate::split::StickyTable;
use crate::split::rules::{Match, RouteRequest, Rules};

use self::bodies::Pooled;
use self::bodies::{DownBody, EndpointBody, Relayed, RequestBody, tunnel};
use self::failure::Failure;
use self::upstream::Sending;
use crate::node::Inner;
use crate::node::attempt::{Attempt, Attempts, Budget};
use crate::node::snapshot::ListenerState;
use crate::node::telemetry::{self as m, Registry, code_classes};
use crate::node::timers::{Busy, Pace};
use crate::node::tls;

/// The HTTP side of a listener's runtime state, built with the snapshot.
pub struct HttpState {
    /// The forwarding rules.
    pub rules: Rules,
    /// Sticky cookies, when `sticky` is set.
    pub sticky: Option<StickyCookies>,
    tls: Option<TlsAcceptor>,
    server: auto::Builder<TokioExecutor>,
    /// gtd's own answers (404, 502, 503, 504) by code class (1xx..5xx).
    own: [Counter; 5],
    sticky_hits: Counter,
}

impl std::fmt::Debug for HttpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpState")
            .field("rules", &self.rules)
            .field("sticky", &self.sticky)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// `sticky = { cookie }`: the pure table (values, and what a value names) with the
/// `Set-Cookie` header each endpoint's responses carry.
#[derive(Debug)]
pub struct StickyCookies {
    /// The cookie's values and what they name.
    pub table: StickyTable,
    /// The `Set-Cookie` value per group and endpoint (config order).
    set_cookie: Vec<Vec<HeaderValue>>,
}

impl StickyCookies {
    fn build(l: &Listener) -> Option<StickyCookies> {
        let table = StickyTable::of(l)?;
        let secure = if l.protocol == Protocol::Https {
            "; Secure"
        } else {
            ""
        };
        let cookie = &table.cookie;
        let set_cookie = table
            .values()
            .iter()
            .map(|group| {
                group
                    .iter()
                    .map(|value| {
                        HeaderValue::try_from(format!(
                            "{cookie}={value}; Path=/; HttpOnly; SameSite=Lax{secure}"
                        ))
                        .expect("validated cookie name and hex value")
                    })
                    .collect()
            })
            .collect();
        Some(StickyCookies { table, set_cookie })
    }
}

impl HttpState {
    /// Builds the HTTP state of listener `l` (certificates are read here).
    pub(crate) fn build(l: &Listener, registry: &Registry) -> Result<HttpState, String> {
        let name = l.name.as_str();
        let tls = match (&l.tls, l.protocol) {
            (Some(t), Protocol::Https) => Some(TlsAcceptor::from(tls::server_config(t)?)),
            (None, Protocol::Https) => return Err("https listener without tls".into()),
            _ => None,
        };
        let mut server = auto::Builder::new(TokioExecutor::new());
        server
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(l.header_timeout)
            // At most 100 request headers: hyper's default, left unset because setting it
            // moves each request's parse arrays from the stack to the heap.
            .max_buf_size(64 * 1024)
            // Head and body leave in one flat buffer (one copy of small bodies instead of a
            // queue of buffers for writev): about 4% more requests per second, measured.
            .writev(false);
        server
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(100)
            // The same 64 KiB of request headers as HTTP/1.1 (`max_buf_size`): a request that
            // passes on one protocol passes on the other.
            .max_header_list_size(64 * 1024)
            .max_pending_accept_reset_streams(20)
            .max_local_error_reset_streams(1024)
            .initial_stream_window_size(64 * 1024)
            .initial_connection_window_size(1024 * 1024);
        Ok(HttpState {
            rules: Rules::new(&l.routes),
            sticky: StickyCookies::build(l),
            tls,
            server,
            own: code_classes(registry, &[name, "", ""]),
            sticky_hits: registry.counter(&m::STICKY_HITS_TOTAL, &[name]),
        })
    }
}

// ------------------------------------------------------------------------------- one request

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

/// Methods a request may be sent again with (RFC 9110 9.2.2).
pub(crate) fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::PUT | Method::DELETE | Method::OPTIONS | Method::TRACE
    )
}

/// One request, up to its response head (the body follows as the client reads it). Listener
/// lookup and proxying are one async fn, the future hyper stores: nested async calls would
/// each move their (kilobytes of) state into the caller's when first polled.
async fn proxy(
    node: Arc<Inner>,
    conn: Arc<Conn>,
    req: Request<Incoming>,
) -> Result<Response<DownBody>, Infallible> {
    let (listener, mut line) = {
        let snap = node.snapshot.load();
        let l = snap
            .listener_on(conn.port, false)
            .filter(|l| l.http.is_some())
            .cloned();
        let line = match &snap.access {
            Some(log) => log.begin(conn.client, conn.place, &req),
            None => Line::off(),
        };
        (l, line)
    };
    // The access log line follows the request (each of its calls below is one branch when the
    // log is off) and goes with the response body, or with this future if the client leaves.
    let mut held = None;
    let response = 'request: {
        // The listener on this port was removed or changed protocol by a reload.
        let Some(l) = listener.as_deref() else {
            break 'request bare(StatusCode::SERVICE_UNAVAILABLE, "no such listener\n");
        };
        line.listener(&l.cfg);
        let _busy = Busy::new(&conn.inflight);
        let conn_arc = &conn;
        let conn = &*conn;
        l.count_request(conn.place.as_ref());
        let http = l.http.as_ref().expect("looked up with http state");
        let cfg = &l.cfg;
        let (mut parts, body) = req.into_parts();
        if parts.method == Method::CONNECT {
            break 'request own(
                http,
                StatusCode::METHOD_NOT_ALLOWED,
                "CONNECT is not proxied\n",
            );
        }
        if let Some((status, why)) = refused(&parts) {
            break 'request own(http, status, why);
        }
        let route = match http.rules.find(&View {
            ip: conn.peer,
            uri: &parts.uri,
            headers: &parts.headers,
        }) {
            Match::Default => None,
            Match::Route(i) => Some(i),
            Match::NotFound => {
                break 'request own(http, StatusCode::NOT_FOUND, "no route for this path\n");
            }
        };
        let sticky = http.sticky.as_ref().and_then(|s| {
            let view = View {
                ip: conn.peer,
                uri: &parts.uri,
                headers: &parts.headers,
            };
            view.cookie(&s.table.cookie).and_then(|v| s.table.target(v))
        });
        // An upgrade (WebSocket): the protocol asked for, and hyper's handle on the connection.
        let mut upgrade = wants_upgrade(&parts)
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
        // response body ends (see `server::Slot`, `crate::node::descriptors`).
        let slot = if conn.h2.load(std::sync::atomic::Ordering::Relaxed) {
            let Some(slot) = Slot::take(conn_arc, cfg.upstream_timeout).await else {
                break 'request own(
                    http,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many requests of this connection wait for an endpoint\n",
                );
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
        let started = Instant::now();
        // One clock read per attempt and one per response: `now` is when this attempt is
        // decided and sent.
        let mut now = started;
        let mut router = Attempts::for_client(l, route, conn.peer, conn.place.as_ref());
        let mut budget = Budget::new(cfg, started);
        let method = parts.method;
        let uri = parts.uri;
        let mut headers = parts.headers;
        // The listener's budget, and HTTP's own rule: the body can be sent again, and the
        // method is idempotent or nothing was sent (or `retry_non_idempotent`).
        let retry_ok = |sent: bool, budget: &Budget, now: Instant, body: &RequestBody| {
            budget.allows(now)
                && body.replayable()
                && (!sent || idempotent(&method) || cfg.retry_non_idempotent)
        };

        let mut last = Last::Nothing;
        let mut next: Option<Attempt> = None;
        loop {
            let attempt = match next.take() {
                Some(a) => a,
                None => {
                    let bound = match sticky {
                        Some((g, e)) if budget.made() == 0 => router.bound(g, e, now),
                        _ => None,
                    };
                    if bound.is_some() {
                        http.sticky_hits.increment(1);
                    }
                    let view = View {
                        ip: conn.peer,
                        uri: &uri,
                        headers: &headers,
                    };
                    match bound.or_else(|| router.next(&view, now)) {
                        Some(a) => a,
                        None => break,
                    }
                }
            };
            let retry = budget.spend();
            if retry {
                l.metrics.retries.increment(1);
            }
            let group = &l.groups[attempt.group];
            let Some(up) = group.upstream.as_ref() else {
                break;
            };
            let index = attempt.pick.index();
            line.attempt(attempt.group, index, retry);
            let sent_at = now;
            // An HTTP/1.0 request without a host: the endpoint's address, as nginx's default
            // `proxy_set_header Host $proxy_host` gives it (the request goes on as HTTP/1.1).
            if hostless && let Ok(h) = HeaderValue::from_str(&attempt.pick.address().text) {
                headers.insert(header::HOST, h);
            }
            let sending = Sending {
                method: &method,
                uri: &uri,
                headers: &mut headers,
                keep_headers: budget.room_for_another(),
                body: &mut body,
                upgrade: upgrade.is_some(),
                timeout: cfg.upstream_timeout,
                sent_at,
                bytes_up: &l.metrics.bytes_up,
            };
            let result = up.request(index, sending).await;
            now = Instant::now();
            if hostless {
                // That endpoint's address was for it alone: hash keys of a retry must not see
                // it.
                headers.remove(header::HOST);
            }
            let elapsed = now.duration_since(sent_at);
            let endpoint = &group.endpoints[index];
            match result {
                Ok((response, pooled)) => {
                    up.response_seconds.record(elapsed.as_secs_f64());
                    line.upstream(elapsed);
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
                    endpoint.requests[class(status)].increment(1);
                    l.answered(
                        attempt.group,
                        &attempt.pick,
                        Answer::of_status(status.as_u16()),
                        now,
                    );
                    if cfg.unhealthy_status.contains(status.as_u16()) {
                        l.attempt_failed(attempt.group, &attempt.pick, &status);
                        if retry_ok(true, &budget, now, &body) {
                            let view = View {
                                ip: conn.peer,
                                uri: &uri,
                                headers: &headers,
                            };
                            if let Some(a) = router.next(&view, now) {
                                if hyper::body::Body::is_end_stream(response.body())
                                    && let Some(pooled) = pooled
                                {
                                    pooled.release();
                                }
                                tracing::debug!(listener = %cfg.name, endpoint = %attempt.pick.address(), %status, "unhealthy status; retrying");
                                next = Some(a);
                                continue;
                            }
                        }
                    } else {
                        l.attempt_succeeded(attempt.group, &attempt.pick, now);
                    }
                    if status == StatusCode::SWITCHING_PROTOCOLS {
                        break 'request match upgrade.take() {
                            Some((_, client)) => switch(l, conn, attempt, response, pooled, client),
                            None => own(
                                http,
                                StatusCode::BAD_GATEWAY,
                                "the endpoint switched protocols unasked\n",
                            ),
                        };
                    }
                    break 'request respond(http, l, attempt, sticky, response, pooled, sent_at);
                }
                // Out of open files, the client's upload broke off or stalled, or a response
                // head gtd does not pass on: not counted against the endpoint, and not retried.
                Err(Failure::BadTarget) => {
                    break 'request own(http, StatusCode::BAD_REQUEST, "bad request path\n");
                }
                Err(
                    failure @ (Failure::Exhausted
                    | Failure::ClientGone
                    | Failure::ClientStalled
                    | Failure::BadResponse),
                ) => {
                    // The endpoint's doing, yet no health matter (see Failure::BadResponse):
                    // the operator hears of it, at most every 10 s, as nginx logs "upstream
                    // sent too big header".
                    static BAD_HEADS: Pace = Pace::new();
                    if failure == Failure::BadResponse && BAD_HEADS.due() {
                        tracing::warn!(listener = %cfg.name, endpoint = %attempt.pick.address(), "the endpoint sent a response head gtd does not pass on (invalid, or over 64 KiB or 100 fields); the client got 502");
                    } else {
                        tracing::debug!(listener = %cfg.name, endpoint = %attempt.pick.address(), %failure, "attempt ended");
                    }
                    last = Last::Failed(failure);
                    break;
                }
                Err(failure) => {
                    tracing::debug!(listener = %cfg.name, endpoint = %attempt.pick.address(), ?failure, "attempt failed");
                    if failure == Failure::Timeout {
                        attempt.pick.record_timing(Measure::Header, elapsed);
                    }
                    if matches!(failure, Failure::Connect(_)) {
                        endpoint.failures.increment(1);
                    }
                    l.attempt_failed(attempt.group, &attempt.pick, &failure);
                    // No answer at all (refused, timed out, broken): a gateway failure.
                    l.answered(attempt.group, &attempt.pick, Answer::GatewayFailure, now);
                    drop(attempt);
                    last = Last::Failed(failure);
                    if !retry_ok(!matches!(failure, Failure::Connect(_)), &budget, now, &body) {
                        break;
                    }
                }
            }
        }
        failed(http, l, last)
    };
    // The line goes into the response's body in place (not by rebuilding the response, a
    // move of a few hundred bytes per request), and only when it travels at all.
    if let Some(held) = held {
        line.hold(held);
    }
    let mut response = response;
    if line.travels() {
        line.respond(&mut response);
    }
    Ok(response)
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
    if let Ok(mut slot) = conn.tunnel.lock() {
        *slot = Some(Box::pin(relay));
    }
    Response::from_parts(parts, DownBody::empty())
}

#[cfg(test)]
mod tests {
    use super::headers::tests::map;
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
