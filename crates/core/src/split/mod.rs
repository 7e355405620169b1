//! Between groups (docs/design.md §3), pure: no I/O, no clocks, no globals.
//!
//! - [`priority`]: the order a node ranks a listener's groups in (static, measured, catalogue;
//!   hysteresis for measured RTTs);
//! - [`ranker`]: a node's live ranking, fed measured RTTs through that hysteresis;
//! - [`cascade`]: the ratio cascade with failover and fail-open → each group's share
//!   ([`share`]: the facts it reads and the share it writes per group; [`graceful`]: the
//!   grading of partly healthy groups on top of it);
//! - [`rotation`] and [`rendezvous`]: the per-decision group choice over those shares;
//! - [`rules`]: the custom forwarding rules of HTTP listeners — which route (and so which
//!   groups) a request takes;
//! - [`Plan`]: all of the above for one listener on one node, built whenever a fact changes
//!   (health, RTT order, ratios) and read lock-free by every decision.

pub mod cascade;
pub mod failback;
pub mod graceful;
pub mod location;
pub mod plan;
pub mod priority;
pub mod ranker;
pub mod rendezvous;
pub mod rotation;
pub mod rules;
pub mod share;

use std::net::IpAddr;
use std::time::{Duration, Instant};

pub use cascade::{Mode, Policy, split, split_into};
pub use plan::{ListenerPlan, StickyTable};
pub use priority::{Hysteresis, RttSource};
pub use ranker::Ranker;
pub use rotation::Rotation;
pub use share::{GroupFacts, Share};

use crate::balance::Admit;
use crate::config::{Affinity, Listener};
use crate::regions::Catalog;

/// How a node ranks one listener's groups, with the RTT behind each rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranking {
    /// Config indices of the groups, highest priority first.
    pub order: Vec<usize>,
    /// RTT per group (config index), ms: measured, the catalogue's `[rtt]` entry, or estimated.
    pub rtt_ms: Vec<f64>,
    /// What decided each group's rank (config index).
    pub source: Vec<RttSource>,
}

/// Ranks `listener`'s groups as seen from a node in `region`, without hysteresis (the picture
/// for one set of RTTs): static priorities when configured, else `measured(i)` when it has a
/// value, else the catalogue's `[rtt]` entry for the pair, else its estimate.
pub fn rank(
    listener: &Listener,
    catalog: &Catalog,
    region: &str,
    measured: impl Fn(usize) -> Option<f64>,
) -> Ranking {
    let mut rtt_ms = Vec::with_capacity(listener.groups.len());
    let mut source = Vec::with_capacity(listener.groups.len());
    for (i, g) in listener.groups.iter().enumerate() {
        match measured(i) {
            Some(ms) => {
                rtt_ms.push(ms);
                source.push(RttSource::Measured);
            }
            None => match catalog.rtt_override(region, &g.region) {
                Some(ms) => {
                    rtt_ms.push(ms);
                    source.push(RttSource::Catalog);
                }
                None => {
                    rtt_ms.push(catalog.rtt_ms(region, &g.region).unwrap_or(f64::INFINITY));
                    source.push(RttSource::Estimated);
                }
            },
        }
    }
    let statics: Option<Vec<u32>> = listener
        .groups
        .iter()
        .map(|g| g.priority.as_ref().and_then(|p| p.for_region(region)))
        .collect();
    let order = match statics {
        Some(p) if !p.is_empty() => {
            source.fill(RttSource::Static);
            priority::order_by(&p)
        }
        _ => priority::order_by(&rtt_ms),
    };
    Ranking {
        order,
        rtt_ms,
        source,
    }
}

/// The split of one listener on one node, ready for decisions.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Config indices of the groups, highest priority first.
    pub order: Vec<usize>,
    /// The state the split is in.
    pub mode: Mode,
    /// Each group's share (config index), percent.
    pub shares: Vec<Share>,
    /// Groups a retry may still go to (config index): ratio > 0 and healthy (in fail-open: ratio > 0).
    pub eligible: Vec<bool>,
    chooser: Chooser,
    /// `failback_ramp`: the groups taking their share back, and the plans mixed meanwhile
    /// ([`failback`]); `None` when no group is recovering.
    ramp: Option<Box<failback::Ramp>>,
}

