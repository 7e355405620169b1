//! The client side of HTTP listeners: one connection pool per group, and the bodies that stream
//! through gtd in both directions.
//!
//! - [`Upstream`]: a small pool of HTTP/1.1 connections per endpoint (hyper's `conn::http1`,
//!   one task per connection) for requests with a body, TLS endpoints and upgrades, and
//!   gtd's own client for the rest ([`super::client`], its own pool), opened from `[node] source_ip` within `connect_timeout`, with TLS
//!   per the group's settings. Up to `keepalive` idle connections per endpoint are kept (last in,
//!   first out) and closed after `idle_timeout`; a connection goes back when its response body
//!   ends, and one that closed is dropped at the next look. `upstream_timeout` bounds the wait for
//!   the response headers (restarted while an upload moves) and then any silence of the
//!   connection while the response streams (an endpoint that stalls in the middle of a body:
//!   nginx's `proxy_read_timeout`); such a connection is closed and the client's response cut.
//!   The request path takes one short, uncontended lock per endpoint and hashes nothing.
//! - `tunnel`: an upgraded (`101`) client connection and its endpoint connection, relayed.
//! - `ClientBody`: the client's request body on its way to an endpoint. It remembers whether a
//!   frame was ever handed on; if the attempt fails before that, dropping it gives the untouched
//!   body back (through a oneshot) so a retry can send it again. A body of which any byte left
//!   is never replayed.
//! - [`DownBody`]: the response towards the client: either gtd's own short answer or the
//!   endpoint's body, which holds the attempt's [`Pick`] (so `least_conn` counts the request
//!   until its response ends) and reports `least_time`'s `last_byte` timing when it ends.

use std::fmt;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{HeaderName, Uri};
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use metrics::{Counter, Histogram};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_rustls::TlsConnector;

use crate::balance::Pick;
use crate::config::{Address, Balance, Group, Listener, Measure};

use super::client::{BoxError, Outgoing, RawBody, RawPool};
use super::h1;
use crate::node::timers::{First, Moving, Watched, origin, quiet};
use crate::node::tls;

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
    /// `path_prefix` without its trailing slash (`None` for none or `/`).
    path_prefix: Option<Box<str>>,
    /// `feedback`: the response header carrying the endpoint's value.
    pub(crate) feedback: Option<HeaderName>,
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

impl Upstream {
    /// The client of `group` of listener `l`. Fails (naming the file) when a TLS file is bad.
    pub(crate) fn build(
        l: &Listener,
        group: &Group,
        source_ip: Option<IpAddr>,
        response_seconds: Histogram,
        connects: Connects,
    ) -> Result<Upstream, String> {
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
        let targets = group
            .endpoints
            .iter()
            .map(|e| {
                let authority = http::uri::Authority::try_from(e.address.text.as_str())
                    .map_err(|err| format!("endpoint {:?}: {err}", e.address.text))?;
                Ok((e.address.clone(), authority.host().to_owned()))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let pool = Arc::new(Pool {
            slots: (0..targets.len()).map(|_| Mutex::default()).collect(),
            keepalive: group.keepalive as usize,
            base: Instant::now(),
            idle_timeout: l.idle_timeout,
        });
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
                HeaderName::try_from(header.to_ascii_lowercase())
                    .map_err(|e| format!("feedback_header {header:?}: {e}"))?,
            ),
            _ => None,
        };
        Ok(Upstream {
            pool,
            raw,
            targets,
            connect,
            stall_timeout: l.upstream_timeout,
            path_prefix,
            feedback,
            response_seconds,
            connects,
        })
    }

