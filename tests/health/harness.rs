//! The health tests' own helpers: an HTTP backend that numbers the checks it receives and
//! answers each as a script says, a client, and readers of `/status`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use gtd::sync::lock;
use gtd::view::{CheckView, EndpointView, GroupView, ListenerView, RankView, Status};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::{JoinHandle, JoinSet};

/// How the backend answers one check.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(&'static str, &'static str)>,
    pub(crate) body: &'static str,
    /// Wait this long before answering.
    pub(crate) delay: Duration,
    /// Never answer (the connection stays open).
    pub(crate) hang: bool,
}

impl Reply {
    pub(crate) fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: vec![],
            body: "ok",
            delay: Duration::ZERO,
            hang: false,
        }
    }

    pub(crate) fn ok() -> Reply {
        Reply::status(200)
    }

    pub(crate) fn late(delay: Duration) -> Reply {
        Reply {
            delay,
            ..Reply::ok()
        }
    }

    pub(crate) fn hang() -> Reply {
        Reply {
            hang: true,
            ..Reply::ok()
        }
    }
}

/// A check request as the backend received it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) headers: http::HeaderMap,
    pub(crate) body: String,
    /// Where it came from.
    pub(crate) peer: SocketAddr,
}

type Script = Arc<dyn Fn(u64) -> Reply + Send + Sync>;

/// An HTTP/1.1 backend (optionally TLS). Requests to `/health…` are checks: numbered from 1
/// and answered by the script; any other request is traffic, answered 200 with the backend's
/// name. Stops when dropped.
pub(crate) struct Scripted {
    pub(crate) addr: SocketAddr,
    checks: Arc<AtomicU64>,
    traffic: Arc<AtomicU64>,
    seen: Arc<Mutex<Vec<Seen>>>,
    handle: JoinHandle<()>,
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

impl Scripted {
    /// On a free port.
    pub(crate) async fn start(
        name: &str,
        script: impl Fn(u64) -> Reply + Send + Sync + 'static,
    ) -> Scripted {
        Self::start_on("127.0.0.1:0".parse().unwrap(), name, Arc::new(script), None).await
    }

    /// On `addr` (a backend brought back where it was), optionally over TLS.
    pub(crate) async fn start_on(
        addr: SocketAddr,
        name: &str,
        script: Script,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Scripted {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let checks = Arc::new(AtomicU64::new(0));
        let traffic = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let name: Arc<str> = name.into();
        let (c, t, s) = (checks.clone(), traffic.clone(), seen.clone());
        let handle = tokio::spawn(async move {
            let mut open = JoinSet::new();
            while let Ok((stream, peer)) = listener.accept().await {
                let (c, t, s, name, script, tls) = (
                    c.clone(),
                    t.clone(),
                    s.clone(),
                    name.clone(),
                    script.clone(),
                    tls.clone(),
                );
                open.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        answer(
                            req,
                            peer,
                            c.clone(),
                            t.clone(),
                            s.clone(),
                            name.clone(),
                            script.clone(),
                        )
                    });
                    let builder = hyper::server::conn::http1::Builder::new();
                    match tls {
                        None => {
                            let _ = builder
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        }
                        Some(cfg) => {
                            if let Ok(s) = tokio_rustls::TlsAcceptor::from(cfg).accept(stream).await
                            {
                                let _ = builder.serve_connection(TokioIo::new(s), service).await;
                            }
                        }
                    }
                });
            }
        });
        Scripted {
            addr,
            checks,
            traffic,
            seen,
            handle,
        }
    }

    /// Checks received so far.
    pub(crate) fn checks(&self) -> u64 {
        self.checks.load(Ordering::SeqCst)
    }

    /// Traffic requests received so far.
    pub(crate) fn traffic(&self) -> u64 {
        self.traffic.load(Ordering::SeqCst)
    }

    /// The check requests received so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        lock(&self.seen).clone()
    }
}

