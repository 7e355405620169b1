//! The client side of HTTP listeners: each group's way to its endpoints.
//!
//! - [`Upstream`]: a group's way to its endpoints. `Upstream::request` chooses the client
//!   for each attempt: gtd's own ([`super::client`]) for a request without a body to a plain
//!   endpoint, hyper's `conn::http1` (one task per connection) for requests with a body, TLS
//!   endpoints and upgrades. Each keeps its connections in the same keep-alive pool type
//!   (`KeepAlive` of `pool.rs`: up to `keepalive` idle per endpoint, closed after
//!   `idle_timeout`), opened from `[node] source_ip` within `connect_timeout`, with TLS per the
//!   group's settings; a connection goes back when its response body ends.
//!   `upstream_timeout` bounds the wait for the response headers (restarted while an upload
//!   moves) and then any silence of the connection while the response streams (an endpoint
//!   that stalls in the middle of a body: nginx's `proxy_read_timeout`); such a connection is
//!   closed and the client's response cut.
//! - The request and response bodies are in [`super::bodies`].

use std::fmt;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap};
use http::uri::PathAndQuery;
use http::{HeaderName, Method, Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use metrics::{Counter, Histogram};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_util::either::Either;

use crate::telemetry::{self as m, Registry};
use gtd_core::config::{Address, Balance, Config, Group, Listener, Reuse};

use super::bodies::{
    BUSY, EndpointBody, Idle, Pool, Pooled, Progress, RequestBody, STREAMING, Socket, UpBody,
};
use super::client::{Outgoing, RawPool};
use super::failure::{Failure, connect_failure};
use super::pool::stamp;
use crate::timers::{First, Moving, Watched};
use crate::tls;

/// A group's way to its endpoints over HTTP.
pub struct Upstream {
    pool: Arc<Pool>,
    /// gtd's own client for requests without a body, when the endpoints are plain (no TLS).
    raw: Option<Arc<RawPool>>,
    /// Each endpoint's address and the host of its authority (for SNI), config order.
    targets: Vec<(Address, String)>,
    connect: ConnectCfg,
    /// `upstream_timeout`: the longest silence of a connection in use.
    stall_timeout: Duration,
    /// `idle_timeout`: how long a connection waits in the pool.
    idle_timeout: Duration,
    /// `path_prefix` without its trailing slash (`None` for none or `/`).
    path_prefix: Option<Box<str>>,
    /// `feedback`: the response header carrying the endpoint's value.
    pub(crate) feedback: Option<HeaderName>,
    /// `reuse`: which requests may take an idle connection.
    reuse: Reuse,
    /// Time from sending a request to the response headers.
    pub(crate) response_seconds: Histogram,
    /// New connections to the endpoints: how long each took (TLS included), how many per
    /// endpoint (config order), the same series TCP listeners count into.
    pub(crate) connects: Connects,
}

/// Metric handles for the connections an HTTP group opens to its endpoints.
pub(crate) struct Connects {
    pub(crate) seconds: Histogram,
    pub(crate) opened: Vec<Counter>,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("targets", &self.targets)
            .field("path_prefix", &self.path_prefix)
            .finish_non_exhaustive()
    }
}

/// Why a group's client cannot be built (the snapshot names the listener and group).
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The group's `tls` towards its endpoints.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// An endpoint's address that is no URI authority.
    #[error("endpoint {address:?}: {error}")]
    Endpoint {
        /// The address as configured.
        address: String,
        /// Why not.
        error: http::uri::InvalidUri,
    },
    /// A `feedback_header` that is no header name.
    #[error("feedback_header {header:?}: {error}")]
    FeedbackHeader {
        /// The header as configured.
        header: String,
        /// Why not.
        error: http::header::InvalidHeaderName,
    },
}

