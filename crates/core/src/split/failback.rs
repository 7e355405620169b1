//! Ramped failback (docs/design.md §3.3, `failback_ramp`): a group that turns healthy again
//! takes its share back linearly over the listener's `failback_ramp` instead of at once.
//!
//! The picture at a moment is a pure function of the facts, the recovery instants and the time:
//!
//! - the recovering groups `r1..rk` are ordered by when they recovered (earliest first), so
//!   their ramp fractions `f1 >= f2 >= ... >= fk` ([`fraction`]) stay in that order at every
//!   moment;
//! - `S0` is the split with all of them held unhealthy, `Sj` the split with `r1..rj` healthy
//!   (`Sk` is the split of the facts as they are);
//! - the split now is `(1 - f1)·S0 + (f1 - f2)·S1 + ... + (f(k-1) - fk)·S(k-1) + fk·Sk`
//!   ([`weights`]): a convex mixture, so every share is >= 0 and they add up to what `Sk`
//!   adds up to. One recovering group's share is exactly `f × its share in Sk`.
//!
//! A group that recovers while nothing else can take its traffic (`S0` has no route, or is in
//! fail-open and so sends traffic to groups that are down) does not ramp: it takes its share at
//! once, as there is nothing healthy to spare it from.
//!
//! Decisions pick one of the mixture's plans per decision, then decide on that plan: under
//! rotation with a Weyl sequence (`frac(n·φ)`, one atomic add), under source-ip affinity with a
//! number drawn from the client's address, so a client moves at most once per recovering
//! group, from its group in `Sj-1` to its group in `Sj`, as the ramp passes it. No lock, no
//! allocation (docs/design.md §3.4).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::GroupFacts;

/// How far along its ramp a group that recovered `elapsed` ago is, 0..=1: `elapsed / ramp`,
/// 1 once the ramp is over (and always, for a zero ramp: the snap).
pub fn fraction(elapsed: Duration, ramp: Duration) -> f64 {
    if elapsed >= ramp {
        return 1.0;
    }
    (elapsed.as_secs_f64() / ramp.as_secs_f64()).clamp(0.0, 1.0)
}

/// The weight of each plan of the mixture `S0..Sk` for the ramp fractions `f1..fk` (non-
/// increasing): `1 - f1, f1 - f2, ..., fk`. They add up to 1.
pub fn weights(fractions: &[f64]) -> Vec<f64> {
    let mut out = Vec::with_capacity(fractions.len() + 1);
    let mut above = 1.0;
    for &f in fractions {
        out.push((above - f).max(0.0));
        above = f;
    }
    out.push(above);
    out
}

/// The split at a moment: the plans' shares (each `S0..Sk`, one value per group) mixed with
/// [`weights`] of `fractions`.
pub fn mix(splits: &[&[f64]], fractions: &[f64]) -> Vec<f64> {
    assert_eq!(
        splits.len(),
        fractions.len() + 1,
        "one split more than fractions"
    );
    let n = splits.first().map_or(0, |s| s.len());
    let mut out = vec![0.0; n];
    for (split, w) in splits.iter().zip(weights(fractions)) {
        for (o, s) in out.iter_mut().zip(split.iter()) {
            *o += w * s;
        }
    }
    out
}

/// Which groups are recovering at `now` (config index → when it turned healthy) after the
/// facts went from `before` to `after`: a group that was unhealthy and is healthy now recovers
/// at `now`; one that stays healthy keeps the instant it had while its ramp lasts; every other
/// group (unhealthy, ratio 0, or past its ramp) is `None`. All `None` for a zero ramp.
pub fn carry(
    before: &[GroupFacts],
    recovered: &[Option<Instant>],
    after: &[GroupFacts],
    ramp: Duration,
    now: Instant,
) -> Vec<Option<Instant>> {
    after
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if ramp.is_zero() || !f.healthy || f.ratio <= 0.0 {
                return None;
            }
            match before.get(i) {
                Some(b) if !b.healthy => Some(now),
                Some(_) => recovered
                    .get(i)
                    .copied()
                    .flatten()
                    .filter(|&at| now < at + ramp),
                // A group the previous facts did not have is new, not recovering.
                None => None,
            }
        })
        .collect()
}

