//! gtd's own HTTP/1.1 client: every response framing, the header field limit, the keep-alive race.

use crate::common::*;
use crate::harness::*;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http::Request;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;

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

/// A request in flight across a reload that gives its group a new pool: its endpoint connection
/// is closed once the response ends, not kept by the replaced snapshot's pool. Nothing sweeps that pool, and the client
/// connection accepted before the reload keeps it alive: the endpoint connection stayed open
/// for the client's whole life (in `CLOSE_WAIT` once the endpoint closed its side), one more
/// for every request in flight at every reload or DNS change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_connection_in_use_across_a_reload_is_closed_when_its_response_ends() {
    use tokio::io::AsyncReadExt;
    let release = Arc::new(tokio::sync::Notify::new());
    let (asked, closed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (b_release, b_asked, b_closed) = (release.clone(), asked.clone(), closed.clone());
    let (backend, task) = socket_backend(move |mut s| {
        let (release, asked, closed) = (b_release.clone(), b_asked.clone(), b_closed.clone());
        async move {
            // Answers the client's requests (`/proxied`) once released and health checks at
            // once, keeps the connection open until gtd closes it, then counts the close of a
            // connection that carried the client's requests.
            let mut proxied = false;
            loop {
                let head = read_head(&mut s).await;
                if head.is_empty() {
                    if proxied {
                        closed.fetch_add(1, Ordering::Relaxed);
                    }
                    return;
                }
                if head.starts_with("GET /proxied ") {
                    proxied = true;
                    asked.fetch_add(1, Ordering::Relaxed);
                    release.notified().await;
                }
                let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                if s.write_all(ok).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "idle_timeout = \"1h\"",
            &group("g", "cn-beijing", 100.0, "", &[(backend, "max_fails = 0")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    // A keep-alive client whose request waits at the endpoint.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /proxied HTTP/1.1\r\nHost: web\r\n\r\n")
        .await
        .unwrap();
    until("the request at the endpoint", || {
        asked.load(Ordering::Relaxed) == 1
    })
    .await;
    // A reload that changes what the pool keeps (an unchanged group keeps its pool).
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text = text.replace("idle_timeout = \"1h\"", "idle_timeout = \"2h\"");
    std::fs::write(&cfg, text).unwrap();
    node.reload().await.unwrap();
    release.notify_one();
    let mut got = Vec::new();
    while !got.ends_with(b"ok") {
        let mut buf = [0_u8; 512];
        let n = s.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "the response, whole: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    // The client stays connected; the endpoint connection closes anyway.
    until(
        "the endpoint connection closed after its response ended across a reload",
        || closed.load(Ordering::Relaxed) == 1,
    )
    .await;
    // The running snapshot's pool serves the same client next, on a new connection.
    s.write_all(b"GET /proxied HTTP/1.1\r\nHost: web\r\n\r\n")
        .await
        .unwrap();
    until("the next request at the endpoint", || {
        asked.load(Ordering::Relaxed) == 2
    })
    .await;
    release.notify_one();
    drop(s);
    node.shutdown().await;
    task.abort();
}

/// A reload that changes nothing a group's connections depend on keeps its idle connections:
/// the request after it takes the one the request before it left. Each reload (and each DNS
/// change anywhere in the config) made every group connect anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_a_groups_idle_endpoint_connections() {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    // The connections (by the order they were accepted) that carried the client's requests.
    let carried = Arc::new(Mutex::new(BTreeSet::new()));
    let accepted = Arc::new(AtomicU64::new(0));
    let (b_carried, b_accepted) = (carried.clone(), accepted.clone());
    let (backend, task) = socket_backend(move |mut s| {
        let n = b_accepted.fetch_add(1, Ordering::Relaxed);
        let carried = b_carried.clone();
        async move {
            loop {
                let head = read_head(&mut s).await;
                if head.is_empty() {
                    return;
                }
                if head.starts_with("GET /proxied ") {
                    gtd::sync::lock(&carried).insert(n);
                }
                let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                if s.write_all(ok).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
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
    for _ in 0..3 {
        let (status, _, body) = get(&c, &format!("http://{addr}/proxied"), &[]).await;
        assert_eq!((status, body.as_str()), (200, "ok"));
        node.reload().await.unwrap();
    }
    let (status, _, _) = get(&c, &format!("http://{addr}/proxied"), &[]).await;
    assert_eq!(status, 200);
    let carried = gtd::sync::lock(&carried).clone();
    assert_eq!(
        carried.len(),
        1,
        "connections that carried the 4 requests: {carried:?}"
    );
    node.shutdown().await;
    task.abort();
}
