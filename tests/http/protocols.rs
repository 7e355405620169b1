//! Protocols and headers: HTTP/2 to HTTP/1.1, the Host a request names, forwarded and hop-by-hop headers.

use crate::common::*;
use crate::harness::*;

use std::time::Duration;

use http::Request;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
