//! Draining one endpoint through one node's admin API (`POST /endpoints/…/drain`, HAProxy's
//! `set server … state drain`): no new TCP session or UDP flow goes to it, what is bound to it
//! carries on, a reload keeps it, `/status` and the timeline say who drained it, and an undrain
//! brings it back.

use crate::common::*;
use crate::harness::*;

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// The endpoint `address` of group `g` in listener `listener`, as `/status` shows it.
fn endpoint(node: &gtd::node::Node, listener: &str, address: &str) -> gtd::view::EndpointView {
    let doc = status(node);
    status_listener(&doc, listener).groups[0]
        .endpoints
        .iter()
        .find(|e| e.address == address)
        .unwrap_or_else(|| panic!("{address} in /status"))
        .clone()
}

/// `POST /endpoints/LISTENER/g/ADDRESS/ACTION`: the answer's body, once it is a 200.
fn toggle(node: &gtd::node::Node, listener: &str, address: &str, action: &str) -> String {
    let (code, body) = admin(
        node,
        "POST",
        &format!("/endpoints/{listener}/g/{address}/{action}"),
        None,
    );
    assert_eq!(code, 200, "{action}: {body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_drain_keeps_new_tcp_sessions_away_and_lets_a_held_one_finish() {
    let (a, ha) = tcp_backend("A").await;
    let (b, hb) = tcp_backend("B").await;
    let _b = Backends(vec![ha, hb]);
    let port = free_port(false);
    let g = group("g", "cn-beijing", 100.0, "", &[(a, 1), (b, 1)]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &tcp_listener(port, "", &[g]));
    let node = start(&cfg).await;
    let to = listener_addr(&node, "t").await;

    // A session held on B.
    let mut held = None;
    for _ in 0..20 {
        let mut s = TcpStream::connect(to).await.unwrap();
        let mut name = [0_u8; 2];
        s.read_exact(&mut name).await.unwrap();
        if &name == b"B\n" {
            held = Some(s);
            break;
        }
    }
    let mut held = held.expect("a session on B within 20");

    let body = toggle(&node, "t", &b.to_string(), "drain");
    assert!(body.contains("\"drained\": true"), "{body}");
    let e = endpoint(&node, "t", &b.to_string());
    assert!(e.drain && e.enabled, "{e:?}");
    assert_eq!(e.drained_by.as_ref().unwrap().source, "admin", "{e:?}");
    for _ in 0..20 {
        assert_eq!(
            tcp_name(to).await.unwrap(),
            "A",
            "a new session while B drains"
        );
    }
    held.write_all(b"ping").await.unwrap();
    let mut echo = [0_u8; 4];
    tokio::time::timeout(Duration::from_secs(10), held.read_exact(&mut echo))
        .await
        .expect("the held session answers")
        .unwrap();
    assert_eq!(&echo, b"ping");

    // A reload that changes the listener (A's weight) keeps the admin's drain.
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replacen("weight = 1", "weight = 2", 1)).unwrap();
    node.reload().await.unwrap();
    assert_eq!(endpoint(&node, "t", &a.to_string()).weight, 2, "reloaded");
    assert!(endpoint(&node, "t", &b.to_string()).drain, "still drained");
    for _ in 0..10 {
        assert_eq!(tcp_name(to).await.unwrap(), "A", "after the reload");
    }
    let (_, events) = admin(&node, "GET", "/events", None);
    assert!(
        events.contains("drained through this node's admin API"),
        "{events}"
    );

    let body = toggle(&node, "t", &b.to_string(), "undrain");
    assert!(body.contains("\"drained\": false"), "{body}");
    let e = endpoint(&node, "t", &b.to_string());
    assert!(!e.drain && e.drained_by.is_none(), "{e:?}");
    let mut to_b = 0;
    for _ in 0..30 {
        if tcp_name(to).await.unwrap() == "B" {
            to_b += 1;
        }
    }
    assert!(
        to_b >= 5,
        "B took {to_b} of 30 new sessions after the undrain"
    );
    drop(held);
    node.shutdown().await;
}

/// Sends a datagram from `c` to `to`: the answer ("NAME:hi").
async fn ask(c: &UdpSocket, to: std::net::SocketAddr) -> String {
    c.send_to(b"hi", to).await.unwrap();
    let mut buf = [0_u8; 64];
    let (n, _) = tokio::time::timeout(Duration::from_secs(5), c.recv_from(&mut buf))
        .await
        .expect("an answer")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_drain_keeps_new_udp_flows_away_and_its_flows_on_it() {
    let (a, ha) = udp_backend("A").await;
    let (b, hb) = udp_backend("B").await;
    let _b = Backends(vec![ha, hb]);
    let port = free_port(true);
    let g = group("g", "cn-beijing", 100.0, "", &[(a, 1), (b, 1)]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        // Flows idle for 5 s end, so that the shutdown does not wait for the default 30 s.
        &listener_on(
            port,
            "u",
            "udp",
            &["cn-beijing"],
            "idle_timeout = \"5s\"",
            &g,
        ),
    );
    let node = start(&cfg).await;
    let to = listener_addr(&node, "u").await;
    // A flow on B.
    let mut on_b = None;
    for _ in 0..20 {
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        if ask(&c, to).await.starts_with("B:") {
            on_b = Some(c);
            break;
        }
    }
    let on_b = on_b.expect("a flow on B within 20");

    toggle(&node, "u", &b.to_string(), "drain");
    for _ in 0..20 {
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        assert!(
            ask(&c, to).await.starts_with("A:"),
            "a new flow while B drains"
        );
    }
    for _ in 0..3 {
        assert!(
            ask(&on_b, to).await.starts_with("B:"),
            "B's flow stays on B"
        );
    }
    toggle(&node, "u", &b.to_string(), "undrain");
    let mut to_b = 0;
    for _ in 0..30 {
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        if ask(&c, to).await.starts_with("B:") {
            to_b += 1;
        }
    }
    assert!(to_b >= 5, "B took {to_b} of 30 new flows after the undrain");
    node.shutdown().await;
}

/// A toggle of a listener, group or endpoint the node does not have is a 404 naming which.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toggle_of_what_the_node_lacks_is_a_404_naming_it() {
    let (a, ha) = tcp_backend("A").await;
    let _b = Backends(vec![ha]);
    let port = free_port(false);
    let g = group("g", "cn-beijing", 100.0, "", &[(a, 1)]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &tcp_listener(port, "", &[g]));
    let node = start(&cfg).await;
    for (path, said) in [
        (
            "/endpoints/nope/g/x/drain",
            r#"no listener \"nope\" on this node"#,
        ),
        (
            "/endpoints/t/h/x/drain",
            r#"no group \"h\" in listener \"t\""#,
        ),
        (
            "/endpoints/t/g/10.9.9.9:1/disable",
            r#"no endpoint \"10.9.9.9:1\" in group \"g\""#,
        ),
    ] {
        let (code, body) = admin(&node, "POST", path, None);
        assert_eq!(code, 404, "{path}: {body}");
        assert!(body.contains(said), "{path}: {body}");
    }
    node.shutdown().await;
}
