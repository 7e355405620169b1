//! The `gtd` binary as people use it (docs/operations.md, "The command line"): the fleet
//! commands' options taken after a subcommand too, the etcd endpoints from `GTD_ETCD` when no
//! `--etcd` gives them, and the shell completions and manual pages written from the clap
//! definitions. Each test runs the real binary; the fleet's run against a one-member etcd on
//! loopback (Debian's `etcd-server`), started and stopped here by its own PID.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `gtd ARGS` with `GTD_ETCD` set to `env` (or unset), in a clean etcd environment.
fn gtd(env: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gtd"));
    c.args(args)
        .env_remove("GTD_ETCD")
        .env_remove("GTD_ETCD_PASSWORD")
        .stdin(Stdio::null());
    if let Some(v) = env {
        c.env("GTD_ETCD", v);
    }
    c.output().expect("run gtd")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// What `gtd` printed, both streams, for assertion messages.
fn said(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    )
}

/// `https://` without `--etcd-cacert` is refused before anything connects, naming the
/// endpoint: what tells, without an etcd, which endpoints a command was given.
const TLS_WITHOUT_CA: &str = "https://127.0.0.1:1";

#[test]
fn fleet_options_are_taken_after_the_subcommand_too() {
    for args in [
        &["fleet", "history", "--etcd", TLS_WITHOUT_CA][..],
        &["fleet", "--etcd", TLS_WITHOUT_CA, "history", "--limit", "2"],
        &[
            "fleet",
            "diff",
            "1",
            "2",
            "--etcd",
            TLS_WITHOUT_CA,
            "--prefix",
            "/x",
        ],
        &["fleet", "forget", "n", "--etcd", TLS_WITHOUT_CA, "--json"],
        &["fleet", "history", "--json", "--etcd", TLS_WITHOUT_CA],
        &["push", "--dry-run", "--etcd", TLS_WITHOUT_CA],
        &[
            "drain",
            "web/beijing",
            "--etcd",
            TLS_WITHOUT_CA,
            "-m",
            "disk",
        ],
        &["undrain", "web/beijing", "--etcd", TLS_WITHOUT_CA],
    ] {
        let o = gtd(None, args);
        let err = text(&o.stderr);
        // Parsed (clap's refusal would say `error: unexpected argument`), then refused by
        // gtd's own check of the endpoint.
        assert!(
            !err.contains("unexpected argument") && err.contains(TLS_WITHOUT_CA),
            "{args:?}: {}",
            said(&o)
        );
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", said(&o));
    }
}

#[test]
fn the_endpoints_come_from_gtd_etcd_when_no_flag_gives_them() {
    // From the environment.
    let o = gtd(Some(TLS_WITHOUT_CA), &["fleet", "history"]);
    assert!(text(&o.stderr).contains(TLS_WITHOUT_CA), "{}", said(&o));
    // A flag wins over the environment.
    let o = gtd(
        Some("https://127.0.0.9:9"),
        &["fleet", "--etcd", TLS_WITHOUT_CA],
    );
    let err = text(&o.stderr);
    assert!(
        err.contains(TLS_WITHOUT_CA) && !err.contains("127.0.0.9"),
        "{}",
        said(&o)
    );
    // Neither: refused, naming both ways, exit status 2.
    for args in [&["fleet"][..], &["push"], &["drain", "web/beijing"]] {
        let o = gtd(None, args);
        let err = text(&o.stderr);
        assert!(
            err.contains("--etcd") && err.contains("GTD_ETCD"),
            "{args:?}: {}",
            said(&o)
        );
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", said(&o));
    }
}

