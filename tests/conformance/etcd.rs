//! A real etcd cluster on loopback for the fleet tests: three members (Debian's `etcd-server`),
//! each started and stopped by this harness by its own PID, in a temp dir; and the `gtd push` /
//! `gtd fleet` commands run against it as an operator runs them.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::common::Child;
use crate::fleet::{Cfg, Fleet, NodeProc, free_port, http, wait};

/// One member: its ports, data dir and process (None while stopped).
struct Member {
    name: String,
    client: SocketAddr,
    peer: SocketAddr,
    child: Option<Child>,
}

/// A three-member cluster.
pub(crate) struct Cluster {
    dir: tempfile::TempDir,
    members: Vec<Member>,
}

impl Cluster {
    /// Starts three members and waits until every one answers `/health` as healthy (a leader
    /// elected).
    pub(crate) fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let members: Vec<Member> = (1..=3)
            .map(|i| Member {
                name: format!("m{i}"),
                client: SocketAddr::from(([127, 0, 0, 1], free_port(false))),
                peer: SocketAddr::from(([127, 0, 0, 1], free_port(false))),
                child: None,
            })
            .collect();
        let mut c = Cluster { dir, members };
        for i in 0..3 {
            c.start_member(i);
        }
        c.wait_healthy();
        c
    }

    fn start_member(&mut self, i: usize) {
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://{}", m.name, m.peer))
            .collect();
        let m = &self.members[i];
        let data = self.dir.path().join(&m.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{}.log", m.name)))
            .unwrap();
        let child = Command::new("etcd")
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &format!("http://{}", m.client)])
            .args(["--advertise-client-urls", &format!("http://{}", m.client)])
            .args(["--listen-peer-urls", &format!("http://{}", m.peer)])
            .args([
                "--initial-advertise-peer-urls",
                &format!("http://{}", m.peer),
            ])
            .args(["--initial-cluster", &initial.join(",")])
            .args(["--initial-cluster-token", "gtd-test"])
            // A busy 2-core machine: elections patient enough not to flap.
            .args(["--heartbeat-interval", "200", "--election-timeout", "2000"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd (Debian: apt-get install etcd-server)");
        self.members[i].child = Some(Child(child));
    }

    /// Waits until every running member says it is healthy.
    pub(crate) fn wait_healthy(&self) {
        for m in self.members.iter().filter(|m| m.child.is_some()) {
            wait(
                &format!("etcd member {} healthy", m.name),
                || matches!(http(m.client, "GET", "/health"), Some((200, body)) if body.contains("true")),
            );
        }
    }

    /// Every member's client URL, comma separated (what `--etcd` takes).
    pub(crate) fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("http://{}", m.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Kills member `i` (SIGKILL) and reaps it.
    pub(crate) fn kill(&mut self, i: usize) {
        self.members[i].child = None;
    }

    /// Starts member `i` again from its data dir.
    pub(crate) fn restart(&mut self, i: usize) {
        self.start_member(i);
    }

    /// Stops every member.
    pub(crate) fn stop_all(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }

    /// Starts every member again and waits until the cluster is healthy.
    pub(crate) fn start_all(&mut self) {
        for i in 0..self.members.len() {
            self.start_member(i);
        }
        self.wait_healthy();
    }
}

/// `gtd ARGS` (push, fleet), its output.
pub(crate) fn gtd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gtd"))
        .args(args)
        .output()
        .expect("run gtd")
}

/// `gtd push --etcd ... --config CONFIG`.
fn push_output(cluster: &Cluster, config: &Path) -> Output {
    gtd(&[
        "push",
        "--etcd",
        &cluster.endpoints(),
        "--config",
        &config.display().to_string(),
    ])
}

/// `gtd push --etcd ... --config CONFIG`, which must succeed; its stdout.
pub(crate) fn push(cluster: &Cluster, config: &Path) -> String {
    let out = push_output(cluster, config);
    assert!(
        out.status.success(),
        "gtd push: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `gtd fleet --json`.
pub(crate) fn fleet_json(cluster: &Cluster) -> Value {
    let out = gtd(&["fleet", "--etcd", &cluster.endpoints(), "--json"]);
    assert!(
        out.status.success(),
        "gtd fleet: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The fleet of `cfg` on etcd: `cfg` pushed as revision 1, then one `gtd run --etcd` per
/// region (leases of 2 s, each node's cache in the fleet's dir), each waited for until it
/// serves revision 1.
pub(crate) fn start_fleet(cluster: &Cluster, cfg: &Cfg, backends: &[Cfg]) -> Fleet {
    start_fleet_leased(cluster, cfg, backends, "2s")
}

/// [`start_fleet`] with the nodes' `--lease-ttl`.
pub(crate) fn start_fleet_leased(
    cluster: &Cluster,
    cfg: &Cfg,
    backends: &[Cfg],
    lease: &str,
) -> Fleet {
    let endpoints = cluster.endpoints();
    let fleet = Fleet::start_with(
        cfg,
        backends,
        |config| {
            push(cluster, config);
        },
        |_, dir, region| {
            let cache: PathBuf = dir.join(format!("cache-{region}.json"));
            [
                "--etcd",
                &endpoints,
                "--cache",
                &cache.display().to_string(),
                "--lease-ttl",
                lease,
            ]
            .map(str::to_owned)
            .to_vec()
        },
    );
    for n in &fleet.nodes {
        wait(&format!("{} serving revision 1", n.region), || {
            n.assert_running();
            n.status()["fleet"]["applied"] == 1
        });
    }
    fleet
}

/// Waits until every node of `fleet` serves revision `n` from etcd.
pub(crate) fn wait_applied(fleet: &Fleet, n: u64) {
    for node in &fleet.nodes {
        wait_fleet(node, &format!("serving revision {n}"), |f| {
            f["applied"] == n && f["source"] == "etcd"
        });
    }
}

/// Waits (bounded by the suite's WAIT) until `cond` holds of the node's `/status` `fleet`
/// object; on a timeout, says what the object was and what the node logged.
pub(crate) fn wait_fleet(node: &NodeProc, what: &str, cond: impl Fn(&Value) -> bool) {
    let deadline = std::time::Instant::now() + crate::fleet::WAIT;
    loop {
        node.assert_running();
        let f = node.status()["fleet"].clone();
        if cond(&f) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {} {what}: fleet {f:#}\n{}",
            node.region,
            node.log_tail()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Moves listener `name` of `cfg` to a port that a socket now holds on `ip` only: a revision a
/// node bound to `ip` cannot apply, and the others can. Dropping the socket frees the port.
pub(crate) fn port_taken_on(cfg: &mut Cfg, name: &str, ip: IpAddr) -> (TcpListener, u16) {
    // A port of the suite's own range (free for TCP and UDP on every address), held on `ip`:
    // an ephemeral one could be held elsewhere too, on the wildcard address by another test's
    // socket, and then no node could bind it.
    let port = free_port(false);
    let squatter = TcpListener::bind((ip, port)).unwrap();
    let listeners = cfg
        .0
        .get_mut("listener")
        .and_then(|l| l.as_array_mut())
        .unwrap();
    for l in listeners {
        if l["name"].as_str() == Some(name) {
            l["port"] = toml::Value::Integer(i64::from(port));
        }
    }
    (squatter, port)
}

/// `gtd push --etcd ... --config CONFIG`, which must be refused (exit status 1) without
/// touching etcd; its stderr.
pub(crate) fn push_refused(cluster: &Cluster, config: &Path) -> String {
    let out = push_output(cluster, config);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("nothing was published"), "{err}");
    err
}
