//! The deterministic smooth rotation over group shares (docs/design.md §3.4).
//!
//! Guarantee: over the first N decisions after the shares are set, every group has received
//! within one decision of `N × share` (so within two over any window of consecutive decisions).
//! nginx's smooth weighted round robin does not quite achieve this for three or more weights
//! (it drifts to about 1.1), so the order follows Tijdeman's solution of the "chairman assignment
//! problem" (R. Tijdeman, 1980), which keeps every group within `1 - 1/(2n-2)` of its quota:
//!
//! at decision `t` (1-based), with `c_i` the decisions group `i` received so far and
//! `λ_i` its share, the candidates are the groups with `λ_i·t - c_i >= σ` where
//! `σ = 1/(2n-2)`; among them the one with the earliest deadline `(c_i + 1 - σ) / λ_i` wins
//! (ties: the higher-priority group).
//!
//! Shares are turned into integer weights in millionths of a percent (the precision `sim`
//! prints), so the sequence is exactly periodic with period `W = Σ w_i`, and after `t` decisions
//! every `c_i` is `floor(w_i·t/W)` or one more. The whole state is therefore `t mod W` plus one
//! bit per group, packed in one `AtomicU64` and advanced with a compare-and-swap: no lock, no
//! allocation, shared by every thread of the node.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::MAX_GROUPS;

/// Shares (percent) are converted to integer weights with this many units per percent.
const UNITS_PER_PERCENT: f64 = 1_000_000.0;

/// A lock-free rotation over a fixed set of shares.
#[derive(Debug)]
pub struct Rotation {
    /// Integer weight per group (0 = never chosen).
    weights: Vec<u64>,
    /// Sum of the weights: the period.
    total: u64,
    /// `2n - 2` for the n groups with weight > 0 (σ = 1/d); 0 when n <= 1.
    d: u64,
    /// `t << 32 | bits`: decisions so far (mod `total`) and, per group, whether its count is
    /// `floor(w_i·t/W) + 1`.
    state: AtomicU64,
}

impl Clone for Rotation {
    fn clone(&self) -> Self {
        Rotation {
            weights: self.weights.clone(),
            total: self.total,
            d: self.d,
            state: AtomicU64::new(self.state.load(Ordering::Relaxed)),
        }
    }
}

impl Rotation {
    /// A rotation over `shares` (percent, any non-negative values; only their proportions count).
    ///
    /// # Panics
    /// With more than [`MAX_GROUPS`] shares (config validation keeps listeners below it).
    pub fn new(shares: &[f64]) -> Rotation {
        assert!(
            shares.len() <= MAX_GROUPS,
            "at most {MAX_GROUPS} groups per listener"
        );
        let weights: Vec<u64> = shares
            .iter()
            .map(|s| {
                if s.is_finite() && *s > 0.0 {
                    (s * UNITS_PER_PERCENT).round() as u64
                } else {
                    0
                }
            })
            .collect();
        let total = weights.iter().sum();
        let n = weights.iter().filter(|w| **w > 0).count() as u64;
        let d = if n > 1 { 2 * n - 2 } else { 0 };
        Rotation {
            weights,
            total,
            d,
            state: AtomicU64::new(0),
        }
    }

    /// Goes on from where `was` is when both rotate over the same weights: a plan rebuilt with
    /// the split it had (a reload, a DNS change elsewhere in the config) keeps its place in the
    /// sequence instead of starting again at the largest share. Whether it did.
    pub fn continue_from(&self, was: &Rotation) -> bool {
        if self.weights != was.weights {
            return false;
        }
        self.state
            .store(was.state.load(Ordering::Relaxed), Ordering::Relaxed);
        true
    }

