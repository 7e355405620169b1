//! A fresh node of one region as the simulator builds it: its ranking (warmed up, or the
//! order a registry entry names), its balancers with the what-if's failing endpoints and
//! replayed checks applied, and its plan; and the requests the simulator presents to those
//! balancers. The engine (every region's report) and `--client` (one client's route and
//! explanation) both start from it.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use gtd_core::balance::{GroupBalancer, RequestKey};
use gtd_core::config::{Affinity, Config, Listener};
use gtd_core::health::{Rules as CheckRules, Verdict};
use gtd_core::split::{self, ListenerPlan, RttSource};

use super::scenario::WhatIf;

/// The simulated instant: balancers are built at `now` and asked at `now`, so time-based
/// state (slow start, passive failures) is at its configured starting point.
pub(super) fn now() -> Instant {
    Instant::now()
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

pub(super) fn ratio_of(listener: &Listener, li: usize, gi: usize, what_if: &WhatIf) -> f64 {
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
