//! The gates of a ramp's step, from the nodes' own counters (their `/status` and `/metrics`,
//! read by the driving node at the step's start and since): pure arithmetic on counts and
//! histograms.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A group's counts on one node (cumulative since the node started, or a window's
/// difference of two readings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Decisions that chose the group (`/status` `served`).
    pub decisions: u64,
    /// Attempts on its endpoints: HTTP answers of every class and failed connections (TCP and
    /// UDP listeners: its decisions).
    pub attempts: u64,
    /// Failed attempts: 5xx answers and failed connections.
    pub errors: u64,
}

impl Counts {
    /// `self - before`, each field at least 0 (a node that restarted counts from 0 again).
    pub fn since(&self, before: &Counts) -> Counts {
        Counts {
            decisions: self.decisions.saturating_sub(before.decisions),
            attempts: self.attempts.saturating_sub(before.attempts),
            errors: self.errors.saturating_sub(before.errors),
        }
    }

    /// Adds `other`.
    pub fn add(&mut self, other: &Counts) {
        self.decisions += other.decisions;
        self.attempts += other.attempts;
        self.errors += other.errors;
    }

    /// The error rate, 0..=1 (0 with no attempt).
    pub fn rate(&self) -> f64 {
        if self.attempts == 0 {
            0.0
        } else {
            self.errors as f64 / self.attempts as f64
        }
    }
}

/// z of a one-sided 95 % bound.
const Z_ALPHA: f64 = 1.645;
/// z of a one-sided 99.9 % bound: the severe breach, looked for at every look of a step.
const Z_SEVERE: f64 = 3.09;
/// Errors a severe breach needs in the window at least: a couple of unlucky requests at a
/// trickle of traffic is not an outage.
const SEVERE_ERRORS: u64 = 3;
/// z of a power of 0.8.
const Z_BETA: f64 = 0.8416;
/// The smallest increase of the error rate the evidence must be able to detect: 0.5 points.
pub const DETECT: f64 = 0.005;
/// An error increase this large (5 points) is a severe breach: straight back to the start.
pub const SEVERE: f64 = 0.05;

/// The tolerance of the *took* gate, points: max(2 points, 3σ of the binomial of share `p`
/// (percent) at `n` decisions).
pub fn took_tolerance(p: f64, n: u64) -> f64 {
    let q = (p / 100.0).clamp(0.0, 1.0);
    let sigma = if n == 0 {
        f64::INFINITY
    } else {
        (q * (1.0 - q) / n as f64).sqrt() * 100.0
    };
    (3.0 * sigma).max(2.0)
}

/// The attempts a receiving group must see to detect a 0.5-point increase over baseline rate
/// `p0` (one-sided α 0.05, power 0.8).
pub fn needed(p0: f64) -> u64 {
    let p1 = (p0 + DETECT).min(1.0);
    let v = p0 * (1.0 - p0) + p1 * (1.0 - p1);
    ((Z_ALPHA + Z_BETA).powi(2) * v / (DETECT * DETECT)).ceil() as u64
}

/// The *errors* gate of one receiving group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorGate {
    /// `LISTENER/GROUP`.
    pub group: String,
    /// What the baseline is: `its own before the ramp` or `the groups not receiving, same
    /// window`.
    pub against: String,
    /// The baseline rate, 0..=1, and its attempts.
    pub p0: f64,
    /// Attempts behind the baseline.
    pub n0: u64,
    /// The rate in the step's window, 0..=1.
    pub p1: f64,
    /// Attempts in the window.
    pub n1: u64,
    /// Errors in the window.
    pub e1: u64,
    /// The increase, `p1 - p0`.
    pub increase: f64,
    /// The one-sided 95 % lower bound of the increase (Agresti-Caffo: one error and one
    /// success added to each side, so that a window of one failed request is not a certainty).
    pub bound: f64,
    /// The same at 99.9 %, for a severe breach.
    #[serde(default)]
    pub severe_bound: f64,
    /// What the bound is held against: max(0.5 points, the baseline rate).
    pub limit: f64,
    /// Attempts needed to detect a 0.5-point increase.
    pub needed: u64,
}

