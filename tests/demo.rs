//! `gtd demo` as a user runs it: the real binary on the shipped config, piped (plain progress
//! lines), with a group stopped and started mid-run, and its JSON report compared with `sim`;
//! a port it needs that is taken is an error naming it.
//!
//! One test function: the demo binds the shipped config's fixed ports, so its runs take turns.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn demo(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gtd"))
        .arg("demo")
        .args(args)
        .current_dir(root())
        .output()
        .expect("run gtd demo")
}

/// (listener, region) → group → (expected, observed), and decisions, from the JSON report.
type Report = BTreeMap<(String, String), (u64, u64, BTreeMap<String, (f64, f64)>)>;

fn report(doc: &Value) -> Report {
    let mut out = Report::new();
    for l in doc["listeners"].as_array().unwrap() {
        for r in l["regions"].as_array().unwrap() {
            let groups = r["groups"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| {
                    (
                        g["name"].as_str().unwrap().to_owned(),
                        (
                            g["expected"].as_f64().unwrap(),
                            g["observed"].as_f64().unwrap(),
                        ),
                    )
                })
                .collect();
            out.insert(
                (
                    l["listener"].as_str().unwrap().to_owned(),
                    r["region"].as_str().unwrap().to_owned(),
                ),
                (
                    r["decisions"].as_u64().unwrap(),
                    r["failed"].as_u64().unwrap(),
                    groups,
                ),
            );
        }
    }
    out
}

#[test]
fn the_demo_shows_the_split_sim_predicts_and_a_failover() {
    // 1. A plain run: every listener and region, observed against sim's shares.
    let began = std::time::Instant::now();
    let out = demo(&["--duration", "6s", "--rate", "40", "--json"]);
    // Once the load stops the report follows: each node used to drain its idle UDP flows for
    // the whole 30 s drain_timeout first (66 s for this run). The bound is generous, for a
    // busy machine.
    assert!(
        began.elapsed() < std::time::Duration::from_secs(40),
        "a 6 s demo took {:?}",
        began.elapsed()
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let got = report(&doc);
    let sim = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(["--format", "json"])
        .current_dir(root())
        .output()
        .unwrap();
    let sim: Value = serde_json::from_slice(&sim.stdout).unwrap();
    let mut compared = 0;
    for l in sim["listeners"].as_array().unwrap() {
        for r in l["regions"].as_array().unwrap() {
            let key = (
                l["listener"].as_str().unwrap().to_owned(),
                r["region"].as_str().unwrap().to_owned(),
            );
            let (decisions, failed, groups) = &got[&key];
            assert_eq!(*failed, 0, "{key:?}");
            assert!(*decisions > 50, "{key:?}: {decisions} decisions");
            for g in r["groups"].as_array().unwrap() {
                let name = g["name"].as_str().unwrap();
                let (expected, observed) = groups[name];
                // What the nodes expected is what sim predicts for the same config.
                assert!(
                    (expected - g["share"].as_f64().unwrap()).abs() < 0.01,
                    "{key:?} {name}: node {expected}, sim {}",
                    g["share"]
                );
                // Rotation (no affinity) is exact to a decision or two; source-ip affinity
                // is a hash of the client addresses: within 5 standard deviations of a
                // binomial draw.
                let n = *decisions as f64;
                let p = expected / 100.0;
                // (In the shipped config, game is the source-ip listener.)
                let tolerance = if key.0 == "game" {
                    100.0 * 5.0 * (p * (1.0 - p) / n).sqrt() + 0.5
                } else {
                    100.0 * 2.0 / n + 0.01
                };
                assert!(
                    (observed - expected).abs() <= tolerance,
                    "{key:?} {name}: observed {observed}, expected {expected} (±{tolerance})"
                );
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 12, "3 listeners × 2 regions × 2 groups");

    // 2. Piped, with web's Beijing group stopped: plain progress lines, the failover in them,
    // and the final table.
    let out = demo(&[
        "--duration",
        "8s",
        "--rate",
        "20",
        "--stop",
        "web/beijing@2s",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("stop web/beijing: its endpoints stop answering"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains(" web cn-beijing failover ") && l.contains("UNHEALTHY")),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "no terminal codes when piped");
    assert!(text.contains("largest deviation"), "{text}");

    // 3. A port it needs, taken: an error that names it.
    let taken = std::net::TcpListener::bind("127.0.0.1:9001").unwrap();
    let out = demo(&["--duration", "2s"]);
    drop(taken);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("127.0.0.1:9001 (web/beijing)"), "{err}");
}
