//! gtd's deterministic balancers against the real nginx.
//!
//! One nginx process (`daemon off; master_process off`, private prefix in a temp dir, loopback
//! ports chosen by the OS) serves N backends that answer with their own port, and a front
//! server proxying to four upstreams: `hash $http_x_key`, `hash "k:$http_x_key" consistent`,
//! `ip_hash` (client addresses presented through the realip module's `X-Real-IP`) and a plain
//! weighted rotation. Every server list mixes weights and has a `down` server, written as
//! `127.0.0.1:PORT` exactly as gtd's endpoint address text (nginx derives ketama points from
//! that text). Thousands of keys/clients go through nginx with a plain HTTP/1.0 client and
//! every answer is compared with gtd's pick for the same server list.
//!
//! nginx is required: set `GTD_NGINX` to its path, or install Debian's `nginx` package
//! (`/usr/sbin/nginx`). The test fails, rather than skips, when it is missing.

mod balance_common;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use balance_common::{ep, group, key};
use gtd::balance::{GroupBalancer, Rng, SplitMix64, StaticRequest};
use gtd::config::{Balance, Endpoint, KeyPart, Protocol};

fn nginx_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("GTD_NGINX") {
        return PathBuf::from(p);
    }
    let default = Path::new("/usr/sbin/nginx");
    if default.exists() {
        return default.to_path_buf();
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("nginx");
            if candidate.exists() {
                return candidate;
            }
        }
    }
    panic!(
        "nginx not found (looked at $GTD_NGINX, /usr/sbin/nginx and $PATH): this test compares \
         gtd's balancers with the real nginx; install Debian's `nginx` package \
         (apt-get install nginx) or set GTD_NGINX"
    );
}

/// Distinct free loopback ports chosen by the OS (all bound at once, then released).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind loopback"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// A running nginx, stopped (killed and reaped) through its own handle when dropped.
struct Nginx {
    child: Child,
    dir: tempfile::TempDir,
}

impl Nginx {
    fn start(conf: &str, front: u16) -> Nginx {
        let bin = nginx_binary();
        let version = Command::new(&bin).arg("-V").output().expect("run nginx -V");
        let build = String::from_utf8_lossy(&version.stderr);
        assert!(
            build.contains("http_realip_module"),
            "{} lacks the realip module (needed to present many client addresses to ip_hash): {build}",
            bin.display()
        );
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("nginx.conf"),
            conf.replace("DIR", &dir.path().display().to_string()),
        )
        .expect("write nginx.conf");
        let child = Command::new(&bin)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let mut nginx = Nginx { child, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if TcpStream::connect(("127.0.0.1", front)).is_ok() {
                return nginx;
            }
            if let Some(status) = nginx.child.try_wait().expect("poll nginx") {
                let mut stderr = String::new();
                if let Some(mut e) = nginx.child.stderr.take() {
                    let _ = e.read_to_string(&mut stderr);
                }
                let log =
                    std::fs::read_to_string(nginx.dir.path().join("error.log")).unwrap_or_default();
                panic!("nginx exited with {status}: {stderr}\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "nginx did not open port {front} within 20 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.0 request through the front server; returns the port of the backend that answered.
fn backend_for(front: u16, path: &str, headers: &[(&str, &str)]) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", front)).expect("connect to nginx");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("GET {path} HTTP/1.0\r\nHost: gtd-test\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read response");
    let (head, body) = resp
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("bad response {resp:?}"));
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "nginx answered {head:?} for {path} {headers:?}"
    );
    body.trim()
        .parse()
        .unwrap_or_else(|_| panic!("body {body:?} is not a port"))
}

/// A server list: (backend index, weight, down).
type Servers = [(usize, u32, bool)];

fn upstream(name: &str, directive: &str, servers: &Servers, ports: &[u16]) -> String {
    let mut s = format!("    upstream {name} {{\n        {directive}\n");
    for &(i, w, down) in servers {
        s.push_str(&format!(
            "        server 127.0.0.1:{} weight={w}{};\n",
            ports[i],
            if down { " down" } else { "" }
        ));
    }
    s.push_str("    }\n");
    s
}

fn endpoints(servers: &Servers, ports: &[u16]) -> Vec<Endpoint> {
    servers
        .iter()
        .map(|&(i, w, down)| {
            let mut e = ep(ports[i], w);
            e.down = down;
            e
        })
        .collect()
}

const HASH: &Servers = &[
    (0, 1, false),
    (1, 3, false),
    (2, 2, false),
    (3, 1, true),
    (4, 5, false),
    (5, 1, false),
    (6, 2, false),
];
const CHASH: &Servers = &[
    (0, 2, false),
    (1, 1, false),
    (2, 1, false),
    (3, 3, false),
    (4, 1, true),
    (5, 1, false),
    (6, 4, false),
];
const IPHASH: &Servers = &[
    (0, 1, false),
    (1, 2, false),
    (2, 1, false),
    (3, 1, true),
    (4, 3, false),
    (5, 1, false),
];
const ROTATION: &Servers = &[
    (0, 5, false),
    (1, 1, false),
    (2, 1, false),
    (3, 3, true),
    (4, 2, false),
    (5, 4, false),
];

/// Hash keys of many shapes: short, long, path-like, numeric, punctuation.
fn keys(n: usize) -> Vec<String> {
    let mut rng = SplitMix64::new(0x006e_6769_6e78);
    let alphabet: &[u8] =
        b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=?&%";
    (0..n)
        .map(|i| match i % 4 {
            0 => format!("key-{i}"),
            1 => format!("/img/{}/{}.png", i % 97, i),
            2 => i.to_string(),
            _ => {
                let len = 1 + rng.below(48) as usize;
                (0..len)
                    .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize] as char)
                    .collect()
            }
        })
        .collect()
}

