//! Helpers shared by the integration tests that run nodes on loopback (`node.rs`, `http/`):
//! free ports, configs built from TOML snippets and written to temp dirs, raw socket backends,
//! starting a node in-process, the admin API, metrics, bounded waits, `sim`'s expectation for a
//! config, a test PKI (rcgen), and an authoritative DNS server (hickory-server).

#![allow(dead_code)]

mod backends;
mod config;
mod dns;
mod geoip;

// Not every test binary uses every helper (`config.rs` and `logs.rs` build no snippets).
#[allow(unused_imports)]
pub(crate) use backends::*;
#[allow(unused_imports)]
pub(crate) use config::*;
#[allow(unused_imports)]
pub(crate) use dns::*;
#[allow(unused_imports)]
pub(crate) use geoip::*;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream as StdTcpStream, UdpSocket as StdUdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use gtd::node::{Node, Options};
use gtd::view::{ListenerView, Status};
use serde_json::Value;

/// The repository root.
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// An address on 127.0.0.1 that refuses connections for as long as this lives: its port is
/// bound but never listened on, so no other socket (a backend of a test running beside, an
/// ephemeral port) can take it meanwhile, as one released by [`free_port`] could be.
pub(crate) struct Refusing(
    pub(crate) SocketAddr,
    #[allow(dead_code)] tokio::net::TcpSocket,
);

impl Refusing {
    pub(crate) fn new() -> Refusing {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        Refusing(socket.local_addr().unwrap(), socket)
    }
}

/// A port that is free for TCP and UDP on every address right now, below the ephemeral range
/// (32768 and up on Linux): the nodes' own outgoing connections (checks, relays, from
/// 127.0.0.N) and the clients' take ephemeral ports on the same addresses, and a listener
/// bound later to a port the OS had just handed out and taken back could find it taken by one
/// of them (CI saw `AddrInUse` for 127.0.0.1:32833 beside a test opening 1,000 connections).
/// Each test process walks its own part of 20000..32000, chosen by its pid, so that parallel
/// runs rarely meet; a port in use is skipped. (`_udp`: every port is free for both.)
pub(crate) fn free_port(_udp: bool) -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = std::process::id() % 12 * 1000;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (20000 + (base + n) % 12000) as u16;
        let any = Ipv4Addr::UNSPECIFIED;
        if std::net::TcpListener::bind((any, port)).is_ok()
            && StdUdpSocket::bind((any, port)).is_ok()
        {
            return port;
        }
    }
}

/// A config (catalogue: the shipped one; admin on `admin_port`) with `listeners`.
pub(crate) fn config_text(admin_port: u16, listeners: &str) -> String {
    let catalog = root().join("regions/catalog.toml");
    format!(
        "catalog = {:?}\n[admin]\nbind = \"127.0.0.1:{admin_port}\"\n{listeners}",
        catalog.display().to_string(),
    )
}

/// Writes `dir/config.toml` (admin on a free port) with `listeners`.
pub(crate) fn write_config(dir: &Path, listeners: &str) -> PathBuf {
    let path = dir.join("config.toml");
    std::fs::write(&path, config_text(free_port(false), listeners)).unwrap();
    path
}

/// How the tests start a node: cn-beijing, listeners on 127.0.0.1, admin on a free port.
pub(crate) fn options(config: &Path) -> Options {
    Options {
        config: config.to_owned(),
        regions: None,
        region: "cn-beijing".into(),
        bind: "127.0.0.1".parse().unwrap(),
        admin_bind: Some("127.0.0.1:0".parse().unwrap()),
        source_ip: None,
        log_format: gtd::node::LogFormat::Text,
        fleet: None,
    }
}