impl Upstream {
    /// Builds the upstream of `group` of listener `l` as the snapshot holds it: its
    /// connections count into the group's connect-time histogram `connect_seconds` and into
    /// `opened`, its endpoints' connection counters (config order).
    ///
    /// `was`, the group's upstream in the snapshot this one replaces, hands over its idle
    /// connections when nothing they depend on changed: the same endpoints (addresses, and for
    /// a name the same resolved IPs, in the same order), `keepalive`, `idle_timeout`,
    /// `upstream_timeout` (each hyper connection's task keeps the one it was opened with) and
    /// `source_ip`, and no TLS (a TLS group's certificates and CAs are read again: its
    /// connections are made anew). A reload or a DNS change elsewhere in the config then costs
    /// the group no new connection, as Envoy keeps a host's pool across an update.
    pub(crate) fn attach(
        l: &Listener,
        group: &Group,
        config: &Config,
        registry: &Registry,
        connect_seconds: &Histogram,
        opened: Vec<Counter>,
        was: Option<&Upstream>,
    ) -> Result<Upstream, UpstreamError> {
        let labels = [l.name.as_str(), group.name.as_str()];
        let seconds = registry.histogram(&m::UPSTREAM_RESPONSE_SECONDS, &labels);
        let connects = Connects {
            seconds: connect_seconds.clone(),
            opened,
        };
        let mut up = Upstream::build(l, group, config.node.source_ip, seconds, connects)?;
        if let Some(was) = was
            && up.connect.tls.is_none()
            && was.connect.tls.is_none()
            && was.targets == up.targets
            && was.connect.source_ip == up.connect.source_ip
            && was.idle_timeout == up.idle_timeout
            && was.stall_timeout == up.stall_timeout
            && was.pool.keepalive() == up.pool.keepalive()
        {
            up.pool = Arc::clone(&was.pool);
            up.raw.clone_from(&was.raw);
        }
        Ok(up)
    }

    /// Whether `other` holds the same pools (one carried them over from the other).
    pub(crate) fn shares_pools(&self, other: &Upstream) -> bool {
        Arc::ptr_eq(&self.pool, &other.pool)
    }

    /// The client of `group` of listener `l`. Fails (naming the file) when a TLS file is bad.
    pub(crate) fn build(
        l: &Listener,
        group: &Group,
        source_ip: Option<IpAddr>,
        response_seconds: Histogram,
        connects: Connects,
    ) -> Result<Upstream, UpstreamError> {
        let tls = match &group.tls {
            Some(t) if t.enabled => {
                Some((TlsConnector::from(tls::client_config(t)?), t.sni.clone()))
            }
            _ => None,
        };
        let connect = ConnectCfg {
            source_ip,
            connect_timeout: l.connect_timeout,
            tls,
        };
        let targets =
            group
                .endpoints
                .iter()
                .map(|e| {
                    let authority = http::uri::Authority::try_from(e.address.text.as_str())
                        .map_err(|error| UpstreamError::Endpoint {
                            address: e.address.text.clone(),
                            error,
                        })?;
                    Ok((e.address.clone(), authority.host().to_owned()))
                })
                .collect::<Result<Vec<_>, UpstreamError>>()?;
        let pool = Arc::new(Pool::new(
            targets.len(),
            group.keepalive as usize,
            l.idle_timeout,
        ));
        let raw = connect.tls.is_none().then(|| {
            Arc::new(RawPool::new(
                targets.len(),
                group.keepalive as usize,
                l.idle_timeout,
            ))
        });
        let path_prefix = group
            .path_prefix
            .as_deref()
            .map(|p| p.trim_end_matches('/'))
            .filter(|p| !p.is_empty())
            .map(Into::into);
        let feedback = match &group.balance {
            Balance::Feedback { header, .. } => Some(
                HeaderName::try_from(header.to_ascii_lowercase()).map_err(|error| {
                    UpstreamError::FeedbackHeader {
                        header: header.clone(),
                        error,
                    }
                })?,
            ),
            _ => None,
        };
        Ok(Upstream {
            reuse: group.reuse,
            pool,
            raw,
            targets,
            connect,
            stall_timeout: l.upstream_timeout,
            idle_timeout: l.idle_timeout,
            path_prefix,
            feedback,
            response_seconds,
            connects,
        })
    }

    /// The request target (origin form) for `path` (path and query as received): the group's
    /// `path_prefix` goes in front. Allocates only when there is a prefix.
    fn uri(&self, path: Option<&PathAndQuery>) -> Result<Uri, http::uri::InvalidUri> {
        let original = path.map_or("/", PathAndQuery::as_str);
        // An absolute-form target with an empty path (`http://a.example?q=1`) keeps its query
        // behind the path `/` (RFC 9112 §3.2.1), not as `?q=1`.
        let slash = if original.starts_with('?') { "/" } else { "" };
        let prefix = self.prefix(original);
        let path = match Some(prefix).filter(|p| !p.is_empty() || !slash.is_empty()) {
            None => match path {
                Some(p) => p.clone(),
                None => PathAndQuery::from_static("/"),
            },
            Some(prefix) => {
                let mut joined = String::with_capacity(prefix.len() + 1 + original.len());
                joined.push_str(prefix);
                joined.push_str(slash);
                joined.push_str(original);
                PathAndQuery::from_maybe_shared(Bytes::from(joined))?
            }
        };
        Ok(Uri::from(path))
    }

