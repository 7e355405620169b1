//! The HTTP access log (`[log] access`, docs/design.md §7 "Access log"): one line per request
//! with the fields the request loop decided — a retried request, gtd's own 502 and 503, HTTP/2
//! and HTTPS — the file opened again by a reload after logrotate moved it, the setting changed
//! by reloads, and `gtd run --log-format json` writing every line, the access lines' included,
//! as JSON.

use crate::common::*;
use crate::harness::*;
use crate::tls::{get_over, tls_connect};

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use http::Request;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// The fields of a text line, in order.
const FIELDS: [&str; 16] = [
    "timestamp",
    "client",
    "listener",
    "method",
    "path",
    "protocol",
    "status",
    "group",
    "endpoint",
    "retries",
    "bytes_in",
    "bytes_out",
    "total_ms",
    "upstream_ms",
    "continent",
    "country",
];

/// One text access log line, read by field name.
struct Line(Vec<String>);

impl Line {
    fn parse(text: &str) -> Line {
        let fields: Vec<String> = text.split(' ').map(str::to_owned).collect();
        assert_eq!(fields.len(), FIELDS.len(), "fields of {text:?}");
        Line(fields)
    }

    fn get(&self, name: &str) -> &str {
        let i = FIELDS.iter().position(|f| *f == name).expect("a field");
        &self.0[i]
    }

    fn ms(&self, name: &str) -> f64 {
        self.get(name)
            .parse()
            .unwrap_or_else(|_| panic!("{name} {:?}", self.get(name)))
    }
}

/// The lines of the access log file at `path` (none while it does not exist).
fn lines(path: &Path) -> Vec<Line> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(Line::parse)
        .collect()
}

/// Waits until the file at `path` holds `n` lines, and returns them.
async fn wait_lines(path: &Path, n: usize) -> Vec<Line> {
    until(&format!("{n} lines in {}", path.display()), || {
        lines(path).len() >= n
    })
    .await;
    let got = lines(path);
    assert_eq!(got.len(), n, "{}", std::fs::read_to_string(path).unwrap());
    got
}

/// `[log] access = FILE` (TOML), to put before the listeners.
fn access_to(file: &Path) -> String {
    format!("[log]\naccess = {:?}\n", file.display().to_string())
}

