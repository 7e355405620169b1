//! Output: the terminal table, the JSON contract of docs/design.md §8, and CSV.

mod csv;
mod json;
mod table;

pub(crate) use csv::{csv, csv_field};
pub(crate) use json::json;
pub(crate) use table::table;

use crate::capacity::Total;
use crate::report::ListenerReport;

/// Everything one run prints.
pub(crate) struct Output<'a> {
    pub(crate) reports: &'a [ListenerReport],
    pub(crate) totals: Option<&'a [Total]>,
    /// `[demand]` entries naming clients: (as written, region, amount).
    pub(crate) demand_clients: &'a [(String, String, f64)],
    pub(crate) client: Option<(String, Option<String>)>,
    pub(crate) compare: bool,
    /// `--host`, `--path` or `--header` was given (they matter only to forwarding rules).
    pub(crate) request: bool,
}
