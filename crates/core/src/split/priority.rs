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
//! whose cause is gone (a blip) reverts, and a reload cannot leave one standing.
//!
//! The dwell holds each pair of groups, not the whole order: a node puts group x before group y
//! once the target has put x before y at every round for `rank_dwell` (default 120 s) and at
//! least [`OVERTAKE_SAMPLES`] rounds in a row; pairs the target keeps swapping stay as they are.
//! That keeps jitter from flipping traffic between regions and spaces two changes of a pair at
//! least `rank_dwell` apart, while a justified move (a far group falling behind two near ones)
//! is not held back by the two near ones trading places at every round: when the whole order
//! had to be the same for the dwell, each such trade restarted it, and the far group kept the
//! top for good. A reorder the target has called for without a break for longer than the dwell
//! is *held* ([`Hysteresis::held`]): `/status`, `gtd_rank_pending_seconds` and the timeline say
//! so. [`warmed_order`] is where that settles for steady measurements.

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
    /// The first round of the streak in which the target (whichever order it was) differed
    /// from the order in use; a round where they agree, or a change adopted, ends the streak.
    pub differs_since: Instant,
    /// Rounds in that streak.
    pub differs_rounds: u32,
}

/// How long the target has put one group of a pair before the other.
#[derive(Debug, Clone, Copy, PartialEq)]
struct PairStreak {
    /// The lower-indexed group of the pair goes first.
    first: bool,
    /// Consecutive rounds.
    rounds: u8,
    /// The first of them.
    since: Instant,
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
    /// Each pair's streak (pair (i, j), i < j, at `i * n + j`); `None` before the first round.
    pairs: Vec<Option<PairStreak>>,
}

