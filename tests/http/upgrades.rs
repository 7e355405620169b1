//! WebSocket upgrades relayed both ways, over HTTP and HTTPS.

use crate::common::*;
use crate::harness::*;
use crate::tls::*;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

use gtd::sync::lock;

/// A backend that switches protocols: `101` to a request asking for `Upgrade: websocket`, then
/// an echo until the client closes; `426` to anything else. Keeps the request heads it read.
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
            lock(&seen).push(head);
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
        let heads = lock(&heads);
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
        !lock(&heads)[2].contains("\r\nupgrade:"),
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
        !lock(&heads)[3].contains("\r\nupgrade:"),
        "h2c is not forwarded"
    );
    node.shutdown().await;
    backend_task.abort();
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
        lock(&heads)[0].contains("\r\nx-forwarded-proto: https\r\n"),
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
