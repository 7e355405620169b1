//! The client side of HTTP listeners: one pooled client per group, and the bodies that stream
//! through gtd in both directions.
//!
//! - [`Upstream`]: hyper-util's pooled client with a `Connector` that binds `[node] source_ip`,
//!   applies `connect_timeout` and speaks TLS per the group's settings. The pool keeps up to
//!   `keepalive` idle connections per endpoint (the pool key is the endpoint's authority), so
//!   keep-alive reuse needs no code of ours and takes no lock of ours on the request path.
//! - `ClientBody`: the client's request body on its way to an endpoint. It remembers whether a
//!   frame was ever handed on; if the attempt fails before that, dropping it gives the untouched
//!   body back (through a oneshot) so a retry can send it again. A body of which any byte left
//!   is never replayed.
//! - [`DownBody`]: the response towards the client: either gtd's own short answer or the
//!   endpoint's body, which holds the attempt's [`Pick`] (so `least_conn` counts the request
//!   until its response ends) and reports `least_time`'s `last_byte` timing when it ends.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderName, Uri};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use metrics::{Counter, Histogram};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_rustls::TlsConnector;

use crate::balance::Pick;
use crate::config::{Address, Balance, Group, Host, Listener, Measure};

use super::tls;

/// A group's way to its endpoints over HTTP.
pub struct Upstream {
    client: Client<Connector, UpBody>,
    /// Each endpoint's authority (`host:port`), config order.
    authorities: Vec<Authority>,
    /// `path_prefix` without its trailing slash (`None` for none or `/`).
    path_prefix: Option<Box<str>>,
    /// `feedback`: the response header carrying the endpoint's value.
    pub(crate) feedback: Option<HeaderName>,
    /// Time from sending a request to the response headers.
    pub(crate) response_seconds: Histogram,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("authorities", &self.authorities)
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
    ) -> Result<Upstream, String> {
        let tls = match &group.tls {
            Some(t) if t.enabled => {
                Some((TlsConnector::from(tls::client_config(t)?), t.sni.clone()))
            }
            _ => None,
        };
        let connector = Connector(Arc::new(ConnectorCfg {
            source_ip,
            connect_timeout: l.connect_timeout,
            tls,
        }));
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .pool_max_idle_per_host(group.keepalive as usize)
            .pool_idle_timeout(l.idle_timeout)
            // The client's Host header is passed through (and set from :authority for HTTP/2).
            .set_host(false)
            .build(connector);
        let authorities = group
            .endpoints
            .iter()
            .map(|e| {
                Authority::try_from(e.address.text.as_str())
                    .map_err(|err| format!("endpoint {:?}: {err}", e.address.text))
            })
            .collect::<Result<_, _>>()?;
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
            client,
            authorities,
            path_prefix,
            feedback,
            response_seconds,
        })
    }

    /// The URI of a request for `path` (path and query as received) on endpoint `index`:
    /// the group's `path_prefix` goes in front. Allocates only when there is a prefix.
    pub(crate) fn uri(&self, index: usize, path: Option<&PathAndQuery>) -> Result<Uri, String> {
        let original = path.map_or("/", PathAndQuery::as_str);
        let path = match &self.path_prefix {
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
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(Scheme::HTTP);
        parts.authority = Some(self.authorities[index].clone());
        parts.path_and_query = Some(path);
        Uri::from_parts(parts).map_err(|e| e.to_string())
    }

    /// Sends `request` and waits for the response headers. `upstream_timeout` runs while the
    /// request body is not moving: it restarts as long as the client keeps uploading, so a large
    /// upload is not cut, and counts from the end of the body otherwise.
    pub(crate) async fn send(
        &self,
        request: http::Request<UpBody>,
        timeout: Duration,
        progress: Option<&Progress>,
    ) -> Result<http::Response<Incoming>, Failure> {
        let response = self.client.request(request);
        tokio::pin!(response);
        let mut seen = progress.map(Progress::moved);
        loop {
            match tokio::time::timeout(timeout, &mut response).await {
                Ok(Ok(r)) => return Ok(r),
                Ok(Err(e)) if e.is_connect() => {
                    tracing::debug!(error = %e, "connect failed");
                    return Err(Failure::Connect);
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = ?e, "upstream request failed");
                    return Err(Failure::Broken);
                }
                Err(_) => {
                    let now = progress.map(Progress::moved);
                    if now.is_some_and(|(done, _)| !done) && now != seen {
                        seen = now;
                        continue;
                    }
                    return Err(Failure::Timeout);
                }
            }
        }
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
}

// ------------------------------------------------------------------------------- connector

