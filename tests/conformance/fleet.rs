//! The suite's harness: configs as TOML tables (ports replaced by free ones), a fleet of real
//! `gtd` processes (one `gtd demo --backends-only` or more for the endpoints, one `gtd run`
//! per acceleration region), `/status` and `sim --format json` read side by side, client load
//! from many 127.1.x.y addresses, and the comparison with its tolerance.

pub(crate) use crate::common::free_port;
use crate::common::{Child, root};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream as StdTcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gtd::view::{FleetView, Status};
use serde_json::Value;
use toml::Value as Toml;

/// Bound of every wait for an event (a node answering, a state showing in `/status`).
pub(crate) const WAIT: Duration = Duration::from_secs(60);
/// Decisions per (listener, region) in one measurement.
pub(crate) const DECISIONS: usize = 400;
/// Decisions in flight at once per measurement.
pub(crate) const IN_FLIGHT: usize = 24;

// ---------------------------------------------------------------------------------------------
// Configs

/// A config as a TOML table, written to a file before anything reads it.
#[derive(Clone, Debug)]
pub(crate) struct Cfg(pub(crate) toml::Table);

impl Cfg {
    /// `text` with every port (listeners, endpoints, check ports, admin) replaced by a free
    /// one (the same old port always by the same new one) and the shipped catalogue by its
    /// absolute path.
    pub(crate) fn from_text(text: &str) -> Cfg {
        let mut c = Cfg::unpinned(text);
        c.pin_priorities();
        c
    }

    /// [`Cfg::from_text`] without the pinned priorities: groups ranked by RTT.
    pub(crate) fn unpinned(text: &str) -> Cfg {
        let mut c = Cfg(text.parse().expect("config parses as TOML"));
        c.0.insert(
            "catalog".into(),
            Toml::String(root().join("regions/catalog.toml").display().to_string()),
        );
        c.remap_ports();
        c
    }

    /// Gives every group a static per-region `priority` equal to the rank `sim` gives it from
    /// the catalogue's RTTs, so that nodes rank as `sim` does whatever they measure. On a
    /// shared 2-core machine a check that stalls for a few tens of ms (a busy debug build)
    /// inflates an endpoint's RTT average, and a group measured faster by max(5 ms, 20 %) for
    /// 3 rounds overtakes, legitimately (docs/design.md §3.1): on loopback, where every
    /// group measures about the same, nothing moves it back, and the split would differ from
    /// `sim`'s catalogue order for the rest of the test. Ranking by measured RTT is tested in
    /// `tests/health/ranking.rs`; this suite checks what follows the order: the cascade,
    /// failover, the rotation and the hash, rules and reloads. `sim` prints the same shares for
    /// the pinned file as for the original (asserted here).
    fn pin_priorities(&mut self) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("unpinned.toml");
        self.write(&path);
        let before = sim(&path, &[]);
        let mut ranks: BTreeMap<(String, String), toml::Table> = BTreeMap::new();
        for l in before["listeners"].as_array().unwrap() {
            for r in l["regions"].as_array().unwrap() {
                for (i, g) in r["groups"].as_array().unwrap().iter().enumerate() {
                    ranks
                        .entry((
                            l["listener"].as_str().unwrap().to_owned(),
                            g["name"].as_str().unwrap().to_owned(),
                        ))
                        .or_default()
                        .insert(
                            r["region"].as_str().unwrap().to_owned(),
                            Toml::Integer(i as i64 + 1),
                        );
                }
            }
        }
        for l in self.listeners_mut() {
            let ln = l["name"].as_str().unwrap().to_owned();
            for g in groups_mut(l) {
                let gn = g["name"].as_str().unwrap().to_owned();
                let table = ranks.remove(&(ln.clone(), gn)).unwrap();
                g.insert("priority".into(), Toml::Table(table));
            }
        }
        self.write(&path);
        let after = sim(&path, &[]);
        for (a, b) in before["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .zip(after["listeners"].as_array().unwrap())
        {
            for (ra, rb) in a["regions"]
                .as_array()
                .unwrap()
                .iter()
                .zip(b["regions"].as_array().unwrap())
            {
                let name = a["listener"].as_str().unwrap();
                let region = ra["region"].as_str().unwrap();
                assert_eq!(
                    sim_split(&before, name, region, None),
                    sim_split(&after, name, region, None),
                    "pinning changed sim's split of {name} on {region}"
                );
                assert_eq!(ra["routes"], rb["routes"]);
            }
        }
    }

    /// The shipped `config.toml`, on free ports.
    pub(crate) fn shipped() -> Cfg {
        Cfg::from_text(&std::fs::read_to_string(root().join("config.toml")).unwrap())
    }

