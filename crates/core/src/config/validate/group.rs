//! `[[listener.group]]`: names unique in the listener, region, ratio, priority (set on every
//! group or none, no two groups sharing a rank) and the keys of the group itself.

use std::collections::{BTreeMap, HashMap};

use super::Env;
use super::balance::balance;
use super::endpoint::endpoints;
use super::fields::{
    HTTP, capacity, check_name, choice, item_path, only_for, peek_str, required_tables,
};
use super::health_check::health_check;
use super::tls::upstream_tls;
use crate::config::document::{At, Ctx, Table, as_int, describe, did_you_mean, quote};
use crate::config::error::position;
use crate::config::model::*;

const GROUP_KEYS: &[&str] = &[
    "name",
    "region",
    "ratio",
    "priority",
    "balance",
    "hash_key",
    "consistent",
    "two",
    "measure",
    "factor",
    "feedback_header",
    "inverse",
    "min_healthy",
    "capacity",
    "health_check",
    "path_prefix",
    "keepalive",
    "reuse",
    "tls",
    "endpoint",
    // Outlier detection (HTTP).
    "consecutive_5xx",
    "consecutive_gateway_failures",
    "base_ejection_time",
    "max_ejection_time",
    "max_ejection_percent",
];

/// A group as read, with what the listener-wide checks need to point at.
pub(super) struct GroupRead<'t> {
    pub(super) group: Group,
    table: Table<'t, 't>,
    /// Where the name value is, when valid.
    name_at: Option<usize>,
    /// (region, rank, position) of every rank the priority gives (a fixed rank: every region).
    ranks: Vec<(String, u32, usize)>,
}

pub(super) fn groups<'t>(
    ctx: &mut Ctx<'_>,
    env: &Env<'_>,
    t: &Table<'t, '_>,
    protocol: Option<Protocol>,
    regions: &[At<&str>],
) -> Vec<GroupRead<'t>> {
    let Some(tables) = required_tables(
        ctx,
        t,
        "group",
        "a listener needs at least one [[listener.group]]",
    ) else {
        return Vec::new();
    };
    let mut out: Vec<GroupRead<'t>> = Vec::new();
    for (i, v) in tables.into_iter().enumerate() {
        let path = item_path(&t.path, "group", peek_str(v, "name"), i + 1);
        let Some(g) = Table::of(ctx, v, "group", &t.path, path) else {
            continue;
        };
        let g = group(ctx, env, g, protocol, regions);
        if let Some(at) = g.name_at
            && let Some(first) = out
                .iter()
                .find(|o| o.name_at.is_some() && o.group.name == g.group.name)
        {
            let line = position(ctx.text(), first.name_at.unwrap_or(0)).0;
            let msg = format!(
                "duplicate group name {} (first defined at line {line})",
                quote(&g.group.name)
            );
            ctx.error(at, &g.table.path, msg);
        }
        out.push(g);
    }
    priorities(ctx, &out);
    out
}

