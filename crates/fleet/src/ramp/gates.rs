//! The gates of a ramp's step, from the nodes' own counters (their `/status` and `/metrics`,
//! read by the driving node at the step's start and since): pure arithmetic on counts.

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
    /// The one-sided 95 % lower bound of the increase.
    pub bound: f64,
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
        let se = if n1 == 0 {
            f64::INFINITY
        } else {
            (p1 * (1.0 - p1) / n1 as f64 + p0 * (1.0 - p0) / n0.max(1) as f64).sqrt()
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
            bound: increase - Z_ALPHA * se,
            limit: DETECT.max(p0),
            needed: needed(p0),
        }
    }

    /// The increase is, with 95 % confidence, above the limit.
    pub fn failed(&self) -> bool {
        self.bound > self.limit
    }

    /// A failure of 5 points or more.
    pub fn severe(&self) -> bool {
        self.failed() && self.increase >= SEVERE
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
}
