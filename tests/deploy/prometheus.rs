//! deploy/prometheus and deploy/grafana: the alerts pass `promtool check rules` and their unit
//! tests (`promtool test rules`); every alert has its tests, labels, annotations and a runbook
//! section; and every metric the alerts and the dashboard's queries name is exported by a real
//! node following a real etcd. The fleet metrics move as their events happen: a new revision,
//! etcd lost, SIGTERM.

use super::*;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Stdio};
use std::time::Instant;

const PROMTOOL: &str = "promtool";

/// Whether promtool can run; required where CI runs the tests (`.ci/run` installs it).
fn have_promtool() -> bool {
    let present = Command::new(PROMTOOL).arg("--version").output().is_ok();
    if !present {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{PROMTOOL} missing: tests/run.sh installs it (package prometheus)"
        );
        eprintln!("skipped: {PROMTOOL} is not installed (apt-get install prometheus)");
    }
    present
}

fn promtool(args: &[&str]) {
    let out = Command::new(PROMTOOL)
        .args(args)
        .current_dir(root().join("deploy/prometheus"))
        .output()
        .expect("running promtool");
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `promtool check metrics`: the exposition parses and passes Prometheus' naming lints.
fn lint(exposition: &str) {
    let mut child = Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(exposition.as_bytes())
        .expect("writing to promtool");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn promtool_checks_the_rules_and_runs_their_tests() {
    if !have_promtool() {
        return;
    }
    promtool(&["check", "rules", "alerts.yml"]);
    promtool(&["test", "rules", "alerts_test.yml"]);
}

// --- the files --------------------------------------------------------------------------------

fn yaml(rel: &str) -> Yaml {
    YamlLoader::load_from_str(&read(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
        .remove(0)
}

/// Every alerting rule of alerts.yml.
fn alerts() -> Vec<Yaml> {
    let doc = yaml("deploy/prometheus/alerts.yml");
    let rules: Vec<Yaml> = doc["groups"]
        .as_vec()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_vec().expect("rules").clone())
        .collect();
    assert!(rules.iter().all(|r| r["alert"].as_str().is_some()));
    rules
}

fn str_of<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str().unwrap_or_else(|| panic!("{what} missing"))
}

/// The anchors GitHub gives the headings of a Markdown file ("## GtdRegionDown" →
/// "gtdregiondown").
fn anchors(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| {
            l.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

#[test]
fn every_alert_has_its_settings_tests_and_runbook() {
    let expected = [
        "GtdRegionDown",
        "GtdFailover",
        "GtdEndpointMarked",
        "GtdEndpointCheckFailing",
        "GtdErrorRatio",
        "GtdRevisionSkew",
        "GtdEtcdDisconnected",
        "GtdDraining",
        "GtdRankFlapping",
        "GtdRampHeld",
    ];
    let rules = alerts();
    let names: Vec<&str> = rules.iter().map(|r| str_of(&r["alert"], "alert")).collect();
    assert_eq!(names, expected);
    let runbooks = anchors(&read("docs/runbooks.md"));
    let tests = yaml("deploy/prometheus/alerts_test.yml");
    let cases: Vec<&Yaml> = tests["tests"]
        .as_vec()
        .expect("tests")
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_vec().expect("alert_rule_test"))
        .collect();
    for r in &rules {
        let name = str_of(&r["alert"], "alert");
        let what = |key: &str| format!("{name}: {key}");
        str_of(&r["for"], &what("for"));
        let severity = str_of(&r["labels"]["severity"], &what("severity"));
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{name}"
        );
        for key in ["summary", "description"] {
            assert!(!str_of(&r["annotations"][key], &what(key)).is_empty());
        }
        let url = str_of(&r["annotations"]["runbook_url"], &what("runbook_url"));
        let anchor = url
            .strip_prefix("docs/runbooks.md#")
            .unwrap_or_else(|| panic!("{name}: runbook_url {url} is not docs/runbooks.md#…"));
        assert!(
            runbooks.contains(anchor),
            "{name}: docs/runbooks.md has no section #{anchor} (it has {runbooks:?})"
        );
        // Its unit tests: a time it fires and a time it does not.
        let mine: Vec<&&Yaml> = cases
            .iter()
            .filter(|c| c["alertname"].as_str() == Some(name))
            .collect();
        let fires = |c: &&&Yaml| c["exp_alerts"].as_vec().is_some_and(|a| !a.is_empty());
        assert!(mine.iter().any(fires), "{name}: no test where it fires");
        assert!(
            mine.iter().any(|c| !fires(c)),
            "{name}: no test where it stays quiet"
        );
    }
}

// --- metric names in PromQL -------------------------------------------------------------------

/// The metric names a PromQL expression reads: identifiers outside strings, label matchers
/// `{…}` and ranges `[…]`, that are not functions (followed by `(`), aggregations, keywords,
/// or the label lists of `by`, `without`, `on`, `ignoring`, `group_left` and `group_right`.
/// Grafana's `label_values(METRIC, LABEL)` reads METRIC.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: &[&str] = &[
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "inf",
        "nan",
        "atan2",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    const LABEL_LISTS: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let expr = match expr.trim().strip_prefix("label_values(") {
        Some(args) => args.rsplit_once(',').map_or(args, |(metric, _)| metric),
        None => expr,
    };
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut skip_list = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                while i < chars.len() && chars[i] != close {
                    i += 1;
                }
                i += 1;
            }
            '(' if skip_list => {
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                skip_list = false;
                i += 1;
            }
            // Grafana's variables ($__rate_interval) and numbers (5m, 0.05, 1e3).
            '$' | '0'..='9' | '.' => {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace());
                let lower = word.to_lowercase();
                if LABEL_LISTS.contains(&lower.as_str()) {
                    skip_list = true;
                } else if next != Some(&'(') && !KEYWORDS.contains(&lower.as_str()) {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

#[test]
fn metric_names_are_read_out_of_promql() {
    let cases: &[(&str, &[&str])] = &[
        (
            r#"max by (job) (gtd_config_revision) - min by (job) (gtd_config_revision) > 0"#,
            &["gtd_config_revision"],
        ),
        (
            r#"(increase(gtd_passive_marks_total[10m]) > 0) or (increase(gtd_x{a="b or c"}[10m]) > 0)"#,
            &["gtd_passive_marks_total", "gtd_x"],
        ),
        (
            r#"sum by (le, instance) (rate(a_bucket{i=~"$instance"}[$__rate_interval])) / on (instance) group_left (mode) b"#,
            &["a_bucket", "b"],
        ),
        (
            r#"histogram_quantile(0.99, sum(rate(h_bucket[5m]))) > bool 1e3 unless c offset 5m"#,
            &["h_bucket", "c"],
        ),
        (
            r#"sum without (a) (x) / count by (b) (y) > max(z)"#,
            &["x", "y", "z"],
        ),
        (
            r#"label_values(gtd_group_share{instance=~"$instance"}, listener)"#,
            &["gtd_group_share"],
        ),
        ("gtd_draining == 1", &["gtd_draining"]),
    ];
    for (expr, want) in cases {
        let want: BTreeSet<String> = want.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(metric_names(expr), want, "{expr}");
    }
}

/// Every PromQL query of the Grafana dashboard: panel targets and the variables' queries.
fn dashboard_queries() -> Vec<String> {
    let doc: serde_json::Value =
        serde_json::from_str(&read("deploy/grafana/gtd.json")).expect("gtd.json is JSON");
    let mut out = Vec::new();
    fn panels(p: &serde_json::Value, out: &mut Vec<String>) {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(t["expr"].as_str().expect("a target's expr").to_owned());
        }
        for inner in p["panels"].as_array().into_iter().flatten() {
            panels(inner, out);
        }
    }
    panels(&doc, &mut out);
    for v in doc["templating"]["list"].as_array().expect("templating") {
        if v["type"] == "query" {
            out.push(v["query"]["query"].as_str().expect("a query").to_owned());
        }
    }
    out
}

/// The metric names of every alert expression and every dashboard query, with where each is
/// used.
fn names_used() -> BTreeMap<String, String> {
    let mut used = BTreeMap::new();
    for r in alerts() {
        for n in metric_names(str_of(&r["expr"], "expr")) {
            used.insert(n, format!("alert {}", str_of(&r["alert"], "alert")));
        }
    }
    let queries = dashboard_queries();
    assert!(queries.len() > 20, "{} dashboard queries", queries.len());
    for q in queries {
        for n in metric_names(&q) {
            used.entry(n).or_insert_with(|| format!("dashboard: {q}"));
        }
    }
    used
}

// --- a real node in a real fleet ---------------------------------------------------------------

/// A child process killed and reaped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Waits, bounded by 60 s, until `cond` holds.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `GET path` over HTTP/1.0: the body of a 200, else `None`.
fn get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    (head.split(' ').nth(1) == Some("200")).then(|| body.to_owned())
}

