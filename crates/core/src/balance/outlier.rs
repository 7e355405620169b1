//! An endpoint's outlier state as atomics: the two streaks, when its ejection ends, how many
//! ejections it has had. The rules are [`crate::health::outlier`]'s; this only stores what they
//! decide, for every thread at once. `t` is nanoseconds since the lineage's epoch, passed in.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::config::Outlier;
use crate::health::outlier::{Answer, Streaks, ejection_number, ejection_time};

/// One endpoint's streaks and ejection.
#[derive(Debug, Default)]
pub(crate) struct Ejection {
    server_errors: AtomicU32,
    gateway_failures: AtomicU32,
    /// When the current (or last) ejection ends; 0: never ejected.
    until: AtomicU64,
    /// The number of the current (or last) ejection, as [`ejection_number`] counts.
    number: AtomicU32,
    /// Ejections since the endpoint was created (for `/status` and the operator).
    total: AtomicU64,
}

impl Ejection {
    /// Ejected at `t`.
    pub(crate) fn ejected(&self, t: u64) -> bool {
        t < self.until.load(Ordering::Relaxed)
    }

    /// What is left of the ejection at `t`, if any.
    pub(crate) fn remaining(&self, t: u64) -> Option<Duration> {
        let until = self.until.load(Ordering::Acquire);
        (t < until).then(|| Duration::from_nanos(until - t))
    }

    /// Ejections so far.
    pub(crate) fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Counts `answer` into the streaks; true when one has reached its limit. A fine answer
    /// with both streaks at 0 (the common case) writes nothing.
    pub(crate) fn observe(&self, answer: Answer, rules: &Outlier) -> bool {
        let (s5, sg) = (&self.server_errors, &self.gateway_failures);
        if answer == Answer::Fine {
            if s5.load(Ordering::Relaxed) > 0 {
                s5.store(0, Ordering::Relaxed);
            }
            if sg.load(Ordering::Relaxed) > 0 {
                sg.store(0, Ordering::Relaxed);
            }
            return false;
        }
        // Each streak moves on its own atomic: concurrent answers may interleave, which only
        // ever shifts a streak by the answers in flight.
        let before = Streaks {
            server_errors: s5.fetch_add(1, Ordering::AcqRel),
            gateway_failures: if answer == Answer::GatewayFailure {
                sg.fetch_add(1, Ordering::AcqRel)
            } else {
                sg.swap(0, Ordering::AcqRel)
            },
        };
        before.after(answer).tripped(rules)
    }

    /// Ejects the endpoint at `t` (the caller checked the group's cap); `None` when another
    /// thread ejected it first or it is ejected already. Returns the ejection's length.
    pub(crate) fn eject(&self, t: u64, rules: &Outlier) -> Option<Duration> {
        let until = self.until.load(Ordering::Acquire);
        if t < until {
            return None;
        }
        let since = if until == 0 {
            Duration::MAX
        } else {
            Duration::from_nanos(t - until)
        };
        let n = ejection_number(self.number.load(Ordering::Acquire), since, rules);
        let length = ejection_time(n, rules);
        let end = t.saturating_add(u64::try_from(length.as_nanos()).unwrap_or(u64::MAX));
        self.until
            .compare_exchange(until, end, Ordering::AcqRel, Ordering::Relaxed)
            .ok()?;
        self.number.store(n, Ordering::Release);
        self.total.fetch_add(1, Ordering::Relaxed);
        self.server_errors.store(0, Ordering::Relaxed);
        self.gateway_failures.store(0, Ordering::Relaxed);
        Some(length)
    }

    /// Ends an ejection and forgets the streaks and the ejections before (an admin enabled the
    /// endpoint, a reload changed it). True when it was ejected at `t`.
    pub(crate) fn clear(&self, t: u64) -> bool {
        let was = self.ejected(t);
        self.until.store(0, Ordering::Release);
        self.number.store(0, Ordering::Release);
        self.server_errors.store(0, Ordering::Relaxed);
        self.gateway_failures.store(0, Ordering::Relaxed);
        was
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn streak_ejects_for_base_time_then_longer_on_a_repeat() {
        let (e, r) = (Ejection::default(), Outlier::default());
        for _ in 0..4 {
            assert!(!e.observe(Answer::GatewayFailure, &r));
        }
        assert!(e.observe(Answer::GatewayFailure, &r));
        assert_eq!(e.eject(S, &r), Some(Duration::from_secs(30)));
        assert!(e.eject(S, &r).is_none(), "once");
        assert!(e.ejected(30 * S) && !e.ejected(31 * S));
        assert_eq!(e.remaining(21 * S), Some(Duration::from_secs(10)));
        // Back at 31 s; tripped again soon after: 2 × base.
        for _ in 0..5 {
            e.observe(Answer::ServerError, &r);
        }
        assert_eq!(e.eject(40 * S, &r), Some(Duration::from_secs(60)));
        assert_eq!(e.total(), 2);
    }

    #[test]
    fn a_fine_answer_ends_the_streaks() {
        let (e, r) = (Ejection::default(), Outlier::default());
        for _ in 0..4 {
            e.observe(Answer::ServerError, &r);
        }
        assert!(!e.observe(Answer::Fine, &r));
        for _ in 0..4 {
            assert!(!e.observe(Answer::ServerError, &r));
        }
    }

    #[test]
    fn clearing_ends_an_ejection_and_its_history() {
        let (e, r) = (Ejection::default(), Outlier::default());
        e.eject(S, &r);
        assert!(e.clear(2 * S));
        assert!(!e.ejected(2 * S));
        assert_eq!(
            e.eject(3 * S, &r),
            Some(Duration::from_secs(30)),
            "a first again"
        );
    }
}