/// Warns of each health check of a TCP or UDP listener's groups that cannot see an endpoint
/// that accepts and never answers (or, on UDP, never replies) on the port clients reach: a
/// TCP check that only connects, or any check of another port, when the listener has no
/// `first_byte_timeout` to catch such a connection. Such an endpoint stays in rotation; its
/// clients' connections count as its timeouts (docs/status.md), nothing more.
pub(super) fn unseen_hangs(
    ctx: &mut Ctx<'_>,
    groups: &[GroupRead<'_>],
    protocol: Option<Protocol>,
    first_byte_timeout: Option<std::time::Duration>,
) {
    for g in groups {
        let Some(check) = &g.group.health_check else {
            continue;
        };
        let at = g.table.key_at("health_check").unwrap_or(g.table.at);
        let path = format!("{} health_check", g.table.path);
        let side = check
            .port
            .filter(|p| g.group.endpoints.iter().any(|e| e.address.port != *p));
        let msg = match protocol {
            Some(Protocol::Tcp) if first_byte_timeout.is_some() => continue,
            Some(Protocol::Tcp) => match side {
                Some(port) => format!(
                    "this health check checks port {port}, not the port clients reach: an \
                     endpoint hung on that one (it accepts and never answers) passes and stays \
                     in rotation. Check the served port (no port) with send and expect, or set \
                     first_byte_timeout on the listener so that such a connection is tried on \
                     another endpoint"
                ),
                None if check.protocol == CheckProtocol::Tcp
                    && check.send.is_none()
                    && check.expect.is_none() =>
                {
                    "this health check only connects: an endpoint that accepts and never answers \
                     passes and stays in rotation. Give it send and expect (bytes the endpoint \
                     answers, and what its answer holds), or set first_byte_timeout on the \
                     listener so that such a connection is tried on another endpoint"
                        .to_owned()
                }
                None => continue,
            },
            Some(Protocol::Udp) if check.protocol != CheckProtocol::Udp => format!(
                "this health check is over {} on port {}, not the endpoints' UDP port: an \
                 endpoint whose UDP service never replies passes and stays in rotation. Use \
                 protocol = \"udp\" with send and expect (a datagram the endpoint answers, and \
                 what its reply holds)",
                if check.protocol == CheckProtocol::Tcp {
                    "tcp"
                } else {
                    "http"
                },
                check.port.map_or_else(|| "?".to_owned(), |p| p.to_string())
            ),
            Some(Protocol::Udp) => match side {
                Some(port) => format!(
                    "this udp health check sends to port {port}, not the port clients reach: an \
                     endpoint that never replies on that one passes and stays in rotation. \
                     Check the served port (no port) with send and expect"
                ),
                None => continue,
            },
            _ => continue,
        };
        ctx.warn(at, &path, msg);
    }
}

/// Either every group sets `priority` or none does; no two share a rank for one region.
fn priorities(ctx: &mut Ctx<'_>, groups: &[GroupRead<'_>]) {
    if let Some(with) = groups.iter().find(|g| g.table.has("priority")) {
        for g in groups.iter().filter(|g| !g.table.has("priority")) {
            let msg = format!(
                "priority is set on group {} but not on this one; set it on every group of the listener or on none",
                quote(&with.group.name)
            );
            ctx.error(g.table.at, &g.table.path, msg);
        }
    }
    // (region, rank) → group that took it.
    let mut taken: HashMap<(&str, u32), &str> = HashMap::new();
    for g in groups {
        let mut reported: Vec<&str> = Vec::new();
        for (region, rank, at) in &g.ranks {
            match taken.get(&(region.as_str(), *rank)) {
                Some(other) if !reported.contains(other) => {
                    reported.push(other);
                    let msg = match (&g.group.priority, other_priority(groups, other)) {
                        (Some(Priority::Fixed(_)), Some(Priority::Fixed(_))) => {
                            format!("priority {rank} is also used by group {}", quote(other))
                        }
                        _ => format!(
                            "priority {rank} for region {} is also used by group {}",
                            quote(region),
                            quote(other)
                        ),
                    };
                    ctx.error(*at, &g.table.path, msg);
                }
                Some(_) => {}
                None => {
                    taken.insert((region.as_str(), *rank), g.group.name.as_str());
                }
            }
        }
    }
}

