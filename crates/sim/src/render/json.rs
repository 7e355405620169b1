//! The docs/design.md §8 JSON document.

use gtd_core::split::rules::Match;
use serde_json::{Value, json};

use crate::capacity::Status;
use crate::engine::{GroupRow, RegionReport};
use gtd_core::view::{EndpointShare, GroupView, RouteShare, RouteView};

use super::Output;

/// The docs/design.md §8 JSON document.
pub(crate) fn json(o: &Output<'_>) -> String {
    let listeners: Vec<Value> = o
        .reports
        .iter()
        .map(|l| {
            let regions: Vec<Value> = l
                .regions
                .iter()
                .map(|r| region_json(r, o.compare))
                .collect();
            json!({"listener": l.name, "protocol": l.protocol, "port": l.port, "regions": regions})
        })
        .collect();
    let mut doc = json!({ "listeners": listeners });
    if !o.demand_clients.is_empty() {
        doc["demand_clients"] = o
            .demand_clients
            .iter()
            .map(|(clients, region, amount)| json!({"clients": clients, "region": region, "amount": amount}))
            .collect();
    }
    if let Some(totals) = o.totals {
        doc["totals"] = totals
            .iter()
            .map(|t| json!({"listener": t.listener, "group": t.group, "endpoint": t.endpoint, "load": t.load,
                            "capacity": t.capacity, "utilisation": t.utilisation(),
                            "status": t.status().map(Status::as_str)}))
            .collect();
    }
    let mut s = serde_json::to_string_pretty(&doc).expect("JSON of plain values");
    s.push('\n');
    s
}

fn region_json(r: &RegionReport, compare: bool) -> Value {
    let groups: Vec<GroupView<EndpointShare>> =
        r.groups.iter().map(|g| group_view(g, compare)).collect();
    let mut v = json!({"region": r.region, "mode": r.mode.as_str(), "groups": groups});
    if let Some((n, max)) = r.verify {
        v["decisions"] = json!(n);
        v["max_deviation"] = json!(max);
    }
    if let Some(route) = &r.route {
        let groups: Vec<Value> = route
            .groups
            .iter()
            .map(|g| {
                let endpoints: Vec<Value> = g
                    .endpoints
                    .iter()
                    .map(|(address, percent)| json!({"address": address, "percent": percent}))
                    .collect();
                json!({"name": g.name, "percent": g.percent, "method": g.method,
                       "endpoint": g.endpoint, "endpoint_by": g.endpoint_by, "endpoints": endpoints})
            })
            .collect();
        v["route"] = json!({"chosen_by": route.chosen_by, "group": route.group, "endpoint": route.endpoint,
                            "endpoint_by": route.endpoint_by, "groups": groups});
        if let Some(place) = &route.place {
            v["route"]["client_location"] = place.map_or(Value::Null, place_json);
        }
        v["route"]["priority_by"] = json!(route.priority_by);
        if let Some(cookie) = &route.sticky {
            v["route"]["sticky_cookie"] = json!(cookie);
        }
        if let Some(rule) = route.rule {
            v["route"]["rule"] = match rule {
                Match::Default => json!("default"),
                Match::Route(i) => json!(i + 1),
                Match::NotFound => json!("not-found"),
            };
        }
    }
    if let Some(explain) = &r.explain {
        v["explain"] = json!(explain);
    }
    if !r.routes.is_empty() {
        let routes: Vec<RouteView> = r
            .routes
            .iter()
            .map(|route| RouteView {
                rule: route.index,
                matches: route.rule.clone(),
                mode: route.mode.as_str().to_owned(),
                groups: route
                    .groups
                    .iter()
                    .map(|(name, share)| RouteShare {
                        name: name.clone(),
                        share: *share,
                    })
                    .collect(),
            })
            .collect();
        v["routes"] = json!(routes);
    }
    v
}

/// One group's row: the view a node's `/status` shows a group in ([`GroupView`]), over the
/// simulator's endpoint shares, without the node's own fields (`parts`, `served`, `rank`).
fn group_view(g: &GroupRow, compare: bool) -> GroupView<EndpointShare> {
    let before = compare.then(|| g.share_before.unwrap_or(0.0));
    GroupView {
        name: g.name.clone(),
        priority: g.priority,
        rtt_ms: g.rtt_ms.is_finite().then_some(g.rtt_ms),
        rtt_source: g.rtt_source.as_str().to_owned(),
        region: g.group_region.clone(),
        ratio: g.ratio,
        healthy: g.healthy,
        first_pass: g.first_pass,
        leftover: g.leftover,
        share: g.share,
        method: g.method.to_owned(),
        endpoints: g
            .endpoints
            .iter()
            .map(|e| EndpointShare {
                address: e.address.clone(),
                share: e.share,
                weight: e.weight,
                state: e.state.to_owned(),
                observed: e.observed,
            })
            .collect(),
        observed: g.observed,
        usable: g.graded.map(|d| d.usable),
        keep: g.graded.map(|d| d.keep),
        spill: g.graded.map(|d| d.spill),
        share_before: before,
        delta: before.map(|b| g.share - b),
        recovering: g.recovering,
        parts: None,
        served: None,
        rank: None,
    }
}

/// Where the `[geoip]` database puts a client, as JSON.
fn place_json(p: gtd_core::geoip::Place) -> Value {
    json!({
        "continent": p.continent.as_str(),
        "country": p.country_str(),
        "lat": p.location.map(|l| l.0),
        "lon": p.location.map(|l| l.1),
    })
}
