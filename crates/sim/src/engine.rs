//! Computes what every node would do, by calling the library's decision code — the same
//! `split` (priority, cascade, failover, group choice) and `balance` (endpoint choice, usable
//! endpoints) that the `gtd` node runs. Nothing here re-implements a decision.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use gtd_core::balance::{GroupBalancer, RequestKey};
use gtd_core::config::{Affinity, Config, FailoverMode, Listener, PriorityBy};
use gtd_core::geoip::Place;
use gtd_core::health::{Rules as CheckRules, Verdict};
use gtd_core::split::rules::{Match, describe};
use gtd_core::split::{self, ListenerPlan, Mode, Plan, RttSource};

use super::client::{client_explain, client_route};
use super::scenario::WhatIf;
use gtd_core::view::{Explain, RecoveringView};

/// One listener seen from every region asked for.
#[derive(Debug, Clone)]
pub(crate) struct ListenerReport {
    pub(crate) name: String,
    pub(crate) protocol: &'static str,
    pub(crate) port: u16,
    pub(crate) failover: &'static str,
    /// `failover = "graceful"`'s factor.
    pub(crate) overprovisioning: f64,
    pub(crate) fail_open: bool,
    pub(crate) affinity: &'static str,
    /// `node` or `client-location`.
    pub(crate) priority_by: &'static str,
    pub(crate) regions: Vec<RegionReport>,
}

/// One listener on one acceleration region's node.
#[derive(Debug, Clone)]
pub(crate) struct RegionReport {
    pub(crate) region: String,
    pub(crate) mode: Mode,
    /// Groups in priority order.
    pub(crate) groups: Vec<GroupRow>,
    /// `--verify N`: decisions driven and the largest |observed - expected|, points.
    pub(crate) verify: Option<(u64, f64)>,
    /// `--client`: the group and endpoint chosen for that client.
    pub(crate) route: Option<Route>,
    /// `--client`: why, as a node of this region's `GET /explain` says it.
    pub(crate) explain: Option<Explain>,
    /// Each forwarding rule's split (HTTP listeners with `[[listener.route]]`), config order.
    pub(crate) routes: Vec<RouteReport>,
}

/// The split of one forwarding rule on one node: the cascade over the rule's groups only.
#[derive(Debug, Clone)]
pub(crate) struct RouteReport {
    /// 1-based, config order.
    pub(crate) index: usize,
    /// What it matches, as written (`host …, path …, header …`).
    pub(crate) rule: String,
    pub(crate) mode: Mode,
    /// (group, share %) of the rule's groups, priority order.
    pub(crate) groups: Vec<(String, f64)>,
}

/// Where `--client` goes.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    /// The forwarding rule the request matched, on a listener that has rules.
    pub(crate) rule: Option<Match>,
    /// How the node picks this client's group: `rotation` (`affinity = "none"`: each decision
    /// takes the next group of the rotation over the shares, whoever the client is) or
    /// `source-ip` (the rendezvous hash of the address names one group).
    pub(crate) chosen_by: &'static str,
    /// The group, when every decision for this client goes to one: always under source-ip,
    /// under rotation only when a single group has the whole share.
    pub(crate) group: Option<String>,
    /// The endpoint in `group`, when one is named.
    pub(crate) endpoint: Option<String>,
    /// What named the endpoint: `client` (ip_hash, or hash on a key the client's address or
    /// `--key` gives: this client always lands there) or `rotation` (the method does not map
    /// clients: the pick a fresh node would make next); `None` when no endpoint is named.
    pub(crate) endpoint_by: Option<&'static str>,
    /// Every group this client's decisions can go to (share > 0), priority order, with the
    /// chance of each; empty when there is no route.
    pub(crate) groups: Vec<ClientGroup>,
    /// The listener's sticky cookie: requests carrying it go where it names.
    pub(crate) sticky: Option<String>,
    /// With `[geoip]`: where the database places the client (`None`: not in it).
    pub(crate) place: Option<Option<Place>>,
    /// What ordered the groups for this client: `node` (the node's ranking) or
    /// `client-location` (distance from the client's coordinates).
    pub(crate) priority_by: &'static str,
}

