//! Priority: the order in which a node ranks a listener's groups (docs/design.md §3.1).
//!
//! A static `priority` (1 first) wins when configured. Otherwise groups are ranked by RTT from
//! the node, lowest first: measured (EWMA of health-probe samples) when there is a sample, else
//! the catalogue's time (its `[rtt]` entry for the pair, else the estimate). Ties keep config
//! order. That first ranking, before any sample, is the *base* order.
//!
//! Measured times move a group only past a group ranked above it in the base order that it beats
//! by more than `rank_margin` (default max(5 ms, 20 %) of that group's time): [`target_order`].
//! The order is a function of the averages now, never of the order reached so far, so a reorder
//! whose cause is gone (a blip) reverts, and a reload cannot leave one standing. A node adopts a
//! new target only when it has been the target at every round for `rank_dwell` (default 120 s)
//! and at least [`OVERTAKE_SAMPLES`] rounds in a row: that keeps jitter from flipping traffic
//! between regions, and spaces two changes at least `rank_dwell` apart. [`warmed_order`] is
//! where that settles for steady measurements.

use std::time::{Duration, Instant};

use crate::config::RankMargin;

/// Where a group's RTT (and so its rank) came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RttSource {
    /// The group's static `priority` decides the rank.
    Static,
    /// Measured by probes from this node (in `sim`, given with `--latency`).
    Measured,
    /// The region catalogue's `[rtt]` entry for the pair (node region, group region): a time
    /// the operator wrote down, not one this node measured.
    Catalog,
    /// The region catalogue's estimate from the two regions' coordinates (docs/design.md §2).
    Estimated,
}

impl RttSource {
    /// The name used by `/status`.
    pub fn as_str(self) -> &'static str {
        match self {
            RttSource::Static => "static",
            RttSource::Measured => "measured",
            RttSource::Catalog => "catalog",
            RttSource::Estimated => "estimated",
        }
    }
}

/// Margin a challenger must beat the incumbent by, in ms, under the default `rank_margin`:
/// max(5 ms, 20 % of the incumbent).
pub fn overtake_margin_ms(incumbent_ms: f64) -> f64 {
    RankMargin::DEFAULT.ms(incumbent_ms)
}

/// Consecutive rounds a new order must be the target before it is adopted.
pub const OVERTAKE_SAMPLES: u8 = 3;

/// Group indices sorted by a key, lowest first, ties in index (config) order.
pub fn order_by<K: PartialOrd>(keys: &[K]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| {
        keys[a]
            .partial_cmp(&keys[b])
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    order
}

/// The order the RTTs call for now: the `base` order, in which a group moves up past the one
/// above it while it is measured faster than that one by more than `margin` (both measured:
/// `measured(i)`; a measured time never passes, nor is passed by, a catalogue time, since the
/// two are not the same kind of number), until no such pair is left. Ends: each move puts a
/// pair into strict RTT order, so the pairs out of RTT order fall each time.
pub fn target_order(
    base: &[usize],
    rtt_ms: &[f64],
    measured: impl Fn(usize) -> bool,
    margin: RankMargin,
) -> Vec<usize> {
    let mut order = base.to_vec();
    let mut moved = true;
    while moved {
        moved = false;
        for p in 0..order.len().saturating_sub(1) {
            let (a, b) = (order[p], order[p + 1]);
            if measured(a) && measured(b) && rtt_ms[b] < rtt_ms[a] - margin.ms(rtt_ms[a]) {
                order.swap(p, p + 1);
                moved = true;
            }
        }
    }
    order
}

/// A new order waiting to be adopted.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    /// The order the RTTs call for.
    pub order: Vec<usize>,
    /// Consecutive rounds it has been the target.
    pub rounds: u8,
    /// The first of those rounds.
    pub since: Instant,
}

/// An adopted change of order, and the RTTs behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// When.
    pub at: Instant,
    /// The order before.
    pub from: Vec<usize>,
    /// The order after.
    pub to: Vec<usize>,
    /// Each group's RTT at the round that adopted it (config index), ms.
    pub rtt_ms: Vec<f64>,
}

/// Ranking of measured RTTs with hysteresis: a small, pure state machine fed one round of
/// samples at a time (one RTT per group, index = config order) with the time of the round.
#[derive(Debug, Clone, PartialEq)]
pub struct Hysteresis {
    base: Vec<usize>,
    order: Vec<usize>,
    margin: RankMargin,
    dwell: Duration,
    pending: Option<Pending>,
    last: Option<Change>,
}

impl Hysteresis {
    /// Starts from the order the initial RTTs give (estimates before any sample), with the
    /// listener's `rank_margin` and `rank_dwell`.
    pub fn new(initial_rtt_ms: &[f64], margin: RankMargin, dwell: Duration) -> Hysteresis {
        let base = order_by(initial_rtt_ms);
        Hysteresis {
            order: base.clone(),
            base,
            margin,
            dwell,
            pending: None,
            last: None,
        }
    }

