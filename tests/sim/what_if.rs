//! Configs the tests write and every what-if: groups down under both failover modes,
//! fail-open, latency and ratio overrides, `--verify`, `--compare`, demand and CSV.

use crate::*;

/// Writes a catalogue and config into a temp dir; returns the config path.
pub(crate) fn custom(dir: &Path, listener_extra: &str, groups: &str) -> PathBuf {
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

pub(crate) fn group(name: &str, region: &str, ratio: &str, port: u16) -> String {
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
