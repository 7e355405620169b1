//! The verdict of an endpoint's active checks, as a pure state machine (docs/design.md §5): one
//! [`Verdict`] per endpoint, told each check's [`Check`] result, says when the endpoint turns
//! healthy or unhealthy and why. No clock, no I/O: a check is one interval, so "within 20
//! intervals" counts checks, and the machine is tested exhaustively without sockets.
//!
//! - **Thresholds**: `unhealthy_threshold` consecutive failures turn a healthy endpoint
//!   unhealthy; `healthy_threshold` consecutive passes turn an unhealthy one healthy. A result
//!   of the other kind starts the count again.
//! - **`explicit`**: an HTTP answer acts at once — an expected one marks the endpoint healthy,
//!   any other unhealthy — and the thresholds apply only to checks that got no answer
//!   (refused, reset, timed out), as Azure's probes do.
//! - **`essential`**: a new endpoint starts unhealthy and gets traffic only once it has passed
//!   `healthy_threshold` checks; without it endpoints start healthy, also at node start.
//! - **Flap damping**: 3 state changes within 20 checks double the passes needed to turn
//!   healthy (up to 8×); 20 checks without a change bring it back to 1×.

use std::fmt;

use crate::config::HealthCheck;

/// State changes within [`DAMPING_WINDOW`] checks that count as flapping.
pub const FLAPS: usize = 3;
/// The window, in checks, that flapping is counted over, and the quiet checks that end it.
pub const DAMPING_WINDOW: u64 = 20;
/// The most the healthy threshold is multiplied by while an endpoint flaps.
pub const MAX_DAMPING: u32 = 8;

/// The result of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// It passed: connected (TCP), or an answer with the expected status, headers and body.
    Passed,
    /// The endpoint answered, but not as expected (HTTP: status, a header or the body).
    Refuted,
    /// No answer: refused, reset, a TLS failure or a timeout.
    Unanswered,
}

/// A state change and the reason for it, for the log line and `/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// The endpoint's state from now on.
    pub healthy: bool,
    /// Consecutive results that made it (1 for an `explicit` answer).
    pub after: u32,
    /// The result that tipped it.
    pub last: Check,
    /// Whether `explicit` made it act on one answer.
    pub explicit: bool,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.explicit {
            let answer = if self.healthy {
                "expected"
            } else {
                "unexpected"
            };
            return write!(f, "one {answer} answer (explicit)");
        }
        let noun = match (self.healthy, self.after == 1) {
            (true, true) => "pass",
            (true, false) => "passes",
            (false, true) => "failure",
            (false, false) => "failures",
        };
        write!(f, "{} consecutive {noun}", self.after)
    }
}

/// The settings the machine follows, from a group's `health_check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// Consecutive passes to turn healthy (before damping).
    pub healthy_threshold: u32,
    /// Consecutive failures to turn unhealthy.
    pub unhealthy_threshold: u32,
    /// An answer acts at once.
    pub explicit: bool,
    /// A new endpoint starts unhealthy.
    pub essential: bool,
}

impl From<&HealthCheck> for Rules {
    fn from(c: &HealthCheck) -> Rules {
        Rules {
            healthy_threshold: c.healthy_threshold.max(1),
            unhealthy_threshold: c.unhealthy_threshold.max(1),
            explicit: c.explicit,
            essential: c.essential,
        }
    }
}

/// One endpoint's active-check state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    rules: Rules,
    healthy: bool,
    /// Consecutive results against the current state (passes while unhealthy, failures while
    /// healthy).
    streak: u32,
    /// Checks observed so far.
    checks: u64,
    /// The check numbers of the last [`FLAPS`] state changes, oldest first.
    changes: [Option<u64>; FLAPS],
    /// The healthy threshold's multiplier (1, 2, 4 or 8).
    damping: u32,
}

impl Verdict {
    /// A new endpoint's state: unhealthy when `essential`, else healthy.
    pub fn new(rules: Rules) -> Verdict {
        Verdict {
            rules,
            healthy: !rules.essential,
            streak: 0,
            checks: 0,
            changes: [None; FLAPS],
            damping: 1,
        }
    }

    /// The same endpoint under new settings (a reload): its state and counts are kept.
    pub fn with_rules(mut self, rules: Rules) -> Verdict {
        self.rules = rules;
        self
    }

    /// Whether the checks let the endpoint serve.
    pub fn is_healthy(&self) -> bool {
        self.healthy
    }