    /// The request target (origin form) for `path` (path and query as received): the group's
    /// `path_prefix` goes in front. Allocates only when there is a prefix.
    pub(crate) fn uri(&self, path: Option<&PathAndQuery>) -> Result<Uri, String> {
        let original = path.map_or("/", PathAndQuery::as_str);
        let path = match Some(self.prefix(original)).filter(|p| !p.is_empty()) {
            None => match path {
                Some(p) => p.clone(),
                None => PathAndQuery::from_static("/"),
            },
            Some(prefix) => {
                let mut joined = String::with_capacity(prefix.len() + original.len());
                joined.push_str(prefix);
                joined.push_str(original);
                PathAndQuery::from_maybe_shared(Bytes::from(joined)).map_err(|e| e.to_string())?
            }
        };
        Ok(Uri::from(path))
    }

    /// Whether gtd's own client ([`super::client`]) carries this group's requests without a body
    /// (plain endpoints; TLS ones take hyper's).
    pub(crate) fn has_raw(&self) -> bool {
        self.raw.is_some()
    }

    /// What goes before `path` (path and query as received): the group's `path_prefix` without
    /// its trailing slash, "" for none, and none before `*` (`OPTIONS *` asks about the server,
    /// not a path).
    pub(crate) fn prefix(&self, path: &str) -> &str {
        match &self.path_prefix {
            Some(prefix) if path != "*" => prefix,
            _ => "",
        }
    }

    /// Sends a request without a body through gtd's own client (the caller checked
    /// [`Self::has_raw`]) to endpoint `index` (at `sent_at`) and waits for the response headers
    /// for at most `timeout`.
    pub(crate) async fn send_raw(
        &self,
        index: usize,
        request: &Outgoing<'_>,
        timeout: Duration,
        sent_at: Instant,
    ) -> Result<(http::Response<EndpointBody>, Option<Pooled>), Failure> {
        let Some(raw) = &self.raw else {
            return Err(Failure::Broken);
        };
        let (address, _) = &self.targets[index];
        let open = || self.counted(index, self.connect.tcp(address));
        let exchange = raw.exchange(index, request, sent_at + timeout, self.stall_timeout, open);
        let response = exchange.await?;
        Ok((response.map(EndpointBody::Raw), None))
    }

    /// Sends `request` through hyper's client to endpoint `index` (at `sent_at`) and waits for
    /// the response headers; the connection comes back with the response, to be released when
    /// its body ends. `upstream_timeout` runs from `sent_at` while the request body is not
    /// moving: it restarts as long as the client keeps uploading, so a large upload is not cut,
    /// and counts from the end of the body otherwise.
    pub(crate) async fn send(
        &self,
        index: usize,
        request: http::Request<UpBody>,
        timeout: Duration,
        sent_at: Instant,
        progress: Option<&Progress>,
    ) -> Result<(http::Response<EndpointBody>, Option<Pooled>), Failure> {
        let response = self.exchange(index, request);
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
        if let Some(raw) = &self.raw {
            raw.sweep();
        }
    }