impl ErrorGate {
    /// Judges `window` against the baseline `base`.
    pub fn judge(group: String, against: String, base: Counts, window: Counts) -> ErrorGate {
        let (p0, n0) = (base.rate(), base.attempts);
        let (p1, n1) = (window.rate(), window.attempts);
        let increase = p1 - p0;
        // Agresti-Caffo: the difference of the rates with one error and one success added to
        // each side. The plain (Wald) interval says a window of one request that failed is an
        // error rate of 100 % with no doubt at all.
        let adjusted = |errors: u64, n: u64| (errors as f64 + 1.0) / (n as f64 + 2.0);
        let (a1, a0) = (adjusted(window.errors, n1), adjusted(base.errors, n0));
        let se = if n1 == 0 {
            f64::INFINITY
        } else {
            (a1 * (1.0 - a1) / (n1 as f64 + 2.0) + a0 * (1.0 - a0) / (n0 as f64 + 2.0)).sqrt()
        };
        ErrorGate {
            group,
            against,
            p0,
            n0,
            p1,
            n1,
            e1: window.errors,
            increase,
            bound: a1 - a0 - Z_ALPHA * se,
            severe_bound: a1 - a0 - Z_SEVERE * se,
            limit: DETECT.max(p0),
            needed: needed(p0),
        }
    }

    /// A failure of the step: a severe breach at any look, or, once the sample is conclusive,
    /// an increase above the limit with 95 % confidence. A window looked at every half
    /// second is one test per look: held to 95 % at each, noise at a trickle of traffic
    /// failed 1.7 % of steps (`one_request_a_second_never_fails_a_step_on_noise`); the
    /// ordinary failure is judged once, on the sample sized for it.
    pub fn failed(&self) -> bool {
        self.severe() || (self.conclusive() && self.above())
    }

    /// The increase is, with 95 % confidence, above the limit, whatever the sample: what a
    /// step that advances on a short sample (`--on-inconclusive proceed`) is held to.
    pub fn above(&self) -> bool {
        self.bound > self.limit
    }

    /// A severe breach: an increase of 5 points or more, above the limit with 99.9 %
    /// confidence, from at least three errors.
    pub fn severe(&self) -> bool {
        self.increase >= SEVERE && self.severe_bound > self.limit && self.e1 >= SEVERE_ERRORS
    }

    /// Enough attempts to have seen a 0.5-point increase.
    pub fn conclusive(&self) -> bool {
        self.n1 >= self.needed
    }

    /// In words, as the ramp's log says it.
    pub fn line(&self) -> String {
        format!(
            "errors {}: {:.2} % of {} attempts ({} failed) against {:.2} % ({} attempts, {}); \
             increase {:+.2} points, 95 % lower bound {:+.2} vs limit {:.2}; sample {}/{} -> {}",
            self.group,
            self.p1 * 100.0,
            self.n1,
            self.e1,
            self.p0 * 100.0,
            self.n0,
            self.against,
            self.increase * 100.0,
            if self.bound.is_finite() {
                self.bound * 100.0
            } else {
                f64::NEG_INFINITY
            },
            self.limit * 100.0,
            self.n1,
            self.needed,
            if self.failed() {
                if self.severe() {
                    "FAIL (severe)"
                } else {
                    "FAIL"
                }
            } else if self.conclusive() {
                "pass"
            } else if self.above() {
                "above the limit on a short sample"
            } else {
                "not enough yet"
            }
        )
    }
}

/// One node's group in the *took* gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Took {
    /// The node's id.
    pub node: String,
    /// `LISTENER/GROUP`.
    pub group: String,
    /// Predicted share, percent.
    pub predicted: f64,
    /// Observed share of the node's new decisions on that listener, percent.
    pub observed: f64,
    /// The listener's decisions on the node in the window.
    pub sample: u64,
    /// Tolerance, points.
    pub tolerance: f64,
}

impl Took {
    /// Observed within tolerance of the prediction.
    pub fn ok(&self) -> bool {
        (self.observed - self.predicted).abs() <= self.tolerance
    }

    /// In words.
    pub fn line(&self) -> String {
        format!(
            "took {} {}: observed {:.2} % of {} decisions, predicted {:.2} % ± {:.2} -> {}",
            self.node,
            self.group,
            self.observed,
            self.sample,
            self.predicted,
            self.tolerance,
            if self.ok() { "pass" } else { "FAIL" }
        )
    }
}

/// A response-time histogram (`gtd_upstream_response_seconds`, one group on one node): per
/// upper bound (seconds, finite, increasing) the samples at or below it, cumulative as
/// Prometheus writes them, and the count of all (the `+Inf` bucket).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// `(upper bound, cumulative count)`, increasing bounds.
    pub buckets: Vec<(f64, u64)>,
    /// Every sample (the `+Inf` bucket).
    pub count: u64,
}

