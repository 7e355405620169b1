//! The `sim` binary as a user runs it: shipped config and scenarios, every worked example of
//! docs/design.md §3.2 from both acceleration regions, failover modes, fail-open, overrides, formats, and
//! golden files of the table and JSON for the shipped config (`GTD_BLESS=1` rewrites them).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `sim` from the repository root; returns stdout, panics with stderr on failure.
fn sim(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run sim");
    assert!(
        out.status.success(),
        "sim {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Runs `sim` expecting failure; returns stderr.
fn sim_err(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run sim");
    assert!(!out.status.success(), "sim {args:?} should fail");
    String::from_utf8(out.stderr).expect("utf-8")
}

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    serde_json::from_str(&sim(&all)).expect("valid JSON")
}

/// `(group name → share)` for one listener seen from one region, plus the mode.
fn shares(doc: &Value, listener: &str, region: &str) -> (String, Vec<(String, f64)>) {
    let l = doc["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["listener"] == listener)
        .expect("listener");
    let r = l["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["region"] == region)
        .expect("region");
    let groups = r["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap().to_owned(),
                g["share"].as_f64().unwrap(),
            )
        })
        .collect();
    (r["mode"].as_str().unwrap().to_owned(), groups)
}

fn scenario(name: &str) -> Value {
    json(&["--scenario", &format!("sim/scenarios/{name}.toml")])
}

fn s(pairs: &[(&str, f64)]) -> Vec<(String, f64)> {
    pairs.iter().map(|(n, v)| ((*n).to_owned(), *v)).collect()
}

#[test]
fn worked_examples_from_both_regions() {
    /// (scenario, shares from cn-beijing, shares from cn-shanghai)
    type Case<'a> = (&'a str, &'a [(&'a str, f64)], &'a [(&'a str, f64)]);
    let cases: &[Case] = &[
        (
            "spec-100-100",
            &[("beijing", 100.0), ("shanghai", 0.0)],
            &[("shanghai", 100.0), ("beijing", 0.0)],
        ),
        (
            "spec-50-100",
            &[("beijing", 50.0), ("shanghai", 50.0)],
            &[("shanghai", 100.0), ("beijing", 0.0)],
        ),
        (
            "spec-30-100",
            &[("beijing", 30.0), ("shanghai", 70.0)],
            &[("shanghai", 100.0), ("beijing", 0.0)],
        ),
        (
            "spec-50-50",
            &[("beijing", 62.5), ("shanghai", 37.5)],
            &[("shanghai", 62.5), ("beijing", 37.5)],
        ),
        (
            "rollout-1-percent",
            &[("beijing", 100.0), ("shanghai", 0.0)],
            &[("shanghai", 1.0), ("beijing", 99.0)],
        ),
        (
            "rollout-100-percent",
            &[("beijing", 100.0), ("shanghai", 0.0)],
            &[("shanghai", 100.0), ("beijing", 0.0)],
        ),
        (
            "decommission-1-percent",
            &[("beijing", 100.0), ("shanghai", 0.0)],
            &[("shanghai", 1.0), ("beijing", 99.0)],
        ),
        (
            "decommission-0-percent",
            &[("beijing", 100.0), ("shanghai", 0.0)],
            &[("shanghai", 0.0), ("beijing", 100.0)],
        ),
        (
            "rollout-1-percent-beijing-50",
            &[("beijing", 74.75), ("shanghai", 25.25)],
            &[("shanghai", 25.75), ("beijing", 74.25)],
        ),
    ];
    for (name, beijing, shanghai) in cases {
        let doc = scenario(name);
        assert_eq!(
            shares(&doc, "web", "cn-beijing"),
            ("cascade".into(), s(beijing)),
            "{name} from cn-beijing"
        );
        assert_eq!(
            shares(&doc, "web", "cn-shanghai"),
            ("cascade".into(), s(shanghai)),
            "{name} from cn-shanghai"
        );
    }
}

#[test]
fn health_failover_scenario_sends_everything_to_shanghai() {
    let doc = scenario("health-failover");
    assert_eq!(
        shares(&doc, "web", "cn-beijing"),
        (
            "failover".into(),
            s(&[("beijing", 0.0), ("shanghai", 100.0)])
        )
    );
    // From Shanghai the top group is shanghai itself, healthy: a plain cascade over the one
    // eligible group (50 + leftover 50), not a failover.
    assert_eq!(
        shares(&doc, "web", "cn-shanghai"),
        (
            "cascade".into(),
            s(&[("shanghai", 100.0), ("beijing", 0.0)])
        )
    );
}

#[test]
fn first_pass_and_leftover_are_reported() {
    let doc = json(&[]);
    let g = &doc["listeners"][0]["regions"][0]["groups"][0];
    assert_eq!(g["name"], "beijing");
    assert_eq!(
        (
            g["first_pass"].as_f64(),
            g["leftover"].as_f64(),
            g["share"].as_f64()
        ),
        (Some(50.0), Some(12.5), Some(62.5))
    );
    assert_eq!(g["priority"], 1);
    assert_eq!(g["healthy"], true);
    // Endpoint shares by weight: 2:1 of 62.5.
    let e = g["endpoints"].as_array().unwrap();
    assert_eq!(e[0]["share"].as_f64().unwrap(), 62.5 * 2.0 / 3.0);
    assert_eq!(e[1]["share"].as_f64().unwrap(), 62.5 / 3.0);
}