    /// The current order (group indices, first = highest priority).
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// The order waiting to be adopted, if any.
    pub fn pending(&self) -> Option<&Pending> {
        self.pending.as_ref()
    }

    /// The last change adopted, if any.
    pub fn last_change(&self) -> Option<&Change> {
        self.last.as_ref()
    }

    /// The margin and dwell it applies.
    pub fn settings(&self) -> (RankMargin, Duration) {
        (self.margin, self.dwell)
    }

    /// The same state under a reload's `base` order (new estimates), margin and dwell: the
    /// order reached, the pending one and the last change carry over; the next round's target
    /// is computed from the new base, so nothing the old config decided stays by itself.
    pub fn reloaded(mut self, next: Hysteresis) -> Hysteresis {
        self.base = next.base;
        self.margin = next.margin;
        self.dwell = next.dwell;
        self
    }

    /// Feeds one round of RTTs, every one measured; returns true when the order changed.
    pub fn observe(&mut self, rtt_ms: &[f64], now: Instant) -> bool {
        self.observe_measured(rtt_ms, |_| true, now)
    }

    /// Feeds one round of RTTs at `now`, of which only those `measured(i)` says are
    /// measurements (the others are catalogue times standing in). Returns true when the order
    /// changed.
    pub fn observe_measured(
        &mut self,
        rtt_ms: &[f64],
        measured: impl Fn(usize) -> bool,
        now: Instant,
    ) -> bool {
        assert_eq!(rtt_ms.len(), self.order.len(), "one RTT per group");
        let target = target_order(&self.base, rtt_ms, measured, self.margin);
        if target == self.order {
            self.pending = None;
            return false;
        }
        let p = match self.pending.take() {
            Some(mut p) if p.order == target => {
                p.rounds = p.rounds.saturating_add(1);
                p
            }
            _ => Pending {
                order: target,
                rounds: 1,
                since: now,
            },
        };
        if p.rounds >= OVERTAKE_SAMPLES && now.saturating_duration_since(p.since) >= self.dwell {
            let from = std::mem::replace(&mut self.order, p.order);
            self.last = Some(Change {
                at: now,
                from,
                to: self.order.clone(),
                rtt_ms: rtt_ms.to_vec(),
            });
            return true;
        }
        self.pending = Some(p);
        false
    }
}

/// The order after a whole history of sample rounds (one a second, no dwell), starting from
/// `initial` RTTs, under the default margin.
pub fn rank_history(initial_rtt_ms: &[f64], history: &[Vec<f64>]) -> Vec<usize> {
    let mut h = Hysteresis::new(initial_rtt_ms, RankMargin::DEFAULT, Duration::ZERO);
    let t0 = Instant::now();
    for (i, round) in history.iter().enumerate() {
        h.observe(round, t0 + Duration::from_secs(i as u64));
    }
    h.order().to_vec()
}

