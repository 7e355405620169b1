//! Passive marks that clear (docs/design.md §5): an endpoint killed under long TCP sessions or
//! under UDP flows is marked by the attempts that fail on it; restarted, it regains its full
//! share of new sessions and flows within `healthy_threshold × interval + 2 s` — the checks'
//! turn to healthy clears the mark — and, without checks, as soon as the attempt after
//! `fail_timeout` connects (TCP) or gets a reply (UDP), whatever the sessions' length; an admin
//! enable and a reload that changes the endpoint end a mark at once, but not a drain.
//!
//! Every flow and session is counted by the name its endpoint answers with; the shares are
//! taken over new flows and sessions opened after the bound, with a generous margin.

use crate::common::*;
use crate::harness::*;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinHandle;

/// Sends `text` from `client` to `to`; the name of the endpoint that answered, `None` when
/// nothing came back within 2 s.
async fn udp_ask(client: &UdpSocket, to: SocketAddr, text: &str) -> Option<String> {
    client.send_to(text.as_bytes(), to).await.unwrap();
    let mut buf = [0_u8; 2048];
    let (n, _) = tokio::time::timeout(Duration::from_secs(2), client.recv_from(&mut buf))
        .await
        .ok()?
        .ok()?;
    let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
    Some(answer.split(':').next().unwrap().to_owned())
}

/// A TCP listener on `ip:port` that accepts and drops (enough for a tcp check).
fn accepting(l: TcpListener) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            drop(s);
        }
    })
}

/// Listeners on one port free on both 127.0.0.1 and 127.0.0.3.
async fn check_ports() -> (TcpListener, TcpListener, u16) {
    for _ in 0..100 {
        let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = a.local_addr().unwrap().port();
        if let Ok(b) = TcpListener::bind(("127.0.0.3", port)).await {
            return (a, b, port);
        }
    }
    panic!("no port free on both 127.0.0.1 and 127.0.0.3");
}

/// Opens a TCP session through the node and keeps it: the stream and the endpoint's name.
async fn session(to: SocketAddr) -> Option<(TcpStream, String)> {
    let mut s = TcpStream::connect(to).await.ok()?;
    let mut name = Vec::new();
    let mut byte = [0_u8; 1];
    let read = async {
        loop {
            match s.read(&mut byte).await {
                Ok(1) if byte[0] == b'\n' => return true,
                Ok(1) => name.push(byte[0]),
                _ => return false,
            }
        }
    };
    if !tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .unwrap_or(false)
    {
        return None;
    }
    Some((s, String::from_utf8(name).unwrap()))
}

