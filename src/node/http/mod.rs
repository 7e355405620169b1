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

pub mod client;
pub mod h1;
pub mod upstream;

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use metrics::Counter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use crate::balance::RequestKey;
use crate::config::{Listener, Measure, Protocol};
use crate::split::StickyTable;
use crate::split::rules::{Match, RouteRequest, Rules};

use self::client::Outgoing;
use self::upstream::{
    DownBody, EndpointBody, Failure, Pooled, Relayed, RequestBody, Upstream, tunnel,
};
use crate::node::Inner;
use crate::node::attempt::{Attempt, Attempts, Budget};
use crate::node::snapshot::ListenerState;
use crate::node::telemetry::{self as m, Registry};
use crate::node::timers::{Busy, First, HeadTimer, Moving, Pace, Watched, quiet};
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

/// `gtd_requests_total` handles for classes 1xx..5xx with these (listener, group, endpoint).
pub(crate) fn code_classes(registry: &Registry, labels: &[&str; 3]) -> [Counter; 5] {
    ["1xx", "2xx", "3xx", "4xx", "5xx"].map(|class| {
        registry.counter(
            &m::REQUESTS_TOTAL,
            &[labels[0], labels[1], labels[2], class],
        )
    })
}

fn class(status: StatusCode) -> usize {
    usize::from(status.as_u16() / 100).clamp(1, 5) - 1
}

/// What one connection's requests need to know about it (shared by them: one reference count
/// per request).
struct Conn {
    peer: IpAddr,
    port: u16,
    https: bool,
    /// The client's address as an X-Forwarded-For value, made once per connection.
    xff: HeaderValue,
    /// Where an upgraded request leaves its tunnel, for the connection's task to run once hyper
    /// hands the connection over.
    tunnel: Mutex<Option<Tunnel>>,
    /// Requests of this connection waiting for their response headers (an HTTP/2 connection has
    /// several): the connection is not idle meanwhile, however long the endpoint takes.
    inflight: AtomicU32,
    /// A request has reached gtd on this connection (see [`run`]).
    asked: AtomicBool,
    /// The connection's opening plus `header_timeout`: when the first byte, the TLS handshake
    /// and the first request head must be in.
    first_by: tokio::time::Instant,
}

/// The relay of an upgraded connection.
type Tunnel = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Conn {
    fn new(peer: IpAddr, port: u16, https: bool, first_by: tokio::time::Instant) -> Conn {
        let xff = HeaderValue::try_from(peer.to_string()).expect("an address is a header value");
        Conn {
            peer,
            port,
            https,
            xff,
            tunnel: Mutex::default(),
            inflight: AtomicU32::new(0),
            asked: AtomicBool::new(false),
            first_by,
        }
    }
}

