//! The access log's lines for TCP connections and UDP flows (`[log] access`, docs/logs.md
//! "Connections and flows"): one per connection at its close and per flow at its end, with the
//! group, endpoint, bytes each way, retries and why it ended — closed by the client, by the
//! endpoint, idled out, cut at the end of the drain, retried after a refusal, refused
//! everywhere, no route; a UDP flow
//! expired and one moved; JSON with `--log-format json`.

use crate::common::*;
use crate::harness::*;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gtd::node::{LogFormat, Node, Options};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// The fields of a text line of a connection or flow, in order.
const FIELDS: [&str; 13] = [
    "timestamp",
    "client",
    "listener",
    "type",
    "cause",
    "group",
    "endpoint",
    "retries",
    "bytes_in",
    "bytes_out",
    "total_ms",
    "continent",
    "country",
];

/// One text line, read by field name.
struct Line(Vec<String>);

impl Line {
    fn get(&self, name: &str) -> &str {
        let i = FIELDS.iter().position(|f| *f == name).expect("a field");
        &self.0[i]
    }

    /// Asserts each (field, value).
    fn has(&self, want: &[(&str, &str)]) {
        for (field, value) in want {
            assert_eq!(self.get(field), *value, "{field} of {:?}", self.0.join(" "));
        }
    }
}

/// Waits until the file at `path` holds `n` lines, and returns them (text).
async fn wait_lines(path: &Path, n: usize) -> Vec<Line> {
    let read = || {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    until(&format!("{n} lines in {}", path.display()), || {
        read().len() >= n
    })
    .await;
    let got = read();
    assert_eq!(got.len(), n, "{got:#?}");
    got.iter()
        .map(|l| {
            let fields: Vec<String> = l.split(' ').map(str::to_owned).collect();
            assert_eq!(fields.len(), FIELDS.len(), "fields of {l:?}");
            Line(fields)
        })
        .collect()
}

/// A node with `listeners`, logging to `DIR/access.log` in `format`.
async fn logged(listeners: &str, format: LogFormat) -> (tempfile::TempDir, PathBuf, Node) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let cfg = write_config(
        dir.path(),
        &format!(
            "[log]\naccess = {:?}\n{listeners}",
            log.display().to_string()
        ),
    );
    let node = Node::start(Options {
        log_format: format,
        ..options(&cfg)
    })
    .await
    .expect("node starts");
    (dir, log, node)
}

/// A tcp listener "t" of one group "g" with `endpoints`, and `extra` settings.
fn tcp_t(extra: &str, endpoints: &[SocketAddr]) -> String {
    let endpoints: Vec<(SocketAddr, &str)> = endpoints.iter().map(|a| (*a, "")).collect();
    tcp_listener(
        free_port(false),
        extra,
        &[group("g", "cn-beijing", 100.0, "", &endpoints)],
    )
}