#[test]
fn golden_table_and_json_for_the_shipped_config() {
    for (args, file) in [
        (&[][..], "sim-table.txt"),
        (&["--format", "json"][..], "sim.json"),
    ] {
        let got = sim(args);
        let path = root().join("tests/golden").join(file);
        if std::env::var_os("GTD_BLESS").is_some() {
            std::fs::write(&path, &got).unwrap();
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            got,
            want,
            "sim {args:?} differs from {} (GTD_BLESS=1 to accept)",
            path.display()
        );
    }
}

#[test]
fn output_is_deterministic() {
    assert_eq!(sim(&["--verify", "2000"]), sim(&["--verify", "2000"]));
    assert_eq!(sim(&["--format", "csv"]), sim(&["--format", "csv"]));
}

/// Writes a catalogue and config into a temp dir; returns the config path.
fn custom(dir: &Path, listener_extra: &str, groups: &str) -> PathBuf {
    std::fs::write(
        dir.join("catalog.toml"),
        r#"
route_factor = 1.5
[[region]]
id = "r-a"
name = "A"
lat = 0.0
lon = 0.0
[[region]]
id = "r-b"
name = "B"
lat = 0.0
lon = 10.0
[[region]]
id = "r-c"
name = "C"
lat = 0.0
lon = 20.0
[[region]]
id = "r-d"
name = "D"
lat = 0.0
lon = 30.0
[[region]]
id = "r-e"
name = "E"
lat = 0.0
lon = 40.0
[rtt]
"r-a/r-e" = 2.0
"#,
    )
    .unwrap();
    let path = dir.join("config.toml");
    std::fs::write(
        &path,
        format!(
            "catalog = \"catalog.toml\"\n[[listener]]\nname = \"l\"\nprotocol = \"tcp\"\nport = 7000\nregions = [\"r-a\"]\n{listener_extra}\n{groups}"
        ),
    )
    .unwrap();
    path
}

fn group(name: &str, region: &str, ratio: &str, port: u16) -> String {
    format!(
        "[[listener.group]]\nname = \"{name}\"\nregion = \"{region}\"\nratio = {ratio}\n[[listener.group.endpoint]]\naddress = \"127.0.0.1:{port}\"\n"
    )
}

fn five_groups(dir: &Path, extra: &str) -> PathBuf {
    // Distances from r-a: a 0, b 10°, c 20°, d 30°, but e has a measured 2 ms override → rank 2.
    let groups = [
        group("ga", "r-a", "40", 9001),
        group("gb", "r-b", "12.5", 9002),
        group("gc", "r-c", "0", 9003),
        group("gd", "r-d", "33.3", 9004),
        group("ge", "r-e", "50", 9005),
    ]
    .concat();
    custom(dir, extra, &groups)
}

fn order_and_shares(doc: &Value) -> (String, Vec<(String, f64)>) {
    shares(doc, "l", "r-a")
}

#[test]
fn five_groups_with_decimals_zero_and_a_catalogue_override() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = five_groups(dir.path(), "");
    let doc = json(&["--config", cfg.to_str().unwrap()]);
    // Order: ga (1 ms), ge (2 ms override), gb, gc, gd. Eligible: ga, ge, gb, gd (gc ratio 0).
    // Walk: ga 40; ge 50% of 60 = 30; gb 12.5% of 30 = 3.75; gd 33.3% of 26.25 = 8.74125;
    // leftover 17.50875 / 4 = 4.3771875 each.
    let r = 100.0_f64;
    let ga = r * 40.0 / 100.0;
    let r = r - ga;
    let ge = r * 50.0 / 100.0;
    let r = r - ge;
    let gb = r * 12.5 / 100.0;
    let r = r - gb;
    let gd = r * 33.3 / 100.0;
    let left = (r - gd) / 4.0;
    assert_eq!(
        order_and_shares(&doc),
        (
            "cascade".into(),
            s(&[
                ("ga", ga + left),
                ("ge", ge + left),
                ("gb", gb + left),
                ("gc", 0.0),
                ("gd", gd + left)
            ])
        )
    );
}

