//! `sim --each-down [N|region]`: the N+1 check (docs/design.md §8). Replays every failure of N
//! groups of a listener (or of every group in one endpoint-group region at once) against the
//! scenario's `[demand]` and the config's `capacity`, through the same evaluation as a plain
//! run, and ranks the cases by their worst utilisation.

use std::fmt::Write as _;

use super::Error;
use gtd_core::config::Config;
use gtd_core::split::Mode;
use serde::Serialize;

use super::capacity::{self, Status, Total};
use super::engine;
use super::report::Asks;
use super::scenario::RawWhatIf;

/// Which failures to replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failures {
    /// Every set of N groups of one listener (N = 1: each group alone; 2: every pair).
    Groups(usize),
    /// Every group in one endpoint-group region at once, every listener together.
    Region,
}

/// In JSON as on the command line: the count, or `"region"`.
impl Serialize for Failures {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Failures::Groups(n) => s.serialize_u64(*n as u64),
            Failures::Region => s.serialize_str("region"),
        }
    }
}

impl Failures {
    /// `--each-down`'s value: a count (1 when none is given) or `region`.
    pub fn parse(s: &str) -> Result<Failures, String> {
        if s == "region" {
            return Ok(Failures::Region);
        }
        match s.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(Failures::Groups(n)),
            _ => Err(format!(
                "{s:?}: expected a number of groups (1, 2, ...) or \"region\""
            )),
        }
    }

    fn describe(self) -> String {
        match self {
            Failures::Groups(1) => "every single group failure".to_owned(),
            Failures::Groups(2) => "every pair of groups of a listener failing together".to_owned(),
            Failures::Groups(n) => format!("every {n} groups of a listener failing together"),
            Failures::Region => "every endpoint-group region failing at once".to_owned(),
        }
    }
}

/// Demand a listener's node in one region could not route (every eligible group down).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Unserved {
    pub(crate) listener: String,
    pub(crate) region: String,
    pub(crate) demand: f64,
}

/// One replayed failure.
#[derive(Debug, Clone)]
pub(crate) struct Case {
    /// What failed: `LISTENER/GROUP` names (empty for the baseline).
    pub(crate) down: Vec<String>,
    /// Under `--each-down region`, the region that failed.
    pub(crate) region: Option<String>,
    /// Load, capacity and utilisation of every group and endpoint of the listeners planned.
    pub(crate) totals: Vec<Total>,
    pub(crate) unserved: Vec<Unserved>,
}

impl Case {
    /// The row with the highest utilisation; of equals the first (a group before its
    /// endpoints).
    pub(crate) fn worst(&self) -> Option<&Total> {
        let mut worst: Option<(&Total, f64)> = None;
        for t in &self.totals {
            if let Some(u) = t.utilisation()
                && worst.is_none_or(|(_, w)| u > w)
            {
                worst = Some((t, u));
            }
        }
        worst.map(|(t, _)| t)
    }

    /// Overflows: demand not routed at all, or a row over its capacity.
    pub(crate) fn overflows(&self) -> bool {
        !self.unserved.is_empty() || capacity::any_over(&self.totals)
    }

    /// Sort key, worst first: unrouted demand, then the highest utilisation.
    fn key(&self) -> (bool, f64) {
        (
            !self.unserved.is_empty(),
            self.worst().and_then(Total::utilisation).unwrap_or(0.0),
        )
    }

    fn name(&self) -> String {
        match (&self.region, self.down.is_empty()) {
            (_, true) => "nothing (baseline)".to_owned(),
            (Some(r), false) => format!("region {r} ({})", self.down.join(" + ")),
            (None, false) => self.down.join(" + "),
        }
    }
}

/// The whole check: the baseline and every case, worst first.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub(crate) failures: Failures,
    pub(crate) baseline: Case,
    pub(crate) cases: Vec<Case>,
}

impl Report {
    /// True when the baseline or any case overflows (`--fail-on-overflow`).
    pub(crate) fn overflows(&self) -> bool {
        self.baseline.overflows() || self.cases.iter().any(Case::overflows)
    }
}

