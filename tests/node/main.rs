//! The node against real sockets on loopback: TCP and UDP through `gtd` to backends that name
//! themselves, compared with what `sim` expects for the same config; retries, no-route,
//! half-close, a 1 GB stream, UDP flows, reload under load, bad reloads, SIGTERM draining.
//!
//! Every backend, node and process a test starts is stopped by its own handle. Waits are for
//! events (with generous bounds), never fixed sleeps standing in for them.

#[path = "../common/mod.rs"]
mod common;

use common::*;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gtd::node::Node;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

// ------------------------------------------------------------------ helpers

/// Backend tasks, aborted on drop.
struct Backends(Vec<JoinHandle<()>>);

impl Drop for Backends {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

/// A TCP backend: writes its name and a newline, then echoes until EOF, then writes "bye".
async fn tcp_backend(name: &str) -> (SocketAddr, JoinHandle<()>) {
    let name = name.to_owned();
    socket_backend(move |mut s| {
        let name = name.clone();
        async move {
            if s.write_all(format!("{name}\n").as_bytes()).await.is_err() {
                return;
            }
            let mut buf = vec![0_u8; 64 * 1024];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = s.write_all(b"bye").await;
        }
    })
    .await
}

/// A UDP backend: answers every datagram with "NAME:" + the datagram.
async fn udp_backend(name: &str) -> (SocketAddr, JoinHandle<()>) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let name = name.to_owned();
    let handle = tokio::spawn(async move {
        let mut buf = vec![0_u8; 65536];
        loop {
            let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                return;
            };
            let mut reply = format!("{name}:").into_bytes();
            reply.extend_from_slice(&buf[..n]);
            let _ = socket.send_to(&reply, from).await;
        }
    });
    (addr, handle)
}

/// A tcp listener "t" served from cn-beijing, with `extra` settings and `groups`.
fn tcp_listener(port: u16, extra: &str, groups: &[String]) -> String {
    listener_on(port, "t", "tcp", &["cn-beijing"], extra, &groups.concat())
}

/// Connects through the node and returns the backend's name line.
async fn tcp_name(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let mut name = Vec::new();
    let mut byte = [0_u8; 1];
    loop {
        let n = s.read(&mut byte).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before the name",
            ));
        }
        if byte[0] == b'\n' {
            break;
        }
        name.push(byte[0]);
    }
    Ok(String::from_utf8(name).unwrap())
}