    /// The next decision: the index of the chosen group, or `None` when every share is zero.
    pub fn next(&self) -> Option<usize> {
        if self.total == 0 {
            return None;
        }
        let mut current = self.state.load(Ordering::Relaxed);
        loop {
            let (chosen, next) = self.step(current);
            match self.state.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(chosen),
                Err(seen) => current = seen,
            }
        }
    }

    /// One step of the sequence from a packed state: the chosen group and the next state.
    fn step(&self, state: u64) -> (usize, u64) {
        let (w_total, d) = (self.total, self.d);
        let t_prev = state >> 32;
        let bits = state & 0xFFFF_FFFF;
        let t = t_prev + 1; // this decision, 1-based within the period
        let count = |i: usize| (self.weights[i] * t_prev) / w_total + ((bits >> i) & 1);

        let mut best: Option<(usize, u64)> = None; // (group, its count)
        for (i, &w) in self.weights.iter().enumerate() {
            if w == 0 {
                continue;
            }
            let c = count(i);
            if d > 0 {
                // Candidate when w·t/W - c >= 1/d, i.e. (w·t - c·W)·d >= W.
                let ahead = (w * t) as i128 - (c * w_total) as i128;
                if ahead * (d as i128) < w_total as i128 {
                    continue;
                }
            }
            // Earliest deadline ((c+1)·d - 1) / w; compare by cross-multiplication.
            let better = match best {
                None => true,
                Some((j, cj)) => {
                    let lhs = ((c + 1) * d.max(1) - 1) as u128 * self.weights[j] as u128;
                    let rhs = ((cj + 1) * d.max(1) - 1) as u128 * w as u128;
                    lhs < rhs
                }
            };
            if better {
                best = Some((i, c));
            }
        }
        let (chosen, _) = best.expect("Tijdeman's rule always has a candidate");

        // Re-encode the counts after this decision relative to floor(w·t/W).
        let t_next = if t == w_total { 0 } else { t };
        let mut next_bits = 0_u64;
        if t_next != 0 {
            for (i, &w) in self.weights.iter().enumerate() {
                if w == 0 {
                    continue;
                }
                let c = count(i) + u64::from(i == chosen);
                let base = (w * t) / w_total;
                debug_assert!(c == base || c == base + 1, "count within one of its quota");
                next_bits |= (c - base) << i;
            }
        }
        (chosen, t_next << 32 | next_bits)
    }

    /// The `k`-th decision (0-based) of a fresh rotation, without touching the shared state.
    /// O(k); for tests and the simulator's explanations.
    pub fn nth(&self, k: u64) -> Option<usize> {
        if self.total == 0 {
            return None;
        }
        let mut state = 0;
        let mut chosen = 0;
        for _ in 0..=(k % self.total) {
            (chosen, state) = self.step(state);
        }
        Some(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(r: &Rotation, n: usize, decisions: usize) -> Vec<usize> {
        let mut c = vec![0; n];
        for _ in 0..decisions {
            c[r.next().unwrap()] += 1;
        }
        c
    }

    #[test]
    fn sixty_two_and_a_half_percent() {
        let r = Rotation::new(&[62.5, 37.5]);
        assert_eq!(counts(&r, 2, 8), vec![5, 3]);
        assert_eq!(counts(&r, 2, 800), vec![500, 300]);
    }

    #[test]
    fn a_rotation_continued_over_the_same_shares_keeps_every_window_exact() {
        // 90/10 restarted every five decisions never picks the 10 % group; continued, the
        // counts are those of one unbroken sequence.
        let mut counts = [0_usize; 2];
        let mut was = Rotation::new(&[90.0, 10.0]);
        for _ in 0..12 {
            let now = Rotation::new(&[90.0, 10.0]);
            assert!(now.continue_from(&was));
            for _ in 0..5 {
                counts[now.next().unwrap()] += 1;
            }
            was = now;
        }
        assert_eq!(counts, [54, 6]);
        // Other weights: nothing carried.
        let other = Rotation::new(&[80.0, 20.0]);
        assert!(!other.continue_from(&was));
        assert_eq!(other.next(), Some(0));
    }

    #[test]
    fn zero_shares_are_never_chosen() {
        let r = Rotation::new(&[0.0, 100.0, 0.0]);
        assert!((0..100).all(|_| r.next() == Some(1)));
        assert_eq!(Rotation::new(&[0.0, 0.0]).next(), None);
        assert_eq!(Rotation::new(&[]).next(), None);
    }

    #[test]
    fn within_one_of_quota_at_every_prefix() {
        let shares = [47.0, 0.5, 30.25, 22.25];
        let r = Rotation::new(&shares);
        let mut c = [0_i64; 4];
        for n in 1..=20_000_i64 {
            c[r.next().unwrap()] += 1;
            for i in 0..4 {
                let ideal = n as f64 * shares[i] / 100.0;
                assert!(
                    (c[i] as f64 - ideal).abs() < 1.0,
                    "decision {n} group {i}: {} vs {ideal}",
                    c[i]
                );
            }
        }
    }

    #[test]
    fn nth_matches_the_shared_sequence() {
        let r = Rotation::new(&[25.75, 74.25]);
        let fresh = r.clone();
        for k in 0..500 {
            assert_eq!(r.next(), fresh.nth(k));
        }
    }
}