impl Latency {
    /// The samples at or below `le`: the cumulative count of the largest bound not above it.
    fn at(&self, le: f64) -> u64 {
        self.buckets
            .iter()
            .take_while(|(b, _)| *b <= le)
            .last()
            .map_or(0, |b| b.1)
    }

    /// `self - before`, bucket by bucket; a node that restarted (fewer samples than before)
    /// counts from 0 again: all it has is since.
    pub fn since(&self, before: &Latency) -> Latency {
        if self.count < before.count {
            return self.clone();
        }
        Latency {
            buckets: self
                .buckets
                .iter()
                .map(|&(le, c)| (le, c.saturating_sub(before.at(le))))
                .collect(),
            count: self.count - before.count,
        }
    }

    /// Adds `other` (its bounds merged with these).
    pub fn add(&mut self, other: &Latency) {
        let mut bounds: Vec<f64> = self
            .buckets
            .iter()
            .chain(&other.buckets)
            .map(|b| b.0)
            .collect();
        bounds.sort_by(f64::total_cmp);
        bounds.dedup();
        self.buckets = bounds
            .into_iter()
            .map(|le| (le, self.at(le) + other.at(le)))
            .collect();
        self.count += other.count;
    }

    /// The `q` quantile, seconds, by Prometheus' `histogram_quantile` rule: the bucket holding
    /// rank `q × count`, linear within it (the first bucket from 0); in the `+Inf` bucket, the
    /// largest finite bound. `None` without a sample.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = q * self.count as f64;
        let (mut lo, mut below) = (0.0, 0u64);
        for &(le, c) in &self.buckets {
            if c as f64 >= rank {
                if c == below {
                    return Some(lo);
                }
                return Some(lo + (le - lo) * (rank - below as f64) / (c - below) as f64);
            }
            (lo, below) = (le, c);
        }
        Some(lo)
    }

    /// The p99, ms (0 without a sample).
    pub fn p99_ms(&self) -> f64 {
        self.quantile(0.99).map_or(0.0, |s| s * 1000.0)
    }
}

/// The samples the *latency* gate needs in a window before it judges: 1,000.
pub const LATENCY_SAMPLES: u64 = 1000;
/// The least a baseline is taken from before the ramp's groups that do not receive it are
/// left for all the listener's groups: 100 samples.
const BASELINE_LEAST: u64 = 100;

/// The *latency* gate of one receiving group on one node: its upstream p99 in the window
/// against the p99 the move should cause there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyGate {
    /// The node's id.
    pub node: String,
    /// `LISTENER/GROUP`.
    pub group: String,
    /// The groups the baseline is from, in words.
    pub against: String,
    /// Their p99 before the ramp, ms (0 without a sample).
    pub baseline_ms: f64,
    /// Samples behind it.
    pub baseline_samples: u64,
    /// The node's measured RTT to the group minus its RTT to the baseline's groups (when the
    /// ramp began), ms, at least 0.
    pub rtt_ms: f64,
    /// What the move should cause: `baseline_ms + rtt_ms`.
    pub expected_ms: f64,
    /// What the p99 is held against: 1.5 × expected + 50 ms.
    pub limit_ms: f64,
    /// The group's p99 in the window, ms (0 without a sample).
    pub observed_ms: f64,
    /// Responses in the window.
    pub samples: u64,
}

impl LatencyGate {
    /// Judges `window` against `baseline` moved by `rtt_difference_ms` (clamped at 0).
    pub fn judge(
        node: String,
        group: String,
        against: String,
        baseline: &Latency,
        rtt_difference_ms: f64,
        window: &Latency,
    ) -> LatencyGate {
        let baseline_ms = baseline.p99_ms();
        let rtt_ms = rtt_difference_ms.max(0.0);
        let expected_ms = baseline_ms + rtt_ms;
        LatencyGate {
            node,
            group,
            against,
            baseline_ms,
            baseline_samples: baseline.count,
            rtt_ms,
            expected_ms,
            limit_ms: 1.5 * expected_ms + 50.0,
            observed_ms: window.p99_ms(),
            samples: window.count,
        }
    }

    /// Enough samples to judge.
    pub fn judged(&self) -> bool {
        self.samples >= LATENCY_SAMPLES
    }

    /// Judged, and the p99 above the limit.
    pub fn failed(&self) -> bool {
        self.judged() && self.observed_ms > self.limit_ms
    }

