//! `[[listener]]`: names and ports unique across the file, protocol, regions, timeouts, retries
//! and the keys that belong to some protocols only; its routes, TLS and groups are read by
//! their own modules.

use std::collections::HashMap;
use std::time::Duration;

use super::Env;
use super::fields::{HTTP, check_name, choice, item_path, only_for, peek_str, status_set};
use super::group::{GroupRead, groups, unseen_hangs};
use super::route::routes;
use super::tls::server_tls;
use crate::config::document::{At, Ctx, Table, as_str, quote};
use crate::config::error::position;
use crate::config::model::*;
use crate::config::syntax;

const LISTENER_KEYS: &[&str] = &[
    "name",
    "protocol",
    "port",
    "regions",
    "failover",
    "overprovisioning",
    "headroom",
    "fail_open",
    "affinity",
    "priority_by",
    "connect_timeout",
    "idle_timeout",
    "drain_timeout",
    "max_connections",
    "backlog",
    "proxy_protocol",
    "header_timeout",
    "upstream_timeout",
    "retry",
    "tries",
    "retry_timeout",
    "retry_non_idempotent",
    "unhealthy_status",
    "sticky",
    "udp_max_flows",
    "tls",
    "route",
    "group",
    // Ranking by measured RTT; the first byte of TCP endpoints.
    "rtt_from",
    "rank_margin",
    "rank_dwell",
    "first_byte_timeout",
    // Ramped failback (docs/design.md §3.3).
    "failback_ramp",
];

pub(super) fn listeners(ctx: &mut Ctx<'_>, env: &Env<'_>, root: &Table<'_, '_>) -> Vec<Listener> {
    let mut out = Vec::new();
    // Name → position of the first listener with it; (transport, port) → first listener there.
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut ports: HashMap<(bool, u16), (String, Protocol)> = HashMap::new();
    for (i, v) in root.tables(ctx, "listener").into_iter().enumerate() {
        let path = item_path("", "listener", peek_str(v, "name"), i + 1);
        let Some(t) = Table::of(ctx, v, "listener", "", path) else {
            continue;
        };
        let Some(l) = listener(ctx, env, &t) else {
            continue;
        };
        if let Some(at) = t.value_at("name") {
            if let Some(first) = names.get(&l.name) {
                let line = position(ctx.text(), *first).0;
                ctx.error(
                    at,
                    &t.path,
                    format!(
                        "duplicate listener name {} (first defined at line {line})",
                        quote(&l.name)
                    ),
                );
            } else {
                names.insert(l.name.clone(), at);
            }
        }
        if let Some(at) = t.value_at("port") {
            let tcp = l.protocol != Protocol::Udp;
            if let Some((other, proto)) = ports.get(&(tcp, l.port)) {
                let msg = if tcp {
                    format!(
                        "port {} is already used by listener {} ({proto}); tcp, http and https listeners share TCP ports",
                        l.port,
                        quote(other)
                    )
                } else {
                    format!(
                        "port {} is already used by udp listener {}",
                        l.port,
                        quote(other)
                    )
                };
                ctx.error(at, &t.path, msg);
            } else {
                ports.insert((tcp, l.port), (l.name.clone(), l.protocol));
            }
        }
        out.push(l);
    }
    out
}