/// Serves one accepted connection of an HTTP or HTTPS listener until it closes (or the node
/// stops: then in-flight requests finish and idle connections close).
pub(crate) async fn serve(
    node: &Arc<Inner>,
    l: &ListenerState,
    stream: TcpStream,
    peer: SocketAddr,
) {
    let Some(http) = l.http.as_ref() else { return };
    let _ = stream.set_nodelay(true);
    // hyper's protocol detection and rustls both wait for bytes without a timer: bound the wait
    // for the first one; from there the handshake timeout, HTTP/1's header_read_timeout (or
    // HTTP/2) take over.
    let first_bytes_by = tokio::time::Instant::now() + l.cfg.header_timeout;
    let conn = Arc::new(Conn::new(
        peer.ip().to_canonical(),
        l.cfg.port,
        l.cfg.protocol == Protocol::Https,
        first_bytes_by,
    ));
    let own_conn = Arc::clone(&conn);
    let service_node = Arc::clone(node);
    let service = hyper::service::service_fn(move |req| {
        // Here, not in `proxy`: HTTP/2 runs that in a task of its own, maybe after the watchdog.
        conn.asked.store(true, Ordering::Relaxed);
        proxy(Arc::clone(&service_node), Arc::clone(&conn), req)
    });
    let mut first = [0_u8; 1];
    match tokio::time::timeout_at(first_bytes_by, stream.peek(&mut first)).await {
        Ok(Ok(n)) if n > 0 => {}
        _ => return,
    }
    match &http.tls {
        // A TLS connection starts with a handshake record (22); a letter is a plaintext request,
        // which gets a 400 saying so, as nginx answers it, instead of a closed connection.
        Some(_) if first[0].is_ascii_alphabetic() => {
            http.own[class(StatusCode::BAD_REQUEST)].increment(1);
            let mut stream = stream;
            let _ = stream.write_all(PLAIN_TO_HTTPS).await;
            let _ = stream.shutdown().await;
            // Drain what the client sent (bounded) so closing does not reset the answer away.
            let mut sink = [0_u8; 4096];
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
            })
            .await;
        }
        Some(acceptor) => {
            let stream = Moving::new(stream, None);
            let moves = Arc::clone(&stream.moves);
            let handshake = acceptor.accept(stream);
            let stream = match tokio::time::timeout_at(first_bytes_by, handshake).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
            // HTTP/2 over TLS needs ALPN (RFC 9113); without it the client speaks HTTP/1.1.
            let builder = if h2 {
                http.server.clone().http2_only()
            } else {
                with_head_timer(&http.server, &moves, &l.cfg).http1_only()
            };
            let io = TokioIo::new(stream);
            run(node, l, &builder, io, service, &moves, &own_conn).await;
        }
        None => {
            let stream = Moving::new(stream, None);
            let moves = Arc::clone(&stream.moves);
            let builder = with_head_timer(&http.server, &moves, &l.cfg);
            let io = TokioIo::new(stream);
            run(node, l, &builder, io, service, &moves, &own_conn).await;
        }
    }
    // An upgraded request took the connection over: relay it here, so it stays counted.
    let upgraded = own_conn.tunnel.lock().ok().and_then(|mut t| t.take());
    if let Some(relay) = upgraded {
        relay.await;
    }
}

/// The listener's server settings with a timer of the connection's own for HTTP/1's
/// `header_timeout` (see [`HeadTimer`]): a timer registered once per connection rather than
/// once per request, which also lets a kept-alive connection rest for `idle_timeout` between
/// requests.
fn with_head_timer(
    server: &auto::Builder<TokioExecutor>,
    moves: &Arc<AtomicU64>,
    l: &Listener,
) -> auto::Builder<TokioExecutor> {
    let (header, idle) = (l.header_timeout, l.idle_timeout);
    let mut server = server.clone();
    server
        .http1()
        .timer(HeadTimer::new(Arc::clone(moves), header, idle));
    server
}

