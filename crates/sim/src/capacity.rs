//! Capacity planning (docs/design.md §8): with `[demand]`, each group's and endpoint's load
//! against its `capacity` — utilisation in percent, flagged above the listener's `headroom` and
//! above 100 %.

use gtd_core::config::Config;

use super::report::{GroupRow, ListenerReport};

/// Demand-weighted load of a group (endpoint `None`) or an endpoint, summed over regions.
#[derive(Debug, Clone)]
pub(crate) struct Total {
    pub(crate) listener: String,
    pub(crate) group: String,
    pub(crate) endpoint: Option<String>,
    /// `None` when an endpoint's share is load-dependent.
    pub(crate) load: Option<f64>,
    /// The endpoint's `capacity`, or what the group carries with its usable endpoints
    /// (`Group::capacity_when`), when known.
    pub(crate) capacity: Option<f64>,
    /// The listener's `headroom`, percent.
    pub(crate) headroom: f64,
}

/// Where a load stands against its capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Status {
    /// At most `headroom` percent.
    Ok,
    /// Above `headroom`, at most 100 %.
    AboveHeadroom,
    /// Above 100 %: more than the capacity.
    Over,
}

impl Status {
    /// The name in JSON and CSV.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::AboveHeadroom => "above-headroom",
            Status::Over => "over",
        }
    }
}

impl Total {
    /// `load / capacity`, percent; `None` when either is unknown (no capacity, or a
    /// load-dependent endpoint share). No load is 0 % whatever the capacity (a group whose
    /// endpoints are all out carries nothing and is asked nothing); load on no capacity is
    /// infinite (JSON `null`, status `over`).
    pub(crate) fn utilisation(&self) -> Option<f64> {
        let (load, capacity) = (self.load?, self.capacity?);
        Some(if load <= 0.0 {
            0.0
        } else if capacity <= 0.0 {
            f64::INFINITY
        } else {
            load * 100.0 / capacity
        })
    }

    /// Over 100 %, above the listener's headroom, or fine; `None` when the utilisation is
    /// unknown.
    pub(crate) fn status(&self) -> Option<Status> {
        let u = self.utilisation()?;
        Some(if u > 100.0 {
            Status::Over
        } else if u > self.headroom {
            Status::AboveHeadroom
        } else {
            Status::Ok
        })
    }

    /// What is beyond the capacity (load − capacity), when it is over.
    pub(crate) fn over_by(&self) -> Option<f64> {
        let by = self.load? - self.capacity?;
        (by > 0.0).then_some(by)
    }

    /// `LISTENER/GROUP` or `LISTENER/GROUP/ADDRESS`.
    pub(crate) fn name(&self) -> String {
        match &self.endpoint {
            Some(e) => format!("{}/{}/{e}", self.listener, self.group),
            None => format!("{}/{}", self.listener, self.group),
        }
    }
}

/// The table's flag for one row: `OVER by N`, `above H % headroom`, or nothing.
pub(crate) fn flag(t: &Total) -> String {
    match t.status() {
        Some(Status::Over) => format!("OVER by {:.2}", t.over_by().unwrap_or(0.0)),
        Some(Status::AboveHeadroom) => format!("above {} % headroom", number(t.headroom)),
        _ => String::new(),
    }
}

/// A number as written in a config: no decimals when it has none.
pub(crate) fn number(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// True when some row is over its capacity.
pub(crate) fn any_over(totals: &[Total]) -> bool {
    totals.iter().any(|t| t.status() == Some(Status::Over))
}

/// Demand-weighted totals over regions, listener by listener, groups in config order.
pub(crate) fn totals(
    config: &Config,
    reports: &[ListenerReport],
    demand: &std::collections::BTreeMap<String, f64>,
) -> Vec<Total> {
    let mut out = Vec::new();
    for l in reports {
        let Some(listener) = config.listeners.iter().find(|x| x.name == l.name) else {
            continue;
        };
        for g in &listener.groups {
            let rows = l.regions.iter().filter_map(|r| {
                let amount = demand.get(&r.region).copied().unwrap_or(0.0);
                r.groups
                    .iter()
                    .find(|x| x.name == g.name)
                    .map(|row| (amount, row))
            });
            let rows: Vec<(f64, &GroupRow)> = rows.collect();
            let load = rows.iter().map(|(a, row)| a * row.share / 100.0).sum();
            // What the group carries with the what-if's endpoints out (they are out on every
            // node alike): only its usable endpoints count.
            let usable = |ei: usize| rows.first().is_none_or(|(_, row)| row.endpoints[ei].usable);
            out.push(Total {
                listener: l.name.clone(),
                group: g.name.clone(),
                endpoint: None,
                load: Some(load),
                capacity: g.capacity_when(usable),
                headroom: listener.headroom,
            });
            for (ei, e) in g.endpoints.iter().enumerate() {
                let load = rows
                    .iter()
                    .map(|(a, row)| row.endpoints[ei].share.map(|s| a * s / 100.0))
                    .try_fold(0.0, |acc, x| x.map(|v| acc + v));
                out.push(Total {
                    listener: l.name.clone(),
                    group: g.name.clone(),
                    endpoint: Some(e.address.text.clone()),
                    load,
                    capacity: e.capacity,
                    headroom: listener.headroom,
                });
            }
        }
    }
    out
}
