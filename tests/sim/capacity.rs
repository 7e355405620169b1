//! Capacity planning and graceful degradation in `sim`: utilisation of the shipped config
//! under `sim/scenarios/n-plus-one.toml`, the N+1 check (`--each-down` 1, 2 and `region`,
//! `--fail-on-overflow`), and a graceful listener's shares as endpoints fail one by one — every
//! number checked by hand in the comments.

use crate::what_if::custom;
use crate::*;

pub(crate) const N_PLUS_ONE: &str = "sim/scenarios/n-plus-one.toml";

/// The simulator's (fails under `--fail-on-overflow`, output).
fn outcome(args: &[&str]) -> (bool, String) {
    let out = run(args).expect("sim runs");
    (out.fail, out.text)
}

fn total<'a>(doc: &'a Value, listener: &str, group: &str, endpoint: Option<&str>) -> &'a Value {
    doc["totals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| {
            t["listener"] == listener && t["group"] == group && t["endpoint"] == json_str(endpoint)
        })
        .expect("row")
}

fn json_str(s: Option<&str>) -> Value {
    s.map_or(Value::Null, |s| Value::String(s.to_owned()))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn utilisation_of_the_shipped_config() {
    // Beijing's node: 62.5 % of 12000 to beijing (7500), 37.5 % to shanghai (4500); Shanghai's
    // node the mirror: 5000 to shanghai, 3000 to beijing. beijing 10500 of 24000 = 43.75 %;
    // shanghai 9500 of 16000 = 59.375 %.
    let doc = scenario("n-plus-one");
    let bj = total(&doc, "web", "beijing", None);
    assert!(close(bj["load"].as_f64().unwrap(), 10500.0));
    assert_eq!(bj["capacity"].as_f64(), Some(24000.0));
    assert!(close(bj["utilisation"].as_f64().unwrap(), 43.75));
    assert_eq!(bj["status"], "ok");
    let sh = total(&doc, "web", "shanghai", Some("127.0.0.1:9101"));
    assert!(close(sh["utilisation"].as_f64().unwrap(), 59.375));
    // No capacity, no utilisation.
    let game = total(&doc, "game", "beijing", None);
    assert!(
        game["capacity"].is_null() && game["utilisation"].is_null() && game["status"].is_null()
    );

    // 9001 (16000 of beijing's 24000) failing: next-priority keeps beijing's share whole, so
    // 9002 alone carries all 10500 of it: 8000 left, 131.25 %, 2500 over.
    let mut args = vec![
        "--scenario",
        N_PLUS_ONE,
        "--down",
        "web/beijing/127.0.0.1:9001",
    ];
    let doc = json(&args);
    let bj = total(&doc, "web", "beijing", None);
    assert_eq!(bj["capacity"].as_f64(), Some(8000.0));
    assert!(close(bj["utilisation"].as_f64().unwrap(), 131.25));
    assert_eq!(bj["status"], "over");
    let (fail, _) = outcome(&{
        args.push("--fail-on-overflow");
        args
    });
    assert!(fail);

    let table = sim(&["--scenario", N_PLUS_ONE]);
    assert!(table.contains("capacity  use %"), "{table}");
    let row = table
        .lines()
        .find(|l| l.contains("web") && l.contains("shanghai") && l.contains("9500.00"))
        .expect("shanghai's row");
    assert!(row.contains("16000.00") && row.contains("59.38"), "{row}");

    let csv = sim(&["--scenario", N_PLUS_ONE, "--format", "csv"]);
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert_eq!(
        header[header.len() - 6..],
        [
            "usable",
            "keep",
            "spill",
            "capacity",
            "utilisation",
            "status"
        ]
    );
    let row = csv
        .lines()
        .find(|l| {
            l.starts_with("total,web,") && l.contains(",beijing,") && !l.contains("127.0.0.1")
        })
        .unwrap();
    assert_eq!(row.split(',').count(), header.len(), "{row}");
    assert!(row.ends_with(",24000.000000,43.750000,ok"), "{row}");
}

#[test]
fn each_down_on_the_shipped_config() {
    let (fail, text) = outcome(&["--scenario", N_PLUS_ONE, "--each-down"]);
    assert!(!fail, "without --fail-on-overflow the check only reports");
    // Beijing down: all 20000 to shanghai, 4000 over its 16000 — ranked first.
    let first = text
        .lines()
        .position(|l| l.contains("1. down web/beijing:"))
        .expect(&text);
    let second = text
        .lines()
        .position(|l| l.contains("2. down web/shanghai:"))
        .expect(&text);
    assert!(first < second);
    assert!(
        text.contains("web/shanghai OVER by 4000.00: 20000.00 of 16000 (125.00 %)"),
        "{text}"
    );
    // Shanghai down: beijing carries 20000 of 24000 = 83.33 %, above the 80 % headroom.
    assert!(
        text.contains("web/beijing above 80 % headroom: 20000.00 of 24000 (83.33 %)"),
        "{text}"
    );
    assert!(text.contains("1 of 2 cases overflows"), "{text}");

    let (fail, _) = outcome(&[
        "--scenario",
        N_PLUS_ONE,
        "--each-down",
        "--fail-on-overflow",
    ]);
    assert!(fail);

    let doc: Value = serde_json::from_str(&sim(&[
        "--scenario",
        N_PLUS_ONE,
        "--each-down",
        "--format",
        "json",
    ]))
    .unwrap();
    let check = &doc["each_down"];
    assert_eq!(check["failures"], 1);
    assert_eq!(check["baseline"]["overflows"], false);
    let cases = check["cases"].as_array().unwrap();
    assert_eq!(cases[0]["down"], serde_json::json!(["web/beijing"]));
    assert_eq!(cases[0]["worst"]["group"], "shanghai");
    assert!(
        cases[0]["worst"]["endpoint"].is_null(),
        "a group is named before its endpoints"
    );
    assert!(close(
        cases[0]["over"][0]["over_by"].as_f64().unwrap(),
        4000.0
    ));
    assert_eq!(cases[1]["overflows"], false);
    assert_eq!(cases[1]["above_headroom"][0]["group"], "beijing");

    let csv = sim(&["--scenario", N_PLUS_ONE, "--each-down", "--format", "csv"]);
    assert!(
        csv.lines().any(|l| l == "1,web/beijing,web,shanghai,,,20000.000000,16000.000000,125.000000,over,4000.000000"),
        "{csv}"
    );
}

/// A tcp listener "api" served from r-a and r-c, three groups at ratio 100 (the top takes
/// all): ga in r-a (capacity 1000), gb in r-b (600), gc in r-c (800). From r-a the order is
/// ga, gb, gc; from r-c gc, gb, ga. Demand: 500 at r-a, 400 at r-c.
fn three_groups(dir: &Path, extra: &str) -> (PathBuf, PathBuf) {
    let config = custom(dir, "", "");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "regions = [\"r-a\"]",
        &format!("regions = [\"r-a\", \"r-c\"]\n{extra}"),
    );
    let groups: String = [("ga", "r-a", 1000, 9001), ("gb", "r-b", 600, 9002), ("gc", "r-c", 800, 9003)]
        .iter()
        .map(|(name, region, cap, port)| {
            format!(
                "[[listener.group]]\nname = \"{name}\"\nregion = \"{region}\"\nratio = 100\ncapacity = {cap}\n\
                 [[listener.group.endpoint]]\naddress = \"127.0.0.1:{port}\"\n"
            )
        })
        .collect();
    std::fs::write(&config, format!("{text}{groups}")).unwrap();
    let scenario = dir.join("demand.toml");
    std::fs::write(&scenario, "[demand]\nr-a = 500\nr-c = 400\n").unwrap();
    (config, scenario)
}

