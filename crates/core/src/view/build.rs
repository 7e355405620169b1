//! The views built from the plan and the live facts: pure functions of plain inputs that the
//! node gathers (planned shares, the ranking, each endpoint's balancer state and checks, the
//! served counters, names), with the time to read the states at as an argument.

use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime};

use super::{
    ChangeView, CheckView, DnsView, EndpointView, ErrorsView, GroupView, ListenerView, PendingView,
    RankView, RecoveringView, RouteShare, RouteView,
};
use crate::balance::EndpointState;
use crate::balance::errors::ErrorCounts;
use crate::config::{Endpoint, FailoverMode, Host, Listener};
use crate::health::verdict::Verdict;
use crate::split::Ranking;
use crate::split::plan::ListenerPlan;
use crate::split::ranker::GroupRank;
use crate::split::rules::describe;

/// What the node knows of one listener now.
pub struct ListenerFacts<'a> {
    /// Its config (names expanded into their addresses).
    pub config: &'a Listener,
    /// The plan decisions follow.
    pub planned: &'a ListenerPlan,
    /// The latest ranking (its RTTs may be newer than the plan's).
    pub ranked: &'a Ranking,
    /// Per group, config index: what is not in the plan.
    pub groups: Vec<GroupLive<'a>>,
}

/// What the node knows of one group beyond the plan.
pub struct GroupLive<'a> {
    /// Why it has its rank.
    pub rank: GroupRank,
    /// Its endpoints, config order.
    pub endpoints: Vec<EndpointFacts<'a>>,
}

/// What the node knows of one endpoint now.
pub struct EndpointFacts<'a> {
    /// Its config.
    pub config: &'a Endpoint,
    /// Its balancer state (read at the `now` given to the builder).
    pub state: &'a EndpointState,
    /// Its active checks, when its group has them.
    pub check: Option<CheckFacts<'a>>,
    /// Average RTT of its checks or probes, ms.
    pub rtt_ms: Option<f64>,
    /// Requests or connections it served.
    pub served: u64,
    /// A name with no address: why (the resolver's error, or none yet).
    pub dns_error: Option<&'a str>,
}

/// An endpoint's active checks.
pub struct CheckFacts<'a> {
    /// The verdict machine.
    pub verdict: &'a Verdict,
    /// The last check, when there was one.
    pub last: Option<LastCheck<'a>>,
}

/// The last check of an endpoint.
pub struct LastCheck<'a> {
    /// How it ended (`passed`, `failed`, ...).
    pub result: &'a str,
    /// Why.
    pub reason: &'a str,
    /// When.
    pub at: SystemTime,
}

/// A time in ms to the microsecond (measured RTTs carry float noise beyond it).
fn micros(ms: f64) -> f64 {
    (ms * 1000.0).round() / 1000.0
}

/// `ms`, or `None` when it is not a number JSON can hold (an unknown RTT is infinite).
fn finite(ms: f64) -> Option<f64> {
    ms.is_finite().then_some(ms)
}

/// `t` in milliseconds since the Unix epoch (0 before it).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl ListenerView {
    /// The listener's view at `now`: its groups in the plan's priority order.
    pub fn build(facts: &ListenerFacts<'_>, now: Instant) -> ListenerView {
        let l = facts.config;
        let planned = facts.planned;
        // The split at this moment: recovering groups are part way back (`failback_ramp`).
        let shares = planned.plan.shares_at(now);
        let groups = planned
            .ranking
            .order
            .iter()
            .enumerate()
            .map(|(pos, &gi)| {
                let cfg = &l.groups[gi];
                let share = shares[gi];
                let fact = planned.facts[gi];
                let live = &facts.groups[gi];
                let endpoints: Vec<EndpointView> = live
                    .endpoints
                    .iter()
                    .map(|e| EndpointView::build(e, now))
                    .collect();
                let graceful = l.failover == FailoverMode::Graceful;
                GroupView {
                    name: cfg.name.clone(),
                    priority: pos + 1,
                    rtt_ms: finite(micros(facts.ranked.rtt_ms[gi])),
                    rtt_source: facts.ranked.source[gi].as_str().to_owned(),
                    region: cfg.region.clone(),
                    ratio: fact.ratio,
                    healthy: fact.healthy,
                    drained: !fact.healthy
                        && crate::balance::drained_only(
                            live.endpoints.iter().map(|e| e.state),
                            cfg.min_healthy,
                            now,
                        ),
                    first_pass: share.first_pass,
                    leftover: share.leftover,
                    share: share.total,
                    method: cfg.balance.name().to_owned(),
                    observed: None,
                    // failover = "graceful": what the share was graded by, as `sim` prints it.
                    usable: graceful.then_some(fact.fraction),
                    keep: graceful.then_some(share.keep),
                    spill: graceful.then_some(share.spill),
                    share_before: None,
                    delta: None,
                    recovering: RecoveringView::of(&planned.plan, gi, now),
                    parts: Some(share.kept_parts()),
                    served: Some(endpoints.iter().map(|e| e.served).sum()),
                    rank: Some(RankView::from(&live.rank)),
                    endpoints,
                }
            })
            .collect();
        // Each forwarding rule's split, as `sim` prints it.
        let routes = l
            .routes
            .iter()
            .enumerate()
            .map(|(i, rule)| RouteView {
                rule: i + 1,
                matches: describe(rule),
                mode: planned.routes[i].mode.as_str().to_owned(),
                groups: planned
                    .rule_split_at(l, i, now)
                    .into_iter()
                    .map(|(gi, share)| RouteShare {
                        name: l.groups[gi].name.clone(),
                        share,
                    })
                    .collect(),
            })
            .collect();
        ListenerView {
            name: l.name.clone(),
            protocol: l.protocol.as_str().to_owned(),
            port: l.port,
            mode: planned.plan.mode.as_str().to_owned(),
            failover: l.failover.as_str().to_owned(),
            fail_open: l.fail_open,
            groups,
            routes,
        }
    }
}