    fn remap_ports(&mut self) {
        let mut map: BTreeMap<(bool, u16), u16> = BTreeMap::new();
        let mut fresh =
            |udp: bool, old: u16| *map.entry((udp, old)).or_insert_with(|| free_port(udp));
        if let Some(admin) = self.0.get_mut("admin").and_then(Toml::as_table_mut) {
            admin.insert(
                "bind".into(),
                Toml::String(format!("127.0.0.1:{}", fresh(false, 1))),
            );
        }
        for l in self.listeners_mut() {
            let udp = l["protocol"].as_str() == Some("udp");
            let port = l["port"].as_integer().unwrap() as u16;
            l.insert("port".into(), Toml::Integer(fresh(udp, port).into()));
            for g in groups_mut(l) {
                if let Some(hc) = g.get_mut("health_check").and_then(Toml::as_table_mut)
                    && let Some(p) = hc.get("port").and_then(Toml::as_integer)
                {
                    hc.insert("port".into(), Toml::Integer(fresh(false, p as u16).into()));
                }
                for e in endpoints_mut(g) {
                    let addr: SocketAddr = e["address"].as_str().unwrap().parse().unwrap();
                    let new = SocketAddr::new(addr.ip(), fresh(udp, addr.port()));
                    e.insert("address".into(), Toml::String(new.to_string()));
                }
            }
        }
    }

    fn listeners_mut(&mut self) -> impl Iterator<Item = &mut toml::Table> {
        self.0
            .get_mut("listener")
            .and_then(Toml::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Toml::as_table_mut)
    }

    pub(crate) fn listeners(&self) -> Vec<&toml::Table> {
        self.0["listener"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_table().unwrap())
            .collect()
    }

    fn listener(&self, name: &str) -> &toml::Table {
        self.listeners()
            .into_iter()
            .find(|l| l["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no listener {name}"))
    }

    /// Every health check's interval set to `interval` (detection in 3 × it).
    pub(crate) fn set_interval(&mut self, interval: &str) {
        for l in self.listeners_mut() {
            for g in groups_mut(l) {
                if let Some(hc) = g.get_mut("health_check").and_then(Toml::as_table_mut) {
                    hc.insert("interval".into(), Toml::String(interval.into()));
                }
            }
        }
    }

    /// Sets `LISTENER/GROUP`'s ratio, as a scenario's `[ratios]` or an operator's edit does.
    pub(crate) fn set_ratio(&mut self, name: &str, ratio: f64) {
        let (listener, group) = name.split_once('/').expect("LISTENER/GROUP");
        let mut found = false;
        for l in self.listeners_mut() {
            if l["name"].as_str() != Some(listener) {
                continue;
            }
            for g in groups_mut(l) {
                if g["name"].as_str() == Some(group) {
                    let v = if ratio.fract() == 0.0 {
                        Toml::Integer(ratio as i64)
                    } else {
                        Toml::Float(ratio)
                    };
                    g.insert("ratio".into(), v);
                    found = true;
                }
            }
        }
        assert!(found, "no group {name}");
    }

    /// The acceleration regions in config order: node `i` runs on 127.0.0.(i + 2).
    pub(crate) fn regions(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for l in self.listeners() {
            for r in l["regions"].as_array().unwrap() {
                let r = r.as_str().unwrap().to_owned();
                if !out.contains(&r) {
                    out.push(r);
                }
            }
        }
        out
    }

    /// Whether `LISTENER/GROUP` or `GROUP` (every listener's group of that name) names `l`'s
    /// group `g`.
    fn names(name: &str, l: &str, g: &str) -> bool {
        match name.split_once('/') {
            Some((nl, ng)) => nl == l && ng == g,
            None => name == g,
        }
    }

    /// A copy for a backends process that must not serve `groups` (`LISTENER/GROUP` or
    /// `GROUP`): their endpoints and check ports moved to fresh ports no node uses, so that
    /// the nodes' addresses for them have nothing behind them. With `only`, the reverse: the
    /// copy serves nothing but `groups`.
    pub(crate) fn serving(&self, groups: &[&str], only: bool) -> Cfg {
        let mut c = self.clone();
        for l in c.listeners_mut() {
            let lname = l["name"].as_str().unwrap().to_owned();
            let udp = l["protocol"].as_str() == Some("udp");
            for g in groups_mut(l) {
                let gname = g["name"].as_str().unwrap().to_owned();
                let named = groups.iter().any(|n| Cfg::names(n, &lname, &gname));
                if named == only {
                    continue;
                }
                if let Some(hc) = g.get_mut("health_check").and_then(Toml::as_table_mut)
                    && hc.contains_key("port")
                {
                    hc.insert("port".into(), Toml::Integer(free_port(false).into()));
                }
                for e in endpoints_mut(g) {
                    let addr: SocketAddr = e["address"].as_str().unwrap().parse().unwrap();
                    let new = SocketAddr::new(addr.ip(), free_port(udp));
                    e.insert("address".into(), Toml::String(new.to_string()));
                }
            }
        }
        c
    }

