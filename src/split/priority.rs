//! Priority: the order in which a node ranks a listener's groups (docs/design.md §3.1).
//!
//! A static `priority` (1 first) wins when configured. Otherwise groups are ranked by RTT from
//! the node, lowest first: measured (EWMA of health-probe samples) when there is a sample, else
//! the catalogue's time (its `[rtt]` entry for the pair, else the estimate). Ties keep config
//! order. Measured re-ranking has hysteresis: a group overtakes another only when it is faster by
//! more than max(5 ms, 20 %) for 3 consecutive samples, so that jitter does not flip traffic back
//! and forth between regions. [`warmed_order`] is where that settles for steady measurements.

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

/// Margin a challenger must beat the incumbent by, in ms: max(5 ms, 20 % of the incumbent).
pub fn overtake_margin_ms(incumbent_ms: f64) -> f64 {
    (incumbent_ms * 0.2).max(5.0)
}

/// Consecutive samples a challenger must win to overtake.
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

/// Ranking of measured RTTs with hysteresis: a small, pure state machine fed one round of
/// samples at a time (one RTT per group, index = config order).
#[derive(Debug, Clone, PartialEq)]
pub struct Hysteresis {
    order: Vec<usize>,
    /// `streak[b * n + a]`: consecutive rounds in which group b beat group a (b ranked below a).
    streak: Vec<u8>,
}

impl Hysteresis {
    /// Starts from the order the initial RTTs give (estimates before any sample).
    pub fn new(initial_rtt_ms: &[f64]) -> Hysteresis {
        let n = initial_rtt_ms.len();
        Hysteresis {
            order: order_by(initial_rtt_ms),
            streak: vec![0; n * n],
        }
    }

    /// The current order (group indices, first = highest priority).
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// Feeds one round of RTTs, every one measured; returns true when the order changed.
    pub fn observe(&mut self, rtt_ms: &[f64]) -> bool {
        self.observe_measured(rtt_ms, |_| true)
    }

    /// Feeds one round of RTTs of which only those `measured(i)` says are measurements (the
    /// others are catalogue times standing in). Only two measured groups compete: a measured
    /// time never overtakes, nor is overtaken by, a catalogue time, since the two are not the
    /// same kind of number (a loopback-fast group measured first would otherwise pass a nearer
    /// one still at its estimate, and keep the place once that one measures faster). Returns
    /// true when the order changed.
    pub fn observe_measured(&mut self, rtt_ms: &[f64], measured: impl Fn(usize) -> bool) -> bool {
        let n = self.order.len();
        assert_eq!(rtt_ms.len(), n, "one RTT per group");
        for (pos_a, &a) in self.order.iter().enumerate() {
            for &b in &self.order[pos_a + 1..] {
                let wins = measured(a)
                    && measured(b)
                    && rtt_ms[b] < rtt_ms[a] - overtake_margin_ms(rtt_ms[a]);
                let s = &mut self.streak[b * n + a];
                *s = if wins { s.saturating_add(1) } else { 0 };
                self.streak[a * n + b] = 0;
            }
        }
        // Let every challenger that has won long enough climb past the groups it beat.
        let mut changed = false;
        let mut moved = true;
        while moved {
            moved = false;
            for p in 0..n.saturating_sub(1) {
                let (a, b) = (self.order[p], self.order[p + 1]);
                if self.streak[b * n + a] >= OVERTAKE_SAMPLES {
                    self.order.swap(p, p + 1);
                    self.streak[b * n + a] = 0;
                    moved = true;
                    changed = true;
                }
            }
        }
        changed
    }
}

/// The order after a whole history of sample rounds, starting from `initial` RTTs.
pub fn rank_history(initial_rtt_ms: &[f64], history: &[Vec<f64>]) -> Vec<usize> {
    let mut h = Hysteresis::new(initial_rtt_ms);
    for round in history {
        h.observe(round);
    }
    h.order().to_vec()
}