async fn answer(
    req: Request<Incoming>,
    peer: SocketAddr,
    checks: Arc<AtomicU64>,
    traffic: Arc<AtomicU64>,
    seen: Arc<Mutex<Vec<Seen>>>,
    name: Arc<str>,
    script: Script,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if !req.uri().path().starts_with("/health") {
        traffic.fetch_add(1, Ordering::SeqCst);
        return Ok(Response::new(Full::new(Bytes::from(name.to_string()))));
    }
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    lock(&seen).push(Seen {
        method: parts.method.to_string(),
        path: parts.uri.to_string(),
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        peer,
    });
    let n = checks.fetch_add(1, Ordering::SeqCst) + 1;
    let reply = script(n);
    if reply.hang {
        std::future::pending::<()>().await;
    }
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut r = Response::builder().status(reply.status);
    for (k, v) in &reply.headers {
        r = r.header(*k, *v);
    }
    Ok(r.body(Full::new(Bytes::from_static(reply.body.as_bytes())))
        .unwrap())
}

/// Listener `name` in a `/status` document.
pub(crate) fn listener_of<'a>(doc: &'a Status, name: &str) -> &'a ListenerView {
    crate::common::status_listener(doc, name)
}

/// Listener `listener`'s group `group` in a `/status` document.
pub(crate) fn group_of<'a>(doc: &'a Status, listener: &str, group: &str) -> &'a GroupView {
    listener_of(doc, listener)
        .group(group)
        .unwrap_or_else(|| panic!("no group {group} in {listener}"))
}

/// Endpoint `address` of that group.
pub(crate) fn endpoint_of<'a>(
    doc: &'a Status,
    listener: &str,
    g: &str,
    address: &str,
) -> &'a EndpointView {
    group_of(doc, listener, g)
        .endpoint(address)
        .unwrap_or_else(|| panic!("no endpoint {address} in {listener}/{g}"))
}

/// The group names of `listener` in priority order.
pub(crate) fn order(doc: &Status, listener: &str) -> Vec<String> {
    listener_of(doc, listener)
        .groups
        .iter()
        .map(|g| g.name.clone())
        .collect()
}

/// Why group `group` of `listener` has its rank.
pub(crate) fn rank_of<'a>(doc: &'a Status, listener: &str, group: &str) -> &'a RankView {
    group_of(doc, listener, group)
        .rank
        .as_ref()
        .expect("/status gives every group's rank")
}

/// Endpoint `address`'s active checks (its group must have them).
pub(crate) fn check_of<'a>(
    doc: &'a Status,
    listener: &str,
    g: &str,
    address: &str,
) -> &'a CheckView {
    endpoint_of(doc, listener, g, address)
        .check
        .as_ref()
        .unwrap_or_else(|| panic!("{address} has no checks"))
}

/// Checks so far of endpoint `address` (0 without checks).
pub(crate) fn checks_of(doc: &Status, listener: &str, g: &str, address: &str) -> u64 {
    endpoint_of(doc, listener, g, address)
        .check
        .as_ref()
        .map_or(0, |c| c.checks)
}

/// A health_check table for an HTTP check of `/health` every second, with `extra` keys.
pub(crate) fn http_check(extra: &str) -> String {
    format!(
        "[listener.group.health_check]\nprotocol = \"http\"\npath = \"/health\"\ninterval = \"1s\"\n{extra}\n"
    )
}

/// A plain HTTP/1.1 client.
pub(crate) fn client() -> hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Full<Bytes>,
> {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

/// GET `url`: (status, body); a transport error is status 0.
pub(crate) async fn get(
    c: &hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Full<Bytes>,
    >,
    url: &str,
) -> (u16, String) {
    let req = Request::get(url).body(Full::new(Bytes::new())).unwrap();
    match tokio::time::timeout(Duration::from_secs(60), c.request(req)).await {
        Ok(Ok(resp)) => {
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await.map(|b| b.to_bytes());
            (
                status,
                body.map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default(),
            )
        }
        _ => (0, String::new()),
    }
}

/// Raw socket backend tasks, aborted on drop.
pub(crate) struct Backends(pub(crate) Vec<JoinHandle<()>>);

impl Drop for Backends {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

/// A UDP endpoint at `addr` (port 0: any) that answers "NAME:" + the datagram.
pub(crate) async fn udp_on(addr: &str, name: &'static str) -> (SocketAddr, JoinHandle<()>) {
    let socket = UdpSocket::bind(addr).await.unwrap();
    let addr = socket.local_addr().unwrap();
    let handle = tokio::spawn(async move {
        let mut buf = vec![0_u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let mut reply = format!("{name}:").into_bytes();
            reply.extend_from_slice(&buf[..n]);
            let _ = socket.send_to(&reply, from).await;
        }
    });
    (addr, handle)
}