/// Serves one connection until it closes, the node stops (in-flight requests finish), or no
/// byte has moved on it for the listener's `idle_timeout` while no request was waiting for its
/// response headers (then it is shut down gracefully, for at most another `idle_timeout`: an
/// idle HTTP/2 connection gets its GOAWAY, a client that stopped reading its response is let
/// go). A connection on which no whole request head has come by [`Conn::first_by`] is closed:
/// HTTP/1's header timer does that for every head, this does it for HTTP/2, whose first
/// HEADERS (or CONTINUATION) frames could otherwise trickle in for as long as the idle watchdog
/// allows.
async fn run<I, S>(
    node: &Inner,
    l: &ListenerState,
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    service: S,
    moves: &AtomicU64,
    conn_state: &Conn,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::Service<
            Request<Incoming>,
            Response = Response<DownBody>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let idle = l.cfg.idle_timeout;
    let conn = builder.serve_connection_with_upgrades(io, service);
    tokio::pin!(conn);
    // The node's stop and the idle watchdog are polled only when they fire (see `Watched`).
    let unasked = async {
        tokio::time::sleep_until(conn_state.first_by).await;
        if conn_state.asked.load(Ordering::Relaxed) {
            std::future::pending::<()>().await;
        }
    };
    let watch = async {
        tokio::select! {
            () = node.stop.cancelled() => Watchdog::Stop,
            () = quiet(moves, idle, Some(&conn_state.inflight)) => Watchdog::Idle,
            () = unasked => Watchdog::Unasked,
        }
    };
    tokio::pin!(watch);
    let result = match Watched::new(conn.as_mut(), watch.as_mut()).await {
        First::Main(r) => r,
        First::Watch(Watchdog::Stop) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
        // Shut down gracefully (HTTP/2: GOAWAY, which tells a browser's unused preconnection
        // why), for at most another idle_timeout, or a second when no request ever came.
        First::Watch(dog) => {
            let (why, grace) = match dog {
                Watchdog::Unasked => (
                    "no request head within header_timeout",
                    Duration::from_secs(1),
                ),
                _ => ("idle client connection", idle),
            };
            tracing::debug!(listener = %l.cfg.name, why, "shutting the connection down");
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(grace, conn).await {
                Ok(r) => r,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "http connection ended with an error");
    }
}

/// Why a connection's watchdog fired.
enum Watchdog {
    /// The node is stopping.
    Stop,
    /// Nothing moved for `idle_timeout` with no request waiting.
    Idle,
    /// No request head came within `header_timeout` of the opening.
    Unasked,
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

fn bare(status: StatusCode, text: &'static str) -> Response<DownBody> {
    let mut r = Response::new(DownBody::own(text));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The answer to a plaintext HTTP request on an HTTPS listener.
const PLAIN_TO_HTTPS: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\
Content-Length: 60\r\nConnection: close\r\n\r\n\
this port speaks HTTPS: the plain HTTP request was not read\n";

fn own(http: &HttpState, status: StatusCode, text: &'static str) -> Response<DownBody> {
    http.own[class(status)].increment(1);
    bare(status, text)
}

/// Methods a request may be sent again with (RFC 9110 9.2.2).
pub(crate) fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::PUT | Method::DELETE | Method::OPTIONS | Method::TRACE
    )
}

/// What the last failed attempt left.
enum Last {
    Nothing,
    Failed(Failure),
}

/// One request, up to its response head (the body follows as the client reads it). Listener
/// lookup and proxying are one async fn, the future hyper stores: nested async calls would
/// each move their (kilobytes of) state into the caller's when first polled.
async fn proxy(
    node: Arc<Inner>,
    conn: Arc<Conn>,
    req: Request<Incoming>,
) -> Result<Response<DownBody>, Infallible> {
    let listener = {
        let snap = node.snapshot.load();
        snap.listener_on(conn.port, false)
            .filter(|l| l.http.is_some())
            .cloned()
    };
    // The listener on this port was removed or changed protocol by a reload.
    let Some(l) = listener else {
        return Ok(bare(StatusCode::SERVICE_UNAVAILABLE, "no such listener\n"));
    };
    let _busy = Busy::new(&conn.inflight);
    let (l, conn) = (&*l, &*conn);
    let http = l.http.as_ref().expect("looked up with http state");
    let cfg = &l.cfg;
    let (mut parts, body) = req.into_parts();
    if parts.method == Method::CONNECT {
        return Ok(own(
            http,
            StatusCode::METHOD_NOT_ALLOWED,
            "CONNECT is not proxied\n",
        ));
    }
    if let Some((status, why)) = refused(&parts) {
        return Ok(own(http, status, why));
    }
    let route = match http.rules.find(&View {
        ip: conn.peer,
        uri: &parts.uri,
        headers: &parts.headers,
    }) {
        Match::Default => None,
        Match::Route(i) => Some(i),
        Match::NotFound => {
            return Ok(own(http, StatusCode::NOT_FOUND, "no route for this path\n"));
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
    let hostless = !forward_headers(&mut parts.headers, &parts.uri, parts.version, conn);
    if let Some((proto, _)) = &upgrade {
        // A tunnel has no trailers: the TE kept above goes, with its `Connection: te`.
        parts.headers.remove(header::TE);
        parts.headers.insert(header::CONNECTION, UPGRADE.clone());
        parts.headers.insert(header::UPGRADE, proto.clone());
    }

    let mut body = RequestBody::new(body);
    // A small body is read whole first, so that a retry can send it again; the attempts, and
    // their clocks, start once it is in.
    if body.small()
        && let Err(failure) = Box::pin(body.read_whole(cfg.upstream_timeout)).await
    {
        return Ok(failed(http, l, Last::Failed(failure)));
    }
    let started = Instant::now();
    // One clock read per attempt and one per response: `now` is when this attempt is decided
    // and sent.
    let mut now = started;
    let mut router = Attempts::for_route(l, route, conn.peer);
    let mut budget = Budget::new(cfg, started);
    let method = parts.method;
    let uri = parts.uri;
    let mut headers = parts.headers;
    // The listener's budget, and HTTP's own rule: the body can be sent again, and the method is
    // idempotent or nothing was sent (or `retry_non_idempotent`).
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
        if budget.spend() {
            l.metrics.retries.increment(1);
        }
        let group = &l.groups[attempt.group];
        let Some(up) = group.upstream.as_ref() else {
            break;
        };
        let index = attempt.pick.index();
        let sent_at = now;
        // An HTTP/1.0 request without a host: the endpoint's address, as nginx's default
        // `proxy_set_header Host $proxy_host` gives it (the request goes on as HTTP/1.1).
        if hostless && let Ok(h) = HeaderValue::from_str(&attempt.pick.address().text) {
            headers.insert(header::HOST, h);
        }
        // A request with no body to send, no upgrade and an idempotent method takes gtd's own
        // client (src/node/raw.rs) to a plain endpoint: the head is written from the borrowed
        // parts, and one that finds its pooled connection closed by the endpoint can always go
        // again on a fresh one. Anything else goes through hyper's client, its future boxed so
        // that the common case does not carry (and move) its size.
        let bodiless =
            matches!(body, RequestBody::Empty) && upgrade.is_none() && idempotent(&method);
        let result = if bodiless && up.has_raw() {
            let path = uri.path_and_query().map_or("/", |p| p.as_str());
            let outgoing = Outgoing {
                method: &method,
                prefix: up.prefix(path),
                path,
                headers: &headers,
            };
            up.send_raw(index, &outgoing, cfg.upstream_timeout, sent_at)
                .await
        } else {
            let target = match up.uri(uri.path_and_query()) {
                Ok(t) => t,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot build the upstream URI");
                    return Ok(own(http, StatusCode::BAD_REQUEST, "bad request path\n"));
                }
            };
            // The headers go with this attempt; a copy stays only if another attempt could
            // follow.
            let attempt_headers = if budget.room_for_another() {
                headers.clone()
            } else {
                std::mem::take(&mut headers)
            };
            let hyper = Hyper {
                method: method.clone(),
                target,
                headers: attempt_headers,
                timeout: cfg.upstream_timeout,
                sent_at,
            };
            Box::pin(hyper.send(up, index, &mut body, &l.metrics.bytes_up)).await
        };
        now = Instant::now();
        if hostless {
            // That endpoint's address was for it alone: hash keys of a retry must not see it.
            headers.remove(header::HOST);
        }
        let elapsed = now.duration_since(sent_at);
        let endpoint = &group.endpoints[index];
        match result {
            Ok((response, pooled)) => {
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
                endpoint.requests[class(status)].increment(1);
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
                    return Ok(match upgrade.take() {
                        Some((_, client)) => switch(l, conn, attempt, response, pooled, client),
                        None => own(
                            http,
                            StatusCode::BAD_GATEWAY,
                            "the endpoint switched protocols unasked\n",
                        ),
                    });
                }
                return Ok(respond(http, l, attempt, sticky, response, pooled, sent_at));
            }
            // Out of open files, the client's upload broke off or stalled, or a response head
            // gtd does not pass on: not counted against the endpoint, and not retried.
            Err(
                failure @ (Failure::Exhausted
                | Failure::ClientGone
                | Failure::ClientStalled
                | Failure::BadResponse),
            ) => {
                // The endpoint's doing, yet no health matter (see Failure::BadResponse): the
                // operator hears of it, at most every 10 s, as nginx logs "upstream sent too big
                // header".
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
                if failure == Failure::Connect {
                    endpoint.failures.increment(1);
                }
                l.attempt_failed(attempt.group, &attempt.pick, &failure);
                drop(attempt);
                last = Last::Failed(failure);
                if !retry_ok(failure != Failure::Connect, &budget, now, &body) {
                    break;
                }
            }
        }
    }
    Ok(failed(http, l, last))
}