/// The ramp of one plan: the plans it mixes and when each recovering group recovered.
#[derive(Debug)]
pub(crate) struct Ramp {
    /// The listener's `failback_ramp`.
    pub(crate) ramp: Duration,
    /// The recovering groups (config index) and when each turned healthy, earliest first.
    pub(crate) recovering: Vec<(usize, Instant)>,
    /// `S0..S(k-1)`: the plans with the recovering groups from the j-th on held unhealthy
    /// (`Sk` is the plan that owns this ramp).
    pub(crate) before: Vec<super::Plan>,
    /// Decisions so far under rotation (the Weyl sequence's index).
    decisions: AtomicU64,
}

impl Clone for Ramp {
    fn clone(&self) -> Self {
        Ramp {
            ramp: self.ramp,
            recovering: self.recovering.clone(),
            before: self.before.clone(),
            decisions: AtomicU64::new(self.decisions.load(Ordering::Relaxed)),
        }
    }
}

impl Ramp {
    pub(crate) fn new(
        ramp: Duration,
        recovering: Vec<(usize, Instant)>,
        before: Vec<super::Plan>,
    ) -> Ramp {
        debug_assert_eq!(recovering.len(), before.len());
        Ramp {
            ramp,
            recovering,
            before,
            decisions: AtomicU64::new(0),
        }
    }

    /// The ramp fraction of the j-th recovering group at `now`.
    pub(crate) fn fraction(&self, j: usize, now: Instant) -> f64 {
        fraction(
            now.saturating_duration_since(self.recovering[j].1),
            self.ramp,
        )
    }

    /// Every recovering group's fraction at `now`, earliest recovery first.
    pub(crate) fn fractions(&self, now: Instant) -> Vec<f64> {
        (0..self.recovering.len())
            .map(|j| self.fraction(j, now))
            .collect()
    }

    /// When the last ramp is over.
    pub(crate) fn ends(&self) -> Instant {
        self.recovering
            .iter()
            .map(|&(_, at)| at + self.ramp)
            .max()
            .expect("a ramp has a recovering group")
    }

    /// The mixture's plan for a decision drawn at `u` (0..1): the last `j` whose group's
    /// fraction is above `u`, else 0 (`S0`). `k` means the owning plan.
    pub(crate) fn component(&self, u: f64, now: Instant) -> usize {
        (0..self.recovering.len())
            .rev()
            .find(|&j| u < self.fraction(j, now))
            .map_or(0, |j| j + 1)
    }

