//! UDP flows through the node: the split compared with `sim` with eviction, stickiness, idle
//! expiry and moving on disable, replies from a wildcard address, the full table's eviction
//! order, and running out of open files without blaming an endpoint.

use crate::common::*;
use crate::harness::*;

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gtd::node::Node;
use tokio::net::UdpSocket;

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
    // A fourth client: one flow is evicted, and not the first client's, which moved since it
    // was opened. (Which of the other two goes depends on the millisecond their replies came
    // back in, which also counts as activity: on a loaded machine either may.)
    let fourth = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    assert_eq!(udp_name(&fourth, addr).await, "one");
    assert_eq!(metric(&node, "gtd_udp_flows_evicted_total", &[]), 1.0);
    assert_eq!(udp_name(&clients[0], addr).await, "one");
    assert_eq!(opened(), 4.0, "the first client kept its flow");
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
    // The default udp_max_flows, capped by the limit: said once, as information.
    assert!(
        log_text.contains("UDP flows capped at 3/4 of the open files limit"),
        "{log_text}"
    );
    assert!(!log_text.contains("udp_max_flows is above"), "{log_text}");
}

/// Datagrams the kernel drops on the listener's socket while gtd cannot read (here: stopped
/// with SIGSTOP, its receive buffer full) are counted in `gtd_udp_datagrams_dropped_total`.
#[test]
fn datagrams_the_kernel_drops_are_counted() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (u, hu) = rt.block_on(udp_backend("u1"));
    let _b = Backends(vec![hu]);
    let dir = tempfile::tempdir().unwrap();
    let (udp_port, admin_port) = (free_port(true), free_port(false));
    let cfg = dir.path().join("config.toml");
    let text = config_text(
        admin_port,
        &udp_listener(
            udp_port,
            "",
            &group("g", "cn-beijing", 100.0, "", &[(u, 1)]),
        ),
    );
    std::fs::write(&cfg, text).unwrap();
    let child = run_child(&cfg, Stdio::null());
    let admin: SocketAddr = format!("127.0.0.1:{admin_port}").parse().unwrap();
    let udp: SocketAddr = format!("127.0.0.1:{udp_port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while StdTcpStream::connect(admin).is_err() {
        assert!(Instant::now() < deadline, "gtd did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = [0_u8; 2048];
    client.send_to(b"hello", udp).unwrap();
    client
        .recv_from(&mut buf)
        .expect("an answer before the flood");
    assert_eq!(
        metric_at(admin, "gtd_udp_datagrams_dropped_total", &[]),
        0.0
    );

    // Stopped, gtd reads nothing: 20 000 datagrams of 1 KiB (20 MiB) overflow any default
    // receive buffer. Bounded, loopback only.
    let pid = child.0.id().to_string();
    let signal = |sig: &str| {
        assert!(
            Command::new("kill")
                .args([sig, &pid])
                .status()
                .unwrap()
                .success()
        );
    };
    signal("-STOP");
    let datagram = [7_u8; 1024];
    for _ in 0..20_000 {
        let _ = client.send_to(&datagram, udp);
    }
    signal("-CONT");
    // The count comes with the next datagrams gtd reads; it publishes it within 250 ms.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let _ = client.send_to(b"after", udp);
        if metric_at(
            admin,
            "gtd_udp_datagrams_dropped_total",
            &["reason=\"socket_buffer\""],
        ) > 0.0
        {
            break;
        }
        assert!(Instant::now() < deadline, "no drop counted");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An endpoint set to `drain` by a reload keeps the flows it has; new flows go elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_flows_stay_on_an_endpoint_set_to_drain() {
    let (a1, h1) = udp_backend("one").await;
    let (a2, h2) = udp_backend("two").await;
    let _b = Backends(vec![h1, h2]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(true);
    let config = |drain_one: bool| {
        udp_listener(
            port,
            "",
            &group(
                "g",
                "cn-beijing",
                100.0,
                "",
                &[(a1, if drain_one { "drain = true" } else { "" }), (a2, "")],
            ),
        )
    };
    let cfg = write_config(dir.path(), &config(false));
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "u").await;
    // A flow on "one".
    let mut on_one = None;
    for _ in 0..20 {
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        if udp_name(&c, addr).await == "one" {
            on_one = Some(c);
            break;
        }
    }
    let on_one = on_one.expect("a flow on one");
    let admin_port = std::fs::read_to_string(&cfg)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("bind = \"127.0.0.1:"))
        .and_then(|l| l.strip_suffix('"'))
        .unwrap()
        .to_owned();
    std::fs::write(
        &cfg,
        config_text(admin_port.parse().unwrap(), &config(true)),
    )
    .unwrap();
    node.reload().await.unwrap();
    for _ in 0..5 {
        assert_eq!(udp_name(&on_one, addr).await, "one", "the flow stays");
    }
    for _ in 0..10 {
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        assert_eq!(
            udp_name(&c, addr).await,
            "two",
            "new flows avoid the draining one"
        );
    }
    node.shutdown().await;
}

/// SIGTERM drains UDP: a live flow keeps getting replies until it goes idle (or
/// `drain_timeout` ends), a new client is served too and counted (its datagrams vanished for
/// the whole drain: the listener's socket stays open for the live flows, so the kernel does not
/// refuse them), and the process exits once the flows are idle.
#[test]
fn sigterm_keeps_live_udp_flows_until_they_go_idle() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (a, h) = rt.block_on(udp_backend("x"));
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(true);
    let cfg = write_config(
        dir.path(),
        &udp_listener(
            port,
            "idle_timeout = \"2s\"\ndrain_timeout = \"60s\"",
            &group("g", "cn-beijing", 100.0, "", &[(a, 1)]),
        ),
    );
    let mut child = run_child(&cfg, Stdio::null());
    let to: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let ask = |text: &[u8]| -> bool {
        let mut buf = [0_u8; 256];
        client.send_to(text, to).unwrap();
        matches!(client.recv_from(&mut buf), Ok((n, _)) if buf[..n].starts_with(b"x:"))
    };
    // Up (a reply), the flow open.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ask(b"up?") {
        assert!(Instant::now() < deadline, "gtd did not start");
    }
    let admin = admin_in(&cfg);
    sigterm(&child);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "exited at once on SIGTERM, dropping the live flow"
        );
        if StdTcpStream::connect(admin).is_ok() && admin_at(admin, "GET", "/healthz", None).0 == 503
        {
            break;
        }
        assert!(Instant::now() < deadline, "no drain after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The live flow is served, datagram after datagram (each well within idle_timeout).
    for i in 0..10 {
        let mut answered = false;
        // A datagram may be lost on a busy machine: up to 5 tries each.
        for _ in 0..5 {
            if ask(format!("still there {i}?").as_bytes()) {
                answered = true;
                break;
            }
        }
        assert!(answered, "no reply to datagram {i} after SIGTERM");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "exited while the flow was live"
    );
    // A new client is served, and counted.
    let stranger = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    stranger
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut served = false;
    for _ in 0..10 {
        let mut buf = [0_u8; 256];
        stranger.send_to(b"new?", to).unwrap();
        if matches!(stranger.recv_from(&mut buf), Ok((n, _)) if buf[..n].starts_with(b"x:")) {
            served = true;
            break;
        }
    }
    assert!(served, "a new flow during the drain got no reply");
    assert_eq!(
        metric_at(admin, "gtd_udp_flows_draining_total", &["listener=\"u\""]),
        1.0,
        "the new flow during the drain is counted"
    );
    // Quiet now: the flow goes idle (2 s) and the process exits, long before drain_timeout.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "gtd did not exit once the flow went idle"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status}");
}