#[derive(Debug, Clone)]
enum Chooser {
    /// Smooth rotation over the shares in priority order (positions, not config indices).
    Rotation(Rotation),
    /// Rendezvous over the shares (config index) with each group's name hash.
    Rendezvous { shares: Vec<f64>, keys: Vec<u64> },
}

impl Plan {
    /// Goes on with `was`'s rotation when this plan rotates over the same groups in the same
    /// order with the same shares ([`Rotation::continue_from`]); rendezvous has no state.
    pub fn continue_from(&self, was: &Plan) {
        if let (Chooser::Rotation(now), Chooser::Rotation(then)) = (&self.chooser, &was.chooser)
            && self.order == was.order
        {
            now.continue_from(then);
        }
    }

    /// Builds the plan from the priority `order` (config indices), the facts per group (config
    /// index), the listener's policy and affinity, and the group names (config order; hashed for
    /// rendezvous).
    pub fn new<'a>(
        order: &[usize],
        facts: &[GroupFacts],
        policy: Policy,
        affinity: Affinity,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Plan {
        let ordered: Vec<GroupFacts> = order.iter().map(|&i| facts[i]).collect();
        let (mode, ordered_shares) = split(&ordered, policy);
        let mut shares = vec![Share::default(); facts.len()];
        for (pos, &i) in order.iter().enumerate() {
            shares[i] = ordered_shares[pos];
        }
        let eligible = facts
            .iter()
            .map(|f| f.ratio > 0.0 && (f.healthy || mode == Mode::FailOpen))
            .collect();
        let chooser = match affinity {
            Affinity::None => Chooser::Rotation(Rotation::new(
                &ordered_shares.iter().map(|s| s.total).collect::<Vec<_>>(),
            )),
            Affinity::SourceIp => Chooser::Rendezvous {
                shares: shares.iter().map(|s| s.total).collect(),
                keys: names.into_iter().map(rendezvous::group_key).collect(),
            },
        };
        Plan {
            order: order.to_vec(),
            mode,
            shares,
            eligible,
            chooser,
            ramp: None,
        }
    }

    /// [`Self::for_listener`] with the groups of `recovered` (config index → when it turned
    /// healthy; `None`: not recovering) taking their share back over `listener.failback_ramp`
    /// ([`failback`]). `shares` is the split once every ramp is over; [`Self::shares_at`] the
    /// split at a moment, which [`Self::choose_at`] follows.
    pub fn for_listener_ramped(
        listener: &Listener,
        order: &[usize],
        facts: &[GroupFacts],
        affinity: Affinity,
        recovered: &[Option<Instant>],
    ) -> Plan {
        let mut plan = Plan::for_listener(listener, order, facts, affinity);
        let ramp = listener.failback_ramp;
        // Earliest first; ties in priority order.
        let mut recovering: Vec<(usize, Instant)> = order
            .iter()
            .filter_map(|&i| {
                let at = recovered.get(i).copied().flatten()?;
                (facts[i].healthy && facts[i].ratio > 0.0).then_some((i, at))
            })
            .collect();
        recovering.sort_by_key(|&(_, at)| at);
        let held = |upto: &[(usize, Instant)]| -> Vec<GroupFacts> {
            let mut f = facts.to_vec();
            for &(i, _) in upto {
                f[i] = GroupFacts {
                    healthy: false,
                    fraction: 0.0,
                    ..f[i]
                };
            }
            f
        };
        // A group recovering while nothing healthy could take its traffic takes it at once.
        while !recovering.is_empty() {
            let s0 = Plan::for_listener(listener, order, &held(&recovering), affinity);
            if matches!(s0.mode, Mode::Cascade | Mode::Failover) {
                break;
            }
            recovering.remove(0);
        }
        if ramp.is_zero() || recovering.is_empty() {
            return plan;
        }
        let before = (0..recovering.len())
            .map(|j| Plan::for_listener(listener, order, &held(&recovering[j..]), affinity))
            .collect();
        plan.ramp = Some(Box::new(failback::Ramp::new(ramp, recovering, before)));
        plan
    }