/// The order a node settles on once its RTTs have been steady for a while (what `sim --latency`
/// shows): the [`target_order`] of `measured_ms` (one RTT per group, config order; for a group
/// the caller did not measure, its catalogue time, as if measured at it: a warmed-up node has
/// measured every group it probes) from the base order of `estimated_ms` (the catalogue's
/// times, before any sample). So a group moves past another only where it is faster by more
/// than `margin`; a smaller difference keeps the catalogue order.
pub fn warmed_order(estimated_ms: &[f64], measured_ms: &[f64], margin: RankMargin) -> Vec<usize> {
    assert_eq!(estimated_ms.len(), measured_ms.len(), "one RTT per group");
    target_order(&order_by(estimated_ms), measured_ms, |_| true, margin)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hysteresis under the default margin and no dwell, as before both were settings.
    fn plain(initial: &[f64]) -> Hysteresis {
        Hysteresis::new(initial, RankMargin::DEFAULT, Duration::ZERO)
    }

    fn warmed(est: &[f64], meas: &[f64]) -> Vec<usize> {
        warmed_order(est, meas, RankMargin::DEFAULT)
    }

    #[test]
    fn a_measured_time_does_not_pass_a_catalogue_time() {
        // b (catalogue 30 ms) and c (catalogue 60 ms, measured first at 0.1 ms): c waits for b
        // to be measured; then both at about 0.1 ms, neither passes the other.
        let mut h = plain(&[1.0, 30.0, 60.0]);
        let t0 = Instant::now();
        let mut t = 0;
        let mut at = || {
            t += 1;
            t0 + Duration::from_secs(t)
        };
        for _ in 0..10 {
            h.observe_measured(&[1.0, 30.0, 0.1], |i| i != 1, at());
        }
        assert_eq!(h.order(), [0, 1, 2]);
        for _ in 0..10 {
            h.observe_measured(&[1.0, 0.15, 0.1], |_| true, at());
        }
        assert_eq!(h.order(), [0, 1, 2]);
        // A clear win among measured groups still moves them.
        for _ in 0..3 {
            h.observe_measured(&[40.0, 0.15, 0.1], |_| true, at());
        }
        assert_eq!(h.order(), [1, 2, 0]);
    }

    #[test]
    fn ties_keep_config_order() {
        assert_eq!(order_by(&[3.0, 1.0, 3.0, 1.0]), vec![1, 3, 0, 2]);
        assert_eq!(order_by(&[2_u32, 1, 3]), vec![1, 0, 2]);
    }

    #[test]
    fn overtaking_needs_three_consecutive_clear_wins() {
        // Start: a (10 ms) before b (20 ms). Then b measures 4 ms: wins by 6 > max(5, 2).
        let init = [10.0, 20.0];
        assert_eq!(
            rank_history(&init, &[vec![10.0, 4.0], vec![10.0, 4.0]]),
            vec![0, 1]
        );
        assert_eq!(rank_history(&init, &vec![vec![10.0, 4.0]; 3]), vec![1, 0]);
        // A broken streak starts over.
        let broken = [
            vec![10.0, 4.0],
            vec![10.0, 4.0],
            vec![10.0, 9.0],
            vec![10.0, 4.0],
        ];
        assert_eq!(rank_history(&init, &broken), vec![0, 1]);
    }

    #[test]
    fn small_or_relative_gains_do_not_flip() {
        // 100 ms vs 85 ms: 15 ms faster but under 20 % (20 ms): no change, ever.
        assert_eq!(
            rank_history(&[100.0, 200.0], &vec![vec![100.0, 85.0]; 10]),
            vec![0, 1]
        );
        // 100 vs 79: beyond 20 % → overtakes after 3.
        assert_eq!(
            rank_history(&[100.0, 200.0], &vec![vec![100.0, 79.0]; 3]),
            vec![1, 0]
        );
        // 10 vs 6: 4 ms is under the 5 ms floor.
        assert_eq!(
            rank_history(&[10.0, 20.0], &vec![vec![10.0, 6.0]; 10]),
            vec![0, 1]
        );
    }

    #[test]
    fn warmed_order_keeps_the_estimate_under_the_margin() {
        // Estimated 17.0 and 17.5 ms; measured 17.0 and 16.5: the second is faster, but by
        // 0.5 ms, under the 5 ms floor. Sorting by the measurement would flip them; a node does not.
        let (est, meas) = ([17.0, 17.5], [17.0, 16.5]);
        assert_eq!(order_by(&meas), vec![1, 0]);
        assert_eq!(warmed(&est, &meas), vec![0, 1]);
        // 100 vs 85: 15 ms faster but under 20 % of 100.
        assert_eq!(warmed(&[100.0, 120.0], &[100.0, 85.0]), vec![0, 1]);
    }

    #[test]
    fn warmed_order_follows_a_big_difference() {
        // Estimated 10 and 20 ms; measured 60 and 10: 50 ms apart, far past max(5, 12).
        assert_eq!(warmed(&[10.0, 20.0], &[60.0, 10.0]), vec![1, 0]);
        // Several places at once, the same as the node's Hysteresis after 3 rounds.
        let (est, meas) = ([50.0, 60.0, 70.0], [50.0, 60.0, 5.0]);
        assert_eq!(warmed(&est, &meas), vec![2, 0, 1]);
        assert_eq!(
            warmed(&est, &meas),
            rank_history(&est, &vec![meas.to_vec(); 3])
        );
    }

    #[test]
    fn warmed_order_ties_keep_config_order() {
        assert_eq!(warmed(&[5.0, 5.0, 5.0], &[5.0, 5.0, 5.0]), vec![0, 1, 2]);
        // Estimated apart, measured equal: no one clears the margin, the estimate's order stays.
        assert_eq!(warmed(&[9.0, 3.0, 6.0], &[5.0, 5.0, 5.0]), vec![1, 2, 0]);
        assert_eq!(warmed(&[], &[]), Vec::<usize>::new());
    }

    #[test]
    fn warmed_order_unmeasured_groups_keep_their_estimate() {
        // Groups 0 and 1 unmeasured (their estimates, 1 and 17 ms); group 2 (estimated 40 ms)
        // measures 0.5 ms: it passes group 1 (by 16.5 > 5) but not the 1 ms local group 0.
        let est = [1.0, 17.0, 40.0];
        assert_eq!(warmed(&est, &[1.0, 17.0, 0.5]), vec![0, 2, 1]);
        // With nothing measured, the catalogue order.
        assert_eq!(warmed(&est, &est), order_by(&est));
    }

    #[test]
    fn a_fast_newcomer_climbs_past_several() {
        let rounds = vec![vec![50.0, 60.0, 5.0]; 3];
        assert_eq!(rank_history(&[50.0, 60.0, 70.0], &rounds), vec![2, 0, 1]);
    }
}
