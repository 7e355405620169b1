//! Random numbers for `random`, `least_time` and `feedback`, injected so decisions are pure.
//!
//! The generator is SplitMix64 (Steele, Lea, Flood 2014): its state advances by a fixed odd
//! constant and each output is a mix of the state. Because advancing is a plain addition, one
//! `AtomicU64::fetch_add` per draw gives every thread of a node its own distinct output from a
//! single shared stream — lock-free, allocation-free, and reproducible from a seed.

use std::sync::atomic::{AtomicU64, Ordering};

/// The SplitMix64 increment (2^64 / golden ratio, odd).
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The SplitMix64 output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A source of uniformly distributed 64-bit values.
pub trait Rng {
    /// The next value.
    fn next_u64(&mut self) -> u64;

    /// A uniform value in `[0, 1)` with 53 bits of precision.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform value in `[0, n)`; `n` must be positive. (Modulo bias is below 2^-40 for the
    /// totals balancing deals with.)
    fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        self.next_u64() % n
    }
}

/// A seeded SplitMix64 generator owned by one caller (tests, the simulator).
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }
}

impl Rng for SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        mix(self.state)
    }
}

/// A SplitMix64 stream shared by all threads: each draw is one atomic addition.
#[derive(Debug)]
pub(crate) struct SharedRng {
    state: AtomicU64,
}

impl SharedRng {
    /// A stream starting at `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        SharedRng {
            state: AtomicU64::new(seed),
        }
    }

    /// Restarts the stream at `seed`.
    pub(crate) fn reseed(&self, seed: u64) {
        self.state.store(seed, Ordering::Relaxed);
    }

    /// A per-call handle implementing [`Rng`].
    pub(crate) fn handle(&self) -> SharedRngHandle<'_> {
        SharedRngHandle(self)
    }
}

/// Borrowed handle drawing from a [`SharedRng`].
#[derive(Debug)]
pub(crate) struct SharedRngHandle<'a>(&'a SharedRng);

impl Rng for SharedRngHandle<'_> {
    fn next_u64(&mut self) -> u64 {
        let s = self
            .0
            .state
            .fetch_add(GOLDEN, Ordering::Relaxed)
            .wrapping_add(GOLDEN);
        mix(s)
    }
}

/// A seed that differs between processes and balancers (for nodes: two nodes must not walk the
/// same random sequence in lockstep). The simulator and tests reseed with a fixed value.
pub(crate) fn process_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(0x0067_7464_u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_reference_outputs() {
        // Reference values of SplitMix64 seeded with 1234567 (from the published C code).
        let mut r = SplitMix64::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn shared_stream_equals_owned_stream() {
        let shared = SharedRng::new(42);
        let mut owned = SplitMix64::new(42);
        let mut h = shared.handle();
        for _ in 0..100 {
            assert_eq!(h.next_u64(), owned.next_u64());
        }
    }

    #[test]
    fn unit_interval_and_bounds() {
        let mut r = SplitMix64::new(7);
        for _ in 0..10_000 {
            let x = r.next_f64();
            assert!((0.0..1.0).contains(&x));
            assert!(r.below(3) < 3);
        }
    }
}
