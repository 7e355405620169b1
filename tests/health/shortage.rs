//! A node that runs short of open files is not a sign that its endpoints are down. A node at
//! its open files limit (UDP flows took their share, TCP relays the rest) used to count every
//! health check that could not open its socket (EMFILE) as the endpoint's failure: the
//! endpoint went unhealthy, the listener to no-route, and with it every node of a fleet that
//! hit the limit would have failed over. Such a check is now `skipped`: counted, shown, and no
//! verdict. The node is a child `gtd run` under `prlimit`, so that its limit is its own.

use crate::common::*;
use crate::harness::Backends;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The child's open files limit, and the TCP relays held open (two descriptors each).
const OPEN_FILES: u32 = 128;
const RELAYS: usize = 25;
/// New UDP flows sent (each datagram from a socket of its own), one every 2 ms.
const FLOWS: usize = 2000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_a_node_cannot_run_for_want_of_open_files_do_not_fail_its_endpoints() {
    if Command::new("prlimit").arg("--version").output().is_err() {
        panic!("prlimit (util-linux) is needed: install util-linux");
    }
    // A TCP endpoint that holds what connects to it, a UDP one that never answers.
    let (tcp_endpoint, held) = socket_backend(|mut s| async move {
        let mut buf = [0_u8; 64];
        while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
    let _held = Backends(vec![held]);
    let udp_endpoint = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let (tcp_port, udp_port, admin_port) = (free_port(false), free_port(true), free_port(false));
    let check = "[listener.group.health_check]\nprotocol = \"tcp\"\ninterval = \"1s\"\n";
    let listeners = [
        listener_on(
            tcp_port,
            "t",
            "tcp",
            &["cn-beijing"],
            "",
            &group("g", "cn-beijing", 100.0, check, &[(tcp_endpoint, "")]),
        ),
        listener_on(
            udp_port,
            "u",
            "udp",
            &["cn-beijing"],
            "idle_timeout = \"5s\"",
            &group(
                "g",
                "cn-beijing",
                100.0,
                "",
                &[(udp_endpoint.local_addr().unwrap(), "")],
            ),
        ),
    ]
    .concat();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, config_text(admin_port, &listeners)).unwrap();
    let log = dir.path().join("node.log");
    let _node = Child(
        Command::new("prlimit")
            .arg(format!("--nofile={OPEN_FILES}:{OPEN_FILES}"))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_gtd"))
            .args(["run", "--config", cfg.to_str().unwrap()])
            .args(["--region", "cn-beijing", "--bind", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let admin: std::net::SocketAddr = format!("127.0.0.1:{admin_port}").parse().unwrap();
    let to: std::net::SocketAddr = format!("127.0.0.1:{tcp_port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(to).await.is_err() {
        assert!(Instant::now() < deadline, "the node did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    until("the endpoint passes a check", || {
        metric_at(admin, "gtd_health_checks_total", &["result=\"passed\""]) > 0.0
    })
    .await;

    // Take the node's descriptors: relays, then new UDP flows until the flood ends.
    let mut relays = Vec::new();
    for _ in 0..RELAYS {
        relays.push(TcpStream::connect(to).await.unwrap());
    }
    let udp_to: std::net::SocketAddr = format!("127.0.0.1:{udp_port}").parse().unwrap();
    tokio::task::spawn_blocking(move || {
        for _ in 0..FLOWS {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let _ = s.send_to(b"q", udp_to);
            std::thread::sleep(Duration::from_millis(2));
        }
    })
    .await
    .unwrap();
    drop(relays);
    // The flows end after their 5 s idle timeout; the admin server then has descriptors again.
    let unhealthy = || {
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("endpoint unhealthy")
    };
    until("the node answers its admin API again", || {
        unhealthy() || metric_at(admin, "gtd_health_checks_total", &["result=\"skipped\""]) > 0.0
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !text.contains("endpoint unhealthy") && !text.contains("listener=t mode=\"no-route\""),
        "the node blamed its endpoint for its own shortage:\n{text}"
    );
    assert_eq!(
        metric_at(
            admin,
            "gtd_health_checks_total",
            &["listener=\"t\"", "result=\"error\""]
        ),
        0.0,
        "a check that could not run was counted as the endpoint's error"
    );
}