    /// What goes before `path` (path and query as received): the group's `path_prefix` without
    /// its trailing slash, "" for none, and none before `*` (`OPTIONS *` asks about the server,
    /// not a path).
    fn prefix(&self, path: &str) -> &str {
        match &self.path_prefix {
            Some(prefix) if path != "*" => prefix,
            _ => "",
        }
    }

    /// Sends one attempt to endpoint `index` and waits for the response headers, choosing the
    /// client here: a request with no body to send, no upgrade and an idempotent method takes
    /// gtd's own ([`super::client`]) to a plain endpoint — the head is written from the
    /// borrowed parts, and one that finds its pooled connection closed by the endpoint can
    /// always go again on a fresh one. Anything else goes through hyper's client, its future
    /// boxed so that the common case does not carry (and move) its size.
    ///
    /// Not itself `async`: the future it returns is the chosen client's, so the request's own
    /// future (which hyper stores for every request) carries no extra layer of state.
    pub(crate) fn request<'a>(
        &'a self,
        index: usize,
        r: Sending<'a>,
    ) -> Either<impl Future<Output = Exchanged> + Send + 'a, BoxedExchange<'a>> {
        let reuse = match self.reuse {
            Reuse::Always => true,
            Reuse::Safe => r.safe_to_reuse,
        };
        let bodiless = matches!(r.body, RequestBody::Empty)
            && !r.upgrade
            && super::methods::idempotent(r.method);
        if bodiless && self.raw.is_some() {
            let headers: &'a HeaderMap = r.headers;
            let path = r.uri.path_and_query().map_or("/", |p| p.as_str());
            let outgoing = Outgoing {
                method: r.method,
                prefix: self.prefix(path),
                path,
                headers,
            };
            return Either::Left(self.send_raw(index, outgoing, r.timeout, r.sent_at, reuse));
        }
        let target = match self.uri(r.uri.path_and_query()) {
            Ok(target) => target,
            Err(e) => {
                tracing::debug!(error = %e, "cannot build the upstream URI");
                return Either::Right(Box::pin(std::future::ready(Err(Failure::BadTarget))));
            }
        };
        // The headers go with this attempt; a copy stays only if another attempt could follow.
        let headers = if r.keep_headers {
            r.headers.clone()
        } else {
            std::mem::take(r.headers)
        };
        let hyper = Hyper {
            method: r.method.clone(),
            target,
            headers,
            timeout: r.timeout,
            sent_at: r.sent_at,
            reuse,
        };
        Either::Right(Box::pin(hyper.send(self, index, r.body, r.bytes_up)))
    }

    /// Sends a request without a body through gtd's own client to endpoint `index` (at
    /// `sent_at`) and waits for the response headers for at most `timeout`.
    async fn send_raw(
        &self,
        index: usize,
        request: Outgoing<'_>,
        timeout: Duration,
        sent_at: Instant,
        reuse: bool,
    ) -> Result<(http::Response<EndpointBody>, Option<Pooled>), Failure> {
        let Some(raw) = &self.raw else {
            return Err(Failure::Broken);
        };
        let (address, _) = &self.targets[index];
        let open = || self.counted(index, self.connect.tcp(address));
        let deadline = sent_at + timeout;
        let exchange = raw.exchange(index, &request, deadline, self.stall_timeout, reuse, open);
        let response = exchange.await?;
        Ok((response.map(EndpointBody::Raw), None))
    }

    /// Sends `request` through hyper's client to endpoint `index` (at `sent_at`) and waits for
    /// the response headers; the connection comes back with the response, to be released when
    /// its body ends. `upstream_timeout` runs from `sent_at` while the request body is not
    /// moving: it restarts as long as the client keeps uploading, so a large upload is not cut,
    /// and counts from the end of the body otherwise.
    async fn send(
        &self,
        index: usize,
        request: http::Request<UpBody>,
        (timeout, sent_at): (Duration, Instant),
        progress: Option<&Progress>,
        reuse: bool,
    ) -> Result<(http::Response<EndpointBody>, Option<Pooled>), Failure> {
        let response = self.exchange(index, request, reuse);
        tokio::pin!(response);
        let mut deadline = sent_at + timeout;
        loop {
            let until = tokio::time::Instant::from_std(deadline);
            match tokio::time::timeout_at(until, &mut response).await {
                Ok(Ok((response, pooled))) => {
                    return Ok((response.map(EndpointBody::Hyper), Some(pooled)));
                }
                // The body broke on the client's side (hyper then fails the exchange).
                Ok(Err(Failure::Broken)) if progress.is_some_and(Progress::client_broke) => {
                    return Err(Failure::ClientGone);
                }
                Ok(Err(failure)) => return Err(failure),
                Err(_) => {
                    // The body moved since: the silence counts from its last piece.
                    if let Some(moved) = progress.and_then(Progress::moved_at)
                        && moved + timeout > deadline
                    {
                        deadline = moved + timeout;
                        continue;
                    }
                    // Still waiting for the client's next bytes: the client is the slow one.
                    if progress.is_some_and(Progress::awaiting_client) {
                        return Err(Failure::ClientStalled);
                    }
                    return Err(Failure::Timeout);
                }
            }
        }
    }

    /// Closes the idle connections of gtd's own client that have passed `idle_timeout` (the
    /// node calls this every second).
    pub(crate) fn sweep(&self) {
        self.pool.sweep();
        if let Some(raw) = &self.raw {
            raw.sweep();
        }
    }

    /// The snapshot holding this upstream was replaced: its pools close what they hold and
    /// take nothing back (`KeepAlive::retire`).
    pub(crate) fn retire(&self) {
        self.pool.retire();
        if let Some(raw) = &self.raw {
            raw.retire();
        }
    }

    /// One request on an idle connection of the endpoint (when `reuse` allows), or a new one.
    /// A request an idle connection could not take (it closed meanwhile) goes to the next
    /// one, untouched.
    async fn exchange(
        &self,
        index: usize,
        mut request: http::Request<UpBody>,
        reuse: bool,
    ) -> Result<(http::Response<Incoming>, Pooled), Failure> {
        loop {
            let idle = if reuse { self.pool.take(index) } else { None };
            let (mut idle, fresh) = match idle {
                Some(idle) => {
                    idle.clock.store(BUSY, Ordering::Relaxed);
                    idle.socket.reused.store(true, Ordering::Relaxed);
                    (idle, false)
                }
                None => (Box::pin(self.open(index)).await?, true),
            };
            if !fresh && !idle.sender.is_ready() && idle.sender.ready().await.is_err() {
                continue;
            }
            match idle.sender.try_send_request(request).await {
                Ok(response) => {
                    idle.clock.store(STREAMING, Ordering::Relaxed);
                    let pooled = Pooled {
                        idle,
                        pool: Arc::clone(&self.pool),
                        index,
                    };
                    return Ok((response, pooled));
                }
                Err(mut e) => match e.take_message() {
                    Some(r) if !fresh => {
                        tracing::debug!(error = %e.error(), "idle connection gone; next one");
                        request = r;
                    }
                    _ => {
                        let error = e.error();
                        tracing::debug!(?error, "upstream request failed");
                        if error.is_parse() || error.is_parse_too_large() || error.is_parse_status()
                        {
                            return Err(Failure::BadResponse);
                        }
                        return Err(Failure::Broken);
                    }
                },
            }
        }
    }

    /// `connect` (to endpoint `index`), timed and counted when it succeeds.
    async fn counted<T>(
        &self,
        index: usize,
        connect: impl Future<Output = io::Result<T>>,
    ) -> io::Result<T> {
        let started = Instant::now();
        let connection = connect.await?;
        self.connects
            .seconds
            .record(started.elapsed().as_secs_f64());
        self.connects.opened[index].increment(1);
        Ok(connection)
    }

    /// A new connection to endpoint `index`, its task spawned.
    async fn open(&self, index: usize) -> Result<Idle, Failure> {
        let (address, host) = &self.targets[index];
        let stream = self.counted(index, self.connect.open(address, host));
        let stream = stream.await.map_err(|e| {
            tracing::debug!(error = %e, "connect failed");
            connect_failure(&e)
        })?;
        let socket = socket(&stream);
        let moving = Moving::new(stream, None);
        let moves = Arc::clone(&moving.moves);
        let (sender, conn) = http1::Builder::new()
            // One flat write per request, as on the listener side (crates/node/src/http/state.rs).
            .writev(false)
            // At most 64 KiB read ahead of the client (and a response head of 64 KiB at most,
            // as gtd's own client): hyper's default lets a slow reader cost 400 KiB.
            .max_buf_size(64 * 1024)
            .handshake::<_, UpBody>(TokioIo::new(moving))
            .await
            .map_err(|e| {
                tracing::debug!(error = %e, "connect failed");
                Failure::Connect(super::failure::Cause::Handshake)
            })?;
        let clock = Arc::new(AtomicU64::new(BUSY));
        let watch = Arc::clone(&clock);
        let (base, idle, stall) = (self.pool.base(), self.idle_timeout, self.stall_timeout);
        tokio::spawn(async move {
            let conn = conn.with_upgrades();
            let expiry = expire(base, idle, stall, &watch, &moves);
            tokio::pin!(conn, expiry);
            // The expiry timer is polled only when it fires (see `Watched`).
            if let First::Main(Err(e)) = Watched::new(conn, expiry).await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok(Idle {
            sender,
            clock,
            socket,
        })
    }
}

/// Ends when the connection has been idle in the pool for `idle` (`idle_timeout`), or when,
/// its response headers in, no byte has moved on it for `stall` (`upstream_timeout`; noticed
/// between one and two `stall` periods after the last byte, never before one). Before the
/// headers, `Upstream::send` times the wait (and an upload that stops moving).
async fn expire(
    base: Instant,
    idle: Duration,
    stall: Duration,
    clock: &AtomicU64,
    moves: &AtomicU64,
) {
    let limit = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX / 2);
    let mut seen = moves.load(Ordering::Relaxed);
    loop {
        let since = clock.load(Ordering::Relaxed);
        if since == BUSY {
            // Waiting for the response headers: `Upstream::send` times that (and an upload).
            tokio::time::sleep(stall).await;
            seen = moves.load(Ordering::Relaxed);
            continue;
        }
        if since == STREAMING {
            tokio::time::sleep(stall).await;
            let now = moves.load(Ordering::Relaxed);
            if now == seen && clock.load(Ordering::Relaxed) == STREAMING {
                tracing::debug!(?stall, "endpoint connection stalled; closing it");
                return;
            }
            seen = now;
            continue;
        }
        match (since + limit).checked_sub(stamp(base)) {
            Some(0) | None => return,
            Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
        seen = moves.load(Ordering::Relaxed);
    }
}

/// What one attempt comes to: the response (with its pooled connection, for hyper's client), or
/// why there is none.
pub(crate) type Exchanged = Result<(http::Response<EndpointBody>, Option<Pooled>), Failure>;

/// An attempt through hyper's client, boxed so that the common case does not carry its size.
pub(crate) type BoxedExchange<'a> = Pin<Box<dyn Future<Output = Exchanged> + Send + 'a>>;

/// One attempt of a request, as the request loop hands it to the group's upstream.
pub(crate) struct Sending<'a> {
    pub(crate) method: &'a Method,
    pub(crate) uri: &'a Uri,
    /// The request headers: copied for this attempt when `keep_headers`, else taken.
    pub(crate) headers: &'a mut HeaderMap,
    /// Another attempt may follow (it needs the headers again).
    pub(crate) keep_headers: bool,
    /// Under `reuse = "safe"`, the request may take an idle connection: it is not its client
    /// connection's first, and it may be sent again (idempotent, its body held whole or none).
    pub(crate) safe_to_reuse: bool,
    pub(crate) body: &'a mut RequestBody,
    /// The request asks for an upgrade (it keeps its connection: hyper's client).
    pub(crate) upgrade: bool,
    /// `upstream_timeout`.
    pub(crate) timeout: Duration,
    /// When the attempt is sent (decided).
    pub(crate) sent_at: Instant,
    pub(crate) bytes_up: &'a Counter,
}

