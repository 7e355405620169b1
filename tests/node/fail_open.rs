//! `fail_open = true` with every group down (docs/design.md §3.3): TCP connections and UDP
//! flows still reach an endpoint that passive checks marked, as if it were healthy; a disabled
//! one stays out. Without `fail_open` the same node has no route.
//!
//! Each endpoint is marked the way an operator would see it happen: its port refuses (nothing
//! listens there yet), one failure reaches `max_fails = 1`, and `fail_timeout = "300s"` keeps
//! it marked for the whole test. Then a backend starts on that port.

use crate::common::*;
use crate::harness::*;

use std::net::SocketAddr;
use std::time::Duration;

use gtd::node::Node;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;

/// Keeps one failure marking the endpoint for longer than any test runs.
const MARKS_LONG: &str = "max_fails = 1\nfail_timeout = \"300s\"";

/// The listener's mode in `/status`, and whether its first endpoint counts as healthy there.
fn mode(node: &Node) -> (String, bool) {
    let doc = status(node);
    let l = &doc.listeners[0];
    (l.mode.clone(), l.groups[0].endpoints[0].healthy)
}

fn fail_open_key(fail_open: bool) -> &'static str {
    if fail_open { "fail_open = true" } else { "" }
}

fn expected_mode(fail_open: bool) -> &'static str {
    if fail_open { "fail-open" } else { "no-route" }
}

