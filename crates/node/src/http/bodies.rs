//! The bodies that stream through gtd in both directions, and upgraded connections:
//!
//! - `RequestBody`: the client's request body on its way to an endpoint — a small one read
//!   whole first (so a retry can send it again), a larger one streamed as `ClientBody`, which
//!   remembers whether a frame was ever handed on; if the attempt fails before that, dropping it
//!   gives the untouched body back (through a oneshot) so a retry can send it again. A body of
//!   which any byte left is never replayed. `Progress` tells the upstream whether the client
//!   or the endpoint is the slow one.
//! - `tunnel`: an upgraded (`101`) client connection and its endpoint connection, relayed.
//! - [`DownBody`]: the response towards the client: either gtd's own short answer or the
//!   endpoint's body, which holds the attempt's [`Pick`] (so `least_conn` counts the request
//!   until its response ends) and reports `least_time`'s `last_byte` timing when it ends; with
//!   the access log on, it also carries the request's line, counts the bytes it sends into it
//!   and sends it when dropped.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use metrics::Counter;

use tokio::sync::oneshot;

use gtd_core::balance::Pick;
use gtd_core::config::Measure;

use super::access::Line;
use super::client::{BoxError, RawBody};
use super::conn::PIECE;
use super::h1;
pub(crate) use super::progress::Progress;
use crate::timers::{Moving, quiet};

use super::failure::Failure;
use super::pool::{KeepAlive, Reusable};

// ------------------------------------------------------------------------------- pooled connections

/// `Idle::clock` of a connection in use, before its response headers.
pub(super) const BUSY: u64 = 0;

/// `Idle::clock` of a connection in use whose response headers came: its silence is watched.
pub(super) const STREAMING: u64 = u64::MAX;

/// The group's keep-alive pool of hyper connections.
pub(super) type Pool = KeepAlive<Idle>;

/// One connection to an endpoint: its sender, when it went idle ([`BUSY`] in use), and its
/// socket (looked at before it is reused).
pub(super) struct Idle {
    pub(super) sender: http1::SendRequest<UpBody>,
    pub(super) clock: Arc<AtomicU64>,
    pub(super) socket: Arc<Socket>,
}

impl Reusable for Idle {
    fn reusable(&self) -> bool {
        !self.sender.is_closed()
    }

    /// hyper's task closes the connection on any byte or end it reads while idle; bytes it
    /// has not read yet are seen on the socket.
    fn quiet(&self) -> bool {
        super::client::quiet(&self.socket.tcp)
    }
}

/// The socket of a connection through hyper's client, shared with its pool entry (see
/// [`super::upstream::Shared`]).
pub(crate) struct Socket {
    pub(crate) tcp: tokio::net::TcpStream,
    /// Taken from the pool: the next write first checks that nothing came meanwhile.
    pub(crate) reused: AtomicBool,
}

/// A connection carrying a response: back to the pool when the response ends
/// ([`Pooled::release`]), closed when dropped before.
pub(crate) struct Pooled {
    pub(super) idle: Idle,
    pub(super) pool: Arc<Pool>,
    pub(super) index: usize,
}

impl Pooled {
    /// The response is over: the connection may take another request.
    pub(crate) fn release(self) {
        // Its task closes it once idle for `idle_timeout`, as the pool drops it then.
        self.idle.clock.store(self.pool.stamp(), Ordering::Relaxed);
        self.pool.put(self.index, self.idle);
    }
}