/// Client addresses: random IPv4 (many /24s) and random IPv6.
fn clients(v4: usize, v6: usize) -> Vec<IpAddr> {
    let mut rng = SplitMix64::new(0x6970);
    let mut out = Vec::with_capacity(v4 + v6);
    for _ in 0..v4 {
        let v = rng.next_u64();
        out.push(IpAddr::V4(Ipv4Addr::new(
            1 + (v % 223) as u8,
            (v >> 8) as u8,
            (v >> 16) as u8,
            (v >> 24) as u8,
        )));
    }
    for _ in 0..v6 {
        // 2001:db8::/32 followed by 96 random bits.
        let random = (u128::from(rng.next_u64()) << 32) | u128::from(rng.next_u64() >> 32);
        out.push(IpAddr::V6(Ipv6Addr::from((0x2001_0db8u128 << 96) | random)));
    }
    out
}

struct Outcome {
    method: &'static str,
    compared: usize,
    mismatches: Vec<String>,
    /// Backends nginx answered from (the comparison means little if it always said the same).
    seen: std::collections::BTreeSet<u16>,
}

impl Outcome {
    fn new(method: &'static str) -> Self {
        Outcome {
            method,
            compared: 0,
            mismatches: Vec::new(),
            seen: Default::default(),
        }
    }

    fn compare(&mut self, what: String, theirs: u16, ours: u16) {
        self.compared += 1;
        self.seen.insert(theirs);
        if theirs != ours {
            self.mismatches
                .push(format!("{what}: nginx {theirs}, gtd {ours}"));
        }
    }
}

