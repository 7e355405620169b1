//! `failover = "graceful"`: a partly healthy group keeps part of its share (docs/design.md §3.3).
//!
//! The all-or-nothing cascade keeps a group at its full share until it has fewer than
//! `min_healthy` usable endpoints, then gives it nothing. Graceful degradation grades it in
//! between, as Envoy grades its priority levels: a group whose usable endpoints carry the part
//! `f` of its weight keeps `k = min(1, overprovisioning × f)` of the traffic that reaches it, and
//! passes the rest down the priority order. The overprovisioning factor (default 1.4, Envoy's)
//! says how much headroom a whole group is assumed to have: with 1.4 a group of five can lose one
//! endpoint (f = 0.8, k = 1.12 → 1) before it sheds anything.
//!
//! The rule, over the groups in priority order, starting from the cascade `S_i` computed as if
//! every group with ratio > 0 were whole (first pass + leftover), and a spill `c = 0`:
//!
//! ```text
//! k_i    = 0 if ratio_i = 0 or the group is unhealthy (fewer than min_healthy usable),
//!          else min(1, overprovisioning × f_i)
//! kept_i = k_i × (S_i + c)            what the group keeps of its share and what reached it
//! c      = (1 − k_i) × (S_i + c)      passed down to the next group
//! share_i = kept_i × 100 / Σ kept     scaled up only when c > 0 after the last group
//! ```
//!
//! With every group whole, every `k_i` is 1, nothing spills and the shares are the cascade's,
//! digit for digit. Shares are monotone in health: raising `f_i` never lowers group i's share and
//! never raises another's. Computed once per plan, never per decision.

use super::share::{GroupFacts, Share};

/// The part of what reaches a healthy group that it keeps: `min(1, overprovisioning ×
/// fraction)`.
pub fn keep(fraction: f64, overprovisioning: f64) -> f64 {
    (overprovisioning * fraction).clamp(0.0, 1.0)
}

