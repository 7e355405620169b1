//! The connection side of HTTP listeners: one accepted connection is served by hyper (HTTP/1.1
//! and HTTP/2; h2c prior knowledge on cleartext, ALPN on TLS) after the TLS handshake, with the
//! timers hyper lacks (the first byte and request head within `header_timeout`, idle
//! connections closed after `idle_timeout`, the node's stop), until it closes. Each request is
//! handed to [`super::proxy::proxy`].

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;

use gtd_core::config::{Listener, Protocol};

use super::bodies::DownBody;
use crate::Inner;
use crate::accept::Admitted;
use crate::snapshot::ListenerState;
use crate::timers::{First, HeadTimer, Moving, Watched, quiet, reads};

use super::answers::{PLAIN_TO_HTTPS, answer_and_close, class};
use super::conn::{Conn, Exchange};
use super::proxy::proxy;
use super::state::{HttpState, MAX_HEAD};

/// Serves one accepted connection of an HTTP or HTTPS listener until it closes (or the node
/// stops: then in-flight requests finish and idle connections close).
///
/// A cleartext HTTP/1 connection that rests between requests is parked: this task ends, and a
/// task of its own ([`parked`]) holds what a parked connection needs (its socket and the
/// timers of [`rest`]) and nothing of what served it (docs/performance.md, the cost of a
/// connection).
pub(crate) async fn serve(node: Arc<Inner>, held: Admitted, stream: TcpStream, peer: SocketAddr) {
    let l = held.listener();
    let Some(http) = l.http.as_deref() else {
        return;
    };
    if let Some(rested) = open(&node, l, http, stream, peer).await {
        let tracker = node.tracker.clone();
        tracker.spawn(parked(node, held, rested));
    }
}

/// A parked connection's task, from its first rest until it closes: served again (the serving
/// state boxed, so that it does not size this task) whenever bytes arrive. (A block rather
/// than an `async fn`, whose arguments would take room twice in the task.)
#[allow(clippy::manual_async_fn)]
fn parked(
    node: Arc<Inner>,
    held: Admitted,
    mut stream: Parked,
) -> impl Future<Output = ()> + Send + 'static {
    // The listener and its HTTP state are looked up again after each wait rather than kept
    // across it: every reference kept takes room in the task.
    async move {
        loop {
            parked_now(&held, 1.0);
            let woken = rest(&node, held.listener(), &stream).await;
            parked_now(&held, -1.0);
            let l = held.listener();
            let (true, Some(http)) = (woken, l.http.as_deref()) else {
                return;
            };
            match Box::pin(serve_h1(&node, l, http, stream)).await {
                Some(s) => stream = s,
                None => return,
            }
        }
    }
}

/// Counts a connection in (`1.0`) or out of (`-1.0`) its listener's parked connections.
fn parked_now(held: &Admitted, by: f64) {
    if let Some(http) = held.listener().http.as_deref() {
        http.parked.increment(by);
    }
}

/// Serves a connection from its opening until it closes, or, for a cleartext HTTP/1
/// connection, until it is first parked (returned).
async fn open(
    node: &Arc<Inner>,
    l: &ListenerState,
    http: &HttpState,
    stream: TcpStream,
    peer: SocketAddr,
) -> Option<Parked> {
    let _ = stream.set_nodelay(true);
    // hyper's protocol detection and rustls both wait for bytes without a timer: bound the wait
    // for the first one; from there the handshake timeout, HTTP/1's header_read_timeout (or
    // HTTP/2) take over.
    let first_bytes_by = tokio::time::Instant::now() + l.cfg.header_timeout;
    let place = l.locate(peer.ip().to_canonical());
    l.count_client(place.as_ref());
    let moves = Arc::new(AtomicU64::new(0));
    let conn = Arc::new(Conn::new(
        peer,
        place,
        l.cfg.port,
        l.cfg.protocol == Protocol::Https,
        Arc::clone(&moves),
    ));
    let mut first = [0_u8; PREFACE.len()];
    let seen = opening(&stream, &mut first, first_bytes_by).await?;
    match &http.tls {
        // A TLS connection starts with a handshake record (22); a letter is a plaintext request,
        // which gets a 400 saying so, as nginx answers it, instead of a closed connection.
        Some(_) if first[0].is_ascii_alphabetic() => {
            http.own[class(StatusCode::BAD_REQUEST)].increment(1);
            answer_and_close(stream, PLAIN_TO_HTTPS).await;
        }
        Some(acceptor) => {
            let service = service(node, &conn);
            let opened = (moves, first_bytes_by);
            // Boxed, as every branch: one branch's state would otherwise size every
            // connection's task (a TLS connection's the largest).
            Box::pin(serve_tls(
                node, l, http, acceptor, stream, opened, service, &conn,
            ))
            .await;
        }
        // HTTP/2 with prior knowledge: hyper's HTTP/2 server.
        None if first[..seen] == PREFACE[..] => {
            let stream = Moving::sharing(stream, moves);
            let moves = Arc::clone(&stream.moves);
            let builder = http.server.clone().http2_only();
            let io = TokioIo::new(stream);
            let service = service(node, &conn);
            Box::pin(run(
                node,
                l,
                &builder,
                io,
                service,
                &moves,
                first_bytes_by,
                &conn,
            ))
            .await;
        }
        None => {
            let stream = Parked {
                io: Moving::sharing(stream, moves),
                conn,
            };
            return Box::pin(serve_h1(node, l, http, stream)).await;
        }
    }
    relay_upgraded(&conn).await;
    None
}

