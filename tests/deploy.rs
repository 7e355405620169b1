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
//!   fleet mode `--lease-ttl 1s`, which gtd refuses before any connection (the real lease value,
//!   when there is one, is parsed here with the crate's own duration parser; the etcd
//!   endpoints, with the crate's endpoint parser, and replaced by loopback's discard port
//!   anyway); in file mode, run in an empty directory, with the line's `--config` (if any)
//!   pointed at a file that does not exist. Clap's refusals begin `error:`, gtd's own `gtd:`
//!   with its message.
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
            gtd::fleet::endpoints(&[etcd.to_owned()])
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
            let args = with_flag(
                &with_flag(args, "--etcd", "127.0.0.1:9"),
                "--lease-ttl",
                "1s",
            );
            (args, "--lease-ttl 1s: at least 2s".to_owned())
        }
        // The default config.toml is absent from the empty directory; a --config of the line is
        // pointed at an absent file (only its value changes, so clap sees the same flags: with
        // --config present clap waives the `requires = "etcd"` of --cache and the like).
        "run" if flag(args, "--config").is_none() => (args.to_vec(), "config.toml".to_owned()),
        "run" => {
            let absent = dir.path().join("absent.toml");
            let absent = absent.to_str().expect("UTF-8 temp path").to_owned();
            (with_flag(args, "--config", &absent), absent)
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
        stderr.contains(&expect),
        "{what}: gtd {args:?} stopped elsewhere than expected ({expect}):\n{stderr}"
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

// --- systemd -------------------------------------------------------------------------------------

/// A unit file as (section, key, value), in order; continuation lines joined.
fn ini(text: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with(';'))
        {
            continue;
        }
        if let Some(cont) = line.strip_suffix('\\') {
            pending.push_str(cont);
            pending.push(' ');
            continue;
        }
        let full = std::mem::take(&mut pending) + line;
        if let Some(name) = full.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        let (k, v) = full
            .split_once('=')
            .unwrap_or_else(|| panic!("not KEY=VALUE: {full}"));
        out.push((section.clone(), k.trim().to_owned(), v.trim().to_owned()));
    }
    out
}

/// The last value of `key` in `section` (systemd: a later assignment wins).
fn unit_value<'a>(unit: &'a [(String, String, String)], section: &str, key: &str) -> &'a str {
    unit.iter()
        .rev()
        .find(|(s, k, _)| s == section && k == key)
        .map(|(_, _, v)| v.as_str())
        .unwrap_or_else(|| panic!("gtd.service: [{section}] {key}= missing"))
}

/// An EnvironmentFile: KEY=VALUE lines (comments and blank lines skipped, quotes removed).
fn env_file(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap_or_else(|| panic!("gtd.env: {l}"));
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v);
            (k.trim().to_owned(), v.to_owned())
        })
        .collect()
}

/// A command line as systemd expands it: `${X}` is replaced inside its word, a word that is
/// `$X` alone becomes the value's whitespace-separated words (none when it is empty).
fn systemd_expand(line: &str, env: &BTreeMap<String, String>) -> Vec<String> {
    let var = |name: &str| {
        env.get(name)
            .unwrap_or_else(|| panic!("${name} is not set in gtd.env"))
            .clone()
    };
    let mut out = Vec::new();
    for word in line.split_whitespace() {
        assert!(
            !word.contains('"') && !word.contains('\''),
            "quoting in ExecStart is not expanded here: {word}"
        );
        if let Some(name) = word.strip_prefix('$').filter(|n| !n.starts_with('{')) {
            out.extend(var(name).split_whitespace().map(str::to_owned));
            continue;
        }
        let mut w = word.to_owned();
        while let Some(start) = w.find("${") {
            let end = w[start..].find('}').expect("unclosed ${") + start;
            let value = var(&w[start + 2..end]);
            w.replace_range(start..=end, &value);
        }
        out.push(w);
    }
    out
}

/// The gtd arguments of an `ExecStart=` value, after the binary.
fn gtd_args(exec: &str, env: &BTreeMap<String, String>) -> Vec<String> {
    let words = systemd_expand(exec, env);
    assert_eq!(
        words.first().map(String::as_str),
        Some("/usr/local/bin/gtd"),
        "ExecStart runs the installed binary: {exec}"
    );
    words[1..].to_vec()
}

fn seconds(v: &str, what: &str) -> Duration {
    gtd::config::parse_duration(v).unwrap_or_else(|e| panic!("{what}={v}: {e}"))
}

