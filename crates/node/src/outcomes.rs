//! What an attempt's outcome does to its listener (docs/design.md §5): a failure counts towards
//! passive marking, an HTTP answer feeds outlier detection, and either may take the endpoint
//! out, which is logged, counted, put on the node's timeline ([`super::events`]) and
//! re-planned for. The timeline's other listener events are here too: a change of the plan's
//! mode (a failover, with the groups it moved traffic from and to) and of the measured order
//! (with the RTTs and samples that decided it, or a reorder held back), and every change of an
//! endpoint's or a group's state, both ways, with its cause ([`Out`], [`GroupHealth`]), seen by
//! the planner as it publishes the gauges. Each is recorded only when it happens.

use std::sync::atomic::Ordering;
use std::time::Instant;

use gtd_core::balance::EndpointState;
use gtd_core::balance::Pick;
use gtd_core::health::outlier::Answer;
use gtd_core::split::{ListenerPlan, Mode, Ranking};

use super::events::{Kind, Place};
use super::snapshot::{ListenerState, UNKNOWN};

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

/// Why an endpoint is out of rotation, or that it is not: what the timeline and the gauges say
/// of it. Failures come before a drain, so that a drained endpoint whose checks fail says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Out {
    /// In rotation.
    Serving = 0,
    /// Drained: a planned removal, not a failure.
    Drained = 1,
    /// Its active health checks fail.
    Checks = 2,
    /// Outlier detection ejected it.
    Ejected = 3,
    /// Passive failures marked it.
    Passive = 4,
    /// Disabled (the admin API, or `enabled = false`).
    Disabled = 5,
    /// `down` in the config.
    Down = 6,
}

impl Out {
    const ALL: [Out; 7] = [
        Out::Serving,
        Out::Drained,
        Out::Checks,
        Out::Ejected,
        Out::Passive,
        Out::Disabled,
        Out::Down,
    ];

    /// The state of `e` at `now`.
    pub(crate) fn of(e: &EndpointState, now: Instant) -> Out {
        if e.config().down {
            Out::Down
        } else if !e.is_enabled() {
            Out::Disabled
        } else if !e.is_active_healthy() {
            Out::Checks
        } else if e.is_ejected(now) {
            Out::Ejected
        } else if e.is_passively_down(now) {
            Out::Passive
        } else if e.is_draining() {
            Out::Drained
        } else {
            Out::Serving
        }
    }

    fn from_u8(v: u8) -> Option<Out> {
        Out::ALL.into_iter().find(|o| *o as u8 == v)
    }

    /// The kind of event a change into or out of it is.
    fn kind(self) -> Kind {
        match self {
            Out::Serving | Out::Disabled | Out::Down => Kind::Admin,
            Out::Drained => Kind::Drain,
            Out::Checks => Kind::Check,
            Out::Ejected => Kind::Ejection,
            Out::Passive => Kind::Passive,
        }
    }

    /// The cause, in words.
    fn cause(self) -> &'static str {
        match self {
            Out::Serving => "in rotation",
            Out::Drained => "drained (planned: no new traffic, what it has finishes)",
            Out::Checks => "its health checks fail",
            Out::Ejected => "ejected by outlier detection",
            Out::Passive => "marked by passive failures (max_fails within fail_timeout)",
            Out::Disabled => "disabled",
            Out::Down => "down in the config",
        }
    }
}

/// A group's state, as the timeline and `gtd_group_healthy`/`gtd_group_drained` say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum GroupHealth {
    Healthy = 0,
    /// Unhealthy only because of drains.
    Drained = 1,
    Unhealthy = 2,
}

