//! `gtd push --ramp --dry-run` against a real three-member etcd and a node per region: the plan
//! of moved traffic per step and node from each node's registry entry, and the refusals (exit
//! 2, nothing published) of a step over capacity and of a receiving group a node sees down.

use crate::etcd::*;
use crate::fleet::*;

#[test]
fn a_ramp_is_planned_per_node_and_refused_over_capacity_or_onto_a_sick_group() {
    let cluster = Cluster::start();
    let mut cfg = Cfg::shipped();
    // web/shanghai's endpoints have nothing behind them: every node sees the group down.
    let backends = cfg.serving(&["web/shanghai"], false);
    let mut fleet = start_fleet(&cluster, &cfg, std::slice::from_ref(&backends));
    fleet.wait_health(&["web/shanghai"]);
    let config = fleet.config.display().to_string();
    let ramp = |extra: &[&str]| {
        let mut args = vec!["push", "--ramp", "--dry-run", "--config", &config];
        args.extend_from_slice(extra);
        let out = gtd_as(&cluster, As::Pusher, &args);
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };

    // Towards Beijing (healthy): planned in the default five steps, per registered node.
    cfg.set_ratio("web/beijing", 100.0);
    fleet.rewrite(&cfg);
    let (code, out, err) = ramp(&[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.starts_with("dry run: nothing published\n"), "{out}");
    assert!(out.contains("in 5 steps of moved traffic"), "{out}");
    assert!(out.contains("ratios: web/beijing 50 -> 100"), "{out}");
    for n in &fleet.nodes {
        assert!(out.contains(&format!("({})\n    web: ", n.region)), "{out}");
    }
    assert!(out.contains("step 5 · 100 % of the move"), "{out}");
    assert!(out.contains("the ramp may start"), "{out}");

    // With demand the whole move overflows Beijing: refused with the numbers.
    let scenario = fleet.dir.path().join("demand.toml");
    std::fs::write(
        &scenario,
        "[demand]\ncn-beijing = 22000\ncn-shanghai = 6000\n",
    )
    .unwrap();
    let (code, out, err) = ramp(&["--scenario", &scenario.display().to_string()]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains("refused"), "{err}");
    // At 50/50 Beijing carries 62.5 % of 22000 and 37.5 % of 6000, 16000 of its 24000; the
    // whole move (Beijing 100 first from Beijing, 50 % of the rest from Shanghai) puts
    // 22000 + 3000 on it: only the last step overflows, and no way back does.
    assert!(
        err.contains(
            "step 5 (100 % of the move) overflows web/beijing: load 25000 over capacity 24000"
        ),
        "{err}"
    );
    assert!(!err.contains("step 4 "), "{err}");
    assert!(!err.contains("way back"), "{err}");
    assert!(out.contains("OVER web/beijing"), "{out}");

    // Towards Shanghai, which every node sees down: refused, naming the nodes.
    cfg.set_ratio("web/beijing", 10.0);
    fleet.rewrite(&cfg);
    // Each node's registry entry says web/shanghai is down once the node has written it.
    let (mut code, mut out, mut err) = (None, String::new(), String::new());
    wait("every entry saying web/shanghai is down", || {
        (code, out, err) = ramp(&["--steps", "10,100"]);
        fleet.nodes.iter().all(|n| {
            out.lines().any(|l| {
                l.starts_with("node ") && l.contains(&format!("({}): down web/shanghai", n.region))
            })
        })
    });
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains("web/shanghai receives traffic"), "{err}");
    assert!(err.contains("unhealthy now"), "{err}");
    assert!(out.contains("in 2 steps"), "{out}");

    // Nothing was published by any of them: the next push is revision 2.
    let published = push(&cluster, &fleet.config);
    assert!(
        published.starts_with("published revision 2 "),
        "{published}"
    );
}

// ---------------------------------------------------------------------------------------------
// Driven ramps: the plan stored in etcd, the fleet's nodes driving it, gates from their own
// counters.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One HTTP listener in both regions, each group one endpoint the test itself serves; no
/// marks (`max_fails = 0`), so a group answering errors stays in rotation, and a rotation
/// (`affinity = "none"`), so each node's shares are exact.
const TWO_GROUPS: &str = r#"
catalog = "regions/catalog.toml"
[admin]
bind = "127.0.0.1:1"

[[listener]]
name = "web"
protocol = "http"
port = 1001
regions = ["cn-beijing", "cn-shanghai"]
affinity = "none"

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 50
    [[listener.group.endpoint]]
    address = "127.0.0.1:2001"
    max_fails = 0

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = 50
    [[listener.group.endpoint]]
    address = "127.0.0.1:2002"
    max_fails = 0
"#;

