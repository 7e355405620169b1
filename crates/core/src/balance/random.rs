//! `random`: probability proportional to weight; `two = true` draws two and keeps the one with
//! fewer active connections per unit of weight (the power of two choices).
//!
//! As nginx (`ngx_http_upstream_random_module.c`): a uniform number below the total weight is
//! located in the servers' weight segments; an unusable draw is retried, 21 draws at most, then
//! the rotation. With `two`, drawing the same server twice does not count as the second choice,
//! and on equal load the second draw wins. The random source is injected (see [`super::rng`]).

use super::rng::Rng;
use super::{Ctx, RequestKey, Select, Tier};

/// Draws before the rotation (nginx: `tries > 20`).
const TRIES: u32 = 21;

/// The `random` method.
#[derive(Debug)]
pub(crate) struct Random {
    /// Power of two choices.
    pub(crate) two: bool,
}

impl Select for Random {
    fn select<K: RequestKey + ?Sized, R: Rng>(
        &self,
        ctx: &mut Ctx<'_, R>,
        _request: &K,
        tier: &Tier,
        primary: bool,
    ) -> Option<usize> {
        if primary && tier.members.len() >= 2 {
            let total = tier.ranges.total();
            let mut first: Option<usize> = None;
            for _ in 0..TRIES {
                let i = tier.members[tier.ranges.locate(ctx.rng.below(total))] as usize;
                if !self.two {
                    if ctx.take(i) {
                        return Some(i);
                    }
                    continue;
                }
                if first == Some(i) || !ctx.candidate(i) {
                    continue;
                }
                let Some(p) = first else {
                    first = Some(i);
                    continue;
                };
                let load = |j: usize| u128::from(ctx.ep(j).active());
                let weight = |j: usize| u128::from(ctx.ep(j).config().weight);
                let chosen = if load(i) * weight(p) > load(p) * weight(i) {
                    p
                } else {
                    i
                };
                if ctx.acquire(chosen) {
                    return Some(chosen);
                }
                first = None;
            }
        }
        tier.rotation.pick(ctx, &tier.members)
    }
}