#[test]
fn systemd_unit_has_every_required_setting() {
    let unit = ini(&read("deploy/systemd/gtd.service"));
    let s = |k| unit_value(&unit, "Service", k);
    assert!(matches!(s("Type"), "exec" | "simple"), "Type={}", s("Type"));
    assert_eq!(s("EnvironmentFile"), "/etc/gtd/gtd.env");
    assert!(
        s("ExecStart").starts_with("/usr/local/bin/gtd run "),
        "ExecStart={}",
        s("ExecStart")
    );
    assert_eq!(s("ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(s("KillSignal"), "SIGTERM");
    // The drain is the stop: systemd must not SIGKILL it short.
    let stop = seconds(s("TimeoutStopSec"), "TimeoutStopSec");
    assert!(
        stop > fleet_drain() + Duration::from_secs(5),
        "TimeoutStopSec={stop:?} is not above the drain with a margin"
    );
    assert_eq!(s("Restart"), "on-failure");
    // Restarts slower than systemd's default start limit (5 in 10 s) allows, or a node waiting
    // for etcd would be given up on for good.
    let restart = seconds(s("RestartSec"), "RestartSec");
    assert!(
        restart * 5 > Duration::from_secs(10),
        "RestartSec={restart:?}"
    );
    let nofile: u64 = s("LimitNOFILE").parse().expect("LimitNOFILE is a number");
    assert!(nofile >= 1 << 20, "LimitNOFILE={nofile}");
    // The revision cache: gtd reads $STATE_DIRECTORY, which StateDirectory= sets.
    assert_eq!(s("StateDirectory"), "gtd");
    assert_eq!(s("WorkingDirectory"), "/etc/gtd");
    // Not root, and able to bind ports below 1024 with nothing else.
    let user = unit
        .iter()
        .rev()
        .find(|(sec, k, _)| sec == "Service" && k == "User")
        .map(|(_, _, v)| v.as_str());
    assert!(
        s("DynamicUser") == "yes" || user.is_some_and(|u| u != "root" && u != "0"),
        "a non-root user"
    );
    assert_eq!(s("AmbientCapabilities"), "CAP_NET_BIND_SERVICE");
    assert_eq!(s("CapabilityBoundingSet"), "CAP_NET_BIND_SERVICE");
    for (k, v) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
    ] {
        assert_eq!(s(k), v, "{k}");
    }
    assert_eq!(
        unit_value(&unit, "Install", "WantedBy"),
        "multi-user.target"
    );
}

#[test]
fn systemd_command_lines_parse() {
    let text = read("deploy/systemd/gtd.service");
    let env = env_file(&read("deploy/systemd/gtd.env"));
    for key in ["GTD_ETCD", "GTD_REGION", "GTD_ADMIN", "GTD_OPTS"] {
        assert!(env.contains_key(key), "gtd.env sets {key}");
    }
    let unit = ini(&text);
    let exec = unit_value(&unit, "Service", "ExecStart");
    let args = gtd_args(exec, &env);
    assert!(
        flag(&args, "--etcd").is_some(),
        "the unit follows etcd: {args:?}"
    );
    assert_eq!(flag(&args, "--region"), Some(env["GTD_REGION"].as_str()));
    gtd_accepts(&args, "gtd.service ExecStart with gtd.env");

    // The file-mode drop-in in the unit's comment.
    let commented: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .filter_map(|l| l.trim().strip_prefix("ExecStart=/usr/local/bin/gtd"))
        .collect();
    assert_eq!(commented.len(), 1, "one file-mode ExecStart in a comment");
    let args = gtd_args(&format!("/usr/local/bin/gtd{}", commented[0]), &env);
    assert_eq!(flag(&args, "--config"), Some("/etc/gtd/config.toml"));
    gtd_accepts(&args, "gtd.service's file-mode ExecStart");

    // Each flag the env file's comment suggests for GTD_OPTS, with its example value.
    let env_text = read("deploy/systemd/gtd.env");
    let mut suggested = 0;
    for line in env_text.lines() {
        let Some(rest) = line.strip_prefix("#   --") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let name = format!("--{}", words.next().expect("a flag"));
        let value = words.next().expect("an example value");
        let mut bare = env.clone();
        bare.insert("GTD_OPTS".to_owned(), String::new());
        let args = with_flag(&gtd_args(exec, &bare), &name, value);
        gtd_accepts(&args, &format!("gtd.env's example {name} {value}"));
        suggested += 1;
    }
    assert!(suggested >= 3, "gtd.env suggests flags for GTD_OPTS");
}

const SYSTEMD_ANALYZE: &str = "/usr/bin/systemd-analyze";

/// The unit with its binary pointed at the one this test built, in a temp dir.
fn unit_for_analysis(dir: &Path) -> PathBuf {
    let text = read("deploy/systemd/gtd.service").replace(
        "ExecStart=/usr/local/bin/gtd ",
        &format!("ExecStart={GTD} "),
    );
    assert!(text.contains(GTD));
    let path = dir.join("gtd.service");
    std::fs::write(&path, text).expect("writing the unit");
    path
}

/// Whether systemd-analyze can run; required where CI installs it.
fn have_systemd_analyze() -> bool {
    let present = Path::new(SYSTEMD_ANALYZE).exists();
    if !present {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{SYSTEMD_ANALYZE} missing: .ci/run installs it (package systemd)"
        );
        eprintln!("skipped: {SYSTEMD_ANALYZE} is not installed");
    }
    present
}

