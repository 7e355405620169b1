//! `--recovering GROUP=SECONDS`: a group taking its share back over its listener's
//! `failback_ramp` (docs/design.md §3.3), at that moment — the shares, the real selectors'
//! decisions (`--verify`), `--client`, and the mistakes.

use crate::what_if::{custom, group};
use crate::*;

/// Shares and each group's `recovering` object of listener `l` from `r-a`.
fn groups(doc: &Value) -> Vec<Value> {
    doc["listeners"][0]["regions"][0]["groups"]
        .as_array()
        .unwrap()
        .clone()
}

fn two_groups(dir: &Path, extra: &str) -> String {
    let groups = [group("a", "r-a", "50", 9001), group("b", "r-b", "50", 9002)].concat();
    custom(dir, &format!("failback_ramp = \"60s\"\n{extra}"), &groups)
        .display()
        .to_string()
}

#[test]
fn a_recovering_group_has_its_part_of_the_share_at_that_moment() {
    let dir = tempfile::tempdir().unwrap();
    let config = two_groups(dir.path(), "");
    // Without --recovering: the cascade, 62.5 / 37.5.
    let (_, plain) = shares(&json(&["--config", &config]), "l", "r-a");
    assert_eq!(plain, s(&[("a", 62.5), ("b", 37.5)]));
    // b recovered 15 s into a 60 s ramp: a quarter of its 37.5; a takes the rest.
    let doc = json(&[
        "--config",
        &config,
        "--recovering",
        "b=15",
        "--verify",
        "40000",
    ]);
    let (mode, got) = shares(&doc, "l", "r-a");
    assert_eq!(mode, "cascade");
    assert_eq!(got, s(&[("a", 100.0 - 37.5 / 4.0), ("b", 37.5 / 4.0)]));
    let g = groups(&doc);
    assert_eq!(g[1]["recovering"]["since_s"], 15.0);
    assert_eq!(g[1]["recovering"]["ramp_s"], 60.0);
    assert_eq!(g[1]["recovering"]["fraction"], 0.25);
    assert_eq!(g[1]["recovering"]["full_share"], 37.5);
    assert!(g[0].get("recovering").is_none());
    // The real selectors follow the share at that moment.
    let observed = g[1]["observed"].as_f64().unwrap();
    assert!((observed - 9.375).abs() < 0.5, "observed {observed}");
    // Past the ramp: the whole share, nothing recovering.
    let (_, after) = shares(
        &json(&["--config", &config, "--recovering", "l/b=90"]),
        "l",
        "r-a",
    );
    assert_eq!(after, plain);
    // The table says so.
    let table = sim(&["--config", &config, "--recovering", "b=15"]);
    assert!(
        table.contains(
            "failback: b recovered 15s ago, 25.0 % through failback_ramp 60s: share 9.38 of its 37.50"
        ),
        "{table}"
    );
}

#[test]
fn the_top_group_ramps_back_from_the_failover_split() {
    let dir = tempfile::tempdir().unwrap();
    let config = two_groups(dir.path(), "");
    // a down: next-priority sends b 100; a 30 s into its ramp: half of its 62.5.
    let (_, down) = shares(&json(&["--config", &config, "--down", "a"]), "l", "r-a");
    assert_eq!(down, s(&[("a", 0.0), ("b", 100.0)]));
    let (mode, got) = shares(
        &json(&["--config", &config, "--recovering", "a=30"]),
        "l",
        "r-a",
    );
    assert_eq!(mode, "cascade");
    assert_eq!(got, s(&[("a", 31.25), ("b", 68.75)]));
    // A group that is down is not recovering.
    let (_, both) = shares(
        &json(&["--config", &config, "--down", "a", "--recovering", "a=30"]),
        "l",
        "r-a",
    );
    assert_eq!(both, down);
}

#[test]
fn under_source_ip_clients_move_as_the_ramp_passes_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = two_groups(dir.path(), "affinity = \"source-ip\"");
    let doc = json(&[
        "--config",
        &config,
        "--recovering",
        "b=30",
        "--verify",
        "40000",
    ]);
    let g = groups(&doc);
    assert_eq!(g[1]["share"], 18.75);
    let observed = g[1]["observed"].as_f64().unwrap();
    assert!((observed - 18.75).abs() < 1.0, "observed {observed}");
}

#[test]
fn mistakes_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let groups = [group("a", "r-a", "50", 9001), group("b", "r-b", "50", 9002)].concat();
    let snap = custom(dir.path(), "", &groups).display().to_string();
    let e = sim_err(&["--config", &snap, "--recovering", "b=15"]);
    assert!(e.contains("sets no failback_ramp"), "{e}");
    let config = two_groups(dir.path(), "");
    let e = sim_err(&["--config", &config, "--recovering", "b=-1"]);
    assert!(e.contains("expected seconds >= 0"), "{e}");
    let e = sim_err(&["--config", &config, "--recovering", "nowhere=5"]);
    assert!(e.starts_with("recovering nowhere: "), "{e}");
}

#[test]
fn the_program_takes_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let config = two_groups(dir.path(), "");
    let (code, out, err) = cli(&["--config", &config, "--recovering", "b=45"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("75.0 % through failback_ramp 60s"), "{out}");
}
