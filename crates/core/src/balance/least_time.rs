//! `least_time`: probability inversely proportional to an EWMA of response time.
//!
//! What is timed depends on the listener (`measure`): HTTP `header` (default) or `last_byte`;
//! TCP/UDP `connect` (default), `first_byte` or `last_byte`. Each sample updates
//! `avg = factor * avg + (1 - factor) * sample` (`factor` 0.9 by default).
//!
//! Each candidate's score is `1 / avg` (times the slow-start ramp). An endpoint with no sample
//! yet counts as the fastest measured one, so a new endpoint is tried rather than starved.
//! Every candidate keeps at least `1/(100·N)` of the picks: the shares `score / sum` are raised
//! to that floor and renormalised. Without the floor a slow or hung endpoint would get no
//! traffic, produce no new samples and never show that it recovered; with it, a few requests
//! keep probing it and its average follows its real speed.

use crate::config::{Measure, Protocol};

use super::endpoint::{EndpointState, RAMP_SCALE};
use super::rng::Rng;
use super::{Ctx, RequestKey, Select, Tier, View};

/// The `least_time` method.
#[derive(Debug)]
pub(crate) struct LeastTime;

/// The measure a listener of `protocol` can report: HTTP listeners time `header`/`last_byte`,
/// stream listeners `connect`/`first_byte`/`last_byte`; anything else falls back to the
/// protocol's default (validation rejects such configs, this only keeps the balancer total).
pub(crate) fn normalise_measure(measure: Measure, protocol: Protocol) -> Measure {
    match (protocol.is_http(), measure) {
        (true, Measure::Header | Measure::LastByte) => measure,
        (true, _) => Measure::Header,
        (false, Measure::Connect | Measure::FirstByte | Measure::LastByte) => measure,
        (false, _) => Measure::Connect,
    }
}

impl Select for LeastTime {
    fn select<K: RequestKey + ?Sized, R: Rng>(
        &self,
        ctx: &mut Ctx<'_, R>,
        _request: &K,
        tier: &Tier,
        _primary: bool,
    ) -> Option<usize> {
        let t = ctx.t;
        // Faster is better: goodness 1/avg, times the slow-start ramp.
        select_by_goodness(
            ctx,
            tier,
            |e| e.ramp_milli(t) as f64 / RAMP_SCALE as f64,
            |e| e.latency_ns().map(|avg| 1.0 / avg),
        )
    }

    fn shares(&self, _view: &View<'_>, _tier: &Tier, _primary: bool, _out: &mut [f64]) -> bool {
        false
    }
}

/// The selection `least_time` and `feedback` share: each candidate scores
/// `weight(e) * goodness(e)`, an endpoint with no goodness yet (never measured / never reported)
/// counts as the best one, and the draw keeps every candidate at the 1/(100·N) floor
/// ([`sample_with_floor`]). Up to three draws when the drawn endpoint is taken meanwhile.
pub(crate) fn select_by_goodness<R: Rng>(
    ctx: &mut Ctx<'_, R>,
    tier: &Tier,
    weight: impl Fn(&EndpointState) -> f64,
    goodness: impl Fn(&EndpointState) -> Option<f64>,
) -> Option<usize> {
    for _ in 0..3 {
        // One pass: candidates, the best goodness, and the sum of scores (the weights of
        // endpoints without a goodness are summed apart and scaled by the best after).
        let mut n = 0usize;
        let mut best = f64::NEG_INFINITY;
        let (mut known_sum, mut unknown_weight) = (0.0, 0.0);
        for &m in tier.members.iter() {
            let i = m as usize;
            if ctx.candidate(i) {
                n += 1;
                let e = ctx.ep(i);
                match goodness(e) {
                    Some(g) => {
                        best = best.max(g);
                        known_sum += weight(e) * g;
                    }
                    None => unknown_weight += weight(e),
                }
            }
        }
        if n == 0 {
            return None;
        }
        let unknown = if best.is_finite() { best } else { 1.0 };
        let sum = known_sum + unknown_weight * unknown;
        let score = |e: &EndpointState| weight(e) * goodness(e).unwrap_or(unknown);
        if let Some(i) = sample_with_floor(ctx, &tier.members, n, sum, score)
            && ctx.acquire(i)
        {
            return Some(i);
        }
    }
    None
}

/// Draws one of the `n` candidates among `members` with probability proportional to
/// `max(score, sum / (100 n))`, `sum` being the candidates' total score: each candidate keeps at
/// least 1/(100·N) of the picks before renormalisation. Shared by `least_time` and `feedback`.
///
/// The exact total of the floored scores would take another pass. Instead the draw is made
/// against `sum + n * floor`, which is at least that total and exceeds it by at most
/// `n * floor = sum / 100`; a draw landing in that slack is repeated (rejection sampling), so
/// the distribution stays exact and a pick costs one walk 99% of the time or more.
pub(crate) fn sample_with_floor<R: Rng>(
    ctx: &mut Ctx<'_, R>,
    members: &[u32],
    n: usize,
    sum: f64,
    score: impl Fn(&EndpointState) -> f64,
) -> Option<usize> {
    let floor = sum / (100.0 * n as f64);
    let bound = sum + n as f64 * floor;
    let mut last = None;
    if bound > 0.0 && bound.is_finite() {
        for _ in 0..8 {
            let mut u = ctx.rng.next_f64() * bound;
            for &m in members {
                let i = m as usize;
                if !ctx.candidate(i) {
                    continue;
                }
                let w = score(ctx.ep(i)).max(floor);
                if u < w {
                    return Some(i);
                }
                u -= w;
                last = Some(i);
            }
        }
        // Eight draws in the slack (under 1e-16 likely): take the last candidate.
        return last;
    }
    // Every score is zero (or degenerate): uniform among the candidates.
    let k = ctx.rng.below(n as u64) as usize;
    members
        .iter()
        .map(|&m| m as usize)
        .filter(|&i| ctx.candidate(i))
        .nth(k)
}