fn other_priority<'a>(groups: &'a [GroupRead<'_>], name: &str) -> Option<&'a Priority> {
    groups
        .iter()
        .find(|g| g.group.name == name)?
        .group
        .priority
        .as_ref()
}

fn group<'t>(
    ctx: &mut Ctx<'_>,
    env: &Env<'_>,
    t: Table<'t, 't>,
    protocol: Option<Protocol>,
    regions: &[At<&str>],
) -> GroupRead<'t> {
    t.check_keys(ctx, GROUP_KEYS);
    let name = t
        .req_str(ctx, "name")
        .filter(|n| check_name(ctx, *n, &t.path, "group"));
    let region = t
        .req_str(ctx, "region")
        .filter(|r| env.region(ctx, *r, &t.path));
    let ratio = ratio(ctx, &t);
    let (priority, ranks) = priority(ctx, env, &t, regions);
    let balance = balance(ctx, &t, protocol);
    let health_check = t
        .table(ctx, "health_check", format!("{} health_check", t.path))
        .and_then(|h| {
            let check = health_check(ctx, &h)?;
            // A udp check sends datagrams: to a udp listener's endpoints only.
            if check.protocol == CheckProtocol::Udp && protocol.is_some_and(|p| p != Protocol::Udp)
            {
                let at = h.value_at("protocol").unwrap_or(h.at);
                ctx.error(
                    at,
                    &h.path,
                    "a udp health check is for udp listeners; this listener's endpoints speak \
                     TCP: use protocol = \"tcp\" with send and expect",
                );
            }
            // A UDP endpoint has no TCP port of its own to check: a tcp or http check names the
            // one it exposes for that (docs/design.md §5).
            if protocol == Some(Protocol::Udp)
                && check.protocol != CheckProtocol::Udp
                && check.port.is_none()
            {
                ctx.error(
                    h.at,
                    &h.path,
                    "a udp listener's endpoints are checked over TCP or HTTP on a port they \
                     expose for it: set port = N in this health_check (or use protocol = \"udp\" \
                     with send and expect)",
                );
            }
            Some(check)
        });
    let is = |f: fn(Protocol) -> bool| protocol.is_none_or(f);
    let mut path_prefix = None;
    if only_for(ctx, &t, "path_prefix", is(Protocol::is_http), HTTP) {
        path_prefix =
            t.str(ctx, "path_prefix")
                .and_then(|p| match crate::config::wire::path_prefix(p.v) {
                    Ok(_) => Some(p.v.to_owned()),
                    Err(e) => {
                        ctx.error(p.at, &t.path, format!("path_prefix {e}"));
                        None
                    }
                });
    }
    let mut keepalive = Group::DEFAULT_KEEPALIVE;
    if only_for(ctx, &t, "keepalive", is(Protocol::is_http), HTTP) {
        keepalive = t.u32(ctx, "keepalive", 0, None).map_or(keepalive, |n| n.v);
    }
    let mut reuse = Reuse::default();
    if only_for(ctx, &t, "reuse", is(Protocol::is_http), HTTP) {
        let options = [("safe", Reuse::Safe), ("always", Reuse::Always)];
        reuse = choice(ctx, &t, "reuse", &options).map_or(reuse, |r| r.v);
    }
    // TLS towards the endpoints is originated by HTTP listeners only; a TCP or UDP listener
    // relays bytes as they come, so a group `tls` there would send them in plaintext while the
    // operator believes them encrypted: an error, unless the group's https health checks are
    // what it is for (then a warning says it is for them alone).
    let https_checks = health_check
        .as_ref()
        .is_some_and(|h| h.protocol == CheckProtocol::Https);
    let tls = match t.key_at("tls") {
        Some(at) if !is(Protocol::is_http) && !https_checks => {
            ctx.error(
                at,
                &t.path,
                "\"tls\" (TLS towards the endpoints) is for http/https listeners: this listener \
                 relays bytes as they come and would send them to the endpoints in plaintext; \
                 remove it, or terminate TLS at the endpoints themselves",
            );
            None
        }
        Some(at) if !is(Protocol::is_http) => {
            ctx.warn(
                at,
                &t.path,
                "\"tls\" is used by this group's https health checks only: the listener relays \
                 client bytes to the endpoints as they come, unencrypted by gtd",
            );
            t.table(ctx, "tls", t.path.clone())
                .and_then(|tls| upstream_tls(ctx, env, &tls))
        }
        _ => t
            .table(ctx, "tls", t.path.clone())
            .and_then(|tls| upstream_tls(ctx, env, &tls)),
    };
    let outlier = outlier(ctx, &t, protocol);
    let endpoints = endpoints(ctx, &t, balance.as_ref().map(|b| b.1));

    let min_healthy = match t.u32(ctx, "min_healthy", 1, None) {
        Some(n) if !endpoints.is_empty() && n.v as usize > endpoints.len() => {
            let msg = format!(
                "min_healthy {} is more than the group's {} endpoint{}",
                n.v,
                endpoints.len(),
                if endpoints.len() == 1 { "" } else { "s" }
            );
            ctx.error(n.at, &t.path, msg);
            Group::DEFAULT_MIN_HEALTHY
        }
        Some(n) => n.v,
        None => Group::DEFAULT_MIN_HEALTHY,
    };

    // Unset, the endpoints' sum stands in (`Group::capacity_when`).
    let capacity = capacity(ctx, &t);

    GroupRead {
        name_at: name.map(|n| n.at),
        ranks,
        group: Group {
            name: name.map(|n| n.v.to_owned()).unwrap_or_default(),
            region: region.map(|r| r.v.to_owned()).unwrap_or_default(),
            ratio,
            priority,
            balance: balance.map_or(Balance::RoundRobin, |b| b.0),
            min_healthy,
            capacity,
            health_check,
            path_prefix,
            keepalive,
            reuse,
            tls,
            outlier,
            endpoints,
        },
        table: t,
    }
}