    /// The groups taking their share back (config index), when each turned healthy, earliest
    /// first; empty when none is.
    pub fn recovering(&self) -> &[(usize, Instant)] {
        self.ramp.as_ref().map_or(&[], |r| &r.recovering)
    }

    /// The failback ramp this plan's recovering groups follow (`None`: none is recovering).
    pub fn failback_ramp(&self) -> Option<Duration> {
        self.ramp.as_ref().map(|r| r.ramp)
    }

    /// When the last recovering group has its whole share back (`None`: none is recovering).
    pub fn ramp_ends(&self) -> Option<Instant> {
        self.ramp.as_ref().map(|r| r.ends())
    }

    /// How far along its ramp group `group` (config index) is at `now`, 0..=1: 1 for a group
    /// that is not recovering.
    pub fn ramp_fraction(&self, group: usize, now: Instant) -> f64 {
        let Some(r) = &self.ramp else { return 1.0 };
        r.recovering
            .iter()
            .position(|&(i, _)| i == group)
            .map_or(1.0, |j| r.fraction(j, now))
    }

    /// Each group's share at `now` (config index): `shares` mixed with the plans of the groups
    /// still taking theirs back ([`failback::mix`], per part of the share); `shares` itself when
    /// none is. For `/status`, `/explain` and `sim`; allocates.
    pub fn shares_at(&self, now: Instant) -> Vec<Share> {
        let Some(r) = &self.ramp else {
            return self.shares.clone();
        };
        let fractions = r.fractions(now);
        let w = failback::weights(&fractions);
        let mut out: Vec<Share> = self
            .shares
            .iter()
            .map(|s| Share {
                keep: s.keep,
                ..Share::default()
            })
            .collect();
        let plans = r.before.iter().chain(std::iter::once(self));
        for (p, w) in plans.zip(w) {
            for (o, s) in out.iter_mut().zip(&p.shares) {
                o.first_pass += w * s.first_pass;
                o.leftover += w * s.leftover;
                o.spill += w * s.spill;
                o.total += w * s.total;
            }
        }
        out
    }

    /// [`Self::choose`] at `now`: while groups are taking their share back, first one of the
    /// mixture's plans (by its weight at `now`), then the group on that plan. Lock-free and
    /// allocation-free: the node's and `sim`'s decision.
    pub fn choose_at(&self, client: IpAddr, now: Instant) -> Option<usize> {
        let Some(r) = &self.ramp else {
            return self.choose(client);
        };
        let u = match &self.chooser {
            Chooser::Rotation(_) => r.next_u(),
            // The client's own number: it moves once, as the ramp passes it.
            Chooser::Rendezvous { .. } => failback::unit(crate::hash::mix(
                rendezvous::client_key(client) ^ 0x6661_696c_6261_636b,
            )),
        };
        match r.component(u, now) {
            j if j == r.before.len() => self.choose(client),
            j => r.before[j].choose(client),
        }
    }

    /// The plan of `listener` (its failover rule, fail-open and group names) for the priority
    /// `order` and the facts per group (config index), with `affinity` (the listener's own, or
    /// source-ip when `sim --client` asks where a client goes).
    pub fn for_listener(
        listener: &Listener,
        order: &[usize],
        facts: &[GroupFacts],
        affinity: Affinity,
    ) -> Plan {
        let policy = Policy {
            failover: listener.failover,
            fail_open: listener.fail_open,
            overprovisioning: listener.overprovisioning,
        };
        Plan::new(
            order,
            facts,
            policy,
            affinity,
            listener.groups.iter().map(|g| g.name.as_str()),
        )
    }

    /// The group (config index) for one new connection, flow or request from `client` once
    /// every failback ramp is over (decisions take [`Self::choose_at`]); `None` when the
    /// listener has no route. Lock-free and allocation-free.
    pub fn choose(&self, client: IpAddr) -> Option<usize> {
        match &self.chooser {
            Chooser::Rotation(r) => r.next().map(|pos| self.order[pos]),
            Chooser::Rendezvous { shares, keys } => {
                rendezvous::choose(shares, keys, rendezvous::client_key(client))
            }
        }
    }

