//! The traffic-distribution-ratio cascade and group failover (docs/design.md §3.2, 3.3).
//!
//! Input: a listener's groups **in priority order** with their ratio and health. Output: each
//! group's share of the node's traffic (percent), split into the first pass and the leftover, and
//! the mode the listener is in. The arithmetic is `remaining * ratio / 100` in f64, exactly as
//! docs/design.md §3.2 writes it, so that `sim`, `/status` and every node print the same digits.
//! `failover = "graceful"` grades partly healthy groups on top of it ([`super::graceful`]).

use crate::config::FailoverMode;

use super::share::{GroupFacts, Share};

/// The listener-wide rules that shape the split.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// What to do when the top group is unhealthy.
    pub failover: FailoverMode,
    /// Route as if all groups were healthy when none is.
    pub fail_open: bool,
    /// `failover = "graceful"`: a group keeps `min(1, overprovisioning × fraction)` of the
    /// traffic that reaches it (>= 1; [`crate::config::Listener::DEFAULT_OVERPROVISIONING`]).
    pub overprovisioning: f64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            failover: FailoverMode::default(),
            fail_open: false,
            overprovisioning: crate::config::Listener::DEFAULT_OVERPROVISIONING,
        }
    }
}

/// The state a listener's split is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The highest-priority group with ratio > 0 is healthy: plain cascade.
    Cascade,
    /// The highest-priority group with ratio > 0 is unhealthy and some other group took over.
    Failover,
    /// No group with ratio > 0 is healthy and `fail_open` routes as if all were.
    FailOpen,
    /// Nothing can take traffic.
    NoRoute,
}

impl Mode {
    /// The name used by `sim` and `/status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Cascade => "cascade",
            Mode::Failover => "failover",
            Mode::FailOpen => "fail-open",
            Mode::NoRoute => "no-route",
        }
    }
}

/// Computes the split of `groups` (priority order) into `out` (same length) and returns the mode.
///
/// Allocation-free. Rules (docs/design.md §3.2–3.3):
/// - eligible = ratio > 0 and healthy; a ratio-0 group gets nothing, not even leftover;
/// - walk the eligible groups with `remaining = 100`: each takes `remaining * ratio / 100`;
///   the leftover is split equally among the eligible groups;
/// - if the highest-priority group with ratio > 0 is unhealthy, the mode is `Failover`: under
///   `next-priority` the highest-priority healthy group with ratio > 0 takes 100 (ratios ignored);
///   under `recompute` the cascade runs over the healthy rest;
///   under `graceful` partly healthy groups keep part of their cascade share and pass the
///   rest down ([`super::graceful`]); it is `Failover` only when the top group is unhealthy;
/// - if no group is eligible: `FailOpen` (cascade as if every ratio > 0 group were healthy) when
///   `fail_open`, else `NoRoute` with all zeros.
///
/// # Panics
/// If `out` is not as long as `groups`.
pub fn split_into(groups: &[GroupFacts], policy: Policy, out: &mut [Share]) -> Mode {
    assert_eq!(groups.len(), out.len(), "one share per group");
    out.fill(Share::default());

    let Some(top) = groups.iter().position(|g| g.ratio > 0.0) else {
        return Mode::NoRoute;
    };
    let any_eligible = groups.iter().any(|g| g.ratio > 0.0 && g.healthy);
    if !any_eligible {
        if policy.fail_open {
            cascade(groups, |g| g.ratio > 0.0, out);
            return Mode::FailOpen;
        }
        return Mode::NoRoute;
    }
    if policy.failover == FailoverMode::Graceful {
        // The cascade as if every group were whole, then each group keeps what its health
        // allows and passes the rest down.
        cascade(groups, |g| g.ratio > 0.0, out);
        if !super::graceful::grade(groups, policy.overprovisioning, out) {
            out.fill(Share::default());
            return Mode::NoRoute;
        }
        return if groups[top].healthy {
            Mode::Cascade
        } else {
            Mode::Failover
        };
    }
    if groups[top].healthy {
        cascade(groups, |g| g.ratio > 0.0 && g.healthy, out);
        return Mode::Cascade;
    }
    match policy.failover {
        FailoverMode::NextPriority => {
            let taker = groups
                .iter()
                .position(|g| g.ratio > 0.0 && g.healthy)
                .expect("an eligible group exists");
            out[taker] = Share {
                first_pass: 100.0,
                total: 100.0,
                ..Share::default()
            };
        }
        FailoverMode::Recompute => cascade(groups, |g| g.ratio > 0.0 && g.healthy, out),
        FailoverMode::Graceful => unreachable!("graded above"),
    }
    Mode::Failover
}

/// Walks the groups for which `eligible` holds, in order, and shares the leftover equally.
fn cascade(groups: &[GroupFacts], eligible: impl Fn(&GroupFacts) -> bool, out: &mut [Share]) {
    let mut remaining = 100.0_f64;
    let mut count = 0_usize;
    for (g, share) in groups.iter().zip(out.iter_mut()) {
        if eligible(g) {
            // `remaining * 100 / 100` can miss `remaining` by an ulp; a full ratio takes all of it.
            let take = if g.ratio >= 100.0 {
                remaining
            } else {
                remaining * g.ratio / 100.0
            };
            remaining = (remaining - take).max(0.0);
            share.first_pass = take;
            count += 1;
        }
    }
    let each = remaining / count as f64;
    for (g, share) in groups.iter().zip(out.iter_mut()) {
        if eligible(g) {
            share.leftover = each;
            share.total = share.first_pass + each;
        }
    }
}

