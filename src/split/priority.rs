//! Priority: the order in which a node ranks a listener's groups (docs/design.md §3.1).
//!
//! A static `priority` (1 first) wins when configured. Otherwise groups are ranked by RTT from
//! the node, lowest first: measured (EWMA of health-probe samples) when there is a sample, else
//! the catalogue's time (its `[rtt]` entry for the pair, else the estimate). Ties keep config
//! order. Measured re-ranking has hysteresis: a group overtakes another only when it is faster by
//! more than max(5 ms, 20 %) for 3 consecutive samples, so that jitter does not flip traffic back
//! and forth between regions.

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

    /// Feeds one round of RTTs; returns true when the order changed.
    pub fn observe(&mut self, rtt_ms: &[f64]) -> bool {
        let n = self.order.len();
        assert_eq!(rtt_ms.len(), n, "one RTT per group");
        for (pos_a, &a) in self.order.iter().enumerate() {
            for &b in &self.order[pos_a + 1..] {
                let wins = rtt_ms[b] < rtt_ms[a] - overtake_margin_ms(rtt_ms[a]);
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_fast_newcomer_climbs_past_several() {
        let rounds = vec![vec![50.0, 60.0, 5.0]; 3];
        assert_eq!(rank_history(&[50.0, 60.0, 70.0], &rounds), vec![2, 0, 1]);
    }
}