/// A port nothing listens on: an endpoint there refuses every connection.
/// A node with one HTTP listener `web` of `groups`, logging to `DIR/access.log`: (the temp
/// dir, the log's path, the node, the listener's address).
async fn web_logged(groups: &str) -> (tempfile::TempDir, PathBuf, gtd::node::Node, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let cfg = write_config(
        dir.path(),
        &format!("{}{}", access_to(&log), listener("web", "http", "", groups)),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    (dir, log, node, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_request_is_logged_with_its_group_endpoint_bytes_and_times() {
    let served = Backend::start("two", 200).await;
    let refusing = Refusing::new();
    let dead = refusing.0;
    // Round robin tries the first endpoint first: it refuses, the retry goes to the second.
    let (_dir, log, node, addr) = web_logged(&group(
        "g",
        "cn-beijing",
        100.0,
        "",
        &[(dead, ""), (served.addr, "")],
    ))
    .await;
    let (status, _, body) = send(
        &client(),
        "POST",
        &format!("http://{addr}/sink?token=secret"),
        &[],
        full("hello"),
    )
    .await;
    assert_eq!((status, body.as_str()), (200, "two 5"));

    let got = wait_lines(&log, 1).await;
    let line = &got[0];
    for (field, want) in [
        ("listener", "web"),
        ("method", "POST"),
        // The query is left out: it carries tokens.
        ("path", "/sink"),
        ("protocol", "HTTP/1.1"),
        ("status", "200"),
        ("group", "g"),
        ("endpoint", &served.addr.to_string()),
        ("retries", "1"),
        ("bytes_in", "5"),
        ("bytes_out", "5"),
    ] {
        assert_eq!(line.get(field), want, "{field}");
    }
    let time = line.get("timestamp");
    assert!(
        time.len() == 24 && time.as_bytes()[10] == b'T' && time.ends_with('Z'),
        "{time}"
    );
    assert!(line.get("client").starts_with("127.0.0.1:"));
    assert!(line.ms("total_ms") >= line.ms("upstream_ms"));
    // Nothing was dropped, and the counter says so once the log is on.
    assert_eq!(
        metric_lines(&node, &["gtd_access_log_dropped_total"]),
        [
            "gtd_access_log_dropped_total{reason=\"queue_full\"} 0",
            "gtd_access_log_dropped_total{reason=\"write_error\"} 0"
        ]
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gtds_own_502_and_503_have_dashes_where_nothing_applies() {
    let refusing = Refusing::new();
    let dead = refusing.0;
    let (_dir, log, node, addr) =
        web_logged(&group("g", "cn-beijing", 100.0, "", &[(dead, "")])).await;
    let c = client();
    // The only endpoint refuses: 502, and the failure takes it out (max_fails = 1)...
    assert_eq!(get(&c, &format!("http://{addr}/first"), &[]).await.0, 502);
    wait_lines(&log, 1).await;
    // ...so the next request has no route: 503.
    assert_eq!(get(&c, &format!("http://{addr}/second"), &[]).await.0, 503);
    let got = wait_lines(&log, 2).await;

    let bad_gateway = &got[0];
    assert_eq!(bad_gateway.get("path"), "/first");
    assert_eq!(bad_gateway.get("status"), "502");
    // The endpoint whose failure gtd answers for; it never sent a response head.
    assert_eq!(bad_gateway.get("group"), "g");
    assert_eq!(bad_gateway.get("endpoint"), dead.to_string());
    assert_eq!(bad_gateway.get("upstream_ms"), "-");
    let no_route = &got[1];
    assert_eq!(no_route.get("path"), "/second");
    assert_eq!(no_route.get("status"), "503");
    for field in ["group", "endpoint", "upstream_ms"] {
        assert_eq!(no_route.get(field), "-", "{field}");
    }
    assert_eq!(no_route.get("retries"), "0");
    assert_eq!(no_route.get("bytes_in"), "0");
    // gtd's own answer's body.
    assert_eq!(
        no_route.get("bytes_out"),
        "no healthy endpoint can take this request\n"
            .len()
            .to_string()
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_and_https_requests_are_logged() {
    let b = Backend::start("one", 200).await;
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = pki.issue(&["site.test"], false);
    std::fs::write(dir.path().join("site.pem"), cert).unwrap();
    std::fs::write(dir.path().join("site.key"), key).unwrap();
    let log = dir.path().join("access.log");
    let groups = group("g", "cn-beijing", 100.0, "", &[(b.addr, "")]);
    let tls = "tls = { certs = [{ cert = \"site.pem\", key = \"site.key\" }] }";
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}{}{}",
            access_to(&log),
            listener("plain", "http", "", &groups),
            listener("secure", "https", tls, &groups)
        ),
    );
    let node = start(&cfg).await;
    let plain = listener_addr(&node, "plain").await;
    let secure = listener_addr(&node, "secure").await;

    let h2c: Client<HttpConnector, TestBody> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let resp = h2c
        .request(
            Request::get(format!("http://{plain}/h2c"))
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    drop(resp);
    for (alpn, h2, path) in [
        (&b"h2"[..], true, "/tls-h2"),
        (b"http/1.1", false, "/tls-h1"),
    ] {
        let stream = tls_connect(secure, &pki, "site.test", &[alpn]).await;
        let (status, backend, _) = get_over(stream, h2, "site.test", path).await;
        assert_eq!((status, backend.as_str()), (200, "one"), "{path}");
    }

    let got = wait_lines(&log, 3).await;
    let seen: BTreeSet<(String, String, String, String)> = got
        .iter()
        .map(|l| {
            assert_eq!(l.get("endpoint"), b.addr.to_string());
            (
                l.get("listener").to_owned(),
                l.get("path").to_owned(),
                l.get("protocol").to_owned(),
                l.get("status").to_owned(),
            )
        })
        .collect();
    let want: BTreeSet<(String, String, String, String)> = [
        ("plain", "/h2c", "HTTP/2.0"),
        ("secure", "/tls-h2", "HTTP/2.0"),
        ("secure", "/tls-h1", "HTTP/1.1"),
    ]
    .iter()
    .map(|(l, p, v)| ((*l).into(), (*p).into(), (*v).into(), "200".into()))
    .collect();
    assert_eq!(seen, want);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_reopens_the_file_after_logrotate_and_follows_the_setting() {
    let b = Backend::start("one", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let rotated = dir.path().join("access.log.1");
    let web = listener(
        "web",
        "http",
        "",
        &group("g", "cn-beijing", 100.0, "", &[(b.addr, "")]),
    );
    // Off at start.
    let cfg = write_config(dir.path(), &web);
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    let hit = |path: &'static str| {
        let c = c.clone();
        async move {
            let (status, _, _) = get(&c, &format!("http://{addr}{path}"), &[]).await;
            assert_eq!(status, 200, "{path}");
        }
    };
    let text = std::fs::read_to_string(&cfg).unwrap();
    let set = |access: &str| {
        let t = text.replacen("[[listener]]", &format!("{access}[[listener]]"), 1);
        std::fs::write(&cfg, t).unwrap();
    };
    hit("/off").await;

    // A reload turns it on.
    set(&access_to(&log));
    node.reload().await.unwrap();
    hit("/on").await;
    assert_eq!(wait_lines(&log, 1).await[0].get("path"), "/on");

    // logrotate moves the file, then SIGHUPs: the next line goes to a new file.
    std::fs::rename(&log, &rotated).unwrap();
    node.reload().await.unwrap();
    hit("/rotated").await;
    assert_eq!(wait_lines(&log, 1).await[0].get("path"), "/rotated");

    // Off again: that request has no line; on again, the next one lands after the last.
    set("[log]\naccess = \"off\"\n");
    node.reload().await.unwrap();
    hit("/off-again").await;
    set(&access_to(&log));
    node.reload().await.unwrap();
    hit("/back").await;
    let paths: Vec<String> = wait_lines(&log, 2)
        .await
        .iter()
        .map(|l| l.get("path").to_owned())
        .collect();
    assert_eq!(paths, ["/rotated", "/back"]);
    let before: Vec<String> = lines(&rotated)
        .iter()
        .map(|l| l.get("path").to_owned())
        .collect();
    assert_eq!(before, ["/on"]);
    node.shutdown().await;
}

/// One HTTP/1.0 request to `addr` (the connection closes after it); the status.
fn request(addr: SocketAddr, path: &str) -> u16 {
    let mut s = StdTcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: json\r\n\r\n").unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_format_json_writes_every_line_as_a_json_object() {
    let b = Backend::start("one", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let (port, down_port) = (free_port(false), free_port(false));
    let refusing = Refusing::new();
    let cfg = write_config(
        dir.path(),
        &format!(
            "[log]\naccess = \"stderr\"\n{}{}",
            listener_on(
                port,
                "web",
                "http",
                &["cn-beijing"],
                "drain_timeout = \"5s\"",
                &group("g", "cn-beijing", 100.0, "", &[(b.addr, "")]),
            ),
            listener_on(
                down_port,
                "down",
                "http",
                &["cn-beijing"],
                "drain_timeout = \"5s\"",
                &group("g", "cn-beijing", 100.0, "", &[(refusing.0, "")]),
            )
        ),
    );
    let mut child = Child(
        Command::new(env!("CARGO_BIN_EXE_gtd"))
            .args(["run", "--config", cfg.to_str().unwrap()])
            .args(["--region", "cn-beijing", "--bind", "127.0.0.1"])
            .args(["--log-format", "json"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stderr = child.0.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(60);
    while StdTcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "gtd did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let down = SocketAddr::from(([127, 0, 0, 1], down_port));
    let statuses = tokio::task::spawn_blocking(move || {
        // The refusing endpoint is taken out by its failure: 502, then no route.
        [
            request(addr, "/json?x=1"),
            request(down, "/a"),
            request(down, "/b"),
        ]
    })
    .await
    .unwrap();
    assert_eq!(statuses, [200, 502, 503]);
    // SIGTERM: the drain ends at once (no connection is open) and the line is written first.
    let pid = child.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "gtd did not exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = reader.join().unwrap();

    let objects: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let started = objects
        .iter()
        .find(|o| o["message"] == "node started")
        .unwrap_or_else(|| panic!("no start line in\n{text}"));
    assert_eq!(started["level"], "INFO");
    assert_eq!(started["target"], "gtd_node");
    assert_eq!(started["region"], "cn-beijing");
    // It names the config it loaded (a fleet node: `revision N (etcd)`).
    assert_eq!(started["config"], cfg.display().to_string());
    assert!(started["timestamp"].as_str().unwrap().ends_with('Z'));
    assert!(objects.iter().any(|o| o["message"] == "stopping"), "{text}");

    let access: Vec<&Value> = objects.iter().filter(|o| o["type"] == "access").collect();
    assert_eq!(access.len(), 3, "{text}");
    let line = access
        .iter()
        .find(|o| o["listener"] == "web")
        .unwrap()
        .as_object()
        .unwrap();
    // The text line's fields, in its order, with "type" after the timestamp.
    let keys: Vec<&str> = line.keys().map(String::as_str).collect();
    let mut want = vec![FIELDS[0], "type"];
    want.extend(&FIELDS[1..]);
    assert_eq!(keys, want);
    assert_eq!(line["listener"], "web");
    assert_eq!(line["method"], "GET");
    assert_eq!(line["path"], "/json");
    assert_eq!(line["protocol"], "HTTP/1.0");
    assert_eq!(line["status"], 200);
    assert_eq!(line["group"], "g");
    assert_eq!(line["endpoint"], b.addr.to_string());
    assert_eq!(line["retries"], 0);
    assert_eq!(line["bytes_in"], 0);
    assert_eq!(line["bytes_out"], 3);
    assert!(line["total_ms"].as_f64().unwrap() >= line["upstream_ms"].as_f64().unwrap());
    // What does not apply is null.
    let no_route = access.iter().find(|o| o["path"] == "/b").unwrap();
    assert_eq!(no_route["status"], 503);
    for key in ["group", "endpoint", "upstream_ms", "continent", "country"] {
        assert!(no_route[key].is_null(), "{key} in {no_route}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_before_the_answer_is_logged_without_a_status() {
    // An endpoint that reads the request, says so, and never answers.
    let (asked, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let (silent, task) = socket_backend(move |mut s| {
        let asked = asked.clone();
        async move {
            let head = read_head(&mut s).await;
            let _ = asked.send(head);
            std::future::pending::<()>().await;
        }
    })
    .await;
    let (_dir, log, node, addr) =
        web_logged(&group("g", "cn-beijing", 100.0, "", &[(silent, "")])).await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut s, b"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let head = tokio::time::timeout(Duration::from_secs(60), heard.recv())
        .await
        .expect("the request reached the endpoint")
        .unwrap();
    assert!(head.starts_with("GET /wait "), "{head}");
    drop(s);

    let got = wait_lines(&log, 1).await;
    let line = &got[0];
    assert_eq!(line.get("path"), "/wait");
    assert_eq!(line.get("status"), "-");
    assert_eq!(line.get("endpoint"), silent.to_string());
    assert_eq!(line.get("upstream_ms"), "-");
    assert_eq!(line.get("bytes_out"), "0");
    node.shutdown().await;
    task.abort();
}
