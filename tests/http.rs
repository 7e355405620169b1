//! HTTP and HTTPS listeners against real sockets on loopback: requests through `gtd` to small
//! hyper backends that name themselves. The split compared with `sim`, nginx's round-robin
//! sequence, retries (and what is never retried), failover across groups, 1 GB each way with
//! bounded memory, HTTP/2 to HTTP/1.1, forwarding rules and their 404, sticky cookies, HTTPS with
//! SNI and ALPN, TLS and mTLS to endpoints, header timeouts, WebSocket upgrades, endpoints that
//! stall mid-body, every response framing through gtd's own client and its keep-alive race.
//!
//! Every backend and node a test starts is stopped by its own handle. Waits are for events
//! (with generous bounds), never fixed sleeps standing in for them; nothing asserts timing.

mod common;

use common::*;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use gtd::node::Node;
use http::{HeaderMap, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

type TestBody = BoxBody<Bytes, Infallible>;

// ------------------------------------------------------------------ helpers: nodes

/// A `[[listener]]` served from cn-beijing.
fn listener(name: &str, protocol: &str, extra: &str, groups: &str) -> String {
    format!(
        "[[listener]]\nname = \"{name}\"\nprotocol = \"{protocol}\"\nport = {}\nregions = [\"cn-beijing\"]\n{extra}\n{groups}",
        free_port(false)
    )
}

/// A `[[listener.group]]`; each endpoint with its own extra keys.
fn group(
    name: &str,
    region: &str,
    ratio: f64,
    extra: &str,
    endpoints: &[(SocketAddr, &str)],
) -> String {
    let mut s = format!(
        "[[listener.group]]\nname = \"{name}\"\nregion = \"{region}\"\nratio = {ratio}\n{extra}\n"
    );
    for (addr, keys) in endpoints {
        s.push_str(&format!(
            "[[listener.group.endpoint]]\naddress = \"{addr}\"\n{keys}\n"
        ));
    }
    s
}

/// Reads `s` until gtd closes it (bounded: 60 s, else `what` fails the test); what came before
/// the close. A reset counts as closed.
async fn until_closed(s: &mut TcpStream, what: &str) -> Vec<u8> {
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut rest))
        .await
        .expect(what)
        .ok();
    rest
}

// ------------------------------------------------------------------ helpers: backends

/// A body of `remaining` bytes made of one shared chunk (no allocation per frame).
struct Pattern {
    remaining: u64,
    chunk: Bytes,
}

impl Pattern {
    fn new(total: u64) -> Pattern {
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

fn full(text: impl Into<Bytes>) -> TestBody {
    Full::new(text.into()).boxed()
}

fn empty() -> TestBody {
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
struct Backend {
    addr: SocketAddr,
    hits: Arc<AtomicU64>,
    handle: JoinHandle<()>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

impl Backend {
    async fn start(name: &str, status: u16) -> Backend {
        Self::start_with(name, status, vec![], None).await
    }

    async fn start_with(
        name: &str,
        status: u16,
        headers: Vec<(&'static str, &'static str)>,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Backend {
        let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let hits = Arc::new(AtomicU64::new(0));
        let behaviour = Behaviour {
            name: name.to_owned(),
            status,
            headers,
            hits: hits.clone(),
        };
        let handle = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = socket.accept().await else {
                    return;
                };
                let b = behaviour.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
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
                });
            }
        });
        Backend { addr, hits, handle }
    }