#[test]
fn completions_are_written_for_each_shell_from_the_command_line() {
    let cases = [
        ("bash", "_gtd()"),
        ("zsh", "#compdef gtd"),
        ("fish", "complete -c gtd"),
        ("elvish", "edit:completion:arg-completer[gtd]"),
        ("powershell", "Register-ArgumentCompleter"),
    ];
    for (shell, mark) in cases {
        let o = gtd(None, &["completions", shell]);
        assert!(o.status.success(), "{shell}: {}", said(&o));
        let script = text(&o.stdout);
        assert!(script.contains(mark), "{shell}: no {mark:?}");
        // Every subcommand, nested ones, and options (`--etcd`, fish's `-l etcd`).
        for word in [
            "run", "push", "fleet", "history", "forget", "drain", "undrain", "check", "explain",
            "etcd", "rollback", "limit",
        ] {
            assert!(script.contains(word), "{shell}: no {word:?}");
        }
    }
    // bash: the options of `gtd fleet history` include the global ones.
    let bash = text(&gtd(None, &["completions", "bash"]).stdout);
    let history = bash
        .split("gtd__subcmd__fleet__subcmd__history)")
        .nth(1)
        .expect("a case for gtd fleet history");
    let opts = history.lines().find(|l| l.contains("opts=")).expect("opts");
    for word in ["--limit", "--etcd", "--prefix", "--json", "--etcd-cacert"] {
        assert!(opts.contains(word), "gtd fleet history: no {word}: {opts}");
    }
    let o = gtd(None, &["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2), "{}", said(&o));
}

/// `gtd completions bash | head` and `gtd man | head`: a reader that stops early ends the
/// output quietly (exit 0), not with a panic's backtrace (clap_complete panicked on the broken
/// pipe) or an error.
#[test]
fn a_reader_that_stops_early_gets_no_panic() {
    for args in [&["completions", "bash"][..], &["man"][..]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gtd"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The pipe's reading end goes before gtd writes: every write finds no reader.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = text(&out.stderr);
        assert!(
            out.status.success(),
            "gtd {args:?}: {:?}\n{err}",
            out.status
        );
        assert!(!err.contains("panicked"), "gtd {args:?}: {err}");
    }
}

#[test]
fn the_manual_pages_are_written_from_the_command_line() {
    let o = gtd(None, &["man"]);
    assert!(o.status.success(), "{}", said(&o));
    let page = text(&o.stdout);
    assert!(page.contains(".TH gtd 1"), "{page}");
    assert!(
        page.contains(".SH NAME") && page.contains(".SH SUBCOMMANDS"),
        "{page}"
    );
    for command in ["run", "push", "fleet", "drain", "completions", "man"] {
        assert!(
            page.contains(&format!("gtd\\-{command}(1)")),
            "gtd(1) does not list {command}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    let o = gtd(None, &["man", "--dir", &out.display().to_string()]);
    assert!(o.status.success(), "{}", said(&o));
    for page in ["gtd.1", "gtd-fleet.1", "gtd-fleet-history.1", "gtd-push.1"] {
        assert!(out.join(page).is_file(), "no {page}");
    }
    let history = std::fs::read_to_string(out.join("gtd-fleet-history.1")).unwrap();
    for word in ["\\-\\-limit", "\\-\\-etcd", "GTD_ETCD"] {
        assert!(history.contains(word), "gtd-fleet-history(1): no {word}");
    }
}

/// A one-member etcd on loopback, in a temp dir, stopped by its own PID when dropped.
struct Etcd {
    child: Child,
    client: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Etcd {
    fn start() -> Etcd {
        let port = || {
            TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
        };
        let (client, peer) = (port(), port());
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new("etcd")
            .args(["--name", "cli"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &format!("http://{client}")])
            .args(["--advertise-client-urls", &format!("http://{client}")])
            .args(["--listen-peer-urls", &format!("http://{peer}")])
            .args(["--initial-advertise-peer-urls", &format!("http://{peer}")])
            .args(["--initial-cluster", &format!("cli=http://{peer}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcd (Debian: apt-get install etcd-server)");
        let etcd = Etcd {
            child,
            client,
            _dir: dir,
        };
        let start = Instant::now();
        while TcpStream::connect(client).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "etcd did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        etcd
    }

    fn url(&self) -> String {
        format!("http://{}", self.client)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `gtd ARGS` that must succeed; its stdout.
fn ok(env: Option<&str>, args: &[&str]) -> String {
    let o = gtd(env, args);
    assert!(o.status.success(), "{args:?}: {}", said(&o));
    text(&o.stdout)
}

#[test]
fn an_operator_pushes_and_reads_the_history_with_gtd_etcd_and_options_anywhere() {
    let etcd = Etcd::start();
    let url = etcd.url();
    let config = root().join("config.toml");
    let config = config.display().to_string();
    let env = Some(url.as_str());
    // GTD_ETCD alone, a prefix of its own.
    let out = ok(
        env,
        &[
            "push", "--config", &config, "--prefix", "/cli", "-m", "first",
        ],
    );
    assert!(out.contains("published revision 1 under /cli"), "{out}");
    // The options after the nested subcommand, the flag instead of the environment.
    let history = ok(
        None,
        &[
            "fleet", "history", "--etcd", &url, "--prefix", "/cli", "--json",
        ],
    );
    let doc: serde_json::Value = serde_json::from_str(&history).expect(&history);
    assert_eq!(doc["revisions"][0]["revision"], 1, "{doc:#}");
    assert_eq!(doc["revisions"][0]["message"], "first", "{doc:#}");
    // The same read with the options before the subcommand, the endpoints from GTD_ETCD.
    assert_eq!(
        ok(env, &["fleet", "--json", "--prefix", "/cli", "history"]),
        history
    );
    // `gtd fleet --json` is the typed document GET /fleet serves.
    let fleet: serde_json::Value =
        serde_json::from_str(&ok(env, &["fleet", "--prefix", "/cli", "--json"])).unwrap();
    assert_eq!(fleet["prefix"], "/cli");
    assert_eq!(fleet["latest"]["revision"], 1);
    assert_eq!(
        fleet["latest"]["pushed_by"].as_str().map(str::is_empty),
        Some(false)
    );
    // Nothing under the default prefix: the global --prefix reached the subcommand.
    let empty = ok(env, &["fleet", "history", "--json"]);
    let empty: serde_json::Value = serde_json::from_str(&empty).unwrap();
    assert_eq!(
        empty["revisions"].as_array().map(Vec::len),
        Some(0),
        "{empty:#}"
    );
}

/// The binary's own help names GTD_ETCD where the endpoints are taken.
#[test]
fn help_names_the_environment_variable() {
    for args in [&["push", "--help"][..], &["fleet", "history", "--help"]] {
        let out = ok(None, args);
        assert!(out.contains("GTD_ETCD"), "{args:?}: {out}");
    }
}
