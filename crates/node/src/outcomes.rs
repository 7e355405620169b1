//! What an attempt's outcome does to its listener (docs/design.md §5): a failure counts towards
//! passive marking, an HTTP answer feeds outlier detection, and either may take the endpoint
//! out, which is logged, counted, put on the node's timeline ([`super::events`]) and
//! re-planned for. The timeline's other listener events are here too: a change of the plan's
//! mode (a failover, with the groups it moved traffic from and to) and of the measured order
//! (with the RTTs and samples that decided it). Each is recorded only when it happens.

use std::time::Instant;

use gtd_core::balance::Pick;
use gtd_core::health::outlier::Answer;
use gtd_core::split::{ListenerPlan, Mode, Ranking};

use super::events::{Kind, Place};
use super::snapshot::ListenerState;

impl ListenerState {
    /// An attempt on `pick` (an endpoint of group `group`) failed: counts the passive failure,
    /// warns when it takes the endpoint out of rotation (once per marking, as nginx's
    /// "upstream server temporarily disabled"), and re-plans, as the group may be down now.
    pub fn attempt_failed(&self, group: usize, pick: &Pick, cause: &dyn std::fmt::Display) {
        let now = Instant::now();
        if pick.failure(now) {
            self.groups[group].endpoints[pick.index()]
                .marks
                .increment(1);
            let e = pick.endpoint().config();
            tracing::warn!(
                listener = %self.cfg.name,
                group = %self.groups[group].name,
                endpoint = %pick.address(),
                %cause,
                max_fails = e.max_fails,
                fail_timeout_s = e.fail_timeout.as_secs_f64(),
                "endpoint out of rotation after max_fails failures; tried again after fail_timeout"
            );
            let endpoint = pick.address().to_string();
            self.events.record(
                Kind::Passive,
                self.at(group, Some(&endpoint)),
                format!(
                    "out of rotation after {} failure{} within fail_timeout ({} s): {cause}",
                    e.max_fails,
                    if e.max_fails == 1 { "" } else { "s" },
                    e.fail_timeout.as_secs_f64()
                ),
            );
        }
        self.replan(now);
    }

    /// An attempt on `pick` succeeded; says so when it ends a passive marking.
    pub fn attempt_succeeded(&self, group: usize, pick: &Pick, now: Instant) {
        if pick.success(now) {
            tracing::info!(
                listener = %self.cfg.name,
                group = %self.groups[group].name,
                endpoint = %pick.address(),
                "endpoint back in rotation: the attempt after fail_timeout succeeded"
            );
        }
    }

    /// An HTTP attempt on `pick` got `answer` (a status, or none): counted by outlier
    /// detection; an ejection is logged, counted and re-planned for, as the group may be
    /// degraded now.
    pub fn answered(&self, group: usize, pick: &Pick, answer: Answer, now: Instant) {
        let g = &self.groups[group];
        let Some(length) = g.balancer.observe_answer(pick, answer, now) else {
            return;
        };
        g.endpoints[pick.index()].ejections.increment(1);
        tracing::warn!(
            listener = %self.cfg.name,
            group = %g.name,
            endpoint = %pick.address(),
            ejection_s = length.as_secs_f64(),
            ejections = pick.endpoint().ejections(),
            "endpoint ejected by outlier detection: too many 5xx answers or gateway failures in a row"
        );
        let endpoint = pick.address().to_string();
        self.events.record(
            Kind::Ejection,
            self.at(group, Some(&endpoint)),
            format!(
                "ejected by outlier detection for {} s ({}): {} in a row",
                length.as_secs_f64(),
                ordinal(pick.endpoint().ejections()),
                match answer {
                    Answer::GatewayFailure => "gateway failures (502, 503, 504 or no answer)",
                    _ => "5xx answers",
                },
            ),
        );
        self.replan(now);
    }

    /// Puts a change of the plan's mode on the timeline: a failover names the group that lost
    /// the traffic and says where it went.
    pub(crate) fn mode_changed(&self, was: &ListenerPlan, next: &ListenerPlan) {
        let (from, to) = (was.plan.mode, next.plan.mode);
        let kind = match (from, to) {
            (_, Mode::Failover) => Kind::Failover,
            (Mode::Failover, Mode::Cascade) => Kind::Failback,
            _ => Kind::Mode,
        };
        // The group that went: the first in priority order that was healthy and is not now
        // (a failback: the first that is healthy again).
        let moved = next
            .ranking
            .order
            .iter()
            .copied()
            .find(|&gi| was.facts.get(gi).is_some_and(|f| f.healthy) != next.facts[gi].healthy);
        let shares = |p: &ListenerPlan| {
            let taking: Vec<String> = p
                .ranking
                .order
                .iter()
                .filter(|&&gi| p.plan.shares.get(gi).is_some_and(|s| s.total > 0.0))
                .map(|&gi| {
                    format!(
                        "{} {} %",
                        self.groups[gi].name,
                        round(p.plan.shares[gi].total)
                    )
                })
                .collect();
            if taking.is_empty() {
                "no group".to_owned()
            } else {
                taking.join(", ")
            }
        };
        let why = moved.map_or(String::new(), |gi| {
            let health = if next.facts[gi].healthy {
                "healthy again"
            } else {
                "unhealthy"
            };
            format!("{} {health}; ", self.groups[gi].name)
        });
        let group = moved.map(|gi| self.groups[gi].name.as_str());
        self.events.record(
            kind,
            Place {
                listener: Some(&self.cfg.name),
                group,
                endpoint: None,
            },
            format!(
                "{} -> {}: {why}traffic from {} to {}",
                from.as_str(),
                to.as_str(),
                shares(was),
                shares(next)
            ),
        );
    }

    /// Puts a change of the measured order on the timeline, with the RTT and the samples
    /// behind each group's rank.
    pub(crate) fn reranked(&self, before: &[usize], now: &Ranking, samples: &[u64]) {
        let names = |order: &[usize]| {
            order
                .iter()
                .map(|&gi| self.groups[gi].name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let rtts: Vec<String> = now
            .order
            .iter()
            .map(|&gi| {
                let ms = now.rtt_ms[gi];
                let rtt = if ms.is_finite() {
                    format!("{} ms", round(ms))
                } else {
                    "unknown".to_owned()
                };
                format!("{} {rtt} ({} samples)", self.groups[gi].name, samples[gi])
            })
            .collect();
        self.events.record(
            Kind::Rank,
            Place {
                listener: Some(&self.cfg.name),
                group: now.order.first().map(|&gi| self.groups[gi].name.as_str()),
                endpoint: None,
            },
            format!(
                "order {} (was {}): measured {}",
                names(&now.order),
                names(before),
                rtts.join(", ")
            ),
        );
    }

    /// Where an event of group `group` (and an endpoint of it) happened.
    fn at<'a>(&'a self, group: usize, endpoint: Option<&'a str>) -> Place<'a> {
        Place {
            listener: Some(&self.cfg.name),
            group: Some(&self.groups[group].name),
            endpoint,
        }
    }
}

/// `x` to two decimals, as the timeline prints shares and RTTs.
fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// `1st`, `2nd`, `3rd`, `4th` ... ejection.
fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix} ejection")
}