/// An upgraded request took the connection over: relays it here, so it stays counted.
async fn relay_upgraded(conn: &Conn) {
    if let Some(relay) = conn.upgraded() {
        relay.await;
    }
}

/// What serves each request of connection `conn`: [`proxy`], with the connection's counts.
fn service(
    node: &Arc<Inner>,
    conn: &Arc<Conn>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<DownBody>,
    Error = h2::Error,
    Future: Send + 'static,
> + Clone
+ Send
+ Unpin
+ 'static {
    let (node, conn) = (Arc::clone(node), Arc::clone(conn));
    hyper::service::service_fn(move |req| {
        // Here, not in `proxy`: HTTP/2 runs that in a task of its own, maybe after the watchdog.
        conn.asked.store(true, Ordering::Relaxed);
        if req.version() == http::Version::HTTP_2 {
            conn.h2.store(true, Ordering::Relaxed);
        }
        if node.draining.load(Ordering::Relaxed) {
            conn.drain_wake.notify_one();
        }
        let exchange = Exchange::start(&conn);
        proxy(Arc::clone(&node), Arc::clone(&conn), req, exchange)
    })
}

/// Serves one connection of an HTTPS listener: the TLS handshake (by the connection's
/// first-bytes deadline), then HTTP/2 when ALPN chose it, else HTTP/1.1.
#[allow(clippy::too_many_arguments)]
async fn serve_tls<S>(
    node: &Arc<Inner>,
    l: &ListenerState,
    http: &HttpState,
    acceptor: &tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    (moves, first_bytes_by): (Arc<AtomicU64>, tokio::time::Instant),
    service: S,
    own_conn: &Conn,
) where
    S: hyper::service::Service<Request<Incoming>, Response = Response<DownBody>, Error = h2::Error>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let peer = own_conn.client;
    let stream = Moving::sharing(stream, moves);
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
    own_conn.h2.store(h2, Ordering::Relaxed);
    // HTTP/2 over TLS needs ALPN (RFC 9113); without it the client speaks HTTP/1.1.
    let builder = if h2 {
        http.server.clone().http2_only()
    } else {
        with_head_timer(&http.server, &moves, &l.cfg).http1_only()
    };
    let io = TokioIo::new(stream);
    run(
        node,
        l,
        &builder,
        io,
        service,
        &moves,
        first_bytes_by,
        own_conn,
    )
    .await;
}

/// The listener's server settings with a timer of the connection's own for HTTP/1's
/// `header_timeout` (see [`HeadTimer`]): a timer registered once per connection rather than
/// once per request, which also lets a kept-alive connection rest for `idle_timeout` between
/// requests.
pub(super) fn with_head_timer(
    server: &auto::Builder<TokioExecutor>,
    moves: &Arc<AtomicU64>,
    l: &Listener,
) -> auto::Builder<TokioExecutor> {
    let (header, idle) = (l.header_timeout, l.idle_timeout);
    let mut server = server.clone();
    server
        .http1()
        .timer(HeadTimer::new(Arc::clone(moves), header, idle, false));
    server
}

