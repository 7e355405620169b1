//! `feedback`: share proportional to a value each response reports (a header), averaged like
//! `least_time` (EWMA with `factor`), multiplied by the weight and the slow-start ramp.
//!
//! With `inverse = true` the value is a load (CPU, queue depth) and the share is proportional to
//! its reciprocal. An endpoint that has reported nothing yet counts as the best reporter, so it
//! gets traffic and starts reporting. As in `least_time`, every candidate keeps at least
//! `1/(100·N)` of the picks: an endpoint that reported zero capacity would otherwise never be
//! asked again and could never report that it has capacity back.

use super::endpoint::{EndpointState, RAMP_SCALE};
use super::least_time::sample_with_floor;
use super::rng::Rng;
use super::{Ctx, RequestKey, Select, Tier, View};

/// Smallest load an inverse value is divided by (a reported 0 means "idle", not "infinite").
const MIN_LOAD: f64 = 1e-6;

/// The `feedback` method.
#[derive(Debug)]
pub(crate) struct Feedback {
    /// The reported value is a load: lower is better.
    pub(crate) inverse: bool,
}

impl Feedback {
    fn goodness(&self, value: f64) -> f64 {
        if self.inverse {
            1.0 / value.max(MIN_LOAD)
        } else {
            value
        }
    }
}

impl Select for Feedback {
    fn select<K: RequestKey + ?Sized, R: Rng>(
        &self,
        ctx: &mut Ctx<'_, R>,
        _request: &K,
        tier: &Tier,
        _primary: bool,
    ) -> Option<usize> {
        let t = ctx.t;
        let weight = |e: &EndpointState| {
            f64::from(e.config().weight) * (e.ramp_milli(t) as f64 / RAMP_SCALE as f64)
        };
        for _ in 0..3 {
            // One pass: candidates, the best value, and the sum of scores (the ramped weights of
            // endpoints that have not reported are summed apart and scaled by the best after).
            let mut n = 0usize;
            let mut best = f64::NEG_INFINITY;
            let (mut reported_sum, mut unreported_weight) = (0.0, 0.0);
            for &m in tier.members.iter() {
                let i = m as usize;
                if ctx.candidate(i) {
                    n += 1;
                    let e = ctx.ep(i);
                    match e.feedback_value() {
                        Some(v) => {
                            let good = self.goodness(v);
                            best = best.max(good);
                            reported_sum += weight(e) * good;
                        }
                        None => unreported_weight += weight(e),
                    }
                }
            }
            if n == 0 {
                return None;
            }
            let unreported = if best.is_finite() { best } else { 1.0 };
            let sum = reported_sum + unreported_weight * unreported;
            let score = |e: &EndpointState| {
                weight(e) * e.feedback_value().map_or(unreported, |v| self.goodness(v))
            };
            if let Some(i) = sample_with_floor(ctx, &tier.members, n, sum, score)
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
