//! HTTP/1 connections resting between requests are parked (hyper's state for them dropped,
//! only the socket kept) and served again when their next request comes: the request is
//! answered on the same connection, a next request's head that had arrived in part is kept, a
//! head that stalls after the rest still meets `header_timeout`, a parked connection is closed
//! at `idle_timeout`, and a request that comes on a parked connection as the drain begins is
//! answered with `Connection: close`. `gtd_http_connections_parked` says how many rest.

use crate::common::*;
use crate::harness::*;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// A node whose HTTP listener "web" has one backend, "one", with `extra` listener keys.
async fn node_with(extra: &str) -> (Backend, tempfile::TempDir, gtd::node::Node, SocketAddr) {
    let b = Backend::start("one", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            extra,
            &group("g", "cn-beijing", 100.0, "", &[(b.addr, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    (b, dir, node, addr)
}

/// The listener's parked connections now.
async fn parked(node: &gtd::node::Node) -> f64 {
    let admin = node.admin_addr();
    tokio::task::spawn_blocking(move || {
        metric_at(admin, "gtd_http_connections_parked", &["listener=\"web\""])
    })
    .await
    .unwrap()
}

/// Waits (a minute at most) until the listener has `n` parked connections.
async fn until_parked(node: &gtd::node::Node, n: f64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let now = parked(node).await;
        if now == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{now} parked connections, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn answered(answer: &str) {
    assert!(
        answer.starts_with("HTTP/1.1 200 ") && answer.ends_with("one"),
        "{answer:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_connection_serves_its_next_request_on_the_same_socket() {
    let (b, _dir, node, addr) = node_with("idle_timeout = \"1h\"").await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        answered(&ask_answer(&mut s).await);
        clients.push(s);
    }
    until_parked(&node, 3.0).await;
    for s in &mut clients {
        answered(&ask_answer(s).await);
    }
    // Parked again once they rest; the backend saw every request.
    until_parked(&node, 3.0).await;
    assert_eq!(b.hits(), 6);
    for s in &mut clients {
        answered(&ask_answer(s).await);
    }
    assert_eq!(b.hits(), 9);
    drop(clients);
    until_parked(&node, 0.0).await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_request_head_that_came_in_part_is_kept_across_the_rest() {
    let (b, _dir, node, addr) = node_with("idle_timeout = \"1h\"\nheader_timeout = \"30s\"").await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    // One write: a whole request and the start of the next one's head.
    s.write_all(b"GET / HTTP/1.1\r\nHost: example\r\n\r\nGET / HTTP/1.1\r\nHo")
        .await
        .unwrap();
    let mut first = Vec::new();
    while !first.ends_with(b"one") {
        let mut chunk = [0_u8; 1024];
        let n = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::io::AsyncReadExt::read(&mut s, &mut chunk),
        )
        .await
        .expect("the first answer within a minute")
        .unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&first));
        first.extend_from_slice(&chunk[..n]);
    }
    answered(&String::from_utf8_lossy(&first));
    // Longer than a connection rests before it is parked (the wait is the point here).
    tokio::time::sleep(gtd::node::http::PARK_AFTER * 2).await;
    let second = ask_rest(&mut s, b"st: example\r\n\r\n").await;
    answered(&second);
    assert_eq!(b.hits(), 2);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_stalls_after_a_rest_meets_header_timeout_and_idle_ones_close() {
    let (b, _dir, node, addr) = node_with("idle_timeout = \"1h\"\nheader_timeout = \"2s\"").await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    answered(&ask_answer(&mut s).await);
    until_parked(&node, 1.0).await;
    s.write_all(b"GET / HTTP/1.1\r\nHo").await.unwrap();
    let rest = until_closed(&mut s, "a stalled head closed by header_timeout").await;
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    assert_eq!(b.hits(), 1);
    node.shutdown().await;

    // A parked connection that stays silent is closed at idle_timeout.
    let (_b, _dir, node, addr) = node_with("idle_timeout = \"3s\"").await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    answered(&ask_answer(&mut s).await);
    until_parked(&node, 1.0).await;
    let rest = until_closed(&mut s, "a parked connection closed at idle_timeout").await;
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    until_parked(&node, 0.0).await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_head_begun_before_the_rest_and_then_stalled_meets_header_timeout() {
    // The first byte of a next request comes with the first: hyper reads it with it, so the
    // connection rests with it in hyper's buffer, and is served again from it. That byte is
    // a head begun: header_timeout holds, not the hour of keep-alive rest.
    let (b, _dir, node, addr) = node_with("idle_timeout = \"1h\"\nheader_timeout = \"2s\"").await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let first = ask_rest(&mut s, b"GET / HTTP/1.1\r\nHost: example\r\n\r\nG").await;
    answered(&first);
    let rest = until_closed(&mut s, "a stalled head closed by header_timeout").await;
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    assert_eq!(b.hits(), 1);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_on_a_parked_connection_as_the_drain_begins_is_answered_with_connection_close() {
    let (b, _dir, node, addr) = node_with("drain_timeout = \"1h\"\nidle_timeout = \"1h\"").await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    answered(&ask_answer(&mut s).await);
    until_parked(&node, 1.0).await;
    let stopping = tokio::spawn(node.shutdown());
    // The listener closes: the drain has begun.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(addr).await.is_ok() {
        assert!(tokio::time::Instant::now() < deadline, "still accepting");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second = ask_answer(&mut s).await;
    answered(&second);
    assert!(
        second.to_ascii_lowercase().contains("connection: close"),
        "{second}"
    );
    until_closed(&mut s, "closed after its answer").await;
    tokio::time::timeout(Duration::from_secs(60), stopping)
        .await
        .expect("the drain ended")
        .unwrap();
    assert_eq!(b.hits(), 2);
}

/// Writes `bytes` (the rest of a request) and reads the answer from backend "one".
async fn ask_rest(s: &mut TcpStream, bytes: &[u8]) -> String {
    s.write_all(bytes).await.unwrap();
    let mut answer = Vec::new();
    while !answer.ends_with(b"one") {
        let mut chunk = [0_u8; 1024];
        let n = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::io::AsyncReadExt::read(s, &mut chunk),
        )
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
