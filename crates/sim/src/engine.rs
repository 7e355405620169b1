//! Computes what every node would do, by calling the library's decision code — the same
//! `split` (priority, cascade, failover, group choice) and `balance` (endpoint choice, usable
//! endpoints) that the `gtd` node runs. Nothing here re-implements a decision.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use gtd_core::balance::GroupBalancer;
use gtd_core::config::{Affinity, Config, FailoverMode, Listener, PriorityBy};
use gtd_core::split::Plan;
use gtd_core::split::rules::describe;
use gtd_core::view::RecoveringView;

use super::client::{client_explain, client_route};
use super::node::{SimRequest, moment, node_state, now, ratio_of};
use super::report::{
    Asks, EndpointRow, Graded, GroupRow, ListenerReport, RegionReport, RouteReport,
};
use super::scenario::WhatIf;

/// Evaluates every listener of `config` under `what_if`.
pub(crate) fn evaluate(
    config: &Config,
    what_if: &WhatIf,
    asks: &Asks,
) -> Result<Vec<ListenerReport>, super::Error> {
    if let Some(region) = &asks.region
        && !config.listeners.iter().any(|l| l.regions.contains(region))
    {
        let served: std::collections::BTreeSet<&str> = config
            .listeners
            .iter()
            .flat_map(|l| l.regions.iter().map(String::as_str))
            .collect();
        return Err(super::Error::Region {
            region: region.clone(),
            served: served.into_iter().collect::<Vec<_>>().join(", "),
        });
    }
    let now = now();
    let mut out = Vec::new();
    for (li, listener) in config.listeners.iter().enumerate() {
        let mut regions = Vec::new();
        for region in &listener.regions {
            if asks.region.as_ref().is_some_and(|r| r != region) {
                continue;
            }
            regions.push(evaluate_region(
                config, li, listener, region, what_if, asks, now,
            ));
        }
        if regions.is_empty() {
            continue;
        }
        out.push(ListenerReport {
            name: listener.name.clone(),
            protocol: listener.protocol.as_str(),
            port: listener.port,
            failover: listener.failover.as_str(),
            overprovisioning: listener.overprovisioning,
            fail_open: listener.fail_open,
            affinity: match listener.affinity {
                Affinity::None => "none",
                Affinity::SourceIp => "source-ip",
            },
            priority_by: match listener.priority_by {
                PriorityBy::Node => "node",
                PriorityBy::ClientLocation => "client-location",
            },
            regions,
        });
    }
    Ok(out)
}

fn evaluate_region(
    config: &Config,
    li: usize,
    listener: &Listener,
    region: &str,
    what_if: &WhatIf,
    asks: &Asks,
    now: Instant,
) -> RegionReport {
    let (ranking, balancers, plan) = node_state(
        config,
        li,
        listener,
        region,
        what_if,
        listener.affinity,
        now,
    );
    // The split at the moment pictured (recovering groups part way back).
    let at = moment(what_if, li, now);
    let shares = plan.plan.shares_at(at);
    let mut groups: Vec<GroupRow> = ranking
        .order
        .iter()
        .enumerate()
        .map(|(pos, &gi)| {
            let g = &listener.groups[gi];
            let share = shares[gi];
            let fractions = balancers[gi].expected_shares_admitting(now, plan.plan.admit());
            let endpoints = g
                .endpoints
                .iter()
                .enumerate()
                .map(|(ei, e)| EndpointRow {
                    address: e.address.text.clone(),
                    weight: e.weight,
                    state: endpoint_state(&balancers[gi], ei, e, now),
                    usable: balancers[gi].endpoints()[ei].is_usable(now),
                    share: fractions.as_ref().map(|f| f[ei] * share.total),
                    observed: None,
                })
                .collect();
            GroupRow {
                name: g.name.clone(),
                group_region: g.region.clone(),
                priority: pos + 1,
                rtt_ms: ranking.rtt_ms[gi],
                rtt_source: ranking.source[gi],
                ratio: ratio_of(listener, li, gi, what_if),
                healthy: balancers[gi].is_healthy(g.min_healthy, now),
                first_pass: share.first_pass,
                leftover: share.leftover,
                share: share.total,
                parts: share.kept_parts(),
                graded: (listener.failover == FailoverMode::Graceful).then(|| Graded {
                    usable: plan.facts[gi].fraction,
                    keep: share.keep,
                    spill: share.spill,
                }),
                method: g.balance.name(),
                observed: None,
                share_before: None,
                recovering: RecoveringView::of(&plan.plan, gi, at),
                endpoints,
            }
        })
        .collect();

    let verify = asks.verify.map(|n| {
        // A fresh node: new rotation, new balancer state, then N decisions.
        let (ranking, balancers, plan) = node_state(
            config,
            li,
            listener,
            region,
            what_if,
            listener.affinity,
            now,
        );
        let max = verify(
            listener,
            &ranking.order,
            &balancers,
            &plan.plan,
            n,
            &mut groups,
            (now, at),
        );
        (n, max)
    });

    let route = asks
        .client
        .map(|ip| client_route(config, li, listener, region, what_if, asks, ip, now));
    let explain = asks
        .client
        .map(|ip| client_explain(config, li, listener, region, what_if, asks, ip, now));

    let routes = listener
        .routes
        .iter()
        .zip(&plan.routes)
        .enumerate()
        .map(|(i, (rule, p))| RouteReport {
            index: i + 1,
            rule: describe(rule),
            mode: p.mode,
            groups: plan
                .rule_split_at(listener, i, at)
                .into_iter()
                .map(|(gi, share)| (listener.groups[gi].name.clone(), share))
                .collect(),
        })
        .collect();

    RegionReport {
        region: region.to_owned(),
        mode: plan.plan.mode,
        groups,
        verify,
        route,
        explain,
        routes,
    }
}