/// A child process that is killed and reaped when this goes out of scope, whether the test
/// passed or panicked.
pub(crate) struct Child(pub(crate) std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a node in this process.
pub(crate) async fn start(config: &Path) -> Node {
    Node::start(options(config)).await.expect("node starts")
}

/// Where the node bound listener `name`.
pub(crate) async fn listener_addr(node: &Node, name: &str) -> SocketAddr {
    node.listener_addrs()
        .await
        .into_iter()
        .find(|(n, _)| n == name)
        .expect("listener bound")
        .1
}

/// Plain HTTP/1.0 against the admin server; returns (status, body). Blocking, briefly.
pub(crate) fn admin(node: &Node, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    admin_at(node.admin_addr(), method, path, token)
}

/// [`admin`] against the admin server at `addr` (a node in another process).
pub(crate) fn admin_at(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    let mut s = StdTcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n{auth}\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The value of a Prometheus series (summed over lines that contain every fragment).
pub(crate) fn metric(node: &Node, name: &str, fragments: &[&str]) -> f64 {
    metric_at(node.admin_addr(), name, fragments)
}

/// [`metric`] from the admin server at `addr`.
pub(crate) fn metric_at(addr: SocketAddr, name: &str, fragments: &[&str]) -> f64 {
    let (_, body) = admin_at(addr, "GET", "/metrics", None);
    body.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| fragments.iter().all(|f| l.contains(f)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The series lines of `/metrics` (comments left out) that contain every fragment.
pub(crate) fn metric_lines(node: &Node, fragments: &[&str]) -> Vec<String> {
    let (_, body) = admin(node, "GET", "/metrics", None);
    body.lines()
        .filter(|l| !l.starts_with('#') && fragments.iter().all(|f| l.contains(f)))
        .map(str::to_owned)
        .collect()
}

/// `GET /status` of `node`, read into the typed document (docs/status.md).
pub(crate) fn status(node: &Node) -> Status {
    status_at(node.admin_addr())
}

/// [`status`] from the admin server at `addr`.
pub(crate) fn status_at(addr: SocketAddr) -> Status {
    let (code, body) = admin_at(addr, "GET", "/status", None);
    assert_eq!(code, 200, "GET /status: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("/status does not read: {e}\n{body}"))
}

/// The listener `name` of `status` (it must have it).
pub(crate) fn status_listener<'a>(status: &'a Status, name: &str) -> &'a ListenerView {
    status
        .listener(name)
        .unwrap_or_else(|| panic!("no listener {name} in /status"))
}

/// `/status`'s `served` counts of one listener: (group → served, endpoint address → served).
pub(crate) fn served_in_status(
    node: &Node,
    listener: &str,
) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let doc = status(node);
    let l = status_listener(&doc, listener);
    let (mut groups, mut endpoints) = (BTreeMap::new(), BTreeMap::new());
    for g in &l.groups {
        groups.insert(g.name.clone(), g.served.expect("served in /status"));
        for e in &g.endpoints {
            endpoints.insert(e.address.clone(), e.served);
        }
    }
    (groups, endpoints)
}

/// Waits (bounded: 60 s) until `cond` holds.
pub(crate) async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `sim --format json --region cn-beijing` on `config`: (group → share, endpoint → share).
pub(crate) fn sim_expectation(
    config: &Path,
    listener: &str,
) -> (BTreeMap<String, f64>, BTreeMap<String, f64>) {
    let out = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args([
            "--config",
            config.to_str().unwrap(),
            "--region",
            "cn-beijing",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let l = doc["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["listener"] == listener)
        .unwrap();
    let mut groups = BTreeMap::new();
    let mut endpoints = BTreeMap::new();
    for g in l["regions"][0]["groups"].as_array().unwrap() {
        groups.insert(
            g["name"].as_str().unwrap().to_owned(),
            g["share"].as_f64().unwrap(),
        );
        for e in g["endpoints"].as_array().unwrap() {
            endpoints.insert(
                e["address"].as_str().unwrap().to_owned(),
                e["share"].as_f64().unwrap(),
            );
        }
    }
    (groups, endpoints)
}

/// A test PKI: one CA; server and client certificates signed by it.
pub(crate) struct Pki {
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Pki {
    pub(crate) fn new() -> Pki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "gtd test CA");
        let ca = rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap())
            .unwrap();
        Pki { ca }
    }

    /// (certificate PEM, key PEM) for these DNS names; `client` for client authentication.
    pub(crate) fn issue(&self, names: &[&str], client: bool) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(
            names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
        )
        .unwrap();
        params.extended_key_usages = vec![if client {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        }];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    pub(crate) fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    pub(crate) fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        roots
    }
}
