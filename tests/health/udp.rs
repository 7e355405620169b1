//! A UDP flow and its endpoint's health: each endpoint is checked on the TCP port it exposes;
//! when its check fails the flow moves to the group's other endpoint on its next datagram, and
//! stays there when the first recovers. A group without checks still measures its RTT with the
//! light probe.

use crate::common::*;
use crate::harness::*;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, UdpSocket};

/// Sends `text` from `client` to `to` and returns the endpoint's name from the answer.
async fn ask(client: &UdpSocket, to: SocketAddr, text: &str) -> String {
    client.send_to(text.as_bytes(), to).await.unwrap();
    let mut buf = [0_u8; 2048];
    let (n, _) = tokio::time::timeout(Duration::from_secs(30), client.recv_from(&mut buf))
        .await
        .expect("an answer")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
    answer.split(':').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_leaves_an_endpoint_its_check_fails_and_does_not_come_back() {
    // Endpoint A on 127.0.0.1, B on 127.0.0.3; each exposes the same TCP check port on its own
    // address.
    let (a, ha) = udp_on("127.0.0.1:0", "A").await;
    let (b, hb) = udp_on("127.0.0.3:0", "B").await;
    let _udp = Backends(vec![ha, hb]);
    // A port free on both addresses (one free on 127.0.0.1 may be in use on 127.0.0.3).
    let mut pair = None;
    for _ in 0..100 {
        let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = a.local_addr().unwrap().port();
        if let Ok(b) = TcpListener::bind(("127.0.0.3", port)).await {
            pair = Some((a, b, port));
            break;
        }
    }
    let (check_a, check_b, port) = pair.expect("a port free on 127.0.0.1 and 127.0.0.3");
    // Accepting is enough for a TCP check: keep the listeners, drop what they accept.
    let serve = |l: TcpListener| {
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                drop(s);
            }
        })
    };
    let ca = serve(check_a);
    let _cb = Backends(vec![serve(check_b)]);
    let check = format!(
        "[listener.group.health_check]\nprotocol = \"tcp\"\nport = {port}\ninterval = \"1s\"\n\
         unhealthy_threshold = 1\nhealthy_threshold = 1\n"
    );
    // Weighted 100 to 1, so that new flows land on A.
    let g = group(
        "g",
        "cn-beijing",
        100.0,
        &check,
        &[(a, "weight = 100"), (b, "weight = 1")],
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &listener("voice", "udp", "", &g));
    let node = start(&cfg).await;
    let to = listener_addr(&node, "voice").await;
    until("both endpoints checked", || {
        let doc = status(&node);
        [a, b]
            .iter()
            .all(|e| checks_of(&doc, "voice", "g", &e.to_string()) >= 1)
    })
    .await;
    // One flow (one client socket), many datagrams: find it on A.
    let mut client = None;
    for _ in 0..50 {
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        if ask(&c, to, "hello").await == "A" {
            client = Some(c);
            break;
        }
    }
    let client = client.expect("a flow on A (weight 100 of 101)");
    assert_eq!(ask(&client, to, "again").await, "A");
    // A's check port closes: A turns unhealthy and the flow moves on its next datagram.
    ca.abort();
    until("A unhealthy", || {
        !check_of(&status(&node), "voice", "g", &a.to_string()).healthy
    })
    .await;
    assert_eq!(ask(&client, to, "moved?").await, "B");
    // A recovers; the flow stays where it went.
    let back = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let _back = Backends(vec![serve(back)]);
    until("A healthy again", || {
        endpoint_of(&status(&node), "voice", "g", &a.to_string()).healthy
    })
    .await;
    for i in 0..5 {
        assert_eq!(ask(&client, to, &format!("still {i}")).await, "B");
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_without_checks_measures_its_rtt_with_the_light_probe() {
    let (up, h) = socket_backend(|_| async {}).await;
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "t",
            "tcp",
            "",
            &group("g", "cn-shanghai", 100.0, "", &[(up, "")]),
        ),
    );
    let node = start(&cfg).await;
    // One light probe within its 10 s interval; the planner reads it within 250 ms.
    until("a measured RTT", || {
        group_of(&status(&node), "t", "g").rtt_source == "measured"
    })
    .await;
    let doc = status(&node);
    let e = endpoint_of(&doc, "t", "g", &up.to_string());
    assert!(e.rtt_ms.unwrap() < 1000.0, "{e:?}");
    // A probe is not a health check: no verdict, nothing counted.
    assert!(e.check.is_none(), "{e:?}");
    assert_eq!(metric(&node, "gtd_health_checks_total", &[]), 0.0);
    node.shutdown().await;
}