    /// The next number of the Weyl sequence `frac(n·φ)`, 0..1: evenly spread over any run of
    /// decisions, so the mixture's weights hold over short windows as well as long ones.
    pub(crate) fn next_u(&self) -> f64 {
        let n = self.decisions.fetch_add(1, Ordering::Relaxed);
        unit(n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
}

/// The top 53 bits of `x` as a number in 0..1.
pub(crate) fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fraction_is_linear_and_clamped() {
        let ramp = Duration::from_secs(60);
        assert_eq!(fraction(Duration::ZERO, ramp), 0.0);
        assert_eq!(fraction(Duration::from_secs(15), ramp), 0.25);
        assert_eq!(fraction(Duration::from_secs(30), ramp), 0.5);
        assert_eq!(fraction(Duration::from_secs(60), ramp), 1.0);
        assert_eq!(fraction(Duration::from_secs(600), ramp), 1.0);
        // A zero ramp is the snap.
        assert_eq!(fraction(Duration::ZERO, Duration::ZERO), 1.0);
    }

    #[test]
    fn one_group_returns_in_proportion() {
        // Beijing 50 / Shanghai 50 (62.5 / 37.5); Shanghai recovering, 40 % through: Beijing
        // alone takes 100 in S0.
        let s0 = [100.0, 0.0];
        let s1 = [62.5, 37.5];
        let m = mix(&[&s0, &s1], &[0.4]);
        assert!((m[1] - 0.4 * 37.5).abs() < 1e-12);
        assert!((m[0] + m[1] - 100.0).abs() < 1e-12);
    }

    #[test]
    fn carry_starts_keeps_and_ends_ramps() {
        let t0 = Instant::now();
        let ramp = Duration::from_secs(10);
        let up = GroupFacts::new(50.0, true);
        let down = GroupFacts::new(50.0, false);
        // Group 1 turns healthy: recovering from now.
        let r = carry(&[up, down], &[None, None], &[up, up], ramp, t0);
        assert_eq!(r, [None, Some(t0)]);
        // Another fact changes 5 s later: the instant stays.
        let t5 = t0 + Duration::from_secs(5);
        assert_eq!(carry(&[up, up], &r, &[up, up], ramp, t5), [None, Some(t0)]);
        // Past the ramp: over.
        let t10 = t0 + ramp;
        assert_eq!(carry(&[up, up], &r, &[up, up], ramp, t10), [None, None]);
        // Fails again: no ramp; a zero ramp never ramps; ratio 0 does not ramp.
        assert_eq!(carry(&[up, up], &r, &[up, down], ramp, t5), [None, None]);
        let r0 = carry(&[up, down], &[None, None], &[up, up], Duration::ZERO, t0);
        assert_eq!(r0, [None, None]);
        let zero = GroupFacts::new(0.0, true);
        let r = carry(&[up, down], &[None, None], &[up, zero], ramp, t0);
        assert_eq!(r, [None, None]);
    }

    #[test]
    fn weyl_numbers_spread_evenly() {
        let r = Ramp::new(Duration::from_secs(1), Vec::new(), Vec::new());
        let below = (0..10_000).filter(|_| r.next_u() < 0.3).count();
        assert!((2990..=3010).contains(&below), "{below}");
    }

    proptest! {
        /// For any splits and non-increasing fractions the mixture is a split: shares >= 0
        /// adding up to 100, each between its smallest and largest value in the plans, and a
        /// group recovering alone gets exactly `f ×` its full share.
        #[test]
        fn mixture_is_a_split(
            raw in proptest::collection::vec(
                proptest::collection::vec(0.0..1.0f64, 4), 1..5),
            mut fr in proptest::collection::vec(0.0..=1.0f64, 4),
        ) {
            let splits: Vec<Vec<f64>> = raw
                .iter()
                .map(|s| {
                    let sum: f64 = s.iter().sum();
                    if sum == 0.0 { vec![25.0; 4] } else { s.iter().map(|x| x * 100.0 / sum).collect() }
                })
                .collect();
            fr.truncate(splits.len() - 1);
            fr.sort_by(|a, b| b.partial_cmp(a).unwrap());
            let refs: Vec<&[f64]> = splits.iter().map(Vec::as_slice).collect();
            let m = mix(&refs, &fr);
            let w = weights(&fr);
            prop_assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-9);
            prop_assert!(w.iter().all(|&x| x >= 0.0));
            prop_assert!((m.iter().sum::<f64>() - 100.0).abs() < 1e-9);
            for (g, &x) in m.iter().enumerate() {
                let lo = splits.iter().map(|s| s[g]).fold(f64::INFINITY, f64::min);
                let hi = splits.iter().map(|s| s[g]).fold(0.0, f64::max);
                prop_assert!(x >= lo - 1e-9 && x <= hi + 1e-9);
            }
            if splits.len() == 2 {
                // The recovering group has nothing in S0 in practice; as a mixture, its value
                // is linear in the fraction.
                for g in 0..4 {
                    let want = splits[0][g] + fr[0] * (splits[1][g] - splits[0][g]);
                    prop_assert!((m[g] - want).abs() < 1e-9);
                }
            }
        }

        /// The share a recovering group gets never falls as time passes.
        #[test]
        fn fraction_never_falls(a in 0u64..100_000, b in 0u64..100_000, ramp in 1u64..100_000) {
            let (lo, hi) = (a.min(b), a.max(b));
            let r = Duration::from_millis(ramp);
            prop_assert!(fraction(Duration::from_millis(lo), r) <= fraction(Duration::from_millis(hi), r));
        }
    }
}
