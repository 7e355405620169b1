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
        for _ in 0..3 {
            // One pass: candidates, the fastest average, and the sum of scores (the ramps of
            // unmeasured endpoints are summed apart and divided by the fastest average after).
            let mut n = 0usize;
            let mut fastest = f64::INFINITY;
            let (mut measured_sum, mut unmeasured_ramps) = (0.0, 0.0);
            for &m in tier.members.iter() {
                let i = m as usize;
                if ctx.candidate(i) {
                    n += 1;
                    let e = ctx.ep(i);
                    let ramp = e.ramp_milli(t) as f64 / RAMP_SCALE as f64;
                    match e.latency_ns() {
                        Some(avg) => {
                            fastest = fastest.min(avg);
                            measured_sum += ramp / avg;
                        }
                        None => unmeasured_ramps += ramp,
                    }
                }
            }
            if n == 0 {
                return None;
            }
            let unmeasured = if fastest.is_finite() { fastest } else { 1.0 };
            let sum = measured_sum + unmeasured_ramps / unmeasured;
            let score = |e: &EndpointState| {
                e.ramp_milli(t) as f64 / RAMP_SCALE as f64 / e.latency_ns().unwrap_or(unmeasured)
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
