//! The connection side of HTTP listeners: one accepted connection is served by hyper (HTTP/1.1
//! and HTTP/2; h2c prior knowledge on cleartext, ALPN on TLS) after the TLS handshake, with the
//! timers hyper lacks (the first byte and request head within `header_timeout`, idle
//! connections closed after `idle_timeout`, the node's stop), until it closes. Each request is
//! handed to [`super::proxy::proxy`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;

use gtd_core::config::{Listener, Protocol};

use super::bodies::DownBody;
use crate::Inner;
use crate::snapshot::ListenerState;
use crate::timers::{First, HeadTimer, Moving, Watched, quiet};

use super::answers::{PLAIN_TO_HTTPS, answer_and_close, class};
use super::conn::Conn;
use super::proxy::proxy;
use super::state::HttpState;

/// Serves one accepted connection of an HTTP or HTTPS listener until it closes (or the node
/// stops: then in-flight requests finish and idle connections close).
pub(crate) async fn serve(
    node: &Arc<Inner>,
    l: &ListenerState,
    stream: TcpStream,
    peer: SocketAddr,
) {
    let Some(http) = HttpState::of(l) else { return };
    let _ = stream.set_nodelay(true);
    // hyper's protocol detection and rustls both wait for bytes without a timer: bound the wait
    // for the first one; from there the handshake timeout, HTTP/1's header_read_timeout (or
    // HTTP/2) take over.
    let first_bytes_by = tokio::time::Instant::now() + l.cfg.header_timeout;
    let place = l.locate(peer.ip().to_canonical());
    l.count_client(place.as_ref());
    let conn = Arc::new(Conn::new(
        peer,
        place,
        l.cfg.port,
        l.cfg.protocol == Protocol::Https,
        first_bytes_by,
    ));
    let own_conn = Arc::clone(&conn);
    let service_node = Arc::clone(node);
    let service = hyper::service::service_fn(move |req| {
        // Here, not in `proxy`: HTTP/2 runs that in a task of its own, maybe after the watchdog.
        conn.asked.store(true, Ordering::Relaxed);
        if req.version() == http::Version::HTTP_2 {
            conn.h2.store(true, Ordering::Relaxed);
        }
        if service_node.draining.load(Ordering::Relaxed) {
            conn.drain_wake.notify_one();
        }
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
            answer_and_close(stream, PLAIN_TO_HTTPS).await;
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
            own_conn.h2.store(h2, Ordering::Relaxed);
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
pub(super) fn with_head_timer(
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
pub(super) async fn run<I, S>(
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
            () = conn_state.listener_gone.notified() => Watchdog::Gone,
        }
    };
    tokio::pin!(watch);
    let result = match Watched::new(conn.as_mut(), watch.as_mut()).await {
        First::Main(r) => r,
        First::Watch(Watchdog::Stop) => {
            // What this listener's `drain_timeout` leaves of the node's drain: the connection
            // is dropped then, its requests with it (each writes its access-log line).
            let cut = tokio::time::Instant::now() + l.cfg.drain_timeout;
            // An idle HTTP/1 connection closed now could cross a request the client is sending
            // (lost, and not retried when it is a POST): it stays open for a moment, and a
            // request that comes is answered with `Connection: close` (hyper adds it once keep-
            // alive is off). HTTP/2 gets its GOAWAY at once; a request in flight ends with
            // `Connection: close`.
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
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout_at(cut, conn).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::debug!(listener = %l.cfg.name, "drain_timeout: connection cut");
                    return;
                }
            }
        }
        // Shut down gracefully (HTTP/2: GOAWAY, which tells a browser's unused preconnection
        // why), for at most another idle_timeout, or a second when no request ever came.
        First::Watch(dog) => {
            let (why, grace) = match dog {
                Watchdog::Unasked => (
                    "no request head within header_timeout",
                    Duration::from_secs(1),
                ),
                // HTTP/1: the 503 goes out with `Connection: close`; HTTP/2: GOAWAY. The
                // client's next request opens a new connection, which the port now refuses or
                // its new listener serves.
                Watchdog::Gone => ("its listener is gone", Duration::from_secs(1)),
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
    ended(result);
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