/// One listener; `None` when its protocol or port is unusable (other checks still ran). Its
/// keys are read by concern, in this order: what it is, how it splits, its connections, its
/// retries, the keys of one protocol, its groups and rules, and how it ranks them.
fn listener(ctx: &mut Ctx<'_>, env: &Env<'_>, t: &Table<'_, '_>) -> Option<Listener> {
    t.check_keys(ctx, LISTENER_KEYS);
    let name = t.req_str(ctx, "name");
    if let Some(n) = name {
        check_name(ctx, n, &t.path, "listener");
    }
    let protocol = protocol(ctx, t);
    if !t.has("port") {
        t.missing(ctx, "port");
    }
    let port = t.port(ctx, "port").map(|p| p.v);
    let regions = listener_regions(ctx, env, t);
    let split = split_keys(ctx, env, t);
    let connections = connection_keys(ctx, t, protocol);
    let retries = retry_keys(ctx, t, protocol);

    // Keys that belong to some protocols only. Without a valid protocol they are not judged.
    let is = |f: fn(Protocol) -> bool| protocol.is_none_or(f);
    let http = is(Protocol::is_http);
    let mut sticky = None;
    if only_for(ctx, t, "sticky", http, HTTP) {
        sticky = sticky_cookie(ctx, t);
    }
    let mut udp_max_flows = Listener::DEFAULT_UDP_MAX_FLOWS;
    if only_for(
        ctx,
        t,
        "udp_max_flows",
        is(|p| p == Protocol::Udp),
        "udp listeners",
    ) {
        udp_max_flows = t
            .int(ctx, "udp_max_flows", 1, None)
            .map_or(udp_max_flows, |n| n.v as usize);
    }
    let tls = listener_tls(ctx, env, t, protocol);

    let groups = groups(ctx, env, t, protocol, &regions);
    check_groups(ctx, t, &groups, &split);
    let mut routes = Vec::new();
    if only_for(ctx, t, "route", http, HTTP) {
        routes = self::routes(ctx, t, &groups);
    }
    let statics = groups.iter().any(|g| g.group.priority.is_some());
    let (rtt_from, rank_margin, rank_dwell) = ranking_keys(ctx, t, statics);
    let mut first_byte_timeout = None;
    if only_for(
        ctx,
        t,
        "first_byte_timeout",
        is(|p| p == Protocol::Tcp),
        "tcp listeners",
    ) {
        first_byte_timeout = t.positive_duration(ctx, "first_byte_timeout").map(|d| d.v);
    }
    unseen_hangs(ctx, &groups, protocol, first_byte_timeout);
    let failback_ramp = failback_ramp(ctx, t);

    Some(Listener {
        name: name.map(|n| n.v.to_owned()).unwrap_or_default(),
        protocol: protocol?,
        port: port?,
        regions: regions.iter().map(|r| r.v.to_owned()).collect(),
        failover: split.failover,
        overprovisioning: split.overprovisioning,
        headroom: split.headroom,
        fail_open: split.fail_open,
        affinity: split.affinity,
        priority_by: split.priority_by,
        connect_timeout: connections.connect_timeout,
        idle_timeout: connections.idle_timeout,
        drain_timeout: connections.drain_timeout,
        max_connections: connections.max_connections,
        backlog: connections.backlog,
        proxy_protocol: connections.proxy_protocol,
        header_timeout: connections.header_timeout,
        upstream_timeout: connections.upstream_timeout,
        retry: retries.retry,
        tries: retries.tries,
        retry_timeout: retries.retry_timeout,
        retry_non_idempotent: retries.retry_non_idempotent,
        unhealthy_status: retries.unhealthy_status,
        sticky,
        udp_max_flows,
        tls,
        routes,
        groups: groups.into_iter().map(|g| g.group).collect(),
        rtt_from,
        rank_margin,
        rank_dwell,
        first_byte_timeout,
        failback_ramp,
    })
}