    /// Passes needed now to turn healthy: the threshold times the damping.
    pub fn passes_needed(&self) -> u32 {
        self.rules.healthy_threshold.saturating_mul(self.damping)
    }

    /// Checks observed so far.
    pub fn checks(&self) -> u64 {
        self.checks
    }

    /// The multiplier flapping has put on the healthy threshold (1 when quiet).
    pub fn damping(&self) -> u32 {
        self.damping
    }

    /// Takes one check's result; returns the change it makes, if any.
    pub fn observe(&mut self, check: Check) -> Option<Change> {
        self.checks += 1;
        self.settle();
        let passed = check == Check::Passed;
        if passed == self.healthy {
            // Agrees with the state: any count towards a change starts again.
            self.streak = 0;
            return None;
        }
        if self.rules.explicit && check != Check::Unanswered {
            return Some(self.flip(check, true));
        }
        self.streak += 1;
        let needed = if self.healthy {
            self.rules.unhealthy_threshold
        } else {
            self.passes_needed()
        };
        (self.streak >= needed).then(|| self.flip(check, false))
    }

    /// Ends the damping after [`DAMPING_WINDOW`] checks without a change.
    fn settle(&mut self) {
        let last = self.changes.iter().rev().flatten().next().copied();
        if self.damping > 1 && last.is_some_and(|at| self.checks - at > DAMPING_WINDOW) {
            self.damping = 1;
        }
    }

