//! The deployment units of `deploy/` (issue 19): the systemd unit and its settings file, the
//! container file and the Kubernetes manifests are parsed and their settings checked (reload by
//! SIGHUP, a stop longer than the drain, non-root, probes on `/healthz` at the admin port...),
//! and every gtd command line in them goes through the real binary's argument parser.
//!
//! Two runs per command line, neither of which starts a node or reaches etcd:
//! - `gtd ARGS --help`: clap reads the arguments in order and answers `--help` when it comes to
//!   it, so exit status 0 with the help text means every flag before it exists, every value
//!   parses (addresses, enums) and none is repeated. Conflicts and required flags are checked
//!   only at the end, which `--help` skips: so also
//! - `gtd ARGS`, changed only so that gtd stops right after clap accepted the whole line: in
//!   fleet mode, run in an empty directory with the etcd endpoints replaced by loopback's
//!   discard port (nothing listens there: refused at once), so that the node finds neither
//!   etcd nor a cached revision and says so, unless gtd refuses the line's etcd settings
//!   together first (`--etcd-key` without `--etcd-cert`); the line's endpoints are checked
//!   here with the crate's endpoint parser. In file mode, with the line's `--config` (if any)
//!   pointed at a file that does not exist. Clap's refusals begin `error:`, gtd's own `gtd:`
//!   with its message.
//!
//! deploy/prometheus's alerts go through `promtool check rules` and `promtool test rules`, and
//! every metric they and deploy/grafana's dashboard name is scraped from a real fleet node
//! (`prometheus.rs`).
//!
//! `systemd-analyze verify` and `security --offline` check the unit where systemd-analyze is
//! installed (required when CI=true: `.ci/run` installs it). `kubectl apply --dry-run=client`
//! is not used: without a cluster it cannot even map a kind (it asks the API server), so the
//! manifests are checked field by field here instead.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use yaml_rust2::{Yaml, YamlLoader};

mod container;
mod etcd;
mod kubernetes;
mod prometheus;
mod systemd;

const GTD: &str = env!("CARGO_BIN_EXE_gtd");
const SIM: &str = env!("CARGO_BIN_EXE_sim");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

// --- command lines -------------------------------------------------------------------------------

/// The value of `--flag` in `args` (`--flag V` or `--flag=V`).
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let eq = format!("{name}=");
    args.iter().enumerate().find_map(|(i, a)| {
        if a == name {
            args.get(i + 1).map(String::as_str)
        } else {
            a.strip_prefix(&eq)
        }
    })
}

/// `args` with `--flag`'s value replaced, or `--flag value` appended when absent.
fn with_flag(args: &[String], name: &str, value: &str) -> Vec<String> {
    let eq = format!("{name}=");
    let mut out = Vec::with_capacity(args.len() + 2);
    let mut replaced = false;
    let mut i = 0;
    while i < args.len() {
        if args[i] == name {
            out.extend([name.to_owned(), value.to_owned()]);
            replaced = true;
            i += 2;
            continue;
        }
        if args[i].starts_with(&eq) {
            out.push(format!("{eq}{value}"));
            replaced = true;
        } else {
            out.push(args[i].clone());
        }
        i += 1;
    }
    if !replaced {
        out.extend([name.to_owned(), value.to_owned()]);
    }
    out
}

