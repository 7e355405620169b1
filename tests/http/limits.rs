//! Connection limits on HTTP listeners.

use crate::common::*;
use crate::harness::*;

use std::time::Duration;

use http::Request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
    // …so a second one gets 503 and is closed, and the refusal is counted.
    let mut second = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = second.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let rest = until_closed(&mut second, "closed").await;
    let rest = String::from_utf8_lossy(&rest);
    assert!(
        rest.starts_with("HTTP/1.1 503 Service Unavailable\r\n")
            && rest.contains("Connection: close"),
        "{rest}"
    );
    assert_eq!(
        metric(
            &node,
            "gtd_connections_refused_total",
            &["listener=\"web\"", "reason=\"max_connections\""]
        ),
        1.0
    );
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
