//! The docs/design.md §8 JSON document, as serialized types: fields in the order they are
//! written, the optional ones left out when absent.

use gtd_core::geoip::Place;
use gtd_core::split::rules::Match;
use serde::Serialize;

use crate::capacity::{Status, Total};
use crate::report::{ClientGroup, GroupRow, ListenerReport, RegionReport, Route};
use gtd_core::view::{EndpointShare, Explain, GroupView, RouteShare, RouteView};

use super::Output;

/// The docs/design.md §8 JSON document.
pub(crate) fn json(o: &Output<'_>) -> String {
    let doc = Document {
        listeners: o.reports.iter().map(|l| listener(l, o.compare)).collect(),
        demand_clients: (!o.demand_clients.is_empty()).then(|| {
            o.demand_clients
                .iter()
                .map(|(clients, region, amount)| DemandClient {
                    clients,
                    region,
                    amount: *amount,
                })
                .collect()
        }),
        totals: o
            .totals
            .map(|totals| totals.iter().map(TotalRow::of).collect()),
    };
    let mut s = serde_json::to_string_pretty(&doc).expect("JSON of plain values");
    s.push('\n');
    s
}

/// The whole document.
#[derive(Serialize)]
struct Document<'a> {
    listeners: Vec<ListenerJson<'a>>,
    /// `[demand]` entries naming clients, where the `[geoip]` database placed them.
    #[serde(skip_serializing_if = "Option::is_none")]
    demand_clients: Option<Vec<DemandClient<'a>>>,
    /// With `[demand]`: load against capacity per group and endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    totals: Option<Vec<TotalRow<'a>>>,
}

/// One listener, on every node region asked for.
#[derive(Serialize)]
struct ListenerJson<'a> {
    listener: &'a str,
    protocol: &'a str,
    port: u16,
    regions: Vec<RegionJson<'a>>,
}

/// One listener on one node.
#[derive(Serialize)]
struct RegionJson<'a> {
    region: &'a str,
    mode: &'static str,
    groups: Vec<GroupView<EndpointShare>>,
    /// `--verify`: decisions driven, and the largest deviation from the shares, points.
    #[serde(skip_serializing_if = "Option::is_none")]
    decisions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_deviation: Option<f64>,
    /// `--client`: where that client goes.
    #[serde(skip_serializing_if = "Option::is_none")]
    route: Option<RouteJson<'a>>,
    /// `--client`: why, as the node's `GET /explain`.
    #[serde(skip_serializing_if = "Option::is_none")]
    explain: Option<&'a Explain>,
    /// Each forwarding rule's split.
    #[serde(skip_serializing_if = "Option::is_none")]
    routes: Option<Vec<RouteView>>,
}

/// `--client`'s route on one node.
#[derive(Serialize)]
struct RouteJson<'a> {
    chosen_by: &'static str,
    group: Option<&'a str>,
    endpoint: Option<&'a str>,
    endpoint_by: Option<&'static str>,
    groups: Vec<ClientGroupJson<'a>>,
    /// With `[geoip]`: where the database puts the client (`null`: not in it).
    #[serde(skip_serializing_if = "Option::is_none")]
    client_location: Option<Option<PlaceJson<'a>>>,
    priority_by: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    sticky_cookie: Option<&'a str>,
    /// The forwarding rule matched: its 1-based number, `default` or `not-found`.
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<RuleJson>,
}

/// A forwarding rule as `--client`'s route names it.
#[derive(Serialize)]
#[serde(untagged)]
enum RuleJson {
    /// `default` (no rule matches) or `not-found` (a rule claims the host, none the path).
    Word(&'static str),
    /// The rule's 1-based number.
    Number(usize),
}

/// One group `--client` can land in.
#[derive(Serialize)]
struct ClientGroupJson<'a> {
    name: &'a str,
    percent: f64,
    method: &'static str,
    endpoint: Option<&'a str>,
    endpoint_by: &'static str,
    endpoints: Vec<ClientEndpoint<'a>>,
}

/// An endpoint with the percent of `--client`'s decisions it gets (`null`: load-dependent).
#[derive(Serialize)]
struct ClientEndpoint<'a> {
    address: &'a str,
    percent: Option<f64>,
}

/// Where the `[geoip]` database puts a client.
#[derive(Serialize)]
struct PlaceJson<'a> {
    continent: &'static str,
    country: Option<&'a str>,
    lat: Option<f64>,
    lon: Option<f64>,
}

/// A `[demand]` entry naming clients.
#[derive(Serialize)]
struct DemandClient<'a> {
    clients: &'a str,
    region: &'a str,
    amount: f64,
}

/// A group's or endpoint's load against its capacity.
#[derive(Serialize)]
struct TotalRow<'a> {
    listener: &'a str,
    group: &'a str,
    endpoint: Option<&'a str>,
    load: Option<f64>,
    capacity: Option<f64>,
    utilisation: Option<f64>,
    status: Option<&'static str>,
}

impl<'a> TotalRow<'a> {
    fn of(t: &'a Total) -> TotalRow<'a> {
        TotalRow {
            listener: &t.listener,
            group: &t.group,
            endpoint: t.endpoint.as_deref(),
            load: t.load,
            capacity: t.capacity,
            utilisation: t.utilisation(),
            status: t.status().map(Status::as_str),
        }
    }
}

fn listener(l: &ListenerReport, compare: bool) -> ListenerJson<'_> {
    ListenerJson {
        listener: &l.name,
        protocol: l.protocol,
        port: l.port,
        regions: l.regions.iter().map(|r| region(r, compare)).collect(),
    }
}

fn region(r: &RegionReport, compare: bool) -> RegionJson<'_> {
    RegionJson {
        region: &r.region,
        mode: r.mode.as_str(),
        groups: r.groups.iter().map(|g| group_view(g, compare)).collect(),
        decisions: r.verify.map(|(n, _)| n),
        max_deviation: r.verify.map(|(_, max)| max),
        route: r.route.as_ref().map(route),
        explain: r.explain.as_ref(),
        routes: (!r.routes.is_empty()).then(|| {
            r.routes
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
                .collect()
        }),
    }
}

fn route(route: &Route) -> RouteJson<'_> {
    RouteJson {
        chosen_by: route.chosen_by,
        group: route.group.as_deref(),
        endpoint: route.endpoint.as_deref(),
        endpoint_by: route.endpoint_by,
        groups: route.groups.iter().map(client_group).collect(),
        client_location: route.place.as_ref().map(|p| p.as_ref().map(place)),
        priority_by: route.priority_by,
        sticky_cookie: route.sticky.as_deref(),
        rule: route.rule.map(|rule| match rule {
            Match::Default => RuleJson::Word("default"),
            Match::Route(i) => RuleJson::Number(i + 1),
            Match::NotFound => RuleJson::Word("not-found"),
        }),
    }
}

fn client_group(g: &ClientGroup) -> ClientGroupJson<'_> {
    ClientGroupJson {
        name: &g.name,
        percent: g.percent,
        method: g.method,
        endpoint: g.endpoint.as_deref(),
        endpoint_by: g.endpoint_by,
        endpoints: g
            .endpoints
            .iter()
            .map(|(address, percent)| ClientEndpoint {
                address,
                percent: *percent,
            })
            .collect(),
    }
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
        drained: false,
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

/// Where the `[geoip]` database puts a client.
fn place(p: &Place) -> PlaceJson<'_> {
    PlaceJson {
        continent: p.continent.as_str(),
        country: p.country_str(),
        lat: p.location.map(|l| l.0),
        lon: p.location.map(|l| l.1),
    }
}