/// Serves one connection until it closes, the node stops (in-flight requests finish), or no
/// byte has moved on it for the listener's `idle_timeout` while no request was waiting for its
/// response headers (then it is shut down gracefully, for at most another `idle_timeout`: an
/// idle HTTP/2 connection gets its GOAWAY, a client that stopped reading its response is let
/// go). A connection on which no whole request head has come by `first_by` is closed:
/// HTTP/1's header timer does that for every head, this does it for HTTP/2, whose first
/// HEADERS (or CONTINUATION) frames could otherwise trickle in for as long as the idle watchdog
/// allows.
#[allow(clippy::too_many_arguments)]
pub(super) async fn run<I, S>(
    node: &Inner,
    l: &ListenerState,
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    service: S,
    moves: &AtomicU64,
    first_by: tokio::time::Instant,
    conn_state: &Conn,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::Service<Request<Incoming>, Response = Response<DownBody>, Error = h2::Error>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let idle = l.cfg.idle_timeout;
    let conn = builder.serve_connection_with_upgrades(io, service);
    tokio::pin!(conn);
    // The node's stop and the idle watchdog are polled only when they fire (see `Watched`).
    let unasked = async {
        tokio::time::sleep_until(first_by).await;
        if conn_state.asked.load(Ordering::Relaxed) {
            std::future::pending::<()>().await;
        }
    };
    let watch = async {
        tokio::select! {
            () = node.stop.cancelled() => Watchdog::Stop,
            () = quiet(moves, idle, Some(&conn_state.inflight)) => Watchdog::Idle,
            () = unasked => Watchdog::Unasked,
            () = conn_state.listener_gone.notified() => Watchdog::Gone,
        }
    };
    tokio::pin!(watch);
    match Watched::new(conn.as_mut(), watch.as_mut()).await {
        First::Main(r) => ended(r),
        First::Watch(dog) => watchdog(l, conn, dog, conn_state).await,
    }
}

/// How long a stopping node keeps an idle HTTP/1 connection open for a request that may be on
/// its way (bounded by the listener's `drain_timeout`).
pub(crate) const IDLE_DRAIN_GRACE: Duration = Duration::from_secs(2);

fn ended<E: std::fmt::Display>(result: Result<(), E>) {
    if let Err(e) = result {
        tracing::debug!(error = %e, "http connection ended with an error");
    }
}

/// Why a connection's watchdog fired.
pub(super) enum Watchdog {
    /// The node is stopping.
    Stop,
    /// Nothing moved for `idle_timeout` with no request waiting.
    Idle,
    /// No request head came within `header_timeout` of the opening.
    Unasked,
    /// A request found no HTTP listener on the port any more.
    Gone,
}

