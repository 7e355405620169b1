//! gtd's own HTTP/1.1 client for the common case: a request without a body, with an idempotent
//! method, to a plain (non-TLS) endpoint. It writes the request head straight to a pooled
//! socket and reads the response from it in the request's own task, with the codec of
//! [`super::h1`]: no request channel, response oneshot, body channel or connection task as with
//! hyper's client connection, which handles everything else (request bodies, other methods, TLS
//! endpoints, upgrades). Interleaved A/B runs with wrk put the difference at about 9 % more
//! requests per second through a node.
//!
//! - `RawPool`: the group's keep-alive pool (`KeepAlive`, in `pool.rs`) of these connections.
//! - `RawPool::exchange`: one request; a reused connection that turns out closed (the
//!   endpoint's keep-alive timer won the race: the write fails, or the connection ends before
//!   any byte of an answer) is replaced by a fresh one for an idempotent request, as nginx and
//!   Go's client do.
//! - [`RawBody`]: the response body, read as the client takes it (backpressure), framed by
//!   Content-Length, chunked coding or the connection's end; `upstream_timeout` bounds any
//!   silence of the endpoint meanwhile. A connection goes back to the pool only when its
//!   response ended exactly where its framing said, with no byte read past it (none after a
//!   HEAD, 204 or 304 answer, none past a Content-Length); while idle, any byte or end on it
//!   closes it ([`quiet`], asked of the socket when it is taken and at every sweep), so that
//!   nothing an endpoint writes unasked is ever read as another request's answer.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use http::{Method, Response};
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::AsyncWrite;
use tokio::net::TcpStream;

use super::failure::Failure;
use super::h1::{self, Chunked, Framing, Step};
use super::pool::{KeepAlive, Reusable};
use crate::timers::Deadline;

/// Room made for the first read of a body; it doubles while reads fill it, up to
/// [`MAX_READ`] (as hyper's adaptive reads: a bulk download through a node pinned to one CPU
/// ran at 1.8 GB/s with fixed 32 KiB reads, 2.0-2.3 GB/s with reads growing to 256 KiB).
const FIRST_READ: usize = 16 * 1024;
/// The read of a body once the client has been found slow ([`RawBody::slow`]): what is read
/// waits for the client anyway, and the buffer it is read into is what a slow reader holds
/// of gtd's side (docs/performance.md, memory per slow reader).
const SLOW_READ: usize = 8 * 1024;
/// The largest read of a body, and so the most of a response gtd holds read from the endpoint
/// and not yet taken by the client: the next read waits until the client's side took the last
/// one. 256 KiB cost a slow reader about 0.9 MB of memory (nginx 49 KB, HAProxy 53 KB).
const MAX_READ: usize = 64 * 1024;

/// Room made for a request head before it is encoded (a larger one grows it).
const HEAD_ROOM: usize = 1024;

/// Errors of a relayed body.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Idle connections per endpoint.
pub(crate) type RawPool = KeepAlive<RawConn>;

/// One connection to an endpoint, with what was read past the last response (nothing, when
/// it is idle).
pub(crate) struct RawConn {
    stream: TcpStream,
    buf: BytesMut,
    /// The request head being sent, kept for the next one.
    out: Vec<u8>,
    /// The connection's one timer, for `upstream_timeout`.
    timer: Deadline,
}

impl RawConn {
    fn new(stream: TcpStream) -> RawConn {
        RawConn {
            stream,
            buf: BytesMut::with_capacity(8 * 1024),
            out: Vec::with_capacity(HEAD_ROOM),
            timer: Deadline::default(),
        }
    }

    /// Writes the request head, by `deadline`.
    async fn send_head(&mut self, deadline: Instant) -> Result<(), Trip> {
        let mut written = 0;
        while written < self.out.len() {
            let step = std::future::poll_fn(|cx| {
                match Pin::new(&mut self.stream).poll_write(cx, &self.out[written..]) {
                    Poll::Ready(r) => Poll::Ready(Some(r)),
                    Poll::Pending => self.timer.poll(cx, deadline).map(|()| None),
                }
            })
            .await;
            match step {
                Some(Ok(n)) if n > 0 => written += n,
                Some(_) => return Err(Trip::Silent),
                None => return Err(Trip::Timeout),
            }
        }
        Ok(())
    }