#[test]
fn systemd_analyze_verifies_the_unit() {
    if !have_systemd_analyze() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let unit = unit_for_analysis(dir.path());
    let out = Command::new(SYSTEMD_ANALYZE)
        .args(["verify", "--man=no"])
        .arg(&unit)
        .current_dir(dir.path())
        .output()
        .expect("running systemd-analyze");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Unknown keys and bad values are warnings with status 0: any line about the unit fails.
    let about_unit: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("gtd.service"))
        .collect();
    assert!(
        out.status.success() && about_unit.is_empty(),
        "systemd-analyze verify:\n{stderr}"
    );
}

#[test]
fn systemd_analyze_rates_the_unit_hardened() {
    if !have_systemd_analyze() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let unit = unit_for_analysis(dir.path());
    // Exposure on systemd's 0-10 scale (here 1.8, "OK"); --threshold counts tenths.
    let out = Command::new(SYSTEMD_ANALYZE)
        .args(["security", "--offline=yes", "--threshold=25", "--no-pager"])
        .arg(&unit)
        .output()
        .expect("running systemd-analyze");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("Overall exposure level"),
        "systemd-analyze security: exposure above 2.5:\n{}{}",
        stdout
            .lines()
            .filter(|l| l.starts_with('✗') || l.contains("Overall"))
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
}

// --- container -----------------------------------------------------------------------------------

/// A Containerfile's instructions as (INSTRUCTION, arguments), comments dropped and continuation
/// lines joined; the parser directive (`# syntax=`) is a comment here.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (pending.is_empty() && t.is_empty()) {
            continue;
        }
        if let Some(cont) = t.strip_suffix('\\') {
            pending.push_str(cont);
            pending.push(' ');
            continue;
        }
        let full = std::mem::take(&mut pending) + t;
        let (op, rest) = full.split_once(char::is_whitespace).unwrap_or((&full, ""));
        out.push((op.to_ascii_uppercase(), rest.trim().to_owned()));
    }
    assert!(pending.is_empty(), "a continuation at the end");
    out
}

/// An exec-form (JSON array) ENTRYPOINT or CMD.
fn exec_form(v: &str, what: &str) -> Vec<String> {
    serde_json::from_str(v).unwrap_or_else(|e| panic!("{what} is not a JSON array ({e}): {v}"))
}