/// The opening of an HTTP/2 connection with prior knowledge (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Waits, until `by`, for the connection's first bytes, without reading them: enough to tell
/// an HTTP/2 preface from an HTTP/1 request (or a TLS handshake). Returns how many of `buf`
/// were filled; `None` when nothing came in time or the client left.
async fn opening(
    stream: &TcpStream,
    buf: &mut [u8; PREFACE.len()],
    by: tokio::time::Instant,
) -> Option<usize> {
    loop {
        let n = match tokio::time::timeout_at(by, stream.peek(buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return None,
        };
        // Decided: the whole preface, or a byte that is not the preface's.
        if n == buf.len() || buf[..n] != PREFACE[..n] {
            return Some(n);
        }
        // A client that sent part of the preface so far (a peek returns the same bytes again
        // at once): look again shortly.
        if tokio::time::timeout_at(by, tokio::time::sleep(Duration::from_millis(5)))
            .await
            .is_err()
        {
            return None;
        }
    }
}

/// The longest an HTTP/1 connection rests between requests before it is parked: hyper's state
/// for it (a read buffer of 8 to 16 KiB, a write buffer of 8 KiB, its dispatcher) is dropped,
/// and only the socket is kept until the next request's bytes arrive (docs/performance.md, the
/// cost of a connection). A connection is looked at every [`PARK_FIRST`] at first and parked
/// when nothing moved since the last look; each look that finds it busy doubles the wait, up
/// to this. Under load a connection's next request comes sooner, so it is never parked and
/// pays nothing for it but a timer a second.
pub const PARK_AFTER: Duration = Duration::from_secs(1);

/// The shortest rest before an HTTP/1 connection is parked (see [`PARK_AFTER`]): short enough
/// that a burst of clients that each ask once does not hold a second's worth of hyper's
/// buffers at once (docs/performance.md, a parked connection's own task). A client that asks
/// again after more than this (and under [`PARK_AFTER`]) finds its connection parked and pays
/// for hyper's state being made again: about half a request's instructions.
const PARK_FIRST: Duration = Duration::from_millis(250);

/// Serves one cleartext HTTP/1 connection with hyper's HTTP/1 server until it closes
/// (`None`) or rests (at most [`PARK_AFTER`]) between exchanges (returned, to be parked by
/// [`serve`]): nothing in flight, nothing unflushed, no byte read since the last exchange
/// ended. A parked connection holds its socket and its task; when bytes arrive, this serves
/// them with a new hyper connection, under the same timers (the idle watchdog,
/// `header_timeout` through a [`HeadTimer`], the node's stop).
async fn serve_h1(
    node: &Arc<Inner>,
    l: &ListenerState,
    http: &HttpState,
    parked: Parked,
) -> Option<Parked> {
    let conn = Arc::clone(&parked.conn);
    let mut stream = Parkable::new(parked);
    let mut builder = http.h1.clone();
    // After a rest, the head hyper waits for is a later one (keep-alive rest, then
    // header_timeout once its bytes come), as it was before the connection was parked.
    builder.timer(HeadTimer::new(
        Arc::clone(&conn.moves),
        l.cfg.header_timeout,
        l.cfg.idle_timeout,
        conn.asked.load(Ordering::Relaxed),
    ));
    let service = service(node, &conn);
    // Bytes of a next request that hyper had read when the connection was parked: a parked
    // connection with such bytes is served again at once and not parked again (so that a
    // stalled request head meets header_timeout, hyper's own timer).
    let mut may_park = true;
    loop {
        match busy(node, l, &builder, stream, service.clone(), &conn, may_park).await {
            Busy::Ended => break,
            Busy::Read(s) => {
                stream = s;
                may_park = false;
            }
            Busy::Rested(s) => {
                return Some(Parked {
                    io: s.io,
                    conn: s.conn,
                });
            }
        }
    }
    relay_upgraded(&conn).await;
    None
}

/// How a connection's service by hyper ended.
enum Busy {
    /// The connection is done (closed, or shut down by a watchdog).
    Ended,
    /// Parked with bytes of a next request hyper had read: to be served again at once.
    Read(Parkable),
    /// Parked, rested (see [`PARK_AFTER`]): to wait for bytes.
    Rested(Parkable),
}

/// Serves the connection with hyper until it ends or rests (see [`PARK_AFTER`]; when
/// `may_park`), under the connection's watchdogs.
async fn busy<S>(
    node: &Inner,
    l: &ListenerState,
    builder: &hyper::server::conn::http1::Builder,
    stream: Parkable,
    service: S,
    conn_state: &Conn,
    may_park: bool,
) -> Busy
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<DownBody>, Error = h2::Error>
        + Clone
        + Send
        + Unpin
        + 'static,
    S::Future: Send + 'static,
{
    let moves = &*conn_state.moves;
    // Unpin: no box, and taken apart by value when it is parked.
    let mut conn = builder
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    // Looked at every PARK_FIRST, and parked when nothing moved since the last look (the first
    // look sees the exchange that opened or woke the connection: it is not counted as busy);
    // each later look that finds it busy doubles the wait, up to PARK_AFTER, so that a
    // connection under load costs one timer a second.
    let parked = async {
        let (mut period, mut seen) = (PARK_FIRST, moves.load(Ordering::Relaxed));
        let mut first = true;
        loop {
            tokio::time::sleep(period).await;
            let now = moves.load(Ordering::Relaxed);
            if now == seen && may_park && parkable(conn_state) {
                return;
            }
            if !std::mem::take(&mut first) {
                period = (period * 2).min(PARK_AFTER);
            }
            seen = now;
        }
    };
    let watch = async {
        tokio::select! {
            () = node.stop.cancelled() => Some(Watchdog::Stop),
            () = quiet(moves, l.cfg.idle_timeout, Some(&conn_state.inflight)) => Some(Watchdog::Idle),
            () = conn_state.listener_gone.notified() => Some(Watchdog::Gone),
            () = parked => None,
        }
    };
    tokio::pin!(watch);
    let outcome = match Watched::new(Pin::new(&mut conn), watch.as_mut()).await {
        First::Main(r) => {
            ended(r);
            return Busy::Ended;
        }
        First::Watch(w) => w,
    };
    let Some(dog) = outcome else {
        // Parked: hyper's state goes, the socket stays.
        let Some(parts) = conn.into_parts() else {
            return Busy::Ended;
        };
        let mut stream = parts.io.into_inner();
        if parts.read_buf.is_empty() {
            return Busy::Rested(stream);
        }
        stream.prefix = Some(Box::new(parts.read_buf));
        return Busy::Read(stream);
    };
    watchdog(l, Pin::new(&mut conn), dog, conn_state).await;
    Busy::Ended
}

/// Between exchanges, as far as its counts tell: no request in flight or answered in part,
/// nothing hyper wrote left unflushed, no byte read since the last exchange ended.
fn parkable(c: &Conn) -> bool {
    c.exchanges.load(Ordering::Relaxed) == 0
        && c.inflight.load(Ordering::Relaxed) == 0
        && !c.unflushed.load(Ordering::Relaxed)
        && reads(c.moves.load(Ordering::Relaxed)) == c.ended_at.load(Ordering::Relaxed)
}

/// A parked connection's rest: true when bytes (or the client's end) arrived, false when it is
/// to close (it rested for `idle_timeout`, or the node stops and no request came within the
/// grace a stopping node gives an idle connection). One timer serves both waits: this is what
/// a parked connection's task holds.
async fn rest(node: &Inner, l: &ListenerState, stream: &Parked) -> bool {
    let mut stopping = false;
    // Nothing moves on a parked connection: its idle_timeout runs from the rest's start.
    let timer = tokio::time::sleep(l.cfg.idle_timeout);
    tokio::pin!(timer);
    loop {
        // The socket's own waker slot (no waiter of this future's): hyper's connection, which
        // used it, is gone while the connection rests.
        let readable = std::future::poll_fn(|cx| stream.io.get_ref().poll_read_ready(cx));
        tokio::select! {
            r = readable => return r.is_ok(),
            () = node.stop.cancelled(), if !stopping => {
                stopping = true;
                let grace = IDLE_DRAIN_GRACE.min(l.cfg.drain_timeout);
                timer.as_mut().reset(tokio::time::Instant::now() + grace);
            }
            () = timer.as_mut() => return false,
        }
    }
}

/// What a watchdog's firing does to a connection being served. The node's stop: what this
/// listener's `drain_timeout` leaves of the drain, then the connection is dropped, its requests
/// with it (each writes its access-log line). An idle HTTP/1 connection closed at once could
/// cross a request the client is sending (lost, and not retried when it is a POST): it stays
/// open for a moment, and a request that comes is answered with `Connection: close` (hyper adds
/// it once keep-alive is off); HTTP/2 gets its GOAWAY at once. The other watchdogs shut the
/// connection down gracefully (HTTP/2: GOAWAY, which tells a browser's unused preconnection
/// why), for at most another `idle_timeout`, or a second when no request ever came or its
/// listener is gone (HTTP/1: the 503 went out with `Connection: close`).
async fn watchdog<C, E>(l: &ListenerState, mut conn: Pin<&mut C>, dog: Watchdog, conn_state: &Conn)
where
    C: Future<Output = Result<(), E>> + Graceful + ?Sized,
    E: std::fmt::Display,
{
    if let Watchdog::Stop = dog {
        let cut = tokio::time::Instant::now() + l.cfg.drain_timeout;
        if !conn_state.h2.load(Ordering::Relaxed)
            && conn_state.inflight.load(Ordering::Relaxed) == 0
        {
            let grace = IDLE_DRAIN_GRACE.min(l.cfg.drain_timeout);
            tokio::select! {
                r = conn.as_mut() => return ended(r),
                () = conn_state.drain_wake.notified() => {}
                () = tokio::time::sleep(grace) => {}
            }
        }
        conn.as_mut().shut_down();
        match tokio::time::timeout_at(cut, conn).await {
            Ok(r) => ended(r),
            Err(_) => tracing::debug!(listener = %l.cfg.name, "drain_timeout: connection cut"),
        }
        return;
    }
    let (why, grace) = match dog {
        Watchdog::Unasked => (
            "no request head within header_timeout",
            Duration::from_secs(1),
        ),
        Watchdog::Gone => ("its listener is gone", Duration::from_secs(1)),
        _ => ("idle client connection", l.cfg.idle_timeout),
    };
    tracing::debug!(listener = %l.cfg.name, why, "shutting the connection down");
    conn.as_mut().shut_down();
    if let Ok(r) = tokio::time::timeout(grace, conn).await {
        ended(r);
    }
}

/// A connection hyper can be asked to close gracefully.
trait Graceful {
    fn shut_down(self: Pin<&mut Self>);
}

impl<I, S> Graceful for hyper::server::conn::http1::UpgradeableConnection<I, S>
where
    S: hyper::service::HttpService<Incoming>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::ResBody: hyper::body::Body + 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn shut_down(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl<I, S, E> Graceful for auto::UpgradeableConnection<'_, I, S, E>
where
    S: hyper::service::HttpService<Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::ResBody: hyper::body::Body + Send + 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, S::ResBody>,
{
    fn shut_down(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// A cleartext HTTP/1 client connection as hyper's HTTP/1 server sees it: the counted socket,
/// the bytes of a next request hyper had read when the connection was last parked (served
/// first), and whether hyper left written bytes unflushed ([`Conn::unflushed`]).
pub(super) struct Parkable {
    io: Moving<TcpStream>,
    /// Boxed: it is rare, and a parked connection's task holds this struct.
    prefix: Option<Box<Bytes>>,
    conn: Arc<Conn>,
    /// Bytes read since the exchange that ended at move count `head_from` (the next head's).
    head_bytes: u32,
    head_from: u32,
}

impl Parkable {
    fn new(Parked { io, conn }: Parked) -> Parkable {
        Parkable {
            io,
            prefix: None,
            conn,
            head_bytes: 0,
            head_from: 0,
        }
    }
}

/// What a parked connection keeps: its socket and its [`Conn`]. (Nothing of [`Parkable`]'s
/// head count: a connection is parked only with no byte read since its last exchange ended.)
pub(super) struct Parked {
    io: Moving<TcpStream>,
    conn: Arc<Conn>,
}

impl AsyncRead for Parkable {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if let Some(prefix) = &mut this.prefix {
            let n = prefix.len().min(buf.remaining());
            buf.put_slice(&prefix[..n]);
            prefix.advance(n);
            // A read as any other: the head timer sees a head begun (header_timeout, not the
            // keep-alive rest), the idle watchdog a move.
            this.io.moves.fetch_add(1, Ordering::Relaxed);
            if prefix.is_empty() {
                this.prefix = None;
            }
            return Poll::Ready(Ok(()));
        }
        // While a request head is read (no exchange open), reads stop at MAX_HEAD bytes since
        // the last exchange ended: hyper checks its 64 KiB limit (`max_buf_size`) only while a
        // head is incomplete, so a read crossing the limit that completed the head would pass
        // a 70 KiB head whole.
        let mut limit = usize::MAX;
        if this.conn.exchanges.load(Ordering::Relaxed) == 0 {
            let ended = this.conn.ended_at.load(Ordering::Relaxed);
            if ended != this.head_from {
                this.head_from = ended;
                this.head_bytes = 0;
            }
            limit = MAX_HEAD
                .saturating_sub(this.head_bytes as usize)
                .min(HEAD_READ);
        }
        if limit > 0 && buf.remaining() > limit {
            let mut head = [0_u8; HEAD_READ];
            let mut part = ReadBuf::new(&mut head[..limit]);
            let read = Pin::new(&mut this.io).poll_read(cx, &mut part);
            this.head_bytes += part.filled().len() as u32; // at most HEAD_READ
            buf.put_slice(part.filled());
            return read;
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        // Saturating: past MAX_HEAD the count only has to stay there (a body may be long).
        let n = u32::try_from(buf.filled().len() - before).unwrap_or(u32::MAX);
        this.head_bytes = this.head_bytes.saturating_add(n);
        read
    }
}

/// The most of a request head read at once (see [`Parkable`]'s `poll_read`).
const HEAD_READ: usize = 16 * 1024;

impl AsyncWrite for Parkable {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.conn.unflushed.store(true, Ordering::Relaxed);
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        match written {
            Poll::Ready(Ok(n)) => this.conn.unwritten(buf.len() - n, cx),
            Poll::Pending => this.conn.slowed(),
            Poll::Ready(Err(_)) => {}
        }
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.conn.unflushed.store(true, Ordering::Relaxed);
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        match written {
            Poll::Ready(Ok(n)) => {
                // What these slices leave (hyper's queue may hold more: a looser bound).
                let asked: usize = bufs.iter().map(|b| b.len()).sum();
                this.conn.unwritten(asked.saturating_sub(n), cx);
            }
            Poll::Pending => this.conn.slowed(),
            Poll::Ready(Err(_)) => {}
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let flushed = Pin::new(&mut this.io).poll_flush(cx);
        if let Poll::Ready(Ok(())) = flushed {
            this.conn.unflushed.store(false, Ordering::Relaxed);
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