/// Convenience for callers off the hot path: the split as a new vector.
pub fn split(groups: &[GroupFacts], policy: Policy) -> (Mode, Vec<Share>) {
    let mut out = vec![Share::default(); groups.len()];
    let mode = split_into(groups, policy, &mut out);
    (mode, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(ratio: f64, healthy: bool) -> GroupFacts {
        GroupFacts::new(ratio, healthy)
    }

    fn totals(groups: &[GroupFacts], policy: Policy) -> (Mode, Vec<f64>) {
        let (mode, shares) = split(groups, policy);
        (mode, shares.iter().map(|s| s.total).collect())
    }

    #[test]
    fn source_worked_examples() {
        let p = Policy::default();
        assert_eq!(
            totals(&[g(100.0, true), g(100.0, true)], p),
            (Mode::Cascade, vec![100.0, 0.0])
        );
        assert_eq!(
            totals(&[g(50.0, true), g(100.0, true)], p),
            (Mode::Cascade, vec![50.0, 50.0])
        );
        assert_eq!(
            totals(&[g(30.0, true), g(100.0, true)], p),
            (Mode::Cascade, vec![30.0, 70.0])
        );
        let (_, s) = split(&[g(50.0, true), g(50.0, true)], p);
        assert_eq!(
            (s[0].first_pass, s[0].leftover, s[0].total),
            (50.0, 12.5, 62.5)
        );
        assert_eq!(
            (s[1].first_pass, s[1].leftover, s[1].total),
            (25.0, 12.5, 37.5)
        );
    }

    #[test]
    fn leftover_rule_with_one_percent() {
        // Beijing 50 first, Shanghai 1: 50; 0.5; leftover 49.5 split → 74.75 / 25.25.
        // Seen from Shanghai (Shanghai first at 1, Beijing 50): 1; 49.5; leftover 49.5 → 25.75 / 74.25.
        let (_, s) = totals(&[g(1.0, true), g(50.0, true)], Policy::default());
        assert_eq!(s, vec![25.75, 74.25]);
    }

    #[test]
    fn ratio_zero_gets_nothing_not_even_leftover() {
        let (_, s) = totals(
            &[g(50.0, true), g(0.0, true), g(50.0, true)],
            Policy::default(),
        );
        assert_eq!(s, vec![62.5, 0.0, 37.5]);
    }

    #[test]
    fn next_priority_failover_ignores_ratios() {
        let p = Policy {
            failover: FailoverMode::NextPriority,
            ..Policy::default()
        };
        let (mode, s) = split(&[g(50.0, false), g(30.0, true), g(50.0, true)], p);
        assert_eq!(mode, Mode::Failover);
        assert_eq!(
            s[1],
            Share {
                first_pass: 100.0,
                total: 100.0,
                ..Share::default()
            }
        );
        assert_eq!(s[0].total + s[2].total, 0.0);
    }

    #[test]
    fn recompute_failover_cascades_over_the_rest() {
        let p = Policy {
            failover: FailoverMode::Recompute,
            ..Policy::default()
        };
        let (mode, s) = totals(&[g(50.0, false), g(30.0, true), g(50.0, true)], p);
        assert_eq!(mode, Mode::Failover);
        // 30; 50% of 70 = 35; leftover 35 → 17.5 each.
        assert_eq!(s, vec![0.0, 47.5, 52.5]);
    }

    #[test]
    fn unhealthy_lower_group_is_skipped_without_failover() {
        let (mode, s) = totals(
            &[g(50.0, true), g(50.0, false), g(50.0, true)],
            Policy::default(),
        );
        assert_eq!(mode, Mode::Cascade);
        assert_eq!(s, vec![62.5, 0.0, 37.5]);
    }

    #[test]
    fn top_is_first_group_with_positive_ratio() {
        // A ratio-0 group above an unhealthy one does not make it "not top".
        let (mode, _) = totals(
            &[g(0.0, true), g(50.0, false), g(50.0, true)],
            Policy::default(),
        );
        assert_eq!(mode, Mode::Failover);
        let (mode, _) = totals(
            &[g(0.0, false), g(50.0, true), g(50.0, true)],
            Policy::default(),
        );
        assert_eq!(mode, Mode::Cascade);
    }

    #[test]
    fn fail_open_and_no_route() {
        let groups = [g(50.0, false), g(50.0, false), g(0.0, true)];
        assert_eq!(
            totals(&groups, Policy::default()),
            (Mode::NoRoute, vec![0.0, 0.0, 0.0])
        );
        let open = Policy {
            fail_open: true,
            ..Policy::default()
        };
        assert_eq!(
            totals(&groups, open),
            (Mode::FailOpen, vec![62.5, 37.5, 0.0])
        );
        assert_eq!(totals(&[g(0.0, true)], open), (Mode::NoRoute, vec![0.0]));
        assert_eq!(totals(&[], open), (Mode::NoRoute, vec![]));
    }
}