static CHUNKED: http::HeaderValue = http::HeaderValue::from_static("chunked");

/// One attempt through hyper's client: what it sends.
struct Hyper {
    method: Method,
    target: Uri,
    headers: HeaderMap,
    timeout: Duration,
    sent_at: Instant,
    /// May take an idle connection.
    reuse: bool,
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
        // A body of unknown length goes chunked whatever the method: left to itself, hyper
        // sends a GET's or HEAD's as no body at all (nginx and HAProxy forward it).
        if hyper::body::Body::size_hint(&up_body).exact().is_none() {
            headers.insert(header::TRANSFER_ENCODING, CHUNKED.clone());
        }
        let mut request = Request::new(up_body);
        *request.method_mut() = self.method;
        *request.uri_mut() = self.target;
        *request.version_mut() = Version::HTTP_11;
        *request.headers_mut() = headers;
        let result = up
            .send(
                index,
                request,
                (self.timeout, self.sent_at),
                body.progress(),
                self.reuse,
            )
            .await;
        body.recover(back);
        result
    }
}

// ------------------------------------------------------------------------------- connector

/// How to reach endpoints: TCP from `source_ip`, bounded by `connect_timeout`, then TLS when the
/// group asks for it.
struct ConnectCfg {
    source_ip: Option<IpAddr>,
    connect_timeout: Duration,
    tls: Option<(TlsConnector, Option<String>)>,
}