    fn flip(&mut self, last: Check, explicit: bool) -> Change {
        let after = if explicit { 1 } else { self.streak };
        self.healthy = !self.healthy;
        self.streak = 0;
        self.changes.rotate_left(1);
        self.changes[FLAPS - 1] = Some(self.checks);
        if let Some(first) = self.changes[0]
            && self.checks - first < DAMPING_WINDOW
        {
            self.damping = (self.damping * 2).min(MAX_DAMPING);
        }
        Change {
            healthy: self.healthy,
            after,
            last,
            explicit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(healthy: u32, unhealthy: u32) -> Rules {
        Rules {
            healthy_threshold: healthy,
            unhealthy_threshold: unhealthy,
            explicit: false,
            essential: false,
        }
    }

    /// Feeds `checks`; the check numbers (1-based) at which the state changed, with the state.
    fn run(v: &mut Verdict, checks: &[Check]) -> Vec<(usize, bool)> {
        checks
            .iter()
            .enumerate()
            .filter_map(|(i, &c)| v.observe(c).map(|ch| (i + 1, ch.healthy)))
            .collect()
    }

    use Check::{Passed as P, Refuted as R, Unanswered as U};

    #[test]
    fn thresholds_count_consecutive_results_exactly() {
        let mut v = Verdict::new(rules(2, 3));
        assert!(
            v.is_healthy(),
            "without essential an endpoint starts healthy"
        );
        // Two failures, a pass (the count starts again), then three failures.
        assert_eq!(run(&mut v, &[U, U, P, U, U]), []);
        assert_eq!(run(&mut v, &[U]), [(1, false)]);
        // One pass, a failure, then two passes.
        assert_eq!(run(&mut v, &[P, U, P]), []);
        assert_eq!(run(&mut v, &[P]), [(1, true)]);
    }

    #[test]
    fn a_threshold_of_one_acts_on_the_first_result() {
        let mut v = Verdict::new(rules(1, 1));
        assert_eq!(run(&mut v, &[R, P, U]), [(1, false), (2, true), (3, false)]);
    }

    #[test]
    fn essential_endpoints_start_unhealthy_until_they_pass() {
        let mut v = Verdict::new(Rules {
            essential: true,
            ..rules(3, 2)
        });
        assert!(!v.is_healthy());
        assert_eq!(run(&mut v, &[P, P, U, P, P]), []);
        assert_eq!(run(&mut v, &[P]), [(1, true)]);
    }

    #[test]
    fn explicit_answers_act_at_once_and_thresholds_count_only_silence() {
        let mut v = Verdict::new(Rules {
            explicit: true,
            ..rules(2, 3)
        });
        // An unexpected answer marks at once; so does the next expected one.
        let change = v.observe(R).expect("marked down");
        assert_eq!((change.healthy, change.explicit), (false, true));
        assert_eq!(change.to_string(), "one unexpected answer (explicit)");
        let change = v.observe(P).expect("marked up");
        assert_eq!(change.to_string(), "one expected answer (explicit)");
        // Timeouts and refusals still need unhealthy_threshold in a row.
        assert_eq!(run(&mut v, &[U, U]), []);
        let change = v.observe(U).expect("three unanswered");
        assert_eq!(change.to_string(), "3 consecutive failures");
    }

    #[test]
    fn flapping_doubles_the_passes_needed_up_to_eight_times_then_quiet_ends_it() {
        let mut v = Verdict::new(rules(1, 1));
        // Three changes within 20 checks: the healthy threshold doubles.
        assert_eq!(run(&mut v, &[U, P, U]).len(), 3);
        assert_eq!(v.damping(), 2);
        assert_eq!(run(&mut v, &[P]), []);
        assert_eq!(run(&mut v, &[P]), [(1, true)]);
        // Each further change inside the window doubles it again, to 8 at most.
        assert_eq!(v.damping(), 4);
        assert_eq!(run(&mut v, &[U]), [(1, false)]);
        assert_eq!(v.damping(), 8);
        assert_eq!(run(&mut v, &[P; 7]), []);
        assert_eq!(run(&mut v, &[P]), [(1, true)]);
        assert_eq!(v.damping(), 8, "never beyond {MAX_DAMPING}x");
        assert_eq!(v.passes_needed(), 8);
        // 20 checks without a change: back to one pass.
        assert_eq!(run(&mut v, &[P; 20]), []);
        assert_eq!(v.damping(), 8);
        assert_eq!(run(&mut v, &[P]), []);
        assert_eq!(v.damping(), 1);
        assert_eq!(run(&mut v, &[U, P]), [(1, false), (2, true)]);
        assert_eq!(v.damping(), 1);
    }

    #[test]
    fn changes_spread_over_more_than_the_window_do_not_damp() {
        let mut v = Verdict::new(rules(1, 1));
        let mut checks = vec![U];
        checks.extend([U; 9]);
        checks.push(P);
        checks.extend([P; 9]);
        checks.push(U);
        // Changes at checks 1, 11 and 21: the first and the third are 20 apart.
        assert_eq!(run(&mut v, &checks), [(1, false), (11, true), (21, false)]);
        assert_eq!(v.damping(), 1);
    }

    #[test]
    fn a_reload_keeps_the_state_under_new_thresholds() {
        let mut v = Verdict::new(rules(2, 3));
        run(&mut v, &[U, U, U]);
        let mut v = v.with_rules(rules(1, 3));
        assert!(!v.is_healthy());
        assert_eq!(run(&mut v, &[P]), [(1, true)]);
    }

    #[test]
    fn the_reason_reads_as_a_log_line() {
        let mut v = Verdict::new(rules(2, 3));
        run(&mut v, &[U, U]);
        assert_eq!(v.observe(U).unwrap().to_string(), "3 consecutive failures");
        v.observe(P);
        assert_eq!(v.observe(P).unwrap().to_string(), "2 consecutive passes");
    }

    proptest::proptest! {
        /// Whatever the results: a change always goes against the state it leaves and is tipped
        /// by a result of its own kind; a non-explicit one needs at least the threshold of such
        /// results in a row (the threshold at least); the damping is 1, 2, 4 or 8.
        #[test]
        fn changes_follow_their_results(
            results in proptest::collection::vec(0u8..3, 0..200),
            healthy in 1u32..5,
            unhealthy in 1u32..5,
            explicit: bool,
            essential: bool,
        ) {
            let mut v = Verdict::new(Rules { healthy_threshold: healthy, unhealthy_threshold: unhealthy, explicit, essential });
            let mut run_of = 0u32;
            for r in results {
                let check = [P, R, U][usize::from(r)];
                let before = v.is_healthy();
                // Damping only ever raises the passes needed (and may end as this check begins).
                let needed = if before { unhealthy } else { healthy };
                run_of = if (check == P) != before { run_of + 1 } else { 0 };
                match v.observe(check) {
                    Some(change) => {
                        proptest::prop_assert_eq!(change.healthy, !before);
                        proptest::prop_assert_eq!(change.healthy, check == P);
                        if !change.explicit {
                            proptest::prop_assert!(run_of >= needed);
                        } else {
                            proptest::prop_assert!(explicit && check != U);
                        }
                        run_of = 0;
                    }
                    None => proptest::prop_assert_eq!(v.is_healthy(), before),
                }
                proptest::prop_assert!([1, 2, 4, 8].contains(&v.damping()));
            }
        }
    }
}
