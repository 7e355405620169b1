//! `round_robin`: nginx's smooth weighted rotation (weights 5,1,1 give a a b a c a a), and the
//! rotation every other method falls back to.
//!
//! # The algorithm
//! Each pick adds every candidate's effective weight to its `current` weight, chooses the
//! largest `current` (the first one on ties), and subtracts the sum of the effective weights
//! from the chosen one. With fixed weights the sequence is periodic with period `sum(w)/gcd(w)`,
//! and scaling all weights by a constant does not change it.
//!
//! # Lock-free, two ways
//! - **Steady state** (every endpoint at full weight): the sequence only depends on the
//!   configured weights, so it is computed once when the balancer is built and a pick is
//!   `table[counter.fetch_add(1) % len]`: one atomic addition, no lock, no allocation. An entry
//!   whose endpoint cannot be used now (disabled, failed, at `max_conns`, excluded by a retry)
//!   is skipped by taking the *next counter value*, which removes exactly that endpoint's
//!   entries from the sequence: the others keep their proportions and their spacing.
//!   `down`/`drain` endpoints are left out of the table itself, so with them the sequence is
//!   still exactly nginx's.
//! - **While weights are reduced** (a failure penalty being restored pick by pick, a slow-start
//!   ramp), the sequence depends on run-time values, and the pick runs nginx's arithmetic
//!   directly on per-endpoint `AtomicI64` current weights: `fetch_add` on each candidate,
//!   `fetch_sub` on the winner. Alone, that is exactly nginx; concurrently, two picks may read
//!   each other's half-applied updates, which can only reorder picks — every pick adds the total
//!   and subtracts it once, so the current weights still sum to zero and stay bounded. It costs
//!   O(candidates) atomic operations, which is why it is not the steady state. The balancer
//!   learns that weights are back to full through a generation counter (see `mod.rs`).
//!
//! If fewer than [`SKIP_LIMIT`] consecutive table entries are usable (most of a large group is
//! out) the pick also takes the O(n) path, which finds a usable endpoint whenever one exists.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::Endpoint;

use super::rng::Rng;
use super::{Ctx, RequestKey, Select, Tier, View, weight_shares};

/// Table entries tried before the O(n) path.
const SKIP_LIMIT: usize = 16;
/// Largest table built (4 MiB of `u32`).
const MAX_TABLE: u64 = 1 << 20;
/// Most simulation steps spent building a table (length × members); beyond it the group always
/// uses the O(n) path (only for very large groups with very uneven weights).
const BUILD_BUDGET: u64 = 1 << 26;

/// A counter alone on its cache line(s), so picks do not contend with neighbouring data.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct PaddedCounter(pub(crate) AtomicU64);

/// The precomputed rotation of one tier (primaries or backups).
#[derive(Debug)]
pub(crate) struct Rotation {
    table: Option<Box<[u32]>>,
    next: PaddedCounter,
}

impl Rotation {
    /// The rotation over `members` (endpoint indexes) with their configured weights.
    pub(crate) fn new(configs: &[Endpoint], members: &[u32]) -> Self {
        let weighted: Vec<(u32, u64)> = members
            .iter()
            .filter(|&&i| {
                let c = &configs[i as usize];
                !c.down && !c.drain && c.weight > 0
            })
            .map(|&i| (i, u64::from(configs[i as usize].weight)))
            .collect();
        Rotation {
            table: build_table(&weighted),
            next: PaddedCounter::default(),
        }
    }

    /// Length of the precomputed table (0 when the group always uses the O(n) path).
    pub(crate) fn table_len(&self) -> usize {
        self.table.as_ref().map_or(0, |t| t.len())
    }

    /// Picks and acquires one endpoint of `members`.
    pub(crate) fn pick<R: Rng>(&self, ctx: &mut Ctx<'_, R>, members: &[u32]) -> Option<usize> {
        if let Some(i) = self.pick_from_table(ctx, |_, _| true) {
            return Some(i);
        }
        (0..3).find_map(|_| {
            let best = smooth_weighted(ctx, members, |ctx, i| ctx.candidate(i))?;
            ctx.acquire(best).then_some(best)
        })
    }