    /// Reads more of the answer into `buf`, by `deadline`: the bytes read (0 at its end).
    async fn read_more(&mut self, deadline: Instant) -> Result<io::Result<usize>, Trip> {
        std::future::poll_fn(|cx| {
            match tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.buf) {
                Poll::Ready(r) => Poll::Ready(Ok(r)),
                Poll::Pending => self.timer.poll(cx, deadline).map(|()| Err(Trip::Timeout)),
            }
        })
        .await
    }
}

impl Reusable for RawConn {
    /// Gives back the connection's buffers: a connection resting in the pool holds its socket,
    /// not 9 KiB of buffers (up to `keepalive` of them per endpoint). Taken again, with room
    /// for a head, when it next carries a request.
    fn rest(&mut self) {
        if self.buf.capacity() > 0 && self.buf.is_empty() {
            self.buf = BytesMut::new();
        }
        if self.out.capacity() > 0 {
            self.out = Vec::new();
        }
    }

    /// Nothing unread: the last response ended where the connection's bytes did.
    fn reusable(&self) -> bool {
        self.buf.is_empty()
    }

    /// Nothing arrived since (see [`quiet`]).
    fn quiet(&self) -> bool {
        quiet(&self.stream)
    }
}

/// True when nothing waits to be read on `stream`: no byte, no end, no error. Asked of the
/// socket with a peek that does not block, not of tokio's readiness, which may not have
/// heard of bytes that already arrived. An endpoint that writes on an idle connection (an
/// unasked response, a body after a HEAD or 204 answer, bytes past a Content-Length that came
/// apart from the rest) would otherwise have it read as the answer to the next request: the
/// connection is closed instead.
#[cfg(unix)]
pub(super) fn quiet(stream: &TcpStream) -> bool {
    use rustix::net::{RecvFlags, recv};
    let mut byte = [0_u8; 1];
    let peeked = recv(stream, &mut byte[..], RecvFlags::PEEK | RecvFlags::DONTWAIT);
    matches!(peeked, Err(rustix::io::Errno::AGAIN))
}

