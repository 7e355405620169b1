//! A real etcd cluster on loopback for the fleet tests: three members (Debian's `etcd-server`),
//! each started and stopped by this harness by its own PID, in a temp dir; and the `gtd push` /
//! `gtd fleet` commands run against it as an operator runs them. A secure cluster
//! ([`Cluster::start_secure`]) serves clients over TLS only, with client certificates required,
//! and can turn on etcd's users ([`Cluster::enable_users`]): `pusher` may write the prefix,
//! `node` may read it and write the registry only.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use gtd::view::FleetView;
use serde_json::Value;

use crate::common::{Child, Pki};
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
    secure: Option<Secure>,
    /// Held for the test's life (the cluster is the first thing a fleet test makes, so the
    /// last it drops): whether other fleet tests may run meanwhile.
    _turn: Turn,
}

/// Fleet tests run two at a time (the test threads), each with its etcd members, nodes and
/// load; a test that judges measured latency runs alone ([`Cluster::start_alone`]). Two
/// loaded fleets on two cores put 60-150 ms of scheduling delay into a p99 that a latency
/// gate compares with a limit tens of milliseconds above what it expects.
static TURNS: std::sync::RwLock<()> = std::sync::RwLock::new(());

enum Turn {
    Shared(#[allow(dead_code)] std::sync::RwLockReadGuard<'static, ()>),
    Alone(#[allow(dead_code)] std::sync::RwLockWriteGuard<'static, ()>),
}

/// A secure cluster's files (in the cluster's dir) and whether its users are on.
struct Secure {
    ca: PathBuf,
    server: (PathBuf, PathBuf),
    client: (PathBuf, PathBuf),
    users: bool,
}

/// Who runs a `gtd` command against the cluster (which etcd user, once users are on).
#[derive(Clone, Copy)]
pub(crate) enum As {
    /// `gtd push` and `gtd fleet`: user `pusher` (read and write under /gtd/).
    Pusher,
    /// `gtd run`: user `node` (read under /gtd/, write under /gtd/nodes/).
    Node,
}

/// The password of each test user (in a file `pw-USER` of the cluster's dir).
const PASSWORD: &str = "correct horse battery staple";

impl Cluster {
    /// Starts three members and waits until every one answers `/health` as healthy (a leader
    /// elected).
    pub(crate) fn start() -> Cluster {
        Cluster::start_with(|_| None)
    }

    /// [`Cluster::start`] for a test that no other fleet test runs beside (see [`TURNS`]).
    pub(crate) fn start_alone() -> Cluster {
        let turn = Turn::Alone(gtd::sync::write(&TURNS));
        Cluster::start_turn(|_| None, turn)
    }

    /// [`Cluster::start`] serving clients over TLS only (a certificate for 127.0.0.1 signed by
    /// a test CA), with client certificates required (`--client-cert-auth`); users off.
    pub(crate) fn start_secure() -> Cluster {
        Cluster::start_with(|dir| {
            let pki = Pki::new();
            let write = |name: &str, text: &str| {
                let p = dir.join(name);
                std::fs::write(&p, text).unwrap();
                p
            };
            let (cert, key) = pki.issue(&["127.0.0.1", "localhost"], false);
            let server = (write("server.pem", &cert), write("server-key.pem", &key));
            let (cert, key) = pki.issue(&["gtd-client"], true);
            let client = (write("client.pem", &cert), write("client-key.pem", &key));
            Some(Secure {
                ca: write("ca.pem", &pki.ca_pem()),
                server,
                client,
                users: false,
            })
        })
    }

    fn start_with(secure: impl FnOnce(&Path) -> Option<Secure>) -> Cluster {
        Cluster::start_turn(secure, Turn::Shared(gtd::sync::read(&TURNS)))
    }

    fn start_turn(secure: impl FnOnce(&Path) -> Option<Secure>, turn: Turn) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let secure = secure(dir.path());
        let members: Vec<Member> = (1..=3)
            .map(|i| Member {
                name: format!("m{i}"),
                client: SocketAddr::from(([127, 0, 0, 1], free_port(false))),
                peer: SocketAddr::from(([127, 0, 0, 1], free_port(false))),
                child: None,
            })
            .collect();
        let mut c = Cluster {
            dir,
            members,
            secure,
            _turn: turn,
        };
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
        let scheme = self.scheme();
        let mut etcd = Command::new("etcd");
        if let Some(s) = &self.secure {
            etcd.arg("--cert-file")
                .arg(&s.server.0)
                .arg("--key-file")
                .arg(&s.server.1)
                .arg("--trusted-ca-file")
                .arg(&s.ca)
                .arg("--client-cert-auth")
                // Tokens that expire between two of a node's registry refreshes (every 2 s):
                // each refresh meets an expired one.
                .args(["--auth-token-ttl", "1"]);
        }
        let child = etcd
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&data)
            .args(["--listen-client-urls", &format!("{scheme}://{}", m.client)])
            .args([
                "--advertise-client-urls",
                &format!("{scheme}://{}", m.client),
            ])
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
            let url = format!("https://{}", m.client);
            wait(&format!("etcd member {} healthy", m.name), || {
                if self.secure.is_some() {
                    self.etcdctl(&["--endpoints", &url, "endpoint", "health"])
                        .status
                        .success()
                } else {
                    matches!(http(m.client, "GET", "/health"), Some((200, body)) if body.contains("true"))
                }
            });
        }
    }

    fn scheme(&self) -> &'static str {
        if self.secure.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// Every member's client URL, comma separated (what `--etcd` takes).
    pub(crate) fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}://{}", self.scheme(), m.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The client URLs of members `which` only, comma-separated.
    pub(crate) fn endpoints_of(&self, which: &[usize]) -> String {
        which
            .iter()
            .map(|&i| format!("{}://{}", self.scheme(), self.members[i].client))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index of the member that leads now (asked of each running member).
    pub(crate) fn leader(&self) -> usize {
        let mut leader = None;
        wait("a member naming itself leader", || {
            leader = (0..self.members.len())
                .filter(|&i| self.members[i].child.is_some())
                .find(|&i| {
                    let out = self.etcdctl(&[
                        "--endpoints",
                        &self.endpoints_of(&[i]),
                        "endpoint",
                        "status",
                        "-w",
                        "json",
                    ]);
                    let status: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
                    let s = &status[0]["Status"];
                    !s["leader"].is_null() && s["leader"] == s["header"]["member_id"]
                });
            leader.is_some()
        });
        leader.expect("waited for")
    }

    /// `--etcd ENDPOINTS` and, on a secure cluster, the CA, the client certificate and (once
    /// users are on) `who`'s user and password file: what `who` passes to reach the cluster.
    pub(crate) fn access(&self, who: As) -> Vec<String> {
        let mut args = vec!["--etcd".to_owned(), self.endpoints()];
        if let Some(s) = &self.secure {
            for (flag, path) in [
                ("--etcd-cacert", &s.ca),
                ("--etcd-cert", &s.client.0),
                ("--etcd-key", &s.client.1),
            ] {
                args.extend([flag.to_owned(), path.display().to_string()]);
            }
            if s.users {
                let user = match who {
                    As::Pusher => "pusher",
                    As::Node => "node",
                };
                args.extend([
                    "--etcd-user".to_owned(),
                    user.to_owned(),
                    "--etcd-password-file".to_owned(),
                    self.dir
                        .path()
                        .join(format!("pw-{user}"))
                        .display()
                        .to_string(),
                ]);
            }
        }
        args
    }

    /// A secure cluster's CA file.
    pub(crate) fn ca(&self) -> &Path {
        &self.secure.as_ref().expect("a secure cluster").ca
    }

    /// `etcdctl ARGS` as root (its client certificate; once users are on, root's password),
    /// against every member unless ARGS name `--endpoints`.
    pub(crate) fn etcdctl(&self, args: &[&str]) -> Output {
        let mut c = Command::new("etcdctl");
        c.env("ETCDCTL_API", "3");
        if !args.contains(&"--endpoints") {
            c.args(["--endpoints", &self.endpoints()]);
        }
        if let Some(s) = &self.secure {
            c.arg("--cacert")
                .arg(&s.ca)
                .arg("--cert")
                .arg(&s.client.0)
                .arg("--key")
                .arg(&s.client.1);
            if s.users {
                c.args(["--user", &format!("root:{PASSWORD}")]);
            }
        }
        c.args(args)
            .output()
            .expect("run etcdctl (Debian: apt-get install etcd-client)")
    }

    /// Turns etcd's users on: `root`, `pusher` (role `gtd-push`) and `node` (role `gtd-node`),
    /// each with [`PASSWORD`] in `pw-USER`, the roles as the shipped `deploy/etcd/roles.sh`
    /// makes them (`gtd-ramp` too, given to nobody: see [`Cluster::let_nodes_ramp`]). From
    /// now on [`Cluster::access`] names a user.
    pub(crate) fn enable_users(&mut self) {
        let run = |args: &[&str]| {
            let out = self.etcdctl(args);
            assert!(
                out.status.success(),
                "etcdctl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        for user in ["root", "pusher", "node"] {
            run(&[
                "user",
                "add",
                user,
                "--interactive=false",
                &format!("--new-user-password={PASSWORD}"),
            ]);
            std::fs::write(
                self.dir.path().join(format!("pw-{user}")),
                format!("{PASSWORD}\n"),
            )
            .unwrap();
        }
        // The roles an operator makes: the shipped script, with etcdctl's settings in its
        // environment as its header says.
        let secure = self.secure.as_ref().expect("a secure cluster");
        let out = Command::new("sh")
            .arg(crate::common::root().join("deploy/etcd/roles.sh"))
            .arg("/gtd")
            .env("ETCDCTL_API", "3")
            .env("ETCDCTL_ENDPOINTS", self.endpoints())
            .env("ETCDCTL_CACERT", &secure.ca)
            .env("ETCDCTL_CERT", &secure.client.0)
            .env("ETCDCTL_KEY", &secure.client.1)
            .output()
            .expect("run sh deploy/etcd/roles.sh");
        assert!(
            out.status.success(),
            "deploy/etcd/roles.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        run(&["user", "grant-role", "pusher", "gtd-push"]);
        run(&["user", "grant-role", "node", "gtd-node"]);
        run(&["auth", "enable"]);
        self.secure.as_mut().expect("a secure cluster").users = true;
    }

    /// Gives user `node` the shipped `gtd-ramp` role: its nodes may then drive a ramp.
    pub(crate) fn let_nodes_ramp(&self) {
        let out = self.etcdctl(&["user", "grant-role", "node", "gtd-ramp"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
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

/// `gtd ARGS` with `who`'s access to the cluster after ARGS.
pub(crate) fn gtd_as(cluster: &Cluster, who: As, args: &[&str]) -> Output {
    let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    all.extend(cluster.access(who));
    Command::new(env!("CARGO_BIN_EXE_gtd"))
        .args(&all)
        .output()
        .expect("run gtd")
}

/// `gtd push --etcd ... --config CONFIG`.
fn push_output(cluster: &Cluster, config: &Path) -> Output {
    gtd_as(
        cluster,
        As::Pusher,
        &["push", "--config", &config.display().to_string()],
    )
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

/// `gtd fleet --json` (which exits 3 when nodes are missing: its JSON says which).
pub(crate) fn fleet_json(cluster: &Cluster) -> Value {
    let out = gtd_as(cluster, As::Pusher, &["fleet", "--json"]);
    let missing = out.status.code() == Some(3);
    let v: Value = if missing {
        serde_json::from_slice(&out.stdout).unwrap()
    } else {
        json_of(out)
    };
    assert_eq!(v["all_present"], !missing, "{v:#}");
    v
}

/// The JSON a `gtd ... --json` printed, which must have succeeded.
pub(crate) fn json_of(out: Output) -> Value {
    assert!(
        out.status.success(),
        "gtd: {}",
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
    let fleet = Fleet::start_with(
        cfg,
        backends,
        |config| {
            push(cluster, config);
        },
        |_, dir, region| {
            let cache: PathBuf = dir.join(format!("cache-{region}.json"));
            let mut args = cluster.access(As::Node);
            args.extend(
                [
                    "--cache",
                    &cache.display().to_string(),
                    "--lease-ttl",
                    lease,
                ]
                .map(str::to_owned),
            );
            args
        },
    );
    for n in &fleet.nodes {
        wait(&format!("{} serving revision 1", n.region), || {
            n.assert_running();
            n.fleet().applied == 1
        });
    }
    fleet
}

/// Waits until every node of `fleet` serves revision `n` from etcd.
pub(crate) fn wait_applied(fleet: &Fleet, n: u64) {
    for node in &fleet.nodes {
        wait_fleet(node, &format!("serving revision {n}"), |f| {
            f.applied == n && f.source == "etcd"
        });
    }
}

/// Waits (bounded by the suite's WAIT) until `cond` holds of the node's `/status` `fleet`
/// object; on a timeout, says what the object was and what the node logged.
pub(crate) fn wait_fleet(node: &NodeProc, what: &str, cond: impl Fn(&FleetView) -> bool) {
    let deadline = std::time::Instant::now() + crate::fleet::WAIT;
    loop {
        node.assert_running();
        let f = node.fleet();
        if cond(&f) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {} {what}: fleet {f:?}\n{}",
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
