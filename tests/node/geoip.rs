//! `[geoip]` through a real node: clients bound to 127.x source addresses that a database
//! written by the test places in different countries — the client-location series (a listed
//! country, `other`, the continent, `unknown` for an address not in the database), HTTP
//! requests counted per keep-alive connection's place, `priority_by = "client-location"`
//! sending two places to two groups with the node's ranking for the others, a Country database
//! (no coordinates) falling back, and a reload with a corrupt database keeping the old one.

use crate::common::*;
use crate::harness::*;

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Connects to `addr` from source address `from`.
async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let ip: IpAddr = from.parse().unwrap();
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::new(ip, 0)).unwrap();
    s.connect(addr).await.unwrap()
}

/// The backend's name as seen by a client connecting from `from`.
async fn name_from(from: &str, addr: SocketAddr) -> String {
    let mut s = connect_from(from, addr).await;
    let mut name = Vec::new();
    let mut byte = [0_u8; 1];
    while s.read(&mut byte).await.unwrap() == 1 && byte[0] != b'\n' {
        name.push(byte[0]);
    }
    String::from_utf8(name).unwrap()
}

fn geoip_table(db: &Path, countries: &str) -> String {
    format!(
        "[geoip]\ndatabase = {:?}\ncountries = {countries}\n",
        db.display().to_string()
    )
}