impl Hysteresis {
    /// Starts from the order the initial RTTs give (estimates before any sample), with the
    /// listener's `rank_margin` and `rank_dwell`.
    pub fn new(initial_rtt_ms: &[f64], margin: RankMargin, dwell: Duration) -> Hysteresis {
        let base = order_by(initial_rtt_ms);
        let n = base.len();
        Hysteresis {
            order: base.clone(),
            base,
            margin,
            dwell,
            pending: None,
            last: None,
            pairs: vec![None; n * n],
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

    /// The reorder held back at `now`: the pending one, when the target has differed from the
    /// order in use at every round for longer than the dwell (and [`OVERTAKE_SAMPLES`] rounds):
    /// what a steady target would have had adopted by then. Its part that holds (a pair that
    /// kept its place in the target) was adopted; what is left keeps changing.
    pub fn held(&self, now: Instant) -> Option<&Pending> {
        self.pending.as_ref().filter(|p| {
            p.differs_rounds > u32::from(OVERTAKE_SAMPLES)
                && now.saturating_duration_since(p.differs_since) > self.dwell
        })
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
        self.follow_pairs(&target, now);
        if target == self.order {
            self.pending = None;
            return false;
        }
        let mut p = match self.pending.take() {
            Some(mut p) if p.order == target => {
                p.rounds = p.rounds.saturating_add(1);
                p
            }
            Some(p) => Pending {
                order: target,
                rounds: 1,
                since: now,
                ..p
            },
            None => Pending {
                order: target,
                rounds: 1,
                since: now,
                differs_since: now,
                differs_rounds: 0,
            },
        };
        p.differs_rounds = p.differs_rounds.saturating_add(1);
        let next = self.settled_order(now);
        if next != self.order {
            let from = std::mem::replace(&mut self.order, next);
            self.last = Some(Change {
                at: now,
                from,
                to: self.order.clone(),
                rtt_ms: rtt_ms.to_vec(),
            });
            // What is left of the target (pairs it keeps swapping) starts a new streak.
            self.pending = (p.order != self.order).then_some(Pending {
                differs_since: now,
                differs_rounds: 0,
                ..p
            });
            return true;
        }
        self.pending = Some(p);
        false
    }

    /// Extends or restarts each pair's streak with `target`'s order of the pair.
    fn follow_pairs(&mut self, target: &[usize], now: Instant) {
        let n = target.len();
        for (p, &i) in target.iter().enumerate() {
            for &j in &target[p + 1..] {
                // i goes before j.
                let (lo, hi, first) = if i < j { (i, j, true) } else { (j, i, false) };
                let streak = &mut self.pairs[lo * n + hi];
                *streak = Some(match *streak {
                    Some(s) if s.first == first => PairStreak {
                        rounds: s.rounds.saturating_add(1),
                        ..s
                    },
                    _ => PairStreak {
                        first,
                        rounds: 1,
                        since: now,
                    },
                });
            }
        }
    }

    /// Whether the target has put `x` before `y` long enough to be adopted.
    fn settled_before(&self, x: usize, y: usize, now: Instant) -> bool {
        let n = self.order.len();
        let (lo, hi) = (x.min(y), x.max(y));
        self.pairs[lo * n + hi].is_some_and(|s| {
            s.first == (x < y)
                && s.rounds >= OVERTAKE_SAMPLES
                && now.saturating_duration_since(s.since) >= self.dwell
        })
    }

    /// The order in use with every settled pair in the target's order: of the groups left, the
    /// first in the order in use that no group left must precede. Settled pairs all agree with
    /// the latest target (a total order), so there is always one; when the order in use breaks
    /// no settled pair, it is the order in use.
    fn settled_order(&self, now: Instant) -> Vec<usize> {
        let mut left = self.order.clone();
        let mut out = Vec::with_capacity(left.len());
        while !left.is_empty() {
            let k = (0..left.len())
                .find(|&k| {
                    !left
                        .iter()
                        .any(|&h| h != left[k] && self.settled_before(h, left[k], now))
                })
                .unwrap_or(0);
            out.push(left.remove(k));
        }
        out
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

    /// Four groups, the order in use 0 1 2 3 (3 the local, far one, first by the catalogue at
    /// 0, here put last). The target alternates between `0 1 2 3`'s neighbours `1 0 2 3` and
    /// `0 2 1 3` (group 1 jitters across both its neighbours' margins) and, meanwhile, 3 is
    /// justified last: 3's move is adopted after the dwell, the pairs that keep swapping never
    /// move, and that leftover reorder is held, visibly.
    #[test]
    fn each_pair_dwells_on_its_own_and_a_reorder_that_never_settles_is_held() {
        let dwell = Duration::from_secs(30);
        // Catalogue: 3 first (local), then 0, 1, 2.
        let mut h = Hysteresis::new(&[10.0, 20.0, 30.0, 1.0], RankMargin::DEFAULT, dwell);
        assert_eq!(h.order(), [3, 0, 1, 2]);
        let t0 = Instant::now();
        let mut moved_at = Vec::new();
        for round in 1..=120_u64 {
            let now = t0 + Duration::from_secs(round);
            // 0 = 100, 2 = 100, 3 = 300; 1 fast (to pass 0) or slow (to fall behind 2).
            let one = if round % 2 == 0 { 70.0 } else { 130.0 };
            if h.observe(&[100.0, one, 100.0, 300.0], now) {
                moved_at.push((round, h.order().to_vec()));
            }
            if round == 20 {
                assert_eq!(h.order(), [3, 0, 1, 2], "within the dwell nothing moves");
                assert!(h.held(now).is_none(), "not held within the dwell");
            }
        }
        // 3 behind everyone after 30 s, once; 0, 1 and 2 keep their order in use.
        assert_eq!(moved_at, [(31, vec![0, 1, 2, 3])]);
        let now = t0 + Duration::from_secs(120);
        let held = h.held(now).expect("the rest of the reorder is held back");
        assert_eq!(held.differs_since, t0 + Duration::from_secs(31));
        // A target that settles ends it: 1 clearly first from now on.
        for round in 121..=200_u64 {
            h.observe(
                &[100.0, 20.0, 100.0, 300.0],
                t0 + Duration::from_secs(round),
            );
        }
        assert_eq!(h.order(), [1, 0, 2, 3]);
        assert!(h.pending().is_none());
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
