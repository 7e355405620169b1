//! deploy/systemd: the unit and its example environment file.

use super::*;

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
            "{SYSTEMD_ANALYZE} missing: tests/run.sh installs it (package systemd)"
        );
        eprintln!("skipped: {SYSTEMD_ANALYZE} is not installed (apt-get install systemd)");
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