#[test]
fn hash_consistent_hash_ip_hash_and_rotation_pick_what_nginx_picks() {
    let ports = free_ports(8);
    let (backends, front) = (&ports[..7], ports[7]);
    let mut conf = String::from(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid DIR/nginx.pid;\nerror_log DIR/error.log warn;\n\
         events { worker_connections 256; }\n\
         http {\n    access_log off;\n\
         \x20   client_body_temp_path DIR/client_body;\n    proxy_temp_path DIR/proxy;\n\
         \x20   fastcgi_temp_path DIR/fastcgi;\n    uwsgi_temp_path DIR/uwsgi;\n    scgi_temp_path DIR/scgi;\n",
    );
    conf.push_str(&upstream("u_hash", "hash $http_x_key;", HASH, backends));
    conf.push_str(&upstream(
        "u_chash",
        "hash \"k:$http_x_key\" consistent;",
        CHASH,
        backends,
    ));
    conf.push_str(&upstream("u_iphash", "ip_hash;", IPHASH, backends));
    conf.push_str(&upstream("u_rr", "", ROTATION, backends));
    for p in backends {
        conf.push_str(&format!(
            "    server {{ listen 127.0.0.1:{p}; return 200 \"$server_port\"; }}\n"
        ));
    }
    conf.push_str(&format!(
        "    server {{\n        listen 127.0.0.1:{front};\n        set_real_ip_from 127.0.0.1;\n        \
         real_ip_header X-Real-IP;\n        proxy_next_upstream off;\n        \
         location /hash {{ proxy_pass http://u_hash; }}\n        location /chash {{ proxy_pass http://u_chash; }}\n        \
         location /iphash {{ proxy_pass http://u_iphash; }}\n        location /rr {{ proxy_pass http://u_rr; }}\n    }}\n}}\n"
    ));
    let nginx = Nginx::start(&conf, front);

    let t0 = Instant::now();
    let build = |balance: Balance, servers: &Servers| {
        GroupBalancer::new(
            &group(balance, endpoints(servers, backends)),
            Protocol::Http,
            t0,
        )
    };
    let port_of =
        |b: &GroupBalancer, req: &StaticRequest| b.pick(req, t0).expect("gtd pick").address().port;
    let client = StaticRequest::from_ip(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let mut outcomes = Vec::new();

    // Plain hash on a header.
    let gtd = build(
        Balance::Hash {
            key: key(vec![KeyPart::Header("x-key".into())]),
            consistent: false,
        },
        HASH,
    );
    let mut o = Outcome::new("hash");
    for k in keys(3_000) {
        let theirs = backend_for(front, "/hash", &[("X-Key", &k)]);
        let ours = port_of(&gtd, &client.clone().with_header("x-key", k.clone()));
        o.compare(format!("key {k:?}"), theirs, ours);
    }
    outcomes.push((o, HASH));

    // Consistent hash on a literal plus a header.
    let template = key(vec![
        KeyPart::Literal("k:".into()),
        KeyPart::Header("x-key".into()),
    ]);
    let gtd = build(
        Balance::Hash {
            key: template,
            consistent: true,
        },
        CHASH,
    );
    let mut o = Outcome::new("hash consistent");
    for k in keys(3_000) {
        let theirs = backend_for(front, "/chash", &[("X-Key", &k)]);
        let ours = port_of(&gtd, &client.clone().with_header("x-key", k.clone()));
        o.compare(format!("key {k:?}"), theirs, ours);
    }
    outcomes.push((o, CHASH));

    // ip_hash over IPv4 and IPv6 clients.
    let gtd = build(Balance::IpHash, IPHASH);
    let mut o = Outcome::new("ip_hash");
    for ip in clients(2_000, 1_000) {
        let theirs = backend_for(front, "/iphash", &[("X-Real-IP", &ip.to_string())]);
        let ours = port_of(&gtd, &StaticRequest::from_ip(ip));
        o.compare(format!("client {ip}"), theirs, ours);
    }
    outcomes.push((o, IPHASH));

    // The weighted rotation, request by request from a fresh start.
    let gtd = build(Balance::RoundRobin, ROTATION);
    let mut o = Outcome::new("round_robin");
    for n in 0..1_500 {
        let theirs = backend_for(front, "/rr", &[]);
        let ours = port_of(&gtd, &client);
        o.compare(format!("request {n}"), theirs, ours);
    }
    outcomes.push((o, ROTATION));
    drop(nginx);

    let mut report = String::new();
    for (o, _) in &outcomes {
        report.push_str(&format!(
            "{}: {} compared, {} mismatches, nginx answered from {} backends\n",
            o.method,
            o.compared,
            o.mismatches.len(),
            o.seen.len()
        ));
        for m in o.mismatches.iter().take(5) {
            report.push_str(&format!("    {m}\n"));
        }
    }
    eprintln!("{report}");
    for (o, servers) in &outcomes {
        let up = servers.iter().filter(|s| !s.2).count();
        assert_eq!(
            o.seen.len(),
            up,
            "{}: nginx should spread over every up server\n{report}",
            o.method
        );
    }
    assert!(
        outcomes.iter().all(|(o, _)| o.mismatches.is_empty()),
        "gtd and nginx disagree:\n{report}"
    );
}