/// `protocol`, required.
fn protocol(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> Option<Protocol> {
    if !t.has("protocol") {
        t.missing(ctx, "protocol");
    }
    choice(
        ctx,
        t,
        "protocol",
        &[
            ("tcp", Protocol::Tcp),
            ("udp", Protocol::Udp),
            ("http", Protocol::Http),
            ("https", Protocol::Https),
        ],
    )
    .map(|p| p.v)
}

/// How a listener splits its traffic between its groups (docs/design.md §3).
struct SplitKeys {
    failover: FailoverMode,
    overprovisioning: f64,
    headroom: f64,
    fail_open: bool,
    affinity: Affinity,
    priority_by: PriorityBy,
    /// Where `priority_by` is written, when it is.
    priority_by_at: Option<usize>,
}

/// `failover` (and graceful's `overprovisioning`), `headroom`, `fail_open`, `affinity` and
/// `priority_by`, which needs a `[geoip]` database to place clients.
fn split_keys(ctx: &mut Ctx<'_>, env: &Env<'_>, t: &Table<'_, '_>) -> SplitKeys {
    let failover = choice(
        ctx,
        t,
        "failover",
        &[
            ("next-priority", FailoverMode::NextPriority),
            ("recompute", FailoverMode::Recompute),
            ("graceful", FailoverMode::Graceful),
        ],
    )
    .map_or(FailoverMode::default(), |f| f.v);
    let overprovisioning = overprovisioning(ctx, t, failover);
    let headroom = headroom(ctx, t);
    let fail_open = t.bool(ctx, "fail_open").unwrap_or(false);
    let affinity = choice(
        ctx,
        t,
        "affinity",
        &[("none", Affinity::None), ("source-ip", Affinity::SourceIp)],
    )
    .map_or(Affinity::default(), |a| a.v);
    let priority_by = choice(
        ctx,
        t,
        "priority_by",
        &[
            ("node", PriorityBy::Node),
            ("client-location", PriorityBy::ClientLocation),
        ],
    );
    if let Some(p) = priority_by
        && p.v == PriorityBy::ClientLocation
        && !env.geoip
    {
        let msg = "priority_by = \"client-location\" needs a client-location database: add \
                   [geoip] database = \"GeoLite2-City.mmdb\"";
        ctx.error(p.at, &t.path, msg);
    }
    SplitKeys {
        failover,
        overprovisioning,
        headroom,
        fail_open,
        affinity,
        priority_by: priority_by.map_or(PriorityBy::default(), |p| p.v),
        priority_by_at: priority_by.map(|p| p.at),
    }
}

/// A listener's connections: how long and how many, and what the protocol adds before the
/// first byte.
struct ConnectionKeys {
    connect_timeout: Duration,
    idle_timeout: Duration,
    drain_timeout: Duration,
    max_connections: u32,
    backlog: u32,
    proxy_protocol: Option<ProxyProtocol>,
    header_timeout: Duration,
    upstream_timeout: Duration,
}

/// `connect_timeout`, `idle_timeout` (its default the protocol's), `drain_timeout` and
/// `max_connections`; then those of some protocols only: `backlog` (TCP ports),
/// `proxy_protocol` (tcp), `header_timeout` and `upstream_timeout` (HTTP).
fn connection_keys(
    ctx: &mut Ctx<'_>,
    t: &Table<'_, '_>,
    protocol: Option<Protocol>,
) -> ConnectionKeys {
    let connect_timeout = t
        .positive_duration(ctx, "connect_timeout")
        .map_or(Listener::DEFAULT_CONNECT_TIMEOUT, |d| d.v);
    let default_idle = protocol.unwrap_or(Protocol::Tcp).default_idle_timeout();
    let idle_timeout = t
        .positive_duration(ctx, "idle_timeout")
        .map_or(default_idle, |d| d.v);
    let drain_timeout = t
        .duration(ctx, "drain_timeout")
        .map_or(Listener::DEFAULT_DRAIN_TIMEOUT, |d| d.v);
    let max_connections = t
        .u32(ctx, "max_connections", 1, None)
        .map_or(Listener::DEFAULT_MAX_CONNECTIONS, |n| n.v);

    let is = |f: fn(Protocol) -> bool| protocol.is_none_or(f);
    let http = is(Protocol::is_http);
    let mut backlog = Listener::DEFAULT_BACKLOG;
    if only_for(
        ctx,
        t,
        "backlog",
        is(|p| p != Protocol::Udp),
        "tcp/http/https listeners",
    ) {
        backlog = t
            .u32(ctx, "backlog", 1, Some(65_535))
            .map_or(backlog, |n| n.v);
    }
    let mut proxy_protocol = None;
    if only_for(
        ctx,
        t,
        "proxy_protocol",
        is(|p| p == Protocol::Tcp),
        "tcp listeners",
    ) && let Some(s) = t.str(ctx, "proxy_protocol")
    {
        if s.v == "v2" {
            proxy_protocol = Some(ProxyProtocol::V2);
        } else {
            let msg = format!(
                "proxy_protocol {} is not supported; the only version is \"v2\"",
                quote(s.v)
            );
            ctx.error(s.at, &t.path, msg);
        }
    }
    let mut header_timeout = Listener::DEFAULT_HEADER_TIMEOUT;
    if only_for(ctx, t, "header_timeout", http, HTTP) {
        header_timeout = t
            .positive_duration(ctx, "header_timeout")
            .map_or(header_timeout, |d| d.v);
    }
    let mut upstream_timeout = Listener::DEFAULT_UPSTREAM_TIMEOUT;
    if only_for(ctx, t, "upstream_timeout", http, HTTP) {
        upstream_timeout = t
            .positive_duration(ctx, "upstream_timeout")
            .map_or(upstream_timeout, |d| d.v);
    }
    ConnectionKeys {
        connect_timeout,
        idle_timeout,
        drain_timeout,
        max_connections,
        backlog,
        proxy_protocol,
        header_timeout,
        upstream_timeout,
    }
}

/// When a listener tries another endpoint, and (HTTP) which answers count as failures.
struct RetryKeys {
    retry: bool,
    tries: u32,
    retry_timeout: Duration,
    retry_non_idempotent: bool,
    unhealthy_status: StatusSet,
}

/// `retry`, `tries` and `retry_timeout` (every protocol: a UDP flow's set-up is retried as a
/// TCP connect is); `retry_non_idempotent` and `unhealthy_status` (HTTP).
fn retry_keys(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, protocol: Option<Protocol>) -> RetryKeys {
    let http = protocol.is_none_or(Protocol::is_http);
    let retry = t.bool(ctx, "retry").unwrap_or(Listener::DEFAULT_RETRY);
    let tries = t
        .u32(ctx, "tries", 1, Some(10))
        .map_or(Listener::DEFAULT_TRIES, |n| n.v);
    let retry_timeout = t
        .positive_duration(ctx, "retry_timeout")
        .map_or(Listener::DEFAULT_RETRY_TIMEOUT, |d| d.v);
    let mut retry_non_idempotent = false;
    if only_for(ctx, t, "retry_non_idempotent", http, HTTP) {
        retry_non_idempotent = t.bool(ctx, "retry_non_idempotent").unwrap_or(false);
    }
    let mut unhealthy_status = StatusSet::default();
    if only_for(ctx, t, "unhealthy_status", http, HTTP) {
        unhealthy_status = status_set(ctx, t, "unhealthy_status").unwrap_or_default();
    }
    RetryKeys {
        retry,
        tries,
        retry_timeout,
        retry_non_idempotent,
        unhealthy_status,
    }
}

/// `tls`: https listeners only, and required there.
fn listener_tls(
    ctx: &mut Ctx<'_>,
    env: &Env<'_>,
    t: &Table<'_, '_>,
    protocol: Option<Protocol>,
) -> Option<ServerTls> {
    let https = protocol.is_none_or(|p| p == Protocol::Https);
    if !only_for(ctx, t, "tls", https, "https listeners") {
        return None;
    }
    let tls = server_tls(ctx, env, t);
    if protocol == Some(Protocol::Https) && !t.has("tls") {
        let msg =
            "https listeners need tls = { certs = [{ cert = \"site.pem\", key = \"site.key\" }] }";
        ctx.error(t.at, &t.path, msg);
    }
    tls
}

/// What the groups as a whole must agree with: at most [`MAX_GROUPS`], no static priority
/// under `priority_by = "client-location"`, and a capacity somewhere when `headroom` is set.
fn check_groups(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, groups: &[GroupRead<'_>], split: &SplitKeys) {
    if groups.len() > MAX_GROUPS {
        let msg = format!(
            "{} groups; a listener holds at most {MAX_GROUPS}",
            groups.len()
        );
        ctx.error(t.at, &t.path, &msg);
    }
    if split.priority_by == PriorityBy::ClientLocation
        && let Some(at) = split.priority_by_at
        && groups.iter().any(|g| g.group.priority.is_some())
    {
        let msg = "priority_by = \"client-location\" ranks the groups by the client's distance \
                   to them, but the groups set a static priority: remove one or the other";
        ctx.error(at, &t.path, msg);
    }
    if let Some(at) = t.key_at("headroom")
        && !groups.iter().any(|g| g.group.has_capacity())
    {
        let msg = "headroom has no effect: no group of this listener has a capacity (set \
                   capacity on its groups or on all of a group's endpoints)";
        ctx.warn(at, &t.path, msg);
    }
}

/// `failback_ramp`: a duration up to [`Listener::MAX_FAILBACK_RAMP`].
fn failback_ramp(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> std::time::Duration {
    let Some(d) = t.duration(ctx, "failback_ramp") else {
        return Listener::DEFAULT_FAILBACK_RAMP;
    };
    if d.v > Listener::MAX_FAILBACK_RAMP {
        let msg = "\"failback_ramp\" is at most \"1h\" (a recovered group gets its whole \
                   share back within it); \"0s\" returns it at once";
        ctx.error(d.at, &t.path, msg);
        return Listener::DEFAULT_FAILBACK_RAMP;
    }
    d.v
}

/// `rtt_from`, `rank_margin` and `rank_dwell` (docs/design.md §3.1); a warning when static
/// priorities (`statics`) leave them nothing to do.
fn ranking_keys(
    ctx: &mut Ctx<'_>,
    t: &Table<'_, '_>,
    statics: bool,
) -> (RttFrom, RankMargin, Duration) {
    let rtt_from = choice(
        ctx,
        t,
        "rtt_from",
        &[("connect", RttFrom::Connect), ("check", RttFrom::Check)],
    )
    .map_or(RttFrom::default(), |r| r.v);
    let rank_margin = rank_margin(ctx, t);
    let rank_dwell = t
        .duration(ctx, "rank_dwell")
        .map_or(Listener::DEFAULT_RANK_DWELL, |d| d.v);
    if statics {
        for key in ["rtt_from", "rank_margin", "rank_dwell"] {
            if let Some(at) = t.key_at(key) {
                let msg = format!(
                    "{} has no effect: the groups set a static priority, so measured round \
                     trips never reorder them",
                    quote(key)
                );
                ctx.warn(at, &t.path, msg);
            }
        }
    }
    (rtt_from, rank_margin, rank_dwell)
}

/// `rank_margin`: `"20%"`, `"5ms"`, or a list of both (`["5ms", "20%"]`: the larger of the
/// two counts); at most one duration and one percentage.
fn rank_margin(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> RankMargin {
    let Some(v) = t.value("rank_margin") else {
        return RankMargin::DEFAULT;
    };
    let items: Vec<&crate::config::document::Value<'_>> = match v.get_ref().as_array() {
        Some(a) => a.iter().collect(),
        None => vec![v],
    };
    const FORMS: &str =
        "a duration like \"5ms\", a percentage like \"20%\", or both: [\"5ms\", \"20%\"]";
    let mut floor: Option<f64> = None;
    let mut fraction: Option<f64> = None;
    let mut ok = !items.is_empty();
    if items.is_empty() {
        ctx.error(
            v.span().start,
            &t.path,
            format!("\"rank_margin\" is empty; use {FORMS}"),
        );
    }
    for item in items {
        let at = item.span().start;
        let Some(s) = item.get_ref().as_str() else {
            ctx.error(at, &t.path, format!("\"rank_margin\" must be {FORMS}"));
            ok = false;
            continue;
        };
        let parsed = match s.strip_suffix('%') {
            Some(p) => match p.trim().parse::<f64>() {
                Ok(x) if x.is_finite() && (0.0..100.0).contains(&x) => (fraction.is_none())
                    .then(|| fraction = Some(x / 100.0))
                    .ok_or("twice"),
                _ => Err("a percentage from 0% to below 100%"),
            },
            None => match crate::config::parse_duration(s) {
                Ok(d) => (floor.is_none())
                    .then(|| floor = Some(d.as_secs_f64() * 1000.0))
                    .ok_or("twice"),
                Err(_) => Err("neither a duration nor a percentage"),
            },
        };
        if let Err(why) = parsed {
            let msg = if why == "twice" {
                format!(
                    "rank_margin {} repeats a kind: give at most one duration and one percentage",
                    quote(s)
                )
            } else {
                format!("rank_margin {} is {why}; use {FORMS}", quote(s))
            };
            ctx.error(at, &t.path, msg);
            ok = false;
        }
    }
    if !ok {
        return RankMargin::DEFAULT;
    }
    RankMargin {
        floor_ms: floor.unwrap_or(0.0),
        fraction: fraction.unwrap_or(0.0),
    }
}

/// `overprovisioning`: a number >= 1, a parameter of `failover = "graceful"` only.
fn overprovisioning(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, failover: FailoverMode) -> f64 {
    let default = Listener::DEFAULT_OVERPROVISIONING;
    let Some(n) = t.number(ctx, "overprovisioning") else {
        return default;
    };
    let (x, written) = n.v;
    if failover != FailoverMode::Graceful {
        let msg = format!(
            "overprovisioning is a parameter of failover = \"graceful\"; this listener's failover is {}",
            quote(failover.as_str())
        );
        ctx.error(n.at, &t.path, msg);
        return default;
    }
    if x.is_finite() && x >= 1.0 {
        x
    } else {
        let msg = format!(
            "overprovisioning {written} must be at least 1 (1.4: a whole group carries 1.4 × its share)"
        );
        ctx.error(n.at, &t.path, msg);
        default
    }
}

/// `headroom`: percent of capacity, above 0 and at most 100.
fn headroom(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> f64 {
    let Some(n) = t.number(ctx, "headroom") else {
        return Listener::DEFAULT_HEADROOM;
    };
    let (x, written) = n.v;
    if x > 0.0 && x <= 100.0 {
        x
    } else {
        let msg = format!(
            "headroom {written} is out of range: a percent of capacity, above 0 and at most 100"
        );
        ctx.error(n.at, &t.path, msg);
        Listener::DEFAULT_HEADROOM
    }
}

/// `regions = [...]`: non-empty, unique, each in the catalogue.
fn listener_regions<'t>(ctx: &mut Ctx<'_>, env: &Env<'_>, t: &Table<'t, '_>) -> Vec<At<&'t str>> {
    if !t.has("regions") {
        t.missing(ctx, "regions");
        return Vec::new();
    }
    let Some(items) = t.array(ctx, "regions") else {
        return Vec::new();
    };
    if items.is_empty() {
        let at = t.value_at("regions").unwrap_or(t.at);
        ctx.error(
            at,
            &t.path,
            "\"regions\" must name at least one acceleration region",
        );
    }
    let mut out: Vec<At<&str>> = Vec::new();
    for item in items {
        let Some(id) = as_str(ctx, item, &t.path, "each entry of \"regions\"") else {
            continue;
        };
        let id = At {
            v: id,
            at: item.span().start,
        };
        if out.iter().any(|r| r.v == id.v) {
            ctx.error(
                id.at,
                &t.path,
                format!("region {} is listed twice", quote(id.v)),
            );
            continue;
        }
        env.region(ctx, id, &t.path);
        out.push(id);
    }
    out
}

fn sticky_cookie(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> Option<Sticky> {
    let s = t.table(ctx, "sticky", t.path.clone())?;
    s.check_keys(ctx, &["cookie"]);
    let cookie = s.req_str(ctx, "cookie")?;
    if !syntax::is_cookie_name(cookie.v) {
        ctx.error(
            cookie.at,
            &s.path,
            format!("{} is not a valid cookie name", quote(cookie.v)),
        );
        return None;
    }
    Some(Sticky {
        cookie: cookie.v.to_owned(),
    })
}