// ------------------------------------------------------------------ TCP

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_split_across_groups_and_endpoints_matches_sim() {
    let (a1, h1) = tcp_backend("bj-1").await;
    let (a2, h2) = tcp_backend("bj-2").await;
    let (a3, h3) = tcp_backend("sh-1").await;
    let (a4, h4) = tcp_backend("sh-2").await;
    let _b = Backends(vec![h1, h2, h3, h4]);
    let names: BTreeMap<SocketAddr, &str> =
        [(a1, "bj-1"), (a2, "bj-2"), (a3, "sh-1"), (a4, "sh-2")].into();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &tcp_listener(
            port,
            "",
            &[
                group("beijing", "cn-beijing", 50.0, "", &[(a1, 3), (a2, 1)]),
                group("shanghai", "cn-shanghai", 50.0, "", &[(a3, 1), (a4, 1)]),
            ],
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    let (want_groups, want_endpoints) = sim_expectation(&cfg, "t");
    assert_eq!(want_groups["beijing"], 62.5);

    const N: usize = 5000;
    let counts = Arc::new(std::sync::Mutex::new(BTreeMap::<String, usize>::new()));
    let next = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..8 {
        let (counts, next) = (counts.clone(), next.clone());
        clients.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < N as u64 {
                let name = tcp_name(addr).await.expect("connection through gtd");
                *counts.lock().unwrap().entry(name).or_default() += 1;
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    let counts = counts.lock().unwrap().clone();
    assert_eq!(counts.values().sum::<usize>(), N);
    // Stated tolerance: the rotation and round robin are deterministic, so each observed share
    // is within 0.5 points of sim's expectation (concurrency only reorders decisions).
    for (addr, name) in &names {
        let observed = *counts.get(*name).unwrap_or(&0) as f64 * 100.0 / N as f64;
        let expected = want_endpoints[&addr.to_string()];
        assert!(
            (observed - expected).abs() < 0.5,
            "{name}: observed {observed:.2}% expected {expected:.2}%"
        );
    }
    let bj = (counts["bj-1"] + counts["bj-2"]) as f64 * 100.0 / N as f64;
    assert!((bj - want_groups["beijing"]).abs() < 0.5, "beijing {bj}");
    assert_eq!(
        metric(&node, "gtd_connections_total", &["group=\"beijing\""]) as usize,
        counts["bj-1"] + counts["bj-2"]
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_endpoint_is_retried_elsewhere() {
    let (alive, h) = tcp_backend("alive").await;
    let _b = Backends(vec![h]);
    let refused: SocketAddr = format!("127.0.0.1:{}", free_port(false)).parse().unwrap();
    let (sh, h2) = tcp_backend("shanghai").await;
    let _b2 = Backends(vec![h2]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &tcp_listener(
            port,
            "",
            &[
                group(
                    "beijing",
                    "cn-beijing",
                    100.0,
                    "",
                    &[(refused, 1), (alive, 1)],
                ),
                group("shanghai", "cn-shanghai", 100.0, "", &[(sh, 1)]),
            ],
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    for _ in 0..20 {
        assert_eq!(tcp_name(addr).await.unwrap(), "alive");
    }
    assert!(
        metric(
            &node,
            "gtd_connect_failures_total",
            &[&format!("endpoint=\"{refused}\"")]
        ) >= 1.0
    );
    assert!(metric(&node, "gtd_retries_total", &[]) >= 1.0);

    // Now the whole group refuses: the retry crosses to the next group.
    let (_, body) = admin(
        &node,
        "POST",
        &format!("/endpoints/t/beijing/{alive}/disable"),
        None,
    );
    assert!(body.contains("\"enabled\": false"), "{body}");
    // With only the refused endpoint left the group stays "healthy" until marked; the attempt
    // fails over to shanghai either way.
    for _ in 0..5 {
        assert_eq!(tcp_name(addr).await.unwrap(), "shanghai");
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_closes_at_once_and_is_counted() {
    let (a, h) = tcp_backend("only").await;
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &tcp_listener(
            port,
            "",
            &[group("beijing", "cn-beijing", 100.0, "", &[(a, 1)])],
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    assert_eq!(tcp_name(addr).await.unwrap(), "only");
    let (status, _) = admin(
        &node,
        "POST",
        &format!("/endpoints/t/beijing/{a}/disable"),
        None,
    );
    assert_eq!(status, 200);
    let (_, status_json) = admin(&node, "GET", "/status", None);
    let doc: Value = serde_json::from_str(&status_json).unwrap();
    assert_eq!(doc["listeners"][0]["mode"], "no-route");
    assert!(tcp_name(addr).await.is_err(), "closed without a backend");
    until("no-route counted", || {
        metric(&node, "gtd_no_route_total", &[]) >= 1.0
    })
    .await;
    // Enabled again: traffic flows on the next decision.
    admin(
        &node,
        "POST",
        &format!("/endpoints/t/beijing/{a}/enable"),
        None,
    );
    assert_eq!(tcp_name(addr).await.unwrap(), "only");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_is_honoured() {
    let (a, h) = tcp_backend("echo").await;
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &tcp_listener(
            port,
            "",
            &[group("beijing", "cn-beijing", 100.0, "", &[(a, 1)])],
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"hello half close").await.unwrap();
    s.shutdown().await.unwrap(); // our write half only
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    // The backend saw our EOF (it only says "bye" after it), yet its answer still reached us.
    assert_eq!(String::from_utf8(got).unwrap(), "echo\nhello half closebye");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gigabyte_is_relayed_intact() {
    // A sink that reads everything, then answers with the byte count and a checksum.
    let sink = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sink_addr = sink.local_addr().unwrap();
    let h = tokio::spawn(async move {
        let (mut s, _) = sink.accept().await.unwrap();
        let mut buf = vec![0_u8; 256 * 1024];
        let (mut total, mut sum) = (0_u64, Checksum::default());
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            sum.update(&buf[..n]);
            total += n as u64;
        }
        s.write_all(format!("{total} {}", sum.finish()).as_bytes())
            .await
            .unwrap();
    });
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &tcp_listener(
            port,
            "",
            &[group("beijing", "cn-beijing", 100.0, "", &[(sink_addr, 1)])],
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    const TOTAL: u64 = 1 << 30;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    // A pattern that differs per offset, so a dropped or repeated chunk changes the checksum.
    let chunk: Vec<u8> = (0..(1 << 20))
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let (mut sent, mut sum) = (0_u64, Checksum::default());
    while sent < TOTAL {
        sum.update(&chunk);
        s.write_all(&chunk).await.unwrap();
        sent += chunk.len() as u64;
    }
    let sum = sum.finish();
    s.shutdown().await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(300), s.read_to_string(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer, format!("{TOTAL} {sum}"));
    node.shutdown().await;
}

/// Sizes of the pipes this process holds open (the relay's splice pipes among them).
#[cfg(target_os = "linux")]
fn open_pipe_sizes() -> Vec<usize> {
    use rustix::fs::{Mode, OFlags, open};
    let mut sizes = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let path = entry.path();
        let is_pipe = std::fs::read_link(&path)
            .is_ok_and(|target| target.to_string_lossy().starts_with("pipe:"));
        if !is_pipe {
            continue;
        }
        // Reopening a pipe through /proc gives a new descriptor on the same pipe.
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC;
        if let Ok(fd) = open(&path, flags, Mode::empty())
            && let Ok(size) = rustix::pipe::fcntl_getpipe_size(&fd)
        {
            sizes.push(size);
        }
    }
    sizes
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_both_ways_grows_the_splice_pipes_and_stays_intact() {
    // An echo backend: both directions carry a few MiB at once, past the point where the relay
    // grows its pipes (1 MiB moved), and the stream must stay byte-exact around the growth.
    let (a, h) = tcp_backend("echo").await;
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &format!(
            "[[listener]]\nname = \"t\"\nprotocol = \"tcp\"\nport = {port}\nregions = [\"cn-beijing\"]\n{}",
            group("beijing", "cn-beijing", 100.0, "", &[(a, 1)]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    // 4 MiB + 13 bytes: not a multiple of any pipe or splice size.
    let data: Vec<u8> = (0..(4 << 20) + 13)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut expected = b"echo\n".to_vec();
    expected.extend_from_slice(&data);
    let s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        let mut buf = vec![0_u8; 64 * 1024];
        // Read the whole echo back while the connection is still open in both directions.
        while got.len() < expected.len() {
            let n = rd.read(&mut buf).await.unwrap();
            assert!(n > 0, "EOF after {} of {} bytes", got.len(), expected.len());
            got.extend_from_slice(&buf[..n]);
        }
        assert!(
            got == expected,
            "the echoed stream differs from what was sent"
        );
        rd
    });
    for piece in data.chunks(100_003) {
        wr.write_all(piece).await.unwrap();
    }
    let mut rd = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .unwrap()
        .unwrap();
    // Both directions have moved more than 1 MiB and the relay is still running.
    let sizes = open_pipe_sizes();
    assert!(
        sizes.iter().any(|&s| s >= 1 << 20),
        "no grown pipe among {sizes:?}"
    );
    // Half-close still works after the growth.
    wr.shutdown().await.unwrap();
    let mut tail = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), rd.read_to_end(&mut tail))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tail, b"bye");
    node.shutdown().await;
}

/// A position-dependent checksum that does not depend on how the stream was cut into reads.
#[derive(Default)]
struct Checksum {
    sum: u64,
    words: u64,
    pending: Vec<u8>,
}

impl Checksum {
    fn update(&mut self, mut data: &[u8]) {
        if !self.pending.is_empty() {
            let take = (8 - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() == 8 {
                let w: [u8; 8] = self.pending[..].try_into().unwrap();
                self.word(w);
                self.pending.clear();
            }
        }
        let mut chunks = data.chunks_exact(8);
        for w in &mut chunks {
            self.word(w.try_into().unwrap());
        }
        self.pending.extend_from_slice(chunks.remainder());
    }

    fn word(&mut self, w: [u8; 8]) {
        let pos = self.words;
        self.sum = self
            .sum
            .wrapping_add(u64::from_le_bytes(w).rotate_left((pos % 63) as u32) ^ pos);
        self.words += 1;
    }

    fn finish(mut self) -> u64 {
        let tail = std::mem::take(&mut self.pending);
        let mut w = [0_u8; 8];
        w[..tail.len()].copy_from_slice(&tail);
        self.word(w);
        self.sum
    }
}

// ------------------------------------------------------------------ UDP

/// A udp listener "u" served from cn-beijing and cn-shanghai, with `extra` settings and `groups`.
fn udp_listener(port: u16, extra: &str, groups: &str) -> String {
    listener_on(
        port,
        "u",
        "udp",
        &["cn-beijing", "cn-shanghai"],
        extra,
        groups,
    )
}

/// Sends one datagram from `socket` and returns the backend's name.
async fn udp_name(socket: &UdpSocket, to: SocketAddr) -> String {
    socket.send_to(b"ping", to).await.unwrap();
    let mut buf = [0_u8; 2048];
    let (n, from) = tokio::time::timeout(Duration::from_secs(30), socket.recv_from(&mut buf))
        .await
        .expect("a reply")
        .unwrap();
    assert_eq!(from, to, "replies come from the listener's address");
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    text.split_once(':').unwrap().0.to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_flows_split_matches_sim_with_eviction() {
    let (a1, h1) = udp_backend("bj-1").await;
    let (a2, h2) = udp_backend("bj-2").await;
    let (a3, h3) = udp_backend("sh-1").await;
    let _b = Backends(vec![h1, h2, h3]);
    let names: BTreeMap<SocketAddr, &str> = [(a1, "bj-1"), (a2, "bj-2"), (a3, "sh-1")].into();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(true);
    let cfg = write_config(
        dir.path(),
        &udp_listener(
            port,
            "udp_max_flows = 300",
            &format!(
                "{}{}",
                group("beijing", "cn-beijing", 30.0, "", &[(a1, 1), (a2, 1)]),
                group("shanghai", "cn-shanghai", 100.0, "", &[(a3, 1)])
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "u").await;
    let (_, want) = sim_expectation(&cfg, "u");
    const N: usize = 5000;
    let mut counts = BTreeMap::<String, usize>::new();
    for _ in 0..N {
        let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        *counts.entry(udp_name(&s, addr).await).or_default() += 1;
    }
    for (addr, name) in &names {
        let observed = *counts.get(*name).unwrap_or(&0) as f64 * 100.0 / N as f64;
        let expected = want[&addr.to_string()];
        assert!(
            (observed - expected).abs() < 0.5,
            "{name}: observed {observed:.2}% expected {expected:.2}%"
        );
    }
    // The table never held more than 300 flows: the rest were evicted, oldest idle first.
    let (active, evicted) = (
        metric(&node, "gtd_udp_flows_active", &[]),
        metric(&node, "gtd_udp_flows_evicted_total", &[]),
    );
    // Every flow opened is either still in the (full) table or was evicted. (The OS may hand
    // a closed client's port to a later client: that one continues the old flow.)
    let opened = metric(&node, "gtd_connections_total", &[]);
    assert_eq!(active, 300.0, "flows in the table");
    assert_eq!(evicted, opened - active, "evicted flows");
    assert!(opened > (N as f64) * 0.9, "{opened} flows opened");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_flows_stick_expire_and_move_on_disable() {
    let (a1, h1) = udp_backend("one").await;
    let (a2, h2) = udp_backend("two").await;
    let _b = Backends(vec![h1, h2]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(true);
    let cfg = write_config(
        dir.path(),
        &udp_listener(
            port,
            "idle_timeout = \"1s\"",
            &group("g", "cn-beijing", 100.0, "", &[(a1, 1), (a2, 1)]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "u").await;
    // Sticky: one client, many datagrams, one endpoint.
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let first = udp_name(&client, addr).await;
    for _ in 0..20 {
        assert_eq!(udp_name(&client, addr).await, first);
    }
    assert_eq!(metric(&node, "gtd_udp_flows_active", &[]), 1.0);
    // Datagrams up to 64 KiB pass whole, both ways.
    let big = vec![b'x'; 60_000];
    client.send_to(&big, addr).await.unwrap();
    let mut buf = vec![0_u8; 65_536];
    let (n, _) = tokio::time::timeout(Duration::from_secs(30), client.recv_from(&mut buf))
        .await
        .expect("a reply")
        .unwrap();
    assert_eq!(n, first.len() + 1 + big.len());
    // Disabling its endpoint moves the flow on its next datagram.
    let first_addr = if first == "one" { a1 } else { a2 };
    admin(
        &node,
        "POST",
        &format!("/endpoints/u/g/{first_addr}/disable"),
        None,
    );
    let moved = udp_name(&client, addr).await;
    assert_ne!(moved, first);
    for _ in 0..5 {
        assert_eq!(udp_name(&client, addr).await, moved);
    }
    // Idle expiry (1 s): the flow leaves the table by itself.
    until("the idle flow to expire", || {
        metric(&node, "gtd_udp_flows_active", &[]) == 0.0
    })
    .await;
    node.shutdown().await;
}

/// Sends "ping" from `client` (connected to the listener) and returns the reply: a connected
/// socket takes it only from the address it wrote to.
async fn udp_connected_reply(client: &UdpSocket) -> String {
    client.send(b"ping").await.unwrap();
    let mut buf = [0_u8; 2048];
    let n = tokio::time::timeout(Duration::from_secs(30), client.recv(&mut buf))
        .await
        .expect("a reply from the address the client wrote to")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// A node bound to a wildcard address answers each client from the address it wrote to, as
/// clients with connected sockets (DNS, QUIC, VPNs) require; flows are per client and address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_on_a_wildcard_address_replies_from_the_address_written_to() {
    let (a1, h1) = udp_backend("one").await;
    let _b = Backends(vec![h1]);
    let dir = tempfile::tempdir().unwrap();
    // IPv4 wildcard; and the IPv6 one (dual stack: IPv4 clients arrive as mapped addresses)
    // where this host has IPv6 on loopback.
    let ipv6 = std::net::UdpSocket::bind("[::1]:0").is_ok();
    let wildcards: &[&str] = if ipv6 {
        &["0.0.0.0", "::"]
    } else {
        &["0.0.0.0"]
    };
    for wildcard in wildcards {
        // A port free on 127.0.0.1 may be some other test's socket on another address, or taken
        // between the check and the bind (tests run side by side): another port, a few times.
        let mut tries = 0;
        let (node, port) = loop {
            let port = free_port(true);
            let cfg = write_config(
                dir.path(),
                &udp_listener(port, "", &group("g", "cn-beijing", 100.0, "", &[(a1, 1)])),
            );
            let mut options = options(&cfg);
            options.bind = wildcard.parse().unwrap();
            match Node::start(options).await {
                Ok(node) => break (node, port),
                Err(e) if tries < 5 && format!("{e:#}").contains("in use") => tries += 1,
                Err(e) => panic!("node starts: {e:#}"),
            }
        };
        let mut locals = vec!["127.0.0.1", "127.0.0.2", "127.0.0.3"];
        if *wildcard == "::" {
            locals.push("::1");
        }
        for local in &locals {
            let to: SocketAddr = SocketAddr::new(local.parse().unwrap(), port);
            let from = if to.is_ipv4() {
                "127.0.0.1:0"
            } else {
                "[::1]:0"
            };
            let client = UdpSocket::bind(from).await.unwrap();
            client.connect(to).await.unwrap();
            assert_eq!(
                udp_connected_reply(&client).await,
                "one:ping",
                "{wildcard} via {to}"
            );
        }
        // One client socket writing to two of the host's addresses: two flows, and each reply
        // comes from the address its datagram went to.
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let flows = metric(&node, "gtd_udp_flows_active", &[]);
        for local in ["127.0.0.4", "127.0.0.5"] {
            let to = SocketAddr::new(local.parse().unwrap(), port);
            assert_eq!(udp_name(&client, to).await, "one");
        }
        assert_eq!(metric(&node, "gtd_udp_flows_active", &[]), flows + 2.0);
        node.shutdown().await;
    }
}

/// A full flow table evicts the least recently active flow: one that moved since it was
/// opened gets a second chance, an idle one goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_full_table_evicts_the_least_recently_active_flow() {
    let (a1, h1) = udp_backend("one").await;
    let _b = Backends(vec![h1]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(true);
    let cfg = write_config(
        dir.path(),
        &udp_listener(
            port,
            "udp_max_flows = 3",
            &group("g", "cn-beijing", 100.0, "", &[(a1, 1)]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "u").await;
    let opened = || metric(&node, "gtd_connections_total", &["listener=\"u\""]);
    let mut clients = Vec::new();
    for _ in 0..3 {
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        assert_eq!(udp_name(&c, addr).await, "one");
        clients.push(c);
    }
    assert_eq!(opened(), 3.0);
    // Activity is kept in milliseconds: let one pass, so the next datagram is later activity.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(udp_name(&clients[0], addr).await, "one");
    assert_eq!(opened(), 3.0, "the first client's flow is reused");
    // A fourth client: the second (idle since opened, unlike the first) is evicted.
    let fourth = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    assert_eq!(udp_name(&fourth, addr).await, "one");
    assert_eq!(metric(&node, "gtd_udp_flows_evicted_total", &[]), 1.0);
    assert_eq!(udp_name(&clients[0], addr).await, "one");
    assert_eq!(opened(), 4.0, "the first client kept its flow");
    assert_eq!(udp_name(&clients[1], addr).await, "one");
    assert_eq!(opened(), 5.0, "the second client needed a new one");
    node.shutdown().await;
}

/// A node that runs out of open files blames no endpoint: UDP flows stay within their share of
/// the limit (so the admin API keeps answering), and a TCP connection that cannot get a socket
/// towards its endpoint is closed without counting a failure against it.
#[test]
fn out_of_open_files_blames_no_endpoint() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (u, hu) = rt.block_on(udp_backend("u1"));
    let (t, ht) = rt.block_on(tcp_backend("t1"));
    let _b = Backends(vec![hu, ht]);
    let dir = tempfile::tempdir().unwrap();
    let (udp_port, tcp_port, admin_port) = (free_port(true), free_port(false), free_port(false));
    let cfg = dir.path().join("config.toml");
    let text = config_text(
        admin_port,
        &format!(
            "{}{}",
            udp_listener(
                udp_port,
                "",
                &group("g", "cn-beijing", 100.0, "", &[(u, 1)])
            ),
            tcp_listener(
                tcp_port,
                "",
                &[group("g", "cn-beijing", 100.0, "", &[(t, 1)])]
            ),
        ),
    );
    std::fs::write(&cfg, text).unwrap();
    let log = dir.path().join("gtd.log");
    // 96 open files, soft and hard, so gtd cannot raise it: 72 for the UDP listener's flows.
    let _child = Child(
        Command::new("sh")
            .args(["-c", "ulimit -n 96 && exec \"$0\" \"$@\""])
            .arg(env!("CARGO_BIN_EXE_gtd"))
            .args(["run", "--config", cfg.to_str().unwrap()])
            .args(["--region", "cn-beijing", "--bind", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let admin: SocketAddr = format!("127.0.0.1:{admin_port}").parse().unwrap();
    let tcp: SocketAddr = format!("127.0.0.1:{tcp_port}").parse().unwrap();
    let udp: SocketAddr = format!("127.0.0.1:{udp_port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while StdTcpStream::connect(admin).is_err() {
        assert!(
            Instant::now() < deadline,
            "gtd did not start: {}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // 150 UDP clients, one flow each: all answered, the table capped at 72.
    // (The sockets stay open, so that no client port is reused.)
    let clients = rt.block_on(async {
        let mut clients = Vec::new();
        for _ in 0..150 {
            let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            assert_eq!(udp_name(&c, udp).await, "u1");
            clients.push(c);
        }
        clients
    });
    assert_eq!(metric_at(admin, "gtd_udp_flows_active", &[]), 72.0);
    assert_eq!(metric_at(admin, "gtd_udp_flows_evicted_total", &[]), 78.0);

    // TCP connections until one is not served: the node is out of open files.
    let served = |conn: &mut StdTcpStream| {
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut name = [0_u8; 3];
        conn.read_exact(&mut name).is_ok() && &name == b"t1\n"
    };
    let mut open = Vec::new();
    loop {
        assert!(
            open.len() < 100,
            "100 connections and still not out of open files"
        );
        let mut conn = StdTcpStream::connect(tcp).unwrap();
        if !served(&mut conn) {
            break;
        }
        open.push(conn);
    }
    drop(open);
    // Free again: the endpoint serves at once, never marked out of rotation.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if StdTcpStream::connect(tcp).is_ok_and(|mut conn| served(&mut conn)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "TCP not served after connections closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(clients);
    let failures = metric_at(admin, "gtd_connect_failures_total", &[]);
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(failures, 0.0, "{log_text}");
    assert!(!log_text.contains("out of rotation"), "{log_text}");
    assert!(
        log_text.contains("this node is out of open files"),
        "{log_text}"
    );
    assert!(log_text.contains("udp_max_flows is above"), "{log_text}");
}

// ------------------------------------------------------------------ reload and lifecycle

/// A tcp listener "t" on `port`: group beijing (`a`, at `ratio_a`) and then shanghai (`b`).
fn tcp_two_groups(port: u16, a: SocketAddr, b: SocketAddr, ratio_a: f64) -> String {
    tcp_listener(
        port,
        "",
        &[
            group("beijing", "cn-beijing", ratio_a, "", &[(a, 1)]),
            group("shanghai", "cn-shanghai", 100.0, "", &[(b, 1)]),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_load_drops_nothing_and_bad_reload_keeps_config() {
    let (a, h1) = tcp_backend("bj").await;
    let (b, h2) = tcp_backend("sh").await;
    let _b = Backends(vec![h1, h2]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(dir.path(), &tcp_two_groups(port, a, b, 100.0));
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;

    // A long-lived connection opened before the reloads must survive them.
    let mut long = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut line = [0_u8; 3];
    long.read_exact(&mut line).await.unwrap();
    assert_eq!(&line, b"bj\n");

    // Continuous load from two clients while the config changes underneath.
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let mut load = Vec::new();
    for _ in 0..2 {
        let (stop, failures, done) = (stop.clone(), failures.clone(), done.clone());
        load.push(tokio::spawn(async move {
            // Bounded: stops when told, and never runs past 20 000 connections.
            for _ in 0..20_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                match tcp_name(addr).await {
                    Ok(_) => done.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failures.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    let cfg_text = std::fs::read_to_string(&cfg).unwrap();
    for ratio in [50.0, 0.0, 100.0, 30.0] {
        let before = done.load(Ordering::Relaxed);
        until("some traffic", || {
            done.load(Ordering::Relaxed) > before + 50
        })
        .await;
        std::fs::write(
            &cfg,
            cfg_text.replacen("ratio = 100\n", &format!("ratio = {ratio}\n"), 1),
        )
        .unwrap();
        let (status, body) = admin(&node, "POST", "/reload", None);
        assert_eq!(status, 200, "{body}");
    }
    // A broken config: rejected with file:line:col, the running one stays.
    std::fs::write(&cfg, cfg_text.replacen("ratio = 100\n", "ratio = 150\n", 1)).unwrap();
    let (status, body) = admin(&node, "POST", "/reload", None);
    assert_eq!(status, 422);
    assert!(body.contains("ratio 150 is out of range 0..=100"), "{body}");
    assert!(body.contains("config.toml:"), "{body}");
    let before = done.load(Ordering::Relaxed);
    until("traffic after the bad reload", || {
        done.load(Ordering::Relaxed) > before + 50
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "connections failed during reloads"
    );
    assert_eq!(
        metric(&node, "gtd_config_reloads_total", &["result=\"ok\""]),
        4.0
    );
    assert_eq!(
        metric(&node, "gtd_config_reloads_total", &["result=\"error\""]),
        1.0
    );
    // The last good config (beijing at 30) is what runs: from cn-beijing 30 / 70.
    let share = |node: &Node| {
        let (_, text) = admin(node, "GET", "/status", None);
        let doc: Value = serde_json::from_str(&text).unwrap();
        (
            doc["listeners"][0]["groups"][0]["share"].as_f64().unwrap(),
            doc,
        )
    };
    assert_eq!(share(&node).0, 30.0);
    // An endpoint disabled through the admin API stays disabled across a reload: shanghai's only
    // endpoint off makes shanghai unhealthy, so beijing takes everything, before and after.
    let (status, _) = admin(
        &node,
        "POST",
        &format!("/endpoints/t/shanghai/{b}/disable"),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(share(&node).0, 100.0);
    std::fs::write(&cfg, cfg_text.replacen("ratio = 100\n", "ratio = 30\n", 1)).unwrap();
    assert_eq!(admin(&node, "POST", "/reload", None).0, 200);
    let (after, doc) = share(&node);
    assert_eq!(after, 100.0);
    assert_eq!(
        doc["listeners"][0]["groups"][1]["endpoints"][0]["enabled"],
        false
    );
    admin(
        &node,
        "POST",
        &format!("/endpoints/t/shanghai/{b}/enable"),
        None,
    );
    assert_eq!(share(&node).0, 30.0);

    // The long-lived connection still relays.
    long.write_all(b"still here").await.unwrap();
    let mut echo = [0_u8; 10];
    long.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"still here");
    drop(long);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_ends_the_metric_series_of_removed_listeners_groups_and_endpoints() {
    let (a, h1) = tcp_backend("a").await;
    let (b, h2) = tcp_backend("b").await;
    let (c, h3) = tcp_backend("c").await;
    let _b = Backends(vec![h1, h2, h3]);
    let dir = tempfile::tempdir().unwrap();
    let (port, other_port) = (free_port(false), free_port(false));
    let other = format!(
        "[[listener]]\nname = \"u\"\nprotocol = \"tcp\"\nport = {other_port}\nregions = [\"cn-beijing\"]\n{}",
        group("solo", "cn-beijing", 100.0, "", &[(c, 1)])
    );
    let before = format!(
        "{}{other}",
        tcp_listener(
            port,
            "",
            &[
                group("beijing", "cn-beijing", 50.0, "", &[(a, 1), (b, 1)]),
                group("extra", "cn-shanghai", 100.0, "", &[(c, 1)]),
            ],
        )
    );
    let cfg = write_config(dir.path(), &before);
    let head = std::fs::read_to_string(&cfg).unwrap().replace(&before, "");
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    let share = |node: &Node, g: &str| {
        metric(
            node,
            "gtd_group_share",
            &["listener=\"t\"", &format!("group=\"{g}\"")],
        )
    };
    assert_eq!(
        (share(&node, "beijing"), share(&node, "extra")),
        (50.0, 50.0)
    );
    let on_a = format!("endpoint=\"{a}\"");
    let on_b = format!("endpoint=\"{b}\"");
    assert_eq!(
        metric_lines(&node, &["gtd_endpoint_healthy", &on_b]).len(),
        1
    );
    // Traffic until endpoint a has counted connections, to see that its counters stay.
    for _ in 0..100 {
        if metric(&node, "gtd_connections_total", &[&on_a]) >= 1.0 {
            break;
        }
        tcp_name(addr).await.unwrap();
    }
    let connections_a = metric(&node, "gtd_connections_total", &[&on_a]);
    assert!(connections_a >= 1.0);

    // A rejected reload (a new listener's port is taken) leaves no series of what it built,
    // and the running config's gauges as they were, though it changed a ratio.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let rejected = format!(
        "{}[[listener]]\nname = \"v\"\nprotocol = \"tcp\"\nport = {}\nregions = [\"cn-beijing\"]\n{}",
        before.replace("ratio = 50", "ratio = 80"),
        taken.local_addr().unwrap().port(),
        group("late", "cn-beijing", 100.0, "", &[(c, 1)])
    );
    assert_ne!(rejected.matches("ratio = 80").count(), 0);
    std::fs::write(&cfg, format!("{head}{rejected}")).unwrap();
    let (status, body) = admin(&node, "POST", "/reload", None);
    assert_ne!(status, 200, "{body}");
    assert!(metric_lines(&node, &["listener=\"v\""]).is_empty());
    assert_eq!(
        (share(&node, "beijing"), share(&node, "extra")),
        (50.0, 50.0),
        "the running config's series stay as they were"
    );
    drop(taken);

    // Group "extra", endpoint b and listener "u" go.
    let after = tcp_listener(
        port,
        "",
        &[group("beijing", "cn-beijing", 50.0, "", &[(a, 1)])],
    );
    std::fs::write(&cfg, format!("{head}{after}")).unwrap();
    let (status, body) = admin(&node, "POST", "/reload", None);
    assert_eq!(status, 200, "{body}");
    for gone in ["group=\"extra\"", &on_b, "listener=\"u\""] {
        let lines = metric_lines(&node, &[gone]);
        assert!(
            lines.is_empty(),
            "{gone} still exported:\n{}",
            lines.join("\n")
        );
    }
    // What stays keeps (or updates) its values: beijing alone takes everything.
    assert_eq!(metric(&node, "gtd_group_share", &["listener=\"t\""]), 100.0);
    assert_eq!(
        metric(&node, "gtd_group_healthy", &["group=\"beijing\""]),
        1.0
    );
    assert_eq!(metric(&node, "gtd_endpoint_healthy", &[&on_a]), 1.0);
    assert_eq!(
        metric(&node, "gtd_connections_total", &[&on_a]),
        connections_a
    );
    assert_eq!(
        metric_lines(&node, &["gtd_connect_seconds_count", "group=\"beijing\""]).len(),
        1
    );
    assert_eq!(
        metric(&node, "gtd_config_reloads_total", &["result=\"ok\""]),
        1.0
    );
    assert_eq!(
        metric(&node, "gtd_config_reloads_total", &["result=\"error\""]),
        1.0
    );
    assert_eq!(tcp_name(addr).await.unwrap(), "a");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_status_metrics_and_token() {
    let (a, h) = tcp_backend("x").await;
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(dir.path(), &tcp_two_groups(port, a, a, 50.0));
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("[admin]\n", "[admin]\ntoken = \"s3cret\"\n");
    std::fs::write(&cfg, text).unwrap();
    let node = start(&cfg).await;
    let (status, body) = admin(&node, "GET", "/healthz", None);
    assert_eq!((status, body.trim()), (200, "ok"));
    let (_, body) = admin(&node, "GET", "/status", None);
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["node"]["region"], "cn-beijing");
    let l = &doc["listeners"][0];
    assert_eq!(
        (
            l["name"].as_str(),
            l["protocol"].as_str(),
            l["mode"].as_str()
        ),
        (Some("t"), Some("tcp"), Some("cascade"))
    );
    let g = &l["groups"][0];
    for key in [
        "name",
        "priority",
        "rtt_ms",
        "rtt_source",
        "ratio",
        "healthy",
        "share",
        "endpoints",
    ] {
        assert!(!g[key].is_null(), "group key {key}");
    }
    // beijing 50 first, shanghai 100 takes the rest: 50 / 50.
    assert_eq!(
        (g["share"].as_f64(), g["rtt_source"].as_str()),
        (Some(50.0), Some("estimated"))
    );
    for key in ["address", "healthy", "enabled", "active", "weight", "fails"] {
        assert!(!g["endpoints"][0][key].is_null(), "endpoint key {key}");
    }
    // POSTs need the token.
    let (status, _) = admin(&node, "POST", "/reload", None);
    assert_eq!(status, 401);
    let (status, _) = admin(&node, "POST", "/reload", Some("wrong"));
    assert_eq!(status, 401);
    let (status, _) = admin(&node, "POST", "/reload", Some("s3cret"));
    assert_eq!(status, 200);
    // The scheme in any case, as HTTP has it.
    let mut s = StdTcpStream::connect(node.admin_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(
        b"POST /reload HTTP/1.0\r\nAuthorization: bearer s3cret\r\nContent-Length: 0\r\n\r\n",
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.split(' ').nth(1) == Some("200"), "{text}");
    let (status, _) = admin(
        &node,
        "POST",
        "/endpoints/t/nosuch/1.2.3.4:5/disable",
        Some("s3cret"),
    );
    assert_eq!(status, 404);
    // Every metric of the code's table is exposed, with its description.
    let (_, body) = admin(&node, "GET", "/metrics", None);
    for name in [
        "gtd_group_share",
        "gtd_group_healthy",
        "gtd_endpoint_healthy",
        "gtd_config_reloads_total",
        "gtd_connections_active",
    ] {
        assert!(
            body.contains(&format!("# HELP {name} ")),
            "{name} in\n{body}"
        );
    }
    node.shutdown().await;
}

#[test]
fn sigterm_drains_open_connections() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (a, h) = rt.block_on(tcp_backend("x"));
    let _b = rt.enter();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &tcp_listener(
            port,
            "drain_timeout = \"60s\"",
            &[group("g", "cn-beijing", 100.0, "", &[(a, 1)])],
        ),
    );
    let mut child = Child(
        Command::new(env!("CARGO_BIN_EXE_gtd"))
            .args(["run", "--config", cfg.to_str().unwrap()])
            .args(["--region", "cn-beijing", "--bind", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut conn = loop {
        match StdTcpStream::connect(addr) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("gtd did not start: {e}"),
        }
    };
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut name = [0_u8; 2];
    conn.read_exact(&mut name).unwrap();
    assert_eq!(&name, b"x\n");

    let pid = child.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    // New connections are refused once the listener closes…
    let deadline = Instant::now() + Duration::from_secs(30);
    while StdTcpStream::connect(addr).is_ok() {
        assert!(
            Instant::now() < deadline,
            "listener still accepting after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // …while the open connection keeps working and the process waits for it.
    conn.write_all(b"ping").unwrap();
    let mut echo = [0_u8; 4];
    conn.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"ping");
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "exited before the connection closed"
    );
    drop(conn);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "gtd did not exit after the last connection closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status}");
    h.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_protocol_v2_tells_the_endpoint_who_the_client_is() {
    // A backend that reads the 28-byte v2 header (IPv4) and answers with the source it names.
    let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = socket.local_addr().unwrap();
    let h = tokio::spawn(async move {
        let (mut s, _) = socket.accept().await.unwrap();
        let mut header = [0_u8; 28];
        s.read_exact(&mut header).await.unwrap();
        assert_eq!(&header[..12], b"\r\n\r\n\0\r\nQUIT\n");
        let ip = std::net::Ipv4Addr::new(header[16], header[17], header[18], header[19]);
        let port = u16::from_be_bytes([header[24], header[25]]);
        s.write_all(format!("{ip}:{port}\n").as_bytes())
            .await
            .unwrap();
    });
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &tcp_listener(
            port,
            "proxy_protocol = \"v2\"",
            &[group("g", "cn-beijing", 100.0, "", &[(backend, 1)])],
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    let client = tokio::net::TcpStream::connect(addr).await.unwrap();
    let me = client.local_addr().unwrap();
    let mut reader = tokio::io::BufReader::new(client);
    let mut line = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut reader, &mut line)
        .await
        .unwrap();
    assert_eq!(line.trim(), me.to_string());
    node.shutdown().await;
}
