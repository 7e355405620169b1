//! `least_conn`: fewest active connections per unit of weight (weight 2 with 15 beats weight 1
//! with 10, since 15/2 < 10/1); ties go to the smooth weighted rotation among the tied.
//!
//! As nginx (`ngx_http_upstream_least_conn_module.c`): one pass finds the lowest
//! `active / weight` by cross-multiplication (no division, no rounding) and whether it is tied;
//! if tied, the smooth rotation chooses among those with the same ratio. While every weight is
//! full the rotation's precomputed sequence does that (skipping entries that are not tied), so
//! an idle group costs one scan and no atomic writes, and picks exactly like nginx's rotation;
//! otherwise nginx's arithmetic runs over the tied endpoints from the first best onwards. With
//! slow start the weight is scaled by the ramp. Active counts are the [`super::Pick`] guards
//! alive: requests/connections in flight, not idle keep-alive ones.

use super::rng::Rng;
use super::round_robin::smooth_weighted;
use super::{Ctx, RequestKey, Select, Tier, View};

/// The `least_conn` method.
#[derive(Debug)]
pub(crate) struct LeastConn;

impl Select for LeastConn {
    fn select<K: RequestKey + ?Sized, R: Rng>(
        &self,
        ctx: &mut Ctx<'_, R>,
        _request: &K,
        tier: &Tier,
        _primary: bool,
    ) -> Option<usize> {
        let t = ctx.t;
        // A concurrent pick can take the chosen endpoint's last slot; try again a few times.
        for _ in 0..3 {
            let mut best: Option<(usize, u128, u128)> = None; // (position, active, weight)
            let mut many = false;
            for (pos, &m) in tier.members.iter().enumerate() {
                let i = m as usize;
                if !ctx.candidate(i) {
                    continue;
                }
                let e = ctx.ep(i);
                let (a, w) = (u128::from(e.active()), u128::from(e.ramped_weight(t)));
                match best {
                    Some((_, ba, bw)) if a * bw > ba * w => {}
                    Some((_, ba, bw)) if a * bw == ba * w => many = true,
                    _ => {
                        best = Some((pos, a, w));
                        many = false;
                    }
                }
            }
            let (pos, ba, bw) = best?;
            if !many {
                let i = tier.members[pos] as usize;
                if ctx.acquire(i) {
                    return Some(i);
                }
                continue;
            }
            let tied = |ctx: &Ctx<'_, R>, j: usize| {
                let e = ctx.ep(j);
                u128::from(e.active()) * bw == ba * u128::from(e.ramped_weight(t))
            };
            if let Some(i) = tier.rotation.pick_from_table(ctx, tied) {
                return Some(i);
            }
            let chosen = smooth_weighted(ctx, &tier.members[pos..], |ctx, j| {
                ctx.candidate(j) && tied(ctx, j)
            });
            if let Some(i) = chosen
                && ctx.acquire(i)
            {
                return Some(i);
            }
        }
        None
    }

    fn shares(&self, _view: &View<'_>, _tier: &Tier, _primary: bool, _out: &mut [f64]) -> bool {
        false
    }
}