/// Runs the check: `raw` is the scenario and flags as given (their `down` stays down in every
/// case), `region` restricts the nodes as `--region` does.
pub(crate) fn run(
    config: &Config,
    raw: &RawWhatIf,
    region: Option<&str>,
    failures: Failures,
) -> Result<Report, Error> {
    // Only listeners with a capacity somewhere can overflow.
    let planned: Vec<usize> = config
        .listeners
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            l.groups
                .iter()
                .any(|g| g.has_capacity() || g.endpoints.iter().any(|e| e.capacity.is_some()))
        })
        .map(|(i, _)| i)
        .collect();
    if planned.is_empty() {
        return Err(Error::Usage(
            "--each-down: no group or endpoint of the config has a capacity; set capacity on groups \
             or endpoints (in the unit of the scenario's [demand])"
                .to_owned(),
        ));
    }
    let sets = failure_sets(config, &planned, failures);
    if sets.is_empty() {
        return Err(Error::Usage(format!(
            "--each-down {failures:?}: no listener has that many groups"
        )));
    }
    let baseline = case(config, raw, region, &planned, Vec::new(), None)?;
    let mut cases = sets
        .into_iter()
        .map(|(down, failed)| case(config, raw, region, &planned, down, failed))
        .collect::<Result<Vec<Case>, Error>>()?;
    // Stable: equal cases keep the config's order.
    cases.sort_by(|a, b| b.key().partial_cmp(&a.key()).expect("finite"));
    Ok(Report {
        failures,
        baseline,
        cases,
    })
}

/// The `LISTENER/GROUP` sets to fail, in config order, with the region each fails (`region`).
fn failure_sets(
    config: &Config,
    planned: &[usize],
    failures: Failures,
) -> Vec<(Vec<String>, Option<String>)> {
    let name = |li: usize, gi: usize| {
        let l = &config.listeners[li];
        format!("{}/{}", l.name, l.groups[gi].name)
    };
    match failures {
        Failures::Groups(n) => {
            let mut out = Vec::new();
            for &li in planned {
                let count = config.listeners[li].groups.len();
                for set in combinations(count, n) {
                    out.push((set.into_iter().map(|gi| name(li, gi)).collect(), None));
                }
            }
            out
        }
        Failures::Region => {
            let mut regions: Vec<&str> = Vec::new();
            for &li in planned {
                for g in &config.listeners[li].groups {
                    if !regions.contains(&g.region.as_str()) {
                        regions.push(&g.region);
                    }
                }
            }
            regions
                .into_iter()
                .map(|r| {
                    let down = planned
                        .iter()
                        .flat_map(|&li| {
                            config.listeners[li]
                                .groups
                                .iter()
                                .enumerate()
                                .filter(move |(_, g)| g.region == r)
                                .map(move |(gi, _)| name(li, gi))
                        })
                        .collect();
                    (down, Some(r.to_owned()))
                })
                .collect()
        }
    }
}

/// Every `k`-subset of `0..n`, in lexicographic order.
fn combinations(n: usize, k: usize) -> Vec<Vec<usize>> {
    fn go(start: usize, n: usize, k: usize, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if cur.len() == k {
            out.push(cur.clone());
            return;
        }
        for i in start..n {
            cur.push(i);
            go(i + 1, n, k, cur, out);
            cur.pop();
        }
    }
    let mut out = Vec::new();
    if k <= n {
        go(0, n, k, &mut Vec::new(), &mut out);
    }
    out
}

/// One case: the scenario plus `down`, evaluated as a plain run would be.
fn case(
    config: &Config,
    raw: &RawWhatIf,
    region: Option<&str>,
    planned: &[usize],
    down: Vec<String>,
    failed: Option<String>,
) -> Result<Case, Error> {
    let mut what = raw.clone();
    what.down.extend(down.iter().cloned());
    let what_if = what.resolve(config)?;
    if what_if.demand.is_empty() {
        return Err(Error::Usage(
            "--each-down needs client demand: a scenario with [demand] (region = amount)"
                .to_owned(),
        ));
    }
    let asks = Asks {
        region: region.map(str::to_owned),
        ..Asks::default()
    };
    let reports: Vec<_> = engine::evaluate(config, &what_if, &asks)?
        .into_iter()
        .filter(|l| {
            planned
                .iter()
                .any(|&li| config.listeners[li].name == l.name)
        })
        .collect();
    let totals = capacity::totals(config, &reports, &what_if.demand);
    let unserved = reports
        .iter()
        .flat_map(|l| {
            l.regions
                .iter()
                .filter(|r| r.mode == Mode::NoRoute)
                .filter_map(|r| {
                    let demand = what_if.demand.get(&r.region).copied().unwrap_or(0.0);
                    (demand > 0.0).then(|| Unserved {
                        listener: l.name.clone(),
                        region: r.region.clone(),
                        demand,
                    })
                })
        })
        .collect();
    Ok(Case {
        down,
        region: failed,
        totals,
        unserved,
    })
}