    /// Under source-ip affinity, each group's rendezvous score for `client` (config index,
    /// groups with a share only): the highest is the group [`Self::choose`] gives it. `None`
    /// under rotation, where the client does not decide. For `/explain`; allocates.
    pub fn scores(&self, client: IpAddr) -> Option<Vec<(usize, f64)>> {
        match &self.chooser {
            Chooser::Rotation(_) => None,
            Chooser::Rendezvous { shares, keys } => {
                let c = rendezvous::client_key(client);
                Some(
                    shares
                        .iter()
                        .zip(keys)
                        .enumerate()
                        .filter_map(|(i, (&s, &k))| rendezvous::score(s, k, c).map(|x| (i, x)))
                        .collect(),
                )
            }
        }
    }

    /// Which endpoints decisions on this plan may pick: any admissible one in fail-open, where
    /// the listener routes as if every group were healthy; else the usable ones. The node and
    /// `sim` both ask this.
    pub fn admit(&self) -> Admit {
        if self.mode == Mode::FailOpen {
            Admit::IgnoringHealth
        } else {
            Admit::Usable
        }
    }

    /// Where a retry goes after the groups in `tried` failed: the highest-priority eligible
    /// group not yet tried.
    pub fn fallback(&self, tried: impl Fn(usize) -> bool) -> Option<usize> {
        self.order
            .iter()
            .copied()
            .find(|&i| self.eligible[i] && !tried(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use std::path::Path;

    const CATALOG: &str = r#"
[[region]]
id = "a"
name = "A"
lat = 0
lon = 0
[[region]]
id = "b"
name = "B"
lat = 0
lon = 10
[[region]]
id = "c"
name = "C"
lat = 0
lon = 20
[rtt]
"c/a" = 3.0
"#;

    fn ranking(groups: &str, measured: impl Fn(usize) -> Option<f64>) -> Ranking {
        let catalog = config::parse_catalog(CATALOG, Path::new("catalog.toml")).unwrap();
        let text = format!(
            "[[listener]]\nname = \"l\"\nprotocol = \"tcp\"\nport = 7000\nregions = [\"a\"]\n{groups}"
        );
        let cfg = config::parse(&text, Path::new("config.toml"), &catalog).unwrap();
        rank(&cfg.listeners[0], &cfg.catalog, "a", measured)
    }

    fn group(name: &str, region: &str, extra: &str) -> String {
        format!(
            "[[listener.group]]\nname = \"{name}\"\nregion = \"{region}\"\nratio = 50\n{extra}\n[[listener.group.endpoint]]\naddress = \"127.0.0.1:9000\"\n"
        )
    }

    #[test]
    fn each_rtt_says_where_it_came_from() {
        let groups = [
            group("gb", "b", ""),
            group("gc", "c", ""),
            group("ga", "a", ""),
        ]
        .concat();
        // gb: estimated from coordinates (10° ≈ 1112 km ≈ 17.7 ms); gc: the [rtt] entry (either
        // order of the pair); ga: the same region, 1 ms.
        let r = ranking(&groups, |_| None);
        assert_eq!(
            r.source,
            [
                RttSource::Estimated,
                RttSource::Catalog,
                RttSource::Estimated
            ]
        );
        assert_eq!(r.rtt_ms[1], 3.0);
        assert_eq!(r.rtt_ms[2], 1.0);
        assert_eq!(r.order, [2, 1, 0]);
        // A measured time wins over the [rtt] entry.
        let r = ranking(&groups, |i| (i == 1).then_some(0.5));
        assert_eq!(r.source[1], RttSource::Measured);
        assert_eq!(r.rtt_ms[1], 0.5);
        assert_eq!(r.order, [1, 2, 0]);
        // Static priority decides, whatever the times.
        let groups = [
            group("gb", "b", "priority = 1"),
            group("gc", "c", "priority = 2"),
            group("ga", "a", "priority = 3"),
        ]
        .concat();
        let r = ranking(&groups, |_| None);
        assert_eq!(r.source, [RttSource::Static; 3]);
        assert_eq!(r.order, [0, 1, 2]);
    }
}
