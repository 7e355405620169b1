//! Errors of the last minute per endpoint (`/status`'s `errors`) on TCP and UDP listeners: a
//! refused TCP connection and a refused UDP datagram are connect failures, an endpoint silent
//! past `first_byte_timeout` a timeout; without it, a TCP connection the endpoint never
//! answered and a UDP flow that never got a reply are timeouts too, when they end. (HTTP's
//! 5xx, timeouts and connect failures: tests/http/errors.rs.)

use crate::common::*;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream, UdpSocket as StdUdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gtd::view::ErrorsView;

/// One attempt a connection, never marked: each connection is one attempt on the endpoint.
const ONE_ATTEMPT: &str = "tries = 1";

/// The errors `/status` shows for the one endpoint of listener `name`.
fn errors_of(admin: SocketAddr, name: &str) -> ErrorsView {
    status_at(admin).listener(name).unwrap().groups[0].endpoints[0].errors
}

/// One client connection, until the node closes it.
fn connect(addr: SocketAddr) {
    let mut s = StdTcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = s.read_to_end(&mut Vec::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_and_udp_endpoints_count_their_connect_failures_and_timeouts() {
    let refusing = Refusing::new();
    // Accepts and never says a word (until the test ends).
    let (silent, hold) = socket_backend(|s| async move {
        let _keep = s;
        std::future::pending::<()>().await;
    })
    .await;
    // A UDP port with nothing behind it: its datagrams come back as ICMP port unreachable.
    let closed = {
        let s = StdUdpSocket::bind("127.0.0.1:0").unwrap();
        s.local_addr().unwrap()
    };
    let one = |name: &str, protocol: &str, extra: &str, addr: SocketAddr| {
        listener(
            name,
            protocol,
            &format!("{ONE_ATTEMPT}\n{extra}"),
            &group("g", "cn-beijing", 100.0, "", &[(addr, "max_fails = 0")]),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &[
            one("refused", "tcp", "", refusing.0),
            one("silent", "tcp", "first_byte_timeout = \"200ms\"", silent),
            // Flows idle out quickly, so that the drain at the end is short.
            one("udp", "udp", "idle_timeout = \"1s\"", closed),
        ]
        .concat(),
    );
    let node = Arc::new(start(&cfg).await);
    let refused = listener_addr(&node, "refused").await;
    let quiet = listener_addr(&node, "silent").await;
    let udp = listener_addr(&node, "udp").await;
    let admin = node.admin_addr();
    tokio::task::spawn_blocking(move || {
        for _ in 0..3 {
            connect(refused);
        }
        for _ in 0..2 {
            connect(quiet);
        }
        assert_eq!(
            (errors_of(admin, "refused"), errors_of(admin, "silent")),
            (
                ErrorsView {
                    connect: 3,
                    total: 3,
                    ..ErrorsView::default()
                },
                ErrorsView {
                    timeouts: 2,
                    total: 2,
                    ..ErrorsView::default()
                }
            )
        );
        // UDP: the refusal arrives on the flow's socket a moment after the datagram.
        let client = StdUdpSocket::bind("127.0.0.1:0").unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            client.send_to(b"ping", udp).unwrap();
            let e = errors_of(admin, "udp");
            if e.connect > 0 {
                assert_eq!(e.total, e.connect, "{e:?}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no connect failure counted: {e:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .await
    .unwrap();
    hold.abort();
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_endpoint_that_never_speaks_and_a_udp_one_that_never_replies_count_timeouts() {
    // Accepts and never says a word (until the test ends).
    let (hung, hold) = socket_backend(|s| async move {
        let _keep = s;
        std::future::pending::<()>().await;
    })
    .await;
    // Reads nothing and replies nothing: datagrams sent to it vanish.
    let mute = StdUdpSocket::bind("127.0.0.1:0").unwrap();
    let one = |name: &str, protocol: &str, addr: SocketAddr| {
        listener(
            name,
            protocol,
            // No first_byte_timeout: only the connection's end can tell. Idle soon, so that
            // connections and flows end within the test.
            &format!("{ONE_ATTEMPT}\nidle_timeout = \"1s\""),
            &group("g", "cn-beijing", 100.0, "", &[(addr, "max_fails = 0")]),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &[
            one("hung", "tcp", hung),
            one("mute", "udp", mute.local_addr().unwrap()),
        ]
        .concat(),
    );
    let node = Arc::new(start(&cfg).await);
    let tcp = listener_addr(&node, "hung").await;
    let udp = listener_addr(&node, "mute").await;
    let admin = node.admin_addr();
    tokio::task::spawn_blocking(move || {
        // Two clients that speak and get nothing: one gives up and closes, one waits until
        // the node's idle_timeout closes it.
        let mut gives_up = StdTcpStream::connect(tcp).unwrap();
        gives_up.write_all(b"hello?\n").unwrap();
        let mut waits = StdTcpStream::connect(tcp).unwrap();
        waits.write_all(b"anyone?\n").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        drop(gives_up);
        waits
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let _ = waits.read_to_end(&mut Vec::new());
        // A client that says nothing and leaves is no error of the endpoint's.
        drop(StdTcpStream::connect(tcp).unwrap());
        // A UDP client whose datagrams get no reply: its flow idles out.
        let client = StdUdpSocket::bind("127.0.0.1:0").unwrap();
        client.send_to(b"ping", udp).unwrap();
        client.send_to(b"ping", udp).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let want = |timeouts| ErrorsView {
            timeouts,
            total: timeouts,
            ..ErrorsView::default()
        };
        loop {
            let got = (errors_of(admin, "hung"), errors_of(admin, "mute"));
            if got == (want(2), want(1)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "hung and mute endpoints' errors: {got:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    })
    .await
    .unwrap();
    hold.abort();
    drop(mute);
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}