    /// Endpoint address → group name, per listener.
    pub(crate) fn owners(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.listeners()
            .into_iter()
            .map(|l| {
                let mut m = BTreeMap::new();
                for g in l["group"].as_array().unwrap() {
                    for e in g["endpoint"].as_array().unwrap() {
                        m.insert(
                            e["address"].as_str().unwrap().to_owned(),
                            g["name"].as_str().unwrap().to_owned(),
                        );
                    }
                }
                (l["name"].as_str().unwrap().to_owned(), m)
            })
            .collect()
    }

    /// `(protocol, port, source-ip affinity)` of listener `name`.
    pub(crate) fn protocol(&self, name: &str) -> (String, u16, bool) {
        let l = self.listener(name);
        (
            l["protocol"].as_str().unwrap().to_owned(),
            l["port"].as_integer().unwrap() as u16,
            l.get("affinity").and_then(Toml::as_str) == Some("source-ip"),
        )
    }

    pub(crate) fn listener_names(&self) -> Vec<String> {
        self.listeners()
            .into_iter()
            .map(|l| l["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// The regions that serve listener `name`.
    pub(crate) fn listener_regions(&self, name: &str) -> Vec<String> {
        self.listener(name)["regions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap().to_owned())
            .collect()
    }

    pub(crate) fn write(&self, path: &Path) {
        std::fs::write(path, toml::to_string(&self.0).unwrap()).unwrap();
    }
}

fn groups_mut(l: &mut toml::Table) -> impl Iterator<Item = &mut toml::Table> {
    l.get_mut("group")
        .and_then(Toml::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Toml::as_table_mut)
}

fn endpoints_mut(g: &mut toml::Table) -> impl Iterator<Item = &mut toml::Table> {
    g.get_mut("endpoint")
        .and_then(Toml::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Toml::as_table_mut)
}

// ---------------------------------------------------------------------------------------------
// Processes

fn gtd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gtd"))
}

/// One node process.
pub(crate) struct NodeProc {
    pub(crate) region: String,
    pub(crate) ip: IpAddr,
    pub(crate) admin: SocketAddr,
    pub(crate) child: Child,
    pub(crate) log: PathBuf,
    /// The arguments that say where its config comes from (`--config F`, `--etcd ...`).
    source: Vec<String>,
}

impl NodeProc {
    /// Its `/status` document.
    pub(crate) fn status(&self) -> Status {
        let (code, body) = http(self.admin, "GET", "/status").expect("the node's admin answers");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("/status does not read: {e}\n{body}"))
    }

    /// Its `/status` `fleet` object (it follows a fleet).
    pub(crate) fn fleet(&self) -> FleetView {
        self.status()
            .fleet
            .expect("a fleet node's /status has `fleet`")
    }

    /// Panics, with its log, when the process has exited.
    pub(crate) fn assert_running(&self) {
        // `try_wait` needs `&mut`; the pid's /proc entry says the same without reaping it.
        let pid = self.child.0.id();
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = state
            .rsplit_once(") ")
            .is_none_or(|(_, rest)| rest.starts_with('Z'));
        assert!(
            !zombie,
            "the {} node exited:\n{}",
            self.region,
            self.log_tail()
        );
    }

    /// The tail of its log, for failure messages.
    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// A backends process and the pipe of its stdout (kept open while it runs).
pub(crate) struct BackendsProc {
    pub(crate) child: Child,
    _out: BufReader<std::process::ChildStdout>,
}

/// The fleet: the config file the nodes run, its backends and one node per region.
pub(crate) struct Fleet {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) config: PathBuf,
    pub(crate) cfg: Cfg,
    pub(crate) backends: Vec<BackendsProc>,
    pub(crate) nodes: Vec<NodeProc>,
}

impl Fleet {
    /// Starts a backends process per entry of `backends` (each serving its copy's
    /// endpoints), then one node per region of `cfg`, and waits until every node answers
    /// `/healthz`.
    pub(crate) fn start(cfg: &Cfg, backends: &[Cfg]) -> Fleet {
        Fleet::start_with(
            cfg,
            backends,
            |_| {},
            |config, _, _| vec!["--config".to_owned(), config.display().to_string()],
        )
    }

    /// [`Fleet::start`] with `before_nodes` called once the config file is written and the
    /// backends answer, and each node's config source given by `source(config, dir, region)`.
    pub(crate) fn start_with(
        cfg: &Cfg,
        backends: &[Cfg],
        before_nodes: impl FnOnce(&Path),
        source: impl Fn(&Path, &Path, &str) -> Vec<String>,
    ) -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        cfg.write(&config);
        let mut procs = Vec::new();
        for (i, b) in backends.iter().enumerate() {
            let path = dir.path().join(format!("backends-{i}.toml"));
            b.write(&path);
            procs.push(start_backends(&path, dir.path(), i));
        }
        before_nodes(&config);
        let mut nodes = Vec::new();
        for (i, region) in cfg.regions().into_iter().enumerate() {
            let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + i as u8));
            let admin = SocketAddr::new(ip, free_port(false));
            let log = dir.path().join(format!("node-{region}.log"));
            let source = source(&config, dir.path(), &region);
            let child = start_node(&region, ip, admin, &source, &log);
            nodes.push(NodeProc {
                region,
                ip,
                admin,
                child,
                log,
                source,
            });
        }
        let fleet = Fleet {
            dir,
            config,
            cfg: cfg.clone(),
            backends: procs,
            nodes,
        };
        for n in &fleet.nodes {
            wait(&format!("{} /healthz", n.region), || {
                n.assert_running();
                matches!(http(n.admin, "GET", "/healthz"), Some((200, _)))
            });
        }
        fleet
    }

    /// Stops backends process `i` (kills and reaps it).
    pub(crate) fn stop_backends(&mut self, i: usize) {
        let b = &mut self.backends[i];
        let _ = b.child.0.kill();
        let _ = b.child.0.wait();
    }

    /// Starts backends process `i` again, from the same file.
    pub(crate) fn start_backends_again(&mut self, i: usize) {
        let path = self.dir.path().join(format!("backends-{i}.toml"));
        self.backends[i] = start_backends(&path, self.dir.path(), i);
    }

    pub(crate) fn node(&self, region: &str) -> &NodeProc {
        self.nodes.iter().find(|n| n.region == region).unwrap()
    }

    /// Kills a node (SIGKILL: no drain, no goodbye) and reaps it.
    pub(crate) fn kill_node(&mut self, region: &str) {
        let n = self.nodes.iter_mut().find(|n| n.region == region).unwrap();
        let _ = n.child.0.kill();
        let _ = n.child.0.wait();
    }

    /// Starts a killed node again with the same arguments (its log appended to) and waits
    /// until it answers `/healthz`.
    pub(crate) fn restart_node(&mut self, region: &str) {
        let n = self.nodes.iter_mut().find(|n| n.region == region).unwrap();
        n.child = start_node(&n.region, n.ip, n.admin, &n.source, &n.log);
        let n = self.node(region);
        wait(&format!("{region} /healthz again"), || {
            n.assert_running();
            matches!(http(n.admin, "GET", "/healthz"), Some((200, _)))
        });
    }

    /// Rewrites the nodes' config file (the operator's edit).
    pub(crate) fn rewrite(&mut self, cfg: &Cfg) {
        cfg.write(&self.config);
        self.cfg = cfg.clone();
    }

    /// Waits until every node's `/status` shows each group healthy except those `down` names
    /// (`LISTENER/GROUP` or `GROUP`), and every endpoint of those unhealthy.
    pub(crate) fn wait_health(&self, down: &[&str]) {
        for n in &self.nodes {
            wait(&format!("{}: down exactly {down:?}", n.region), || {
                n.status().listeners.iter().all(|l| {
                    l.groups.iter().all(|g| {
                        let is_down = down.iter().any(|d| Cfg::names(d, &l.name, &g.name));
                        g.healthy != is_down && g.endpoints.iter().all(|e| e.healthy != is_down)
                    })
                })
            });
        }
    }

    /// `sim --config (the nodes' file) --format json` with `args`.
    pub(crate) fn sim(&self, args: &[&str]) -> Value {
        sim(&self.config, args)
    }

    /// Every listener's split on every node equals `sim`'s (mode, order, health and share),
    /// and the traffic each node sends equals it within the tolerance: [`check_split`].
    pub(crate) fn conforms(&self, sim: &Value) {
        for l in self.cfg.listener_names() {
            for r in self.cfg.listener_regions(&l) {
                self.conforms_on(sim, &l, &r, None);
            }
        }
    }

    /// [`Fleet::conforms`] for one listener and region; with `route`, a forwarding rule's
    /// split (its number in `sim`'s `routes`) and the host and path that match it.
    pub(crate) fn conforms_on(
        &self,
        sim: &Value,
        listener: &str,
        region: &str,
        route: Option<(u64, &str, &str)>,
    ) {
        let node = self.node(region);
        let expected = sim_split(sim, listener, region, route.map(|r| r.0));
        let before = status_split(&node.status(), listener, route.map(|r| r.0));
        assert_same(&before, &expected, listener, region, node);
        let (proto, port, affinity) = self.cfg.protocol(listener);
        let target = SocketAddr::new(node.ip, port);
        let (host, path) = route.map_or(("conformance.test", "/"), |r| (r.1, r.2));
        let tally = drive(&proto, target, DECISIONS, host, path);
        // The state did not move while the load ran: the measurement is of one split.
        let after = status_split(&node.status(), listener, route.map(|r| r.0));
        assert_same(&after, &expected, listener, region, node);
        let owners = &self.cfg.owners()[listener];
        check_split(
            &format!(
                "{listener} on {region}{}",
                route.map_or(String::new(), |r| format!(" rule {}", r.0))
            ),
            &tally,
            owners,
            &expected,
            affinity,
        );
    }
}