/// The outlier keys (HTTP; docs/design.md §5): on with Envoy's defaults unless both streak
/// limits are 0; `None` on other listeners, where each key set warns that it is ignored.
fn outlier(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, protocol: Option<Protocol>) -> Option<Outlier> {
    const KEYS: [&str; 5] = [
        "consecutive_5xx",
        "consecutive_gateway_failures",
        "base_ejection_time",
        "max_ejection_time",
        "max_ejection_percent",
    ];
    let http = protocol.is_none_or(Protocol::is_http);
    let mut allowed = true;
    for key in KEYS {
        allowed &= only_for(ctx, t, key, http, HTTP);
    }
    if !http || !allowed {
        return None;
    }
    let d = Outlier::default();
    let base = t
        .positive_duration(ctx, "base_ejection_time")
        .map_or(d.base_ejection_time, |v| v.v);
    let max = match t.positive_duration(ctx, "max_ejection_time") {
        Some(m) if m.v < base => {
            let msg = format!(
                "max_ejection_time {:?} is shorter than base_ejection_time {base:?}",
                m.v
            );
            ctx.error(m.at, &t.path, msg);
            d.max_ejection_time.max(base)
        }
        Some(m) => m.v,
        None => d.max_ejection_time.max(base),
    };
    Some(Outlier {
        consecutive_5xx: t
            .u32(ctx, "consecutive_5xx", 0, None)
            .map_or(d.consecutive_5xx, |n| n.v),
        consecutive_gateway_failures: t
            .u32(ctx, "consecutive_gateway_failures", 0, None)
            .map_or(d.consecutive_gateway_failures, |n| n.v),
        base_ejection_time: base,
        max_ejection_time: max,
        max_ejection_percent: t
            .u32(ctx, "max_ejection_percent", 0, Some(100))
            .map_or(d.max_ejection_percent, |n| n.v),
    })
    .filter(|o| o.consecutive_5xx > 0 || o.consecutive_gateway_failures > 0)
}

/// `ratio`: an integer or float in 0..=100, default 100.
fn ratio(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> f64 {
    let Some(n) = t.number(ctx, "ratio") else {
        return Group::DEFAULT_RATIO;
    };
    let (x, written) = n.v;
    if (0.0..=100.0).contains(&x) {
        x
    } else {
        ctx.error(
            n.at,
            &t.path,
            format!("ratio {written} is out of range 0..=100"),
        );
        Group::DEFAULT_RATIO
    }
}

/// `priority`: a rank >= 1, or a table region → rank covering every region of the listener.
fn priority(
    ctx: &mut Ctx<'_>,
    env: &Env<'_>,
    t: &Table<'_, '_>,
    regions: &[At<&str>],
) -> (Option<Priority>, Vec<(String, u32, usize)>) {
    let Some(v) = t.value("priority") else {
        return (None, Vec::new());
    };
    let at = v.span().start;
    match v.get_ref() {
        toml::de::DeValue::Integer(_) => {
            let Some(rank) = t.u32(ctx, "priority", 1, None) else {
                return (None, Vec::new());
            };
            let ranks = regions
                .iter()
                .map(|r| (r.v.to_owned(), rank.v, at))
                .collect();
            (Some(Priority::Fixed(rank.v)), ranks)
        }
        toml::de::DeValue::Table(_) => {
            let Some(table) = Table::of(ctx, v, "\"priority\"", &t.path, t.path.clone()) else {
                return (None, Vec::new());
            };
            let mut map = BTreeMap::new();
            let mut ranks = Vec::new();
            let names: Vec<&str> = regions.iter().map(|r| r.v).collect();
            for (region, value) in table.entries() {
                if !names.contains(&region.v) {
                    let (region_name, served) = (quote(region.v), names.join(", "));
                    if env.catalog.is_some_and(|c| c.get(region.v).is_some()) {
                        // One table copied to listeners served from fewer regions: a rank for
                        // a region that does not serve this listener is never used.
                        let msg = format!(
                            "priority ranks region {region_name}, which does not serve this \
                             listener ({served}); ignored"
                        );
                        ctx.warn(region.at, &t.path, msg);
                    } else {
                        let hint = did_you_mean(region.v, names.iter().copied());
                        let msg = format!(
                            "priority ranks region {region_name}, which is not a region of this \
                             listener ({served}){hint}"
                        );
                        ctx.error(region.at, &t.path, msg);
                    }
                    continue;
                }
                let what = format!("priority for {}", quote(region.v));
                let Some(rank) = as_int(ctx, value, &t.path, &what) else {
                    continue;
                };
                let vat = value.span().start;
                let Some(rank) = u32::try_from(rank).ok().filter(|r| *r >= 1) else {
                    ctx.error(
                        vat,
                        &t.path,
                        format!("priority {rank} for {} must be at least 1", quote(region.v)),
                    );
                    continue;
                };
                map.insert(region.v.to_owned(), rank);
                ranks.push((region.v.to_owned(), rank, vat));
            }
            for r in regions {
                if !table.has(r.v) {
                    let msg = format!(
                        "priority has no rank for region {}; a priority table must rank every region of the listener",
                        quote(r.v)
                    );
                    ctx.error(at, &t.path, msg);
                }
            }
            (Some(Priority::PerRegion(map)), ranks)
        }
        other => {
            let msg = format!(
                "\"priority\" must be an integer or a table of region = rank, found {}",
                describe(other)
            );
            ctx.error(at, &t.path, msg);
            (None, Vec::new())
        }
    }
}