    /// The steady-state path: while every weight is full, walks the precomputed sequence from
    /// the shared counter and acquires the first candidate `accept`ed, skipping (and so
    /// consuming the turn of) the others, at most [`SKIP_LIMIT`] entries. `None` sends the
    /// caller to the O(n) path.
    pub(crate) fn pick_from_table<R: Rng>(
        &self,
        ctx: &Ctx<'_, R>,
        accept: impl Fn(&Ctx<'_, R>, usize) -> bool,
    ) -> Option<usize> {
        let table = self.table.as_ref()?;
        if !ctx.weights_full() {
            // Some weight was reduced when last looked at: check whether all are full again.
            // O(n) loads, on a pick that is about to do O(n) work on the exact path otherwise.
            ctx.refresh_weights_full();
            if !ctx.weights_full() {
                return None;
            }
        }
        let len = table.len() as u64;
        for _ in 0..SKIP_LIMIT.min(table.len()) {
            let n = self.next.0.fetch_add(1, Ordering::Relaxed);
            let i = table[(n % len) as usize] as usize;
            if ctx.candidate(i) && accept(ctx, i) && ctx.acquire(i) {
                return Some(i);
            }
        }
        None
    }
}

/// One step of nginx's smooth weighted round robin over the `members` for which `eligible`
/// holds, on the shared atomic current weights. Returns the winner (not yet acquired).
pub(crate) fn smooth_weighted<R: Rng>(
    ctx: &Ctx<'_, R>,
    members: &[u32],
    mut eligible: impl FnMut(&Ctx<'_, R>, usize) -> bool,
) -> Option<usize> {
    let mut best: Option<(usize, i64)> = None;
    let mut total: i64 = 0;
    for &m in members {
        let i = m as usize;
        if !eligible(ctx, i) {
            continue;
        }
        let ep = ctx.ep(i);
        let w = ep.swrr_weight(ctx.t);
        let current = ctx.cw[i].fetch_add(w, Ordering::AcqRel) + w;
        total += w;
        ep.restore_one();
        if best.is_none_or(|(_, b)| current > b) {
            best = Some((i, current));
        }
    }
    let (winner, _) = best?;
    ctx.cw[winner].fetch_sub(total, Ordering::AcqRel);
    Some(winner)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The smooth weighted sequence for fixed weights, one period long (weights divided by their
/// gcd first, which does not change the sequence). `None` when empty or too large.
pub(crate) fn build_table(weighted: &[(u32, u64)]) -> Option<Box<[u32]>> {
    let g = weighted.iter().fold(0, |g, &(_, w)| gcd(g, w));
    if g == 0 {
        return None;
    }
    let weights: Vec<i64> = weighted.iter().map(|&(_, w)| (w / g) as i64).collect();
    let len: u64 = weights.iter().map(|&w| w as u64).sum();
    if len > MAX_TABLE || len.saturating_mul(weights.len() as u64) > BUILD_BUDGET {
        return None;
    }
    let mut current = vec![0i64; weights.len()];
    let mut table = Vec::with_capacity(len as usize);
    for _ in 0..len {
        let mut best = 0;
        for j in 0..weights.len() {
            current[j] += weights[j];
            if current[j] > current[best] {
                best = j;
            }
        }
        current[best] -= len as i64;
        table.push(weighted[best].0);
    }
    Some(table.into_boxed_slice())
}

/// The `round_robin` method.
#[derive(Debug)]
pub(crate) struct RoundRobin;

impl Select for RoundRobin {
    fn select<K: RequestKey + ?Sized, R: Rng>(
        &self,
        ctx: &mut Ctx<'_, R>,
        _request: &K,
        tier: &Tier,
        _primary: bool,
    ) -> Option<usize> {
        tier.rotation.pick(ctx, &tier.members)
    }

    /// Current effective weights: failure penalties and slow-start ramps included.
    fn shares(&self, view: &View<'_>, tier: &Tier, _primary: bool, out: &mut [f64]) -> bool {
        weight_shares(view, tier, true, out);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letters(weights: &[u64]) -> String {
        let w: Vec<(u32, u64)> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| (i as u32, w))
            .collect();
        build_table(&w)
            .unwrap()
            .iter()
            .map(|&i| (b'a' + i as u8) as char)
            .collect()
    }

    #[test]
    fn five_one_one_is_nginx_sequence() {
        assert_eq!(letters(&[5, 1, 1]), "aabacaa");
    }

    #[test]
    fn scaling_weights_changes_nothing() {
        assert_eq!(letters(&[10, 2, 2]), "aabacaa");
        assert_eq!(letters(&[2, 2]), "ab");
        assert_eq!(letters(&[1, 1, 1, 1]), "abcd");
    }

    #[test]
    fn proportions_hold_over_one_period() {
        let t = letters(&[3, 7, 1, 4]);
        assert_eq!(t.len(), 15);
        for (c, w) in "abcd".chars().zip([3, 7, 1, 4]) {
            assert_eq!(t.chars().filter(|&x| x == c).count(), w);
        }
        // Smooth: the heaviest never runs three times in a row here.
        assert!(!t.contains("bbb"));
    }

    #[test]
    fn oversized_tables_are_not_built() {
        assert!(build_table(&[(0, MAX_TABLE), (1, 1)]).is_none());
        assert!(build_table(&[]).is_none());
    }
}