#[test]
fn middle_group_down_and_both_failover_modes() {
    let dir = tempfile::tempdir().unwrap();
    // A middle group down is skipped by the cascade without failover.
    let cfg = five_groups(dir.path(), "");
    let doc = json(&["--config", cfg.to_str().unwrap(), "--down", "ge"]);
    let (mode, got) = order_and_shares(&doc);
    assert_eq!(mode, "cascade");
    let left = (100.0 - 40.0 - 7.5 - (52.5 * 33.3 / 100.0)) / 3.0;
    assert_eq!(got[1], ("ge".into(), 0.0));
    assert!((got[0].1 - (40.0 + left)).abs() < 1e-9);

    // Top down, next-priority: the next healthy group with ratio > 0 takes everything.
    let doc = json(&["--config", cfg.to_str().unwrap(), "--down", "l/ga"]);
    assert_eq!(
        order_and_shares(&doc),
        (
            "failover".into(),
            s(&[
                ("ga", 0.0),
                ("ge", 100.0),
                ("gb", 0.0),
                ("gc", 0.0),
                ("gd", 0.0)
            ])
        )
    );

    // Top down, recompute: the cascade over the healthy rest (ge 50; gb 6.25; gd 14.568...).
    let cfg = five_groups(dir.path(), "failover = \"recompute\"");
    let doc = json(&["--config", cfg.to_str().unwrap(), "--down", "l/ga"]);
    let (mode, got) = order_and_shares(&doc);
    assert_eq!(mode, "failover");
    let ge = 50.0;
    let gb = 50.0 * 12.5 / 100.0;
    let gd = (50.0 - gb) * 33.3 / 100.0;
    let left = (50.0 - gb - gd) / 3.0;
    assert_eq!(
        got,
        s(&[
            ("ga", 0.0),
            ("ge", ge + left),
            ("gb", gb + left),
            ("gc", 0.0),
            ("gd", gd + left)
        ])
    );
}

#[test]
fn fail_open_and_no_route() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = five_groups(dir.path(), "");
    let all = [
        "--down", "ga", "--down", "gb", "--down", "gc", "--down", "gd", "--down", "ge",
    ];
    let mut args = vec!["--config", cfg.to_str().unwrap()];
    args.extend(all);
    let (mode, got) = order_and_shares(&json(&args));
    assert_eq!(mode, "no-route");
    assert!(got.iter().all(|(_, v)| *v == 0.0));

    let cfg = five_groups(dir.path(), "fail_open = true");
    let mut args = vec!["--config", cfg.to_str().unwrap()];
    args.extend(all);
    let (mode, got) = order_and_shares(&json(&args));
    assert_eq!(mode, "fail-open");
    let sum: f64 = got.iter().map(|(_, v)| v).sum();
    assert!((sum - 100.0).abs() < 1e-9);
    assert_eq!(
        got[3],
        ("gc".into(), 0.0),
        "ratio 0 stays at 0 in fail-open"
    );
    // The endpoints really take that traffic, as the node's fail-open picks do, and --verify
    // drives them there.
    args.extend(["--verify", "2000"]);
    let doc = json(&args);
    let groups = doc["listeners"][0]["regions"][0]["groups"]
        .as_array()
        .unwrap();
    for g in groups.iter().filter(|g| g["share"].as_f64().unwrap() > 0.0) {
        let endpoint_sum: f64 = g["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["share"].as_f64().unwrap())
            .sum();
        assert!(
            (endpoint_sum - g["share"].as_f64().unwrap()).abs() < 1e-6,
            "{g}"
        );
        let observed: f64 = g["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["observed"].as_f64().unwrap_or(0.0))
            .sum();
        assert!(observed > 0.0, "fail-open picks reach {g}");
    }
}

/// `(group, rtt_ms, rtt_source)` for listener `l` from `r-a`, priority order.
fn rtts(doc: &Value) -> Vec<(String, f64, String)> {
    doc["listeners"][0]["regions"][0]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap().to_owned(),
                g["rtt_ms"].as_f64().unwrap(),
                g["rtt_source"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn latency_and_ratio_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = five_groups(dir.path(), "");
    // Measured: gd at 0.5 ms is now the fastest group from r-a, but only by 0.5 ms against
    // ga (1 ms) and 1.5 ms against ge (2 ms): within the 5 ms margin, so a warmed-up node keeps
    // them ahead. gd does pass gb (~17.7 ms) and gc (~34.4 ms).
    let doc = json(&[
        "--config",
        cfg.to_str().unwrap(),
        "--latency",
        "r-a/gd=0.5",
        "--set",
        "l/gd=100",
    ]);
    let (_, got) = order_and_shares(&doc);
    // ga 40; ge 50% of 60 = 30; gd 100% of the remaining 30; gb and gc nothing.
    assert_eq!(
        got,
        s(&[
            ("ga", 40.0),
            ("ge", 30.0),
            ("gd", 30.0),
            ("gb", 0.0),
            ("gc", 0.0)
        ])
    );
    let got = rtts(&doc);
    assert_eq!((got[2].1, got[2].2.as_str()), (0.5, "measured"), "{got:?}");
    // Unknown names are errors.
    let err = sim_err(&["--config", cfg.to_str().unwrap(), "--set", "nosuch=5"]);
    assert!(err.contains("\"nosuch\" matches no group"), "{err}");
    let err = sim_err(&["--config", cfg.to_str().unwrap(), "--set", "ga=150"]);
    assert!(err.contains("out of range"), "{err}");
}

#[test]
fn rtt_source_names_the_catalogue_entry_and_the_estimate() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = five_groups(dir.path(), "");
    let got = rtts(&json(&["--config", cfg.to_str().unwrap()]));
    let sources: Vec<(&str, &str)> = got.iter().map(|(n, _, s)| (&n[..], &s[..])).collect();
    assert_eq!(
        sources,
        [
            ("ga", "estimated"),
            ("ge", "catalog"),
            ("gb", "estimated"),
            ("gc", "estimated"),
            ("gd", "estimated")
        ]
    );
    assert_eq!(got[1].1, 2.0);
    // The table abbreviates it and says what the abbreviations mean.
    let table = sim(&["--config", cfg.to_str().unwrap()]);
    assert!(table.contains("2.00 cat"), "{table}");
    assert!(
        table.contains("cat = the catalogue's [rtt] entry"),
        "{table}"
    );
    // The shipped config has no [rtt] entries and no measurements: no legend.
    assert!(!sim(&[]).contains("rtt: est ="));
}

#[test]
fn latency_reorders_only_past_the_hysteresis_margin() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = five_groups(dir.path(), "");
    let cfg = cfg.to_str().unwrap();
    let order = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["--config", cfg];
        all.extend(args);
        rtts(&json(&all)).into_iter().map(|(n, _, _)| n).collect()
    };
    let catalogue = ["ga", "ge", "gb", "gc", "gd"];
    assert_eq!(order(&[]), catalogue);
    // ge measured 0.5 ms against ga's 1 ms: faster, but by less than 5 ms.
    assert_eq!(order(&["--latency", "r-a/ge=0.5"]), catalogue);
    // gb measured 14 ms against its ~17.7 estimate: it was already behind ge; nothing moves.
    assert_eq!(order(&["--latency", "r-a/gb=14"]), catalogue);
    // ga measured 60 ms: ge (2), gb (~17.7) and gc (~34.4) are faster by more than
    // max(5, 12) = 12 ms and pass it; gd (~51 ms) is faster by only ~9 ms and stays behind.
    assert_eq!(
        order(&["--latency", "r-a/ga=60"]),
        ["ge", "gb", "gc", "ga", "gd"]
    );
    // Static priority overrides measurements, however far apart.
    let dir = tempfile::tempdir().unwrap();
    let ranked = |name, region, rank, port| {
        group(name, region, "50", port).replacen(
            "ratio = 50\n",
            &format!("ratio = 50\npriority = {rank}\n"),
            1,
        )
    };
    let groups = [ranked("ga", "r-a", 2, 9001), ranked("gb", "r-b", 1, 9002)].concat();
    let cfg = custom(dir.path(), "", &groups);
    let doc = json(&[
        "--config",
        cfg.to_str().unwrap(),
        "--latency",
        "r-a/ga=0.1",
        "--latency",
        "r-a/gb=500",
    ]);
    assert_eq!(
        rtts(&doc),
        [
            ("gb".to_owned(), 500.0, "static".to_owned()),
            ("ga".to_owned(), 0.1, "static".to_owned())
        ]
    );
}

