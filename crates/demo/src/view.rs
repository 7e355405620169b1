//! What the demo shows: about once a second, per listener and region, the groups in the node's
//! rank order with the RTT it measured, their health, the share it expects and the share the
//! clients observed over the last few seconds (redrawn in place on a terminal, one plain line
//! per listener and region otherwise); at the end, observed against expected over the whole
//! run, as a table or as JSON.

use std::collections::VecDeque;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::load::Tally;
use gtd_core::view::Status;

/// Seconds of history the live view's observed shares cover.
pub(crate) const WINDOW: usize = 5;

/// One group as the node reports it now.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// Config index.
    pub(crate) index: usize,
    pub(crate) name: String,
    pub(crate) rtt_ms: Option<f64>,
    pub(crate) rtt_source: String,
    pub(crate) healthy: bool,
    pub(crate) share: f64,
}

/// One (listener, region) row of the view.
#[derive(Debug)]
pub(crate) struct Pane {
    pub(crate) listener: String,
    pub(crate) protocol: &'static str,
    pub(crate) port: u16,
    pub(crate) region: String,
    /// The node's mode and groups in rank order.
    pub(crate) mode: String,
    pub(crate) groups: Vec<Seen>,
    /// Tallies at each of the last seconds, oldest first.
    pub(crate) history: VecDeque<Tally>,
}

/// The node's view of `listener` from its `/status` document: mode and groups in rank order.
pub(crate) fn read_status(
    status: &Status,
    listener: &str,
    names: &[String],
) -> (String, Vec<Seen>) {
    let Some(l) = status.listener(listener) else {
        return ("—".to_owned(), Vec::new());
    };
    let groups = l
        .groups
        .iter()
        .filter_map(|g| {
            Some(Seen {
                index: names.iter().position(|n| *n == g.name)?,
                name: g.name.clone(),
                rtt_ms: g.rtt_ms,
                rtt_source: g.rtt_source.clone(),
                healthy: g.healthy,
                share: g.share,
            })
        })
        .collect();
    (l.mode.clone(), groups)
}

/// The node's share of each of `n` groups, percent, by config index.
pub(crate) fn shares(groups: &[Seen], n: usize) -> Vec<f64> {
    let mut by_index = vec![0.0; n];
    for g in groups {
        by_index[g.index] = g.share;
    }
    by_index
}

impl Pane {
    /// Decisions per second over the last second, and each group's observed percent over
    /// the window (config index).
    fn recent(&self) -> (u64, Vec<f64>) {
        let (Some(first), Some(last)) = (self.history.front(), self.history.back()) else {
            return (0, Vec::new());
        };
        let rate = self
            .history
            .iter()
            .rev()
            .nth(1)
            .map_or(0, |prev| last.decisions - prev.decisions);
        let n = (last.decisions - first.decisions).max(1) as f64;
        let observed = last
            .observed
            .iter()
            .zip(&first.observed)
            .map(|(a, b)| (a - b) as f64 * 100.0 / n)
            .collect();
        (rate, observed)
    }
}

fn rtt(g: &Seen) -> String {
    let source = match g.rtt_source.as_str() {
        "measured" => "mea",
        "estimated" => "est",
        "catalog" => "cat",
        "static" => "sta",
        s => s,
    };
    match g.rtt_ms {
        Some(ms) => format!("{ms:7.2} {source}"),
        None => format!("      — {source}"),
    }
}

/// The view on a terminal: the whole screen, redrawn.
pub(crate) fn screen(panes: &[Pane], header: &str) -> String {
    let mut out = String::from("\x1b[H\x1b[2J");
    let _ = writeln!(out, "{header}\n");
    let mut last_listener = "";
    for p in panes {
        if p.listener != last_listener {
            let _ = writeln!(out, "{} ({} :{})", p.listener, p.protocol, p.port);
            last_listener = &p.listener;
        }
        let (rate, observed) = p.recent();
        let total = p.history.back();
        let _ = writeln!(
            out,
            "  node {:<14} mode {:<9} {rate:>5} decisions/s  {} answered, {} failed",
            p.region,
            p.mode,
            total.map_or(0, |t| t.decisions),
            total.map_or(0, |t| t.failed),
        );
        let _ = writeln!(
            out,
            "    #  {:<14} {:>11}  {:<9} {:>9} {:>9}",
            "group", "rtt ms", "health", "expected", "observed"
        );
        for (rank, g) in p.groups.iter().enumerate() {
            let _ = writeln!(
                out,
                "    {}  {:<14} {}  {:<9} {:>8.2}% {:>8.2}%",
                rank + 1,
                g.name,
                rtt(g),
                if g.healthy { "healthy" } else { "UNHEALTHY" },
                g.share,
                observed.get(g.index).copied().unwrap_or(0.0),
            );
        }
    }
    out
}