impl RecoveringView {
    /// Group `group` (config index) of `plan` at `now`, when it is taking its share back.
    pub fn of(plan: &crate::split::Plan, group: usize, now: Instant) -> Option<RecoveringView> {
        let &(_, at) = plan.recovering().iter().find(|&&(i, _)| i == group)?;
        let ramp = plan.failback_ramp()?;
        let fraction = plan.ramp_fraction(group, now);
        (fraction < 1.0).then(|| RecoveringView {
            since_s: now.saturating_duration_since(at).as_secs_f64(),
            ramp_s: ramp.as_secs_f64(),
            fraction,
            full_share: plan.shares[group].total,
        })
    }
}

impl EndpointView {
    /// The endpoint's view at `now`.
    pub fn build(e: &EndpointFacts<'_>, now: Instant) -> EndpointView {
        let state = e.state;
        let check = e.check.as_ref().map(|c| CheckView {
            healthy: c.verdict.is_healthy(),
            result: c.last.as_ref().map(|l| l.result.to_owned()),
            reason: c.last.as_ref().map(|l| l.reason.to_owned()),
            at_unix_ms: c.last.as_ref().map(|l| unix_ms(l.at)),
            passes_needed: c.verdict.passes_needed(),
            checks: c.verdict.checks(),
        });
        // A name's address, or the name with none (and why).
        let (id, resolved, dns_error) = match &e.config.address.host {
            Host::Resolved { ip, .. } => (
                Some(e.config.address.id().to_string()),
                Some(Some(ip.to_string())),
                None,
            ),
            Host::Name(_) => (
                None,
                Some(None),
                Some(e.dns_error.unwrap_or("not resolved yet").to_owned()),
            ),
            Host::Ip(_) => (None, None, None),
        };
        EndpointView {
            address: e.config.address.text.to_string(),
            healthy: state.is_usable(now),
            enabled: state.is_enabled(),
            active: state.active(),
            weight: e.config.weight,
            fails: state.fails(),
            passive_down: state.is_passively_down(now),
            ejected: state.is_ejected(now),
            ejections: state.ejections(),
            ejected_for_s: state.ejected_for(now).map(|d| d.as_secs_f64()),
            check,
            rtt_ms: e.rtt_ms.map(micros),
            backup: e.config.backup,
            down: e.config.down,
            drain: state.is_draining(),
            // The node names a fleet drain's source over this (the config it applied them to
            // says `drain` alike).
            drained_by: if e.config.drain {
                Some(super::DrainView::config())
            } else {
                state.is_admin_drained().then(super::DrainView::admin)
            },
            served: e.served,
            errors: ErrorsView::from(state.recent_errors(now)),
            id,
            resolved,
            dns_error,
        }
    }
}

impl From<ErrorCounts> for ErrorsView {
    fn from(c: ErrorCounts) -> ErrorsView {
        ErrorsView {
            status_5xx: c.status_5xx,
            timeouts: c.timeouts,
            connect: c.connect,
            total: c.total(),
        }
    }
}

impl From<&GroupRank> for RankView {
    fn from(r: &GroupRank) -> RankView {
        RankView {
            position: r.position,
            source: r.source.to_owned(),
            rtt_from: r.rtt_from.to_owned(),
            rtt_ms: finite(r.rtt_ms),
            samples: r.samples,
            margin_ms: r.margin_ms.and_then(finite),
            pending: r.pending.as_ref().map(|p| PendingView {
                position: p.position,
                rounds: p.rounds,
                of: p.of,
                held_s: p.held_s,
                dwell_s: p.dwell_s,
            }),
            last_change: r.last_change.as_ref().map(|c| ChangeView {
                ago_s: c.ago_s,
                from_position: c.from_position,
                to_position: c.to_position,
                rtt_ms: c
                    .rtt_ms
                    .iter()
                    .map(|(name, ms)| (name.clone(), finite(*ms)))
                    .collect(),
            }),
        }
    }
}

impl DnsView {
    /// A name's view: its state (`resolved`, `stale`, `unresolved`), addresses, TTL, last
    /// error, when it was looked up and how long until the next lookup.
    pub fn build(
        state: &str,
        addresses: &[IpAddr],
        ttl: Option<Duration>,
        error: Option<&str>,
        checked_at: SystemTime,
        next_in: Duration,
    ) -> DnsView {
        DnsView {
            state: state.to_owned(),
            addresses: addresses.iter().map(ToString::to_string).collect(),
            ttl_s: ttl.map(|t| t.as_secs_f64()),
            error: error.map(str::to_owned),
            checked_at_unix_ms: unix_ms(checked_at),
            next_lookup_in_s: next_in.as_secs_f64(),
        }
    }
}