/// Elsewhere, what the runtime knows (a readiness it has not heard of goes unseen).
#[cfg(not(unix))]
pub(super) fn quiet(stream: &TcpStream) -> bool {
    let mut byte = [0_u8; 1];
    matches!(stream.try_read(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

impl RawPool {
    /// Sends the request head `request` to endpoint `index`, on an idle connection or one from
    /// `open`, and reads the response head by `deadline`.
    pub(crate) async fn exchange<F, Fut>(
        self: &Arc<Self>,
        index: usize,
        request: &Outgoing<'_>,
        deadline: Instant,
        stall: Duration,
        reuse: bool,
        open: F,
    ) -> Result<Response<RawBody>, Failure>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = io::Result<TcpStream>>,
    {
        let head_request = *request.method == Method::HEAD;
        let replayable = super::methods::idempotent(request.method);
        loop {
            let idle = if reuse { self.take(index) } else { None };
            let (mut conn, reused) = match idle {
                Some(conn) => (conn, true),
                None => {
                    let until = tokio::time::Instant::from_std(deadline);
                    let stream = match tokio::time::timeout_at(until, Box::pin(open())).await {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => return Err(super::failure::connect_failure(&e)),
                        Err(_) => return Err(Failure::Timeout),
                    };
                    (RawConn::new(stream), false)
                }
            };
            // The head is written into the connection's own buffer: no allocation per request
            // (but the first after a rest in the pool, `RawConn::rest`).
            conn.out.clear();
            conn.out.reserve(HEAD_ROOM);
            encode(request, &mut conn.out);
            match round_trip(&mut conn, head_request, deadline).await {
                Ok(head) => {
                    let mut response = Response::new(RawBody::new(
                        conn,
                        head.framing,
                        head.reusable,
                        Arc::clone(self),
                        index,
                        stall,
                    ));
                    *response.status_mut() = head.status;
                    *response.headers_mut() = head.headers;
                    return Ok(response);
                }
                Err(Trip::Silent) if reused && replayable => {
                    tracing::debug!("idle endpoint connection was closed; a fresh one");
                }
                Err(Trip::Silent | Trip::Failed) => return Err(Failure::Broken),
                Err(Trip::Refused) => return Err(Failure::BadResponse),
                Err(Trip::Timeout) => return Err(Failure::Timeout),
            }
        }
    }
}

/// How a round trip failed.
enum Trip {
    /// The connection ended (or the write failed) before any byte of an answer.
    Silent,
    /// The connection broke during the answer.
    Failed,
    /// An answer gtd does not pass on: an invalid or too large head, or an unasked `101`.
    Refused,
    /// No answer by the deadline.
    Timeout,
}

/// A request without a body, as gtd's own client sends it (borrowed: nothing is copied before
/// the head is written into the connection's buffer).
pub(crate) struct Outgoing<'a> {
    pub(crate) method: &'a Method,
    /// The group's `path_prefix` ("" without one), then the path and query as received.
    pub(crate) prefix: &'a str,
    pub(crate) path: &'a str,
    pub(crate) headers: &'a http::HeaderMap,
}

/// The head of `request` for an endpoint.
fn encode(request: &Outgoing<'_>, out: &mut Vec<u8>) {
    // An absolute-form target with an empty path (`http://a.example?q=1`) keeps its query
    // behind the path `/` (RFC 9112 §3.2.1), not as `?q=1`.
    let slash = if request.path.starts_with('?') {
        "/"
    } else {
        ""
    };
    let target = [request.prefix, slash, request.path];
    h1::encode_request(request.method, &target, request.headers, out);
    // A PUT says it has no body (some servers answer 411 otherwise); an HTTP/2 client's empty
    // PUT comes without the header.
    if *request.method == Method::PUT && !request.headers.contains_key(http::header::CONTENT_LENGTH)
    {
        out.truncate(out.len() - 2);
        out.extend_from_slice(b"content-length: 0\r\n\r\n");
    }
}

/// Writes the connection's request head and reads the response head (interim 1xx answers
/// skipped).
async fn round_trip(
    conn: &mut RawConn,
    head_request: bool,
    deadline: Instant,
) -> Result<h1::Head, Trip> {
    conn.send_head(deadline).await?;
    let mut answered = false;
    loop {
        if !conn.buf.is_empty() {
            match h1::parse_response(&mut conn.buf, head_request) {
                Ok(Some(parsed)) => {
                    if parsed.status.is_informational() {
                        // 100 Continue and the like; 101 is never asked for on this path.
                        if parsed.status == http::StatusCode::SWITCHING_PROTOCOLS {
                            return Err(Trip::Refused);
                        }
                        continue;
                    }
                    return Ok(parsed);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(error = ?e, "invalid response head from the endpoint");
                    return Err(Trip::Refused);
                }
            }
        }
        conn.buf.reserve(4096);
        match conn.read_more(deadline).await? {
            Ok(0) | Err(_) if !answered && conn.buf.is_empty() => return Err(Trip::Silent),
            Ok(0) | Err(_) => return Err(Trip::Failed),
            Ok(_) => answered = true,
        }
    }
}

/// A response body read from the endpoint's connection (see the module doc).
pub struct RawBody {
    conn: Option<RawConn>,
    state: Reading,
    reusable: bool,
    pool: Arc<RawPool>,
    index: usize,
    stall: Duration,
    /// Since when the endpoint has kept the body waiting (`None` while it moves).
    silent_since: Option<Instant>,
    /// Room made for the next read.
    read_size: usize,
    /// The client reads slower than the endpoint answers ([`RawBody::slow`]): reads stay at
    /// [`SLOW_READ`].
    slow: bool,
}

enum Reading {
    Length(u64),
    Chunked(Chunked),
    Close,
    Done,
}

impl RawBody {
    fn new(
        conn: RawConn,
        framing: Framing,
        reusable: bool,
        pool: Arc<RawPool>,
        index: usize,
        stall: Duration,
    ) -> RawBody {
        let state = match framing {
            Framing::Empty => Reading::Done,
            Framing::Length(n) => Reading::Length(n),
            Framing::Chunked => Reading::Chunked(Chunked::default()),
            Framing::Close => Reading::Close,
        };
        RawBody {
            conn: Some(conn),
            state,
            reusable,
            pool,
            index,
            stall,
            silent_since: None,
            read_size: FIRST_READ,
            slow: false,
        }
    }

    /// The client takes the body slower than the endpoint gives it: reads stay at
    /// [`SLOW_READ`], each into a buffer of that size.
    pub(crate) fn slow(&mut self) {
        if self.slow {
            return;
        }
        self.slow = true;
        self.read_size = SLOW_READ;
    }

    /// The body is over: the connection goes back when it may carry another request.
    fn finish(&mut self) {
        if let Some(conn) = self.conn.take()
            && self.reusable
        {
            self.pool.put(self.index, conn);
        }
    }

    /// A frame from what was already read, if there is one.
    fn buffered_frame(&mut self) -> Result<Option<Frame<Bytes>>, BoxError> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(None);
        };
        let buf = &mut conn.buf;
        match &mut self.state {
            Reading::Length(left) if !buf.is_empty() => {
                let n = usize::try_from(*left).unwrap_or(usize::MAX).min(buf.len());
                *left -= n as u64;
                let data = buf.split_to(n).freeze();
                if *left == 0 {
                    self.state = Reading::Done;
                }
                Ok(Some(Frame::data(data)))
            }
            Reading::Chunked(decoder) => match decoder.decode(buf)? {
                Step::Data(data) => Ok(Some(Frame::data(data))),
                // The trailer fields, if any, are the body's last frame.
                Step::Done => {
                    let trailers = decoder.take_trailers();
                    self.state = Reading::Done;
                    Ok(trailers.map(Frame::trailers))
                }
                Step::More => Ok(None),
            },
            Reading::Close if !buf.is_empty() => Ok(Some(Frame::data(buf.split().freeze()))),
            _ => Ok(None),
        }
    }
}

