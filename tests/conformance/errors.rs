//! `gtd fleet` shows each node's endpoints with errors in the last minute, from its registry
//! entry, and errors alone rewrite the entry at most once every 10 s (docs/performance.md):
//! a real etcd, a real node whose one endpoint refuses every connection.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::etcd::*;
use crate::fleet::*;
use crate::registry::store_revision;

/// One TCP listener on Beijing's node, its one endpoint on a port nothing listens on; never
/// marked (`max_fails = 0`) and no checks, so that its group's health never changes and only
/// the errors move the entry.
const REFUSING: &str = r#"
catalog = "regions/catalog.toml"
[admin]
bind = "127.0.0.1:1"

[[listener]]
name = "t"
protocol = "tcp"
port = 1001
regions = ["cn-beijing"]
tries = 1

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 100
    [[listener.group.endpoint]]
    address = "127.0.0.1:2001"
    max_fails = 0
"#;

/// `gtd fleet`'s table.
fn fleet_table(cluster: &Cluster) -> String {
    let out = gtd_as(cluster, As::Pusher, &["fleet"]);
    assert!(
        out.status.success(),
        "gtd fleet: {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One client connection, closed by the node once its attempt failed.
fn connect(addr: SocketAddr) {
    if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = s.read_to_end(&mut Vec::new());
    }
}

#[test]
fn gtd_fleet_shows_a_nodes_errors_written_at_most_every_ten_seconds() {
    let cluster = Cluster::start();
    let cfg = Cfg::from_text(REFUSING);
    let fleet = start_fleet(&cluster, &cfg, &[]);
    let node = fleet.node("cn-beijing");
    let addr = SocketAddr::new(node.ip, cfg.protocol("t").1);
    let endpoint = node.status().listeners[0].groups[0].endpoints[0]
        .address
        .clone();
    let at = format!("t/beijing/{endpoint}");
    assert!(!fleet_table(&cluster).contains(&at), "no errors yet");

    for _ in 0..3 {
        connect(addr);
    }
    wait("the node's errors in gtd fleet", || {
        fleet_table(&cluster).contains(&format!("{at} 1+"))
    });
    let v = fleet_json(&cluster);
    let errors = &v["nodes"][0]["errors"];
    assert_eq!(
        errors,
        &serde_json::json!([{"listener": "t", "group": "beijing", "endpoint": endpoint, "at_least": 1}])
    );
    // Errors keep coming for 25 s: the count grows through its buckets, and the entry is
    // rewritten for it at most once every 10 s.
    let before = store_revision(&cluster);
    let until = Instant::now() + Duration::from_secs(25);
    while Instant::now() < until {
        connect(addr);
        std::thread::sleep(Duration::from_millis(50));
    }
    let writes = store_revision(&cluster) - before;
    println!("registry writes in 25 s of errors: {writes}");
    assert!(
        writes <= 3,
        "{writes} registry writes in 25 s of errors (at most one every 10 s)"
    );
    wait("the node's errors at 100 or more", || {
        fleet_table(&cluster).contains(&format!("{at} 100+"))
    });
    let table = fleet_table(&cluster);
    assert!(
        table.contains(
            "errors in the last minute (5xx, timeouts, connect failures) on 1 endpoint: "
        ),
        "{table}"
    );
    node.assert_running();
}
