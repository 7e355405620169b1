//! `deploy/etcd/etcd.env`: the settings a fleet's etcd members take, given to a real etcd as
//! Debian's etcd-server gives them (its environment): it takes every one of them and serves.
//! `deploy/etcd/roles.sh`: run against a real etcd, its roles let a node write what a node
//! writes and nothing else.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::read;

/// `KEY=VALUE` lines of an environment file (comments and blank lines skipped).
fn variables(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not KEY=VALUE: {l}"));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

#[test]
fn etcd_takes_every_shipped_setting_and_serves() {
    let vars = variables(&read("deploy/etcd/etcd.env"));
    let names: Vec<&str> = vars.iter().map(|(k, _)| k.as_str()).collect();
    assert!(names.contains(&"ETCD_AUTO_COMPACTION_MODE"), "{names:?}");
    assert!(
        names.contains(&"ETCD_AUTO_COMPACTION_RETENTION"),
        "{names:?}"
    );
    if Command::new("etcd").arg("--version").output().is_err() {
        panic!(
            "etcd is not installed (Debian: apt-get install etcd-server; tests/run.sh installs it)"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let port = |_| {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (client, peer) = (port(0), port(1));
    let log = dir.path().join("etcd.log");
    let mut etcd = Command::new("etcd")
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .args(["--name", "m1", "--data-dir"])
        .arg(dir.path().join("data"))
        .args([
            "--listen-client-urls",
            &format!("http://127.0.0.1:{client}"),
            "--advertise-client-urls",
            &format!("http://127.0.0.1:{client}"),
            "--listen-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
            "--initial-cluster",
            &format!("m1=http://127.0.0.1:{peer}"),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut text = String::new();
    while Instant::now() < deadline {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("ready to serve client requests") {
            break;
        }
        if let Ok(Some(status)) = etcd.try_wait() {
            panic!("etcd exited ({status}) with deploy/etcd/etcd.env:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = etcd.kill();
    let _ = etcd.wait();
    assert!(
        text.contains("ready to serve client requests"),
        "etcd did not start serving:\n{text}"
    );
    // etcd names each variable it took (one it does not know is a warning, a bad value an exit).
    for (k, v) in &vars {
        assert!(
            text.contains(&format!("recognized and used environment variable {k}={v}")),
            "etcd did not take {k}={v}:\n{text}"
        );
    }
}

/// A one-member etcd on loopback, stopped when dropped.
struct Single {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Single {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Single {
    fn start() -> Single {
        let dir = tempfile::tempdir().unwrap();
        let port = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let (client, peer) = (port(), port());
        let log = dir.path().join("etcd.log");
        let url = format!("http://127.0.0.1:{client}");
        let child = Command::new("etcd")
            .args(["--name", "m1", "--data-dir"])
            .arg(dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args([
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-cluster",
                &format!("m1=http://127.0.0.1:{peer}"),
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start etcd (Debian: apt-get install etcd-server)");
        let single = Single {
            child,
            url,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !single
            .etcdctl(None, &["endpoint", "health"])
            .status
            .success()
        {
            assert!(Instant::now() < deadline, "etcd did not start serving");
            std::thread::sleep(Duration::from_millis(100));
        }
        single
    }

    /// `etcdctl ARGS` as `user` (`NAME:PASSWORD`).
    fn etcdctl(&self, user: Option<&str>, args: &[&str]) -> std::process::Output {
        let mut c = Command::new("etcdctl");
        c.env("ETCDCTL_API", "3")
            .env("ETCDCTL_ENDPOINTS", &self.url);
        if let Some(u) = user {
            c.env("ETCDCTL_USER", u);
        }
        c.args(args)
            .output()
            .expect("run etcdctl (Debian: apt-get install etcd-client)")
    }
}

#[test]
fn the_shipped_roles_let_a_node_write_its_entry_and_expected_record_and_not_publish() {
    let etcd = Single::start();
    let script = super::root().join("deploy/etcd/roles.sh");
    let out = Command::new("sh")
        .arg(&script)
        .env("ETCDCTL_API", "3")
        .env("ETCDCTL_ENDPOINTS", &etcd.url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ok = |user: Option<&str>, args: &[&str]| {
        let out = etcd.etcdctl(user, args);
        assert!(
            out.status.success(),
            "etcdctl {args:?} as {user:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    for (user, role) in [
        ("root", "root"),
        ("pusher", "gtd-push"),
        ("node", "gtd-node"),
        ("driver", "gtd-node"),
    ] {
        ok(
            None,
            &["user", "add", &format!("{user}:pw"), "--interactive=false"],
        );
        ok(None, &["user", "grant-role", user, role]);
    }
    ok(None, &["user", "grant-role", "driver", "gtd-ramp"]);
    ok(None, &["auth", "enable"]);
    let node = Some("node:pw");
    for key in ["/gtd/nodes/a", "/gtd/expected/a", "/gtd/compaction"] {
        ok(node, &["put", key, "x"]);
    }
    ok(node, &["get", "--prefix", "/gtd/"]);
    let refused = etcd.etcdctl(node, &["put", "/gtd/revision", "1"]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("permission denied"),
        "{refused:?}"
    );
    ok(Some("pusher:pw"), &["put", "/gtd/revision", "1"]);
    ok(Some("pusher:pw"), &["del", "/gtd/expected/a"]);
    // A node may not own or write a ramp (nor publish its steps) without gtd-ramp; one with
    // it may, and still nothing else a pusher may.
    for key in [
        "/gtd/ramp-owner",
        "/gtd/ramp",
        "/gtd/revisions/000000000002",
    ] {
        let refused = etcd.etcdctl(node, &["put", key, "x"]);
        assert!(!refused.status.success(), "{key}: {refused:?}");
    }
    let driver = Some("driver:pw");
    for key in [
        "/gtd/ramp-owner",
        "/gtd/ramp",
        "/gtd/revision",
        "/gtd/revisions/000000000002",
        "/gtd/nodes/b",
    ] {
        ok(driver, &["put", key, "x"]);
    }
    ok(driver, &["del", "/gtd/revisions/000000000002"]);
    for key in ["/gtd/drains/x", "/gtd/other"] {
        let refused = etcd.etcdctl(driver, &["put", key, "x"]);
        assert!(!refused.status.success(), "{key}: {refused:?}");
    }
}