/// The order a node settles on once its RTTs have been steady for a while (what `sim --latency`
/// shows): a [`Hysteresis`] started from `estimated_ms` (the catalogue's times, before any
/// sample) and fed `measured_ms` (one RTT per group, config order; for a group the caller did
/// not measure, its catalogue time, as if measured at it: a warmed-up node has measured every
/// group it probes) round after round until the order has not moved for [`OVERTAKE_SAMPLES`]
/// rounds. So a group moves past another only where it is faster by more than
/// [`overtake_margin_ms`]; a smaller difference keeps the catalogue order.
pub fn warmed_order(estimated_ms: &[f64], measured_ms: &[f64]) -> Vec<usize> {
    assert_eq!(estimated_ms.len(), measured_ms.len(), "one RTT per group");
    let mut h = Hysteresis::new(estimated_ms);
    // Ends: every change moves a group past one that measured strictly slower, so the number
    // of pairs out of measured order falls each time.
    let mut quiet = 0;
    while quiet < OVERTAKE_SAMPLES {
        quiet = if h.observe(measured_ms) { 0 } else { quiet + 1 };
    }
    h.order().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measured_time_does_not_pass_a_catalogue_time() {
        // b (catalogue 30 ms) and c (catalogue 60 ms, measured first at 0.1 ms): c waits for b
        // to be measured; then both at about 0.1 ms, neither passes the other.
        let mut h = Hysteresis::new(&[1.0, 30.0, 60.0]);
        for _ in 0..10 {
            h.observe_measured(&[1.0, 30.0, 0.1], |i| i != 1);
        }
        assert_eq!(h.order(), [0, 1, 2]);
        for _ in 0..10 {
            h.observe_measured(&[1.0, 0.15, 0.1], |_| true);
        }
        assert_eq!(h.order(), [0, 1, 2]);
        // A clear win among measured groups still moves them.
        for _ in 0..3 {
            h.observe_measured(&[40.0, 0.15, 0.1], |_| true);
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
        assert_eq!(warmed_order(&est, &meas), vec![0, 1]);
        // 100 vs 85: 15 ms faster but under 20 % of 100.
        assert_eq!(warmed_order(&[100.0, 120.0], &[100.0, 85.0]), vec![0, 1]);
    }

    #[test]
    fn warmed_order_follows_a_big_difference() {
        // Estimated 10 and 20 ms; measured 60 and 10: 50 ms apart, far past max(5, 12).
        assert_eq!(warmed_order(&[10.0, 20.0], &[60.0, 10.0]), vec![1, 0]);
        // Several places at once, the same as the node's Hysteresis after 3 rounds.
        let (est, meas) = ([50.0, 60.0, 70.0], [50.0, 60.0, 5.0]);
        assert_eq!(warmed_order(&est, &meas), vec![2, 0, 1]);
        assert_eq!(
            warmed_order(&est, &meas),
            rank_history(&est, &vec![meas.to_vec(); 3])
        );
    }

    #[test]
    fn warmed_order_ties_keep_config_order() {
        assert_eq!(
            warmed_order(&[5.0, 5.0, 5.0], &[5.0, 5.0, 5.0]),
            vec![0, 1, 2]
        );
        // Estimated apart, measured equal: no one clears the margin, the estimate's order stays.
        assert_eq!(
            warmed_order(&[9.0, 3.0, 6.0], &[5.0, 5.0, 5.0]),
            vec![1, 2, 0]
        );
        assert_eq!(warmed_order(&[], &[]), Vec::<usize>::new());
    }

    #[test]
    fn warmed_order_unmeasured_groups_keep_their_estimate() {
        // Groups 0 and 1 unmeasured (their estimates, 1 and 17 ms); group 2 (estimated 40 ms)
        // measures 0.5 ms: it passes group 1 (by 16.5 > 5) but not the 1 ms local group 0.
        let est = [1.0, 17.0, 40.0];
        assert_eq!(warmed_order(&est, &[1.0, 17.0, 0.5]), vec![0, 2, 1]);
        // With nothing measured, the catalogue order.
        assert_eq!(warmed_order(&est, &est), order_by(&est));
    }

    #[test]
    fn a_fast_newcomer_climbs_past_several() {
        let rounds = vec![vec![50.0, 60.0, 5.0]; 3];
        assert_eq!(rank_history(&[50.0, 60.0, 70.0], &rounds), vec![2, 0, 1]);
    }
}