#[test]
fn containerfile_is_multi_stage_non_root_with_the_binaries_only() {
    let text = read("deploy/container/Containerfile");
    let all = instructions(&text);
    let stages: Vec<usize> = all
        .iter()
        .enumerate()
        .filter(|(_, (op, _))| op == "FROM")
        .map(|(i, _)| i)
        .collect();
    assert!(stages.len() >= 2, "multi-stage: {} FROM", stages.len());
    let builder = &all[stages[0]].1;
    let (base, name) = builder
        .split_once(" AS ")
        .or_else(|| builder.split_once(" as "))
        .expect("the build stage is named (FROM ... AS name)");
    assert_eq!(base.trim(), "rust:1-bookworm");
    let name = name.trim();
    let build = &all[stages[0] + 1..stages[stages.len() - 1]];
    let runs: String = build
        .iter()
        .filter(|(op, _)| op == "RUN")
        .map(|(_, a)| a.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    for needed in [
        "protobuf-compiler",
        "libprotobuf-dev",
        "cargo build --release",
    ] {
        assert!(runs.contains(needed), "the build stage runs {needed}");
    }
    let cargo = runs
        .split("cargo build")
        .nth(1)
        .and_then(|r| r.split("&&").next())
        .expect("cargo build");
    let bins: BTreeSet<&str> = cargo
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "--bin")
        .map(|w| w[1])
        .collect();
    assert_eq!(bins, BTreeSet::from(["gtd", "sim"]), "cargo build {cargo}");

    let last = &all[stages[stages.len() - 1]..];
    let base = &last[0].1;
    assert!(
        base.starts_with("debian:bookworm-slim") || base.starts_with("gcr.io/distroless/cc"),
        "a small runtime base: {base}"
    );
    // Nothing from the build context: only the two binaries, from the build stage.
    assert!(
        !last.iter().any(|(op, _)| op == "ADD"),
        "no ADD in the runtime stage"
    );
    let copies: Vec<&str> = last
        .iter()
        .filter(|(op, _)| op == "COPY")
        .map(|(_, a)| a.as_str())
        .collect();
    assert!(!copies.is_empty(), "the runtime stage copies the binaries");
    let mut copied = BTreeSet::new();
    for c in copies {
        let words: Vec<&str> = c.split_whitespace().collect();
        assert_eq!(
            words.first().copied(),
            Some(format!("--from={name}").as_str()),
            "COPY {c}: only from the build stage"
        );
        let paths: Vec<&str> = words[1..]
            .iter()
            .copied()
            .filter(|w| !w.starts_with("--"))
            .collect();
        let (dest, sources) = paths.split_last().expect("COPY SRC... DEST");
        assert_eq!(*dest, "/usr/local/bin/", "COPY {c}");
        for s in sources {
            assert!(runs.contains(s), "COPY {s}: the build stage writes it");
            copied.insert(Path::new(s).file_name().expect("a file").to_owned());
        }
    }
    assert_eq!(
        copied,
        BTreeSet::from(["gtd".into(), "sim".into()]),
        "exactly the two binaries"
    );
    let value = |op: &str| {
        last.iter()
            .rev()
            .find(|(o, _)| o == op)
            .map(|(_, a)| a.as_str())
            .unwrap_or_else(|| panic!("the runtime stage has no {op}"))
    };
    let user = value("USER");
    let uid: u32 = user
        .split(':')
        .next()
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("USER {user}: a numeric uid (runAsNonRoot checks it)"));
    assert_ne!(uid, 0, "USER {user}: not root");
    assert_eq!(value("WORKDIR"), "/etc/gtd");
    assert_eq!(
        exec_form(value("ENTRYPOINT"), "ENTRYPOINT"),
        ["/usr/local/bin/gtd"]
    );
    let cmd = exec_form(value("CMD"), "CMD");
    gtd_accepts(&cmd, "Containerfile CMD");
    let admin = flag(&cmd, "--admin").expect("CMD sets --admin (the exposed port)");
    let port = admin.rsplit(':').next().expect("IP:PORT");
    assert!(
        value("EXPOSE").split_whitespace().any(|p| p == port),
        "EXPOSE {} holds the admin port {port}",
        value("EXPOSE")
    );
    // The fleet cache's default directory exists, owned by the user.
    assert!(
        last.iter()
            .any(|(op, a)| op == "ENV" && a == "STATE_DIRECTORY=/var/lib/gtd"),
        "STATE_DIRECTORY"
    );
    assert!(
        runs_in(last).contains(&format!("-o {uid} ")) && runs_in(last).contains("/var/lib/gtd")
    );
}

fn runs_in(stage: &[(String, String)]) -> String {
    stage
        .iter()
        .filter(|(op, _)| op == "RUN")
        .map(|(_, a)| a.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn containerfile_examples_parse() {
    // The `docker run IMAGE ARGS` lines of its comment, against the binary they run.
    let text = read("deploy/container/Containerfile");
    let mut seen = 0;
    for line in text.lines() {
        let Some(cmd) = line
            .trim_start_matches('#')
            .trim()
            .strip_prefix("docker run ")
        else {
            continue;
        };
        let words: Vec<&str> = cmd.split_whitespace().collect();
        let image = words
            .iter()
            .position(|w| *w == "gtd")
            .expect("the image is called gtd");
        let args = strings(&words[image + 1..]);
        if cmd.contains("--entrypoint /usr/local/bin/sim") {
            parses_up_to_help(SIM, &args, line);
        } else if args.is_empty() {
            // The default command: checked as CMD.
        } else {
            gtd_accepts(&args, line);
        }
        seen += 1;
    }
    assert!(seen >= 3, "the Containerfile shows how to run it");
}

/// Whether a `.dockerignore` pattern (the simple forms used there) excludes `path`.
fn ignored(pattern: &str, path: &str) -> bool {
    if let Some(suffix) = pattern.strip_prefix('*') {
        return path.rsplit('/').next().is_some_and(|n| n.ends_with(suffix));
    }
    if let Some(name) = pattern.strip_prefix("**/") {
        return path.split('/').any(|c| c == name);
    }
    path == pattern || path.starts_with(&format!("{pattern}/"))
}

#[test]
fn dockerignore_keeps_what_the_build_needs_and_drops_the_rest() {
    let patterns: Vec<String> = read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    assert!(
        patterns.iter().all(|p| !p.starts_with('!')),
        "no exceptions"
    );
    let excluded = |path: &str| patterns.iter().any(|p| ignored(p, path));
    for gone in [
        "target",
        "fuzz/artifacts",
        "fuzz/target",
        ".git",
        "build.log",
    ] {
        assert!(excluded(gone), "{gone} stays out of the build context");
    }
    // Every file `cargo build --release --locked` reads: the manifest, the lock file and each
    // target's sources (Cargo.toml names its benches, so they are needed too).
    let mut needed = vec![
        "Cargo.toml".to_owned(),
        "Cargo.lock".to_owned(),
        "src/lib.rs".to_owned(),
    ];
    let manifest: toml::Table = read("Cargo.toml").parse().expect("Cargo.toml");
    for kind in ["bin", "bench"] {
        for t in manifest[kind].as_array().expect("targets") {
            needed.push(match t.get("path") {
                Some(p) => p.as_str().expect("path").to_owned(),
                None => format!("benches/{}.rs", t["name"].as_str().expect("name")),
            });
        }
    }
    for path in &needed {
        assert!(root().join(path).exists(), "{path} exists");
        assert!(!excluded(path), "{path} is needed by the build");
    }
}

// --- Kubernetes ----------------------------------------------------------------------------------

/// Every document of a manifest file.
fn documents(rel: &str) -> Vec<Yaml> {
    let docs = YamlLoader::load_from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    assert!(!docs.is_empty(), "{rel}: no document");
    docs
}

fn s<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("{what}: not a string: {y:?}"))
}