#[test]
fn latency_scenarios_keep_or_change_the_order() {
    // Beijing's node measures 9 ms local, 6 ms Shanghai: within the margin, catalogue order.
    let doc = scenario("latency-within-margin");
    assert_eq!(
        shares(&doc, "web", "cn-beijing"),
        (
            "cascade".into(),
            s(&[("beijing", 62.5), ("shanghai", 37.5)])
        )
    );
    // 40 ms local, 18 ms Shanghai: past max(5 ms, 8 ms), Shanghai first.
    let doc = scenario("latency-reorders");
    assert_eq!(
        shares(&doc, "web", "cn-beijing"),
        (
            "cascade".into(),
            s(&[("shanghai", 62.5), ("beijing", 37.5)])
        )
    );
    // Measurements from Beijing's node change nothing on Shanghai's.
    assert_eq!(
        shares(&doc, "web", "cn-shanghai"),
        (
            "cascade".into(),
            s(&[("shanghai", 62.5), ("beijing", 37.5)])
        )
    );
}

#[test]
fn verify_drives_the_real_selectors() {
    let doc = json(&["--verify", "8000"]);
    for l in doc["listeners"].as_array().unwrap() {
        for r in l["regions"].as_array().unwrap() {
            assert_eq!(r["decisions"], 8000);
            let max = r["max_deviation"].as_f64().unwrap();
            // Rotation and round robin are exact to within a decision or two; source-ip
            // affinity and hashing are statistical over 8000 synthetic clients.
            let bound = if l["listener"] == "web" { 0.05 } else { 3.0 };
            assert!(
                max < bound,
                "{} {}: max deviation {max}",
                l["listener"],
                r["region"]
            );
            for g in r["groups"].as_array().unwrap() {
                assert!(g["observed"].is_number());
            }
        }
    }
}

#[test]
fn compare_shows_before_and_delta() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.toml");
    let text = std::fs::read_to_string(root().join("config.toml"))
        .unwrap()
        .replace(
            "catalog = \"regions/catalog.toml\"",
            &format!(
                "catalog = \"{}\"",
                root().join("regions/catalog.toml").display()
            ),
        );
    // The old config had web/beijing at 100.
    let old_text = text.replacen("ratio = 50", "ratio = 100", 1);
    std::fs::write(&old, old_text).unwrap();
    let doc = json(&["--compare", old.to_str().unwrap()]);
    let g = &doc["listeners"][0]["regions"][0]["groups"][0];
    assert_eq!(
        (
            g["share_before"].as_f64(),
            g["share"].as_f64(),
            g["delta"].as_f64()
        ),
        (Some(100.0), Some(62.5), Some(-37.5))
    );
}

