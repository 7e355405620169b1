//! `least_conn`: fewest active connections per unit of weight (weight 2 with 15 beats weight 1
//! with 10, since 15/2 < 10/1); ties go to the smooth weighted rotation among the tied.
//!
//! As nginx (`ngx_http_upstream_least_conn_module.c`): one pass finds the lowest
//! `active / weight` by cross-multiplication (no division, no rounding) and whether it is tied;
//! if tied, a second pass from the first best onwards runs the smooth rotation over those with
//! the same ratio. With slow start the weight is scaled by the ramp. Active counts are the
//! [`super::Pick`] guards alive: requests/connections in flight, not idle keep-alive ones.

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
            let chosen = if many {
                smooth_weighted(ctx, &tier.members[pos..], |ctx, j| {
                    let e = ctx.ep(j);
                    ctx.candidate(j)
                        && u128::from(e.active()) * bw == ba * u128::from(e.ramped_weight(t))
                })
            } else {
                Some(tier.members[pos] as usize)
            };
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