    /// Above the limit on fewer samples than it judges: the step may not pass on it yet
    /// (it waits for the samples, as for a short errors sample).
    pub fn pending(&self) -> bool {
        !self.judged() && self.samples > 0 && self.observed_ms > self.limit_ms
    }

    /// In words.
    pub fn line(&self) -> String {
        format!(
            "latency {} {}: p99 {:.1} ms of {} responses, expected {:.1} ms (p99 {:.1} ms of \
             {} before the ramp, {} + RTT {:+.1} ms), limit {:.1} ms -> {}",
            self.node,
            self.group,
            self.observed_ms,
            self.samples,
            self.expected_ms,
            self.baseline_ms,
            self.baseline_samples,
            self.against,
            self.rtt_ms,
            self.limit_ms,
            if self.pending() {
                format!(
                    "over the limit, not judged yet: {} of {LATENCY_SAMPLES} samples",
                    self.samples
                )
            } else if !self.judged() {
                format!("not judged: {} of {LATENCY_SAMPLES} samples", self.samples)
            } else if self.failed() {
                "FAIL".to_owned()
            } else {
                "pass".to_owned()
            }
        )
    }
}

/// What a node's reading holds beyond its [`Counts`]: per `LISTENER/GROUP` its response-time
/// histogram and its measured RTT (ms), per `LISTENER/GROUP/ENDPOINT` what it served.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// `gtd_upstream_response_seconds` per group.
    #[serde(default)]
    pub latency: BTreeMap<String, Latency>,
    /// `/status` `rtt_ms` per group (groups with none left out).
    #[serde(default)]
    pub rtt_ms: BTreeMap<String, f64>,
    /// `/status` `served` per endpoint.
    #[serde(default)]
    pub served: BTreeMap<String, u64>,
}

/// The latency gates of node `node`: one per group of `receiving` the node knows. `before`
/// is its reading when the ramp began, `start` at the window's start, `now` now. The
/// baseline is the p99 before the ramp of the listener's groups that do not receive (all its
/// groups when those had fewer than 100 samples); the RTT difference is the group's RTT minus
/// the baseline groups' (weighted by their samples), both as measured when the ramp began.
pub fn latency_gates(
    node: &str,
    receiving: &[String],
    before: &Timing,
    start: &Timing,
    now: &Timing,
) -> Vec<LatencyGate> {
    let mut out = Vec::new();
    for g in receiving {
        if !now.latency.contains_key(g) && !before.rtt_ms.contains_key(g) {
            continue;
        }
        let listener = g.split_once('/').map_or("", |x| x.0);
        let of_listener: Vec<&String> = before
            .latency
            .keys()
            .chain(before.rtt_ms.keys())
            .filter(|k| k.split_once('/').is_some_and(|x| x.0 == listener))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let sum = |groups: &[&String]| {
            let mut l = Latency::default();
            for k in groups {
                if let Some(h) = before.latency.get(*k) {
                    l.add(h);
                }
            }
            l
        };
        let others: Vec<&String> = of_listener
            .iter()
            .copied()
            .filter(|k| !receiving.contains(k))
            .collect();
        let mut base_groups = others;
        let mut base = sum(&base_groups);
        if base.count < BASELINE_LEAST {
            base_groups = of_listener;
            base = sum(&base_groups);
        }
        let rtt = rtt_of(before, &base_groups);
        let difference = match (before.rtt_ms.get(g), rtt) {
            (Some(to), Some(from)) => to - from,
            _ => 0.0,
        };
        let empty = Latency::default();
        let window = now
            .latency
            .get(g)
            .unwrap_or(&empty)
            .since(start.latency.get(g).unwrap_or(&empty));
        let names: Vec<&str> = base_groups.iter().map(|s| s.as_str()).collect();
        out.push(LatencyGate::judge(
            node.to_owned(),
            g.clone(),
            if names.is_empty() {
                "no group".to_owned()
            } else {
                names.join(", ")
            },
            &base,
            difference,
            &window,
        ));
    }
    out
}

/// The RTT of `groups`, ms, weighted by their samples in `before` (equally when they had
/// none); `None` when none has one.
fn rtt_of(before: &Timing, groups: &[&String]) -> Option<f64> {
    let known: Vec<(f64, u64)> = groups
        .iter()
        .filter_map(|g| {
            let r = before.rtt_ms.get(*g)?;
            Some((*r, before.latency.get(*g).map_or(0, |l| l.count)))
        })
        .collect();
    if known.is_empty() {
        return None;
    }
    let weight: u64 = known.iter().map(|k| k.1).sum();
    Some(if weight == 0 {
        known.iter().map(|k| k.0).sum::<f64>() / known.len() as f64
    } else {
        known.iter().map(|k| k.0 * k.1 as f64).sum::<f64>() / weight as f64
    })
}

