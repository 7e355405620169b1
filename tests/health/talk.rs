//! L4 checks that talk, and `first_byte_timeout`: an endpoint that accepts and never answers
//! passes a connect-only tcp check but fails one with `send`/`expect`; a UDP endpoint that
//! never replies fails a udp check (one whose port is closed is refused); and a TCP listener
//! with `first_byte_timeout` moves a connection off a silent endpoint, replaying what the
//! client sent, so that the client gets the healthy endpoint's answer.

use crate::common::*;
use crate::harness::*;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// An endpoint that accepts, reads whatever comes, and never sends a byte.
async fn hung() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    socket_backend(|mut s| async move {
        let mut buf = [0_u8; 1024];
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
    .await
}

/// An endpoint that reads one line and answers `+PONG <line>`.
async fn ponger() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    socket_backend(|mut s| async move {
        let mut got = Vec::new();
        let mut buf = [0_u8; 1024];
        while !got.contains(&b'\n') {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let mut answer = b"+PONG ".to_vec();
        answer.extend_from_slice(&got);
        let _ = s.write_all(&answer).await;
    })
    .await
}

/// An endpoint that answers `-ERR` to anything and keeps the connection open.
async fn erring() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    socket_backend(|mut s| async move {
        let mut buf = [0_u8; 1024];
        if matches!(s.read(&mut buf).await, Ok(n) if n > 0) {
            let _ = s.write_all(b"-ERR\r\n").await;
        }
        while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_and_expect_find_an_endpoint_that_accepts_and_never_answers() {
    let (silent, hs) = hung().await;
    let (good, hg) = ponger().await;
    let (wrong, hw) = erring().await;
    let _b = Backends(vec![hs, hg, hw]);
    let plain = "[listener.group.health_check]\ninterval = \"1s\"\nunhealthy_threshold = 1\n";
    let talking = "[listener.group.health_check]\ninterval = \"1s\"\nunhealthy_threshold = 1\n\
                   send = 'PING\\r\\n'\nexpect = '+PONG'\nconnect_timeout = \"400ms\"\n\
                   read_timeout = \"400ms\"\n";
    let eps = [(silent, ""), (good, ""), (wrong, "")];
    let listeners = [
        listener(
            "plain",
            "tcp",
            "",
            &group("g", "cn-beijing", 100.0, plain, &eps),
        ),
        listener(
            "talk",
            "tcp",
            "",
            &group("g", "cn-beijing", 100.0, talking, &eps),
        ),
    ]
    .concat();
    let dir = tempfile::tempdir().unwrap();
    let node = start(&write_config(dir.path(), &listeners)).await;
    until("two checks of each endpoint on both listeners", || {
        let doc = status(&node);
        ["plain", "talk"].iter().all(|l| {
            [silent, good, wrong]
                .iter()
                .all(|a| checks_of(&doc, l, "g", &a.to_string()) >= 2)
        })
    })
    .await;
    let doc = status(&node);
    let e = |l: &str, a: SocketAddr| check_of(&doc, l, "g", &a.to_string()).clone();
    let said = |l: &str, a: SocketAddr| {
        let c = e(l, a);
        (
            c.healthy,
            c.result.unwrap_or_default(),
            c.reason.unwrap_or_default(),
        )
    };
    // Connecting says nothing about answering.
    assert!(said("plain", silent).0, "{doc:?}");
    assert_eq!(said("plain", silent).2, "connected");
    // Talking does.
    assert_eq!(
        said("talk", silent),
        (false, "timeout".into(), "no \"+PONG\" within 400ms".into()),
        "{doc:?}"
    );
    assert!(said("talk", good).0, "{doc:?}");
    assert_eq!(said("talk", good).2, "answered \"+PONG\"");
    // Something else, and the connection left open: a wrong answer, not a silent one.
    assert_eq!(
        said("talk", wrong),
        (
            false,
            "unexpected".into(),
            "6 bytes without \"+PONG\" within 400ms".into()
        ),
        "{doc:?}"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_udp_check_finds_an_endpoint_that_never_replies() {
    // One that replies "pong", one that reads and never replies, one whose port is closed.
    let replying = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let replying_addr = replying.local_addr().unwrap();
    let mute = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mute_addr = mute.local_addr().unwrap();
    let closed_addr = UdpSocket::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let hr = tokio::spawn(async move {
        let mut buf = [0_u8; 512];
        while let Ok((n, from)) = replying.recv_from(&mut buf).await {
            if &buf[..n] == b"ping\0" {
                let _ = replying.send_to(b"pong", from).await;
            }
        }
    });
    let hm = tokio::spawn(async move {
        let mut buf = [0_u8; 512];
        while mute.recv_from(&mut buf).await.is_ok() {}
    });
    let _b = Backends(vec![hr, hm]);
    let check = "[listener.group.health_check]\nprotocol = \"udp\"\nsend = 'ping\\x00'\n\
                 expect = 'pong'\ninterval = \"1s\"\ntimeout = \"500ms\"\nunhealthy_threshold = 1\n";
    let eps = [(replying_addr, ""), (mute_addr, ""), (closed_addr, "")];
    let l = listener(
        "voice",
        "udp",
        "",
        &group("g", "cn-beijing", 100.0, check, &eps),
    );
    let dir = tempfile::tempdir().unwrap();
    let node = start(&write_config(dir.path(), &l)).await;
    until("two checks of each endpoint", || {
        let doc = status(&node);
        eps.iter()
            .all(|(a, _)| checks_of(&doc, "voice", "g", &a.to_string()) >= 2)
    })
    .await;
    let doc = status(&node);
    let e = |a: SocketAddr| endpoint_of(&doc, "voice", "g", &a.to_string()).clone();
    let c = |a: SocketAddr| e(a).check.unwrap();
    assert!(c(replying_addr).healthy, "{doc:?}");
    assert_eq!(
        c(replying_addr).reason.as_deref(),
        Some("a reply of 4 bytes")
    );
    assert!(e(replying_addr).rtt_ms.is_some(), "{doc:?}");
    assert!(!c(mute_addr).healthy, "{doc:?}");
    assert_eq!(
        c(mute_addr).reason.as_deref(),
        Some("no reply within 500ms")
    );
    assert_eq!(e(mute_addr).rtt_ms, None, "no answer, no sample");
    assert!(!c(closed_addr).healthy, "{doc:?}");
    assert_eq!(c(closed_addr).result.as_deref(), Some("refused"));
    node.shutdown().await;
}

/// Sends `line` on a new connection to `to` and reads the answer until the node closes.
async fn ask(to: SocketAddr, line: &str) -> String {
    let mut s = TcpStream::connect(to).await.unwrap();
    s.write_all(line.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "no answer within 30 s");
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_byte_timeout_moves_a_connection_off_a_silent_endpoint() {
    let (silent, hs) = hung().await;
    let (good, hg) = ponger().await;
    let _b = Backends(vec![hs, hg]);
    // The silent endpoint is never marked (max_fails = 0), so that round robin keeps sending
    // every other connection to it first.
    let eps = [(silent, "max_fails = 0"), (good, "")];
    let l = listener(
        "game",
        "tcp",
        "first_byte_timeout = \"300ms\"",
        &group("g", "cn-beijing", 100.0, "", &eps),
    );
    let dir = tempfile::tempdir().unwrap();
    let node = start(&write_config(dir.path(), &l)).await;
    let to = listener_addr(&node, "game").await;
    for i in 0..4 {
        // The client speaks first: the answer quotes the line, so the retry replayed it.
        let line = format!("PING {i}\n");
        assert_eq!(ask(to, &line).await, format!("+PONG {line}"));
    }
    let failures = metric(
        &node,
        "gtd_connect_failures_total",
        &[&format!("endpoint=\"{silent}\"")],
    );
    assert!(
        failures >= 2.0,
        "the silent endpoint was tried first twice: {failures}"
    );
    let retries = metric(&node, "gtd_retries_total", &["listener=\"game\""]);
    assert!(retries >= 2.0, "{retries}");
    node.shutdown().await;
}
