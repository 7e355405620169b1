//! Splits as the node's `/status` and `sim --format json` state them, compared, and the
//! tally of observed decisions checked against them within the suite's tolerance.

use std::collections::BTreeMap;

use gtd::view::{EndpointShare, GroupView, RouteView, Status};
use serde_json::Value;

use crate::fleet::*;

// ---------------------------------------------------------------------------------------------
// Splits

/// A split as both sides print it: mode, then (group, healthy, share) in priority order.
pub(crate) type Split = (String, Vec<(String, bool, f64)>);

/// `sim`'s split of `listener` on `region` (of its rule `route`, 1-based).
pub(crate) fn sim_split(sim: &Value, listener: &str, region: &str, route: Option<u64>) -> Split {
    let l = sim["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["listener"] == listener)
        .unwrap_or_else(|| panic!("sim has no listener {listener}"));
    let r = l["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["region"] == region)
        .unwrap_or_else(|| panic!("sim has no region {region} for {listener}"));
    let groups: Vec<GroupView<EndpointShare>> =
        serde_json::from_value(r["groups"].clone()).unwrap();
    let routes: Vec<RouteView> = r
        .get("routes")
        .map_or_else(Vec::new, |v| serde_json::from_value(v.clone()).unwrap());
    split_of(r["mode"].as_str().unwrap(), &groups, &routes, route)
}

/// The split in a `/status` listener or a sim region: its own, or forwarding rule `route`'s.
fn split_of<E>(
    mode: &str,
    groups: &[GroupView<E>],
    routes: &[RouteView],
    route: Option<u64>,
) -> Split {
    match route {
        None => (
            mode.to_owned(),
            groups
                .iter()
                .map(|g| (g.name.clone(), g.healthy, g.share))
                .collect(),
        ),
        Some(n) => {
            let rule = routes.iter().find(|x| x.rule as u64 == n).unwrap();
            (
                rule.mode.clone(),
                rule.groups
                    .iter()
                    .map(|g| (g.name.clone(), true, g.share))
                    .collect(),
            )
        }
    }
}

/// The node's split of `listener` from its `/status`.
pub(crate) fn status_split(status: &Status, listener: &str, route: Option<u64>) -> Split {
    let l = status
        .listener(listener)
        .unwrap_or_else(|| panic!("the node has no listener {listener}"));
    split_of(&l.mode, &l.groups, &l.routes, route)
}

pub(crate) fn assert_same(
    node: &Split,
    sim: &Split,
    listener: &str,
    region: &str,
    proc: &NodeProc,
) {
    let same = node.0 == sim.0
        && node.1.len() == sim.1.len()
        && node
            .1
            .iter()
            .zip(&sim.1)
            .all(|(a, b)| a.0 == b.0 && a.1 == b.1 && (a.2 - b.2).abs() < 1e-9);
    assert!(
        same,
        "{listener} on {region}: the node's split {node:?} is not sim's {sim:?}\n{}",
        proc.log_tail()
    );
}

/// What a measurement saw: answers per endpoint, and decisions nobody answered.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) answers: BTreeMap<String, usize>,
    pub(crate) failed: usize,
}

/// Observed shares against `expected`'s, percent of the answered decisions:
/// - `affinity = "none"`: the node's rotation gives every group within two decisions of
///   N × share over any window of N consecutive decisions, and the N decisions here are such a
///   window (nothing else sends this listener traffic), so ±(200 / N + 0.01) points;
/// - source-ip affinity: each client address is hashed once, so the count per group is a
///   binomial draw: ±(5 standard deviations + 100 / N) points.
///
/// A group with share 0 must get nothing either way, and every decision must be answered.
pub(crate) fn check_split(
    what: &str,
    tally: &Tally,
    owners: &BTreeMap<String, String>,
    expected: &Split,
    affinity: bool,
) {
    assert_eq!(tally.failed, 0, "{what}: unanswered decisions ({tally:?})");
    let mut per_group: BTreeMap<&str, usize> = BTreeMap::new();
    for (endpoint, n) in &tally.answers {
        let g = owners
            .get(endpoint)
            .unwrap_or_else(|| panic!("{what}: answer {endpoint:?} is no endpoint"));
        *per_group.entry(g.as_str()).or_default() += n;
    }
    let n: usize = per_group.values().sum();
    assert!(n > 0, "{what}: no decisions");
    let nf = n as f64;
    for g in per_group.keys() {
        assert!(
            expected.1.iter().any(|e| e.0 == *g),
            "{what}: traffic reached {g}, which the split does not list: {per_group:?}"
        );
    }
    for (group, _, share) in &expected.1 {
        let got = per_group.get(group.as_str()).copied().unwrap_or(0);
        let observed = got as f64 * 100.0 / nf;
        let p = share / 100.0;
        let tolerance = if *share == 0.0 {
            0.0
        } else if affinity {
            100.0 * 5.0 * (p * (1.0 - p) / nf).sqrt() + 100.0 / nf
        } else {
            200.0 / nf + 0.01
        };
        eprintln!(
            "{what}: {group} observed {observed:.2}% ({got} of {n}), expected {share:.2}% (±{tolerance:.2})"
        );
        assert!(
            (observed - share).abs() <= tolerance,
            "{what}: {group} observed {observed:.2}% ({got} of {n}), expected {share:.2}% \
             (±{tolerance:.2}); all: {per_group:?}"
        );
    }
}
