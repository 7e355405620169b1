//! CSV: one row per group and per endpoint, plus `total` rows for demand.

use std::fmt::Write as _;

use crate::capacity::Status;

use super::Output;

/// One row per group and per endpoint (`kind`), plus `total` rows for demand.
pub(crate) fn csv(o: &Output<'_>) -> String {
    let mut out = String::from(
        "kind,listener,region,mode,priority,group,group_region,rtt_ms,rtt_source,ratio,healthy,first_pass,leftover,share,endpoint,weight,state,observed,share_before,delta,load,usable,keep,spill,capacity,utilisation,status\n",
    );
    let f = |x: f64| format!("{x:.6}");
    let opt = |x: Option<f64>| x.map(f).unwrap_or_default();
    for l in o.reports {
        for r in &l.regions {
            for g in &r.groups {
                let (before, delta) = if o.compare {
                    let b = g.share_before.unwrap_or(0.0);
                    (f(b), f(g.share - b))
                } else {
                    (String::new(), String::new())
                };
                let graded = g.graded.map_or_else(
                    || ",,".to_owned(),
                    |d| format!("{},{},{}", f(d.usable), f(d.keep), f(d.spill)),
                );
                let _ = writeln!(
                    out,
                    "group,{},{},{},{},{},{},{},{},{},{},{},{},{},,,,{},{},{},,{graded},,,",
                    l.name,
                    r.region,
                    r.mode.as_str(),
                    g.priority,
                    g.name,
                    g.group_region,
                    f(g.rtt_ms),
                    g.rtt_source.as_str(),
                    f(g.ratio),
                    g.healthy,
                    f(g.first_pass),
                    f(g.leftover),
                    f(g.share),
                    opt(g.observed),
                    before,
                    delta
                );
                for e in &g.endpoints {
                    let _ = writeln!(
                        out,
                        "endpoint,{},{},{},{},{},{},,,,,,,{},{},{},{},{},,,,,,,,,",
                        l.name,
                        r.region,
                        r.mode.as_str(),
                        g.priority,
                        g.name,
                        g.group_region,
                        opt(e.share),
                        csv_field(&e.address),
                        e.weight,
                        e.state,
                        opt(e.observed)
                    );
                }
            }
        }
    }
    if let Some(totals) = o.totals {
        for t in totals {
            let _ = writeln!(
                out,
                "total,{},,,,{},,,,,,,,,{},,,,,,{},,,,{},{},{}",
                t.listener,
                t.group,
                t.endpoint.as_deref().map(csv_field).unwrap_or_default(),
                opt(t.load),
                opt(t.capacity),
                opt(t.utilisation()),
                t.status().map(Status::as_str).unwrap_or_default()
            );
        }
    }
    out
}

/// Quotes a field that contains a comma or a quote.
pub(crate) fn csv_field(s: &str) -> String {
    if s.contains([',', '"']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}