    /// One request on an idle connection of the endpoint, or a new one. A request an idle
    /// connection could not take (it closed meanwhile) goes to the next one, untouched.
    async fn exchange(
        &self,
        index: usize,
        mut request: http::Request<UpBody>,
    ) -> Result<(http::Response<Incoming>, Pooled), Failure> {
        loop {
            let (mut idle, fresh) = match self.pool.take(index) {
                Some(idle) => (idle, false),
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
        let moving = Moving::new(stream, None);
        let moves = Arc::clone(&moving.moves);
        let (sender, conn) = http1::Builder::new()
            // One flat write per request, as on the listener side (src/node/http.rs).
            .writev(false)
            .handshake::<_, UpBody>(TokioIo::new(moving))
            .await
            .map_err(|e| {
                tracing::debug!(error = %e, "connect failed");
                Failure::Connect
            })?;
        let clock = Arc::new(AtomicU64::new(BUSY));
        let watch = Arc::clone(&clock);
        let (base, idle, stall) = (self.pool.base, self.pool.idle_timeout, self.stall_timeout);
        tokio::spawn(async move {
            let conn = conn.with_upgrades();
            let expiry = expire(base, idle, stall, &watch, &moves);
            tokio::pin!(conn, expiry);
            // The expiry timer is polled only when it fires (see `Watched`).
            if let First::Main(Err(e)) = Watched::new(conn, expiry).await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok(Idle { sender, clock })
    }
}

/// `Idle::clock` of a connection in use, before its response headers.
const BUSY: u64 = 0;

/// `Idle::clock` of a connection in use whose response headers came: its silence is watched.
const STREAMING: u64 = u64::MAX;

/// Milliseconds since `base`, plus one (never [`BUSY`], never [`STREAMING`]).
fn stamp(base: Instant) -> u64 {
    u64::try_from(base.elapsed().as_millis()).unwrap_or(u64::MAX - 2) + 1
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

/// Idle keep-alive connections per endpoint: at most `keepalive` each, last in first out.
struct Pool {
    slots: Box<[Mutex<Vec<Idle>>]>,
    keepalive: usize,
    base: Instant,
    idle_timeout: Duration,
}

/// One connection to an endpoint: its sender, and when it went idle ([`BUSY`] in use).
struct Idle {
    sender: http1::SendRequest<UpBody>,
    clock: Arc<AtomicU64>,
}

impl Pool {
    fn take(&self, index: usize) -> Option<Idle> {
        loop {
            let idle = self.slots[index].lock().ok()?.pop()?;
            if idle.sender.is_closed() {
                continue;
            }
            idle.clock.store(BUSY, Ordering::Relaxed);
            return Some(idle);
        }
    }

    fn put(&self, index: usize, idle: Idle) {
        if self.keepalive == 0 || idle.sender.is_closed() {
            return;
        }
        idle.clock.store(stamp(self.base), Ordering::Relaxed);
        if let Ok(mut slot) = self.slots[index].lock()
            && slot.len() < self.keepalive
        {
            slot.push(idle);
        }
    }
}

/// A connection carrying a response: back to the pool when the response ends
/// ([`Pooled::release`]), closed when dropped before.
pub(crate) struct Pooled {
    idle: Idle,
    pool: Arc<Pool>,
    index: usize,
}

impl Pooled {
    /// The response is over: the connection may take another request.
    pub(crate) fn release(self) {
        self.pool.put(self.index, self.idle);
    }
}

/// Why an attempt got no response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No connection (refused, unreachable, connect or TLS handshake timeout): nothing was sent.
    Connect,
    /// No response headers within `upstream_timeout`.
    Timeout,
    /// The connection broke after the request started.
    Broken,
    /// The response head is one gtd does not pass on: invalid, or over 64 KiB or 100 fields.
    /// Not counted against the endpoint, nor retried (nginx's default: `invalid_header` is not
    /// in `proxy_next_upstream`).
    BadResponse,
    /// No connection because this node is out of open files: not the endpoint's failure.
    Exhausted,
    /// The client's request body broke off (the client went away mid-upload): not the
    /// endpoint's failure.
    ClientGone,
    /// The client's request body stopped coming for `upstream_timeout` while the endpoint was
    /// waiting for it: not the endpoint's failure.
    ClientStalled,
}

/// The failure a connect error is: the endpoint's, or this node's lack of open files.
pub(crate) fn connect_failure(e: &io::Error) -> Failure {
    if crate::node::connect::exhausted(e) {
        Failure::Exhausted
    } else {
        Failure::Connect
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Failure::Connect => {
                "no connection (refused, unreachable, connect_timeout or a failed TLS handshake)"
            }
            Failure::Timeout => "no response head within upstream_timeout",
            Failure::Broken => "the connection broke during the request",
            Failure::BadResponse => "a response head that is invalid or too large",
            Failure::Exhausted => "this node is out of open files",
            Failure::ClientGone => "the client's request body broke off",
            Failure::ClientStalled => "the client's request body stalled",
        })
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
        let tcp =
            crate::node::connect::connect(address, self.source_ip, self.connect_timeout).await?;
        let _ = tcp.set_nodelay(true);
        Ok(tcp)
    }

    /// A connection to `address`, through TLS when the group asks for it (`host` names the
    /// endpoint for SNI).
    async fn open(&self, address: &Address, host: &str) -> io::Result<Stream> {
        let tcp = self.tcp(address).await?;
        let Some((connector, sni)) = &self.tls else {
            return Ok(Stream::Plain(tcp));
        };
        let name = tls::server_name(sni.as_deref(), host)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let handshake = connector.connect(name, tcp);
        let stream = tokio::time::timeout(self.connect_timeout, handshake)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
        Ok(Stream::Tls(Box::new(stream)))
    }
}

/// A connection to an endpoint, plain or TLS.
pub(crate) enum Stream {
    /// Cleartext.
    Plain(TcpStream),
    /// TLS (boxed: the session state is large).
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

// ------------------------------------------------------------------------------- request body

/// How far a request body got: shared between the body on its way up and the attempt waiting
/// for the response (to tell a slow upload from a silent endpoint).
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// When the last piece went up: nanoseconds since [`origin`], plus one (0: none yet).
    moved_at: AtomicU64,
    done: AtomicBool,
    /// The last read of the client's body found nothing yet (as opposed to the endpoint not
    /// taking what was read).
    awaiting_client: AtomicBool,
    /// Reading the client's body failed: the client went away or broke the framing.
    client_broke: AtomicBool,
}

impl Progress {
    /// When the last piece of the body went up, if one did.
    fn moved_at(&self) -> Option<Instant> {
        let nanos = self.moved_at.load(Ordering::Acquire).checked_sub(1)?;
        Some(origin() + Duration::from_nanos(nanos))
    }

    fn moved_now(&self) {
        let nanos = u64::try_from(origin().elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        self.moved_at.store(nanos + 1, Ordering::Release);
    }

    fn awaiting_client(&self) -> bool {
        !self.done.load(Ordering::Acquire) && self.awaiting_client.load(Ordering::Relaxed)
    }

    fn client_broke(&self) -> bool {
        self.client_broke.load(Ordering::Acquire)
    }
}

/// A request body of known size up to this many bytes is read whole before the first attempt,
/// so that a retry can send it again (as nginx buffers bodies in its `client_body_buffer_size`,
/// 16 KiB on 64-bit platforms); a larger or unsized one streams and is never replayed.
pub(crate) const WHOLE_BODY: u64 = 16 * 1024;

/// The client's request body, held between attempts. Requests without a body (most) cost
/// nothing here; a small body costs one buffer, a streamed one its progress cell and one
/// oneshot per attempt.
pub(crate) enum RequestBody {
    /// No body at all: every attempt sends an empty one.
    Empty,
    /// A small body, read whole (and its trailer fields): every attempt sends it.
    Whole(Bytes, Option<Box<http::HeaderMap>>),
    /// A body not yet handed on (a retry may still send it).
    Ready(Incoming, Arc<Progress>),
    /// Handed to an attempt, and not given back: it may be partly sent; never replayed.
    Gone(Arc<Progress>),
}

impl RequestBody {
    /// The body as received: `Empty` when it ends before it starts.
    pub(crate) fn new(body: Incoming) -> RequestBody {
        if body.is_end_stream() {
            RequestBody::Empty
        } else {
            RequestBody::Ready(body, Arc::default())
        }
    }

    /// True for a body to read whole before the first attempt ([`Self::read_whole`]): of known
    /// size, at most [`WHOLE_BODY`].
    pub(crate) fn small(&self) -> bool {
        matches!(self, RequestBody::Ready(body, _)
            if body.size_hint().exact().is_some_and(|n| n <= WHOLE_BODY))
    }

    /// Reads a [`Self::small`] body whole, the client leaving at most `silence` between two
    /// pieces; fails with the client's failure.
    pub(crate) async fn read_whole(&mut self, silence: Duration) -> Result<(), Failure> {
        let RequestBody::Ready(body, _) = self else {
            return Ok(());
        };
        let size = body.size_hint().lower().min(WHOLE_BODY);
        let mut data = bytes::BytesMut::with_capacity(size as usize);
        let mut trailers = None;
        loop {
            match tokio::time::timeout(silence, body.frame()).await {
                Err(_) => return Err(Failure::ClientStalled),
                Ok(Some(Err(_))) => return Err(Failure::ClientGone),
                Ok(None) => break,
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(piece) => data.extend_from_slice(&piece),
                    // Only what a trailer may carry: the names are declared towards the endpoint.
                    Err(frame) => {
                        trailers = frame
                            .into_trailers()
                            .ok()
                            .map(|t| Box::new(h1::trailing(t)))
                    }
                },
            }
        }
        *self = RequestBody::Whole(data.freeze(), trailers);
        Ok(())
    }

    /// True when another attempt can send the body (there is none, or it is untouched).
    pub(crate) fn replayable(&self) -> bool {
        !matches!(self, RequestBody::Gone(_))
    }

    /// How far the body got, once an attempt streams it (for `upstream_timeout`).
    pub(crate) fn progress(&self) -> Option<&Progress> {
        match self {
            RequestBody::Gone(p) => Some(p),
            _ => None,
        }
    }

    /// The names of a whole body's trailer fields, as a `Trailer` header declares them (hyper's
    /// client sends only declared ones, after a chunked body).
    pub(crate) fn trailer_names(&self) -> Option<http::HeaderValue> {
        let RequestBody::Whole(_, Some(fields)) = self else {
            return None;
        };
        let mut names = String::new();
        for name in fields.keys() {
            if !names.is_empty() {
                names.push_str(", ");
            }
            names.push_str(name.as_str());
        }
        http::HeaderValue::from_str(&names).ok()
    }

    /// The body for one attempt, and the way back for it if the attempt does not touch it.
    pub(crate) fn take(
        &mut self,
        bytes: &Counter,
    ) -> (UpBody, Option<oneshot::Receiver<Incoming>>) {
        if let RequestBody::Whole(data, trailers) = self {
            let whole = Whole {
                data: Some(data.clone()),
                trailers: trailers.clone(),
                bytes: bytes.clone(),
            };
            return (UpBody::Whole(whole), None);
        }
        match std::mem::replace(self, RequestBody::Empty) {
            RequestBody::Ready(inner, progress) => {
                *self = RequestBody::Gone(Arc::clone(&progress));
                let (tx, rx) = oneshot::channel();
                let body = ClientBody {
                    inner: Some(inner),
                    back: Some(tx),
                    streamed: false,
                    progress,
                    bytes: bytes.clone(),
                };
                (UpBody::Stream(body), Some(rx))
            }
            // Nothing to send, or nothing that may be sent again.
            other => {
                *self = other;
                (UpBody::Empty, None)
            }
        }
    }

    /// After an attempt: takes the body back if the attempt dropped it untouched.
    pub(crate) fn recover(&mut self, back: Option<oneshot::Receiver<Incoming>>) {
        if let RequestBody::Gone(progress) = self
            && let Some(mut rx) = back
            && let Ok(body) = rx.try_recv()
        {
            let progress = Arc::clone(progress);
            *self = RequestBody::Ready(body, progress);
        }
    }
}

/// What goes to the endpoint as the request body.
pub(crate) enum UpBody {
    /// Nothing.
    Empty,
    /// The client's small body, read whole: one frame, and its trailers.
    Whole(Whole),
    /// The client's body, streamed with backpressure.
    Stream(ClientBody),
}

/// A body read whole, on its way to one endpoint.
pub(crate) struct Whole {
    data: Option<Bytes>,
    trailers: Option<Box<http::HeaderMap>>,
    bytes: Counter,
}

/// The client's body on its way to one endpoint (see the module doc).
pub(crate) struct ClientBody {
    inner: Option<Incoming>,
    back: Option<oneshot::Sender<Incoming>>,
    streamed: bool,
    progress: Arc<Progress>,
    bytes: Counter,
}

impl Body for UpBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let b = match self.get_mut() {
            UpBody::Empty => return Poll::Ready(None),
            UpBody::Whole(w) => {
                if let Some(data) = w.data.take() {
                    w.bytes.increment(data.len() as u64);
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                return Poll::Ready(w.trailers.take().map(|t| Ok(Frame::trailers(*t))));
            }
            UpBody::Stream(b) => b,
        };
        let Some(inner) = b.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(&mut *inner).poll_frame(cx);
        b.progress
            .awaiting_client
            .store(polled.is_pending(), Ordering::Relaxed);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                b.streamed = true;
                if let Some(data) = frame.data_ref() {
                    b.bytes.increment(data.len() as u64);
                    b.progress.moved_now();
                }
                // hyper stops polling a body with a Content-Length once it has that many bytes,
                // so the final `None` may never come: the upload is over when the body says so.
                if inner.is_end_stream() {
                    b.progress.done.store(true, Ordering::Release);
                }
            }
            Poll::Ready(None) => b.progress.done.store(true, Ordering::Release),
            Poll::Ready(Some(Err(_))) => {
                b.streamed = true;
                b.progress.client_broke.store(true, Ordering::Release);
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpBody::Empty => true,
            UpBody::Whole(w) => w.data.is_none() && w.trailers.is_none(),
            UpBody::Stream(b) => b.inner.as_ref().is_none_or(Body::is_end_stream),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpBody::Empty => SizeHint::with_exact(0),
            // With trailers, no exact size: hyper then sends it chunked, trailers after.
            UpBody::Whole(w) if w.trailers.is_some() => SizeHint::default(),
            UpBody::Whole(w) => SizeHint::with_exact(w.data.as_ref().map_or(0, |d| d.len() as u64)),
            UpBody::Stream(b) => b.inner.as_ref().map(Body::size_hint).unwrap_or_default(),
        }
    }
}