impl Body for RawBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            match this.buffered_frame() {
                Ok(Some(frame)) => return Poll::Ready(Some(Ok(frame))),
                Ok(None) => {}
                Err(e) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(e)));
                }
            }
            if matches!(this.state, Reading::Done) {
                this.finish();
                return Poll::Ready(None);
            }
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            if this.slow && conn.buf.is_empty() {
                // A fresh buffer of SLOW_READ: `BytesMut` otherwise makes room in the size it
                // first had, a larger read's, while the parts of that read are still handed on.
                conn.buf = BytesMut::new();
            }
            conn.buf.reserve(this.read_size);
            // At most `read_size`, whatever room the buffer happens to have.
            let mut room = (&mut conn.buf).limit(this.read_size);
            let read = tokio_util::io::poll_read_buf(Pin::new(&mut conn.stream), cx, &mut room);
            match read {
                Poll::Pending => {
                    let since = *this.silent_since.get_or_insert_with(Instant::now);
                    if conn.timer.poll(cx, since + this.stall).is_ready() {
                        this.conn = None;
                        return Poll::Ready(Some(Err("the endpoint went silent mid-body".into())));
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Ok(0)) => {
                    if matches!(this.state, Reading::Close) {
                        this.state = Reading::Done;
                        this.reusable = false;
                        continue;
                    }
                    this.conn = None;
                    return Poll::Ready(Some(Err("the endpoint closed mid-body".into())));
                }
                Poll::Ready(Ok(n)) => {
                    if n >= this.read_size && !this.slow {
                        this.read_size = (this.read_size * 2).min(MAX_READ);
                    }
                    this.silent_since = None;
                }
                Poll::Ready(Err(e)) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(e.into())));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, Reading::Done | Reading::Length(0))
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            Reading::Done => SizeHint::with_exact(0),
            Reading::Length(n) => SizeHint::with_exact(n),
            _ => SizeHint::default(),
        }
    }
}

impl Drop for RawBody {
    fn drop(&mut self) {
        if matches!(self.state, Reading::Done) {
            self.finish();
        }
    }
}