/// The *saturation* gate of one receiving group or endpoint with a configured `capacity`:
/// what the judged nodes sent it per second in the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Saturation {
    /// `LISTENER/GROUP` or `LISTENER/GROUP/ENDPOINT`.
    pub name: String,
    /// Its `capacity` in the new config (the unit of `[demand]`, read per second).
    pub capacity: f64,
    /// Decisions (a group) or requests and connections served (an endpoint) in the window,
    /// summed over the judged nodes.
    pub served: u64,
    /// The window, seconds.
    pub seconds: f64,
    /// `served / seconds`.
    pub rate: f64,
}

impl Saturation {
    /// Above its capacity.
    pub fn failed(&self) -> bool {
        self.rate > self.capacity
    }

    /// In words.
    pub fn line(&self) -> String {
        format!(
            "saturation {}: {:.1}/s ({} in {:.1} s, the judged nodes) vs capacity {} -> {}",
            self.name,
            self.rate,
            self.served,
            self.seconds,
            self.capacity,
            if self.failed() { "FAIL" } else { "pass" }
        )
    }
}

/// The saturation gates: every name of `capacity` against what `served` says it took in
/// `seconds` (a window shorter than a second is not judged: none).
pub fn saturation(
    capacity: &BTreeMap<String, f64>,
    served: &BTreeMap<String, u64>,
    seconds: f64,
) -> Vec<Saturation> {
    if seconds < 1.0 {
        return Vec::new();
    }
    capacity
        .iter()
        .map(|(name, &cap)| {
            let s = served.get(name).copied().unwrap_or(0);
            Saturation {
                name: name.clone(),
                capacity: cap,
                served: s,
                seconds,
                rate: s as f64 / seconds,
            }
        })
        .collect()
}

/// Every gate of one look at a step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Judged {
    /// *took*, per node and group.
    pub took: Vec<Took>,
    /// *errors*, per receiving group.
    pub errors: Vec<ErrorGate>,
    /// *latency*, per node and receiving group.
    pub latency: Vec<LatencyGate>,
    /// *saturation*, per receiving group and endpoint with a capacity.
    pub saturation: Vec<Saturation>,
    /// Nodes that did not apply the step.
    pub lagging: Vec<String>,
}

impl Judged {
    /// Every gate's line, as the log says them.
    pub fn figures(&self) -> String {
        let mut lines: Vec<String> = self.took.iter().map(Took::line).collect();
        lines.extend(self.errors.iter().map(ErrorGate::line));
        lines.extend(self.latency.iter().map(LatencyGate::line));
        if self.saturation.is_empty() {
            lines.push(
                "saturation: not judged (no receiving group or endpoint has a capacity)".to_owned(),
            );
        }
        lines.extend(self.saturation.iter().map(Saturation::line));
        lines.join("\n  ")
    }