impl Drop for ClientBody {
    fn drop(&mut self) {
        if !self.streamed
            && let (Some(inner), Some(back)) = (self.inner.take(), self.back.take())
        {
            // Untouched: give it back for a retry (ignored when nobody waits any more).
            let _ = back.send(inner);
        }
    }
}

// ------------------------------------------------------------------------------- upgrades

/// Relays an upgraded client connection and its endpoint connection both ways (half-close
/// honoured) until both sides are done or nothing has moved for `idle`. `pooled` (the endpoint
/// connection that answered `101`) is kept until hyper has handed it over; `pick` until the
/// end. `bytes` counts what the client sent and what the endpoint sent.
pub(crate) async fn tunnel(
    client: OnUpgrade,
    upstream: OnUpgrade,
    pooled: Option<Pooled>,
    pick: Pick,
    idle: Duration,
    bytes: [Counter; 2],
) {
    let (client, upstream) = tokio::join!(client, upstream);
    drop(pooled);
    let (client, upstream) = match (client, upstream) {
        (Ok(c), Ok(u)) => (c, u),
        (c, u) => {
            tracing::debug!(client = ?c.err(), endpoint = ?u.err(), "upgrade failed");
            return;
        }
    };
    let [up, down] = bytes;
    let mut client = Moving::new(TokioIo::new(client), Some(up));
    let mut upstream = Moving::new(TokioIo::new(upstream), Some(down));
    upstream.moves = Arc::clone(&client.moves);
    let moves = Arc::clone(&client.moves);
    let relay = tokio::io::copy_bidirectional(&mut client, &mut upstream);
    tokio::select! {
        r = relay => match r {
            Ok((sent, received)) => tracing::debug!(sent, received, endpoint = %pick.address(), "tunnel closed"),
            Err(e) => tracing::debug!(error = %e, endpoint = %pick.address(), "tunnel ended with an error"),
        },
        () = quiet(&moves, idle, None) => tracing::debug!(endpoint = %pick.address(), "tunnel idle; closed"),
    }
}