/// gtd's own answer when no attempt gave one to pass on.
fn failed(http: &HttpState, l: &ListenerState, last: Last) -> Response<DownBody> {
    match last {
        Last::Nothing => {
            l.metrics.no_route.increment(1);
            own(
                http,
                StatusCode::SERVICE_UNAVAILABLE,
                "no healthy endpoint can take this request\n",
            )
        }
        Last::Failed(Failure::Timeout) => own(
            http,
            StatusCode::GATEWAY_TIMEOUT,
            "the endpoint did not answer in time\n",
        ),
        Last::Failed(Failure::Exhausted) => own(
            http,
            StatusCode::SERVICE_UNAVAILABLE,
            "this node cannot open a connection now\n",
        ),
        // Most likely nobody reads this one. The connection closes after either (the rest of
        // the body will not be read): the answer says so.
        Last::Failed(Failure::ClientGone) => closing(own(
            http,
            StatusCode::BAD_REQUEST,
            "the request body broke off\n",
        )),
        Last::Failed(Failure::ClientStalled) => closing(own(
            http,
            StatusCode::REQUEST_TIMEOUT,
            "the request body stopped coming\n",
        )),
        Last::Failed(Failure::BadResponse) => own(
            http,
            StatusCode::BAD_GATEWAY,
            "the endpoint's response head was invalid or too large\n",
        ),
        Last::Failed(_) => own(
            http,
            StatusCode::BAD_GATEWAY,
            "no endpoint could be reached\n",
        ),
    }
}