/// An HTTP endpoint served by a thread of the test: 200, or while `failing` is N > 0 every
/// Nth answer a 503, each answer `delay` ms after its request. Stops when `stop` is set (its
/// listener closes with the thread).
struct Endpoint {
    failing: Arc<AtomicU64>,
    delay: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Endpoint {
    fn start(addr: &str) -> Endpoint {
        let listener = TcpListener::bind(addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        let failing = Arc::new(AtomicU64::new(0));
        let delay = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (f, d, s) = (Arc::clone(&failing), Arc::clone(&delay), Arc::clone(&stop));
        let count = Arc::new(AtomicU64::new(0));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (f, d, s, count) = (
                            Arc::clone(&f),
                            Arc::clone(&d),
                            Arc::clone(&s),
                            Arc::clone(&count),
                        );
                        std::thread::spawn(move || serve(conn, (&f, &d), &s, &count));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Endpoint {
            failing,
            delay,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(
    conn: TcpStream,
    (failing, delay): (&AtomicU64, &AtomicU64),
    stop: &AtomicBool,
    count: &AtomicU64,
) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    while !stop.load(Ordering::Relaxed) {
        // One request's head (no bodies: the load sends GETs).
        let mut line = String::new();
        let mut any = false;
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) => return,
                Ok(_) => {
                    any = true;
                    if line == "\r\n" || line == "\n" {
                        break;
                    }
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    if !any {
                        continue;
                    }
                }
                Err(_) => return,
            }
        }
        let wait = delay.load(Ordering::Relaxed);
        if wait > 0 {
            std::thread::sleep(Duration::from_millis(wait));
        }
        let n = count.fetch_add(1, Ordering::Relaxed);
        let every = failing.load(Ordering::Relaxed);
        let status = if every > 0 && n.is_multiple_of(every) {
            "503 Service Unavailable"
        } else {
            "200 OK"
        };
        if write!(conn, "HTTP/1.1 {status}\r\nContent-Length: 2\r\n\r\nok").is_err() {
            return;
        }
    }
}

/// Requests to every node's listener, one after another per node and thread, until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// One thread per node pausing 3 ms: a few hundred requests a second per node, a step's
/// sample in seconds, and room for the rest of a shared machine.
const STEADY: (usize, Duration) = (1, Duration::from_millis(3));

impl Load {
    /// `per` threads sending to each target, each pausing `pause` between its requests (for
    /// endpoints that answer slowly: many threads, longer pauses).
    fn threads(targets: Vec<SocketAddr>, (per, pause): (usize, Duration)) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = targets
            .into_iter()
            .flat_map(|t| std::iter::repeat_n(t, per))
            .map(|t| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok(mut s) = TcpStream::connect_timeout(&t, Duration::from_secs(2)) {
                            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                            let _ = write!(s, "GET / HTTP/1.0\r\nHost: web\r\n\r\n");
                            let _ = s.read_to_end(&mut Vec::new());
                        }
                        std::thread::sleep(pause);
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// `gtd ARGS` as the pusher, killed if it runs past `cap`: (status, stdout, stderr).
fn gtd_capped(cluster: &Cluster, args: &[&str], cap: Duration) -> (Option<i32>, String, String) {
    let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    all.extend(cluster.access(As::Pusher));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gtd"))
        .args(&all)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run gtd");
    let deadline = Instant::now() + cap;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `gtd ramp status --json`, asked again (up to 10 times) when etcd does not answer in time
/// on a busy machine.
fn ramp_status(cluster: &Cluster) -> serde_json::Value {
    let mut last = String::new();
    for _ in 0..10 {
        let out = gtd_as(cluster, As::Pusher, &["ramp", "status", "--json"]);
        if out.status.success() {
            return serde_json::from_slice(&out.stdout).unwrap();
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("gtd ramp status --json: {last}");
}

/// The two endpoints, the fleet, and load on both nodes until beijing served enough for a
/// baseline.
fn ramp_fleet(cluster: &Cluster) -> (Cfg, Vec<Endpoint>, Fleet, Load) {
    ramp_fleet_leased(cluster, "2s")
}

/// [`ramp_fleet`] with the nodes' `--lease-ttl`.
fn ramp_fleet_leased(cluster: &Cluster, lease: &str) -> (Cfg, Vec<Endpoint>, Fleet, Load) {
    ramp_fleet_of(cluster, TWO_GROUPS, lease, STEADY, 0)
}

/// [`ramp_fleet`] of config `text`, with `load` threads per node and their pause (see
/// [`Load::threads`]), web/beijing answering `delay` ms late from the start.
fn ramp_fleet_of(
    cluster: &Cluster,
    text: &str,
    lease: &str,
    load: (usize, Duration),
    delay: u64,
) -> (Cfg, Vec<Endpoint>, Fleet, Load) {
    let cfg = Cfg::from_text(text);
    let endpoints: Vec<Endpoint> = cfg.listeners()[0]["group"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| Endpoint::start(g["endpoint"][0]["address"].as_str().unwrap()))
        .collect();
    endpoints[0].delay.store(delay, Ordering::Relaxed);
    let fleet = start_fleet_leased(cluster, &cfg, &[], lease);
    let port = cfg.protocol("web").1;
    let load = Load::threads(
        fleet
            .nodes
            .iter()
            .map(|n| SocketAddr::new(n.ip, port))
            .collect(),
        load,
    );
    wait("load through both nodes", || {
        fleet.nodes.iter().all(|n| {
            n.status().listeners[0]
                .groups
                .iter()
                .all(|g| g.served.unwrap_or(0) >= 100)
        })
    });
    (cfg, endpoints, fleet, load)
}

#[test]
fn a_stored_ramp_is_driven_by_the_fleet_to_completion() {
    let cluster = Cluster::start();
    let (mut cfg, _endpoints, mut fleet, load) = ramp_fleet(&cluster);
    cfg.set_ratio("web/beijing", 100.0);
    fleet.rewrite(&cfg);
    let config = fleet.config.display().to_string();
    let args = [
        "push",
        "--ramp",
        "--config",
        &config,
        "--steps",
        "50,100",
        "--min-wait",
        "1s",
        "--max-wait",
        "10s",
        "--bake",
        "0s",
        "--on-inconclusive",
        "proceed",
        "-m",
        "to beijing",
    ];
    let (code, out, err) = gtd_capped(&cluster, &args, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("stored under"), "{out}");
    // A second ramp while this one runs: refused, nothing stored.
    let (code, out2, err2) = gtd_capped(&cluster, &args, Duration::from_secs(60));
    assert_eq!(code, Some(2), "{out2}{err2}");
    assert!(err2.contains("is running"), "{err2}");

    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        let s = ramp_status(&cluster);
        if s["state"] != "running" {
            break s;
        }
        assert!(Instant::now() < deadline, "the ramp did not end: {s:#}");
        std::thread::sleep(Duration::from_millis(500));
    };
    drop(load);
    let text = String::from_utf8(gtd_as(&cluster, As::Pusher, &["ramp", "status"]).stdout).unwrap();
    assert_eq!(status["state"], "completed", "{text}");
    // Each step's took gate, per node and group, within tolerance and stated.
    for n in &fleet.nodes {
        assert!(text.contains(&format!("took {}@", n.region)), "{text}");
    }
    assert!(text.contains("step 1/2 passed"), "{text}");
    assert!(text.contains("step 2/2 passed"), "{text}");
    assert!(!text.contains("FAIL"), "{text}");
    // The steps were revisions 2 and 3, with their messages in the history.
    wait_applied(&fleet, 3);
    let history =
        String::from_utf8(gtd_as(&cluster, As::Pusher, &["fleet", "history"]).stdout).unwrap();
    assert!(history.contains("step 1/2"), "{history}");
    assert!(history.contains("step 2/2"), "{history}");
    assert!(history.contains("after step 1 passed"), "{history}");
    // The driving node says so on its timeline and in its metrics.
    let owner = status["owner"].as_str().unwrap().to_owned();
    let driver = fleet
        .nodes
        .iter()
        .find(|n| owner.starts_with(&format!("{}@", n.region)))
        .expect("the owner is a node");
    let (_, events) = http(driver.admin, "GET", "/events").unwrap();
    let events: serde_json::Value = serde_json::from_str(&events).unwrap();
    let said: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "ramp")
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(
        said.iter().any(|m| m.contains("step 2/2 passed")),
        "{said:#?}"
    );
    let (_, metrics) = http(driver.admin, "GET", "/metrics").unwrap();
    assert!(metrics.contains("gtd_ramp_step 2"), "{metrics}");
    assert!(metrics.contains("gtd_ramp_state 4"), "{metrics}");
}

/// With etcd's users on, a node drives a ramp only with the shipped `gtd-ramp` role: under
/// `gtd-node` alone every node is refused by etcd and says so with the remedy, the stored ramp
/// has no owner (and moves nothing); once the nodes' user gets the role, one takes the ramp
/// and it completes.
#[test]
fn under_etcd_users_only_a_node_with_the_ramp_role_drives_a_ramp() {
    let mut cluster = Cluster::start_secure();
    cluster.enable_users();
    let (mut cfg, _endpoints, mut fleet, load) = ramp_fleet(&cluster);
    cfg.set_ratio("web/beijing", 100.0);
    fleet.rewrite(&cfg);
    let config = fleet.config.display().to_string();
    let args = [
        "push",
        "--ramp",
        "--config",
        &config,
        "--steps",
        "50,100",
        "--min-wait",
        "1s",
        "--max-wait",
        "10s",
        "--bake",
        "0s",
        "--on-inconclusive",
        "proceed",
    ];
    let (code, out, err) = gtd_capped(&cluster, &args, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out}{err}");
    let log = |n: &crate::fleet::NodeProc| std::fs::read_to_string(&n.log).unwrap_or_default();
    wait(
        "every node refused the ramp by etcd, with the remedy",
        || {
            fleet.nodes.iter().all(|n| {
                let log = log(n);
                log.contains("permission denied") && log.contains("gtd-ramp role")
            })
        },
    );
    let held = ramp_status(&cluster);
    assert!(held["owner"].is_null(), "{held:#}");
    assert_eq!(held["at"], 0, "{held:#}");

    cluster.let_nodes_ramp();
    let done = wait_ramp(
        &cluster,
        "the ramp completed",
        Duration::from_secs(300),
        |s| s["state"] != "running",
    );
    drop(load);
    assert_eq!(done["state"], "completed", "{done:#}");
    let owner = done["owner"].as_str().unwrap_or_default();
    assert!(
        fleet
            .nodes
            .iter()
            .any(|n| owner.starts_with(&format!("{}@", n.region))),
        "{done:#}"
    );
}

/// Sets `what` to `value` once a node of `fleet` applied revision `from` (within 120 s).
fn set_on_revision(
    fleet: &Fleet,
    from: u64,
    what: Arc<AtomicU64>,
    value: u64,
) -> std::thread::JoinHandle<()> {
    let nodes: Vec<SocketAddr> = fleet.nodes.iter().map(|n| n.admin).collect();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let on_step = nodes.iter().any(|a| {
                http(*a, "GET", "/status").is_some_and(|(_, b)| {
                    serde_json::from_str::<serde_json::Value>(&b)
                        .is_ok_and(|v| v["fleet"]["applied"].as_u64() >= Some(from))
                })
            });
            if on_step {
                what.store(value, Ordering::Relaxed);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
}

/// A ramp 50/50 -> Beijing 100 in three steps whose receiving group, Beijing, answers 503 to
/// one request in `every` once the fleet is on revision `from` (step `from - 1`): what
/// `--follow` printed, and the record at the end, the fleet on the starting ratios again.
fn ramp_into_errors(every: u64, from: u64) -> (String, serde_json::Value) {
    let cluster = Cluster::start();
    let (mut cfg, endpoints, mut fleet, load) = ramp_fleet(&cluster);
    cfg.set_ratio("web/beijing", 100.0);
    fleet.rewrite(&cfg);
    let config = fleet.config.display().to_string();
    let flip = set_on_revision(&fleet, from, Arc::clone(&endpoints[0].failing), every);
    let (code, out, err) = gtd_capped(
        &cluster,
        &[
            "push",
            "--ramp",
            "--follow",
            "--config",
            &config,
            "--steps",
            "20,50,100",
            "--min-wait",
            "1s",
            "--max-wait",
            "20s",
            "--bake",
            "0s",
        ],
        Duration::from_secs(300),
    );
    let _ = flip.join();
    drop(load);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(out.contains(": reverted ("), "{out}");
    // The fleet is on the starting revision's config again.
    let status = ramp_status(&cluster);
    assert_eq!(status["state"], "reverted", "{status:#}");
    assert_eq!(status["at"], 0, "{status:#}");
    let last = status["revision"].as_u64().unwrap();
    wait_applied(&fleet, last);
    for n in &fleet.nodes {
        let s = n.status();
        let beijing = s.listeners[0]
            .groups
            .iter()
            .find(|g| g.name == "beijing")
            .unwrap();
        assert_eq!(beijing.ratio, 50.0, "{}", n.region);
    }
    (out, status)
}

#[test]
fn a_ramp_goes_back_when_a_receiving_group_answers_errors() {
    // 10 % of 503s from the first step: a severe breach, straight back to the start.
    let (out, _) = ramp_into_errors(10, 2);
    assert!(out.contains("errors web/beijing"), "{out}");
    assert!(out.contains("FAIL (severe)"), "{out}");
    assert!(out.contains("going back to the starting revision"), "{out}");
}

#[test]
fn a_ramp_steps_back_down_on_a_smaller_error_increase() {
    // 2 % of 503s from the second step: a failure, not a severe one: back down to step 1,
    // then to the start.
    let (out, _) = ramp_into_errors(50, 3);
    assert!(out.contains("step 1/3 passed"), "{out}");
    assert!(out.contains("step 2 failed the errors gate"), "{out}");
    assert!(!out.contains("FAIL (severe)"), "{out}");
    assert!(
        out.contains("going back down the steps, to step 1"),
        "{out}"
    );
    assert!(out.contains("back down to step 1 as revision"), "{out}");
}

/// Waits (up to `cap`) until the ramp's status satisfies `cond`; returns it.
fn wait_ramp(
    cluster: &Cluster,
    what: &str,
    cap: Duration,
    cond: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + cap;
    loop {
        let s = ramp_status(cluster);
        if cond(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {s:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_ramp_outlives_its_driving_node() {
    let cluster = Cluster::start();
    let (mut cfg, _endpoints, mut fleet, load) = ramp_fleet(&cluster);
    cfg.set_ratio("web/beijing", 100.0);
    fleet.rewrite(&cfg);
    let config = fleet.config.display().to_string();
    let (code, out, err) = gtd_capped(
        &cluster,
        &[
            "push",
            "--ramp",
            "--config",
            &config,
            "--steps",
            "50,100",
            "--min-wait",
            "3s",
            "--max-wait",
            "10s",
            "--bake",
            "0s",
            "--on-inconclusive",
            "proceed",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{out}{err}");
    // Once a node drives it and the first step is out, that node dies.
    let s = wait_ramp(
        &cluster,
        "a driver and step 1",
        Duration::from_secs(120),
        |s| s["owner"].is_string() && s["at"].as_u64() >= Some(1),
    );
    let first = s["owner"].as_str().unwrap().to_owned();
    let region = first.split('@').next().unwrap().to_owned();
    fleet.kill_node(&region);
    // Another takes it over and brings it to its end.
    let s = wait_ramp(&cluster, "the ramp's end", Duration::from_secs(300), |s| {
        s["state"] != "running"
    });
    drop(load);
    let text = String::from_utf8(gtd_as(&cluster, As::Pusher, &["ramp", "status"]).stdout).unwrap();
    assert_eq!(s["state"], "completed", "{text}");
    assert_ne!(s["owner"].as_str(), Some(first.as_str()), "{text}");
    assert!(
        text.contains(&format!("took the ramp over from {first}")),
        "{text}"
    );
}

#[test]
fn a_ramp_is_paused_resumed_and_aborted_from_the_command_line() {
    let cluster = Cluster::start();
    let (mut cfg, _endpoints, mut fleet, load) = ramp_fleet(&cluster);
    cfg.set_ratio("web/beijing", 100.0);
    fleet.rewrite(&cfg);
    let config = fleet.config.display().to_string();
    let ramp = |what: &str| {
        let out = gtd_as(&cluster, As::Pusher, &["ramp", what]);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    // Nothing to abort yet.
    assert_eq!(ramp("abort").0, Some(1));
    let (code, out, err) = gtd_capped(
        &cluster,
        &[
            "push",
            "--ramp",
            "--config",
            &config,
            "--steps",
            "10,50,100",
            "--min-wait",
            "30s",
            "--max-wait",
            "60s",
            "--bake",
            "0s",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{out}{err}");
    wait_ramp(&cluster, "step 1", Duration::from_secs(120), |s| {
        s["at"].as_u64() >= Some(1)
    });
    let (code, said) = ramp("pause");
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(ramp_status(&cluster)["state"], "paused");
    let (code, said) = ramp("resume");
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(ramp_status(&cluster)["state"], "running");
    let (code, said) = ramp("abort");
    assert_eq!(code, Some(0), "{said}");
    let s = wait_ramp(&cluster, "the abort", Duration::from_secs(120), |s| {
        s["state"] != "running"
    });
    drop(load);
    assert_eq!(s["state"], "aborted", "{s:#}");
    assert_eq!(s["at"], 0, "{s:#}");
    wait_applied(&fleet, s["revision"].as_u64().unwrap());
    for n in &fleet.nodes {
        let st = n.status();
        let beijing = st.listeners[0]
            .groups
            .iter()
            .find(|g| g.name == "beijing")
            .unwrap();
        assert_eq!(beijing.ratio, 50.0, "{}", n.region);
    }
    // Over: nothing to pause.
    assert_eq!(ramp("pause").0, Some(1));
}

#[test]
fn a_step_without_enough_traffic_holds_and_never_goes_back_on_its_own() {
    let cluster = Cluster::start();
    let (mut cfg, _endpoints, mut fleet, load) = ramp_fleet(&cluster);
    // The baseline was taken under load; the steps see none.
    drop(load);
    cfg.set_ratio("web/beijing", 100.0);
    fleet.rewrite(&cfg);
    let config = fleet.config.display().to_string();
    let (code, out, err) = gtd_capped(
        &cluster,
        &[
            "push",
            "--ramp",
            "--config",
            &config,
            "--steps",
            "50,100",
            "--min-wait",
            "1s",
            "--max-wait",
            "2s",
            "--hold-limit",
            "1h",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let s = wait_ramp(&cluster, "the step held", Duration::from_secs(120), |s| {
        s["phase"]["held"] == true
    });
    assert_eq!(s["state"], "running", "{s:#}");
    assert_eq!(s["at"], 1, "{s:#}");
    let text = String::from_utf8(gtd_as(&cluster, As::Pusher, &["ramp", "status"]).stdout).unwrap();
    assert!(
        text.contains("held: not enough traffic by --max-wait"),
        "{text}"
    );
    assert!(text.contains("sample 0/"), "{text}");
    // The driving node says it is held (what the GtdRampHeld alert reads).
    let owner = s["owner"].as_str().unwrap().to_owned();
    let driver = fleet
        .nodes
        .iter()
        .find(|n| owner.starts_with(&format!("{}@", n.region)))
        .expect("the owner is a node");
    wait("gtd_ramp_state 7 on the driving node", || {
        http(driver.admin, "GET", "/metrics").is_some_and(|(_, m)| m.contains("gtd_ramp_state 7"))
    });
    // Held: still on step 1 a while later, neither advanced nor gone back.
    std::thread::sleep(Duration::from_secs(3));
    let s = ramp_status(&cluster);
    assert_eq!(
        (s["state"].as_str(), s["at"].as_u64()),
        (Some("running"), Some(1)),
        "{s:#}"
    );
    let abort = gtd_as(&cluster, As::Pusher, &["ramp", "abort"]);
    assert!(abort.status.success());
    let s = wait_ramp(&cluster, "the abort", Duration::from_secs(120), |s| {
        s["state"] != "running"
    });
    assert_eq!(s["state"], "aborted", "{s:#}");
}

#[test]
fn a_node_that_does_not_apply_a_step_is_named_and_the_ramp_goes_back() {
    let cluster = Cluster::start();
    // Leases long enough that a frozen node stays registered through the step.
    let (mut cfg, _endpoints, mut fleet, load) = ramp_fleet_leased(&cluster, "90s");
    cfg.set_ratio("web/beijing", 100.0);
    fleet.rewrite(&cfg);
    let config = fleet.config.display().to_string();
    // Shanghai's node freezes (SIGSTOP) before the ramp: still registered, never applying.
    let frozen = fleet.node("cn-shanghai");
    let pid = frozen.child.0.id().to_string();
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid}");
    };
    signal("-STOP");
    let (code, out, err) = gtd_capped(
        &cluster,
        &[
            "push",
            "--ramp",
            "--follow",
            "--config",
            &config,
            "--steps",
            "50,100",
            "--min-wait",
            "1s",
            "--max-wait",
            "10s",
            "--bake",
            "0s",
        ],
        Duration::from_secs(300),
    );
    signal("-CONT");
    drop(load);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(
        out.contains("took: cn-shanghai@") && out.contains("still on revision 1"),
        "{out}"
    );
    assert!(out.contains("going back to the starting revision"), "{out}");
    let s = ramp_status(&cluster);
    assert_eq!(s["state"], "reverted", "{s:#}");
    assert_eq!(
        s["owner"].as_str().map(|o| o.starts_with("cn-beijing@")),
        Some(true)
    );
}

/// [`TWO_GROUPS`] with every endpoint checked over HTTP every second and the groups' RTTs timed
/// to the checks' answers (`rtt_from = "check"`): on loopback, where there is no distance, an
/// endpoint that answers late measures as far as its lateness.
fn checked_groups() -> String {
    TWO_GROUPS
        .replace(
            "affinity = \"none\"\n",
            "affinity = \"none\"\nrtt_from = \"check\"\n",
        )
        .replace(
            "    max_fails = 0\n",
            "    max_fails = 0\n  [listener.group.health_check]\n  protocol = \"http\"\n  \
             interval = \"1s\"\n",
        )
}

/// The lines of `text` that are a latency gate's for `region`'s node.
fn latency_lines<'a>(text: &'a str, region: &str) -> Vec<&'a str> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with(&format!("latency {region}@")))
        .collect()
}

/// The `RTT +N ms` a latency gate's line credits.
fn rtt_credit(line: &str) -> f64 {
    let at = line.find("RTT +").expect("an RTT credit") + 5;
    line[at..].split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_move_to_a_group_40_ms_farther_passes_the_latency_gate() {
    let cluster = Cluster::start_alone();
    // web/beijing answers 40 ms late, checks included: 40 ms farther, measured.
    let (mut cfg, _endpoints, mut fleet, load) = ramp_fleet_of(
        &cluster,
        &checked_groups(),
        "2s",
        (8, Duration::from_millis(3)),
        40,
    );
    wait("every node measuring web/beijing 35 ms farther", || {
        fleet.nodes.iter().all(|n| {
            let s = n.status();
            let rtt = |g: &str| {
                s.listeners[0]
                    .groups
                    .iter()
                    .find(|x| x.name == g)
                    .and_then(|x| x.rtt_ms)
                    .unwrap_or(0.0)
            };
            rtt("beijing") - rtt("shanghai") >= 35.0
        })
    });
    cfg.set_ratio("web/beijing", 100.0);
    fleet.rewrite(&cfg);
    let config = fleet.config.display().to_string();
    // The last step bakes 15 s: each node sends web/beijing 1,000 requests well within it.
    let (code, out, err) = gtd_capped(
        &cluster,
        &[
            "push",
            "--ramp",
            "--follow",
            "--config",
            &config,
            "--steps",
            "50,100",
            "--min-wait",
            "1s",
            "--max-wait",
            "30s",
            "--bake",
            "15s",
        ],
        Duration::from_secs(300),
    );
    drop(load);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("step 2/2 passed"), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
    // Every node's p99 to web/beijing was judged on the last step, and passed only with the
    // RTT difference credited: about 40 ms over web/shanghai's before the ramp.
    let last = &out[out.find("step 2/2 passed").unwrap()..];
    for n in &fleet.nodes {
        let lines = latency_lines(last, &n.region);
        assert_eq!(lines.len(), 1, "{last}");
        let line = lines[0];
        assert!(
            line.contains(" web/beijing: ") && line.ends_with("-> pass"),
            "{line}"
        );
        assert!(rtt_credit(line) >= 30.0, "{line}");
    }
    // The record says the same (gtd ramp status --json), and the history each step's verdict.
    let status = ramp_status(&cluster);
    assert_eq!(status["state"], "completed", "{status:#}");
    let logged = status["log"].to_string();
    assert!(logged.contains("latency cn-beijing@"), "{logged}");
    assert!(logged.contains("saturation: not judged"), "{logged}");
    wait_applied(&fleet, 3);
    let history =
        String::from_utf8(gtd_as(&cluster, As::Pusher, &["fleet", "history"]).stdout).unwrap();
    assert!(history.contains("after step 1 passed"), "{history}");
    assert!(history.contains(", latency "), "{history}");
}

#[test]
fn a_receiving_group_that_turns_300_ms_slower_fails_the_latency_gate_and_the_ramp_goes_back() {
    let cluster = Cluster::start_alone();
    // Many slow requests in flight per node: 1,000 answers from a 300 ms group in seconds.
    let (mut cfg, endpoints, mut fleet, load) = ramp_fleet_of(
        &cluster,
        TWO_GROUPS,
        "2s",
        (40, Duration::from_millis(100)),
        0,
    );
    cfg.set_ratio("web/beijing", 100.0);
    fleet.rewrite(&cfg);
    let config = fleet.config.display().to_string();
    // From step 2 (revision 3) web/beijing answers 300 ms late; its RTT (the connect) stays.
    let flip = set_on_revision(&fleet, 3, Arc::clone(&endpoints[0].delay), 300);
    // Step 2's p99, over its limit before it has 1,000 samples, keeps the step from passing
    // on the errors gate's sample until it is judged.
    let (code, out, err) = gtd_capped(
        &cluster,
        &[
            "push",
            "--ramp",
            "--follow",
            "--config",
            &config,
            "--steps",
            "20,50,100",
            "--min-wait",
            "1s",
            "--max-wait",
            "30s",
            "--bake",
            "0s",
        ],
        Duration::from_secs(300),
    );
    let _ = flip.join();
    drop(load);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(out.contains("step 1/3 passed"), "{out}");
    assert!(out.contains("step 2 failed the latency gate"), "{out}");
    assert!(!out.contains("failed the errors gate"), "{out}");
    // Not severe: down the steps taken, then the start.
    assert!(
        out.contains("going back down the steps, to step 1"),
        "{out}"
    );
    let failed = out
        .lines()
        .find(|l| l.trim().starts_with("latency ") && l.ends_with("-> FAIL"))
        .expect("a failed latency line");
    assert!(failed.contains(" web/beijing: "), "{failed}");
    let status = ramp_status(&cluster);
    assert_eq!(status["state"], "reverted", "{status:#}");
    assert_eq!(status["at"], 0, "{status:#}");
    assert!(
        status["outcome"].as_str().unwrap().starts_with("latency "),
        "{status:#}"
    );
    wait_applied(&fleet, status["revision"].as_u64().unwrap());
    for n in &fleet.nodes {
        let s = n.status();
        let beijing = s.listeners[0]
            .groups
            .iter()
            .find(|g| g.name == "beijing")
            .unwrap();
        assert_eq!(beijing.ratio, 50.0, "{}", n.region);
    }
}

#[test]
fn a_receiving_group_taking_more_than_its_capacity_fails_the_saturation_gate() {
    let cluster = Cluster::start();
    // web/beijing can carry 20 requests a second, by the config; the load sends it hundreds.
    let text = TWO_GROUPS.replace(
        "  name = \"beijing\"\n",
        "  name = \"beijing\"\n  capacity = 20\n",
    );
    let (mut cfg, _endpoints, mut fleet, load) = ramp_fleet_of(&cluster, &text, "2s", STEADY, 0);
    cfg.set_ratio("web/beijing", 100.0);
    fleet.rewrite(&cfg);
    let config = fleet.config.display().to_string();
    let (code, out, err) = gtd_capped(
        &cluster,
        &[
            "push",
            "--ramp",
            "--follow",
            "--config",
            &config,
            "--steps",
            "50,100",
            "--min-wait",
            "2s",
            "--max-wait",
            "30s",
            "--bake",
            "0s",
        ],
        Duration::from_secs(300),
    );
    drop(load);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(out.contains("step 1 failed the saturation gate"), "{out}");
    let failed = out
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("saturation web/beijing: ") && l.ends_with("-> FAIL"))
        .expect("a failed saturation line");
    assert!(failed.contains("vs capacity 20"), "{failed}");
    let status = ramp_status(&cluster);
    assert_eq!(status["state"], "reverted", "{status:#}");
    assert_eq!(status["at"], 0, "{status:#}");
}

#[test]
fn a_plain_push_during_a_ramp_is_refused_unless_forced() {
    let cluster = Cluster::start();
    let (mut cfg, _endpoints, mut fleet, load) = ramp_fleet(&cluster);
    cfg.set_ratio("web/beijing", 100.0);
    fleet.rewrite(&cfg);
    let config = fleet.config.display().to_string();
    // A ramp that stays on its first step: a long --min-wait.
    let (code, out, err) = gtd_capped(
        &cluster,
        &[
            "push",
            "--ramp",
            "--config",
            &config,
            "--steps",
            "10,100",
            "--min-wait",
            "10m",
            "--max-wait",
            "20m",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let s = wait_ramp(&cluster, "step 1", Duration::from_secs(120), |s| {
        s["at"].as_u64() >= Some(1)
    });
    let step = s["revision"].as_u64().unwrap();
    let id = s["id"].as_str().unwrap().to_owned();

    // Another config pushed plainly: refused, naming the ramp and how to end it.
    cfg.set_ratio("web/beijing", 30.0);
    fleet.rewrite(&cfg);
    let plain = |extra: &[&str]| {
        let mut args = vec!["push", "--config", &config];
        args.extend_from_slice(extra);
        gtd_capped(&cluster, &args, Duration::from_secs(60))
    };
    let (code, out, err) = plain(&[]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains(&format!("refused: ramp {id} is running (step 1/2")),
        "{err}"
    );
    assert!(err.contains("gtd ramp abort"), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert!(err.contains("nothing was published"), "{err}");
    // So is a rollback, and a dry run says it would be.
    let (code, out, err) = plain(&["--rollback"]);
    assert_eq!(code, Some(2), "{out}{err}");
    let (code, out, err) = plain(&["--dry-run"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("this push would be refused"), "{out}");
    // --ramp --force is not a combination gtd takes.
    let (code, _, err) = plain(&["--ramp", "--force"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    // Nothing was published: the ramp's step is still the latest revision, and it runs.
    let s = ramp_status(&cluster);
    assert_eq!(
        (s["state"].as_str(), s["revision"].as_u64()),
        (Some("running"), Some(step)),
        "{s:#}"
    );
    let latest = fleet_json(&cluster)["latest"]["revision"].as_u64();
    assert_eq!(latest, Some(step));

    // --force stops the ramp where it is and publishes, in one transaction.
    let (code, out, err) = plain(&["--force"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains(&format!("ramp {id} stopped at step 1/2")),
        "{out}"
    );
    assert!(
        out.contains(&format!("published revision {} ", step + 1)),
        "{out}"
    );
    let s = ramp_status(&cluster);
    assert_eq!(s["state"], "aborted", "{s:#}");
    assert!(
        s["outcome"]
            .as_str()
            .unwrap()
            .starts_with("stopped by gtd push --force at step 1/2"),
        "{s:#}"
    );
    // The driving node publishes nothing more: the fleet serves the forced revision.
    wait_applied(&fleet, step + 1);
    drop(load);
    for n in &fleet.nodes {
        let st = n.status();
        let beijing = st.listeners[0]
            .groups
            .iter()
            .find(|g| g.name == "beijing")
            .unwrap();
        assert_eq!(beijing.ratio, 30.0, "{}", n.region);
    }
    assert_eq!(
        fleet_json(&cluster)["latest"]["revision"].as_u64(),
        Some(step + 1)
    );
}

#[test]
fn the_dashboards_fleet_tab_shows_a_held_ramp_and_its_end() {
    let Some(exe) = crate::cdp::chromium_or_skip("the_dashboards_fleet_tab_shows_a_held_ramp")
    else {
        return;
    };
    let cluster = Cluster::start();
    let (mut cfg, _endpoints, mut fleet, load) = ramp_fleet(&cluster);
    // The baseline was taken under load; the steps see none: step 1 holds.
    drop(load);
    cfg.set_ratio("web/beijing", 100.0);
    fleet.rewrite(&cfg);
    let config = fleet.config.display().to_string();
    // The message is the operator's text: the page shows it as text, never as markup.
    let message = "<img src=x onerror=alert(1)><b>to beijing</b>";
    let (code, out, err) = gtd_capped(
        &cluster,
        &[
            "push",
            "--ramp",
            "--config",
            &config,
            "--steps",
            "50,100",
            "--min-wait",
            "1s",
            "--max-wait",
            "2s",
            "--hold-limit",
            "1h",
            "-m",
            message,
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let s = wait_ramp(&cluster, "the step held", Duration::from_secs(120), |s| {
        s["phase"]["held"] == true
    });
    let id = s["id"].as_str().unwrap().to_owned();
    // `gtd fleet --json` (what GET /fleet serves) carries the ramp's view.
    let doc = fleet_json(&cluster);
    assert_eq!(doc["ramp"]["id"], id.as_str(), "{doc:#}");
    assert_eq!(doc["ramp"]["held"], true, "{doc:#}");
    assert_eq!(doc["ramp"]["gauge"], 7, "{doc:#}");
    assert_eq!(doc["ramp"]["steps"], serde_json::json!([50.0, 100.0]));
    // And `gtd fleet` says it in a line.
    let table = String::from_utf8(gtd_as(&cluster, As::Pusher, &["fleet"]).stdout).unwrap();
    assert!(
        table.contains(&format!("ramp {id} · held · step 1/2 · driven by ")),
        "{table}"
    );

    let browser = crate::cdp::Browser::start(&exe);
    let mut page = browser.page();
    page.navigate(&format!("http://{}/", fleet.nodes[0].admin));
    page.wait_for("the fleet tab", "!document.getElementById('tabs').hidden");
    page.click("#tab-fleet");
    page.wait_for(
        "the held ramp in the fleet tab",
        "document.querySelector('#fleet [data-ramp-state=\"held\"]') !== null",
    );
    let head = page_text(
        &mut page,
        "document.querySelector('#fleet [data-ramp]').textContent",
    );
    assert!(head.contains(&format!("Ramp {id}held")), "{head}");
    assert!(head.contains("step 1 of 2 · 50 % of the move"), "{head}");
    assert!(head.contains(&format!("({message})")), "{head}");
    let why = page_text(
        &mut page,
        "document.querySelector('#fleet [data-ramp-why]').textContent",
    );
    assert!(
        why.starts_with("held: not enough traffic by --max-wait to judge step 1"),
        "{why}"
    );
    // The plan, the step the fleet is on marked.
    let on = page_text(
        &mut page,
        "document.querySelector('#fleet .plan li.on').dataset.step",
    );
    assert_eq!(on, "1");
    // The last verdict with every gate's line: took per node, errors, saturation.
    let gates = page.eval(
        "[...document.querySelectorAll('#fleet [data-ramp-verdict] li')].map(l => l.dataset.gate + ' ' + l.textContent)",
    );
    let gates: Vec<&str> = gates
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap())
        .collect();
    for n in &fleet.nodes {
        assert!(
            gates
                .iter()
                .any(|g| g.starts_with(&format!("took took {}@", n.region))),
            "{gates:#?}"
        );
    }
    assert!(
        gates
            .iter()
            .any(|g| g.starts_with("errors errors web/beijing: ") && g.contains("sample 0/")),
        "{gates:#?}"
    );
    assert!(
        gates
            .iter()
            .any(|g| g.starts_with("saturation saturation: not judged")),
        "{gates:#?}"
    );
    // No markup from the message: no element it would have made.
    let made = page.eval("document.querySelectorAll('#fleet img, #fleet b').length");
    assert_eq!(made, 0);
    screenshot_to(&mut page, "dashboard-ramp-held.png");

    // Aborted: the tab shows the end and its outcome at its next poll.
    assert!(
        gtd_as(&cluster, As::Pusher, &["ramp", "abort"])
            .status
            .success()
    );
    wait_ramp(&cluster, "the abort", Duration::from_secs(120), |s| {
        s["state"] == "aborted"
    });
    page.wait_for(
        "the aborted ramp in the fleet tab",
        "document.querySelector('#fleet [data-ramp-state=\"aborted\"]') !== null",
    );
    let outcome = page_text(
        &mut page,
        "document.querySelector('#fleet [data-ramp-outcome]').textContent",
    );
    assert_eq!(outcome, "outcome: aborted by gtd ramp abort");
    let head = page_text(
        &mut page,
        "document.querySelector('#fleet [data-ramp]').textContent",
    );
    assert!(
        head.contains("step 0 of 2 · the starting revision"),
        "{head}"
    );
    assert!(page.problems.is_empty(), "{:#?}", page.problems);
}

/// The string `expr` evaluates to on `page`.
fn page_text(page: &mut crate::cdp::Page, expr: &str) -> String {
    page.eval(expr).as_str().unwrap_or_default().to_owned()
}

/// Writes `page`'s screenshot beside the test binaries, as the other dashboard tests do.
fn screenshot_to(page: &mut crate::cdp::Page, name: &str) {
    let png = page.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join(name);
    std::fs::write(&path, png).unwrap();
    println!("screenshot: {}", path.display());
}

/// web/beijing's decisions the fleet's nodes served, summed.
fn beijing_served(fleet: &Fleet) -> u64 {
    fleet
        .nodes
        .iter()
        .map(|n| {
            n.status().listeners[0]
                .groups
                .iter()
                .find(|g| g.name == "beijing")
                .and_then(|g| g.served)
                .unwrap_or(0)
        })
        .sum()
}

#[test]
fn a_drain_during_a_ramp_holds_its_step_and_fails_no_gate() {
    let cluster = Cluster::start();
    let (mut cfg, _endpoints, mut fleet, load) = ramp_fleet(&cluster);
    cfg.set_ratio("web/beijing", 100.0);
    fleet.rewrite(&cfg);
    let config = fleet.config.display().to_string();
    let (code, out, err) = gtd_capped(
        &cluster,
        &[
            "push",
            "--ramp",
            "--config",
            &config,
            "--steps",
            "50,100",
            "--min-wait",
            "5s",
            "--max-wait",
            "60s",
            "--bake",
            "0s",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{out}{err}");
    wait_ramp(&cluster, "step 1", Duration::from_secs(120), |s| {
        s["at"].as_u64() >= Some(1)
    });
    // An emergency: every endpoint of web/shanghai drained fleet-wide. Every node's share of
    // web/beijing becomes 100 %, which step 1 did not predict.
    let drain = gtd_as(
        &cluster,
        As::Pusher,
        &["drain", "web/shanghai", "-m", "shanghai on fire"],
    );
    assert!(drain.status.success(), "{drain:?}");
    let s = wait_ramp(&cluster, "the drain seen", Duration::from_secs(120), |s| {
        s["drained"] == true || s["phase"]["phase"] != "judging" && s["at"] != 1
    });
    assert_eq!(
        (
            s["drained"].as_bool(),
            s["state"].as_str(),
            s["at"].as_u64()
        ),
        (Some(true), Some("running"), Some(1)),
        "{s:#}"
    );
    // Well past what judging the step takes (the errors gate's ~1,230 attempts, --min-wait):
    // nothing judged, nothing failed, still step 1.
    let from = beijing_served(&fleet);
    wait("3,000 more decisions for web/beijing", || {
        beijing_served(&fleet) >= from + 3000
    });
    let s = ramp_status(&cluster);
    assert_eq!(
        (
            s["state"].as_str(),
            s["at"].as_u64(),
            s["drained"].as_bool()
        ),
        (Some("running"), Some(1), Some(true)),
        "{s:#}"
    );
    let text = String::from_utf8(gtd_as(&cluster, As::Pusher, &["ramp", "status"]).stdout).unwrap();
    assert!(!text.contains("failed"), "{text}");
    assert!(
        text.contains("drained: the fleet-wide drains on the ramp's listeners changed during step 1 (now web/shanghai; the plan assumed none)"),
        "{text}"
    );
    // The drain ends: the step's window starts again and the ramp completes.
    let undrain = gtd_as(&cluster, As::Pusher, &["undrain", "web/shanghai"]);
    assert!(undrain.status.success(), "{undrain:?}");
    let s = wait_ramp(&cluster, "the ramp's end", Duration::from_secs(300), |s| {
        s["state"] != "running"
    });
    drop(load);
    let text = String::from_utf8(gtd_as(&cluster, As::Pusher, &["ramp", "status"]).stdout).unwrap();
    assert_eq!(s["state"], "completed", "{text}");
    assert!(
        text.contains("the drains are as planned again (none): step 1's window starts again"),
        "{text}"
    );
    assert!(text.contains("step 1/2 passed"), "{text}");
    assert!(!text.contains("FAIL"), "{text}");
}
