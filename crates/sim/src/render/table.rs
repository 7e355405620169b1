//! The human table.

use std::fmt::Write as _;

use gtd_core::split::rules::Match;
use gtd_core::split::{Mode, RttSource};

use crate::capacity::{self, Total};
use crate::report::{ClientGroup, EndpointRow, GroupRow, ListenerReport, RegionReport, Route};

use super::Output;

/// A column's alignment.
#[derive(Clone, Copy)]
enum Align {
    Left,
    Right,
}

/// A minimal aligned-columns table.
struct Table {
    aligns: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(header: &[(&str, Align)]) -> Table {
        Table {
            aligns: header.iter().map(|(_, a)| *a).collect(),
            rows: vec![header.iter().map(|(h, _)| (*h).to_owned()).collect()],
        }
    }

    fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.aligns.len());
        self.rows.push(row);
    }

    fn render(&self, indent: &str, out: &mut String) {
        let widths: Vec<usize> = (0..self.aligns.len())
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r[c].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for row in &self.rows {
            let mut line = String::from(indent);
            for (c, cell) in row.iter().enumerate() {
                if c > 0 {
                    line.push_str("  ");
                }
                let pad = widths[c] - cell.chars().count();
                match self.aligns[c] {
                    Align::Left => {
                        line.push_str(cell);
                        line.extend(std::iter::repeat_n(' ', pad));
                    }
                    Align::Right => {
                        line.extend(std::iter::repeat_n(' ', pad));
                        line.push_str(cell);
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
}

fn pct(x: f64) -> String {
    format!("{x:.2}")
}

fn mode_line(r: &RegionReport, failover: &str) -> String {
    let top_unhealthy = r
        .groups
        .iter()
        .find(|g| g.ratio > 0.0)
        .filter(|g| !g.healthy)
        .map(|g| g.name.as_str());
    let taker = r
        .groups
        .iter()
        .find(|g| g.share > 0.0)
        .map(|g| g.name.as_str());
    match r.mode {
        Mode::Cascade => "mode cascade".to_owned(),
        Mode::Failover => format!(
            "mode FAILOVER — {} is unhealthy; {}",
            top_unhealthy.unwrap_or("the top group"),
            if failover == "next-priority" {
                format!(
                    "{} takes all traffic, ratios ignored (next-priority)",
                    taker.unwrap_or("?")
                )
            } else if failover == "graceful" {
                "its share spills down the priority order (graceful)".to_owned()
            } else {
                "the cascade runs over the healthy groups (recompute)".to_owned()
            }
        ),
        Mode::FailOpen => {
            "mode FAIL-OPEN — no group is healthy; routing as if all were (fail_open = true)"
                .to_owned()
        }
        Mode::NoRoute => {
            "mode NO-ROUTE — no group can take traffic: TCP closed, UDP dropped, HTTP 503"
                .to_owned()
        }
    }
}

/// The human table: each listener on each node, then the demand tables and the footnotes.
pub(crate) fn table(o: &Output<'_>) -> String {
    let mut out = String::new();
    let verify = o
        .reports
        .iter()
        .any(|l| l.regions.iter().any(|r| r.verify.is_some()));
    for (li, l) in o.reports.iter().enumerate() {
        if li > 0 {
            out.push('\n');
        }
        listener_heading(&mut out, l);
        for r in &l.regions {
            node_section(&mut out, o, l, r, verify);
        }
    }
    if !o.demand_clients.is_empty() {
        demand_clients(&mut out, o.demand_clients);
    }
    if let Some(totals) = o.totals {
        demand_totals(&mut out, totals);
    }
    notes(&mut out, o);
    out
}

/// The listener's line (and, under client-location priority, what its tables stand for).
fn listener_heading(out: &mut String, l: &ListenerReport) {
    let _ = writeln!(
        out,
        "listener {} — {} :{} · failover {} · fail_open {} · affinity {}",
        l.name,
        l.protocol,
        l.port,
        l.failover,
        if l.fail_open { "on" } else { "off" },
        l.affinity
    );
    if l.priority_by == "client-location" {
        let _ = writeln!(
            out,
            "  priority_by client-location: a located client's groups go by its distance to \
             them (see --client); the tables below are the node's ranking, for the others"
        );
    }
}

/// One listener on one node: its mode, groups and endpoints with their notes, its forwarding
/// rules, and `--client`'s answer there.
fn node_section(
    out: &mut String,
    o: &Output<'_>,
    l: &ListenerReport,
    r: &RegionReport,
    verify: bool,
) {
    let _ = writeln!(out, "\n  node {} · {}", r.region, mode_line(r, l.failover));
    let graded = l.failover == "graceful";
    shares(out, r, graded, verify, o.compare);
    if graded {
        let _ = writeln!(
            out,
            "  graceful: share = (first pass + leftover + spill) × keeps, keeps = min(1, {} × usable); \
             what passes the last group is shared back in proportion (docs/design.md §3.3)",
            capacity::number(l.overprovisioning)
        );
    }
    for g in &r.groups {
        if let Some(rec) = &g.recovering {
            let _ = writeln!(
                out,
                "  failback: {} recovered {}s ago, {:.1} % through failback_ramp {}s: \
                 share {} of its {} (docs/design.md §3.3)",
                g.name,
                capacity::number(rec.since_s),
                rec.fraction * 100.0,
                capacity::number(rec.ramp_s),
                pct(g.share),
                pct(rec.full_share)
            );
        }
    }
    if let Some((n, max)) = r.verify {
        let _ = writeln!(
            out,
            "  verify: {n} decisions through the real selectors; largest deviation {max:.2} points"
        );
    }
    if !r.routes.is_empty() {
        rules(out, r);
    }
    if let (Some(route), Some((ip, key))) = (&r.route, &o.client) {
        client(out, l, r, route, ip, key.as_deref());
    }
}

/// The groups in priority order, each with its endpoints: the split's table.
fn shares(out: &mut String, r: &RegionReport, graded: bool, verify: bool, compare: bool) {
    let mut header = vec![
        ("#", Align::Right),
        ("group", Align::Left),
        ("region", Align::Left),
        ("rtt ms", Align::Right),
        ("ratio", Align::Right),
        ("health", Align::Left),
        ("first pass", Align::Right),
        ("", Align::Left),
        ("leftover", Align::Right),
        ("", Align::Left),
        ("share %", Align::Right),
    ];
    if graded {
        header.splice(6..6, [("usable", Align::Right)]);
        header.splice(
            11..11,
            [
                ("spill", Align::Right),
                ("", Align::Left),
                ("keeps", Align::Right),
                ("", Align::Left),
            ],
        );
    }
    if verify {
        header.push(("observed", Align::Right));
    }
    if compare {
        header.push(("before", Align::Right));
        header.push(("delta", Align::Right));
    }
    header.push(("method", Align::Left));
    let mut t = Table::new(&header);
    for g in &r.groups {
        t.push(group_cells(g, verify, compare));
        for e in &g.endpoints {
            t.push(endpoint_cells(e, graded, verify, compare));
        }
    }
    t.render("  ", out);
}

/// Each forwarding rule's split: the cascade over its own groups.
fn rules(out: &mut String, r: &RegionReport) {
    let _ = writeln!(
        out,
        "\n  forwarding rules · each runs the cascade over its own groups"
    );
    let mut t = Table::new(&[
        ("rule", Align::Right),
        ("matches", Align::Left),
        ("mode", Align::Left),
        ("group", Align::Left),
        ("share %", Align::Right),
    ]);
    for route in &r.routes {
        for (i, (group, share)) in route.groups.iter().enumerate() {
            let first = i == 0;
            t.push(vec![
                if first {
                    route.index.to_string()
                } else {
                    String::new()
                },
                if first {
                    route.rule.clone()
                } else {
                    String::new()
                },
                if first {
                    route.mode.as_str().to_owned()
                } else {
                    String::new()
                },
                group.clone(),
                pct(*share),
            ]);
        }
    }
    t.render("  ", out);
}

/// `--client`'s answer on one node: the rule it matched, where the `[geoip]` database puts
/// it, and its group and endpoint.
fn client(
    out: &mut String,
    l: &ListenerReport,
    r: &RegionReport,
    route: &Route,
    ip: &str,
    key: Option<&str>,
) {
    let who = match key {
        Some(k) => format!("client {ip} key {k:?}"),
        None => format!("client {ip}"),
    };
    let who = match route.rule {
        None => who,
        Some(Match::Default) => format!("{who} · no rule matches: all groups"),
        Some(Match::Route(i)) => format!(
            "{who} · rule {} ({})",
            i + 1,
            r.routes.get(i).map_or("", |x| x.rule.as_str())
        ),
        Some(Match::NotFound) => {
            let _ = writeln!(
                out,
                "  {who} → 404: a rule claims this host but none covers the path"
            );
            return;
        }
    };
    if let Some(place) = &route.place {
        let how = if route.priority_by == "client-location" {
            "groups ranked by distance from the client (priority_by = \"client-location\")"
        } else if l.priority_by == "client-location" {
            "no coordinates: the node's own ranking"
        } else {
            "the node's own ranking"
        };
        let _ = writeln!(out, "  client {ip} {} · {how}", place_text(place.as_ref()));
    }
    client_lines(out, &who, l.protocol, route);
}

/// `[demand]` entries naming clients, with the region the `[geoip]` database placed them at.
fn demand_clients(out: &mut String, demand_clients: &[(String, String, f64)]) {
    out.push_str(
        "\nclient demand, placed by the [geoip] database at its nearest acceleration region\n",
    );
    let mut t = Table::new(&[
        ("clients", Align::Left),
        ("region", Align::Left),
        ("amount", Align::Right),
    ]);
    for (clients, region, amount) in demand_clients {
        t.push(vec![clients.clone(), region.clone(), pct(*amount)]);
    }
    t.render("  ", out);
}

/// The scenario's demand as load per group and endpoint, against their capacity.
fn demand_totals(out: &mut String, totals: &[Total]) {
    out.push_str("\ndemand-weighted load, summed over regions (scenario [demand])\n");
    let planned = totals.iter().any(|t| t.capacity.is_some());
    let mut header = vec![
        ("listener", Align::Left),
        ("group", Align::Left),
        ("endpoint", Align::Left),
        ("load", Align::Right),
    ];
    if planned {
        header.extend([
            ("capacity", Align::Right),
            ("use %", Align::Right),
            ("", Align::Left),
        ]);
    }
    let mut t = Table::new(&header);
    for row in totals {
        let mut cells = vec![
            row.listener.clone(),
            row.group.clone(),
            row.endpoint.clone().unwrap_or_default(),
            row.load.map_or_else(|| "load-dependent".to_owned(), pct),
        ];
        if planned {
            cells.push(row.capacity.map(pct).unwrap_or_default());
            cells.push(row.utilisation().map(pct).unwrap_or_default());
            cells.push(capacity::flag(row));
        }
        t.push(cells);
    }
    t.render("  ", out);
    if planned {
        out.push_str(
            "  use % = load / capacity; flagged above each listener's headroom and above 100 %\n",
        );
    }
}

/// The footnotes: request options that changed nothing, the RTT sources shown, and what the
/// shares are.
fn notes(out: &mut String, o: &Output<'_>) {
    if o.request
        && o.reports
            .iter()
            .all(|l| l.regions.iter().all(|r| r.routes.is_empty()))
    {
        out.push_str("\nnote: no listener shown has forwarding rules ([[listener.route]], HTTP only): --host, --path and --header changed nothing\n");
    }
    let sources = |s: RttSource| {
        o.reports
            .iter()
            .flat_map(|l| &l.regions)
            .flat_map(|r| &r.groups)
            .any(|g| g.rtt_source == s)
    };
    let (measured, listed) = (sources(RttSource::Measured), sources(RttSource::Catalog));
    if measured || listed {
        out.push_str("\nrtt: est = estimated from the regions' coordinates · cat = the catalogue's [rtt] entry · mea = measured (--latency)\n");
    }
    if measured {
        out.push_str("     a group passes one ranked above it in the catalogue's order only when faster by more than max(5 ms, 20 % of that one's time), as on a warmed-up node (docs/design.md §3.1)\n");
    }
    out.push_str("\nshares are percent of the traffic entering each node: share = first pass + leftover (docs/design.md §3.2)");
    if o.reports.iter().any(|l| l.failover == "graceful") {
        out.push_str("; graceful listeners grade it as their note says");
    }
    out.push('\n');
}

/// What one decision is on a listener of `protocol`.
fn decision(protocol: &str) -> &'static str {
    match protocol {
        "tcp" => "connection",
        "udp" => "flow",
        _ => "request",
    }
}

/// Where the `[geoip]` database puts a client, as the table says it.
fn place_text(place: Option<&gtd_core::geoip::Place>) -> String {
    match place {
        None => "not in the [geoip] database".to_owned(),
        Some(p) => {
            let mut s = format!(
                "in {} ({})",
                p.country_str().unwrap_or("an unknown country"),
                p.continent.as_str()
            );
            match p.location {
                Some((lat, lon)) => s.push_str(&format!(" at {lat:.4}, {lon:.4}")),
                None => s.push_str(", no coordinates"),
            }
            s
        }
    }
}

/// `--client`'s answer on one node: the group (or the rotation's chances over the groups) and
/// what decides the endpoint in each.
fn client_lines(out: &mut String, who: &str, protocol: &str, route: &Route) {
    let each = decision(protocol);
    let spread = |g: &ClientGroup| spread(g, each);
    match (route.chosen_by, route.groups.as_slice()) {
        (_, []) => {
            let _ = writeln!(out, "  {who} → no route");
        }
        ("source-ip", [g, ..]) => {
            let inside = match (&route.endpoint, route.endpoint_by) {
                (Some(e), Some("client")) => format!("endpoint {e}"),
                (Some(e), _) => format!(
                    "endpoint {e} (next in the rotation on a fresh node: the method does not map clients to endpoints)"
                ),
                (None, _) => spread(g),
            };
            let _ = writeln!(
                out,
                "  {who} → group {} (source-ip: the hash of its address picks it), {inside}",
                g.name
            );
        }
        (_, [g]) => {
            let _ = writeln!(
                out,
                "  {who} → group {} (affinity none, but the only group with a share: the rotation gives it every {each}), {}",
                g.name,
                spread(g)
            );
        }
        (_, groups) => {
            let _ = writeln!(
                out,
                "  {who} → no fixed group (affinity none): the node's rotation over the shares picks the group of each {each}; this client's {each}s go"
            );
            let width = groups
                .iter()
                .map(|g| g.name.chars().count())
                .max()
                .unwrap_or(0);
            for g in groups {
                let _ = writeln!(
                    out,
                    "    {:<width$}  {:>6} %  {}",
                    g.name,
                    pct(g.percent),
                    spread(g)
                );
            }
        }
    }
    if let Some(cookie) = &route.sticky {
        let _ = writeln!(
            out,
            "    sticky cookie {cookie}: once a response has set it, this client's requests that carry it go to the endpoint it names"
        );
    }
}

/// Inside one group: the endpoint the client lands on, or how its decisions spread.
fn spread(g: &ClientGroup, each: &str) -> String {
    let list = || {
        let parts: Vec<String> = g
            .endpoints
            .iter()
            .filter_map(|(address, share)| {
                share
                    .filter(|s| *s > 0.0)
                    .map(|s| format!("{address} {} %", pct(s)))
            })
            .collect();
        if parts.is_empty() {
            "no usable endpoint".to_owned()
        } else {
            parts.join(", ")
        }
    };
    match g.endpoint_by {
        "client" => match &g.endpoint {
            Some(e) => format!(
                "endpoint {e} ({}: the same for every {each} of this client{})",
                g.method,
                if g.keyed { " with this key" } else { "" }
            ),
            None => "no usable endpoint".to_owned(),
        },
        "request-key" => format!(
            "hash of the request's key (give --key to name the endpoint): {}",
            list()
        ),
        _ if g.endpoints.iter().any(|(_, s)| s.is_none()) => {
            format!("{} spreads them by load (load-dependent)", g.method)
        }
        _ => format!("{} spreads them: {}", g.method, list()),
    }
}

fn group_cells(g: &GroupRow, verify: bool, compare: bool) -> Vec<String> {
    let mut row = vec![
        g.priority.to_string(),
        g.name.clone(),
        g.group_region.clone(),
        format!("{:.2} {}", g.rtt_ms, &g.rtt_source.as_str()[..3]),
        capacity::number(g.ratio),
        (if g.healthy { "healthy" } else { "UNHEALTHY" }).to_owned(),
        pct(g.first_pass),
        "+".to_owned(),
        pct(g.leftover),
        "=".to_owned(),
        pct(g.share),
    ];
    if let Some(d) = g.graded {
        row.splice(6..6, [format!("{:.0} %", d.usable * 100.0)]);
        row.splice(
            10..11,
            [
                "+".to_owned(),
                pct(d.spill),
                "×".to_owned(),
                format!("{:.3}", d.keep),
                "=".to_owned(),
            ],
        );
    }
    if verify {
        row.push(g.observed.map(pct).unwrap_or_default());
    }
    if compare {
        let before = g.share_before.unwrap_or(0.0);
        row.push(pct(before));
        row.push(format!("{:+.2}", g.share - before));
    }
    row.push(g.method.to_owned());
    row
}

/// An endpoint's line under its group: its address, weight and state, and its share.
fn endpoint_cells(e: &EndpointRow, graded: bool, verify: bool, compare: bool) -> Vec<String> {
    let blank = if graded { 5 } else { 0 };
    let mut row = vec![
        String::new(),
        format!("  {}", e.address),
        format!("w{} {}", e.weight, e.state),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
    ];
    row.extend(std::iter::repeat_n(String::new(), blank));
    row.push(e.share.map_or_else(|| "load-dependent".to_owned(), pct));
    if verify {
        row.push(e.observed.map(pct).unwrap_or_default());
    }
    if compare {
        row.push(String::new());
        row.push(String::new());
    }
    row.push(String::new());
    row
}
