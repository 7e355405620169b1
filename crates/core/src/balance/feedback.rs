//! `feedback`: share proportional to a value each response reports (a header), averaged like
//! `least_time` (EWMA with `factor`), multiplied by the weight and the slow-start ramp.
//!
//! With `inverse = true` the value is a load (CPU, queue depth) and the share is proportional to
//! its reciprocal. An endpoint that has reported nothing yet counts as the best reporter, so it
//! gets traffic and starts reporting. As in `least_time`, every candidate keeps at least
//! `1/(100·N)` of the picks: an endpoint that reported zero capacity would otherwise never be
//! asked again and could never report that it has capacity back.

use super::endpoint::RAMP_SCALE;
use super::least_time::select_by_goodness;
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
        select_by_goodness(
            ctx,
            tier,
            |e| f64::from(e.config().weight) * (e.ramp_milli(t) as f64 / RAMP_SCALE as f64),
            |e| e.feedback_value().map(|v| self.goodness(v)),
        )
    }

    fn shares(&self, _view: &View<'_>, _tier: &Tier, _primary: bool, _out: &mut [f64]) -> bool {
        false
    }
}