    fn hits(&self) -> u64 {
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

fn client() -> Client<HttpConnector, TestBody> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// One request; (status, headers, body as text).
async fn send(
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

async fn get(
    c: &Client<HttpConnector, TestBody>,
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, HeaderMap, String) {
    send(c, "GET", url, headers, empty()).await
}

fn h<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers.get(name).map_or("", |v| v.to_str().unwrap())
}

// ------------------------------------------------------------------ split and rotation

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_split_across_groups_and_endpoints_matches_sim() {
    let b1 = Backend::start("bj-1", 200).await;
    let b2 = Backend::start("bj-2", 200).await;
    let b3 = Backend::start("sh-1", 200).await;
    let b4 = Backend::start("sh-2", 200).await;
    let names: BTreeMap<SocketAddr, &str> = [
        (b1.addr, "bj-1"),
        (b2.addr, "bj-2"),
        (b3.addr, "sh-1"),
        (b4.addr, "sh-2"),
    ]
    .into();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &format!(
                "{}{}",
                group(
                    "beijing",
                    "cn-beijing",
                    50.0,
                    "",
                    &[(b1.addr, "weight = 3"), (b2.addr, "")]
                ),
                group(
                    "shanghai",
                    "cn-shanghai",
                    50.0,
                    "",
                    &[(b3.addr, ""), (b4.addr, "")]
                ),
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let (want_groups, want_endpoints) = sim_expectation(&cfg, "web");
    assert_eq!(want_groups["beijing"], 62.5);

    const N: u64 = 5000;
    let counts = Arc::new(std::sync::Mutex::new(BTreeMap::<String, u64>::new()));
    let next = Arc::new(AtomicU64::new(0));
    let c = client();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (counts, next, c) = (counts.clone(), next.clone(), c.clone());
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < N {
                let (status, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
                assert_eq!(status, 200);
                *counts.lock().unwrap().entry(body).or_default() += 1;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let counts = counts.lock().unwrap().clone();
    assert_eq!(counts.values().sum::<u64>(), N);
    // Stated tolerance: group rotation and round robin are deterministic, so each observed share
    // is within 0.5 points of sim's expectation (concurrency only reorders decisions).
    for (a, name) in &names {
        let observed = *counts.get(*name).unwrap_or(&0) as f64 * 100.0 / N as f64;
        let expected = want_endpoints[&a.to_string()];
        assert!(
            (observed - expected).abs() < 0.5,
            "{name}: observed {observed:.2}% expected {expected:.2}%"
        );
    }
    // Every answer was counted under its endpoint, none as gtd's own.
    let node = Arc::new(node);
    let n2 = node.clone();
    let (two_xx, own, opened, timed, body) = tokio::task::spawn_blocking(move || {
        (
            metric(&n2, "gtd_requests_total", &["code_class=\"2xx\""]),
            metric(&n2, "gtd_requests_total", &["group=\"\""]),
            metric(&n2, "gtd_connections_total", &[]),
            metric(&n2, "gtd_connect_seconds_count", &[]),
            admin(&n2, "GET", "/metrics", None).1,
        )
    })
    .await
    .unwrap();
    assert_eq!((two_xx, own), (N as f64, 0.0));
    // The connections gtd opened to the endpoints were counted and timed, and an HTTP listener
    // has no UDP flow series.
    assert!(opened >= names.len() as f64, "{opened} connections opened");
    assert_eq!(opened, timed);
    assert!(!body.contains("gtd_udp_flows"), "{body}");
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_5_1_1_gives_nginx_sequence() {
    let a = Backend::start("a", 200).await;
    let b = Backend::start("b", 200).await;
    let cc = Backend::start("c", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &group(
                "g",
                "cn-beijing",
                100.0,
                "",
                &[(a.addr, "weight = 5"), (b.addr, ""), (cc.addr, "")],
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    let mut seq = String::new();
    for _ in 0..70 {
        let (status, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
        assert_eq!(status, 200);
        seq.push_str(&body);
    }
    assert_eq!(seq, "aabacaa".repeat(10));
    node.shutdown().await;
}

// ------------------------------------------------------------------ retries

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_is_retried_on_502_and_on_a_refused_endpoint() {
    let bad = Backend::start("bad", 502).await;
    let good = Backend::start("good", 200).await;
    let refused: SocketAddr = format!("127.0.0.1:{}", free_port(false)).parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // max_fails = 0 keeps the failing endpoints in rotation, so every cycle meets them.
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "unhealthy_status = [502]\ntries = 3",
            &group(
                "g",
                "cn-beijing",
                100.0,
                "",
                &[
                    (bad.addr, "max_fails = 0"),
                    (refused, "max_fails = 0"),
                    (good.addr, "max_fails = 0"),
                ],
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    for _ in 0..60 {
        let (status, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
        assert_eq!((status, body.as_str()), (200, "good"), "no client error");
    }
    // A POST with a body refused at connect time was not sent: it is retried, body and all.
    for _ in 0..30 {
        let (status, _, body) = send(
            &c,
            "POST",
            &format!("http://{addr}/sink"),
            &[],
            full(vec![7_u8; 100_000]),
        )
        .await;
        // The 502 endpoint's answer comes back as is (a POST whose bytes were sent).
        let (status, body) = (status, body.as_str());
        assert!(
            (status, body) == (200, "good 100000") || (status, body) == (502, "bad 100000"),
            "{status} {body}"
        );
    }
    assert!(
        bad.hits() >= 20,
        "the 502 endpoint was tried: {}",
        bad.hits()
    );
    let node = Arc::new(node);
    let n2 = node.clone();
    let (retries, connect_failures) = tokio::task::spawn_blocking(move || {
        (
            metric(&n2, "gtd_retries_total", &[]),
            metric(
                &n2,
                "gtd_connect_failures_total",
                &[&format!("endpoint=\"{refused}\"")],
            ),
        )
    })
    .await
    .unwrap();
    assert!(retries >= 40.0, "{retries} retries");
    assert!(
        connect_failures >= 20.0,
        "{connect_failures} connect failures"
    );
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_with_a_body_is_not_retried_after_a_502() {
    let bad = Backend::start("bad", 502).await;
    let good = Backend::start("good", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "unhealthy_status = [502]",
            &group(
                "g",
                "cn-beijing",
                100.0,
                "",
                &[(bad.addr, "max_fails = 0"), (good.addr, "max_fails = 0")],
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    let (mut ok, mut bad_gateway) = (0, 0);
    for _ in 0..20 {
        let (status, _, _) = send(
            &c,
            "POST",
            &format!("http://{addr}/"),
            &[],
            full(&b"payload"[..]),
        )
        .await;
        match status {
            200 => ok += 1,
            502 => bad_gateway += 1,
            s => panic!("unexpected status {s}"),
        }
    }
    // Round robin alternates: half the POSTs met the 502 and got it back as is (its bytes were
    // sent and it is not idempotent); no POST reached both backends.
    assert_eq!((ok, bad_gateway), (10, 10));
    assert_eq!((good.hits(), bad.hits()), (10, 10));
    // The same GETs are retried.
    for _ in 0..10 {
        let (status, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
        assert_eq!((status, body.as_str()), (200, "good"));
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_body_is_sent_again_on_retry_a_large_one_is_not() {
    let bad = Backend::start("bad", 502).await;
    let good = Backend::start("good", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "unhealthy_status = [502]\nretry_non_idempotent = true",
            &group(
                "g",
                "cn-beijing",
                100.0,
                "",
                &[(bad.addr, "max_fails = 0"), (good.addr, "max_fails = 0")],
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let url = format!("http://{addr}/sink");
    let c = client();
    // 16 KiB and less, with a Content-Length: read whole, and sent again after the 502.
    for size in [7, 16 * 1024] {
        for method in ["POST", "PUT"] {
            for _ in 0..4 {
                let body = full(vec![b'x'; size]);
                let (status, _, text) = send(&c, method, &url, &[], body).await;
                assert_eq!((status, text), (200, format!("good {size}")), "{method}");
            }
        }
    }
    assert!(
        bad.hits() >= 4,
        "the 502 endpoint took its turns: {}",
        bad.hits()
    );
    let retried = metric(&node, "gtd_retries_total", &[]);
    assert_eq!(retried, bad.hits() as f64);
    // Larger: streamed as it comes, never replayed; the 502 goes back as is.
    let (mut ok, mut bad_gateway) = (0, 0);
    for _ in 0..4 {
        let (status, _, text) = send(&c, "PUT", &url, &[], full(vec![b'x'; 16 * 1024 + 1])).await;
        match status {
            200 => {
                assert_eq!(text, format!("good {}", 16 * 1024 + 1));
                ok += 1;
            }
            502 => bad_gateway += 1,
            s => panic!("unexpected status {s}"),
        }
    }
    assert_eq!((ok, bad_gateway), (2, 2));
    assert_eq!(metric(&node, "gtd_retries_total", &[]), retried);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_crosses_to_the_next_group_when_the_whole_group_fails() {
    let bj1 = Backend::start("bj-1", 503).await;
    let bj2 = Backend::start("bj-2", 503).await;
    let sh = Backend::start("sh", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "unhealthy_status = [\"500-599\"]\ntries = 3",
            &format!(
                "{}{}",
                group(
                    "beijing",
                    "cn-beijing",
                    100.0,
                    "",
                    &[(bj1.addr, "max_fails = 0"), (bj2.addr, "max_fails = 0")]
                ),
                group("shanghai", "cn-shanghai", 100.0, "", &[(sh.addr, "")]),
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    for _ in 0..10 {
        let (status, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
        assert_eq!((status, body.as_str()), (200, "sh"));
    }
    // Each request tried both Beijing endpoints first (beijing ranks first from cn-beijing).
    assert_eq!((bj1.hits(), bj2.hits(), sh.hits()), (10, 10, 10));

    // With tries = 2 the last attempt's unhealthy answer goes back as is.
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("tries = 3", "tries = 2");
    std::fs::write(&cfg, text).unwrap();
    node.reload().await.unwrap();
    let (status, headers, _) = get(&c, &format!("http://{addr}/"), &[]).await;
    assert_eq!(status, 503);
    assert!(
        h(&headers, "x-backend").starts_with("bj-"),
        "the endpoint's own answer"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_gives_502_and_no_route_503() {
    let refused: SocketAddr = format!("127.0.0.1:{}", free_port(false)).parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &group("g", "cn-beijing", 100.0, "", &[(refused, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    let (status, _, _) = get(&c, &format!("http://{addr}/"), &[]).await;
    assert_eq!(status, 502, "the only endpoint refused");
    // max_fails = 1: it is now marked, the group fails and the listener has no route.
    let (status, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
    assert_eq!(status, 503, "{body}");
    let node = Arc::new(node);
    let n2 = node.clone();
    let (no_route, own_5xx) = tokio::task::spawn_blocking(move || {
        (
            metric(&n2, "gtd_no_route_total", &[]),
            metric(
                &n2,
                "gtd_requests_total",
                &["group=\"\"", "code_class=\"5xx\""],
            ),
        )
    })
    .await
    .unwrap();
    assert_eq!((no_route, own_5xx), (1.0, 2.0));
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}

// ------------------------------------------------------------------ streaming

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gigabyte_each_way_streams_with_bounded_memory() {
    let sink = Backend::start("sink", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "upstream_timeout = \"300s\"",
            &group("g", "cn-beijing", 100.0, "", &[(sink.addr, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    const GB: u64 = 1 << 30;
    let c = client();
    let before = rss_bytes();
    // The highest resident size seen while streaming (sampled), not only the size after.
    let peak = Arc::new(AtomicU64::new(before));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_bytes(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    let upload = async {
        let req = Request::post(format!("http://{addr}/sink"))
            .body(Pattern::new(GB).boxed())
            .unwrap();
        let resp = c.request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.unwrap().to_bytes()
    };
    let answer = tokio::time::timeout(Duration::from_secs(600), upload)
        .await
        .expect("upload finishes");
    assert_eq!(answer, format!("sink {GB}"));

    let download = async {
        let resp = c
            .request(
                Request::get(format!("http://{addr}/big/{GB}"))
                    .body(empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let mut n = 0_u64;
        while let Some(frame) = body.frame().await {
            n += frame.unwrap().data_ref().map_or(0, |d| d.len() as u64);
        }
        n
    };
    let received = tokio::time::timeout(Duration::from_secs(600), download)
        .await
        .expect("download finishes");
    assert_eq!(received, GB);
    sampler.abort();
    let grown = peak
        .load(Ordering::Relaxed)
        .max(rss_bytes())
        .saturating_sub(before);
    eprintln!("resident memory grew by {} MB at most", grown >> 20);
    assert!(
        grown < 200 << 20,
        "resident memory grew by {} MB while streaming 2 GB",
        grown >> 20
    );
    node.shutdown().await;
}

// ------------------------------------------------------------------ protocols and headers

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_client_reaches_an_http1_backend() {
    let b = Backend::start("one", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &group("g", "cn-beijing", 100.0, "", &[(b.addr, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let h2: Client<HttpConnector, TestBody> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    for _ in 0..5 {
        let resp = h2
            .request(
                Request::get(format!("http://{addr}/hello?x=1"))
                    .body(empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(resp.version(), http::Version::HTTP_2);
        assert_eq!(resp.status(), 200);
        let headers = resp.headers().clone();
        assert_eq!(h(&headers, "x-seen-version"), "HTTP/1.1");
        assert_eq!(h(&headers, "x-seen-path"), "/hello?x=1");
        assert_eq!(
            h(&headers, "x-seen-host"),
            addr.to_string(),
            ":authority became Host"
        );
        assert_eq!(h(&headers, "x-seen-xfh"), addr.to_string());
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "one");
    }
    // Cookies sent as two fields (as browsers send them over HTTP/2) reach the HTTP/1.1
    // backend as one header (RFC 9113 8.2.3).
    let resp = h2
        .request(
            Request::get(format!("http://{addr}/"))
                .header("cookie", "a=1")
                .header("cookie", "b=2; c=3")
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(h(resp.headers(), "x-seen-cookie"), "a=1; b=2; c=3");
    // A POST body over HTTP/2 reaches the HTTP/1.1 backend whole.
    let resp = h2
        .request(
            Request::post(format!("http://{addr}/sink"))
                .body(Pattern::new(3 << 20).boxed())
                .unwrap(),
        )
        .await
        .unwrap();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, format!("one {}", 3 << 20));
    node.shutdown().await;
}

/// The request target's host wins over a Host header (RFC 9112 3.2.2): an absolute-form request
/// is routed by, and reaches the endpoint with, the host it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_form_target_names_the_host() {
    let b = Backend::start("one", 200).await;
    let other = Backend::start("two", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "[[listener.route]]\nhost = \"routed.example\"\ngroups = [\"r\"]\n",
            &[
                group("g", "cn-beijing", 100.0, "", &[(b.addr, "")]),
                group("r", "cn-beijing", 100.0, "", &[(other.addr, "")]),
            ]
            .concat(),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"GET http://routed.example/x HTTP/1.1\r\nHost: other.example\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut answer))
        .await
        .expect("an answer")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).to_lowercase();
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert!(answer.contains("\r\nx-backend: two\r\n"), "{answer}");
    assert!(
        answer.contains("\r\nx-seen-host: routed.example\r\n"),
        "{answer}"
    );
    assert!(
        answer.contains("\r\nx-seen-xfh: routed.example\r\n"),
        "{answer}"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_repeated_host_gets_400_and_http_1_0_gets_the_endpoints() {
    let b = Backend::start("one", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &group("g", "cn-beijing", 100.0, "", &[(b.addr, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let ask = |request: &'static str| async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let answer = until_closed(&mut s, "an answer").await;
        String::from_utf8_lossy(&answer).to_lowercase()
    };
    for request in [
        "GET /x HTTP/1.1\r\nConnection: close\r\n\r\n",
        "GET /x HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\nConnection: close\r\n\r\n",
        "GET /x HTTP/1.0\r\nHost: a.example\r\nHost: a.example\r\n\r\n",
    ] {
        let answer = ask(request).await;
        assert_eq!(answer.split(' ').nth(1), Some("400"), "{request}: {answer}");
    }
    assert_eq!(b.hits(), 0);
    let answer = ask("GET /x HTTP/1.0\r\n\r\n").await;
    assert_eq!(answer.split(' ').nth(1), Some("200"), "{answer}");
    let seen = format!("\r\nx-seen-host: {}\r\n", b.addr);
    assert!(answer.contains(&seen), "{answer}");
    assert!(answer.contains("\r\nx-seen-xfh: \r\n"), "{answer}");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_hop_by_hop_and_path_prefix() {
    let b = Backend::start_with(
        "one",
        200,
        vec![
            ("connection", "x-drop"),
            ("x-drop", "1"),
            ("keep-alive", "timeout=5"),
        ],
        None,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &group(
                "g",
                "cn-beijing",
                100.0,
                "path_prefix = \"/test\"",
                &[(b.addr, "")],
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    let (status, headers, _) = get(
        &c,
        &format!("http://{addr}/foo/bar?q=1"),
        &[
            ("host", "www.example.com"),
            ("x-forwarded-for", "203.0.113.9"),
            ("connection", "x-secret"),
            ("x-secret", "hidden"),
        ],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(h(&headers, "x-seen-path"), "/test/foo/bar?q=1");
    assert_eq!(h(&headers, "x-seen-xff"), "203.0.113.9, 127.0.0.1");
    assert_eq!(h(&headers, "x-seen-xfp"), "http");
    assert_eq!(h(&headers, "x-seen-xfh"), "www.example.com");
    assert_eq!(
        h(&headers, "x-seen-host"),
        "www.example.com",
        "Host passes through"
    );
    assert_eq!(
        h(&headers, "x-seen-secret"),
        "",
        "named by Connection: removed"
    );
    assert!(!headers.contains_key("x-drop") && !headers.contains_key("keep-alive"));
    // `OPTIONS *` names no path: no prefix goes before it, on either client.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let ask = b"OPTIONS * HTTP/1.1\r\nHost: o\r\n\r\nOPTIONS * HTTP/1.1\r\nHost: o\r\n\
                Content-Length: 1\r\nConnection: close\r\n\r\nx";
    s.write_all(ask).await.unwrap();
    let answers = String::from_utf8(until_closed(&mut s, "two answers").await).unwrap();
    let seen: Vec<&str> = answers.matches("x-seen-path: *\r\n").collect();
    assert_eq!(seen.len(), 2, "{answers}");
    // Any other method with that target is refused.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET * HTTP/1.1\r\nHost: o\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = String::from_utf8(until_closed(&mut s, "an answer").await).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    node.shutdown().await;
}

// ------------------------------------------------------------------ routes

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_rules_choose_groups_and_unclaimed_paths_get_404() {
    let a = Backend::start("a", 200).await;
    let b = Backend::start("b", 200).await;
    let cc = Backend::start("c", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let routes = "\
[[listener.route]]
host = \"api.example.com\"
path_prefix = [\"/v2/\"]
groups = [\"b\"]
[[listener.route]]
host = \"*.static.test\"
groups = [\"c\"]
[[listener.route]]
path_prefix = [\"/img/\"]
groups = [\"c\"]
[[listener.route]]
host = \"api.example.com\"
path_prefix = [\"/v2/beta/\"]
header = { name = \"X-Canary\", value = \"1\" }
groups = [\"c\"]
";
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            routes,
            &format!(
                "{}{}{}",
                group("a", "cn-beijing", 100.0, "", &[(a.addr, "")]),
                group("b", "cn-shanghai", 100.0, "", &[(b.addr, "")]),
                group("c", "ap-southeast-1", 100.0, "", &[(cc.addr, "")]),
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    let url = |path: &str| format!("http://{addr}{path}");
    // (Host, path, extra headers, status, backend)
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], u16, &'a str);
    let cases: &[Case<'_>] = &[
        ("API.example.com:8080", "/v2/users", &[], 200, "b"),
        ("api.example.com", "/v2/beta/x", &[], 200, "b"),
        (
            "api.example.com",
            "/v2/beta/x",
            &[("x-canary", "1")],
            200,
            "c",
        ),
        // The host is claimed, no rule matches /v1/, no host-only rule: 404.
        ("api.example.com", "/v1/users", &[], 404, ""),
        // A path-only rule is a rule for its path, on a claimed host too.
        ("api.example.com", "/img/logo.png", &[], 200, "c"),
        ("cdn.static.test", "/anything", &[], 200, "c"),
        ("other.test", "/img/logo.png", &[], 200, "c"),
        ("other.test", "/", &[], 200, "a"),
    ];
    for (host, path, extra, status, backend) in cases {
        let mut headers = vec![("host", *host)];
        headers.extend_from_slice(extra);
        let (got, _, body) = get(&c, &url(path), &headers).await;
        assert_eq!(got, *status, "{host}{path}: {body}");
        if *status == 200 {
            assert_eq!(body, *backend, "{host}{path}");
        }
    }
    // A route whose groups are all down answers 503 while the others still route.
    let node = Arc::new(node);
    let n2 = node.clone();
    let b_addr = b.addr;
    let (status, _) = tokio::task::spawn_blocking(move || {
        admin(
            &n2,
            "POST",
            &format!("/endpoints/web/b/{b_addr}/disable"),
            None,
        )
    })
    .await
    .unwrap();
    assert_eq!(status, 200);
    let (got, _, _) = get(&c, &url("/v2/users"), &[("host", "api.example.com")]).await;
    assert_eq!(got, 503);
    let (got, _, body) = get(&c, &url("/"), &[("host", "other.test")]).await;
    assert_eq!((got, body.as_str()), (200, "a"));
    let n2 = node.clone();
    let (not_found, no_route) = tokio::task::spawn_blocking(move || {
        (
            metric(
                &n2,
                "gtd_requests_total",
                &["group=\"\"", "code_class=\"4xx\""],
            ),
            metric(&n2, "gtd_no_route_total", &[]),
        )
    })
    .await
    .unwrap();
    assert_eq!((not_found, no_route), (1.0, 1.0));
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}

// ------------------------------------------------------------------ sticky

fn cookie_value(headers: &HeaderMap) -> Option<String> {
    let set = headers.get("set-cookie")?.to_str().unwrap();
    let (pair, _) = set.split_once(';')?;
    Some(pair.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_cookie_pins_draining_keeps_disabling_moves() {
    let backends = [
        Backend::start("s0", 200).await,
        Backend::start("s1", 200).await,
        Backend::start("s2", 200).await,
    ];
    let dir = tempfile::tempdir().unwrap();
    let endpoints: Vec<(SocketAddr, &str)> = backends.iter().map(|b| (b.addr, "")).collect();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "sticky = { cookie = \"gtd_route\" }",
            &group("g", "cn-beijing", 100.0, "", &endpoints),
        ),
    );
    let node = Arc::new(start(&cfg).await);
    let addr = listener_addr(&node, "web").await;
    let c = client();
    let url = format!("http://{addr}/");
    let (_, headers, first) = get(&c, &url, &[]).await;
    let cookie = cookie_value(&headers).expect("the first response sets the cookie");
    assert!(cookie.starts_with("gtd_route="), "{cookie}");
    let cookie_header = format!("{cookie}; other=1");
    for _ in 0..10 {
        let (_, headers, body) = get(&c, &url, &[("cookie", &cookie_header)]).await;
        assert_eq!(body, first, "pinned");
        assert!(
            headers.get("set-cookie").is_none(),
            "valid cookie: not set again"
        );
    }
    // Without the cookie the rotation goes on.
    let (_, _, other) = get(&c, &url, &[]).await;
    assert_ne!(other, first);

    // Draining the endpoint (reload) keeps sticky clients on it.
    let index: usize = first[1..].parse().unwrap();
    let pinned = backends[index].addr;
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        &format!("address = \"{pinned}\"\n"),
        &format!("address = \"{pinned}\"\ndrain = true\n"),
    );
    std::fs::write(&cfg, text).unwrap();
    node.reload().await.unwrap();
    for _ in 0..5 {
        let (_, _, body) = get(&c, &url, &[("cookie", &cookie_header)]).await;
        assert_eq!(body, first, "a draining endpoint serves sticky requests");
    }
    for _ in 0..6 {
        let (_, _, body) = get(&c, &url, &[]).await;
        assert_ne!(body, first, "no new traffic to a draining endpoint");
    }
    // Disabled: re-decided elsewhere, and the cookie replaced.
    let n2 = node.clone();
    tokio::task::spawn_blocking(move || {
        admin(
            &n2,
            "POST",
            &format!("/endpoints/web/g/{pinned}/disable"),
            None,
        )
    })
    .await
    .unwrap();
    let (_, headers, moved) = get(&c, &url, &[("cookie", &cookie_header)]).await;
    assert_ne!(moved, first);
    let replaced = cookie_value(&headers).expect("cookie replaced");
    assert_ne!(replaced, cookie);
    let (_, _, again) = get(&c, &url, &[("cookie", &replaced)]).await;
    assert_eq!(again, moved);
    // A forged or stale cookie is simply re-decided.
    let (status, headers, _) = get(&c, &url, &[("cookie", "gtd_route=0123456789abcdef")]).await;
    assert_eq!(status, 200);
    assert!(headers.get("set-cookie").is_some());
    let n2 = node.clone();
    let hits = tokio::task::spawn_blocking(move || metric(&n2, "gtd_sticky_hits_total", &[]))
        .await
        .unwrap();
    assert_eq!(hits, 16.0);
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}

// ------------------------------------------------------------------ feedback

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedback_header_steers_the_group() {
    let low = Backend::start_with("low", 200, vec![("x-capacity", "1")], None).await;
    let high = Backend::start_with("high", 200, vec![("x-capacity", "9")], None).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &group(
                "g",
                "cn-beijing",
                100.0,
                "balance = \"feedback\"\nfeedback_header = \"X-Capacity\"",
                &[(low.addr, ""), (high.addr, "")],
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    // Let both report at least once, then count.
    for _ in 0..50 {
        get(&c, &format!("http://{addr}/"), &[]).await;
    }
    let (low0, high0) = (low.hits(), high.hits());
    assert!(low0 > 0 && high0 > 0);
    for _ in 0..1000 {
        get(&c, &format!("http://{addr}/"), &[]).await;
    }
    let high_share = (high.hits() - high0) as f64 / 1000.0;
    // Expected 90% (9 against 1); the picks are random, so allow a wide margin.
    assert!(high_share > 0.8, "high got {high_share}");
    node.shutdown().await;
}

// ------------------------------------------------------------------ timeouts

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_client_headers_are_cut_off() {
    let b = Backend::start("one", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "header_timeout = \"1s\"",
            &group("g", "cn-beijing", 100.0, "", &[(b.addr, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    // Half a header line, then silence: the connection is closed.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: exa").await.unwrap();
    until_closed(&mut s, "closed by gtd").await;
    // A client that sends nothing at all is closed too.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let rest = until_closed(&mut s, "closed by gtd").await;
    assert!(rest.is_empty());
    assert_eq!(b.hits(), 0);
    // A kept-alive connection that starts its next request head and stalls is closed too.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    ask_one(&mut s).await;
    s.write_all(b"GET / HTTP/1.1\r\nHo").await.unwrap();
    until_closed(&mut s, "closed by gtd").await;
    assert_eq!(b.hits(), 1);
    // An ordinary client is unaffected.
    let (status, _, _) = get(&client(), &format!("http://{addr}/"), &[]).await;
    assert_eq!(status, 200);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_first_request_head_is_bounded_by_header_timeout() {
    let b = Backend::start("one", 200).await;
    let dir = tempfile::tempdir().unwrap();
    // An idle_timeout far beyond the test's bounds: only header_timeout can close these.
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "header_timeout = \"1s\"\nidle_timeout = \"1h\"",
            &group("g", "cn-beijing", 100.0, "", &[(b.addr, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
    // HEADERS on stream 1 (":method GET"), END_STREAM but no END_HEADERS: the CONTINUATION
    // never comes.
    const PARTIAL: &[u8] = b"\0\0\x01\x01\x01\0\0\0\x01\x82";
    for opening in [PREFACE.to_vec(), [PREFACE, PARTIAL].concat()] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&opening).await.unwrap();
        until_closed(&mut s, "closed by gtd").await;
    }
    assert_eq!(b.hits(), 0);
    // A connection that asked stays open past header_timeout (waiting out the timeout is the
    // point here).
    let io = TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (mut h2, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .unwrap();
    let driver = tokio::spawn(conn);
    for _ in 0..2 {
        let request = Request::get(format!("http://{addr}/"))
            .body(empty())
            .unwrap();
        let resp = h2.send_request(request).await.expect("the same connection");
        assert_eq!(resp.status(), 200);
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    driver.abort();
    node.shutdown().await;
}

/// Sends one GET on `s` and reads its answer from backend "one" (bounded by a minute).
async fn ask_one(s: &mut TcpStream) {
    s.write_all(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    while !answer.ends_with(b"one") {
        let mut chunk = [0_u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(60), s.read(&mut chunk))
            .await
            .expect("an answer")
            .unwrap();
        assert!(n > 0, "answered before the connection closed");
        answer.extend_from_slice(&chunk[..n]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200 "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_rest_is_bounded_by_idle_timeout_a_started_head_by_header_timeout() {
    let b = Backend::start("one", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "header_timeout = \"1s\"\nidle_timeout = \"8s\"",
            &group("g", "cn-beijing", 100.0, "", &[(b.addr, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    // Resting three header_timeouts between two requests is keep-alive, not a slow head (as
    // nginx's keepalive_timeout): the second request is served on the same connection.
    let mut s = TcpStream::connect(addr).await.unwrap();
    ask_one(&mut s).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    ask_one(&mut s).await;
    // A next head that starts and stalls gets header_timeout, not idle_timeout: it is cut well
    // before the 8 s of rest would end.
    s.write_all(b"GET / HTTP/1.1\r\nHo").await.unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(6), s.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "a stalled head is cut by header_timeout");
    assert_eq!(b.hits(), 2);
    node.shutdown().await;
}

// ------------------------------------------------------------------ HTTPS and TLS

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn der_of(pem: &str) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

fn server_tls(cert: &str, key: &str, client_ca: Option<&Pki>) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(pki) => builder.with_client_cert_verifier(
            rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(pki.roots()),
                provider(),
            )
            .build()
            .unwrap(),
        ),
        None => builder.with_no_client_auth(),
    };
    Arc::new(builder.with_single_cert(chain, key).unwrap())
}

/// Connects over TLS with this SNI and ALPN list; returns the stream.
async fn tls_connect(
    addr: SocketAddr,
    pki: &Pki,
    sni: &str,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(pki.roots())
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(sni.to_owned()).unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .expect("TLS handshake with gtd")
}

/// One GET over an established connection, HTTP/2 or HTTP/1.1; (status, x-backend, body).
async fn get_over(
    stream: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    h2: bool,
    host: &str,
    path: &str,
) -> (u16, String, String) {
    let io = TokioIo::new(stream);
    let req = Request::get(format!("https://{host}{path}"))
        .header("host", host)
        .body(empty())
        .unwrap();
    let resp = if h2 {
        let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut req = req;
        req.headers_mut().remove("host");
        sender.send_request(req).await.unwrap()
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        let mut req = req;
        *req.uri_mut() = path.parse().unwrap();
        sender.send_request(req).await.unwrap()
    };
    let status = resp.status().as_u16();
    let backend = h(resp.headers(), "x-backend").to_owned();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, backend, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_sni_alpn_and_tls_with_mtls_to_endpoints() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    // gtd's certificates: the first is the default, the second serves *.b.test by SNI.
    let (default_cert, default_key) = pki.issue(&["default.test"], false);
    let (wild_cert, wild_key) = pki.issue(&["*.b.test"], false);
    write("default.pem", &default_cert);
    write("default.key", &default_key);
    write("wild.pem", &wild_cert);
    write("wild.key", &wild_key);
    write("ca.pem", &pki.ca_pem());
    // gtd's client certificate towards endpoints that require one.
    let (client_cert, client_key) = pki.issue(&["gtd.test"], true);
    write("client.pem", &client_cert);
    write("client.key", &client_key);
    // Endpoints: one requiring a client certificate (mTLS), one plain TLS.
    let (backend_cert, backend_key) = pki.issue(&["backend.test"], false);
    let mtls = Backend::start_with(
        "mtls",
        200,
        vec![],
        Some(server_tls(&backend_cert, &backend_key, Some(&pki))),
    )
    .await;
    let tls_only = Backend::start_with(
        "tls",
        200,
        vec![],
        Some(server_tls(&backend_cert, &backend_key, None)),
    )
    .await;

    let routes = "\
tls = { certs = [{ cert = \"default.pem\", key = \"default.key\" }, { cert = \"wild.pem\", key = \"wild.key\" }] }
[[listener.route]]
path_prefix = [\"/nocert/\"]
groups = [\"nocert\"]
[[listener.route]]
path_prefix = [\"/plain/\"]
groups = [\"plain\"]
[[listener.route]]
path_prefix = [\"/system/\"]
groups = [\"system\"]
";
    let cfg = write_config(
        dir.path(),
        &listener(
            "secure",
            "https",
            routes,
            &format!(
                "{}{}{}{}",
                group(
                    "mtls",
                    "cn-beijing",
                    100.0,
                    "tls = { ca = \"ca.pem\", sni = \"backend.test\", client_cert = \"client.pem\", client_key = \"client.key\" }",
                    &[(mtls.addr, "max_fails = 0")],
                ),
                // Same endpoint without a client certificate: its handshake is refused.
                group(
                    "nocert",
                    "cn-shanghai",
                    100.0,
                    "tls = { ca = \"ca.pem\", sni = \"backend.test\" }",
                    &[(mtls.addr, "max_fails = 0")],
                ),
                group(
                    "plain",
                    "cn-hangzhou",
                    100.0,
                    "tls = { insecure_skip_verify = true, min_version = \"1.3\" }",
                    &[(tls_only.addr, "")],
                ),
                // No `ca`: verified with the system bundle, which does not hold the test CA.
                group(
                    "system",
                    "cn-shenzhen",
                    100.0,
                    "tls = { sni = \"backend.test\" }",
                    &[(tls_only.addr, "max_fails = 0")],
                ),
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "secure").await;

    // SNI picks the wildcard certificate; ALPN offers h2 first and gets it.
    let s = tls_connect(addr, &pki, "x.b.test", &[b"h2", b"http/1.1"]).await;
    let (_, conn) = s.get_ref();
    assert_eq!(conn.alpn_protocol(), Some(&b"h2"[..]));
    assert_eq!(
        conn.peer_certificates().unwrap()[0].as_ref(),
        der_of(&wild_cert)
    );
    let (status, backend, _) = get_over(s, true, "x.b.test", "/hello").await;
    assert_eq!(
        (status, backend.as_str()),
        (200, "mtls"),
        "mTLS to the endpoint"
    );

    // Another name gets the default certificate; an HTTP/1.1-only client gets HTTP/1.1.
    let s = tls_connect(addr, &pki, "default.test", &[b"http/1.1"]).await;
    let (_, conn) = s.get_ref();
    assert_eq!(conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(
        conn.peer_certificates().unwrap()[0].as_ref(),
        der_of(&default_cert)
    );
    let (status, backend, _) = get_over(s, false, "default.test", "/plain/x").await;
    assert_eq!(
        (status, backend.as_str()),
        (200, "tls"),
        "TLS 1.3, unverified"
    );

    // A plaintext request on the HTTPS port is told so (400, as nginx does), not just cut off;
    // the listener goes on serving TLS.
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: default.test\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(30), plain.read_to_string(&mut answer))
        .await
        .expect("answered and closed")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.ends_with("this port speaks HTTPS: the plain HTTP request was not read\n"));

    // Verified against the system bundle, the endpoint's private CA is unknown: 502.
    let s = tls_connect(addr, &pki, "default.test", &[b"http/1.1"]).await;
    let (status, _, _) = get_over(s, false, "default.test", "/system/x").await;
    assert_eq!(status, 502);

    // Without a client certificate the endpoint refuses the handshake: 502.
    let s = tls_connect(addr, &pki, "default.test", &[b"http/1.1"]).await;
    let (status, _, _) = get_over(s, false, "default.test", "/nocert/x").await;
    assert_eq!(status, 502);

    // A certificate that does not parse fails a reload, naming the file; the running config
    // stays and keeps serving.
    std::fs::write(dir.path().join("wild.pem"), "not a certificate\n").unwrap();
    let err = node.reload().await.unwrap_err();
    assert!(err.contains("wild.pem"), "{err}");
    let s = tls_connect(addr, &pki, "x.b.test", &[b"h2"]).await;
    let (status, _, _) = get_over(s, true, "x.b.test", "/").await;
    assert_eq!(status, 200);
    node.shutdown().await;

    // And a node cannot start with it.
    let err = Node::start(options(&cfg)).await.err().expect("start fails");
    assert!(format!("{err:#}").contains("wild.pem"), "{err:#}");
    // A key that does not match its certificate is named too.
    write("wild.pem", &wild_cert);
    write("wild.key", &default_key);
    let err = Node::start(options(&cfg)).await.err().expect("start fails");
    assert!(format!("{err:#}").contains("wild.key"), "{err:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_endpoint_times_out_with_504() {
    // Accepts connections and never answers.
    let (hung_addr, hold) = socket_backend(|s| async move {
        let _open = s;
        std::future::pending::<()>().await;
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "upstream_timeout = \"1s\"",
            &group(
                "g",
                "cn-beijing",
                100.0,
                "",
                &[(hung_addr, "max_fails = 0")],
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let (status, _, _) = get(&client(), &format!("http://{addr}/"), &[]).await;
    assert_eq!(status, 504);
    node.shutdown().await;
    hold.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_does_not_stretch_upstream_timeout() {
    // The endpoint answers 3.5 s after the head; upstream_timeout is 2 s from the end of the
    // small body, so the answer must not be waited for (it once was: the deadline was re-armed
    // because the upload never counted as finished).
    let (addr, hold) = delayed_backend(Duration::from_millis(3500)).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "upstream_timeout = \"2s\"",
            &group("g", "cn-beijing", 100.0, "", &[(addr, "max_fails = 0")]),
        ),
    );
    let node = start(&cfg).await;
    let web = listener_addr(&node, "web").await;
    let url = format!("http://{web}/form");
    let (status, _, _) = send(&client(), "POST", &url, &[], full("a=1")).await;
    assert_eq!(status, 504);
    node.shutdown().await;
    hold.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_breaks_off_or_stalls_its_upload_fails_no_endpoint() {
    let b = Backend::start("one", 200).await;
    let dir = tempfile::tempdir().unwrap();
    // One endpoint with the default max_fails = 1: a failure blamed on it would leave the
    // listener without a route for fail_timeout.
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "upstream_timeout = \"1s\"",
            &group("g", "cn-beijing", 100.0, "", &[(b.addr, "")]),
        ),
    );
    let node = start(&cfg).await;
    let web = listener_addr(&node, "web").await;
    let own = |class: &str| {
        let class = format!("code_class=\"{class}\"");
        metric(&node, "gtd_requests_total", &["group=\"\"", &class])
    };
    let upload = b"POST /sink HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\nabc";

    // Broken off: the client closes once the endpoint has the request.
    let mut s = TcpStream::connect(web).await.unwrap();
    s.write_all(upload).await.unwrap();
    until("the endpoint gets the upload", || b.hits() == 1).await;
    drop(s);
    until("gtd answers the broken upload", || {
        own("4xx") + own("5xx") >= 1.0
    })
    .await;
    assert_eq!((own("4xx"), own("5xx")), (1.0, 0.0));
    let (status, _, body) = get(&client(), &format!("http://{web}/"), &[]).await;
    assert_eq!(
        (status, body.as_str()),
        (200, "one"),
        "the endpoint still serves"
    );

    // Stalled: the client keeps the connection and sends nothing more.
    let mut s = TcpStream::connect(web).await.unwrap();
    s.write_all(upload).await.unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 408 "), "{head}");
    let (status, _, _) = get(&client(), &format!("http://{web}/"), &[]).await;
    assert_eq!(status, 200, "the endpoint still serves");
    assert_eq!((own("4xx"), own("5xx")), (2.0, 0.0));
    // A small body is read whole before any endpoint is asked: its stall reaches none.
    let hits = b.hits();
    let mut s = TcpStream::connect(web).await.unwrap();
    s.write_all(b"POST /sink HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nabc")
        .await
        .unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 408 "), "{head}");
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    assert_eq!(b.hits(), hits);
    // A small body that keeps coming, slower in all than upstream_timeout: the attempt's clock
    // starts once it is in (the pauses are the client's pace, the point of the test).
    let mut s = TcpStream::connect(web).await.unwrap();
    s.write_all(b"POST /sink HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\n")
        .await
        .unwrap();
    for byte in b"slows" {
        tokio::time::sleep(Duration::from_millis(400)).await;
        s.write_all(&[*byte]).await.unwrap();
    }
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    let (status, _, _) = get(&client(), &format!("http://{web}/"), &[]).await;
    assert_eq!(status, 200, "the endpoint still serves");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_applies_to_http_connections() {
    let b = Backend::start("one", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "max_connections = 1",
            &group("g", "cn-beijing", 100.0, "", &[(b.addr, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    // One keep-alive connection holds the only slot…
    let mut first = tokio::net::TcpStream::connect(addr).await.unwrap();
    first
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0_u8; 12];
    first.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"HTTP/1.1 200");
    // …so a second one is closed without an answer.
    let mut second = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = second.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let rest = until_closed(&mut second, "closed").await;
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    // Once the first closes, new connections are served again.
    drop(first);
    let c = client();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let req = Request::get(format!("http://{addr}/"))
            .body(empty())
            .unwrap();
        if let Ok(Ok(resp)) = tokio::time::timeout(Duration::from_secs(10), c.request(req)).await
            && resp.status() == 200
        {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "slot never freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.shutdown().await;
}

// ------------------------------------------------------------------ upgrades

/// A backend that switches protocols: `101` to a request asking for `Upgrade: websocket`, then
/// an echo until the client closes; `426` to anything else. Keeps the request heads it read.
/// A backend on a raw socket: `serve` handles each accepted connection. Connections are served
/// in a JoinSet owned by the returned task: aborting it stops them all.
async fn socket_backend<F, Fut>(serve: F) -> (SocketAddr, JoinHandle<()>)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut open = tokio::task::JoinSet::new();
        while let Ok((s, _)) = listener.accept().await {
            open.spawn(serve(s));
        }
    });
    (addr, task)
}

async fn upgrade_backend() -> (
    SocketAddr,
    Arc<std::sync::Mutex<Vec<String>>>,
    JoinHandle<()>,
) {
    let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&heads);
    let (addr, task) = socket_backend(move |mut s| {
        let seen = Arc::clone(&seen);
        async move {
            let head = read_head(&mut s).await.to_ascii_lowercase();
            let upgrade = head.contains("\r\nupgrade: websocket\r\n");
            seen.lock().unwrap().push(head);
            if !upgrade {
                let _ = s
                    .write_all(b"HTTP/1.1 426 Upgrade Required\r\ncontent-length: 0\r\n\r\n")
                    .await;
                return;
            }
            s.write_all(
                b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            )
            .await
            .unwrap();
            let (mut r, mut w) = s.split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
        }
    })
    .await;
    (addr, heads, task)
}

/// Reads up to the end of an HTTP head (bounded: 16 KiB, one minute).
async fn read_head<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> String {
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

const WEBSOCKET_REQUEST: &[u8] = b"GET /chat HTTP/1.1\r\nHost: chat.example\r\nConnection: keep-alive, Upgrade, TE\r\nTE: trailers\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrade_is_relayed_both_ways_and_closed_when_idle() {
    let (backend, heads, backend_task) = upgrade_backend().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "idle_timeout = \"1s\"",
            &group("g", "cn-beijing", 100.0, "", &[(backend, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;

    // The handshake goes through with its Upgrade, and the 101 comes back.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(WEBSOCKET_REQUEST).await.unwrap();
    let head = read_head(&mut s).await.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("\r\nupgrade: websocket\r\n"), "{head}");
    assert!(head.contains("\r\nconnection: upgrade\r\n"), "{head}");
    {
        let heads = heads.lock().unwrap();
        let sent = &heads[0];
        assert!(sent.starts_with("get /chat http/1.1\r\n"), "{sent}");
        assert!(sent.contains("\r\nconnection: upgrade\r\n"), "{sent}");
        assert!(
            !sent.contains("\r\nte:"),
            "a tunnel has no trailers: {sent}"
        );
        assert!(
            sent.contains("\r\nsec-websocket-key: dghlihnhbxbszsbub25jzq==\r\n"),
            "{sent}"
        );
        assert!(
            sent.contains("\r\nx-forwarded-for: 127.0.0.1\r\n"),
            "{sent}"
        );
    }
    // Bytes both ways, several times, then the client's close ends the tunnel.
    for round in 0..20 {
        let msg = format!("frame {round} through the tunnel");
        s.write_all(msg.as_bytes()).await.unwrap();
        let mut back = vec![0_u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(60), s.read_exact(&mut back))
            .await
            .expect("echo in time")
            .unwrap();
        assert_eq!(back, msg.as_bytes());
    }
    s.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut rest))
        .await
        .expect("closed after the client's close")
        .unwrap();
    assert!(rest.is_empty());

    // A tunnel where nothing moves is closed after idle_timeout.
    let mut quiet = tokio::net::TcpStream::connect(addr).await.unwrap();
    quiet.write_all(WEBSOCKET_REQUEST).await.unwrap();
    assert!(read_head(&mut quiet).await.starts_with("HTTP/1.1 101"));
    let rest = until_closed(&mut quiet, "an idle tunnel is closed").await;
    assert!(rest.is_empty());

    // A request without Upgrade is an ordinary one: the backend's 426 comes back.
    let (status, _, _) = get(&client(), &format!("http://{addr}/chat"), &[]).await;
    assert_eq!(status, 426);
    assert!(
        !heads.lock().unwrap()[2].contains("\r\nupgrade:"),
        "no Upgrade is forwarded for a request that does not ask"
    );
    // `curl --http2` on cleartext asks for h2c: not switched, the request goes on in HTTP/1.1.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /chat HTTP/1.1\r\nHost: chat.example\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
        .await
        .unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 426"), "{head}");
    assert!(
        !heads.lock().unwrap()[3].contains("\r\nupgrade:"),
        "h2c is not forwarded"
    );
    node.shutdown().await;
    backend_task.abort();
}

// ------------------------------------------------------------------ stalled endpoints

/// A backend that answers every request with `content-length: 100`, then sends the body as
/// ten 10-byte chunks `gap` apart, or (no gap) only the first chunk and then nothing while the
/// connection stays open.
async fn dripping_backend(gap: Option<Duration>) -> (SocketAddr, JoinHandle<()>) {
    socket_backend(move |mut s| async move {
        read_head(&mut s).await;
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")
            .await
            .unwrap();
        let Some(gap) = gap else {
            // Stalled: the connection stays open, silent, until the test ends.
            std::future::pending::<()>().await;
            return;
        };
        for _ in 1..10 {
            tokio::time::sleep(gap).await;
            if s.write_all(b"0123456789").await.is_err() {
                return;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_silent_mid_body_is_cut_off_a_slow_one_is_not() {
    let (stalled, stalled_task) = dripping_backend(None).await;
    let (slow, slow_task) = dripping_backend(Some(Duration::from_millis(200))).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}\n{}",
            listener(
                "stalled",
                "http",
                "upstream_timeout = \"1s\"",
                &group("g", "cn-beijing", 100.0, "", &[(stalled, "")]),
            ),
            listener(
                "slow",
                "http",
                "upstream_timeout = \"2s\"",
                &group("g", "cn-beijing", 100.0, "", &[(slow, "")]),
            ),
        ),
    );
    let node = start(&cfg).await;
    let c = client();

    // Headers and the first bytes arrive; then the endpoint goes silent and gtd cuts the body
    // (the client sees an error, not a hang).
    let addr = listener_addr(&node, "stalled").await;
    let response = c
        .request(
            Request::get(format!("http://{addr}/"))
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = tokio::time::timeout(Duration::from_secs(60), response.into_body().collect())
        .await
        .expect("the stalled body ends");
    assert!(body.is_err(), "a cut body is an error for the client");

    // An endpoint that keeps sending, slowly, is never cut: 100 bytes over ~2 s with a 2 s
    // timeout, because no gap reaches it.
    let addr = listener_addr(&node, "slow").await;
    let (status, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
    assert_eq!(status, 200);
    assert_eq!(body.len(), 100);

    node.shutdown().await;
    stalled_task.abort();
    slow_task.abort();
}

/// A backend that answers every request `200 slow`, `delay` after reading its head.
async fn delayed_backend(delay: Duration) -> (SocketAddr, JoinHandle<()>) {
    socket_backend(move |mut s| async move {
        while !read_head(&mut s).await.is_empty() {
            tokio::time::sleep(delay).await;
            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nslow";
            if s.write_all(answer).await.is_err() {
                return;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_connection_is_closed_after_idle_timeout_a_waiting_one_is_not() {
    let b = Backend::start("one", 200).await;
    let (slow, slow_task) = delayed_backend(Duration::from_millis(2500)).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}\n{}",
            listener(
                "web",
                "http",
                "idle_timeout = \"1s\"",
                &group("g", "cn-beijing", 100.0, "", &[(b.addr, "")]),
            ),
            listener(
                "slow",
                "http",
                "idle_timeout = \"1s\"\nupstream_timeout = \"60s\"",
                &group("g", "cn-beijing", 100.0, "", &[(slow, "")]),
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    let mut conn = tokio::spawn(conn);
    let resp = sender
        .send_request(
            Request::get(format!("http://{addr}/"))
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.into_body().collect().await.unwrap().to_bytes(), "one");
    // Nothing more is sent: gtd says GOAWAY and closes, so the client's connection ends.
    tokio::time::timeout(Duration::from_secs(60), &mut conn)
        .await
        .expect("gtd closes an idle HTTP/2 connection")
        .unwrap()
        .unwrap();
    assert!(sender.is_closed());

    // A request whose endpoint answers after 2.5 s keeps its connection: nothing moves on it,
    // but a request is waiting for its response (idle_timeout 1 s, upstream_timeout 60 s).
    let addr = listener_addr(&node, "slow").await;
    let (status, _, body) = get(&client(), &format!("http://{addr}/"), &[]).await;
    assert_eq!((status, body.as_str()), (200, "slow"));
    node.shutdown().await;
    slow_task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_over_https_is_relayed() {
    let (backend, heads, backend_task) = upgrade_backend().await;
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = pki.issue(&["chat.test"], false);
    std::fs::write(dir.path().join("chat.pem"), cert).unwrap();
    std::fs::write(dir.path().join("chat.key"), key).unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "wss",
            "https",
            "tls = { certs = [{ cert = \"chat.pem\", key = \"chat.key\" }] }",
            &group("g", "cn-beijing", 100.0, "", &[(backend, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "wss").await;
    let mut s = tls_connect(addr, &pki, "chat.test", &[b"http/1.1"]).await;
    s.write_all(WEBSOCKET_REQUEST).await.unwrap();
    let head = read_head(&mut s).await.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(
        heads.lock().unwrap()[0].contains("\r\nx-forwarded-proto: https\r\n"),
        "the endpoint learns the client came over TLS"
    );
    for round in 0..5 {
        let msg = format!("wss frame {round}");
        s.write_all(msg.as_bytes()).await.unwrap();
        let mut back = vec![0_u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(60), s.read_exact(&mut back))
            .await
            .expect("echo in time")
            .unwrap();
        assert_eq!(back, msg.as_bytes());
    }
    drop(s);
    node.shutdown().await;
    backend_task.abort();
}

// ------------------------------------------------------------------ gtd's own HTTP/1.1 client

/// A raw backend: for each request head read, `answer(method, path)` gives the bytes to write
/// back and whether to close the connection after them.
async fn scripted_backend(
    answer: fn(&str, &str) -> (Vec<u8>, bool),
) -> (SocketAddr, Arc<AtomicU64>, JoinHandle<()>) {
    let accepted = Arc::new(AtomicU64::new(0));
    let count = Arc::clone(&accepted);
    let (addr, task) = socket_backend(move |mut s| {
        count.fetch_add(1, Ordering::Relaxed);
        async move {
            loop {
                let head = read_head(&mut s).await;
                let Some(line) = head.lines().next().filter(|l| !l.is_empty()) else {
                    return;
                };
                let mut parts = line.split(' ');
                let (method, path) = (parts.next().unwrap(), parts.next().unwrap());
                let (bytes, close) = answer(method, path);
                if s.write_all(&bytes).await.is_err() || close {
                    return;
                }
            }
        }
    })
    .await;
    (addr, accepted, task)
}

fn framings(method: &str, path: &str) -> (Vec<u8>, bool) {
    let text: &str = match (method, path) {
        ("GET", "/chunked") => {
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nx-t: 1\r\n\r\n"
        }
        ("GET", "/close") => return (b"HTTP/1.1 200 OK\r\n\r\nuntil the end".to_vec(), true),
        ("HEAD", "/head") => "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n",
        ("GET", "/continue") => {
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
        }
        ("GET", "/empty") => "HTTP/1.1 204 No Content\r\n\r\n",
        ("GET", "/bad") => "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello",
        _ => "HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nplain",
    };
    (text.as_bytes().to_vec(), false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodiless_requests_read_every_response_framing() {
    let (backend, _, task) = scripted_backend(framings).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &group("g", "cn-beijing", 100.0, "", &[(backend, "max_fails = 0")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    let url = |p: &str| format!("http://{addr}{p}");
    // Twice each, so the second one runs on a reused connection where there is one.
    for _ in 0..2 {
        assert_eq!(get(&c, &url("/chunked"), &[]).await.2, "hello world");
        assert_eq!(get(&c, &url("/close"), &[]).await.2, "until the end");
        assert_eq!(get(&c, &url("/continue"), &[]).await.2, "ok");
        let (status, _, body) = get(&c, &url("/empty"), &[]).await;
        assert_eq!((status, body.as_str()), (204, ""));
        let (status, headers, body) = send(&c, "HEAD", &url("/head"), &[], empty()).await;
        assert_eq!((status, body.as_str()), (200, ""));
        assert_eq!(h(&headers, "content-length"), "100");
        // Conflicting Content-Length: refused, the client gets 502.
        assert_eq!(get(&c, &url("/bad"), &[]).await.0, 502);
        // Content-Length says 4 and 5 bytes come: the client gets 4, and the connection, with
        // a byte too many, is not reused.
        assert_eq!(get(&c, &url("/"), &[]).await.2, "plai");
    }
    node.shutdown().await;
    task.abort();
}

/// 101 header fields on `/many`, 98 on anything else (gtd adds `date`: the client, hyper too,
/// takes 100 at most).
fn many_fields(_: &str, path: &str) -> (Vec<u8>, bool) {
    let fields = if path == "/many" { 101 } else { 98 };
    let mut text = String::from("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n");
    for i in 1..fields {
        text.push_str(&format!("x-f{i}: v\r\n"));
    }
    text.push_str("\r\nok");
    (text.into_bytes(), false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_100_header_fields_each_way_on_either_protocol() {
    let (backend, _, task) = scripted_backend(many_fields).await;
    let dir = tempfile::tempdir().unwrap();
    // The default max_fails = 1: a response refused for its size must not fail the endpoint.
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &group("g", "cn-beijing", 100.0, "", &[(backend, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let h2: Client<HttpConnector, TestBody> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    for (clients, name) in [(client(), "HTTP/1.1"), (h2, "HTTP/2")] {
        let ask = |fields: usize, path: &str| {
            let mut request = Request::get(format!("http://{addr}{path}"));
            // The client adds its own Host (or :authority, not a field).
            let own = usize::from(name == "HTTP/1.1");
            for i in own..fields {
                request = request.header(format!("x-h{i}"), "v");
            }
            clients.request(request.body(empty()).unwrap())
        };
        assert_eq!(ask(100, "/").await.unwrap().status(), 200, "{name}");
        assert_eq!(ask(101, "/").await.unwrap().status(), 431, "{name}");
        if name == "HTTP/2" {
            // A browser's cookies, one field each: one header once joined.
            let mut request = Request::get(format!("http://{addr}/"));
            for i in 0..120 {
                request = request.header("cookie", format!("c{i}=v"));
            }
            let resp = clients.request(request.body(empty()).unwrap()).await;
            assert_eq!(resp.unwrap().status(), 200);
        }
        let resp = ask(1, "/many").await.unwrap();
        assert_eq!(resp.status(), 502, "{name}");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            body,
            "the endpoint's response head was invalid or too large\n"
        );
        // Not the endpoint's failure: it still serves.
        let resp = ask(1, "/").await.unwrap();
        assert!(resp.headers().len() >= 98, "{name}");
    }
    node.shutdown().await;
    task.abort();
}

/// Answers, then closes the connection as an endpoint whose keep-alive timer fires does, with
/// no `Connection: close` to warn.
fn one_per_connection(_: &str, _: &str) -> (Vec<u8>, bool) {
    (
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec(),
        true,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_the_endpoint_closed_is_replaced_without_an_error() {
    let (backend, accepted, task) = scripted_backend(one_per_connection).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &group("g", "cn-beijing", 100.0, "", &[(backend, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    for _ in 0..20 {
        let (status, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
        assert_eq!((status, body.as_str()), (200, "ok"));
    }
    // One connection per request: each reused one was found closed and replaced.
    assert!(accepted.load(Ordering::Relaxed) >= 20);
    node.shutdown().await;
    task.abort();
}

// ------------------------------------------------------------------ trailers

/// Answers every request with a chunked body and trailer fields, one of which (Content-Length)
/// a trailer may not carry; says in headers whether the request offered `TE: trailers` and
/// which trailer it carried.
async fn trailer_backend() -> (SocketAddr, JoinHandle<()>) {
    socket_backend(|mut s| async move {
        loop {
            let head = read_head(&mut s).await.to_ascii_lowercase();
            if head.is_empty() {
                return;
            }
            let te = if head.contains("\r\nte: trailers\r\n") {
                "trailers"
            } else {
                "none"
            };
            // A chunked upload, read up to its empty line; its trailer lines follow the `0`.
            let mut got = String::from("none");
            if head.contains("\r\ntransfer-encoding: chunked\r\n") {
                let body = read_head(&mut s).await;
                let last = body.find("\r\n0\r\n").map_or(3, |at| at + 5);
                let fields = body[last..].trim_end();
                if !fields.is_empty() {
                    got = fields.replace("\r\n", "|");
                }
            }
            let declared = head
                .split("\r\n")
                .find_map(|l| l.strip_prefix("trailer: "))
                .unwrap_or("none")
                .to_owned();
            let answer = format!(
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-sum\r\n\
                 x-seen-te: {te}\r\nx-seen-trailer: {got}\r\nx-seen-declared: {declared}\r\n\r\n\
                 3\r\nabc\r\n0\r\nX-Sum: 900150983cd2\r\ncontent-length: 3\r\n\r\n"
            );
            if s.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_are_forwarded_both_ways_by_either_client() {
    let (backend, task) = trailer_backend().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &group("g", "cn-beijing", 100.0, "", &[(backend, "max_fails = 0")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;

    // HTTP/1.1 clients that accept trailers: a GET (gtd's own client) and a chunked POST with
    // a trailer of its own (hyper's client).
    let requests: [&[u8]; 2] = [
        b"GET /t HTTP/1.1\r\nHost: t\r\nTE: trailers\r\nConnection: TE, close\r\n\r\n",
        b"POST /t HTTP/1.1\r\nHost: t\r\nTE: trailers\r\nConnection: TE, close\r\n\
          Transfer-Encoding: chunked\r\nTrailer: x-req\r\n\r\n\
          5\r\nhello\r\n0\r\nx-req: r1\r\n\r\n",
    ];
    for (request, seen) in requests.into_iter().zip(["none", "x-req: r1"]) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let answer = String::from_utf8(until_closed(&mut s, "an answer").await).unwrap();
        let answer = answer.to_ascii_lowercase();
        assert!(answer.contains("\r\nx-seen-te: trailers\r\n"), "{answer}");
        assert!(
            answer.contains(&format!("\r\nx-seen-trailer: {seen}\r\n")),
            "{answer}"
        );
        assert!(answer.contains("\r\ntrailer: x-sum\r\n"), "{answer}");
        assert!(
            answer.ends_with("\r\n3\r\nabc\r\n0\r\nx-sum: 900150983cd2\r\n\r\n"),
            "the trailer, without content-length: {answer}"
        );
    }

    // An HTTP/1.1 client that did not offer TE: trailers gets the body without them.
    let c = client();
    let (status, headers, body) = get(&c, &format!("http://{addr}/t"), &[]).await;
    assert_eq!((status, body.as_str()), (200, "abc"));
    assert_eq!(h(&headers, "x-seen-te"), "none");

    // HTTP/2 clients get the trailer whichever client gtd used.
    let h2: Client<HttpConnector, TestBody> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    for (method, body) in [("GET", empty()), ("POST", full("x=1"))] {
        let resp = h2
            .request(
                Request::builder()
                    .method(method)
                    .uri(format!("http://{addr}/t"))
                    .body(body)
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{method}");
        let collected = resp.into_body().collect().await.unwrap();
        let trailers = collected.trailers().cloned().expect("trailers");
        assert_eq!(h(&trailers, "x-sum"), "900150983cd2", "{method}");
        assert!(trailers.get("content-length").is_none(), "{method}");
        assert_eq!(collected.to_bytes(), "abc", "{method}");
    }
    // An HTTP/2 request's own trailers, after a body of known length, reach the endpoint.
    let mut fields = HeaderMap::new();
    fields.insert("x-req", "r2".parse().unwrap());
    // Not a field a trailer may carry: dropped, and not declared either.
    fields.insert("content-length", "9".parse().unwrap());
    let body = Full::new(Bytes::from_static(b"hello"))
        .with_trailers(async move { Some(Ok(fields)) })
        .boxed();
    let request = Request::post(format!("http://{addr}/t"))
        .header("content-length", "5")
        .body(body)
        .unwrap();
    let resp = h2.request(request).await.unwrap();
    assert_eq!(h(resp.headers(), "x-seen-trailer"), "x-req: r2");
    assert_eq!(h(resp.headers(), "x-seen-declared"), "x-req");

    // A body ended by its trailers gives its endpoint connection back: a few more POSTs
    // (hyper's client) open no new one.
    let opened = || metric(&node, "gtd_connections_total", &["listener=\"web\""]);
    let before = opened();
    for _ in 0..5 {
        let request = Request::post(format!("http://{addr}/t")).body(full("x=1"));
        let collected = h2
            .request(request.unwrap())
            .await
            .unwrap()
            .into_body()
            .collect();
        assert!(collected.await.unwrap().trailers().is_some());
    }
    assert_eq!(opened(), before);
    node.shutdown().await;
    task.abort();
}
