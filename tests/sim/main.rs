//! The `sim` binary as a user runs it: shipped config and scenarios, every worked example of
//! docs/design.md §3.2 from both acceleration regions, failover modes, fail-open, overrides, formats, and
//! golden files of the table and JSON for the shipped config (`GTD_BLESS=1` rewrites them).
//!
//! - [`shipped`]: the shipped config — worked examples, golden files, recipes, check replays;
//! - [`what_if`]: configs written by the tests and every what-if flag (`--down`, `--set`,
//!   `--latency`, `--verify`, `--compare`, demand, CSV);
//! - [`clients`]: `--client` and forwarding rules, against the node's own decisions;
//! - [`capacity`]: utilisation against `capacity`, the N+1 check (`--each-down`), graceful
//!   shares as endpoints fail one by one.
//! - [`pictures`]: `--format svg`, parsed, its numbers against JSON, and its golden files.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `sim` from the repository root; returns stdout, panics with stderr on failure.
pub(crate) fn sim(args: &[&str]) -> String {
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
pub(crate) fn sim_err(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run sim");
    assert!(!out.status.success(), "sim {args:?} should fail");
    String::from_utf8(out.stderr).expect("utf-8")
}

pub(crate) fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    serde_json::from_str(&sim(&all)).expect("valid JSON")
}

/// `(group name → share)` for one listener seen from one region, plus the mode.
pub(crate) fn shares(doc: &Value, listener: &str, region: &str) -> (String, Vec<(String, f64)>) {
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

pub(crate) fn scenario(name: &str) -> Value {
    json(&["--scenario", &format!("sim/scenarios/{name}.toml")])
}

pub(crate) fn s(pairs: &[(&str, f64)]) -> Vec<(String, f64)> {
    pairs.iter().map(|(n, v)| ((*n).to_owned(), *v)).collect()
}

mod capacity;
mod clients;
mod geoip;
mod pictures;
mod shipped;
mod what_if;