fn endpoint_state(
    b: &GroupBalancer,
    ei: usize,
    e: &gtd_core::config::Endpoint,
    now: Instant,
) -> &'static str {
    if !e.enabled {
        "disabled"
    } else if e.down {
        "down"
    } else if e.drain {
        "drain"
    } else if !b.endpoints()[ei].is_usable(now) {
        "failing"
    } else if e.backup {
        "backup"
    } else {
        "up"
    }
}

/// Drives `n` real decisions (group, then endpoint) and fills `observed`; returns the largest
/// deviation from the expected share, in points, over groups and knowable endpoints.
fn verify(
    listener: &Listener,
    order: &[usize],
    balancers: &[GroupBalancer],
    plan: &Plan,
    n: u64,
    groups: &mut [GroupRow],
    (now, at): (Instant, Instant),
) -> f64 {
    let mut group_hits = vec![0_u64; listener.groups.len()];
    let mut endpoint_hits: Vec<Vec<u64>> = listener
        .groups
        .iter()
        .map(|g| vec![0; g.endpoints.len()])
        .collect();
    for serial in 0..n {
        let ip = synthetic_client(serial);
        let Some(gi) = plan.choose_at(ip, at) else {
            continue;
        };
        group_hits[gi] += 1;
        let request = SimRequest {
            ip,
            key: Some(format!("/verify/{serial}")),
        };
        if let Some(pick) = balancers[gi].pick_admitting(&request, &[], plan.admit(), now) {
            endpoint_hits[gi][pick.index()] += 1;
        }
    }
    let pct = |hits: u64| {
        if n == 0 {
            0.0
        } else {
            hits as f64 * 100.0 / n as f64
        }
    };
    let mut max_dev = 0.0_f64;
    for (row, &gi) in groups.iter_mut().zip(order) {
        let observed = pct(group_hits[gi]);
        max_dev = max_dev.max((observed - row.share).abs());
        row.observed = Some(observed);
        for (ei, e) in row.endpoints.iter_mut().enumerate() {
            let observed = pct(endpoint_hits[gi][ei]);
            if let Some(expected) = e.share {
                max_dev = max_dev.max((observed - expected).abs());
            }
            e.observed = Some(observed);
        }
    }
    max_dev
}

/// The `serial`-th synthetic client of `--verify`: addresses spread over 10.0.0.0/8.
fn synthetic_client(serial: u64) -> IpAddr {
    // A fixed odd multiplier walks the /8 without repeating for 2^24 clients.
    let x = (serial.wrapping_mul(0x9E3779B1) & 0x00FF_FFFF) as u32;
    IpAddr::V4(Ipv4Addr::from(0x0A00_0000 | x))
}

/// Applies `--compare`: each group's share under `before` (0 when the group is new there).
pub(crate) fn attach_before(after: &mut [ListenerReport], before: &[ListenerReport]) {
    for l in after {
        let old_l = before.iter().find(|o| o.name == l.name);
        for r in &mut l.regions {
            let old_r = old_l.and_then(|o| o.regions.iter().find(|x| x.region == r.region));
            for g in &mut r.groups {
                let old = old_r
                    .and_then(|o| o.groups.iter().find(|x| x.name == g.name))
                    .map_or(0.0, |x| x.share);
                g.share_before = Some(old);
            }
        }
    }
}