/// One group `--client` can land in.
#[derive(Debug, Clone)]
pub(crate) struct ClientGroup {
    pub(crate) name: String,
    /// Percent of this client's decisions that go to the group (its share under rotation, 100
    /// under source-ip).
    pub(crate) percent: f64,
    pub(crate) method: &'static str,
    /// The endpoint, when the client decides it.
    pub(crate) endpoint: Option<String>,
    /// What decides the endpoint: `client` (ip_hash, or hash on a key the client's address or
    /// `--key` gives: `endpoint` is named and takes all of `percent`), `request-key` (hash on a
    /// request key not given: pass `--key`) or `method` (the balancing method spreads the
    /// client's decisions); the last two give only `endpoints`' shares.
    pub(crate) endpoint_by: &'static str,
    /// The request's key (`--key`) is part of what decides the endpoint.
    pub(crate) keyed: bool,
    /// Each endpoint (config order) with the percent of this client's decisions it gets;
    /// `None` when that is load-dependent.
    pub(crate) endpoints: Vec<(String, Option<f64>)>,
}

/// One group's line.
#[derive(Debug, Clone)]
pub(crate) struct GroupRow {
    pub(crate) name: String,
    pub(crate) group_region: String,
    /// 1-based rank.
    pub(crate) priority: usize,
    pub(crate) rtt_ms: f64,
    pub(crate) rtt_source: RttSource,
    pub(crate) ratio: f64,
    pub(crate) healthy: bool,
    pub(crate) first_pass: f64,
    pub(crate) leftover: f64,
    pub(crate) share: f64,
    /// The share in parts, [first pass, leftover, spill], each at what the group keeps of it
    /// ([`gtd_core::split::Share::kept_parts`]): what a picture draws.
    pub(crate) parts: [f64; 3],
    /// `failover = "graceful"`: the usable part of the group's weight, what it keeps of what
    /// reaches it, and what groups above passed down to it (docs/design.md §3.3).
    pub(crate) graded: Option<Graded>,
    pub(crate) method: &'static str,
    pub(crate) observed: Option<f64>,
    pub(crate) share_before: Option<f64>,
    /// `--recovering`: taking its share back over `failback_ramp`; `share` is the share now.
    pub(crate) recovering: Option<RecoveringView>,
    pub(crate) endpoints: Vec<EndpointRow>,
}

/// A group's grading under `failover = "graceful"`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Graded {
    /// Weight of the usable endpoints over the weight of all, 0..=1.
    pub(crate) usable: f64,
    /// `min(1, overprovisioning × usable)`; 0 when unhealthy.
    pub(crate) keep: f64,
    /// Percent passed down to it by the groups above.
    pub(crate) spill: f64,
}

/// One endpoint's line.
#[derive(Debug, Clone)]
pub(crate) struct EndpointRow {
    pub(crate) address: String,
    pub(crate) weight: u32,
    /// `up`, `backup`, `down`, `disabled`, `drain` or `failing` (health checks fail).
    pub(crate) state: &'static str,
    /// Usable, as the node's balancer says (`up` or `backup`).
    pub(crate) usable: bool,
    /// Percent of the region's traffic; `None` when load-dependent.
    pub(crate) share: Option<f64>,
    pub(crate) observed: Option<f64>,
}

/// Options that add columns.
#[derive(Debug, Clone, Default)]
pub(crate) struct Asks {
    pub(crate) region: Option<String>,
    pub(crate) verify: Option<u64>,
    pub(crate) client: Option<IpAddr>,
    pub(crate) key: Option<String>,
    /// With `client`: the request's host, path and headers, for forwarding rules.
    pub(crate) host: Option<String>,
    pub(crate) path: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
}

/// The simulated instant: balancers are built at `now` and asked at `now`, so time-based
/// state (slow start, passive failures) is at its configured starting point.
pub(super) fn now() -> Instant {
    Instant::now()
}

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