/// Reads from `s` until end of stream; what was read.
async fn read_to_end(s: &mut TcpStream) -> String {
    let mut text = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut text))
        .await
        .expect("end of stream")
        .unwrap();
    String::from_utf8(text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_closed_by_the_client_is_logged_with_its_bytes_each_way() {
    let (echo, h) = tcp_backend("echo").await;
    let _b = Backends(vec![h]);
    let (_dir, log, node) = logged(&tcp_t("", &[echo]), LogFormat::Text).await;
    let addr = listener_addr(&node, "t").await;

    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"hello").await.unwrap();
    // The client finishes first; the backend echoes, says "bye" and closes.
    s.shutdown().await.unwrap();
    assert_eq!(read_to_end(&mut s).await, "echo\nhellobye");
    drop(s);

    let got = wait_lines(&log, 1).await;
    got[0].has(&[
        ("listener", "t"),
        ("type", "tcp"),
        ("cause", "client_closed"),
        ("group", "g"),
        ("endpoint", &echo.to_string()),
        ("retries", "0"),
        ("bytes_in", "5"),
        ("bytes_out", "13"),
        ("continent", "-"),
    ]);
    assert!(got[0].get("client").starts_with("127.0.0.1:"));
    let ms: f64 = got[0].get("total_ms").parse().unwrap();
    assert!(ms >= 0.0);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_closed_by_the_endpoint_says_so() {
    // Says its name and closes.
    let (brief, h) = socket_backend(|mut s| async move {
        let _ = s.write_all(b"brief\n").await;
    })
    .await;
    let _b = Backends(vec![h]);
    let (_dir, log, node) = logged(&tcp_t("", &[brief]), LogFormat::Text).await;
    let addr = listener_addr(&node, "t").await;

    let mut s = TcpStream::connect(addr).await.unwrap();
    assert_eq!(read_to_end(&mut s).await, "brief\n");
    drop(s);

    let got = wait_lines(&log, 1).await;
    got[0].has(&[
        ("cause", "endpoint_closed"),
        ("endpoint", &brief.to_string()),
        ("bytes_in", "0"),
        ("bytes_out", "6"),
    ]);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_logged_at_its_idle_timeout() {
    let (echo, h) = tcp_backend("echo").await;
    let _b = Backends(vec![h]);
    let (_dir, log, node) = logged(&tcp_t("idle_timeout = \"1s\"", &[echo]), LogFormat::Text).await;
    let addr = listener_addr(&node, "t").await;

    // Reads the name, then sends nothing: the node closes the connection.
    let mut s = TcpStream::connect(addr).await.unwrap();
    assert_eq!(read_to_end(&mut s).await, "echo\n");

    let got = wait_lines(&log, 1).await;
    got[0].has(&[("cause", "idle_timeout"), ("bytes_out", "5")]);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_open_at_the_end_of_the_drain_is_cut_and_logged() {
    let (echo, h) = tcp_backend("echo").await;
    let _b = Backends(vec![h]);
    let (_dir, log, node) =
        logged(&tcp_t("drain_timeout = \"1s\"", &[echo]), LogFormat::Text).await;
    let addr = listener_addr(&node, "t").await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut name = [0_u8; 5];
    s.read_exact(&mut name).await.unwrap();
    // The drain ends with the connection open; its line is written before shutdown returns.
    node.shutdown().await;
    let got = wait_lines(&log, 1).await;
    got[0].has(&[("cause", "drain_timeout"), ("bytes_out", "5")]);
    assert_eq!(read_to_end(&mut s).await, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connect_is_retried_and_counted_then_none_is_left() {
    let (alive, h) = tcp_backend("alive").await;
    let _b = Backends(vec![h]);
    let refusing = Refusing::new();
    let refused = refusing.0;
    // Round robin tries the first endpoint first: it refuses, the retry goes to the second.
    let (_dir, log, node) = logged(&tcp_t("", &[refused, alive]), LogFormat::Text).await;
    let addr = listener_addr(&node, "t").await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.shutdown().await.unwrap();
    assert_eq!(read_to_end(&mut s).await, "alive\nbye");
    let got = wait_lines(&log, 1).await;
    got[0].has(&[
        ("cause", "client_closed"),
        ("endpoint", &alive.to_string()),
        ("retries", "1"),
        ("bytes_out", "9"),
    ]);
    node.shutdown().await;

    // Only the refusing endpoint: the connect fails (and marks it), then there is no route.
    let (_dir, log, node) = logged(&tcp_t("", &[refused]), LogFormat::Text).await;
    let addr = listener_addr(&node, "t").await;
    for _ in 0..2 {
        assert!(tcp_name(addr).await.is_err());
    }
    let got = wait_lines(&log, 2).await;
    got[0].has(&[
        ("cause", "connect_failed"),
        ("group", "g"),
        ("endpoint", &refused.to_string()),
        ("retries", "0"),
        ("bytes_in", "0"),
        ("bytes_out", "0"),
    ]);
    got[1].has(&[
        ("cause", "no_route"),
        ("group", "-"),
        ("endpoint", "-"),
        ("retries", "0"),
    ]);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_udp_flow_is_logged_when_it_expires_with_its_bytes() {
    let (a, h) = udp_backend("bj").await;
    let _b = Backends(vec![h]);
    let listener = listener_on(
        free_port(true),
        "u",
        "udp",
        &["cn-beijing"],
        "idle_timeout = \"1s\"",
        &group("g", "cn-beijing", 100.0, "", &[(a, "")]),
    );
    let (_dir, log, node) = logged(&listener, LogFormat::Text).await;
    let addr = listener_addr(&node, "u").await;

    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut buf = [0_u8; 64];
    for datagram in [&b"ping"[..], b"pong!"] {
        client.send_to(datagram, addr).await.unwrap();
        let (n, _) = tokio::time::timeout(Duration::from_secs(30), client.recv_from(&mut buf))
            .await
            .expect("a reply")
            .unwrap();
        assert_eq!(n, 3 + datagram.len());
    }

    let got = wait_lines(&log, 1).await;
    got[0].has(&[
        ("client", &client.local_addr().unwrap().to_string()),
        ("listener", "u"),
        ("type", "udp"),
        ("cause", "expired"),
        ("group", "g"),
        ("endpoint", &a.to_string()),
        ("retries", "0"),
        ("bytes_in", "9"),
        ("bytes_out", "15"),
    ]);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_udp_flow_whose_endpoint_is_disabled_moves_and_json_says_so() {
    let (a, ha) = udp_backend("one").await;
    let (b, hb) = udp_backend("two").await;
    let _b = Backends(vec![ha, hb]);
    let listener = listener_on(
        free_port(true),
        "u",
        "udp",
        &["cn-beijing"],
        "",
        &group("g", "cn-beijing", 100.0, "", &[(a, ""), (b, "")]),
    );
    let (_dir, log, node) = logged(&listener, LogFormat::Json).await;
    let addr = listener_addr(&node, "u").await;

    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let reply = async |client: &UdpSocket| {
        client.send_to(b"ping", addr).await.unwrap();
        let mut buf = [0_u8; 64];
        let (n, _) = tokio::time::timeout(Duration::from_secs(30), client.recv_from(&mut buf))
            .await
            .expect("a reply")
            .unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let first = reply(&client).await;
    let (name, _) = first.split_once(':').unwrap();
    let (was, other) = if name == "one" {
        (a, "two")
    } else {
        (b, "one")
    };
    let (_, body) = admin(
        &node,
        "POST",
        &format!("/endpoints/u/g/{was}/disable"),
        None,
    );
    assert!(body.contains("\"enabled\": false"), "{body}");
    assert!(reply(&client).await.starts_with(other));

    let path = log.clone();
    until("the moved flow's line", || {
        std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .count()
            >= 1
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    let line: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let keys: Vec<&str> = line
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "timestamp",
            "type",
            "client",
            "listener",
            "cause",
            "group",
            "endpoint",
            "retries",
            "bytes_in",
            "bytes_out",
            "total_ms",
            "continent",
            "country"
        ]
    );
    assert_eq!(line["type"], "udp");
    assert_eq!(line["cause"], "moved");
    assert_eq!(line["endpoint"], was.to_string());
    assert_eq!(line["bytes_in"], 4);
    assert_eq!(line["bytes_out"], first.len());
    assert_eq!(line["retries"], 0);
    assert!(line["total_ms"].is_f64());
    assert_eq!(line["continent"], Value::Null);
    node.shutdown().await;
}