/// `response` with `Connection: close` (hyper leaves it out of HTTP/2 answers).
fn closing(mut response: Response<DownBody>) -> Response<DownBody> {
    static CLOSE: HeaderValue = HeaderValue::from_static("close");
    response
        .headers_mut()
        .insert(header::CONNECTION, CLOSE.clone());
    response
}

/// One attempt through hyper's client: what it sends.
struct Hyper {
    method: Method,
    target: Uri,
    headers: HeaderMap,
    timeout: Duration,
    sent_at: Instant,
}

impl Hyper {
    /// Sends the request with `body` (taken back if the attempt did not touch it). Boxed by
    /// the caller: its state stays out of the common case's future.
    async fn send(
        self,
        up: &Upstream,
        index: usize,
        body: &mut RequestBody,
        bytes_up: &Counter,
    ) -> Result<(Response<EndpointBody>, Option<Pooled>), Failure> {
        let mut headers = self.headers;
        // A small body with trailer fields (an HTTP/2 client's, with a length): chunked, so that
        // the fields can follow it.
        if let Some(names) = body.trailer_names() {
            headers.remove(header::CONTENT_LENGTH);
            headers.insert(header::TRAILER, names);
        }
        let (up_body, back) = body.take(bytes_up);
        let mut request = Request::new(up_body);
        *request.method_mut() = self.method;
        *request.uri_mut() = self.target;
        *request.version_mut() = Version::HTTP_11;
        *request.headers_mut() = headers;
        let result = up
            .send(index, request, self.timeout, self.sent_at, body.progress())
            .await;
        body.recover(back);
        result
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
    Response::from_parts(parts, DownBody::Relayed(body))
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
    Response::from_parts(parts, DownBody::Own(None))
}

/// The `Upgrade` value of an HTTP/1.1 request that asks to switch protocols (`Connection:
/// upgrade`), if it does. `h2c` (`curl --http2` on cleartext) is not one: switching the whole
/// connection to one endpoint would end per-request decisions on it, so the request goes on as
/// HTTP/1.1 (as when gtd answers it itself: hyper does not offer h2c upgrades).
fn wants_upgrade(parts: &http::request::Parts) -> Option<HeaderValue> {
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

static UPGRADE: HeaderValue = HeaderValue::from_static("upgrade");
static XFP_HTTP: HeaderValue = HeaderValue::from_static("http");
static XFP_HTTPS: HeaderValue = HeaderValue::from_static("https");

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Rewrites the client's headers for the endpoint (see the module doc); false when the request
/// names no host (HTTP/1.0 allows that).
fn forward_headers(headers: &mut HeaderMap, uri: &Uri, version: Version, conn: &Conn) -> bool {
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
            e.insert(conn.xff.clone());
        }
        header::Entry::Occupied(mut e) => {
            let came = e.iter().filter(|v| v.to_str().is_ok());
            if let Some(v) = joined(came.chain([&conn.xff]), b", ") {
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
        if conn.https {
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
/// - the asterisk target with a method other than OPTIONS (RFC 9112 section 3.2.4);
/// - more than 100 header fields (431): hyper holds HTTP/1.1 heads to that, as HAProxy and
///   Envoy do, and HTTP/2 gets the same here, its cookie fields (browsers send one per cookie)
///   counted as the one field they become.
fn refused(parts: &http::request::Parts) -> Option<(StatusCode, &'static str)> {
    let bad = |why| Some((StatusCode::BAD_REQUEST, why));
    let mut hosts = parts.headers.get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => return bad("more than one Host header\n"),
        (None, _) if parts.version == Version::HTTP_11 && authority(&parts.uri).is_none() => {
            return bad("no Host header\n");
        }
        _ => {}
    }
    if parts.uri.path() == "*" && parts.method != Method::OPTIONS {
        return bad("the target * is for OPTIONS only\n");
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

/// The host (and port) the request target names: HTTP/2's :authority, or the host of an
/// absolute-form HTTP/1.1 target. It wins over a Host header (RFC 9113 8.3.1, RFC 9112 3.2.2),
/// for routes as for the endpoint. Without userinfo, which clients should not send.
fn authority(uri: &Uri) -> Option<&str> {
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
fn strip_hop_by_hop(headers: &mut HeaderMap) -> bool {
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
                // keep-alive is in the fixed list, removed below.
                if !token.is_empty() && !token.eq_ignore_ascii_case("keep-alive") {
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
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
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
    }

    #[test]
    fn forwarded_headers_are_set_and_appended() {
        let uri: Uri = "/p".parse().unwrap();
        let conn = Conn::new(
            "192.0.2.7".parse().unwrap(),
            80,
            true,
            tokio::time::Instant::now(),
        );
        let mut h = map(&[
            ("host", "example.com:8080"),
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-for", "10.0.0.2"),
            ("x-forwarded-proto", "http"),
            ("expect", "100-continue"),
        ]);
        forward_headers(&mut h, &uri, Version::HTTP_11, &conn);
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 10.0.0.2, 192.0.2.7");
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "example.com:8080");
        assert!(!h.contains_key("expect"));

        // HTTP/2: no Host header, the authority becomes Host.
        let uri: Uri = "https://h2.example.com/p".parse().unwrap();
        let mut h = HeaderMap::new();
        forward_headers(&mut h, &uri, Version::HTTP_2, &conn);
        assert_eq!(h["host"], "h2.example.com");
        assert_eq!(h["x-forwarded-host"], "h2.example.com");
        assert_eq!(h["x-forwarded-for"], "192.0.2.7");
    }

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
