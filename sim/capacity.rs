//! Capacity planning (docs/design.md §8): with `[demand]`, each group's and endpoint's load
//! against its `capacity` — utilisation in percent, flagged above the listener's `headroom` and
//! above 100 %.

use crate::engine::Total;

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
    /// load-dependent endpoint share).
    pub(crate) fn utilisation(&self) -> Option<f64> {
        Some(self.load? * 100.0 / self.capacity?)
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