// ---------------------------------------------------------------- output

/// The table: the baseline, then one line per case, worst first, with what overflows.
pub(crate) fn table(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "each-down: {} against the scenario's [demand] and the config's capacity, worst first",
        r.failures.describe()
    );
    let _ = writeln!(out, "\n  {}", case_line(&r.baseline));
    for line in details(&r.baseline) {
        let _ = writeln!(out, "      {line}");
    }
    out.push('\n');
    for (i, c) in r.cases.iter().enumerate() {
        let _ = writeln!(out, "  {:>2}. {}", i + 1, case_line(c));
        for line in details(c) {
            let _ = writeln!(out, "      {line}");
        }
    }
    let over = r.cases.iter().filter(|c| c.overflows()).count();
    let _ = writeln!(
        out,
        "\n{over} of {} case{} overflow{}{}",
        r.cases.len(),
        if r.cases.len() == 1 { "" } else { "s" },
        if over == 1 { "s" } else { "" },
        if r.baseline.overflows() {
            "; the baseline overflows already"
        } else {
            ""
        }
    );
    out.push_str(
        "utilisation = load / capacity; load = Σ over regions of demand × share (docs/design.md §8)\n",
    );
    out
}

/// `down …: worst NAME U % (load of capacity)`.
fn case_line(c: &Case) -> String {
    let unserved: f64 = c.unserved.iter().map(|u| u.demand).sum();
    let worst = match c.worst() {
        _ if unserved > 0.0 => format!("{unserved:.2} of demand has no route"),
        Some(t) => format!(
            "worst {} {:.2} % ({:.2} of {})",
            t.name(),
            t.utilisation().unwrap_or(0.0),
            t.load.unwrap_or(0.0),
            capacity::number(t.capacity.unwrap_or(0.0))
        ),
        None => "no utilisation known".to_owned(),
    };
    let verdict = if !c.unserved.is_empty() {
        "NO ROUTE"
    } else if capacity::any_over(&c.totals) {
        "OVERFLOW"
    } else if c
        .totals
        .iter()
        .any(|t| t.status() == Some(Status::AboveHeadroom))
    {
        "above headroom"
    } else {
        "ok"
    };
    format!("down {}: {worst} · {verdict}", c.name())
}

/// What overflows (and by how much), what is above headroom, what has no route.
fn details(c: &Case) -> Vec<String> {
    let mut out: Vec<String> = c
        .unserved
        .iter()
        .map(|u| {
            format!(
                "{} from {}: no route, {:.2} of demand unserved",
                u.listener, u.region, u.demand
            )
        })
        .collect();
    for t in &c.totals {
        match t.status() {
            Some(Status::Over) => out.push(format!(
                "{} OVER by {:.2}: {:.2} of {} ({:.2} %)",
                t.name(),
                t.over_by().unwrap_or(0.0),
                t.load.unwrap_or(0.0),
                capacity::number(t.capacity.unwrap_or(0.0)),
                t.utilisation().unwrap_or(0.0)
            )),
            Some(Status::AboveHeadroom) => out.push(format!(
                "{} above {} % headroom: {:.2} of {} ({:.2} %)",
                t.name(),
                capacity::number(t.headroom),
                t.load.unwrap_or(0.0),
                capacity::number(t.capacity.unwrap_or(0.0)),
                t.utilisation().unwrap_or(0.0)
            )),
            _ => {}
        }
    }
    out
}

/// `{"each_down": {failures, baseline, cases: [...]}}`, cases worst first.
pub(crate) fn json(r: &Report) -> String {
    let doc = Document {
        each_down: EachDown {
            failures: r.failures,
            baseline: CaseJson::of(&r.baseline),
            cases: r.cases.iter().map(CaseJson::of).collect(),
        },
    };
    let mut s = serde_json::to_string_pretty(&doc).expect("JSON of plain values");
    s.push('\n');
    s
}