/// The value of the series `series` (its name and labels as exported) in an exposition.
fn value(exposition: &str, series: &str) -> Option<f64> {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The metric names of an exposition's series (histograms' `_bucket`, `_sum`, `_count`).
fn exported(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_owned())
        .collect()
}

/// One etcd member on loopback (Debian's `etcd-server`), in `dir`.
fn etcd(dir: &Path) -> (Proc, SocketAddr) {
    let client = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let peer = format!("http://127.0.0.1:{}", free_port());
    let log = std::fs::File::create(dir.join("etcd.log")).expect("etcd log");
    let child = Command::new("etcd")
        .args(["--name", "m1"])
        .arg("--data-dir")
        .arg(dir.join("etcd"))
        .args(["--listen-client-urls", &format!("http://{client}")])
        .args(["--advertise-client-urls", &format!("http://{client}")])
        .args(["--listen-peer-urls", &peer])
        .args(["--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", &format!("m1={peer}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start etcd (Debian: apt-get install etcd-server)");
    let etcd = Proc(child);
    wait_for("etcd healthy", || {
        get(client, "/health").is_some_and(|b| b.contains("true"))
    });
    (etcd, client)
}

/// A config with an HTTP and a TCP listener served from cn-beijing (`ratio` on the HTTP one's
/// second group, so that two pushes differ); the TCP listener's endpoint is `tcp_endpoint`.
fn fleet_config(web: u16, tcp: u16, tcp_endpoint: SocketAddr, ratio: u32) -> String {
    let catalog = root().join("regions/catalog.toml");
    // Endpoints nothing listens on: no traffic is sent to them, their series are what counts.
    let (beijing, shanghai) = (free_port(), free_port());
    format!(
        r#"catalog = {catalog:?}

[[listener]]
name = "web"
protocol = "http"
port = {web}
regions = ["cn-beijing"]

[[listener.group]]
name = "beijing"
region = "cn-beijing"
ratio = 100
[[listener.group.endpoint]]
address = "127.0.0.1:{beijing}"

[[listener.group]]
name = "shanghai"
region = "cn-shanghai"
ratio = {ratio}
[[listener.group.endpoint]]
address = "127.0.0.1:{shanghai}"

[[listener]]
name = "tcp"
protocol = "tcp"
port = {tcp}
regions = ["cn-beijing"]
drain_timeout = "120s"

[[listener.group]]
name = "beijing"
region = "cn-beijing"
ratio = 100
[listener.group.health_check]
protocol = "tcp"
interval = "1s"
[[listener.group.endpoint]]
address = "{tcp_endpoint}"
"#,
        catalog = catalog.display().to_string()
    )
}

fn push(etcd: SocketAddr, config: &Path) {
    let out = Command::new(GTD)
        .args(["push", "--etcd", &format!("http://{etcd}"), "--config"])
        .arg(config)
        .output()
        .expect("gtd push");
    assert!(
        out.status.success(),
        "gtd push: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The commit `gtd_build_info` should name: HEAD where the source is a git checkout.
fn expected_commit() -> String {
    let git = Command::new("git")
        .arg("-C")
        .arg(root())
        .args(["rev-parse", "--verify", "HEAD"])
        .output();
    match git {
        Ok(out) if root().join(".git").exists() && out.status.success() => {
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        }
        _ => "unknown".to_owned(),
    }
}

#[test]
fn a_fleet_node_exports_every_metric_the_alerts_and_dashboard_name_and_they_move() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut etcd, etcd_addr) = etcd(dir.path());
    // The TCP listener's endpoint: accepts and holds each connection until the client closes.
    let backend = TcpListener::bind("127.0.0.1:0").expect("backend");
    let backend_addr = backend.local_addr().expect("backend address");
    std::thread::spawn(move || {
        for s in backend.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let mut buf = [0_u8; 1024];
                while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    let (web, tcp) = (free_port(), free_port());
    let config = dir.path().join("fleet.toml");
    std::fs::write(&config, fleet_config(web, tcp, backend_addr, 50)).expect("config");
    push(etcd_addr, &config);

    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let log = std::fs::File::create(dir.path().join("node.log")).expect("node log");
    let mut node = Proc(
        Command::new(GTD)
            .args(["run", "--etcd", &format!("http://{etcd_addr}")])
            .args(["--region", "cn-beijing", "--bind", "127.0.0.1"])
            .args(["--admin", &admin.to_string()])
            .arg("--cache")
            .arg(dir.path().join("cache.json"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("gtd run"),
    );
    let node_log = || std::fs::read_to_string(dir.path().join("node.log")).unwrap_or_default();
    let metrics = || get(admin, "/metrics").unwrap_or_default();
    wait_for("the node following etcd", || {
        value(&metrics(), "gtd_etcd_connected") == Some(1.0)
    });

    // Every name the alerts and the dashboard use is exported.
    let text = metrics();
    let have = exported(&text);
    let missing: Vec<String> = names_used()
        .into_iter()
        .filter(|(n, _)| !have.contains(n))
        .map(|(n, at)| format!("{n} ({at})"))
        .collect();
    assert!(
        missing.is_empty(),
        "not exported by a running node: {missing:?}\n{text}"
    );
    let build = format!(
        "gtd_build_info{{version=\"{}\",commit=\"{}\"}}",
        env!("CARGO_PKG_VERSION"),
        expected_commit()
    );
    assert_eq!(value(&text, &build), Some(1.0), "{build}\n{text}");
    assert_eq!(value(&text, "gtd_config_revision"), Some(1.0), "{text}");
    if have_promtool() {
        lint(&text);
    }
    assert_eq!(value(&text, "gtd_draining"), Some(0.0), "{text}");

    // A new revision: the gauge follows.
    std::fs::write(&config, fleet_config(web, tcp, backend_addr, 40)).expect("config");
    push(etcd_addr, &config);
    wait_for("revision 2 served", || {
        value(&metrics(), "gtd_config_revision") == Some(2.0)
    });

    // etcd gone: the node keeps serving revision 2, cut off.
    let _ = etcd.0.kill();
    let _ = etcd.0.wait();
    wait_for("the node cut off from etcd", || {
        value(&metrics(), "gtd_etcd_connected") == Some(0.0)
    });
    assert_eq!(value(&metrics(), "gtd_config_revision"), Some(2.0));

    // SIGTERM with a connection open: draining until the connection ends.
    let tcp_addr = SocketAddr::from(([127, 0, 0, 1], tcp));
    let held = TcpStream::connect(tcp_addr).expect("a connection through the tcp listener");
    wait_for("the connection relayed", || {
        value(&metrics(), "gtd_connections_active{listener=\"tcp\"}") == Some(1.0)
    });
    let term = Command::new("kill")
        .args(["-TERM", &node.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(term.success());
    wait_for("gtd_draining 1", || {
        value(&metrics(), "gtd_draining") == Some(1.0)
    });
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(60);
    while node.0.try_wait().expect("try_wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "the node did not exit after its last connection:\n{}",
            node_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