/// TCP: the only endpoint, marked, serves under fail-open (name line and echoed bytes), never
/// once disabled; without fail-open the connection is closed and counted as no route.
async fn tcp_with_every_endpoint_marked(fail_open: bool) {
    let refusing = Refusing::new();
    let marked: SocketAddr = refusing.0;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &tcp_listener(
            free_port(false),
            fail_open_key(fail_open),
            &[group(
                "beijing",
                "cn-beijing",
                100.0,
                "",
                &[(marked, MARKS_LONG)],
            )],
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    assert!(tcp_name(addr).await.is_err(), "nothing listens there yet");
    until("the refused endpoint to be marked", || {
        mode(&node) == (expected_mode(fail_open).to_owned(), false)
    })
    .await;

    drop(refusing);
    let (_, h) = tcp_backend_on(marked, "revived").await;
    let _b = Backends(vec![h]);
    if !fail_open {
        assert!(tcp_name(addr).await.is_err(), "no route: closed at once");
        until("no-route counted", || {
            metric(&node, "gtd_no_route_total", &[]) >= 1.0
        })
        .await;
        node.shutdown().await;
        return;
    }
    for _ in 0..5 {
        assert_eq!(tcp_name(addr).await.unwrap(), "revived");
    }
    // Bytes are relayed both ways.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"through fail-open").await.unwrap();
    s.shutdown().await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut got))
        .await
        .expect("the relay ends")
        .unwrap();
    assert_eq!(got, b"revived\nthrough fail-openbye");
    assert_eq!(
        mode(&node),
        ("fail-open".to_owned(), false),
        "served, and still marked: fail-open ignored the mark, it did not clear it"
    );
    assert_eq!(metric(&node, "gtd_no_route_total", &[]), 0.0);

    // Disabled stays out, fail-open or not.
    admin(
        &node,
        "POST",
        &format!("/endpoints/t/beijing/{marked}/disable"),
        None,
    );
    assert!(
        tcp_name(addr).await.is_err(),
        "a disabled endpoint gets nothing"
    );
    until("no-route counted", || {
        metric(&node, "gtd_no_route_total", &[]) >= 1.0
    })
    .await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_fail_open_reaches_a_marked_endpoint() {
    tcp_with_every_endpoint_marked(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_without_fail_open_has_no_route_when_every_endpoint_is_marked() {
    tcp_with_every_endpoint_marked(false).await;
}

/// Sends `ping` and waits (bounded) for the reply, as text.
async fn udp_reply(client: &UdpSocket, to: SocketAddr) -> String {
    client.send_to(b"ping", to).await.unwrap();
    let mut buf = [0_u8; 2048];
    let (n, _) = tokio::time::timeout(Duration::from_secs(30), client.recv_from(&mut buf))
        .await
        .expect("a reply")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Sends `ping` until a reply comes (bounded: 60 tries of a second): a datagram may meet the
/// refusal an earlier one left pending on its flow's socket, and be lost with it.
async fn udp_first_reply(client: &UdpSocket, to: SocketAddr) -> String {
    let mut buf = [0_u8; 2048];
    for _ in 0..60 {
        client.send_to(b"ping", to).await.unwrap();
        if let Ok(got) =
            tokio::time::timeout(Duration::from_secs(1), client.recv_from(&mut buf)).await
        {
            let (n, _) = got.unwrap();
            return String::from_utf8_lossy(&buf[..n]).into_owned();
        }
    }
    panic!("no reply through the node");
}

/// Sends `ping` until the listener is in `want` with its endpoint marked (bounded: 60 s). A
/// refused datagram shows up on the flow's next send, so one is not enough.
async fn udp_until_marked(node: &Node, client: &UdpSocket, to: SocketAddr, want: &str) {
    for _ in 0..600 {
        client.send_to(b"ping", to).await.unwrap();
        if mode(node) == (want.to_owned(), false) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the refusing endpoint was never marked");
}

/// UDP over two marked endpoints (marked by the ICMP refusals of their datagrams), one of which
/// comes back: under fail-open every new client ends up on the live one — a flow on the dead
/// one moves when its datagram fails there — and then keeps it although it stays marked, with
/// no new flow per datagram. Without fail-open the datagram is dropped as no route.
async fn udp_with_every_endpoint_marked(fail_open: bool) {
    let marked: SocketAddr = format!("127.0.0.1:{}", free_port(true)).parse().unwrap();
    let dead: SocketAddr = format!("127.0.0.1:{}", free_port(true)).parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener_on(
            free_port(true),
            "u",
            "udp",
            &["cn-beijing"],
            fail_open_key(fail_open),
            &group(
                "beijing",
                "cn-beijing",
                100.0,
                "",
                &[(marked, MARKS_LONG), (dead, MARKS_LONG)],
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "u").await;
    let first = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    udp_until_marked(&node, &first, addr, expected_mode(fail_open)).await;

    let (_, h) = udp_backend_on(marked, "revived").await;
    let _b = Backends(vec![h]);
    let no_route = || metric(&node, "gtd_no_route_total", &[]);
    if !fail_open {
        let before = no_route();
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        client.send_to(b"ping", addr).await.unwrap();
        until("no-route counted", || no_route() > before).await;
        node.shutdown().await;
        return;
    }
    for _ in 0..4 {
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        assert_eq!(udp_first_reply(&client, addr).await, "revived:ping");
        let flows = metric(&node, "gtd_connections_total", &[]);
        for _ in 0..5 {
            assert_eq!(udp_reply(&client, addr).await, "revived:ping");
        }
        assert_eq!(
            metric(&node, "gtd_connections_total", &[]),
            flows,
            "the flow keeps its marked endpoint: no new flow per datagram"
        );
    }
    assert_eq!(mode(&node), ("fail-open".to_owned(), false), "still marked");
    assert_eq!(no_route(), 0.0);

    // Disabled: flows leave those endpoints, and find no other.
    for e in [marked, dead] {
        admin(
            &node,
            "POST",
            &format!("/endpoints/u/beijing/{e}/disable"),
            None,
        );
    }
    first.send_to(b"ping", addr).await.unwrap();
    until("no-route counted", || no_route() >= 1.0).await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_fail_open_keeps_flows_on_a_marked_endpoint() {
    udp_with_every_endpoint_marked(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_without_fail_open_drops_datagrams_when_every_endpoint_is_marked() {
    udp_with_every_endpoint_marked(false).await;
}
