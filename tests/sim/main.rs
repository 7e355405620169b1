//! The simulator ([`gtd::sim`], asked as `sim ARGS` asks it, in this process): shipped config
//! and scenarios, every worked example of docs/design.md §3.2 from both acceleration regions,
//! failover modes, fail-open, overrides, formats, and golden files of the table and JSON for the
//! shipped config (`GTD_BLESS=1` rewrites them); and the `sim` program itself.
//!
//! - [`shipped`]: the shipped config — worked examples, golden files, recipes, check replays;
//! - [`what_if`]: configs written by the tests and every what-if flag (`--down`, `--set`,
//!   `--latency`, `--verify`, `--compare`, demand, CSV);
//! - [`clients`]: `--client` and forwarding rules, against the node's own decisions;
//! - [`capacity`]: utilisation against `capacity`, the N+1 check (`--each-down`), graceful
//!   shares as endpoints fail one by one.
//! - [`pictures`]: `--format svg`, parsed, its numbers against JSON, and its golden files;
//! - [`cli`]: the `sim` program: its arguments, exit codes, error and warning lines, `--out`.

use std::path::{Path, PathBuf};
use std::process::Command;

use gtd::sim::{Failures, Format, Request, Source};
use serde_json::Value;

pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `sim`'s arguments as the library's request (paths as given: the tests run in the
/// repository root, as `sim` would). Only what the engine computes: `--out` is the CLI's.
pub(crate) fn request(args: &[&str]) -> Request {
    let mut r = Request::new(Source::File("config.toml".into()));
    let mut it = args.iter().copied().peekable();
    while let Some(flag) = it.next() {
        if flag == "--fail-on-overflow" {
            r.fail_on_overflow = true;
            continue;
        }
        if flag == "--each-down" {
            let n = it.next_if(|v| !v.starts_with("--")).unwrap_or("1");
            r.each_down = Some(Failures::parse(n).expect("--each-down"));
            continue;
        }
        let v = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        let number = |v: &str| gtd::sim::parse_assignment(v).expect(flag);
        match flag {
            "--config" => r.config = Source::File(v.into()),
            "--regions" => r.regions = Some(v.into()),
            "--scenario" => r.scenario = Some(v.into()),
            "--region" => r.region = Some(v.to_owned()),
            "--down" => r.down.push(v.to_owned()),
            "--checks" => r.checks.push(gtd::sim::parse_checks(v).expect(flag)),
            "--latency" => r.latency.push(number(v)),
            "--set" => r.set.push(number(v)),
            "--recovering" => r.recovering.push(number(v)),
            "--verify" => r.verify = Some(v.parse().expect(flag)),
            "--compare" => r.compare = Some(Source::File(v.into())),
            "--client" => r.client = Some(v.parse().expect(flag)),
            "--key" => r.key = Some(v.to_owned()),
            "--host" => r.host = Some(v.to_owned()),
            "--path" => r.path = Some(gtd::sim::parse_path(v).expect(flag)),
            "--header" => r.headers.push(gtd::sim::parse_header(v).expect(flag)),
            "--format" => {
                r.format = match v {
                    "table" => Format::Table,
                    "json" => Format::Json,
                    "csv" => Format::Csv,
                    "svg" => Format::Svg,
                    other => panic!("--format {other}"),
                }
            }
            other => panic!("{other}: not a flag of the engine's (a CLI test runs `sim`)"),
        }
    }
    r
}

/// The library's simulator, asked as `sim ARGS` asks it.
pub(crate) fn run(args: &[&str]) -> Result<gtd::sim::Output, gtd::sim::Error> {
    gtd::sim::run(&request(args), &mut Vec::new())
}

/// What `sim ARGS` prints; panics with the error on failure.
pub(crate) fn sim(args: &[&str]) -> String {
    match run(args) {
        Ok(out) => out.text,
        Err(e) => panic!("sim {args:?} failed: {e}"),
    }
}

/// The error `sim ARGS` ends with (the line it prints, without `sim: `); panics on success.
pub(crate) fn sim_err(args: &[&str]) -> String {
    match run(args) {
        Ok(_) => panic!("sim {args:?} should fail"),
        Err(e) => e.to_string(),
    }
}

/// Runs the `sim` program from the repository root: (exit code, stdout, stderr).
pub(crate) fn cli(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sim"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run sim");
    (
        out.status.code(),
        String::from_utf8(out.stdout).expect("utf-8"),
        String::from_utf8(out.stderr).expect("utf-8"),
    )
}

/// The `sim` program's standard error, which must fail with status 1.
pub(crate) fn cli_err(args: &[&str]) -> String {
    let (code, _, err) = cli(args);
    assert_ne!(code, Some(0), "sim {args:?} should fail");
    err
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
mod cli;
mod clients;
mod failback;
mod geoip;
mod pictures;
mod shipped;
mod what_if;