fn int(y: &Yaml, what: &str) -> i64 {
    y.as_i64()
        .unwrap_or_else(|| panic!("{what}: not an integer: {y:?}"))
}

fn list<'a>(y: &'a Yaml, what: &str) -> &'a [Yaml] {
    y.as_vec()
        .map(Vec::as_slice)
        .unwrap_or_else(|| panic!("{what}: not a list: {y:?}"))
}

fn map(y: &Yaml, what: &str) -> BTreeMap<String, String> {
    y.as_hash()
        .unwrap_or_else(|| panic!("{what}: not a map: {y:?}"))
        .iter()
        .map(|(k, v)| (s(k, what).to_owned(), s(v, what).to_owned()))
        .collect()
}

fn kind(doc: &Yaml) -> &str {
    s(&doc["kind"], "kind")
}

fn name(doc: &Yaml) -> &str {
    s(&doc["metadata"]["name"], "metadata.name")
}

/// Each document has its apiVersion for its kind, a name and (but the Namespace) the namespace.
fn check_identity(rel: &str, docs: &[Yaml]) {
    for d in docs {
        let api = match kind(d) {
            "Namespace" | "Service" | "ConfigMap" => "v1",
            "Deployment" | "DaemonSet" => "apps/v1",
            other => panic!("{rel}: unexpected kind {other}"),
        };
        assert_eq!(s(&d["apiVersion"], "apiVersion"), api, "{rel}: {}", kind(d));
        assert!(!name(d).is_empty());
        if kind(d) != "Namespace" {
            assert_eq!(
                d["metadata"]["namespace"].as_str(),
                Some("gtd"),
                "{rel}: {} {}",
                kind(d),
                name(d)
            );
        }
    }
}

/// The acceleration regions of a config and the ports its listeners need, as
/// (port, "TCP"/"UDP").
fn regions_and_ports(config: &Path) -> (BTreeSet<String>, BTreeSet<(i64, String)>) {
    let cfg =
        gtd::config::load(config, None).unwrap_or_else(|e| panic!("{}: {e}", config.display()));
    let regions = cfg
        .listeners
        .iter()
        .flat_map(|l| l.regions.clone())
        .collect();
    let ports = cfg
        .listeners
        .iter()
        .map(|l| {
            let proto = match l.protocol {
                gtd::config::Protocol::Udp => "UDP",
                _ => "TCP",
            };
            (i64::from(l.port), proto.to_owned())
        })
        .collect();
    (regions, ports)
}

/// What each mode's Deployments are checked against.
struct Mode<'a> {
    file: &'a str,
    /// The config the nodes serve (for the regions and ports).
    config: PathBuf,
    /// The longest drain a stop must outlast.
    drain: Duration,
    fleet: bool,
}

/// A Deployment's pods as its Service sees them.
struct Pods {
    labels: BTreeMap<String, String>,
    /// Container ports by name: (port, protocol).
    ports: BTreeMap<String, (i64, String)>,
}