impl Fleet {
    /// Under source-ip affinity, a sample of clients one by one: each goes to the group that
    /// `sim --client IP` names for it (the hash is unkeyed, so they must agree exactly).
    pub(crate) fn clients_agree(&self, listener: &str, region: &str, sample: &[usize]) {
        let node = self.node(region);
        let (proto, port, affinity) = self.cfg.protocol(listener);
        assert!(affinity, "{listener} has no source-ip affinity");
        let answers = drive_from(
            &proto,
            SocketAddr::new(node.ip, port),
            sample,
            "c.test",
            "/",
        );
        let owners = &self.cfg.owners()[listener];
        for (&k, answer) in sample.iter().zip(answers) {
            let ip = client_ip(k).to_string();
            let doc = self.sim(&["--region", region, "--client", &ip]);
            let l = doc["listeners"]
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["listener"] == listener)
                .unwrap();
            let route = &l["regions"][0]["route"];
            assert_eq!(route["chosen_by"], "source-ip", "{route}");
            let want = route["group"].as_str().unwrap();
            let answer =
                answer.unwrap_or_else(|| panic!("{listener} on {region}: {ip} unanswered"));
            assert_eq!(
                owners[&answer], want,
                "{listener} on {region}: client {ip} reached {answer}, sim names group {want}"
            );
        }
    }
}