impl ConnectCfg {
    /// A TCP connection to `address` (no TLS), Nagle off.
    async fn tcp(&self, address: &Address) -> io::Result<TcpStream> {
        let tcp = crate::connect::connect(address, self.source_ip, self.connect_timeout).await?;
        let _ = tcp.set_nodelay(true);
        Ok(tcp)
    }

    /// A connection to `address`, through TLS when the group asks for it (`host` names the
    /// endpoint for SNI).
    async fn open(&self, address: &Address, host: &str) -> io::Result<Stream> {
        let tcp = Shared(Arc::new(Socket {
            tcp: self.tcp(address).await?,
            reused: AtomicBool::new(false),
        }));
        let Some((connector, sni)) = &self.tls else {
            return Ok(Either::Left(tcp));
        };
        let name = tls::server_name(sni.as_deref(), host)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let handshake = connector.connect(name, tcp);
        let stream = tokio::time::timeout(self.connect_timeout, handshake)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
        Ok(Either::Right(Box::new(stream)))
    }
}

/// A connection to an endpoint: cleartext (left) or TLS (right, boxed: the session state is
/// large). `Either` forwards reads and writes to the side in use.
pub(crate) type Stream = Either<Shared, Box<tokio_rustls::client::TlsStream<Shared>>>;