/// The view without a terminal: one line per listener and region.
pub(crate) fn lines(panes: &[Pane], elapsed: u64) -> String {
    let mut out = String::new();
    for p in panes {
        let (rate, observed) = p.recent();
        let groups: Vec<String> = p
            .groups
            .iter()
            .map(|g| {
                format!(
                    "{} {:.1}% (expected {:.1}, {}{})",
                    g.name,
                    observed.get(g.index).copied().unwrap_or(0.0),
                    g.share,
                    rtt(g).trim(),
                    if g.healthy { "" } else { ", UNHEALTHY" }
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "{elapsed:>4}s {} {} {} {rate}/s: {}",
            p.listener,
            p.region,
            p.mode,
            groups.join(", ")
        );
    }
    out
}

/// The final table: per listener, region and group, expected and observed percent over the
/// whole run and the deviation in points.
pub(crate) fn table(panes: &[Pane], names: impl Fn(&Pane) -> Vec<String>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<10} {:<14} {:<14} {:>10} {:>10} {:>10} {:>10}",
        "listener", "region", "group", "expected %", "observed %", "deviation", "decisions"
    );
    let mut worst: f64 = 0.0;
    for p in panes {
        let Some(t) = p.history.back() else { continue };
        for (i, (observed, expected)) in t.percents().into_iter().enumerate() {
            let deviation = observed - expected;
            worst = worst.max(deviation.abs());
            let _ = writeln!(
                out,
                "{:<10} {:<14} {:<14} {expected:>10.2} {observed:>10.2} {deviation:>+10.2} {:>10}",
                p.listener,
                p.region,
                names(p)[i],
                t.observed[i],
            );
        }
        if t.failed > 0 {
            let _ = writeln!(
                out,
                "{:<10} {:<14} {:<14} {:>43}",
                p.listener, p.region, "(failed)", t.failed
            );
        }
    }
    let _ = writeln!(out, "\nlargest deviation: {worst:.2} points");
    out
}

/// The final report as JSON: `{"listeners":[{"listener","protocol","regions":[{"region",
/// "decisions","failed","groups":[{"name","expected","observed"}]}]}]}`.
pub(crate) fn json(panes: &[Pane], names: impl Fn(&Pane) -> Vec<String>) -> Value {
    let mut listeners: Vec<Value> = Vec::new();
    for p in panes {
        let Some(t) = p.history.back() else { continue };
        let groups: Vec<Value> = t
            .percents()
            .into_iter()
            .zip(names(p))
            .map(|((observed, expected), name)| {
                json!({"name": name, "expected": round6(expected), "observed": round6(observed)})
            })
            .collect();
        let region = json!({"region": p.region, "decisions": t.decisions, "failed": t.failed,
            "groups": groups});
        match listeners.iter_mut().find(|l| l["listener"] == p.listener) {
            Some(l) => l["regions"].as_array_mut().unwrap().push(region),
            None => listeners.push(json!({"listener": p.listener, "protocol": p.protocol,
                "regions": [region]})),
        }
    }
    json!({ "listeners": listeners })
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use gtd_core::view::{GroupView, ListenerView, NodeView};

    #[test]
    fn the_view_reads_the_typed_status_in_rank_order() {
        let group = |name: &str, share: f64, healthy: bool| GroupView {
            name: name.to_owned(),
            rtt_ms: Some(1.5),
            rtt_source: "measured".to_owned(),
            healthy,
            share,
            ..GroupView::default()
        };
        let status = Status {
            node: NodeView {
                region: "cn-beijing".to_owned(),
                version: "0".to_owned(),
                uptime_s: 1,
                config: String::new(),
            },
            listeners: vec![ListenerView {
                name: "web".to_owned(),
                mode: "failover".to_owned(),
                // Rank order: shanghai first; a group the demo does not know is left out.
                groups: vec![
                    group("shanghai", 100.0, true),
                    group("beijing", 0.0, false),
                    group("other", 0.0, true),
                ],
                ..ListenerView::default()
            }],
            dns: Default::default(),
            fleet: None,
        };
        let names = ["beijing".to_owned(), "shanghai".to_owned()];
        let (mode, seen) = read_status(&status, "web", &names);
        assert_eq!(mode, "failover");
        let got: Vec<(usize, &str, bool)> = seen
            .iter()
            .map(|g| (g.index, g.name.as_str(), g.healthy))
            .collect();
        assert_eq!(got, [(1, "shanghai", true), (0, "beijing", false)]);
        assert_eq!(shares(&seen, 2), [0.0, 100.0]);
        assert_eq!(read_status(&status, "nope", &names).0, "—");
    }
}