#[test]
fn demand_totals() {
    let doc = scenario("demand");
    let totals = doc["totals"].as_array().unwrap();
    let web_beijing = totals
        .iter()
        .find(|t| t["listener"] == "web" && t["group"] == "beijing" && t["endpoint"].is_null())
        .unwrap();
    // 12000 × 62.5% + 8000 × 37.5%.
    assert_eq!(
        web_beijing["load"].as_f64(),
        Some(12000.0 * 0.625 + 8000.0 * 0.375)
    );
    let table = sim(&["--scenario", "sim/scenarios/demand.toml"]);
    assert!(table.contains("demand-weighted load"), "{table}");
}

#[test]
fn csv_has_a_row_per_group_and_endpoint() {
    let csv = sim(&["--format", "csv", "--region", "cn-beijing"]);
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == header.len()));
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let web_bj = rows
        .iter()
        .find(|r| r[0] == "group" && r[1] == "web" && r[col("group")] == "beijing")
        .unwrap();
    assert_eq!(web_bj[col("share")], "62.500000");
    assert!(
        rows.iter()
            .all(|r| r[col("region")] == "cn-beijing" || r[0] == "total")
    );
}

#[test]
fn client_route() {
    let doc = json(&["--client", "203.0.113.9"]);
    let listener = |name: &str| {
        doc["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["listener"] == name)
            .unwrap()
            .clone()
    };
    for l in doc["listeners"].as_array().unwrap() {
        for r in l["regions"].as_array().unwrap() {
            let route = &r["route"];
            // Every group the client can land in, with its chance: they add up to 100.
            let total: f64 = route["groups"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g["percent"].as_f64().unwrap())
                .sum();
            assert!((total - 100.0).abs() < 1e-9, "{r}");
        }
    }
    // web (affinity none): no fixed group; each group's chance is its share.
    let web = listener("web");
    let route = &web["regions"][0]["route"];
    assert_eq!(route["chosen_by"], "rotation");
    assert!(route["group"].is_null(), "{route}");
    let chances: Vec<(String, f64)> = route["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            assert_eq!(g["endpoint_by"], "method", "{g}");
            (
                g["name"].as_str().unwrap().to_owned(),
                g["percent"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(chances, s(&[("beijing", 62.5), ("shanghai", 37.5)]));
    // Round robin spreads them by weight: 2:1 in Beijing.
    let e = &route["groups"][0]["endpoints"];
    assert_eq!(e[0]["percent"].as_f64().unwrap(), 62.5 * 2.0 / 3.0);
    assert_eq!(e[1]["percent"].as_f64().unwrap(), 62.5 / 3.0);
    // game (source-ip): one group named by the hash, as before; least_conn is load-dependent.
    let game = listener("game");
    let route = &game["regions"][0]["route"];
    assert_eq!(route["chosen_by"], "source-ip");
    assert!(route["group"].is_string(), "{route}");
    assert_eq!(route["endpoint_by"], "rotation");
    assert_eq!(route["groups"][0]["name"], route["group"]);
    assert_eq!(route["groups"][0]["percent"], 100.0);
    assert!(route["groups"][0]["endpoints"][0]["percent"].is_null());
    // voice (affinity none, ratio 100 at home): the local group has the whole share, and the
    // hash of $remote_addr names the endpoint.
    let voice = listener("voice");
    let route = &voice["regions"][0]["route"];
    assert_eq!(route["chosen_by"], "rotation");
    assert_eq!(route["group"], "beijing");
    assert_eq!(route["endpoint_by"], "client");
    assert_eq!(route["groups"][0]["endpoint"], route["endpoint"]);
    assert_eq!(json(&["--client", "203.0.113.9"]), doc);
    // The table says the same.
    let table = sim(&["--client", "203.0.113.9", "--region", "cn-beijing"]);
    for line in [
        "client 203.0.113.9 → no fixed group (affinity none): the node's rotation over the shares picks the group of each request",
        "    beijing    62.50 %  round_robin spreads them: 127.0.0.1:9001 41.67 %, 127.0.0.1:9002 20.83 %",
        "    shanghai   37.50 %  round_robin spreads them: 127.0.0.1:9101 18.75 %, 127.0.0.1:9102 18.75 %",
        "(source-ip: the hash of its address picks it), endpoint 127.0.0.1:901",
        "client 203.0.113.9 → group beijing (affinity none, but the only group with a share: the rotation gives it every flow), endpoint 127.0.0.1:902",
    ] {
        assert!(table.contains(line), "{line:?} not in\n{table}");
    }
}

/// An HTTP listener seen from A with three groups whose methods differ in what a client
/// decides: ip_hash (its address), hash on `$request_uri` (the request's key) and least_conn
/// (nothing: load-dependent).
fn three_methods(dir: &Path, affinity: &str) -> PathBuf {
    let path = custom(dir, "", "");
    let group = |name: &str, region: &str, balance: &str, port: u16| {
        format!(
            "[[listener.group]]\nname = \"{name}\"\nregion = \"{region}\"\nratio = 50\n{balance}\n\
             [[listener.group.endpoint]]\naddress = \"127.0.0.1:{port}\"\n\
             [[listener.group.endpoint]]\naddress = \"127.0.0.1:{}\"\nweight = 3\n",
            port + 1
        )
    };
    let groups = [
        group("a", "r-a", "balance = \"ip_hash\"", 9001),
        group(
            "b",
            "r-b",
            "balance = \"hash\"\nhash_key = \"$request_uri\"",
            9003,
        ),
        group("c", "r-c", "balance = \"least_conn\"", 9005),
    ]
    .concat();
    std::fs::write(
        &path,
        format!(
            "catalog = \"catalog.toml\"\n[[listener]]\nname = \"web\"\nprotocol = \"http\"\nport = 8080\nregions = [\"r-a\"]\naffinity = \"{affinity}\"\n{groups}"
        ),
    )
    .unwrap();
    path
}

/// The decisions the library's own plan makes for one client, `n` times on a fresh node in
/// r-a: how many went to each group (config order).
fn node_decisions(config: &Path, client: std::net::IpAddr, n: usize) -> Vec<usize> {
    use gtd::balance::GroupBalancer;
    use gtd::split::{self, ListenerPlan};
    let cfg = gtd::config::load(config, None).expect("config loads");
    let l = &cfg.listeners[0];
    let now = std::time::Instant::now();
    let balancers: Vec<GroupBalancer> = l
        .groups
        .iter()
        .map(|g| GroupBalancer::new(g, l.protocol, now))
        .collect();
    let facts = split::plan::facts(l, |i| l.groups[i].ratio, &balancers, now);
    let ranking = split::rank(l, &cfg.catalog, "r-a", |_| None);
    let plan = ListenerPlan::build(l, ranking, facts, l.affinity);
    let mut hits = vec![0; l.groups.len()];
    for _ in 0..n {
        hits[plan.plan.choose(client).expect("a route")] += 1;
    }
    hits
}

#[test]
fn a_client_without_affinity_is_spread_as_the_node_spreads_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = three_methods(dir.path(), "none");
    let config = config.to_str().unwrap();
    let ip = "198.51.100.20";
    let doc = json(&["--config", config, "--client", ip]);
    let region = &doc["listeners"][0]["regions"][0];
    let route = &region["route"];
    assert_eq!(route["chosen_by"], "rotation");
    assert!(
        route["group"].is_null() && route["endpoint"].is_null(),
        "{route}"
    );
    let groups = route["groups"].as_array().unwrap();
    // The chance of each group is its share in the node's split, priority order.
    let (_, split) = shares(&doc, "web", "r-a");
    let chances: Vec<(String, f64)> = groups
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap().to_owned(),
                g["percent"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(chances, split);
    let third = 12.5 / 3.0;
    assert_eq!(
        chances,
        s(&[
            ("a", 50.0 + third),
            ("b", 25.0 + third),
            ("c", 12.5 + third)
        ])
    );
    // The node's own plan, asked 6000 times for this one client, spreads it the same way
    // (the rotation keeps every group within one decision of its quota).
    let hits = node_decisions(Path::new(config), ip.parse().unwrap(), 6000);
    for (g, (name, percent)) in groups.iter().zip(&chances) {
        let gi = (name.as_bytes()[0] - b'a') as usize;
        let want = 6000.0 * percent / 100.0;
        assert!(
            (hits[gi] as f64 - want).abs() <= 1.0,
            "{name}: {} decisions, sim says {want}",
            hits[gi]
        );
        let endpoints = g["endpoints"].as_array().unwrap();
        let sum: f64 = endpoints.iter().filter_map(|e| e["percent"].as_f64()).sum();
        match name.as_str() {
            // ip_hash: the client's address names the endpoint, which takes the whole chance.
            "a" => {
                assert_eq!(g["endpoint_by"], "client");
                let e = g["endpoint"].as_str().expect("an endpoint");
                let hit: Vec<&Value> = endpoints.iter().filter(|x| x["address"] == e).collect();
                assert_eq!(hit[0]["percent"].as_f64(), Some(*percent));
                assert!((sum - percent).abs() < 1e-9);
            }
            // hash on $request_uri: no key given, so only the shares of the key space (1:3).
            "b" => {
                assert_eq!(g["endpoint_by"], "request-key");
                assert!(g["endpoint"].is_null());
                assert!((endpoints[1]["percent"].as_f64().unwrap() - percent * 0.75).abs() < 1e-9);
                assert!((sum - percent).abs() < 1e-9);
            }
            // least_conn: load-dependent.
            _ => {
                assert_eq!(g["endpoint_by"], "method");
                assert!(g["endpoint"].is_null());
                assert!(endpoints.iter().all(|e| e["percent"].is_null()));
            }
        }
    }
    // With the request's key, the hash names b's endpoint too.
    let doc = json(&["--config", config, "--client", ip, "--key", "/index.html"]);
    let b = &doc["listeners"][0]["regions"][0]["route"]["groups"][1];
    assert_eq!(
        (b["name"].as_str(), b["endpoint_by"].as_str()),
        (Some("b"), Some("client"))
    );
    assert!(b["endpoint"].is_string());
    // The table: one line per group with its chance and what decides the endpoint.
    let table = sim(&["--config", config, "--client", ip]);
    for line in [
        "no fixed group (affinity none): the node's rotation over the shares picks the group of each request; this client's requests go",
        "    a   54.17 %  endpoint 127.0.0.1:900",
        "(ip_hash: the same for every request of this client)",
        "    b   29.17 %  hash of the request's key (give --key to name the endpoint): 127.0.0.1:9003 7.29 %, 127.0.0.1:9004 21.88 %",
        "    c   16.67 %  least_conn spreads them by load (load-dependent)",
    ] {
        assert!(table.contains(line), "{line:?} not in\n{table}");
    }
}

#[test]
fn a_client_with_source_ip_affinity_keeps_one_group() {
    let dir = tempfile::tempdir().unwrap();
    let config = three_methods(dir.path(), "source-ip");
    let config = config.to_str().unwrap();
    for ip in ["198.51.100.20", "198.51.100.21", "2001:db8::7"] {
        let doc = json(&["--config", config, "--client", ip]);
        let route = &doc["listeners"][0]["regions"][0]["route"];
        assert_eq!(route["chosen_by"], "source-ip");
        let group = route["group"].as_str().expect("one group");
        let groups = route["groups"].as_array().unwrap();
        assert_eq!(groups.len(), 1, "{route}");
        assert_eq!(
            (groups[0]["name"].as_str(), groups[0]["percent"].as_f64()),
            (Some(group), Some(100.0))
        );
        // The node's plan sends every decision of this client there.
        let hits = node_decisions(Path::new(config), ip.parse().unwrap(), 50);
        let gi = (group.as_bytes()[0] - b'a') as usize;
        assert_eq!(hits[gi], 50, "{ip}: {hits:?}, sim says {group}");
        let table = sim(&["--config", config, "--client", ip]);
        assert!(
            table.contains(&format!(
                "client {ip} → group {group} (source-ip: the hash of its address picks it)"
            )),
            "{table}"
        );
    }
}

/// An HTTP listener with two forwarding rules over groups in A, B and C, seen from A.
fn routed(dir: &Path) -> PathBuf {
    let path = custom(dir, "", "");
    let groups: String = [("a", "r-a"), ("b", "r-b"), ("c", "r-c")]
        .iter()
        .enumerate()
        .map(|(i, (name, region))| group(name, region, "50", 9001 + i as u16))
        .collect();
    std::fs::write(
        &path,
        format!(
            r#"catalog = "catalog.toml"
[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["r-a"]
  [[listener.route]]
  host = "api.example.com"
  path_prefix = ["/v2/"]
  groups = ["c", "b"]
  [[listener.route]]
  path_prefix = ["/static/"]
  header = {{ name = "x-tier", value = "gold" }}
  groups = ["b"]
{groups}"#
        ),
    )
    .unwrap();
    path
}

#[test]
fn each_forwarding_rule_has_its_split() {
    let dir = tempfile::tempdir().unwrap();
    let config = routed(dir.path());
    let config = config.to_str().unwrap();
    let doc = json(&["--config", config]);
    let region = &doc["listeners"][0]["regions"][0];
    // The listener's own cascade over a, b, c (A's node ranks them in that order): 50, 25 and
    // 12.5 on the first pass, the 12.5 left split three ways.
    let (_, listener) = shares(&doc, "web", "r-a");
    let third = 12.5 / 3.0;
    assert_eq!(
        listener,
        s(&[
            ("a", 50.0 + third),
            ("b", 25.0 + third),
            ("c", 12.5 + third)
        ])
    );
    let routes = region["routes"].as_array().expect("a routes section");
    assert_eq!(routes.len(), 2);
    // Rule 1 runs the cascade over b and c only: b ranks first from A.
    assert_eq!(routes[0]["rule"], 1);
    assert_eq!(routes[0]["matches"], "host api.example.com, path /v2/");
    assert_eq!(routes[0]["mode"], "cascade");
    let split: Vec<(String, f64)> = routes[0]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap().to_owned(),
                g["share"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(split, s(&[("b", 62.5), ("c", 37.5)]));
    assert_eq!(routes[1]["groups"][0]["share"], 100.0);
    // Down, its rule has no route while the listener fails over.
    let doc = json(&["--config", config, "--down", "b"]);
    let routes = &doc["listeners"][0]["regions"][0]["routes"];
    assert_eq!(routes[1]["mode"], "no-route");
    assert_eq!(routes[0]["groups"][1]["share"], 100.0);
    // The table has the section too; a listener without rules has none (shipped config).
    let table = sim(&["--config", config]);
    assert!(table.contains("forwarding rules"), "{table}");
    assert!(table.contains("host api.example.com, path /v2/"), "{table}");
    assert!(!sim(&[]).contains("forwarding rules"));
}

#[test]
fn a_request_finds_its_rule_and_group() {
    let dir = tempfile::tempdir().unwrap();
    let config = routed(dir.path());
    let config = config.to_str().unwrap();
    let ask = |extra: &[&str]| {
        let mut args = vec!["--config", config, "--client", "203.0.113.9"];
        args.extend(extra);
        json(&args)["listeners"][0]["regions"][0]["route"].clone()
    };
    let r = ask(&["--host", "api.example.com", "--path", "/v2/users"]);
    assert_eq!(r["rule"], 1);
    // Affinity none: the rule's own rotation spreads the request over its two groups.
    let chances: Vec<(String, f64)> = r["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap().to_owned(),
                g["percent"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(chances, s(&[("b", 62.5), ("c", 37.5)]), "{r}");
    // The header rule takes only requests carrying it.
    let r = ask(&["--path", "/static/x.css", "--header", "X-Tier: gold"]);
    assert_eq!(
        (r["rule"].clone(), r["group"].clone()),
        (2.into(), "b".into())
    );
    let r = ask(&["--path", "/static/x.css"]);
    assert_eq!(r["rule"], "default");
    // A host a rule claims, on a path none covers: 404.
    let r = ask(&["--host", "api.example.com", "--path", "/v1/"]);
    assert_eq!(r["rule"], "not-found");
    assert!(r["group"].is_null());
    let table = sim(&[
        "--config",
        config,
        "--client",
        "203.0.113.9",
        "--host",
        "api.example.com",
        "--path",
        "/v1/",
    ]);
    assert!(table.contains("→ 404"), "{table}");
    assert!(sim_err(&["--host", "x"]).contains("--client"));
    // What a request line could not carry is refused, naming the flag.
    for (flag, value, says) in [
        ("--path", "v1/users", "a path starts with /"),
        (
            "--path",
            "http://api.example.com/v2/",
            "give the host with --host",
        ),
        ("--header", "x tier:gold", "not a header name"),
        ("--header", "x-tier", "expected NAME:VALUE"),
    ] {
        let err = sim_err(&["--config", config, "--client", "203.0.113.9", flag, value]);
        assert!(
            err.contains(flag) && err.contains(says),
            "{flag} {value}: {err}"
        );
    }
    // A query is not part of the path rules match.
    let r = ask(&["--host", "api.example.com", "--path", "/v2/?q=1"]);
    assert_eq!(r["rule"], 1);
    // On listeners without rules the request flags change nothing, and the table says so.
    let table = sim(&["--client", "203.0.113.9", "--path", "/v2/"]);
    assert!(table.contains("changed nothing"), "{table}");
}

#[test]
fn check_results_replay_through_the_nodes_verdict() {
    // The shipped web groups check with unhealthy_threshold 3 and healthy_threshold 2.
    let web = |checks: &str| {
        shares(
            &json(&["--region", "cn-beijing", "--checks", checks]),
            "web",
            "cn-beijing",
        )
    };
    let cascade = (
        "cascade".to_owned(),
        s(&[("beijing", 62.5), ("shanghai", 37.5)]),
    );
    let failover = (
        "failover".to_owned(),
        s(&[("beijing", 0.0), ("shanghai", 100.0)]),
    );
    assert_eq!(
        web("web/beijing=fail,fail"),
        cascade,
        "two failures: still in"
    );
    assert_eq!(web("web/beijing=fail,timeout,fail"), failover, "three: out");
    assert_eq!(
        web("web/beijing=fail,fail,fail,pass"),
        failover,
        "one pass: not yet"
    );
    assert_eq!(
        web("web/beijing=fail,fail,fail,pass,pass"),
        cascade,
        "two passes: back"
    );
    // One endpoint out, the other in: the group stays healthy (min_healthy 1).
    let doc = json(&[
        "--region",
        "cn-beijing",
        "--checks",
        "web/beijing/127.0.0.1:9001=timeout,timeout,timeout",
    ]);
    assert_eq!(shares(&doc, "web", "cn-beijing").0, "cascade");
    // A scenario file says the same with [health] checks.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("checks.toml");
    std::fs::write(
        &file,
        "[health]\nchecks = { \"web/beijing\" = [\"fail\", \"fail\", \"fail\"] }\n",
    )
    .unwrap();
    let doc = json(&[
        "--region",
        "cn-beijing",
        "--scenario",
        file.to_str().unwrap(),
    ]);
    assert_eq!(shares(&doc, "web", "cn-beijing"), failover);
    // Wrong words and groups without checks are errors that say so.
    assert!(sim_err(&["--checks", "web/beijing=maybe"]).contains("expected pass, fail or timeout"));
}

#[test]
fn recipes_show_what_sim_prints() {
    // Every `sim` run pasted in docs/recipes.md, rerun: the operator recipes stay true.
    let text = std::fs::read_to_string(root().join("docs/recipes.md")).unwrap();
    let prompt = "$ cargo run --release --bin sim -- ";
    // Fenced blocks, by their lines: (the opening fence's info string, the body).
    let mut blocks: Vec<(String, String)> = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in text.lines() {
        match (line.strip_prefix("```"), open.take()) {
            (Some(info), None) => open = Some((info.to_owned(), String::new())),
            (Some(_), Some(block)) => blocks.push(block),
            (None, Some((info, mut body))) => {
                body.push_str(line);
                body.push('\n');
                open = Some((info, body));
            }
            (None, None) => {}
        }
    }
    let mut checked = 0;
    for (_, body) in &blocks {
        let Some(rest) = body.strip_prefix(prompt) else {
            continue;
        };
        let (command, pasted) = rest.split_once('\n').unwrap();
        let args: Vec<&str> = command.split_whitespace().collect();
        assert_eq!(
            sim(&args),
            pasted,
            "docs/recipes.md: the output of `sim {command}` differs from what sim prints now"
        );
        checked += 1;
    }
    assert_eq!(checked, 5, "sim runs found in docs/recipes.md");
}