    /// The verdict of a step that passed, in a line (said in the next revision's message).
    pub fn summary(&self, step: usize) -> String {
        let gap = self
            .took
            .iter()
            .map(|t| (t.observed - t.predicted).abs())
            .fold(0.0, f64::max);
        let errs: Vec<String> = self
            .errors
            .iter()
            .map(|g| {
                format!(
                    "{} {:+.2} points at {} attempts",
                    g.group,
                    g.increase * 100.0,
                    g.n1
                )
            })
            .collect();
        let judged: Vec<&LatencyGate> = self.latency.iter().filter(|g| g.judged()).collect();
        let latency = match judged
            .iter()
            .max_by(|a, b| (a.observed_ms / a.limit_ms).total_cmp(&(b.observed_ms / b.limit_ms)))
        {
            Some(w) => format!(
                "latency p99 at most {:.0} % of its limit ({} {} {:.1} ms of {:.1})",
                w.observed_ms * 100.0 / w.limit_ms,
                w.node,
                w.group,
                w.observed_ms,
                w.limit_ms
            ),
            None => "latency not judged (under 1000 samples)".to_owned(),
        };
        let saturation = match self
            .saturation
            .iter()
            .max_by(|a, b| (a.rate / a.capacity).total_cmp(&(b.rate / b.capacity)))
        {
            Some(s) => format!(
                "saturation at most {:.1} % of capacity ({})",
                s.rate * 100.0 / s.capacity,
                s.name
            ),
            None => "saturation not configured".to_owned(),
        };
        format!(
            "step {step} passed: took within tolerance (largest gap {gap:.2} points), errors {}, \
             {latency}, {saturation}",
            if errs.is_empty() {
                "none receiving".to_owned()
            } else {
                errs.join(", ")
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_needed_and_the_bounds() {
        // At a 0 baseline: about 1,230 attempts to see half a point.
        let n = needed(0.0);
        assert!((1200..1260).contains(&n), "{n}");
        assert!(needed(0.02) > n);
        assert_eq!(took_tolerance(50.0, 100), 15.0);
        assert_eq!(took_tolerance(50.0, 1_000_000), 2.0);
        let c = |attempts, errors| Counts {
            decisions: attempts,
            attempts,
            errors,
        };
        // 10 % errors over 300 attempts against a clean baseline: a severe failure.
        let g = ErrorGate::judge("w/a".into(), "own".into(), c(10_000, 0), c(300, 30));
        assert!(g.failed() && g.severe(), "{}", g.line());
        // 1 error in 50 at a clean baseline: not a failure, not conclusive.
        let g = ErrorGate::judge("w/a".into(), "own".into(), c(10_000, 0), c(50, 1));
        assert!(!g.failed() && !g.conclusive(), "{}", g.line());
        // A clean window of 2,000: conclusive, a pass.
        let g = ErrorGate::judge("w/a".into(), "own".into(), c(10_000, 10), c(2_000, 1));
        assert!(!g.failed() && g.conclusive(), "{}", g.line());
        // No attempt: never a failure.
        let g = ErrorGate::judge("w/a".into(), "own".into(), c(0, 0), c(0, 0));
        assert!(!g.failed() && !g.conclusive());
    }

    /// Uniform numbers in [0, 1), a fixed stream per seed (xorshift64*).
    fn seeded(seed: u64) -> impl FnMut() -> f64 {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        move || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1_u64 << 53) as f64
        }
    }

    /// Issue 38: at 1 request a second the errors gate holds and never fails a step on noise.
    /// The receiving group and the others fail 1 % of requests alike; each step's window is
    /// looked at every second from --min-wait (60 s) to --max-wait (15 min), as the driving
    /// node does (it looks every half second; counts change once a request). 2,000 seeded runs
    /// of the first four steps (1, 5, 20 and 50 % to the receiving group; at 100 % its
    /// baseline is its own from the steps before).
    #[test]
    fn one_request_a_second_never_fails_a_step_on_noise() {
        let mut failures = Vec::new();
        let mut looks = 0_u64;
        for seed in 0..2_000_u64 {
            let mut uniform = seeded(seed);
            for share in [0.01, 0.05, 0.20, 0.50] {
                let (mut receiving, mut others) = (Counts::default(), Counts::default());
                for second in 1..=900_u64 {
                    let failed = uniform() < 0.01;
                    let to = if uniform() < share {
                        &mut receiving
                    } else {
                        &mut others
                    };
                    to.add(&Counts {
                        decisions: 1,
                        attempts: 1,
                        errors: u64::from(failed),
                    });
                    if second < 60 {
                        continue;
                    }
                    looks += 1;
                    let g = ErrorGate::judge("w/b".into(), "others".into(), others, receiving);
                    if g.failed() {
                        failures.push(format!(
                            "seed {seed} share {share} at {second} s: {}",
                            g.line()
                        ));
                        break;
                    }
                    if g.conclusive() {
                        break;
                    }
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{} of 8,000 steps failed on noise ({looks} looks), e.g.:\n{}",
            failures.len(),
            failures[..failures.len().min(5)].join("\n")
        );
    }

    /// The other side of the same rule: at 1 request a second, a receiving group that fails
    /// half its requests at the 5 % step (45 requests in 15 minutes) is a severe breach in
    /// nearly every seeded run, from a handful of its requests.
    #[test]
    fn one_request_a_second_still_sees_an_outage() {
        let (mut caught, mut requests) = (0, Vec::new());
        for seed in 0..500_u64 {
            let mut uniform = seeded(seed);
            let (mut receiving, mut others) = (Counts::default(), Counts::default());
            for second in 1..=900_u64 {
                let to_receiving = uniform() < 0.05;
                let failed = uniform() < if to_receiving { 0.5 } else { 0.01 };
                let one = Counts {
                    decisions: 1,
                    attempts: 1,
                    errors: u64::from(failed),
                };
                if to_receiving {
                    receiving.add(&one);
                } else {
                    others.add(&one);
                }
                if second >= 60
                    && ErrorGate::judge("w/b".into(), "others".into(), others, receiving).severe()
                {
                    caught += 1;
                    requests.push(receiving.attempts);
                    break;
                }
            }
        }
        requests.sort_unstable();
        assert!(caught >= 475, "{caught} of 500 caught");
        // Half the runs caught it within 12 of the group's requests.
        assert!(requests[requests.len() / 2] <= 12, "{requests:?}");
    }

    /// Buckets by upper bound, seconds: cumulative counts.
    fn hist(buckets: &[(f64, u64)], count: u64) -> Latency {
        Latency {
            buckets: buckets.to_vec(),
            count,
        }
    }

    #[test]
    fn a_quantile_is_read_as_prometheus_reads_it() {
        // 500 at or below 25 ms, the other 500 in (25, 50] ms: rank 990 is 490 of the 500
        // in that bucket: 25 + 25 × 490/500 = 49.5 ms.
        let h = hist(&[(0.01, 0), (0.025, 500), (0.05, 1000), (0.1, 1000)], 1000);
        assert!((h.p99_ms() - 49.5).abs() < 1e-9, "{}", h.p99_ms());
        // The median is the 25 ms bucket's top: 10 + 15 × 500/500.
        assert!((h.quantile(0.5).unwrap() - 0.025).abs() < 1e-12);
        // The first bucket starts at 0: 1 ms × 50/100.
        let h = hist(&[(0.001, 100)], 100);
        assert!((h.quantile(0.5).unwrap() - 0.0005).abs() < 1e-12);
        // In the +Inf bucket: the largest finite bound.
        assert_eq!(hist(&[(0.1, 10)], 100).quantile(0.99), Some(0.1));
        assert_eq!(Latency::default().quantile(0.99), None);
        assert_eq!(Latency::default().p99_ms(), 0.0);
    }

    #[test]
    fn a_histogram_window_is_a_difference_and_windows_add() {
        let now = hist(&[(0.01, 50), (0.05, 150)], 160);
        let before = hist(&[(0.01, 20), (0.05, 100)], 100);
        assert_eq!(now.since(&before), hist(&[(0.01, 30), (0.05, 50)], 60));
        // A node that restarted: all it has is since.
        assert_eq!(now.since(&hist(&[(0.01, 20)], 200)), now);
        let mut sum = before.clone();
        sum.add(&now);
        assert_eq!(sum, hist(&[(0.01, 70), (0.05, 250)], 260));
        let mut sum = Latency::default();
        sum.add(&now);
        assert_eq!(sum, now);
    }

    #[test]
    fn the_latency_gate_allows_for_a_farther_group() {
        // Baseline: 1,000 samples, 990 at or below 2 ms: p99 2 ms.
        let base = hist(&[(0.001, 500), (0.002, 990), (0.005, 1000)], 1000);
        assert!((base.p99_ms() - 2.0).abs() < 1e-9);
        // The window: 1,000 responses in (25, 50] ms, p99 49.75 ms.
        let far = hist(&[(0.025, 0), (0.05, 1000)], 1000);
        let g = LatencyGate::judge(
            "n".into(),
            "web/a".into(),
            "web/b".into(),
            &base,
            40.0,
            &far,
        );
        // Expected 2 + 40 = 42 ms, limit 1.5 × 42 + 50 = 113 ms.
        assert!((g.expected_ms - 42.0).abs() < 1e-9, "{}", g.line());
        assert!((g.limit_ms - 113.0).abs() < 1e-9, "{}", g.line());
        assert!((g.observed_ms - 49.75).abs() < 1e-9, "{}", g.line());
        assert!(g.judged() && !g.failed(), "{}", g.line());
        assert!(g.line().ends_with("-> pass"), "{}", g.line());
        // 300 ms slower: p99 250 + 250 × 990/1000 = 497.5 ms, above the limit.
        let slow = hist(&[(0.25, 0), (0.5, 1000)], 1000);
        let g = LatencyGate::judge(
            "n".into(),
            "web/a".into(),
            "web/b".into(),
            &base,
            40.0,
            &slow,
        );
        assert!((g.observed_ms - 497.5).abs() < 1e-9, "{}", g.line());
        assert!(g.failed(), "{}", g.line());
        // The same at 999 samples: not judged, but the step may not pass on it yet.
        let short = hist(&[(0.25, 0), (0.5, 999)], 999);
        let judge = |w: &Latency| {
            LatencyGate::judge("n".into(), "web/a".into(), "web/b".into(), &base, 40.0, w)
        };
        let g = judge(&short);
        assert!(!g.failed() && !g.judged() && g.pending(), "{}", g.line());
        let end = "over the limit, not judged yet: 999 of 1000 samples";
        assert!(g.line().ends_with(end), "{}", g.line());
        // Within the limit at 999: not judged, nothing pending.
        let g = judge(&hist(&[(0.025, 0), (0.05, 999)], 999));
        assert!(!g.failed() && !g.pending(), "{}", g.line());
        assert!(
            g.line().ends_with("not judged: 999 of 1000 samples"),
            "{}",
            g.line()
        );
        // A nearer group is no credit: the RTT difference is at least 0 (2 × 1.5 + 50).
        let g = LatencyGate::judge(
            "n".into(),
            "web/a".into(),
            "web/b".into(),
            &base,
            -30.0,
            &far,
        );
        assert_eq!((g.rtt_ms, g.limit_ms), (0.0, 53.0));
    }

    #[test]
    fn a_nodes_latency_gates_take_the_losing_groups_as_baseline() {
        let mut before = Timing::default();
        // web/b loses the traffic: 1,000 samples, p99 2 ms, RTT 1 ms; web/a receives, RTT
        // 41 ms; other/x is another listener's.
        before.latency.insert(
            "web/b".into(),
            hist(&[(0.001, 500), (0.002, 990), (0.005, 1000)], 1000),
        );
        before
            .latency
            .insert("web/a".into(), hist(&[(0.05, 10)], 10));
        before
            .latency
            .insert("other/x".into(), hist(&[(1.0, 5000)], 5000));
        before.rtt_ms.insert("web/a".into(), 41.0);
        before.rtt_ms.insert("web/b".into(), 1.0);
        let start = before.clone();
        let mut now = before.clone();
        now.latency
            .insert("web/a".into(), hist(&[(0.025, 10), (0.05, 1010)], 1010));
        let g = latency_gates("n", &["web/a".to_owned()], &before, &start, &now);
        assert_eq!(g.len(), 1);
        let g = &g[0];
        assert_eq!(
            (g.against.as_str(), g.samples),
            ("web/b", 1000),
            "{}",
            g.line()
        );
        assert!((g.rtt_ms - 40.0).abs() < 1e-9, "{}", g.line());
        assert!((g.expected_ms - 42.0).abs() < 1e-9, "{}", g.line());
        assert!(!g.failed(), "{}", g.line());
        // With under 100 samples from the losing groups, all the listener's groups: web/a's
        // 10 and web/b's 50; RTTs weighted 10:50, (41 × 10 + 1 × 50) / 60 = 7.67 ms.
        before
            .latency
            .insert("web/b".into(), hist(&[(0.001, 50)], 50));
        let g = latency_gates("n", &["web/a".to_owned()], &before, &start, &now);
        assert_eq!(g[0].against, "web/a, web/b");
        assert!(
            (g[0].rtt_ms - (41.0 - 460.0 / 60.0)).abs() < 1e-9,
            "{}",
            g[0].line()
        );
        // A group the node does not know: no gate.
        assert!(latency_gates("n", &["udp/z".to_owned()], &before, &start, &now).is_empty());
    }

    #[test]
    fn saturation_is_the_window_rate_against_the_capacity() {
        let cap = BTreeMap::from([("web/a".to_owned(), 100.0), ("web/a/x:1".to_owned(), 50.0)]);
        let served = BTreeMap::from([("web/a".to_owned(), 450), ("web/a/x:1".to_owned(), 260)]);
        let s = saturation(&cap, &served, 5.0);
        // 450 in 5 s: 90/s of 100, a pass; the endpoint 52/s of 50, a failure.
        assert_eq!(s.len(), 2);
        assert!(
            !s[0].failed() && (s[0].rate - 90.0).abs() < 1e-9,
            "{}",
            s[0].line()
        );
        assert!(s[1].failed(), "{}", s[1].line());
        // Nothing configured, or a window under a second: no gate.
        assert!(saturation(&BTreeMap::new(), &served, 5.0).is_empty());
        assert!(saturation(&cap, &served, 0.5).is_empty());
    }
}
