//! The HTTP tests' own helpers: backends that name themselves, clients, bounded reads.

use crate::common::*;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

pub(crate) type TestBody = BoxBody<Bytes, Infallible>;

/// Reads `s` until gtd closes it (bounded: 60 s, else `what` fails the test); what came before
/// the close. A reset counts as closed.
pub(crate) async fn until_closed(s: &mut TcpStream, what: &str) -> Vec<u8> {
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut rest))
        .await
        .expect(what)
        .ok();
    rest
}

/// Sends one GET on `s`; the answer up to the body "one" of that backend, or what came before
/// the connection closed (bounded by a minute).
pub(crate) async fn ask_answer(s: &mut TcpStream) -> String {
    use tokio::io::AsyncWriteExt;
    s.write_all(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    while !answer.ends_with(b"one") {
        let mut chunk = [0_u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(60), s.read(&mut chunk))
            .await
            .expect("an answer within a minute")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// A body of `remaining` bytes made of one shared chunk (no allocation per frame).
pub(crate) struct Pattern {
    remaining: u64,
    chunk: Bytes,
}

impl Pattern {
    pub(crate) fn new(total: u64) -> Pattern {
        let chunk: Vec<u8> = (0..256 * 1024_u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        Pattern {
            remaining: total,
            chunk: Bytes::from(chunk),
        }
    }
}

impl Body for Pattern {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let n = self.remaining.min(self.chunk.len() as u64) as usize;
        self.remaining -= n as u64;
        Poll::Ready(Some(Ok(Frame::data(self.chunk.slice(..n)))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

pub(crate) fn full(text: impl Into<Bytes>) -> TestBody {
    Full::new(text.into()).boxed()
}

pub(crate) fn empty() -> TestBody {
    Empty::new().boxed()
}

/// What a backend does.
#[derive(Clone)]
struct Behaviour {
    name: String,
    /// Status of ordinary answers.
    status: u16,
    /// Extra response headers.
    headers: Vec<(&'static str, &'static str)>,
    hits: Arc<AtomicU64>,
}

/// A backend: HTTP/1.1 (optionally over TLS) that names itself. Paths:
/// - `.../sink`: reads the whole body, answers `status` and "NAME BYTES";
/// - `.../big/N`: answers N bytes;
/// - anything else: `status`, body NAME, and `x-seen-*` headers echoing what it received.
pub(crate) struct Backend {
    pub(crate) addr: SocketAddr,
    hits: Arc<AtomicU64>,
    handle: JoinHandle<()>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

impl Backend {
    pub(crate) async fn start(name: &str, status: u16) -> Backend {
        Self::start_with(name, status, vec![], None).await
    }

    pub(crate) async fn start_with(
        name: &str,
        status: u16,
        headers: Vec<(&'static str, &'static str)>,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Backend {
        let hits = Arc::new(AtomicU64::new(0));
        let behaviour = Behaviour {
            name: name.to_owned(),
            status,
            headers,
            hits: hits.clone(),
        };
        let (addr, handle) = socket_backend(move |stream| {
            let b = behaviour.clone();
            let tls = tls.clone();
            async move {
                let service = hyper::service::service_fn(move |req| answer(b.clone(), req));
                let builder = hyper::server::conn::http1::Builder::new();
                match tls {
                    None => {
                        let _ = builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }
                    Some(cfg) => {
                        let Ok(s) = tokio_rustls::TlsAcceptor::from(cfg).accept(stream).await
                        else {
                            return;
                        };
                        let _ = builder.serve_connection(TokioIo::new(s), service).await;
                    }
                }
            }
        })
        .await;
        Backend { addr, hits, handle }
    }

    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

async fn answer(b: Behaviour, req: Request<Incoming>) -> Result<Response<TestBody>, Infallible> {
    b.hits.fetch_add(1, Ordering::Relaxed);
    let path = req.uri().path().to_owned();
    if path.ends_with("/sink") {
        let mut body = req.into_body();
        let mut n = 0_u64;
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => n += f.data_ref().map_or(0, |d| d.len() as u64),
                Err(_) => break,
            }
        }
        let answer = full(format!("{} {n}", b.name));
        return Ok(Response::builder().status(b.status).body(answer).unwrap());
    }
    if let Some(n) = path
        .rsplit_once("/big/")
        .and_then(|(_, n)| n.parse::<u64>().ok())
    {
        return Ok(Response::new(Pattern::new(n).boxed()));
    }
    let seen = |name: &str| {
        req.headers()
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap_or("?").to_owned())
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let mut r = Response::builder()
        .status(b.status)
        .header("x-backend", b.name.as_str())
        .header(
            "x-seen-path",
            req.uri().path_and_query().map_or("", |p| p.as_str()),
        )
        .header("x-seen-version", format!("{:?}", req.version()))
        .header("x-seen-host", seen("host"))
        .header("x-seen-xff", seen("x-forwarded-for"))
        .header("x-seen-xfp", seen("x-forwarded-proto"))
        .header("x-seen-xfh", seen("x-forwarded-host"))
        .header("x-seen-secret", seen("x-secret"))
        .header("x-seen-cookie", seen("cookie"));
    for (k, v) in &b.headers {
        r = r.header(*k, *v);
    }
    Ok(r.body(full(b.name.clone())).unwrap())
}

// ------------------------------------------------------------------ helpers: clients

pub(crate) fn client() -> Client<HttpConnector, TestBody> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// One request; (status, headers, body as text).
pub(crate) async fn send(
    c: &Client<HttpConnector, TestBody>,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: TestBody,
) -> (u16, HeaderMap, String) {
    let mut req = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = tokio::time::timeout(Duration::from_secs(60), c.request(req.body(body).unwrap()))
        .await
        .expect("an answer within a minute")
        .expect("a response");
    let status = resp.status().as_u16();
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (
        status,
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

pub(crate) async fn get(
    c: &Client<HttpConnector, TestBody>,
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, HeaderMap, String) {
    send(c, "GET", url, headers, empty()).await
}

pub(crate) fn h<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers.get(name).map_or("", |v| v.to_str().unwrap())
}

/// Reads up to the end of an HTTP head (bounded: 16 KiB, one minute).
pub(crate) async fn read_head<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> String {
    let mut head = Vec::new();
    let mut byte = [0_u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = tokio::time::timeout(Duration::from_secs(60), s.read(&mut byte))
            .await
            .expect("a head in time")
            .unwrap();
        if n == 0 {
            break;
        }
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}