/// A TCP endpoint at `addr` that says its name and then holds the session open (reading
/// until EOF).
async fn holding(addr: SocketAddr, name: &'static str) -> (SocketAddr, JoinHandle<()>) {
    socket_backend_on(addr, move |mut s| async move {
        use tokio::io::AsyncWriteExt;
        if s.write_all(format!("{name}\n").as_bytes()).await.is_err() {
            return;
        }
        let mut buf = [0_u8; 1024];
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
    .await
}

fn passive_down(node: &gtd::node::Node, listener: &str, address: SocketAddr) -> bool {
    endpoint_of(&status(node), listener, "g", &address.to_string()).passive_down
}

fn check_healthy(node: &gtd::node::Node, listener: &str, address: SocketAddr) -> bool {
    check_of(&status(node), listener, "g", &address.to_string()).healthy
}

/// The admin port `write_config` chose for the config at `cfg`, to write it again.
fn admin_port(cfg: &std::path::Path) -> u16 {
    std::fs::read_to_string(cfg)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("bind = \"127.0.0.1:"))
        .and_then(|l| l.strip_suffix('"'))
        .unwrap()
        .parse()
        .unwrap()
}

/// The checks these tests configure: `interval` and `healthy_threshold`.
const INTERVAL: Duration = Duration::from_secs(1);
const HEALTHY_THRESHOLD: u32 = 2;
/// `healthy_threshold × interval + 2 s`.
const BOUND: Duration = Duration::from_secs(HEALTHY_THRESHOLD as u64 * INTERVAL.as_secs() + 2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_udp_endpoint_regains_its_share_once_its_checks_pass() {
    let (a, ha) = udp_on("127.0.0.1:0", "A").await;
    let (b, hb) = udp_on("127.0.0.3:0", "B").await;
    let _a = Backends(vec![ha]);
    let (check_a, check_b, port) = check_ports().await;
    let _ca = Backends(vec![accepting(check_a)]);
    let cb = accepting(check_b);
    let check = format!(
        "[listener.group.health_check]\nprotocol = \"tcp\"\nport = {port}\ninterval = \"1s\"\n\
         unhealthy_threshold = 1\nhealthy_threshold = 2\n"
    );
    let g = group("g", "cn-beijing", 100.0, &check, &[(a, 1), (b, 1)]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &listener("voice", "udp", "", &g));
    let node = start(&cfg).await;
    let to = listener_addr(&node, "voice").await;
    until("both endpoints checked healthy", || {
        check_healthy(&node, "voice", a) && check_healthy(&node, "voice", b)
    })
    .await;

    // Live flows, some of them on B.
    let mut on_b = Vec::new();
    for _ in 0..40 {
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        if udp_ask(&c, to, "hello").await.as_deref() == Some("B") {
            on_b.push(c);
        }
        if on_b.len() == 3 {
            break;
        }
    }
    assert!(!on_b.is_empty(), "some flows on B");

    // B dies (its datagrams are refused); its flows keep talking, and the refusals mark it.
    // Then its check port closes too. In that order: were the check to fail first, B's flows
    // would move to A before any refusal marked B (seen on a loaded machine).
    hb.abort();
    until("B marked by its refused flows", || {
        for c in &on_b {
            let _ = c.try_send_to(b"anyone?", to);
        }
        passive_down(&node, "voice", b)
    })
    .await;
    cb.abort();
    until("B's check failed", || !check_healthy(&node, "voice", b)).await;

    // B comes back where it was.
    let (_, hb) = udp_on(&b.to_string(), "B").await;
    let back = TcpListener::bind(("127.0.0.3", port)).await.unwrap();
    let _b = Backends(vec![hb, accepting(back)]);
    let restarted = Instant::now();
    tokio::time::sleep_until((restarted + BOUND).into()).await;

    // New flows from here on split evenly again.
    let (mut to_b, mut all) = (0, 0);
    for _ in 0..100 {
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        match udp_ask(&c, to, "new").await.as_deref() {
            Some("B") => to_b += 1,
            Some(_) => {}
            None => continue,
        }
        all += 1;
    }
    eprintln!("udp, checks: B got {to_b} of {all} new flows {BOUND:?} after its restart");
    assert!(all >= 90, "{all} of 100 new flows answered");
    assert!(
        to_b * 100 >= all * 30,
        "B got {to_b} of {all} new flows {BOUND:?} after its restart (expected about half)"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_udp_endpoint_without_checks_is_back_once_a_flow_gets_a_reply() {
    let (a, ha) = udp_on("127.0.0.1:0", "A").await;
    let (b, hb) = udp_on("127.0.0.1:0", "B").await;
    let _a = Backends(vec![ha]);
    let endpoint = "fail_timeout = \"2s\"";
    let g = group(
        "g",
        "cn-beijing",
        100.0,
        "",
        &[(a, endpoint), (b, endpoint)],
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &listener("voice", "udp", "", &g));
    let node = start(&cfg).await;
    let to = listener_addr(&node, "voice").await;
    let mut on_b = Vec::new();
    for _ in 0..40 {
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        if udp_ask(&c, to, "hello").await.as_deref() == Some("B") {
            on_b.push(c);
        }
        if on_b.len() == 3 {
            break;
        }
    }
    assert!(!on_b.is_empty(), "some flows on B");
    hb.abort();
    until("B marked by its refused flows", || {
        for c in &on_b {
            let _ = c.try_send_to(b"anyone?", to);
        }
        passive_down(&node, "voice", b)
    })
    .await;
    let (_, hb) = udp_on(&b.to_string(), "B").await;
    let _b = Backends(vec![hb]);
    let restarted = Instant::now();
    // New flows all along; once past fail_timeout, one is B's probe, and its reply ends the
    // mark: the flows of the last second split evenly.
    let mut last = (0, 0);
    while restarted.elapsed() < Duration::from_secs(2 + 2) {
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let answer = udp_ask(&c, to, "new").await;
        if restarted.elapsed() >= Duration::from_secs(3) && answer.is_some() {
            last.1 += 1;
            if answer.as_deref() == Some("B") {
                last.0 += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (to_b, all) = last;
    eprintln!("udp, no checks: B got {to_b} of the last {all} new flows");
    assert!(all >= 10, "{all} flows in the last second");
    assert!(
        to_b * 100 >= all * 30,
        "B got {to_b} of the last {all} new flows (expected about half)"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_tcp_endpoint_regains_its_share_under_long_sessions() {
    let (a, ha) = holding("127.0.0.1:0".parse().unwrap(), "A").await;
    let (b, hb) = holding("127.0.0.1:0".parse().unwrap(), "B").await;
    let _a = Backends(vec![ha]);
    let check = "[listener.group.health_check]\nprotocol = \"tcp\"\ninterval = \"1s\"\n\
                 unhealthy_threshold = 1\nhealthy_threshold = 2\n";
    let g = group("g", "cn-beijing", 100.0, check, &[(a, 1), (b, 1)]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &listener("t", "tcp", "", &g));
    let node = start(&cfg).await;
    let to = listener_addr(&node, "t").await;
    until("both endpoints checked healthy", || {
        check_healthy(&node, "t", a) && check_healthy(&node, "t", b)
    })
    .await;
    // Long sessions on both.
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(session(to).await.expect("a session"));
    }
    // B dies: its sessions end, and the next connection the node tries on it marks it, unless
    // its 1 s check took it out first (then no connection goes there to mark it): either way
    // it is out of rotation.
    hb.abort();
    until("B marked or checked out", || {
        let _ = std::net::TcpStream::connect(to);
        passive_down(&node, "t", b) || !check_healthy(&node, "t", b)
    })
    .await;
    until("B's check failed", || !check_healthy(&node, "t", b)).await;
    let (_, hb) = holding(b, "B").await;
    let _b = Backends(vec![hb]);
    let restarted = Instant::now();
    tokio::time::sleep_until((restarted + BOUND).into()).await;
    let mut to_b = 0;
    for _ in 0..40 {
        let (s, name) = session(to).await.expect("a session");
        if name == "B" {
            to_b += 1;
        }
        held.push((s, name));
    }
    eprintln!("tcp, checks: B got {to_b} of 40 new sessions {BOUND:?} after its restart");
    assert!(
        to_b >= 12,
        "B got {to_b} of 40 new sessions {BOUND:?} after its restart (expected about half)"
    );
    drop(held);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_tcp_endpoint_without_checks_is_back_once_a_session_connects() {
    let (a, ha) = holding("127.0.0.1:0".parse().unwrap(), "A").await;
    let (b, hb) = holding("127.0.0.1:0".parse().unwrap(), "B").await;
    let _a = Backends(vec![ha]);
    let endpoint = "fail_timeout = \"2s\"";
    let g = group(
        "g",
        "cn-beijing",
        100.0,
        "",
        &[(a, endpoint), (b, endpoint)],
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &listener("t", "tcp", "", &g));
    let node = start(&cfg).await;
    let to = listener_addr(&node, "t").await;
    hb.abort();
    until("B marked", || {
        let _ = std::net::TcpStream::connect(to);
        passive_down(&node, "t", b)
    })
    .await;
    let (_, hb) = holding(b, "B").await;
    let _b = Backends(vec![hb]);
    let restarted = Instant::now();
    // Sessions that stay open all along: B's probe after fail_timeout is one of them, and it
    // ends the mark when it connects, not when it closes.
    let mut held = Vec::new();
    let mut last = (0, 0);
    while restarted.elapsed() < Duration::from_secs(2 + 2) {
        let (s, name) = session(to).await.expect("a session");
        if restarted.elapsed() >= Duration::from_secs(3) {
            last.1 += 1;
            if name == "B" {
                last.0 += 1;
            }
        }
        held.push((s, name));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (to_b, all) = last;
    eprintln!("tcp, no checks: B got {to_b} of the last {all} new sessions");
    assert!(all >= 10, "{all} sessions in the last second");
    assert!(
        to_b * 100 >= all * 30,
        "B got {to_b} of the last {all} new sessions (expected about half)"
    );
    drop(held);
    node.shutdown().await;
}

/// Client sockets with a flow on endpoint `name` (up to two of 40 tried).
async fn flows_on(to: SocketAddr, name: &str) -> Vec<UdpSocket> {
    let mut on = Vec::new();
    for _ in 0..40 {
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        if udp_ask(&c, to, "hello").await.as_deref() == Some(name) {
            on.push(c);
        }
        if on.len() == 2 {
            break;
        }
    }
    assert!(!on.is_empty(), "some flows on {name}");
    on
}

/// Keeps the flows talking until the node marks `address` (its endpoint is dead).
async fn until_marked(
    node: &gtd::node::Node,
    to: SocketAddr,
    flows: &[UdpSocket],
    address: SocketAddr,
) {
    until("the endpoint marked by its refused flows", || {
        for c in flows {
            let _ = c.try_send_to(b"anyone?", to);
        }
        passive_down(node, "voice", address)
    })
    .await;
}

/// Of 40 new flows, (those `name` answered, those answered).
async fn share_of(to: SocketAddr, name: &str) -> (u32, u32) {
    let (mut on, mut all) = (0, 0);
    for _ in 0..40 {
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        match udp_ask(&c, to, "new").await {
            Some(n) if n == name => on += 1,
            Some(_) => {}
            None => continue,
        }
        all += 1;
    }
    (on, all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_enable_and_a_reload_that_changes_the_endpoint_clear_a_udp_mark() {
    let (a, ha) = udp_on("127.0.0.1:0", "A").await;
    let (b, hb) = udp_on("127.0.0.1:0", "B").await;
    let _a = Backends(vec![ha]);
    let port = free_port(true);
    // Marks that would last a minute.
    let config = |b_timeout: &str| {
        let g = group(
            "g",
            "cn-beijing",
            100.0,
            "",
            &[
                (a, "fail_timeout = \"60s\"".to_owned()),
                (b, format!("fail_timeout = \"{b_timeout}\"")),
            ]
            .iter()
            .map(|(addr, k)| (*addr, k.as_str()))
            .collect::<Vec<_>>(),
        );
        listener_on(port, "voice", "udp", &["cn-beijing"], "", &g)
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &config("60s"));
    let node = start(&cfg).await;
    let to = listener_addr(&node, "voice").await;

    // An admin enable (of an endpoint that was never disabled) ends the mark.
    let on_b = flows_on(to, "B").await;
    hb.abort();
    until_marked(&node, to, &on_b, b).await;
    let (_, hb) = udp_on(&b.to_string(), "B").await;
    let (to_b, all) = share_of(to, "B").await;
    assert_eq!(to_b, 0, "marked for a minute: B got {to_b} of {all}");
    let (code, body) = admin(
        &node,
        "POST",
        &format!("/endpoints/voice/g/{b}/enable"),
        None,
    );
    assert_eq!(code, 200, "{body}");
    let (to_b, all) = share_of(to, "B").await;
    assert!(
        to_b * 100 >= all * 30,
        "after enable: B got {to_b} of {all}"
    );

    // A reload that changes B ends its mark too.
    let on_b = flows_on(to, "B").await;
    hb.abort();
    until_marked(&node, to, &on_b, b).await;
    let (_, hb) = udp_on(&b.to_string(), "B").await;
    let _b = Backends(vec![hb]);
    let (to_b, all) = share_of(to, "B").await;
    assert_eq!(to_b, 0, "marked again: B got {to_b} of {all}");
    std::fs::write(&cfg, config_text(admin_port(&cfg), &config("50s"))).unwrap();
    node.reload().await.unwrap();
    let (to_b, all) = share_of(to, "B").await;
    assert!(
        to_b * 100 >= all * 30,
        "after the reload: B got {to_b} of {all}"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_a_marked_endpoint_by_reload_leaves_it_marked() {
    let (a, ha) = holding("127.0.0.1:0".parse().unwrap(), "A").await;
    let _a = Backends(vec![ha]);
    // B refuses every connection.
    let b = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let port = free_port(false);
    let config = |b_keys: &str| {
        let b_keys = format!("fail_timeout = \"60s\"\n{b_keys}");
        let g = group(
            "g",
            "cn-beijing",
            100.0,
            "",
            &[(a, ""), (b, b_keys.as_str())],
        );
        listener_on(port, "t", "tcp", &["cn-beijing"], "", &g)
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &config(""));
    let node = start(&cfg).await;
    let to = listener_addr(&node, "t").await;
    until("B marked by its refused connection", || {
        let _ = std::net::TcpStream::connect(to);
        passive_down(&node, "t", b)
    })
    .await;

    // The operator drains the failing endpoint: a change to `drain` alone says nothing of its
    // health, so the mark (a minute long) stays, and so does it after the undrain.
    for (step, keys) in [("drain", "drain = true"), ("undrain", "")] {
        std::fs::write(&cfg, config_text(admin_port(&cfg), &config(keys))).unwrap();
        node.reload().await.unwrap();
        let doc = status(&node);
        let e = endpoint_of(&doc, "t", "g", &b.to_string());
        assert_eq!(e.drain, step == "drain", "{step}: {e:?}");
        assert!(e.passive_down, "after the {step}, B is still marked: {e:?}");
        for _ in 0..10 {
            let (_s, name) = session(to).await.expect("a session on A");
            assert_eq!(name, "A", "after the {step}");
        }
    }

    // Any other change is the operator asking for another try: the mark ends.
    std::fs::write(&cfg, config_text(admin_port(&cfg), &config("weight = 2"))).unwrap();
    node.reload().await.unwrap();
    assert!(
        !passive_down(&node, "t", b),
        "a change of weight ends the mark"
    );
    node.shutdown().await;
}