/// Connects to endpoints for the pool: TCP from `source_ip`, bounded by `connect_timeout`, then
/// TLS when the group asks for it.
#[derive(Clone)]
pub(crate) struct Connector(Arc<ConnectorCfg>);

struct ConnectorCfg {
    source_ip: Option<IpAddr>,
    connect_timeout: Duration,
    tls: Option<(TlsConnector, Option<String>)>,
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<Stream>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let cfg = Arc::clone(&self.0);
        Box::pin(async move {
            let host = uri
                .host()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no host"))?;
            let bare = host
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(host);
            let address = Address {
                text: String::new(),
                host: match bare.parse::<IpAddr>() {
                    Ok(ip) => Host::Ip(ip),
                    Err(_) => Host::Name(bare.to_owned()),
                },
                port: uri.port_u16().unwrap_or(80),
            };
            let tcp = super::tcp::connect(&address, cfg.source_ip, cfg.connect_timeout).await?;
            let _ = tcp.set_nodelay(true);
            let Some((connector, sni)) = &cfg.tls else {
                return Ok(TokioIo::new(Stream::Plain(tcp)));
            };
            let name = tls::server_name(sni.as_deref(), host)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let handshake = connector.connect(name, tcp);
            let stream = tokio::time::timeout(cfg.connect_timeout, handshake)
                .await
                .map_err(|_| {
                    io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")
                })??;
            Ok(TokioIo::new(Stream::Tls(Box::new(stream))))
        })
    }
}

/// A connection to an endpoint, plain or TLS.
pub(crate) enum Stream {
    /// Cleartext.
    Plain(TcpStream),
    /// TLS (boxed: the session state is large).
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
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
    bytes: AtomicU64,
    done: AtomicBool,
}

impl Progress {
    /// (body finished, bytes sent so far).
    fn moved(&self) -> (bool, u64) {
        (
            self.done.load(Ordering::Acquire),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// The client's request body, held between attempts. Requests without a body (most) cost
/// nothing here; a body costs its progress cell and one oneshot per attempt.
pub(crate) enum RequestBody {
    /// No body at all: every attempt sends an empty one.
    Empty,
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

    /// The body for one attempt, and the way back for it if the attempt does not touch it.
    pub(crate) fn take(
        &mut self,
        bytes: &Counter,
    ) -> (UpBody, Option<oneshot::Receiver<Incoming>>) {
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
    /// The client's body, streamed with backpressure.
    Stream(ClientBody),
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
        let UpBody::Stream(b) = self.get_mut() else {
            return Poll::Ready(None);
        };
        let Some(inner) = b.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                b.streamed = true;
                if let Some(data) = frame.data_ref() {
                    b.bytes.increment(data.len() as u64);
                    b.progress
                        .bytes
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                }
            }
            Poll::Ready(None) => b.progress.done.store(true, Ordering::Release),
            Poll::Ready(Some(Err(_))) => b.streamed = true,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpBody::Empty => true,
            UpBody::Stream(b) => b.inner.as_ref().is_none_or(Body::is_end_stream),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpBody::Empty => SizeHint::with_exact(0),
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

// ------------------------------------------------------------------------------- response body

/// The body of a response to the client.
pub enum DownBody {
    /// gtd's own answer (404, 502, 503, 504), sent in one frame.
    Own(Option<Bytes>),
    /// The endpoint's body, streamed.
    Relayed(Relayed),
}

/// An endpoint's response body on its way to the client (see the module doc).
pub struct Relayed {
    inner: Incoming,
    pick: Option<Pick>,
    started: Instant,
    bytes: Counter,
}

impl Relayed {
    /// Wraps `inner`; `started` is when the attempt's request was sent.
    pub(crate) fn new(inner: Incoming, pick: Pick, started: Instant, bytes: Counter) -> Relayed {
        Relayed {
            inner,
            pick: Some(pick),
            started,
            bytes,
        }
    }

    fn finish(&mut self) {
        if let Some(pick) = self.pick.take() {
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

impl Body for DownBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            DownBody::Own(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            DownBody::Relayed(r) => {
                let polled = Pin::new(&mut r.inner).poll_frame(cx);
                match &polled {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Some(data) = frame.data_ref() {
                            r.bytes.increment(data.len() as u64);
                        }
                        if r.inner.is_end_stream() {
                            r.finish();
                        }
                    }
                    Poll::Ready(None) => r.finish(),
                    // A broken upstream body: the client sees the stream cut; the pick is
                    // released without a timing.
                    Poll::Ready(Some(Err(_))) => r.pick = None,
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
