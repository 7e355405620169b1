//! Trailers forwarded both ways by either client.

use crate::common::*;
use crate::harness::*;

use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

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

    // A body ended by its trailers gives its endpoint connection back: a few more PUTs
    // (hyper's client; a POST would open its own under `reuse = "safe"`) open no new one.
    let opened = || metric(&node, "gtd_connections_total", &["listener=\"web\""]);
    let before = opened();
    for _ in 0..5 {
        let request = Request::put(format!("http://{addr}/t")).body(full("x=1"));
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
