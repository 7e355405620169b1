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
        for _ in 0..3 {
            let mut n = 0usize;
            let mut best = f64::NEG_INFINITY;
            for &m in tier.members.iter() {
                if ctx.candidate(m as usize) {
                    n += 1;
                    if let Some(v) = ctx.ep(m as usize).feedback_value() {
                        best = best.max(self.goodness(v));
                    }
                }
            }
            if n == 0 {
                return None;
            }
            let unreported = if best.is_finite() { best } else { 1.0 };
            let score = |e: &EndpointState| {
                let good = e.feedback_value().map_or(unreported, |v| self.goodness(v));
                f64::from(e.config().weight) * (e.ramp_milli(t) as f64 / RAMP_SCALE as f64) * good
            };
            if let Some(i) = sample_with_floor(ctx, &tier.members, n, score)
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