/// `bin ARGS --help` exits 0 with the help of the subcommand: every flag known, every value
/// valid, none repeated.
fn parses_up_to_help(bin: &str, args: &[String], what: &str) {
    let out = Command::new(bin)
        .args(args)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("{what}: running {bin}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("Usage:"),
        "{what}: {bin} {args:?} is refused:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Checks one `gtd` command line of a unit, both ways (see the top of this file), each run in
/// a fresh empty directory.
fn gtd_accepts(args: &[String], what: &str) {
    assert!(!args.is_empty(), "{what}: no gtd arguments");
    parses_up_to_help(GTD, args, what);
    if args[0] == "run" && flag(args, "--etcd").is_none() {
        // Clap lets these through next to --config (see below), and gtd ignores them there.
        for fleet_only in ["--prefix", "--cache", "--node-id", "--lease-ttl"] {
            assert!(
                flag(args, fleet_only).is_none(),
                "{what}: {fleet_only} does nothing without --etcd"
            );
        }
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (args, expect) = match args[0].as_str() {
        "run" if flag(args, "--etcd").is_some() => {
            let etcd = flag(args, "--etcd").unwrap_or_default();
            gtd::fleet::Access::plain(&[etcd.to_owned()])
                .unwrap_or_else(|e| panic!("{what}: --etcd {etcd}: {e:#}"));
            if let Some(prefix) = flag(args, "--prefix") {
                gtd::fleet::normalise_prefix(prefix)
                    .unwrap_or_else(|e| panic!("{what}: --prefix {prefix}: {e:#}"));
            }
            if let Some(ttl) = flag(args, "--lease-ttl") {
                let d = gtd::config::parse_duration(ttl)
                    .unwrap_or_else(|e| panic!("{what}: --lease-ttl {ttl}: {e}"));
                assert!(d >= Duration::from_secs(2), "{what}: --lease-ttl {ttl}");
            }
            let args = with_flag(args, "--etcd", "127.0.0.1:9");
            // gtd's refusal of the etcd settings, or the node's (a JSON log line with
            // `--log-format json`).
            (
                args,
                vec![
                    "gtd: ".to_owned(),
                    "no cached revision to start from".to_owned(),
                ],
            )
        }
        // The default config.toml is absent from the empty directory; a --config of the line is
        // pointed at an absent file (only its value changes, so clap sees the same flags: with
        // --config present clap waives the `requires = "etcd"` of --cache and the like).
        "run" if flag(args, "--config").is_none() => {
            (args.to_vec(), vec!["config.toml".to_owned()])
        }
        "run" => {
            let absent = dir.path().join("absent.toml");
            let absent = absent.to_str().expect("UTF-8 temp path").to_owned();
            (with_flag(args, "--config", &absent), vec![absent])
        }
        other => panic!("{what}: gtd {other}: only `gtd run` lines are expected in a unit"),
    };
    let out = Command::new(GTD)
        .args(&args)
        .current_dir(dir.path())
        .env("RUST_BACKTRACE", "0")
        .env_remove("STATE_DIRECTORY")
        .output()
        .unwrap_or_else(|e| panic!("{what}: running gtd: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // clap's own rejections begin with `error:`; gtd's with `gtd:`.
    assert!(
        !out.status.success() && !stderr.starts_with("error:"),
        "{what}: gtd {args:?} should pass clap and stop at gtd's own check:\n{stderr}"
    );
    assert!(
        expect.iter().any(|e| stderr.contains(e.as_str())),
        "{what}: gtd {args:?} stopped elsewhere than expected ({expect:?}):\n{stderr}"
    );
    // No etcd member listens there: a node with nothing cached says so at once, without
    // waiting out an election that is not happening.
    assert!(
        !stderr.contains("electing a leader"),
        "{what}: gtd {args:?} took a refused connection for an election:\n{stderr}"
    );
}

#[test]
fn the_command_line_checks_catch_what_they_claim_to() {
    // Each half of `gtd_accepts` refuses what it is there for, so that a green run means the
    // units' lines were really read.
    let refused =
        |args: &[&str]| std::panic::catch_unwind(|| gtd_accepts(&strings(args), "probe")).is_err();
    assert!(refused(&["run", "--region", "r", "--bogus"]));
    assert!(refused(&[
        "run",
        "--region",
        "r",
        "--bind",
        "not-an-address"
    ]));
    assert!(refused(&["run", "--region", "r", "--log-format", "xml"]));
    // Passes `--help`, fails the full parse: a conflict and a missing `requires`.
    assert!(refused(&[
        "run", "--region", "r", "--etcd", "e:1", "--config", "c.toml"
    ]));
    assert!(refused(&["run", "--region", "r", "--cache", "/tmp/c.json"]));
    assert!(refused(&[
        "run",
        "--region",
        "r",
        "--config",
        "c.toml",
        "--node-id",
        "n"
    ]));
    assert!(refused(&["run", "--etcd", "e:1"]));
    // Refused by clap's value parsers, `--help` or not.
    assert!(refused(&[
        "run",
        "--region",
        "r",
        "--etcd",
        "e:1",
        "--lease-ttl",
        "1s"
    ]));
    assert!(refused(&["run", "--region", "r", "--etcd", "https://e:1"]));
    // And accepts what it should.
    gtd_accepts(&strings(&["run", "--region", "r"]), "file mode");
    gtd_accepts(
        &strings(&[
            "run",
            "--region",
            "r",
            "--etcd",
            "e:1,e:2",
            "--lease-ttl",
            "5s",
        ]),
        "fleet mode",
    );
}

// --- drains --------------------------------------------------------------------------------------

/// The longest listener `drain_timeout` of a config (what SIGTERM waits for at most).
fn longest_drain(config: &Path) -> Duration {
    let cfg =
        gtd::config::load(config, None).unwrap_or_else(|e| panic!("{}: {e}", config.display()));
    cfg.listeners
        .iter()
        .map(|l| l.drain_timeout)
        .max()
        .expect("a listener")
}

/// The drain a unit must outlast when it serves etcd's revisions: at least the default
/// `drain_timeout` (docs/configuration.md), and the shipped config's.
fn fleet_drain() -> Duration {
    longest_drain(&root().join("config.toml")).max(Duration::from_secs(30))
}

/// Every value is parsed by clap: a bad one is refused as clap refuses any (`error: invalid
/// value 'V' for '--flag <NAME>': why`, exit status 2), before anything is read or connected.
#[test]
fn bad_values_are_refused_by_the_argument_parser() {
    for (args, says) in [
        (
            &["run", "--region", "r", "--etcd", "e:1", "--lease-ttl", "1x"][..],
            "invalid value '1x' for '--lease-ttl <TTL>': unknown unit \"x\"; use an integer",
        ),
        (
            &["run", "--region", "r", "--etcd", "e:1", "--lease-ttl", "1s"],
            "invalid value '1s' for '--lease-ttl <TTL>': at least 2s (etcd counts leases in \
             seconds)",
        ),
        (
            &["run", "--region", "r", "--etcd", "e:1", "--prefix", "gtd"],
            "invalid value 'gtd' for '--prefix <PREFIX>': a key prefix starts with / (e.g. /gtd)",
        ),
        (
            &["fleet", "--etcd", "e:1,h"],
            "invalid value 'e:1,h' for '--etcd <URL,...>': h: expected host:port, \
             http://host:port or https://host:port",
        ),
        (
            &["push", "--etcd", ",,"],
            "invalid value ',,' for '--etcd <URL,...>': no endpoint given",
        ),
        (
            &["demo", "--duration", "1.5s"],
            "invalid value '1.5s' for '--duration <DURATION>': fractions are not allowed",
        ),
        (
            &["demo", "--rate", "0"],
            "invalid value '0' for '--rate <RATE>': the demo needs at least one decision a second",
        ),
        (
            &["demo", "--stop", "beijing"],
            "invalid value 'beijing' for '--stop <GROUP@TIME>': expected GROUP@TIME, like \
             beijing@10s",
        ),
        (
            &["demo", "--start", "beijing@soon"],
            "invalid value 'beijing@soon' for '--start <GROUP@TIME>': use an integer followed by",
        ),
    ] {
        let out = Command::new(GTD).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(says),
            "{args:?}: {says:?} not in\n{stderr}"
        );
    }
    // Except an endpoint with user info, which clap would quote, password and all: gtd refuses
    // it without echoing it.
    for etcd in ["root:s3cret@h:1", "h:1,bad,root:s3cret@h:2"] {
        let out = Command::new(GTD)
            .args(["fleet", "--etcd", etcd])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.starts_with("gtd: --etcd: an endpoint with user info")
                && !stderr.contains("s3cret"),
            "{stderr}"
        );
    }
}

/// A fleet flag next to `--config` would have no effect: it is refused, naming the flag, rather
/// than silently ignored (clap's `requires` cannot say it: `--etcd` conflicts with `--config`).
#[test]
fn fleet_flags_without_etcd_are_refused() {
    for flag in [
        ["--cache", "/tmp/x.json"],
        ["--node-id", "a"],
        ["--lease-ttl", "5s"],
        ["--prefix", "/gtd"],
    ] {
        let out = Command::new(GTD)
            .args(["run", "--config", "absent.toml", "--region", "cn-beijing"])
            .args(flag)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag:?}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "gtd: {} is a fleet setting: it needs --etcd",
                flag[0]
            )),
            "{flag:?}: {stderr}"
        );
    }
}
