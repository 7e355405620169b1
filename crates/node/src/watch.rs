//! Each endpoint's check state ([`Watch`]): what its health checks (or light probes) found —
//! the verdict machine, the RTT average, the last check — shared by the task that checks it
//! ([`super::checks`]), the planner (the ranking reads the RTTs) and `/status`. It lives in the
//! snapshot, beneath the wings, and a reload carries it for endpoints that stay.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use gtd_core::config::HealthCheck;
use gtd_core::health::rtt::Ewma;
use gtd_core::health::{Check, Rules, Verdict};
use gtd_core::sync::lock;

/// How one check ended, as `gtd_health_checks_total{result}` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckResult {
    /// Passed.
    Passed,
    /// Answered, but not as expected (status, a header or the body).
    Unexpected,
    /// The connection was refused or reset.
    Refused,
    /// No answer in time.
    Timeout,
    /// Anything else: TLS failure, a malformed answer, no address.
    Error,
    /// Not run: this node had no open file, socket memory or local port for it
    /// ([`crate::connect::exhausted`]). Says nothing about the endpoint: no verdict.
    Skipped,
}

impl CheckResult {
    /// Every result, in the order of the counters kept per endpoint.
    pub(crate) const ALL: [CheckResult; 6] = [
        CheckResult::Passed,
        CheckResult::Unexpected,
        CheckResult::Refused,
        CheckResult::Timeout,
        CheckResult::Error,
        CheckResult::Skipped,
    ];

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CheckResult::Passed => "passed",
            CheckResult::Unexpected => "unexpected",
            CheckResult::Refused => "refused",
            CheckResult::Timeout => "timeout",
            CheckResult::Error => "error",
            CheckResult::Skipped => "skipped",
        }
    }

    /// What the verdict machine is told: nothing for a check this node could not run.
    pub(crate) fn check(self) -> Option<Check> {
        match self {
            CheckResult::Passed => Some(Check::Passed),
            CheckResult::Unexpected => Some(Check::Refuted),
            CheckResult::Refused | CheckResult::Timeout | CheckResult::Error => {
                Some(Check::Unanswered)
            }
            CheckResult::Skipped => None,
        }
    }
}

/// One endpoint's check state: shared by the task that checks it, the planner and `/status`.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    pub(crate) state: Mutex<State>,
}

/// What a [`Watch`] knows.
#[derive(Debug, Clone, Default)]
pub(crate) struct State {
    /// The verdict machine; `None` for a group without checks.
    pub(crate) verdict: Option<Verdict>,
    /// Average round trip of the checks (or light probes) that got an answer.
    pub(crate) rtt: Ewma,
    /// The last check's outcome.
    pub(crate) last: Option<Last>,
    /// When the next check is due, so that a reload continues the schedule.
    pub(crate) next_due: Option<tokio::time::Instant>,
}

/// The last check of an endpoint, for `/status`.
#[derive(Debug, Clone)]
pub(crate) struct Last {
    /// When it ended.
    pub(crate) at: SystemTime,
    /// How.
    pub(crate) result: CheckResult,
    /// Why.
    pub(crate) reason: String,
}

impl Watch {
    /// A new endpoint's watch: healthy unless the check is `essential`.
    pub(crate) fn new(check: Option<&HealthCheck>) -> Watch {
        Watch {
            state: Mutex::new(State {
                verdict: check.map(|c| Verdict::new(Rules::from(c))),
                ..State::default()
            }),
        }
    }

    /// The watch of an endpoint that a reload keeps: the same one when its group's check is
    /// unchanged; else its health and RTT under the new rules (a check added starts as a new
    /// endpoint's, one removed leaves it healthy).
    pub(crate) fn carried(
        old: &Arc<Watch>,
        was: Option<&HealthCheck>,
        now: Option<&HealthCheck>,
    ) -> Arc<Watch> {
        if was == now {
            return Arc::clone(old);
        }
        let mut state = old.state();
        state.verdict = match (state.verdict.take(), now) {
            (Some(v), Some(c)) => Some(v.with_rules(Rules::from(c))),
            (None, Some(c)) => Some(Verdict::new(Rules::from(c))),
            (_, None) => None,
        };
        if now.is_none() {
            state.last = None;
        }
        state.next_due = None;
        Arc::new(Watch {
            state: Mutex::new(state),
        })
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// A copy of the state.
    pub(crate) fn state(&self) -> State {
        self.lock().clone()
    }

    /// Whether the checks let the endpoint serve (true without checks).
    pub(crate) fn healthy(&self) -> bool {
        self.lock().verdict.as_ref().is_none_or(Verdict::is_healthy)
    }

    /// The RTT average, ms, and the samples behind it.
    pub(crate) fn rtt(&self) -> (Option<f64>, u64) {
        let s = self.lock();
        (s.rtt.value(), s.rtt.samples())
    }

    /// Drops the RTT average (a reload changed what a sample measures, `rtt_from`).
    pub(crate) fn forget_rtt(&self) {
        self.lock().rtt = Ewma::default();
    }
}