/// Grades `out` (the cascade over every group with ratio > 0, priority order, as `groups`) in
/// place: fills `spill` and `keep` and replaces `total` with the graceful share. Returns false
/// when no group keeps anything (the caller's no-route). Allocation-free.
pub(super) fn grade(groups: &[GroupFacts], overprovisioning: f64, out: &mut [Share]) -> bool {
    let mut spill = 0.0_f64;
    let mut kept_sum = 0.0_f64;
    for (g, s) in groups.iter().zip(out.iter_mut()) {
        if g.ratio <= 0.0 {
            // Drained: no share, takes nothing that spills either.
            continue;
        }
        let k = if g.healthy {
            keep(g.fraction, overprovisioning)
        } else {
            0.0
        };
        let offered = s.first_pass + s.leftover + spill;
        // A whole group keeps exactly what reaches it (no `× 1.0` rounding, nothing spills).
        let kept = if k >= 1.0 { offered } else { offered * k };
        s.spill = spill;
        s.keep = k;
        s.total = kept;
        spill = if k >= 1.0 { 0.0 } else { offered - kept };
        kept_sum += kept;
    }
    if kept_sum <= 0.0 {
        return false;
    }
    if spill > 0.0 {
        // What the last groups could not keep goes back to all, in proportion to what each kept.
        let scale = 100.0 / kept_sum;
        for s in out.iter_mut() {
            s.total *= scale;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use crate::config::FailoverMode;
    use crate::split::{GroupFacts, Mode, Policy, split};

    fn g(ratio: f64, fraction: f64) -> GroupFacts {
        GroupFacts {
            ratio,
            healthy: fraction > 0.0,
            fraction,
        }
    }

    fn graceful() -> Policy {
        Policy {
            failover: FailoverMode::Graceful,
            ..Policy::default()
        }
    }

    fn totals(groups: &[GroupFacts]) -> (Mode, Vec<f64>) {
        let (mode, s) = split(groups, graceful());
        (mode, s.iter().map(|s| s.total).collect())
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
    }

    #[test]
    fn whole_groups_are_exactly_the_cascade() {
        let cascade = split(&[g(50.0, 1.0), g(50.0, 1.0)], Policy::default()).1;
        let (mode, graded) = split(&[g(50.0, 1.0), g(50.0, 1.0)], graceful());
        assert_eq!(mode, Mode::Cascade);
        for (c, s) in cascade.iter().zip(&graded) {
            assert_eq!(c.total, s.total);
            assert_eq!((c.first_pass, c.leftover), (s.first_pass, s.leftover));
            assert_eq!((s.spill, s.keep), (0.0, 1.0));
        }
    }

    #[test]
    fn docs_worked_examples() {
        // docs/design.md §3.3, web from Beijing (Beijing 62.5, Shanghai 37.5 in the cascade);
        // Beijing's endpoints weigh 2 and 1.
        // 9002 (weight 1) failing: f = 2/3, k = 0.9333; Beijing keeps 58.33, 4.17 spills.
        let (_, t) = totals(&[g(50.0, 2.0 / 3.0), g(50.0, 1.0)]);
        assert!(close(
            &t,
            &[62.5 * 1.4 * 2.0 / 3.0, 100.0 - 62.5 * 1.4 * 2.0 / 3.0]
        ));
        // 9001 (weight 2) failing: f = 1/3, k = 0.4667: 29.17 / 70.83.
        let (_, t) = totals(&[g(50.0, 1.0 / 3.0), g(50.0, 1.0)]);
        assert!(close(&t, &[29.166666666666668, 70.83333333333333]));
        // From Shanghai (Shanghai 62.5 first, Beijing 37.5), 9001 failing: Beijing keeps
        // 37.5 × 0.4667 = 17.5, 20 falls past the end; scaled by 100 / 80.
        let (_, t) = totals(&[g(50.0, 1.0), g(50.0, 1.0 / 3.0)]);
        assert!(close(&t, &[78.125, 21.875]));
        // Three groups 50/50/100 (cascade 50/25/25), four endpoints each.
        // One of Beijing's four down: f = 0.75, k = 1.05 → 1: nothing moves.
        let (_, t) = totals(&[g(50.0, 0.75), g(50.0, 1.0), g(100.0, 1.0)]);
        assert_eq!(t, [50.0, 25.0, 25.0]);
        // Two down: k = 0.7: Beijing 35, Shanghai 25 + 15 = 40, Tokyo 25.
        let (_, t) = totals(&[g(50.0, 0.5), g(50.0, 1.0), g(100.0, 1.0)]);
        assert!(close(&t, &[35.0, 40.0, 25.0]));
        // And Shanghai at half too: it keeps 0.7 × 40 = 28, Tokyo 25 + 12 = 37.
        let (_, t) = totals(&[g(50.0, 0.5), g(50.0, 0.5), g(100.0, 1.0)]);
        assert!(close(&t, &[35.0, 28.0, 37.0]));
        // Beijing gone (below min_healthy): its 50 spills whole to Shanghai: 0 / 75 / 25.
        let (mode, t) = totals(&[g(50.0, 0.0), g(50.0, 1.0), g(100.0, 1.0)]);
        assert_eq!(mode, Mode::Failover);
        assert!(close(&t, &[0.0, 75.0, 25.0]));
    }

    #[test]
    fn unhealthy_keeps_nothing_whatever_its_fraction() {
        // min_healthy = 3 of 4, two usable: unhealthy though half the weight is up.
        let groups = [
            GroupFacts {
                ratio: 50.0,
                healthy: false,
                fraction: 0.5,
            },
            g(50.0, 1.0),
        ];
        let (mode, t) = totals(&groups);
        assert_eq!(mode, Mode::Failover);
        assert_eq!(t, [0.0, 100.0]);
    }

    #[test]
    fn ratio_zero_takes_no_spill() {
        let (_, t) = totals(&[g(50.0, 0.5), g(0.0, 1.0), g(50.0, 1.0)]);
        // Cascade 62.5 / 0 / 37.5; Beijing keeps 43.75, 18.75 passes the drained group.
        assert!(close(&t, &[43.75, 0.0, 56.25]));
    }

    #[test]
    fn nothing_usable_is_no_route_or_fail_open() {
        let down = [g(50.0, 0.0), g(50.0, 0.0)];
        assert_eq!(totals(&down), (Mode::NoRoute, vec![0.0, 0.0]));
        let open = Policy {
            fail_open: true,
            ..graceful()
        };
        let (mode, s) = split(&down, open);
        assert_eq!(mode, Mode::FailOpen);
        assert_eq!(s.iter().map(|s| s.total).collect::<Vec<_>>(), [62.5, 37.5]);
    }

    #[test]
    fn the_factor_is_configurable() {
        let p = Policy {
            overprovisioning: 1.0,
            ..graceful()
        };
        let (_, s) = split(&[g(100.0, 0.75), g(100.0, 1.0)], p);
        assert!(close(&[s[0].total, s[1].total], &[75.0, 25.0]));
        assert_eq!(s[1].spill, 25.0);
        assert_eq!(s[0].keep, 0.75);
    }
}