/// Checks one Deployment and returns its region and pods.
fn check_deployment(mode: &Mode, d: &Yaml, docs: &[Yaml]) -> (String, Pods) {
    let what = format!("{}: Deployment {}", mode.file, name(d));
    let spec = &d["spec"];
    let labels = map(&spec["template"]["metadata"]["labels"], &what);
    for (k, v) in map(&spec["selector"]["matchLabels"], &what) {
        assert_eq!(
            labels.get(&k),
            Some(&v),
            "{what}: the selector picks its pods"
        );
    }
    // Old pods keep serving while a new one cannot start (etcd down, empty cache).
    assert_eq!(
        int(&spec["strategy"]["rollingUpdate"]["maxUnavailable"], &what),
        0,
        "{what}"
    );
    let pod = &spec["template"]["spec"];
    let containers = list(&pod["containers"], &what);
    assert_eq!(containers.len(), 1, "{what}: one container");
    let c = &containers[0];
    let args: Vec<String> = list(&c["args"], &what)
        .iter()
        .map(|a| s(a, &what).to_owned())
        .collect();
    assert!(
        c["command"].is_badvalue(),
        "{what}: the image's ENTRYPOINT runs gtd"
    );
    gtd_accepts(&args, &format!("{what} args"));

    // Pinned to its region's machines, serving that region.
    let region = flag(&args, "--region").expect("--region").to_owned();
    assert_eq!(
        s(&pod["nodeSelector"]["topology.kubernetes.io/region"], &what),
        region,
        "{what}: nodeSelector"
    );
    assert_eq!(labels.get("gtd/region"), Some(&region), "{what}: label");
    assert_eq!(
        flag(&args, "--etcd").is_some(),
        mode.fleet,
        "{what}: --etcd"
    );

    // Ports: the admin port and one per listener of the config.
    let ports: BTreeMap<String, (i64, String)> = list(&c["ports"], &what)
        .iter()
        .map(|p| {
            (
                s(&p["name"], &what).to_owned(),
                (
                    int(&p["containerPort"], &what),
                    s(&p["protocol"], &what).to_owned(),
                ),
            )
        })
        .collect();
    let admin: std::net::SocketAddr = flag(&args, "--admin")
        .expect("--admin")
        .parse()
        .expect("--admin IP:PORT");
    assert!(
        !admin.ip().is_loopback(),
        "{what}: the kubelet probes the pod's address, not its loopback"
    );
    let port_of = |y: &Yaml, probe: &str| -> i64 {
        match y.as_str() {
            Some(n) => {
                ports
                    .get(n)
                    .unwrap_or_else(|| panic!("{what}: {probe} port {n}"))
                    .0
            }
            None => int(y, probe),
        }
    };
    let (_, listener_ports) = regions_and_ports(&mode.config);
    let declared: BTreeSet<(i64, String)> = ports
        .values()
        .filter(|(p, _)| *p != i64::from(admin.port()))
        .cloned()
        .collect();
    assert_eq!(
        declared, listener_ports,
        "{what}: container ports = the config's listeners"
    );
    assert_eq!(
        ports.values().find(|(p, _)| *p == i64::from(admin.port())),
        Some(&(i64::from(admin.port()), "TCP".to_owned())),
        "{what}: the admin port is declared"
    );

    // Probes: GET /healthz on the admin port; liveness outlasts a drain (503 meanwhile).
    let drain = mode.drain;
    for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
        let p = &c[probe];
        if probe == "startupProbe" && p.is_badvalue() {
            continue;
        }
        assert_eq!(
            s(&p["httpGet"]["path"], probe),
            "/healthz",
            "{what}: {probe}"
        );
        assert_eq!(
            port_of(&p["httpGet"]["port"], probe),
            i64::from(admin.port()),
            "{what}: {probe} port = --admin's"
        );
    }
    let live = &c["livenessProbe"];
    let live_window = int(&live["periodSeconds"], "periodSeconds")
        * int(&live["failureThreshold"], "failureThreshold");
    assert!(
        Duration::from_secs(live_window.unsigned_abs()) > drain,
        "{what}: liveness ({live_window} s) would kill a draining pod ({drain:?})"
    );
    let pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_i64()
        .unwrap_or(0);
    let grace = int(&pod["terminationGracePeriodSeconds"], &what);
    assert!(
        Duration::from_secs((grace - pre_stop).unsigned_abs()) > drain + Duration::from_secs(5)
            && grace > pre_stop,
        "{what}: terminationGracePeriodSeconds {grace} is not above preStop {pre_stop} s + drain {drain:?}"
    );

    // Resources and security.
    for k in ["requests", "limits"] {
        for r in ["cpu", "memory"] {
            assert!(
                !c["resources"][k][r].is_badvalue(),
                "{what}: resources.{k}.{r}"
            );
        }
    }
    let psc = &pod["securityContext"];
    let sc = &c["securityContext"];
    assert!(
        psc["runAsNonRoot"].as_bool() == Some(true) || sc["runAsNonRoot"].as_bool() == Some(true),
        "{what}: runAsNonRoot"
    );
    let uid = sc["runAsUser"].as_i64().or(psc["runAsUser"].as_i64());
    assert!(uid.is_some_and(|u| u > 0), "{what}: runAsUser");
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true), "{what}");
    assert_eq!(
        sc["allowPrivilegeEscalation"].as_bool(),
        Some(false),
        "{what}"
    );
    let drop: Vec<&str> = list(&sc["capabilities"]["drop"], &what)
        .iter()
        .map(|v| s(v, &what))
        .collect();
    assert_eq!(drop, ["ALL"], "{what}");
    let add: Vec<&str> = sc["capabilities"]["add"]
        .as_vec()
        .map(|v| v.iter().map(|c| s(c, &what)).collect())
        .unwrap_or_default();
    let low_port = ports.values().any(|(p, _)| *p < 1024);
    assert_eq!(
        add,
        if low_port {
            vec!["NET_BIND_SERVICE"]
        } else {
            vec![]
        },
        "{what}: NET_BIND_SERVICE exactly when a port is below 1024"
    );

    // Where the node reads and writes: the mounted volumes.
    let mounts: BTreeMap<String, String> = list(&c["volumeMounts"], &what)
        .iter()
        .map(|m| {
            (
                s(&m["mountPath"], &what).to_owned(),
                s(&m["name"], &what).to_owned(),
            )
        })
        .collect();
    let volume = |vname: &str| -> &Yaml {
        list(&pod["volumes"], &what)
            .iter()
            .find(|v| v["name"].as_str() == Some(vname))
            .unwrap_or_else(|| panic!("{what}: volume {vname}"))
    };
    let mounted = |path: &str| -> (String, &Yaml) {
        let (dir, vname) = mounts
            .iter()
            .find(|(dir, _)| Path::new(path).starts_with(dir))
            .unwrap_or_else(|| panic!("{what}: {path} is on the read-only root"));
        (dir.clone(), volume(vname))
    };
    if mode.fleet {
        let cache = flag(&args, "--cache").expect("--cache: the root filesystem is read-only");
        let (_, v) = mounted(cache);
        assert!(
            !v["emptyDir"].is_badvalue(),
            "{what}: the cache is on an emptyDir"
        );
    } else {
        let config = flag(&args, "--config").expect("--config");
        let (dir, v) = mounted(config);
        let cm_name = s(&v["configMap"]["name"], &what);
        let cm = docs
            .iter()
            .find(|d| kind(d) == "ConfigMap" && name(d) == cm_name)
            .unwrap_or_else(|| panic!("{what}: ConfigMap {cm_name} in {}", mode.file));
        // The files the volume shows, which must be the ones the test checked as the config.
        let shown: BTreeMap<String, String> = list(&v["configMap"]["items"], &what)
            .iter()
            .map(|i| {
                (
                    s(&i["path"], &what).to_owned(),
                    s(&i["key"], &what).to_owned(),
                )
            })
            .collect();
        let rel = Path::new(config)
            .strip_prefix(&dir)
            .expect("under the mount");
        let key = shown
            .get(rel.to_str().expect("UTF-8"))
            .unwrap_or_else(|| panic!("{what}: {config} is not an item of the volume"));
        assert!(!cm["data"][key.as_str()].is_badvalue(), "{what}: key {key}");
    }
    (region, Pods { labels, ports })
}