// ------------------------------------------------------------------------------- request body

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
    /// The body as received: `Empty` when it ends before it starts. With `counting` (the
    /// access log is on) its bytes from the client are counted, see [`Self::upload`].
    pub(crate) fn new(body: Incoming, counting: bool) -> RequestBody {
        if body.is_end_stream() {
            RequestBody::Empty
        } else {
            let progress = Progress {
                counting,
                ..Progress::default()
            };
            RequestBody::Ready(body, Arc::new(progress))
        }
    }

    /// The progress that counts the body's bytes from the client, when it is counted.
    pub(crate) fn upload(&self) -> Option<Arc<Progress>> {
        match self {
            RequestBody::Ready(_, p) | RequestBody::Gone(p) if p.counting => Some(Arc::clone(p)),
            _ => None,
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
        let RequestBody::Ready(body, progress) = self else {
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
                    Ok(piece) => {
                        progress.count(piece.len());
                        data.extend_from_slice(&piece);
                    }
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

    /// True when every attempt sends the body whole, from gtd's own copy: there is none, or
    /// it was read whole. (A body that streams may be half sent when a connection fails.)
    pub(crate) fn held(&self) -> bool {
        matches!(self, RequestBody::Empty | RequestBody::Whole(..))
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
                    b.progress.count(data.len());
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

/// `response` goes to the client with the request's access log `line`: its status is noted and
/// the line travels on with the body (put there in place), which counts what it sends.
pub(crate) fn with_line(response: &mut http::Response<DownBody>, mut line: Line) {
    line.status(response.status());
    response.body_mut().carry(line);
}

/// The body of a response to the client, and the request's access log line, sent once the
/// body is dropped (the response is over, or the client went away).
pub struct DownBody {
    body: Down,
    line: Line,
    /// The request this answers, open until the body is dropped.
    exchange: Option<super::conn::Exchange>,
}

// The relayed variant is the common one (every proxied response): boxing it would cost an
// allocation per request to save moving a few hundred bytes once.
#[allow(clippy::large_enum_variant)]
enum Down {
    /// gtd's own answer (404, 502, 503, 504), sent in one frame.
    Own(Option<Bytes>),
    /// The endpoint's body, streamed.
    Relayed(Relayed),
}

/// An endpoint's response body on its way to the client (see the module doc).
pub struct Relayed {
    inner: EndpointBody,
    /// What is left of a frame handed to hyper in parts ([`super::conn::PIECE`]).
    rest: Option<Bytes>,
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
            rest: None,
            pick: Some(pick),
            conn,
            started,
            bytes,
        }
    }

    /// Counts `n` bytes handed to the client's side.
    fn sent(&self, line: &mut Line, paced: Option<&super::conn::Conn>, n: usize) {
        self.bytes.increment(n as u64);
        line.sent(n);
        if let Some(conn) = paced {
            conn.handed(n);
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
        Down::Own(Some(Bytes::from_static(text.as_bytes()))).into()
    }

    /// No body (a `101`: the tunnel follows).
    pub(crate) fn empty() -> DownBody {
        Down::Own(None).into()
    }

    /// The endpoint's body.
    pub(crate) fn relayed(body: Relayed) -> DownBody {
        Down::Relayed(body).into()
    }

    /// This body, counting what it sends into the request's access log line (sent when the
    /// body is dropped).
    pub(crate) fn carry(&mut self, line: Line) {
        self.line = line;
    }

    /// This body ends `exchange` when it is dropped.
    pub(crate) fn ends(&mut self, exchange: super::conn::Exchange) {
        self.exchange = Some(exchange);
    }
}

impl From<Down> for DownBody {
    fn from(body: Down) -> DownBody {
        DownBody {
            body,
            line: Line::off(),
            exchange: None,
        }
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
        let DownBody {
            body,
            line,
            exchange,
        } = self.get_mut();
        match body {
            Down::Own(data) => {
                let data = data.take();
                if let Some(d) = &data {
                    line.sent(d.len());
                }
                Poll::Ready(data.map(|d| Ok(Frame::data(d))))
            }
            Down::Relayed(r) => {
                // A cleartext HTTP/1 client that has not taken what it was given waits here,
                // rather than in hyper's write buffer (see `Conn::held_back`).
                let paced = exchange.as_ref().map(|e| e.conn()).filter(|c| c.paced());
                if let Some(conn) = paced
                    && conn.held_back()
                {
                    if conn.is_slow()
                        && let EndpointBody::Raw(raw) = &mut r.inner
                    {
                        raw.slow();
                    }
                    return Poll::Pending;
                }
                if let Some(rest) = &mut r.rest {
                    let piece = if rest.len() > PIECE {
                        rest.split_to(PIECE)
                    } else {
                        r.rest.take().unwrap_or_default()
                    };
                    r.sent(line, paced, piece.len());
                    return Poll::Ready(Some(Ok(Frame::data(piece))));
                }
                let mut polled = Pin::new(&mut r.inner).poll_frame(cx);
                match &mut polled {
                    Poll::Ready(Some(Ok(frame))) => {
                        // Trailers are the last frame, though hyper's chunked body does not say
                        // it has ended until it is polled once more (and its servers stop
                        // polling after them).
                        let last = frame.is_trailers() || r.inner.is_end_stream();
                        if let Some(data) = frame.data_mut() {
                            if paced.is_some() && data.len() > PIECE {
                                r.rest = Some(data.split_off(PIECE));
                            }
                            r.sent(line, paced, data.len());
                        }
                        if last {
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
        match &self.body {
            Down::Own(data) => data.is_none(),
            Down::Relayed(r) => r.rest.is_none() && r.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.body {
            Down::Own(data) => SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64)),
            Down::Relayed(r) => {
                let rest = r.rest.as_ref().map_or(0, |b| b.len() as u64);
                let inner = r.inner.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(inner.lower() + rest);
                if let Some(upper) = inner.upper() {
                    hint.set_upper(upper + rest);
                }
                hint
            }
        }
    }
}