impl ListenerState {
    /// Puts a change of endpoint `ei` of group `gi`'s state on the timeline, both ways, with
    /// its cause. A mark and an ejection have their own event, with their details, when they
    /// happen ([`Self::attempt_failed`], [`Self::answered`]); their end is recorded here.
    pub(crate) fn endpoint_state(&self, gi: usize, ei: usize, now: Instant) {
        let g = &self.groups[gi];
        let e = &g.balancer.endpoints()[ei];
        let out = Out::of(e, now);
        let was = g.endpoints[ei].state.swap(out as u8, Ordering::Relaxed);
        if was == out as u8 || was == UNKNOWN {
            return;
        }
        let Some(was) = Out::from_u8(was) else {
            return;
        };
        if matches!(out, Out::Passive | Out::Ejected) {
            return;
        }
        let (kind, message) = if out == Out::Serving {
            (
                was.kind(),
                format!("back in rotation (was out: {})", was.cause()),
            )
        } else {
            let mut why = out.cause().to_owned();
            if out == Out::Checks
                && let Some(last) = g.watches[ei].state().last
            {
                why = format!("{why}: {}", last.reason);
            }
            let before = if was == Out::Serving {
                String::new()
            } else {
                format!(" (was out: {})", was.cause())
            };
            (out.kind(), format!("out of rotation: {why}{before}"))
        };
        let endpoint = e.address().to_string();
        // A mark's or an ejection's end has its own log line already, with what ended it
        // (one line each way, as nginx logs them): this one would repeat it.
        if out == Out::Serving && matches!(was, Out::Passive | Out::Ejected) {
            tracing::debug!(listener = %self.cfg.name, group = %g.name, endpoint = %endpoint, "{message}");
        } else {
            tracing::info!(listener = %self.cfg.name, group = %g.name, endpoint = %endpoint, "{message}");
        }
        self.events
            .record(kind, self.at(gi, Some(&endpoint)), message);
    }

    /// Puts a change of group `gi`'s health on the timeline, both ways: unhealthy (with how
    /// many endpoints are usable and why the others are not), drained, healthy again.
    pub(crate) fn group_state(&self, gi: usize, healthy: bool, drained: bool, now: Instant) {
        let state = match (healthy, drained) {
            (true, _) => GroupHealth::Healthy,
            (false, true) => GroupHealth::Drained,
            (false, false) => GroupHealth::Unhealthy,
        };
        let g = &self.groups[gi];
        let was = g.state.swap(state as u8, Ordering::Relaxed);
        if was == state as u8 || was == UNKNOWN {
            return;
        }
        let endpoints = g.balancer.endpoints();
        let usable = endpoints.iter().filter(|e| e.is_usable(now)).count();
        let min = self.cfg.groups[gi].min_healthy;
        let mut causes: Vec<String> = Vec::new();
        for cause in Out::ALL.into_iter().skip(1) {
            let n = endpoints
                .iter()
                .filter(|e| Out::of(e, now) == cause)
                .count();
            if n > 0 {
                causes.push(format!("{n} {}", cause.cause()));
            }
        }
        let counts = format!(
            "{usable} of {} endpoints usable, min_healthy {min}{}",
            endpoints.len(),
            if causes.is_empty() {
                String::new()
            } else {
                format!("; {}", causes.join(", "))
            }
        );
        let message = match state {
            GroupHealth::Healthy => format!("healthy again: {counts}"),
            GroupHealth::Drained => {
                format!("drained, not failed: its traffic goes elsewhere as planned: {counts}")
            }
            GroupHealth::Unhealthy => format!("unhealthy: {counts}"),
        };
        self.events.record(Kind::Group, self.at(gi, None), message);
    }

    /// Puts a reorder held back on the timeline: the order in use, the one the RTTs call for
    /// now, and for how long they have differed.
    pub(crate) fn held(
        &self,
        in_use: &[usize],
        target: &[usize],
        now: &Ranking,
        differs_s: f64,
        dwell: std::time::Duration,
    ) {
        let names = |order: &[usize]| {
            order
                .iter()
                .map(|&gi| format!("{} {} ms", self.groups[gi].name, round(now.rtt_ms[gi])))
                .collect::<Vec<_>>()
                .join(", ")
        };
        self.events.record(
            Kind::Rank,
            Place {
                listener: Some(&self.cfg.name),
                group: None,
                endpoint: None,
            },
            format!(
                "reorder held back for {} s (rank_dwell {} s): the round trips keep changing the \
                 order they call for, groups within each other's margin trading places; in use \
                 {}, called for now {}",
                round(differs_s),
                dwell.as_secs_f64(),
                names(in_use),
                names(target)
            ),
        );
    }
}