/// Writes a ConfigMap's files as its volume shows them (items: key -> path) under `dir`.
fn materialise(cm: &Yaml, deployment: &Yaml, dir: &Path) {
    let volumes = list(
        &deployment["spec"]["template"]["spec"]["volumes"],
        "volumes",
    );
    let v = volumes
        .iter()
        .find(|v| v["configMap"]["name"].as_str() == Some(name(cm)))
        .expect("the ConfigMap's volume");
    for item in list(&v["configMap"]["items"], "items") {
        let path = dir.join(s(&item["path"], "path"));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, s(&cm["data"][s(&item["key"], "key")], "data")).expect("write");
    }
}

/// Checks one mode's file: its Deployments, one per region of the config, and the Services in
/// front of them.
fn check_mode(mode: &Mode, docs: &[Yaml]) {
    let deployments: Vec<&Yaml> = docs.iter().filter(|d| kind(d) == "Deployment").collect();
    let mut by_region = BTreeMap::new();
    for d in &deployments {
        let (region, pods) = check_deployment(mode, d, docs);
        assert!(
            by_region.insert(region.clone(), pods).is_none(),
            "{}: two Deployments for {region}",
            mode.file
        );
    }
    let (regions, _) = regions_and_ports(&mode.config);
    assert_eq!(
        by_region.keys().cloned().collect::<BTreeSet<_>>(),
        regions,
        "{}: one Deployment per acceleration region of the config",
        mode.file
    );
    let image: BTreeSet<&str> = deployments
        .iter()
        .map(|d| {
            s(
                &d["spec"]["template"]["spec"]["containers"][0]["image"],
                "image",
            )
        })
        .collect();
    assert_eq!(image.len(), 1, "{}: one image", mode.file);

    // Each region's Service selects exactly its region's pods and targets their ports.
    let services = documents("deploy/kubernetes/services.yaml");
    check_identity("services.yaml", &services);
    let mut served = BTreeSet::new();
    for svc in &services {
        let what = format!("Service {} over {}", name(svc), mode.file);
        assert_eq!(kind(svc), "Service");
        let sel = map(&svc["spec"]["selector"], &what);
        let matching: Vec<(&String, &Pods)> = by_region
            .iter()
            .filter(|(_, pods)| sel.iter().all(|(k, v)| pods.labels.get(k) == Some(v)))
            .collect();
        assert_eq!(matching.len(), 1, "{what}: selects one region's pods");
        let (region, Pods { ports, .. }) = matching[0];
        served.insert(region.clone());
        // The client's own address reaches gtd (ip_hash, affinity, geoip).
        assert_eq!(s(&svc["spec"]["externalTrafficPolicy"], &what), "Local");
        let mut targeted = BTreeSet::new();
        for p in list(&svc["spec"]["ports"], &what) {
            let target = s(&p["targetPort"], &what);
            let (num, proto) = ports
                .get(target)
                .unwrap_or_else(|| panic!("{what}: targetPort {target} is no container port"));
            assert_eq!(s(&p["protocol"], &what), proto, "{what}: {target}");
            assert_ne!(target, "admin", "{what}: the admin port is not for clients");
            targeted.insert((*num, proto.clone()));
        }
        let (_, listener_ports) = regions_and_ports(&mode.config);
        assert_eq!(targeted, listener_ports, "{what}: one port per listener");
    }
    assert_eq!(served, regions, "a Service per region");
}