// ------------------------------------------------------------------------------- response body

/// The body of a response to the client.
// The relayed variant is the common one (every proxied response): boxing it would cost an
// allocation per request to save moving a few hundred bytes once.
#[allow(clippy::large_enum_variant)]
pub enum DownBody {
    /// gtd's own answer (404, 502, 503, 504), sent in one frame.
    Own(Option<Bytes>),
    /// The endpoint's body, streamed.
    Relayed(Relayed),
}

/// An endpoint's response body on its way to the client (see the module doc).
pub struct Relayed {
    inner: EndpointBody,
    pick: Option<Pick>,
    conn: Option<Pooled>,
    started: Instant,
    bytes: Counter,
}

impl Relayed {
    /// Wraps `inner`; `started` is when the attempt's request was sent.
    pub(crate) fn new(
        inner: EndpointBody,
        conn: Option<Pooled>,
        pick: Pick,
        started: Instant,
        bytes: Counter,
    ) -> Relayed {
        Relayed {
            inner,
            pick: Some(pick),
            conn,
            started,
            bytes,
        }
    }

    fn finish(&mut self) {
        if let Some(conn) = self.conn.take() {
            conn.release();
        }
        if let Some(pick) = self.pick.take()
            && pick.measures(Measure::LastByte)
        {
            pick.record_timing(Measure::LastByte, self.started.elapsed());
        }
    }
}

