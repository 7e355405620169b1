//! Every scenario of `sim/scenarios/` that can be applied to real nodes: the shipped config
//! (ports replaced, checks every second) with the scenario's `[ratios]` written into it and
//! its `[health] down` groups' endpoints not served (the backends process runs a copy of the
//! config in which they are moved to other ports), against `sim --scenario FILE` on the
//! nodes' own file. Every listener from both regions is measured, not only the one the
//! scenario changes.
//!
//! Not run: `[latency]` scenarios (a node ranks by the RTT it measures; on loopback the only
//! delays are the catalogue's, which the demo's endpoints add to HTTP answers, so a measured
//! time other than the catalogue's cannot be forced), and `[demand]` (it weighs load summed
//! over regions, a figure of `sim`'s table, not a split a node produces).

use crate::fleet::*;

use std::path::PathBuf;

fn path(file: &str) -> PathBuf {
    crate::common::root().join("sim/scenarios").join(file)
}

fn run(file: &str) {
    let scenario: toml::Table = std::fs::read_to_string(path(file))
        .unwrap()
        .parse()
        .unwrap();
    let mut cfg = Cfg::shipped();
    cfg.set_interval("1s");
    if let Some(ratios) = scenario.get("ratios").and_then(|r| r.as_table()) {
        for (name, ratio) in ratios {
            let r = ratio.as_float().or(ratio.as_integer().map(|i| i as f64));
            cfg.set_ratio(name, r.unwrap());
        }
    }
    let down: Vec<&str> = scenario
        .get("health")
        .and_then(|h| h.get("down"))
        .and_then(|d| d.as_array())
        .map(|d| d.iter().map(|n| n.as_str().unwrap()).collect())
        .unwrap_or_default();
    assert!(
        down.iter().all(|n| n.matches('/').count() <= 1),
        "{file}: only groups are taken down here"
    );
    let fleet = Fleet::start(&cfg, &[cfg.serving(&down, false)]);
    fleet.wait_health(&down);
    let sim = fleet.sim(&["--scenario", path(file).to_str().unwrap()]);
    fleet.conforms(&sim);
}

macro_rules! scenarios {
    ($($test:ident => $file:literal,)*) => {
        $(
            #[test]
            fn $test() {
                run($file);
            }
        )*
        /// The scenario files run above.
        const RUN: &[&str] = &[$($file),*];
    };
}

scenarios! {
    decommission_0_percent => "decommission-0-percent.toml",
    decommission_1_percent => "decommission-1-percent.toml",
    health_failover => "health-failover.toml",
    rollout_1_percent_beijing_50 => "rollout-1-percent-beijing-50.toml",
    rollout_1_percent => "rollout-1-percent.toml",
    rollout_100_percent => "rollout-100-percent.toml",
    spec_100_100 => "spec-100-100.toml",
    spec_30_100 => "spec-30-100.toml",
    spec_50_100 => "spec-50-100.toml",
    spec_50_50 => "spec-50-50.toml",
}

/// Every scenario file is either run above or one of `[latency]` / `[demand]` (not run, for
/// the reasons in the module doc): a new scenario cannot be left out unnoticed.
#[test]
fn every_scenario_is_run_or_skipped_for_a_reason() {
    let dir = crate::common::root().join("sim/scenarios");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if !name.ends_with(".toml") {
            continue;
        }
        seen += 1;
        let s: toml::Table = std::fs::read_to_string(dir.join(&name))
            .unwrap()
            .parse()
            .unwrap();
        let skipped = s.contains_key("latency") || s.contains_key("demand");
        assert!(
            RUN.contains(&name.as_str()) != skipped,
            "{name}: run {} but latency/demand {skipped}",
            RUN.contains(&name.as_str())
        );
    }
    assert_eq!(
        seen,
        RUN.len() + 4,
        "10 run, 2 latency and 2 demand scenarios"
    );
}