#[test]
fn kubernetes_namespace() {
    let docs = documents("deploy/kubernetes/namespace.yaml");
    check_identity("namespace.yaml", &docs);
    assert_eq!(docs.len(), 1);
    assert_eq!((kind(&docs[0]), name(&docs[0])), ("Namespace", "gtd"));
}

#[test]
fn kubernetes_fleet_mode() {
    let docs = documents("deploy/kubernetes/fleet.yaml");
    check_identity("fleet.yaml", &docs);
    assert!(
        docs.iter().all(|d| kind(d) == "Deployment"),
        "fleet.yaml: Deployments only"
    );
    // The nodes serve what is pushed: checked against the shipped config (its regions, its
    // ports, the default drain).
    let mode = Mode {
        file: "fleet.yaml",
        config: root().join("config.toml"),
        drain: fleet_drain(),
        fleet: true,
    };
    check_mode(&mode, &docs);
}

#[test]
fn kubernetes_file_mode() {
    let docs = documents("deploy/kubernetes/file-mode.yaml");
    check_identity("file-mode.yaml", &docs);
    let cms: Vec<&Yaml> = docs.iter().filter(|d| kind(d) == "ConfigMap").collect();
    assert_eq!(cms.len(), 1, "file-mode.yaml: one ConfigMap");
    let deployments: Vec<&Yaml> = docs.iter().filter(|d| kind(d) == "Deployment").collect();
    assert_eq!(
        cms.len() + deployments.len(),
        docs.len(),
        "file-mode.yaml: kinds"
    );
    // The ConfigMap's files as a pod sees them, validated as `gtd check` does, for the region
    // of every Deployment, and with the admin token that --admin beyond loopback needs.
    let dir = tempfile::tempdir().expect("temp dir");
    materialise(cms[0], deployments[0], dir.path());
    let config = dir.path().join("config.toml");
    let cfg =
        gtd::config::load(&config, None).unwrap_or_else(|e| panic!("the ConfigMap's config: {e}"));
    for d in &deployments {
        let args: Vec<String> = list(
            &d["spec"]["template"]["spec"]["containers"][0]["args"],
            "args",
        )
        .iter()
        .map(|a| s(a, "args").to_owned())
        .collect();
        let region = flag(&args, "--region").expect("--region");
        let out = Command::new(GTD)
            .args(["check", "--config"])
            .arg(&config)
            .args(["--region", region])
            .output()
            .expect("gtd check");
        assert!(
            out.status.success(),
            "gtd check of the ConfigMap for {region}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let admin = flag(&args, "--admin")
            .expect("--admin")
            .parse()
            .expect("IP:PORT");
        assert!(
            !cfg.admin.exposed(admin),
            "{region}: the ConfigMap's [admin] has no token for --admin {admin}: the node would refuse to start"
        );
    }
    let mode = Mode {
        file: "file-mode.yaml",
        drain: longest_drain(&config),
        config,
        fleet: false,
    };
    check_mode(&mode, &docs);
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