/// The `--each-down` JSON document.
#[derive(Serialize)]
struct Document<'a> {
    each_down: EachDown<'a>,
}

#[derive(Serialize)]
struct EachDown<'a> {
    failures: Failures,
    baseline: CaseJson<'a>,
    cases: Vec<CaseJson<'a>>,
}

/// One case: what failed, whether anything overflows, and every load against its capacity.
#[derive(Serialize)]
struct CaseJson<'a> {
    down: &'a [String],
    region: Option<&'a str>,
    overflows: bool,
    worst: Option<TotalJson<'a>>,
    over: Vec<TotalJson<'a>>,
    above_headroom: Vec<TotalJson<'a>>,
    unserved: &'a [Unserved],
    totals: Vec<TotalJson<'a>>,
}

impl<'a> CaseJson<'a> {
    fn of(c: &'a Case) -> CaseJson<'a> {
        let with = |s: Status| -> Vec<TotalJson<'a>> {
            c.totals
                .iter()
                .filter(|t| t.status() == Some(s))
                .map(TotalJson::of)
                .collect()
        };
        CaseJson {
            down: &c.down,
            region: c.region.as_deref(),
            overflows: c.overflows(),
            worst: c.worst().map(TotalJson::of),
            over: with(Status::Over),
            above_headroom: with(Status::AboveHeadroom),
            unserved: &c.unserved,
            totals: c.totals.iter().map(TotalJson::of).collect(),
        }
    }
}

/// A group's or endpoint's load against its capacity, and by how much it is over.
#[derive(Serialize)]
struct TotalJson<'a> {
    listener: &'a str,
    group: &'a str,
    endpoint: Option<&'a str>,
    load: Option<f64>,
    capacity: Option<f64>,
    utilisation: Option<f64>,
    status: Option<&'static str>,
    over_by: Option<f64>,
}

impl<'a> TotalJson<'a> {
    fn of(t: &'a Total) -> TotalJson<'a> {
        TotalJson {
            listener: &t.listener,
            group: &t.group,
            endpoint: t.endpoint.as_deref(),
            load: t.load,
            capacity: t.capacity,
            utilisation: t.utilisation(),
            status: t.status().map(Status::as_str),
            over_by: t.over_by(),
        }
    }
}

/// One row per case and group or endpoint with a known utilisation, and per region with no
/// route; case 0 is the baseline, then worst first.
pub(crate) fn csv(r: &Report) -> String {
    let mut out = String::from(
        "case,down,listener,group,endpoint,region,load,capacity,utilisation,status,over_by\n",
    );
    let f = |x: Option<f64>| x.map(|v| format!("{v:.6}")).unwrap_or_default();
    for (i, c) in std::iter::once(&r.baseline).chain(&r.cases).enumerate() {
        let down = c.down.join(" ");
        for u in &c.unserved {
            let _ = writeln!(
                out,
                "{i},{down},{},,,{},{},,,no-route,",
                u.listener,
                u.region,
                f(Some(u.demand))
            );
        }
        for t in c.totals.iter().filter(|t| t.utilisation().is_some()) {
            let _ = writeln!(
                out,
                "{i},{down},{},{},{},,{},{},{},{},{}",
                t.listener,
                t.group,
                t.endpoint
                    .as_deref()
                    .map(super::render::csv_field)
                    .unwrap_or_default(),
                f(t.load),
                f(t.capacity),
                f(t.utilisation()),
                t.status().map(Status::as_str).unwrap_or_default(),
                f(t.over_by())
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_in_order() {
        assert_eq!(combinations(3, 1), [[0], [1], [2]]);
        assert_eq!(combinations(3, 2), [[0, 1], [0, 2], [1, 2]]);
        assert!(combinations(2, 3).is_empty());
    }

    #[test]
    fn parse() {
        assert_eq!(Failures::parse("1"), Ok(Failures::Groups(1)));
        assert_eq!(Failures::parse("region"), Ok(Failures::Region));
        assert!(Failures::parse("0").is_err());
        assert!(Failures::parse("zone").is_err());
    }
}
