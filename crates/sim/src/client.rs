//! `--client IP`: where that client goes from a node of each region ([`client_route`]) and why
//! ([`client_explain`]), from the plan and balancers such a node would run.

use std::net::IpAddr;
use std::time::Instant;

use super::node::{SimRequest, moment, node_state};
use super::report::{Asks, ClientGroup, Route};
use super::scenario::WhatIf;
use gtd_core::config::{Affinity, Balance, Config, Listener, PriorityBy};
use gtd_core::split::rules::{Match, Parts, Rules};
use gtd_core::split::{self, ListenerPlan, location};
use gtd_core::view::Explain;
use gtd_core::view::explain::{Ask, ExplainFacts};

/// Under `priority_by = "client-location"`, with the client placed `at` coordinates, replaces
/// `plan` by the plan of the groups in order of distance from it, as the node does; true when
/// it did.
fn located(
    config: &Config,
    listener: &Listener,
    ranking: &split::Ranking,
    plan: &mut ListenerPlan,
    at: Option<(f64, f64)>,
) -> bool {
    let Some(at) = at.filter(|_| listener.priority_by == PriorityBy::ClientLocation) else {
        return false;
    };
    let coords = location::group_coords(listener, &config.catalog);
    let order = location::by_distance(at, &coords);
    let facts = plan.facts.clone();
    *plan = ListenerPlan::build_ramped(
        listener,
        location::ranking(ranking, &order),
        facts,
        listener.affinity,
        plan.recovered.clone(),
    );
    true
}

/// Why `--client` `ip` goes where it goes from a node in `region`: the document a node's
/// `GET /explain` answers, built by the same function from the plan and balancers a fresh node
/// of that region would run (under `priority_by = "client-location"`, the plan of the client's
/// place, as the node looks it up).
#[allow(clippy::too_many_arguments)]
pub(super) fn client_explain(
    config: &Config,
    li: usize,
    listener: &Listener,
    region: &str,
    what_if: &WhatIf,
    asks: &Asks,
    ip: IpAddr,
    now: Instant,
) -> Explain {
    let (ranking, balancers, mut plan) = node_state(
        config,
        li,
        listener,
        region,
        what_if,
        listener.affinity,
        now,
    );
    let at = config
        .geoip
        .as_ref()
        .and_then(|g| g.db.lookup(ip))
        .and_then(|p| p.location);
    let by_location = located(config, listener, &ranking, &mut plan, at);
    let facts = ExplainFacts {
        listener,
        region,
        planned: &plan,
        ranked: &ranking,
        balancers: balancers.iter().collect(),
        by_location,
    };
    let ask = Ask {
        client: ip,
        host: asks.host.as_deref(),
        path: asks.path.as_deref(),
        key: asks.key.as_deref(),
        headers: &asks.headers,
    };
    Explain::build(&facts, &ask, moment(what_if, li, now))
}