impl Drop for Relayed {
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            self.finish();
        }
    }
}

impl DownBody {
    /// gtd's own short answer.
    pub(crate) fn own(text: &'static str) -> DownBody {
        DownBody::Own(Some(Bytes::from_static(text.as_bytes())))
    }
}

/// An endpoint's response body, from hyper's client connection or gtd's own client.
pub enum EndpointBody {
    /// Through hyper (requests with a body, TLS endpoints, upgrades).
    Hyper(Incoming),
    /// Through [`super::client`].
    Raw(RawBody),
}

impl Body for EndpointBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            // gtd's own client drops what a trailer may not carry as it reads; hyper's keeps it.
            EndpointBody::Hyper(b) => match Pin::new(b).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    Poll::Ready(Some(Ok(match frame.into_trailers() {
                        Ok(fields) => Frame::trailers(h1::trailing(fields)),
                        Err(frame) => frame,
                    })))
                }
                polled => polled.map_err(Into::into),
            },
            EndpointBody::Raw(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            EndpointBody::Hyper(b) => b.is_end_stream(),
            EndpointBody::Raw(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            EndpointBody::Hyper(b) => b.size_hint(),
            EndpointBody::Raw(b) => b.size_hint(),
        }
    }
}

impl Body for DownBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            DownBody::Own(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            DownBody::Relayed(r) => {
                let polled = Pin::new(&mut r.inner).poll_frame(cx);
                match &polled {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Some(data) = frame.data_ref() {
                            r.bytes.increment(data.len() as u64);
                        }
                        // Trailers are the last frame, though hyper's chunked body does not say
                        // it has ended until it is polled once more (and its servers stop
                        // polling after them).
                        if frame.is_trailers() || r.inner.is_end_stream() {
                            r.finish();
                        }
                    }
                    Poll::Ready(None) => r.finish(),
                    // A broken upstream body: the client sees the stream cut; the pick is
                    // released without a timing.
                    Poll::Ready(Some(Err(_))) => {
                        r.pick = None;
                        r.conn = None;
                    }
                    Poll::Pending => {}
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            DownBody::Own(data) => data.is_none(),
            DownBody::Relayed(r) => r.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            DownBody::Own(data) => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            DownBody::Relayed(r) => r.inner.size_hint(),
        }
    }
}
