//! Timeouts: client headers, idle keep-alive connections, the upstream timeout and uploads that break off or stall.

use crate::common::*;
use crate::harness::*;

use std::net::SocketAddr;
use std::time::Duration;

use http::Request;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

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
    let answer = ask_answer(s).await;
    assert!(
        answer.ends_with("one"),
        "answered before the connection closed: {answer}"
    );
    assert!(answer.starts_with("HTTP/1.1 200 "));
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