/// Where `--client` `ip` goes from a node in `region`: under `affinity = "none"` the node's
/// rotation spreads the client's decisions over every group with a share, under source-ip the
/// rendezvous hash names one; inside each group, the endpoint when the client decides it, else
/// the method's shares.
#[allow(clippy::too_many_arguments)]
pub(super) fn client_route(
    config: &Config,
    li: usize,
    listener: &Listener,
    region: &str,
    what_if: &WhatIf,
    asks: &Asks,
    ip: IpAddr,
    now: Instant,
) -> Route {
    // A fresh node: new rotation and balancer state.
    let (ranking, balancers, mut plan) = node_state(
        config,
        li,
        listener,
        region,
        what_if,
        listener.affinity,
        now,
    );
    let request = SimRequest {
        ip,
        key: asks.key.clone(),
    };
    let chosen_by = match listener.affinity {
        Affinity::None => "rotation",
        Affinity::SourceIp => "source-ip",
    };
    // An HTTP listener's forwarding rules decide first which plan the request follows.
    let rule = (!listener.routes.is_empty()).then(|| {
        Rules::new(&listener.routes).find(&Parts {
            host: asks.host.as_deref(),
            path: asks.path.as_deref().unwrap_or("/"),
            headers: &asks.headers,
        })
    });
    // Where the node's [geoip] database puts the client, and under priority_by =
    // "client-location" the plan of its order of groups when it has coordinates (as the node).
    let place = config.geoip.as_ref().map(|g| g.db.lookup(ip));
    let at = place.flatten().and_then(|p| p.location);
    let priority_by = if located(config, listener, &ranking, &mut plan, at) {
        "client-location"
    } else {
        "node"
    };
    let mut route = Route {
        place,
        priority_by,
        rule,
        chosen_by,
        group: None,
        endpoint: None,
        endpoint_by: None,
        groups: Vec::new(),
        sticky: listener.sticky.as_ref().map(|s| s.cookie.clone()),
    };
    let plan = match rule {
        Some(Match::NotFound) => return route,
        Some(Match::Route(r)) => plan.for_route(Some(r)),
        _ => plan.for_route(None),
    };
    // The split at the moment pictured (`--recovering` groups part way back).
    let moment = moment(what_if, li, now);
    let shares = plan.shares_at(moment);
    let targets: Vec<(usize, f64)> = match listener.affinity {
        // Every decision takes the next group of the rotation, whoever sends it: the chance of
        // each group is its share.
        Affinity::None => plan
            .order
            .iter()
            .map(|&gi| (gi, shares[gi].total))
            .filter(|&(_, share)| share > 0.0)
            .collect(),
        Affinity::SourceIp => plan
            .choose_at(ip, moment)
            .map(|gi| (gi, 100.0))
            .into_iter()
            .collect(),
    };
    for &(gi, percent) in &targets {
        let g = &listener.groups[gi];
        let b = &balancers[gi];
        let endpoint_by = if client_decides(listener, &g.balance, asks.key.is_some()) {
            "client"
        } else if matches!(g.balance, Balance::Hash { .. }) {
            "request-key"
        } else {
            "method"
        };
        let (endpoint, endpoints) = if endpoint_by == "client" {
            let pick = b
                .pick_admitting(&request, &[], plan.admit(), now)
                .map(|p| p.index());
            let endpoints = g
                .endpoints
                .iter()
                .enumerate()
                .map(|(ei, e)| {
                    let hit = if pick == Some(ei) { percent } else { 0.0 };
                    (e.address.text.clone(), Some(hit))
                })
                .collect();
            (
                pick.map(|ei| g.endpoints[ei].address.text.clone()),
                endpoints,
            )
        } else {
            let fractions = b.expected_shares_admitting(now, plan.admit());
            let endpoints = g
                .endpoints
                .iter()
                .enumerate()
                .map(|(ei, e)| {
                    let share = fractions.as_ref().map(|f| f[ei] * percent);
                    (e.address.text.clone(), share)
                })
                .collect();
            (None, endpoints)
        };
        route.groups.push(ClientGroup {
            name: g.name.clone(),
            percent,
            method: g.balance.name(),
            endpoint,
            endpoint_by,
            keyed: endpoint_by == "client" && uses_request_key(listener, &g.balance),
            endpoints,
        });
    }
    // One group takes every decision: name it, and the endpoint in it as before (the client's,
    // or the pick a fresh node would make next when the method does not map clients).
    if let [(gi, _)] = targets[..] {
        let g = &listener.groups[gi];
        route.group = Some(g.name.clone());
        match route.groups[0].endpoint_by {
            "client" => {
                route.endpoint = route.groups[0].endpoint.clone();
                route.endpoint_by = route.endpoint.is_some().then_some("client");
            }
            "method" => {
                route.endpoint = balancers[gi]
                    .pick_admitting(&request, &[], plan.admit(), now)
                    .map(|p| p.address().text.clone());
                route.endpoint_by = route.endpoint.is_some().then_some("rotation");
            }
            _ => {}
        }
    }
    route
}

/// True when the client alone decides the endpoint in a group balanced by `balance`: ip_hash,
/// or hash on a key made of the client's address and literals — or of anything, when `--key`
/// gives the request's key (or the listener is not HTTP, where HTTP variables are empty).
fn client_decides(listener: &Listener, balance: &Balance, key_given: bool) -> bool {
    match balance {
        Balance::IpHash => true,
        Balance::Hash { .. } => key_given || !uses_request_key(listener, balance),
        _ => false,
    }
}

/// True for `hash` on an HTTP listener with a key that reads the request (`$request_uri`,
/// `$http_*`, `$cookie_*`).
fn uses_request_key(listener: &Listener, balance: &Balance) -> bool {
    match balance {
        Balance::Hash { key, .. } => {
            listener.protocol.is_http() && key.parts.iter().any(|p| p.http_only())
        }
        _ => false,
    }
}
