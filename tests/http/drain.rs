//! The node's stop (SIGTERM) on HTTP listeners: a request that comes on an idle kept-alive
//! connection as the drain begins is answered (with `Connection: close`), not lost to a close
//! that crossed it; idle connections do not hold the drain for its whole `drain_timeout`;
//! HTTP/2 connections are told with a GOAWAY. A reload that takes a listener off its port shuts
//! its kept-alive connections down the same way.

use crate::common::*;
use crate::harness::*;

use std::net::SocketAddr;
use std::time::Duration;

use http::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

/// Waits until `addr` refuses connections: the listener closed, the drain has begun.
async fn until_refused(addr: SocketAddr) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(addr).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "listener still accepting after the stop"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A node whose HTTP listener "web" has one backend, "one", and a drain far longer than a
/// test may take (idle connections must not hold it).
async fn draining_node() -> (Backend, tempfile::TempDir, gtd::node::Node, SocketAddr) {
    let b = Backend::start("one", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "drain_timeout = \"1h\"",
            &group("g", "cn-beijing", 100.0, "", &[(b.addr, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    (b, dir, node, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_on_an_idle_connection_as_the_drain_begins_is_answered_with_connection_close() {
    let (b, _dir, node, addr) = draining_node().await;
    let mut active = TcpStream::connect(addr).await.unwrap();
    let first = ask_answer(&mut active).await;
    assert!(first.starts_with("HTTP/1.1 200 "), "{first}");
    assert!(
        !first.to_ascii_lowercase().contains("connection: close"),
        "{first}"
    );
    // A second client rests on its connection and never asks again.
    let mut resting = TcpStream::connect(addr).await.unwrap();
    let rested = ask_answer(&mut resting).await;
    assert!(rested.starts_with("HTTP/1.1 200 "), "{rested}");

    let stopping = tokio::spawn(node.shutdown());
    until_refused(addr).await;
    // The next request on the kept-alive connection comes now: answered, and told to go.
    let second = ask_answer(&mut active).await;
    assert!(
        second.starts_with("HTTP/1.1 200 "),
        "a request as the drain began was lost: {second:?}"
    );
    assert!(
        second.to_ascii_lowercase().contains("connection: close"),
        "{second}"
    );
    let rest = until_closed(&mut active, "closed after its answer").await;
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    // The resting connection is closed by the node without a word, and the drain ends
    // (well before its hour).
    let rest = until_closed(&mut resting, "an idle connection closed by the drain").await;
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    tokio::time::timeout(Duration::from_secs(60), stopping)
        .await
        .expect("the drain ended once idle connections were closed")
        .unwrap();
    assert_eq!(b.hits(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connection_gets_a_goaway_when_the_drain_begins() {
    let (_b, _dir, node, addr) = draining_node().await;
    let io = TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .unwrap();
    let driver = tokio::spawn(conn);
    let resp = sender
        .send_request(
            Request::get(format!("http://{addr}/"))
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let stopping = tokio::spawn(node.shutdown());
    // The GOAWAY ends the client's connection cleanly (an error would be a reset or a bare
    // close), and the drain ends with it.
    tokio::time::timeout(Duration::from_secs(60), driver)
        .await
        .expect("the node's GOAWAY closed the HTTP/2 connection")
        .unwrap()
        .expect("a graceful end, not an error");
    assert!(
        sender
            .send_request(Request::get("/").body(empty()).unwrap())
            .await
            .is_err(),
        "no new stream after the GOAWAY"
    );
    tokio::time::timeout(Duration::from_secs(60), stopping)
        .await
        .expect("the drain ended")
        .unwrap();
}

/// A reload that moves an HTTP listener to another port: a kept-alive HTTP/1.1 connection's
/// next request is answered 503 with `Connection: close` and the connection closes, and an
/// HTTP/2 connection gets its GOAWAY — rather than 503s for as long as the client keeps the
/// connection busy. Their clients reconnect, and the moved listener serves them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_moves_an_http_listener_closes_its_kept_alive_connections() {
    let (b, dir, node, addr) = draining_node().await;
    let mut active = TcpStream::connect(addr).await.unwrap();
    assert!(ask_answer(&mut active).await.starts_with("HTTP/1.1 200 "));
    let io = TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (mut h2, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .unwrap();
    let driver = tokio::spawn(conn);
    let get = || {
        Request::get(format!("http://{addr}/"))
            .body(empty())
            .unwrap()
    };
    assert_eq!(h2.send_request(get()).await.unwrap().status(), 200);

    let cfg = dir.path().join("config.toml");
    let moved = free_port(false);
    let text = std::fs::read_to_string(&cfg).unwrap();
    let from = format!("port = {}", addr.port());
    assert!(text.contains(&from), "{text}");
    std::fs::write(&cfg, text.replace(&from, &format!("port = {moved}"))).unwrap();
    node.reload().await.unwrap();

    let answer = ask_answer(&mut active).await;
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    let rest = until_closed(&mut active, "closed after its 503").await;
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));

    assert_eq!(h2.send_request(get()).await.unwrap().status(), 503);
    tokio::time::timeout(Duration::from_secs(60), driver)
        .await
        .expect("a GOAWAY closed the HTTP/2 connection")
        .unwrap()
        .expect("a graceful end, not an error");

    let mut again = TcpStream::connect(("127.0.0.1", moved)).await.unwrap();
    assert!(ask_answer(&mut again).await.starts_with("HTTP/1.1 200 "));
    assert_eq!(b.hits(), 3);
    drop(again);
    node.shutdown().await;
}