/// Builds one group's balancer with the what-if's failing endpoints applied.
fn balancers(listener: &Listener, li: usize, what_if: &WhatIf, now: Instant) -> Vec<GroupBalancer> {
    listener
        .groups
        .iter()
        .enumerate()
        .map(|(gi, group)| {
            let b = GroupBalancer::new(group, listener.protocol, now);
            // Reproducible picks for `random`, `least_time` and `feedback` (--verify).
            b.set_seed(0x6774_6473_696d);
            for t in what_if
                .down
                .iter()
                .filter(|t| t.listener == li && t.group == gi)
            {
                for (ei, state) in b.endpoints().iter().enumerate() {
                    if t.endpoint.is_none_or(|e| e == ei) {
                        state.set_active_healthy(false, now);
                    }
                }
            }
            // Check results replayed through the verdict machine the node runs.
            if let Some(check) = &group.health_check {
                for (ei, state) in b.endpoints().iter().enumerate() {
                    if let Some(results) = what_if.checks.get(&(li, gi, ei)) {
                        let mut verdict = Verdict::new(CheckRules::from(check));
                        for &r in results {
                            verdict.observe(r);
                        }
                        if !verdict.is_healthy() {
                            state.set_active_healthy(false, now);
                        }
                    }
                }
            }
            b
        })
        .collect()
}

fn ratio_of(listener: &Listener, li: usize, gi: usize, what_if: &WhatIf) -> f64 {
    what_if
        .ratios
        .get(&(li, gi))
        .copied()
        .unwrap_or(listener.groups[gi].ratio)
}

/// The plan and balancers a node in `region` would run.
pub(super) fn node_state(
    config: &Config,
    li: usize,
    listener: &Listener,
    region: &str,
    what_if: &WhatIf,
    affinity: Affinity,
    now: Instant,
) -> (split::Ranking, Vec<GroupBalancer>, ListenerPlan) {
    let mut ranking = split::rank(listener, &config.catalog, region, |gi| {
        what_if.latency.get(&(region.to_owned(), li, gi)).copied()
    });
    if !ranking.source.contains(&RttSource::Static) {
        // A warmed-up node: it started from the catalogue's order and has moved a group only
        // where the measured time clears the hysteresis margin (docs/design.md §3.1).
        let catalogue = split::rank(listener, &config.catalog, region, |_| None);
        ranking.order =
            split::priority::warmed_order(&catalogue.rtt_ms, &ranking.rtt_ms, listener.rank_margin);
    }
    // A node's own order (its registry entry): first the groups it names, then the rest.
    if let Some(fixed) = what_if.order.get(&li) {
        let rest = ranking.order.iter().filter(|gi| !fixed.contains(gi));
        ranking.order = fixed.iter().chain(rest).copied().collect();
    }
    let balancers = balancers(listener, li, what_if, now);
    let facts = split::plan::facts(
        listener,
        |gi| ratio_of(listener, li, gi, what_if),
        &balancers,
        now,
    );
    let recovered = recovered(listener, li, what_if, &facts, now);
    let plan = ListenerPlan::build_ramped(listener, ranking.clone(), facts, affinity, recovered);
    (ranking, balancers, plan)
}

/// The moment `sim` pictures for listener `li`: `now` plus its longest `--recovering` time, so
/// that every recovery instant (the moment less its seconds) falls at or after `now`.
pub(super) fn moment(what_if: &WhatIf, li: usize, now: Instant) -> Instant {
    let longest = what_if
        .recovering
        .iter()
        .filter(|((l, _), _)| *l == li)
        .map(|(_, &secs)| secs)
        .fold(0.0, f64::max);
    now + Duration::from_secs_f64(longest)
}

/// When each group turned healthy, for `--recovering` (healthy groups only: one that is down
/// is not recovering).
fn recovered(
    listener: &Listener,
    li: usize,
    what_if: &WhatIf,
    facts: &[split::GroupFacts],
    now: Instant,
) -> Vec<Option<Instant>> {
    let at = moment(what_if, li, now);
    (0..listener.groups.len())
        .map(|gi| {
            let secs = what_if.recovering.get(&(li, gi))?;
            facts[gi]
                .healthy
                .then(|| at - Duration::from_secs_f64(*secs))
        })
        .collect()
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

/// A request as the simulator presents it to a balancer: the client address, and either the
/// `--key` given or a distinct key per decision, used for every key variable (`$request_uri`,
/// `$http_*`, `$cookie_*`).
pub(super) struct SimRequest {
    pub(super) ip: IpAddr,
    pub(super) key: Option<String>,
}

impl SimRequest {
    fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }
}

impl RequestKey for SimRequest {
    fn remote_ip(&self) -> IpAddr {
        self.ip
    }
    fn request_uri(&self) -> Option<&str> {
        self.key()
    }
    fn header(&self, _name: &str) -> Option<&str> {
        self.key()
    }
    fn cookie(&self, _name: &str) -> Option<&str> {
        self.key()
    }
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