fn cases(config: &Path, scenario: &Path, each: &str) -> Vec<(Vec<String>, f64, bool)> {
    let doc: Value = serde_json::from_str(&sim(&with(
        config,
        scenario,
        &["--each-down", each, "--format", "json"],
    )))
    .unwrap();
    doc["each_down"]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["down"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_str().unwrap().to_owned())
                    .collect(),
                c["worst"]["utilisation"].as_f64().unwrap(),
                c["overflows"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn each_down_ranks_singles_pairs_and_regions_worst_first() {
    let dir = tempfile::tempdir().unwrap();
    let (config, scenario) = three_groups(dir.path(), "");
    let v = |x: &[&str]| x.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    // ga down: r-a's 500 to gb, 500/600 = 83.33 %; gc down: r-c's 400 to gb, 66.67 %; gb down:
    // nothing moves, ga and gc at 50 %.
    let singles = cases(&config, &scenario, "1");
    assert_eq!(
        singles.iter().map(|c| c.0.clone()).collect::<Vec<_>>(),
        [v(&["l/ga"]), v(&["l/gc"]), v(&["l/gb"])]
    );
    assert!(
        close(singles[0].1, 500.0 / 6.0)
            && close(singles[1].1, 400.0 / 6.0)
            && close(singles[2].1, 50.0)
    );
    assert!(singles.iter().all(|c| !c.2));
    // Pairs: ga+gc sends 900 to gb (150 %), ga+gb 900 to gc (112.5 %), gb+gc 900 to ga (90 %).
    let pairs = cases(&config, &scenario, "2");
    assert_eq!(
        pairs.iter().map(|c| c.0.clone()).collect::<Vec<_>>(),
        [
            v(&["l/ga", "l/gc"]),
            v(&["l/ga", "l/gb"]),
            v(&["l/gb", "l/gc"])
        ]
    );
    assert!(close(pairs[0].1, 150.0) && close(pairs[1].1, 112.5) && close(pairs[2].1, 90.0));
    assert_eq!(
        pairs.iter().map(|c| c.2).collect::<Vec<_>>(),
        [true, true, false]
    );
    // A region at once: one group each here, so the singles again.
    let text = sim(&with(&config, &scenario, &["--each-down", "region"]));
    assert!(
        text.contains("1. down region r-a (l/ga): worst l/gb 83.33 %"),
        "{text}"
    );
    let regions = cases(&config, &scenario, "region");
    assert_eq!(
        regions.iter().map(|c| c.0.clone()).collect::<Vec<_>>(),
        [v(&["l/ga"]), v(&["l/gc"]), v(&["l/gb"])]
    );
    // All three: no route anywhere, which overflows whatever the capacities.
    let all = cases(&config, &scenario, "3");
    assert!(all[0].2);
    let (fail, text) = outcome(&with(
        &config,
        &scenario,
        &["--each-down", "3", "--fail-on-overflow"],
    ));
    assert!(fail);
    assert!(
        text.contains("l from r-a: no route, 500.00 of demand unserved"),
        "{text}"
    );
}

#[test]
fn headroom_is_the_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let (config, scenario) = three_groups(dir.path(), "headroom = 90");
    let text = sim(&with(&config, &scenario, &["--each-down"]));
    // 83.33 % is under a 90 % headroom.
    assert!(
        text.contains("down l/ga: worst l/gb 83.33 % (500.00 of 600) · ok"),
        "{text}"
    );
    let (config, _) = three_groups(dir.path(), "");
    let text = sim(&with(&config, &scenario, &["--each-down"]));
    assert!(
        text.contains("down l/ga: worst l/gb 83.33 % (500.00 of 600) · above headroom"),
        "{text}"
    );
}

#[test]
fn what_the_check_needs() {
    let e = sim_err(&["--each-down"]);
    assert!(e.contains("--each-down needs client demand"), "{e}");
    let e = sim_err(&["--fail-on-overflow"]);
    assert!(e.contains("--fail-on-overflow needs client demand"), "{e}");
    let e = sim_err(&["--scenario", N_PLUS_ONE, "--each-down", "--verify", "10"]);
    assert!(e.contains("--verify has no place"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let config = custom(dir.path(), "", &what_if::group("g", "r-a", "100", 9001));
    let demand = dir.path().join("demand.toml");
    std::fs::write(&demand, "[demand]\nr-a = 10\n").unwrap();
    let e = sim_err(&[
        "--config",
        config.to_str().unwrap(),
        "--scenario",
        demand.to_str().unwrap(),
        "--each-down",
    ]);
    assert!(
        e.contains("no group or endpoint of the config has a capacity"),
        "{e}"
    );
}

/// A graceful tcp listener served from r-a: ga (ratio 50, four endpoints), gb (50), gc (100),
/// one endpoint each; from r-a the cascade is 50 / 25 / 25.
fn graceful(dir: &Path, extra: &str) -> PathBuf {
    let four: String = (1..=4)
        .map(|i| format!("[[listener.group.endpoint]]\naddress = \"127.0.0.1:910{i}\"\n"))
        .collect();
    let groups = format!(
        "[[listener.group]]\nname = \"ga\"\nregion = \"r-a\"\nratio = 50\n{four}{}{}",
        what_if::group("gb", "r-b", "50", 9201),
        what_if::group("gc", "r-c", "100", 9301)
    );
    custom(dir, &format!("failover = \"graceful\"\n{extra}"), &groups)
}

#[test]
fn graceful_shares_as_endpoints_fail_one_by_one() {
    let dir = tempfile::tempdir().unwrap();
    let config = graceful(dir.path(), "");
    let c = config.to_str().unwrap();
    let mut down: Vec<String> = Vec::new();
    // Usable 4, 3, 2, 1, 0 of ga's four: keeps min(1, 1.4 × f) = 1, 1 (1.05), 0.7, 0.35, 0;
    // ga = 50 × keeps, gb = 25 + what ga passes down, gc 25.
    let expected = [
        ("cascade", [50.0, 25.0, 25.0]),
        ("cascade", [50.0, 25.0, 25.0]),
        ("cascade", [35.0, 40.0, 25.0]),
        ("cascade", [17.5, 57.5, 25.0]),
        ("failover", [0.0, 75.0, 25.0]),
    ];
    for (i, (mode, want)) in expected.iter().enumerate() {
        let mut args = vec!["--config", c];
        for d in &down {
            args.extend(["--down", d.as_str()]);
        }
        let doc = json(&args);
        let (m, got) = shares(&doc, "l", "r-a");
        assert_eq!(&m, mode, "{i} down");
        for ((name, share), w) in got.iter().zip(want) {
            assert!(close(*share, *w), "{i} down: {name} {share} vs {w}");
        }
        let ga = &doc["listeners"][0]["regions"][0]["groups"][0];
        assert!(close(ga["usable"].as_f64().unwrap(), (4 - i) as f64 / 4.0));
        down.push(format!("l/ga/127.0.0.1:910{}", i + 1));
    }
    // overprovisioning = 1: two of four down keep exactly half.
    let config = graceful(dir.path(), "overprovisioning = 1");
    let doc = json(&[
        "--config",
        config.to_str().unwrap(),
        "--down",
        "l/ga/127.0.0.1:9101",
        "--down",
        "l/ga/127.0.0.1:9102",
    ]);
    let (_, got) = shares(&doc, "l", "r-a");
    assert!(close(got[0].1, 25.0) && close(got[1].1, 50.0), "{got:?}");
    let table = sim(&[
        "--config",
        config.to_str().unwrap(),
        "--down",
        "l/ga/127.0.0.1:9101",
    ]);
    assert!(table.contains("keeps = min(1, 1 × usable)"), "{table}");
}

/// `--config CONFIG --scenario SCENARIO` and then `extra`.
fn with<'a>(
    config: &'a std::path::Path,
    scenario: &'a std::path::Path,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "--config",
        config.to_str().unwrap(),
        "--scenario",
        scenario.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    args
}