/// `gtd run` for `region` on `ip`, its log appended to `log`.
fn start_node(region: &str, ip: IpAddr, admin: SocketAddr, source: &[String], log: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let child = gtd()
        .arg("run")
        .args(source)
        .args(["--region", region])
        .args(["--bind", &ip.to_string(), "--source-ip", &ip.to_string()])
        .args(["--admin", &admin.to_string()])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start gtd run");
    Child(child)
}

fn start_backends(config: &Path, dir: &Path, i: usize) -> BackendsProc {
    let mut child = gtd()
        .args(["demo", "--backends-only", "--config"])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join(format!("backends-{i}.log"))).unwrap())
        .spawn()
        .expect("start gtd demo --backends-only");
    // It prints "serving N endpoints …" once every endpoint is bound.
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut line = String::new();
        let _ = out.read_line(&mut line);
        let _ = tx.send(line);
        out
    });
    let line = rx.recv_timeout(WAIT).unwrap_or_default();
    let child = Child(child);
    assert!(
        line.starts_with("serving "),
        "gtd demo --backends-only did not start: {line:?} {}",
        std::fs::read_to_string(dir.join(format!("backends-{i}.log"))).unwrap_or_default()
    );
    BackendsProc {
        child,
        _out: reader.join().unwrap(),
    }
}

/// Waits (bounded by [`WAIT`]) until `cond` holds.
pub(crate) fn wait(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// HTTP/1.0 to an admin server: (status, body), or None when it does not answer.
pub(crate) fn http(addr: SocketAddr, method: &str, path: &str) -> Option<(u16, String)> {
    let mut s = StdTcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

/// `sim --config CONFIG --format json ARGS`.
pub(crate) fn sim(config: &Path, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_sim"))
        .arg("--config")
        .arg(config)
        .args(["--format", "json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sim {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

pub(crate) use crate::load::*;
pub(crate) use crate::split::*;