/// `gtd_client_connections_total` of listener `l` for one (continent, country).
fn clients(node: &gtd::node::Node, metric: &str, l: &str, continent: &str, country: &str) -> f64 {
    let labels = format!("{{listener=\"{l}\",continent=\"{continent}\",country=\"{country}\"}}");
    metric_lines(node, &[metric, &labels])
        .iter()
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_clients_are_counted_by_continent_and_listed_country() {
    let (a, h) = tcp_backend("bj").await;
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let mut nets = places();
    nets.push(Net {
        net: "127.4.0.0/16",
        continent: "AS",
        country: "JP",
        at: Some((35.68, 139.69)),
    });
    let db = write_mmdb(dir.path(), "city.mmdb", "GeoLite2-City", &nets);
    let port = free_port(false);
    let text = geoip_table(&db, r#"["CN", "US"]"#)
        + &tcp_listener(
            port,
            "",
            &[group("beijing", "cn-beijing", 100.0, "", &[(a, 1)])],
        );
    let cfg = write_config(dir.path(), &text);
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    for from in [
        "127.1.0.5",
        "127.1.9.9",
        "127.2.0.5",
        "127.4.0.5",
        "127.3.0.5",
        "127.0.0.1",
    ] {
        assert_eq!(name_from(from, addr).await, "bj");
    }
    let m = "gtd_client_connections_total";
    let want = [
        ("AS", "CN", 2.0),
        ("NA", "US", 1.0),
        ("AS", "other", 1.0),
        ("EU", "other", 1.0),
        ("unknown", "unknown", 1.0),
    ];
    until("every connection counted", || {
        clients(&node, m, "t", "unknown", "unknown") == 1.0
    })
    .await;
    for (continent, country, n) in want {
        assert_eq!(
            clients(&node, m, "t", continent, country),
            n,
            "{continent}/{country}"
        );
    }
    // Bounded: continents x (listed + other) + (unknown, unknown); never a series per country.
    let series = metric_lines(&node, &[m, "listener=\"t\""]);
    assert_eq!(series.len(), 8 * 3 + 1, "{series:#?}");
    assert!(
        series
            .iter()
            .all(|l| !l.contains("\"JP\"") && !l.contains("\"DE\""))
    );
    // A TCP listener has no requests.
    assert!(metric_lines(&node, &["gtd_client_requests_total"]).is_empty());
    node.shutdown().await;
}

/// An HTTP/1.1 backend answering every request on a connection with `ok`.
async fn http_backend() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    socket_backend(|mut s| async move {
        let mut buf = Vec::new();
        let mut chunk = [0_u8; 4096];
        loop {
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            buf.drain(..end);
            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
            if s.write_all(answer).await.is_err() {
                return;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_requests_count_under_their_connections_place() {
    let (a, h) = http_backend().await;
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let db = write_mmdb(dir.path(), "city.mmdb", "GeoLite2-City", &places());
    let log = dir.path().join("access.log");
    let text = geoip_table(&db, r#"["US"]"#)
        + &format!("[log]\naccess = {:?}\n", log.display().to_string())
        + &listener(
            "web",
            "http",
            "",
            &group("beijing", "cn-beijing", 100.0, "", &[(a, 1)]),
        );
    let cfg = write_config(dir.path(), &text);
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    // Three requests on one keep-alive connection from Virginia.
    let mut s = connect_from("127.2.3.4", addr).await;
    for _ in 0..3 {
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        let mut chunk = [0_u8; 1024];
        while !got.ends_with(b"ok") {
            let n = s.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&chunk[..n]);
        }
        assert!(
            got.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&got)
        );
    }
    until("three requests counted", || {
        clients(&node, "gtd_client_requests_total", "web", "NA", "US") == 3.0
    })
    .await;
    assert_eq!(
        clients(&node, "gtd_client_connections_total", "web", "NA", "US"),
        1.0,
        "one client connection, however many requests"
    );
    // Each access log line ends with the client's continent and country.
    until("three access log lines", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.lines().count() == 3)
    })
    .await;
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        assert!(line.starts_with(|c: char| c.is_ascii_digit()), "{line}");
        assert!(line.ends_with(" NA US"), "{line}");
    }
    drop(s);
    node.shutdown().await;
}

fn two_regions(port: u16, bj: SocketAddr, us: SocketAddr) -> String {
    tcp_listener(
        port,
        "priority_by = \"client-location\"",
        &[
            group("beijing", "cn-beijing", 100.0, "", &[(bj, 1)]),
            group("virginia", "us-east-1", 100.0, "", &[(us, 1)]),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_location_priority_sends_each_place_to_its_nearest_group() {
    let (bj, h1) = tcp_backend("bj").await;
    let (us, h2) = tcp_backend("us").await;
    let _b = Backends(vec![h1, h2]);
    let dir = tempfile::tempdir().unwrap();
    let mut nets = places();
    nets.push(Net {
        net: "127.5.0.0/16",
        continent: "EU",
        country: "DE",
        at: Some(FRANKFURT),
    });
    let db = write_mmdb(dir.path(), "city.mmdb", "GeoLite2-City", &nets);
    let port = free_port(false);
    let text = geoip_table(&db, "[]") + &two_regions(port, bj, us);
    let cfg = write_config(dir.path(), &text);
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    for _ in 0..20 {
        // Each place's nearest group takes 100 % (ratio 100 first).
        assert_eq!(name_from("127.1.0.7", addr).await, "bj");
        assert_eq!(name_from("127.2.0.7", addr).await, "us");
        // Frankfurt: 6 500 km to Virginia, 7 800 km to Beijing.
        assert_eq!(name_from("127.5.0.7", addr).await, "us");
        // No coordinates (127.3: DE without a location) or not in the database (127.0.0.1):
        // the node's own ranking, which from cn-beijing puts Beijing first.
        assert_eq!(name_from("127.3.0.7", addr).await, "bj");
        assert_eq!(name_from("127.0.0.1", addr).await, "bj");
    }
    // Failover runs on the client's order too: Virginia's endpoint disabled, Virginia's
    // clients go to Beijing.
    let (code, _) = admin(
        &node,
        "POST",
        &format!("/endpoints/t/virginia/{us}/disable"),
        None,
    );
    assert_eq!(code, 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while name_from("127.2.0.8", addr).await != "bj" {
        assert!(std::time::Instant::now() < deadline, "no failover");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(name_from("127.1.0.8", addr).await, "bj");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_country_database_falls_back_to_the_nodes_ranking() {
    let (bj, h1) = tcp_backend("bj").await;
    let (us, h2) = tcp_backend("us").await;
    let _b = Backends(vec![h1, h2]);
    let dir = tempfile::tempdir().unwrap();
    // The same places, but as a Country database: no coordinates anywhere.
    let nets: Vec<Net> = places()
        .into_iter()
        .map(|n| Net { at: None, ..n })
        .collect();
    let db = write_mmdb(dir.path(), "country.mmdb", "GeoLite2-Country", &nets);
    let port = free_port(false);
    let text = geoip_table(&db, r#"["US"]"#) + &two_regions(port, bj, us);
    let cfg = write_config(dir.path(), &text);
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    for _ in 0..10 {
        assert_eq!(name_from("127.2.0.7", addr).await, "bj");
    }
    // The labels still come from the Country database.
    until("counted", || {
        clients(&node, "gtd_client_connections_total", "t", "NA", "US") == 10.0
    })
    .await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_rereads_the_database_and_a_corrupt_one_keeps_the_old() {
    let (bj, h1) = tcp_backend("bj").await;
    let (us, h2) = tcp_backend("us").await;
    let _b = Backends(vec![h1, h2]);
    let dir = tempfile::tempdir().unwrap();
    let db = write_mmdb(dir.path(), "city.mmdb", "GeoLite2-City", &places());
    let port = free_port(false);
    let text = geoip_table(&db, r#"["CN", "US"]"#) + &two_regions(port, bj, us);
    let cfg = write_config(dir.path(), &text);
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    assert_eq!(name_from("127.2.0.1", addr).await, "us");

    // A truncated file: the reload is refused, naming the key's position, and the old
    // database keeps placing clients.
    let good = std::fs::read(&db).unwrap();
    std::fs::write(&db, &good[..good.len() / 2]).unwrap();
    let e = node.reload().await.unwrap_err().to_string();
    let line = text
        .lines()
        .position(|l| l.starts_with("database"))
        .unwrap()
        + 4;
    assert!(
        e.contains(&format!("config.toml:{line}:12: geoip: database file")),
        "{e}"
    );
    assert_eq!(name_from("127.2.0.2", addr).await, "us");
    let (_, status) = admin(&node, "GET", "/metrics", None);
    assert!(
        status.contains("gtd_config_reloads_total{result=\"error\"} 1"),
        "{status}"
    );

    // A missing file: the same.
    std::fs::remove_file(&db).unwrap();
    let e = node.reload().await.unwrap_err().to_string();
    assert!(
        e.contains("database file") && e.contains("No such file"),
        "{e}"
    );
    assert_eq!(name_from("127.2.0.3", addr).await, "us");

    // A new database moves 127.2/16 to Beijing: the reload re-reads it.
    let moved = vec![Net {
        net: "127.2.0.0/16",
        continent: "AS",
        country: "CN",
        at: Some(BEIJING),
    }];
    write_mmdb(dir.path(), "city.mmdb", "GeoLite2-City", &moved);
    node.reload().await.expect("good database reloads");
    assert_eq!(name_from("127.2.0.4", addr).await, "bj");
    until("counted under the new place", || {
        clients(&node, "gtd_client_connections_total", "t", "AS", "CN") == 1.0
    })
    .await;
    node.shutdown().await;
}