/// The socket underneath `stream`, for the pool to look at while the connection is idle.
fn socket(stream: &Stream) -> Arc<Socket> {
    match stream {
        Either::Left(s) => Arc::clone(&s.0),
        Either::Right(s) => Arc::clone(&s.get_ref().0.0),
    }
}

/// A TCP socket that hyper's connection task reads and writes while the pool keeps a handle
/// on it: an idle connection is taken only when nothing waits on its socket
/// ([`super::client::quiet`]), which hyper's task, reading through the runtime's readiness,
/// may not have heard of yet; and looked at once more just before the next request's first
/// byte leaves (the request went through hyper's channel and task meanwhile).
pub(crate) struct Shared(Arc<Socket>);

impl Shared {
    /// Fails the write when the connection was reused and the endpoint wrote or closed on it
    /// since it was idle: what it wrote would be read as this request's answer.
    fn check_reuse(&self) -> io::Result<()> {
        if self.0.reused.load(Ordering::Relaxed) {
            self.0.reused.store(false, Ordering::Relaxed);
            if !super::client::quiet(&self.0.tcp) {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the endpoint wrote on an idle connection",
                ));
            }
        }
        Ok(())
    }
}

impl AsyncRead for Shared {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            std::task::ready!(self.0.tcp.poll_read_ready(cx))?;
            // Straight into the caller's unfilled (uninitialised) room, as TcpStream's own read.
            match self.0.tcp.try_read_buf(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return Poll::Ready(r.map(drop)),
            }
        }
    }
}

impl AsyncWrite for Shared {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            self.check_reuse()?;
            std::task::ready!(self.0.tcp.poll_write_ready(cx))?;
            match self.0.tcp.try_write(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return Poll::Ready(r),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            self.check_reuse()?;
            std::task::ready!(self.0.tcp.poll_write_ready(cx))?;
            match self.0.tcp.try_write_vectored(bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return Poll::Ready(r),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(shutdown_write(&self.0.tcp))
    }
}

/// Ends the sending side of `socket` (a FIN after what was written).
#[cfg(unix)]
fn shutdown_write(socket: &TcpStream) -> io::Result<()> {
    rustix::net::shutdown(socket, rustix::net::Shutdown::Write).map_err(io::Error::from)
}

#[cfg(not(unix))]
fn shutdown_write(_: &TcpStream) -> io::Result<()> {
    Ok(())
}
