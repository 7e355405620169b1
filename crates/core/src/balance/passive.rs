//! Passive marking (docs/design.md §5): the one state machine every protocol's attempts feed,
//! restated from nginx's `ngx_http_upstream_round_robin.c` for atomics.
//!
//! - a failure stores `accessed = checked = now` and adds one to `fails`;
//! - `fails >= max_fails` with `now - checked <= fail_timeout` marks the endpoint unavailable;
//!   once `fail_timeout` has passed, exactly one pick (the one that wins the compare-and-swap
//!   on `checked`) probes it, and everyone else waits another `fail_timeout` for its outcome;
//! - a success resets `fails` when a pick happened more than `fail_timeout` after the last
//!   failure (`accessed < checked`), which is what ends a marking;
//! - [`Marks::clear`] ends a marking from outside the data path: the active checks turning the
//!   endpoint healthy, an admin enable, a reload that changes the endpoint.
//!
//! What counts as a success is the protocols' one rule: the connection is established (TCP,
//! and each HTTP attempt that gets an answer), or a reply datagram arrives (UDP) — never the
//! end of a relay, which may come minutes later.
//!
//! One deliberate difference from nginx: a failure arriving more than `fail_timeout` after the
//! previous one starts a new count at 1, so "`max_fails` failures within `fail_timeout`" holds
//! literally; nginx keeps counting until a success.
//!
//! No clock: `t` is nanoseconds since the balancer lineage's epoch, passed in, so tests drive
//! every transition with plain numbers.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// An endpoint's `max_fails` and `fail_timeout` (nanoseconds), as the machine reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Failures that mark; 0: marking is off.
    pub(crate) max_fails: u32,
    /// The window failures are counted in, and how long a mark keeps the endpoint out.
    pub(crate) fail_timeout: u64,
}

/// What a failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failed {
    /// It took the endpoint out: `max_fails` reached, or the probe after `fail_timeout` failed.
    pub(crate) marked: bool,
    /// It was counted (marking is on): the caller lowers the endpoint's weight.
    pub(crate) counted: bool,
}

/// One endpoint's passive marks: three atomics shared by every thread.
#[derive(Debug, Default)]
pub(crate) struct Marks {
    /// Failures counted towards `max_fails`.
    fails: AtomicU32,
    /// Time of the last failure.
    accessed: AtomicU64,
    /// Start of the current failure window / time of the last probe.
    checked: AtomicU64,
}

impl Marks {
    /// Failures counted now.
    pub(crate) fn fails(&self) -> u32 {
        self.fails.load(Ordering::Relaxed)
    }

    /// `max_fails` reached (whether or not `fail_timeout` has passed since).
    pub(crate) fn marked(&self, lim: Limits) -> bool {
        lim.max_fails > 0 && self.fails.load(Ordering::Acquire) >= lim.max_fails
    }

    /// May be picked at `t`: not marked, or marked and `fail_timeout` over (the probe is due).
    pub(crate) fn allows(&self, t: u64, lim: Limits) -> bool {
        !self.marked(lim)
            || t.saturating_sub(self.checked.load(Ordering::Acquire)) > lim.fail_timeout
    }

    /// A pick at `t`: nginx's "if (now - peer->checked > peer->fail_timeout) peer->checked =
    /// now". True when this pick moved `checked` — for a marked endpoint, it won the probe; the
    /// compare-and-swap lets exactly one pick have it.
    pub(crate) fn claim_probe(&self, t: u64, lim: Limits) -> bool {
        let checked = self.checked.load(Ordering::Acquire);
        t.saturating_sub(checked) > lim.fail_timeout
            && self
                .checked
                .compare_exchange(checked, t, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    /// A failed attempt at `t`.
    pub(crate) fn failure(&self, t: u64, lim: Limits) -> Failed {
        let prev = self.accessed.swap(t, Ordering::AcqRel);
        let checked = self.checked.swap(t, Ordering::AcqRel);
        let max = lim.max_fails;
        if max == 0 {
            // Marking is off: nothing to count towards, and a count kept now would mark the
            // endpoint the moment a reload turns marking on.
            return Failed {
                marked: false,
                counted: false,
            };
        }
        let window = lim.fail_timeout;
        let next = |f: u32| {
            if f >= max {
                f.saturating_add(1)
            } else if f > 0 && t.saturating_sub(prev) > window {
                1
            } else {
                f + 1
            }
        };
        let before = self
            .fails
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| Some(next(f)))
            .unwrap_or_else(|f| f);
        // Out from now on. Just before, it was in unless already marked: a marking ends when a
        // pick probes it after fail_timeout (that pick moved `checked` past `accessed`).
        let was_out = before >= max && prev >= checked && t.saturating_sub(checked) <= window;
        Failed {
            marked: next(before) >= max && !was_out,
            counted: true,
        }
    }

    /// A successful attempt. True when it ended a marking (the probe after `fail_timeout`
    /// succeeded).
    pub(crate) fn success(&self, lim: Limits) -> bool {
        // The common case, nothing to reset, costs one load and no write.
        if self.fails.load(Ordering::Relaxed) > 0
            && self.accessed.load(Ordering::Acquire) < self.checked.load(Ordering::Acquire)
        {
            let old = self.fails.swap(0, Ordering::AcqRel);
            return lim.max_fails > 0 && old >= lim.max_fails;
        }
        false
    }

    /// Forgets the failures (the checks say healthy, an admin enabled it, a reload changed
    /// it). True when that ended a marking.
    pub(crate) fn clear(&self, lim: Limits) -> bool {
        let old = self.fails.swap(0, Ordering::AcqRel);
        lim.max_fails > 0 && old >= lim.max_fails
    }

    /// True when an attempt failed after `t`.
    pub(crate) fn failed_after(&self, t: u64) -> bool {
        self.accessed.load(Ordering::Acquire) > t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn limits(max_fails: u32) -> Limits {
        Limits {
            max_fails,
            fail_timeout: 10 * S,
        }
    }

    /// A pick at `t` as the balancer makes it: allowed, and then its claim.
    fn pick(m: &Marks, t: u64, lim: Limits) -> bool {
        m.allows(t, lim) && (m.claim_probe(t, lim) || !m.marked(lim))
    }

    #[test]
    fn max_fails_within_the_window_mark_then_one_probe_whose_success_ends_it() {
        let (m, lim) = (Marks::default(), limits(3));
        for s in [1, 2] {
            assert!(pick(&m, s * S, lim));
            assert!(!m.failure(s * S, lim).marked, "failure {s} does not mark");
        }
        assert!(pick(&m, 3 * S, lim));
        assert_eq!(
            m.failure(3 * S, lim),
            Failed {
                marked: true,
                counted: true
            }
        );
        assert!(!m.allows(3 * S, lim) && !m.allows(13 * S, lim));
        assert!(pick(&m, 13 * S + 1, lim), "the probe");
        assert!(!pick(&m, 13 * S + 2, lim), "one probe at a time");
        assert!(m.success(lim), "the probe's success ends the mark");
        assert!(!m.success(lim), "later successes say nothing");
        assert!(m.allows(13 * S + 2, lim));
    }

    #[test]
    fn a_success_before_the_probe_does_not_end_a_mark() {
        // A connection made before the failures (its success reported late) says nothing of now.
        let (m, lim) = (Marks::default(), limits(1));
        m.failure(S, lim);
        assert!(!m.success(lim));
        assert!(!m.allows(5 * S, lim));
    }

    #[test]
    fn a_failed_probe_marks_again() {
        let (m, lim) = (Marks::default(), limits(1));
        assert!(m.failure(S, lim).marked);
        assert!(!m.failure(5 * S, lim).marked, "already out");
        assert!(pick(&m, 16 * S, lim));
        assert!(
            m.failure(16 * S, lim).marked,
            "the failed probe marks again"
        );
        assert!(!m.allows(20 * S, lim) && m.allows(26 * S + 1, lim));
    }

    #[test]
    fn failures_further_apart_than_the_window_start_a_new_count() {
        let (m, lim) = (Marks::default(), limits(2));
        m.failure(S, lim);
        assert!(!m.failure(30 * S, lim).marked);
        assert_eq!(m.fails(), 1);
        assert!(m.failure(31 * S, lim).marked);
    }

    #[test]
    fn marking_off_counts_nothing_but_remembers_when() {
        let (m, lim) = (Marks::default(), limits(0));
        for i in 1..50 {
            assert!(!m.failure(i * S, lim).counted);
        }
        assert_eq!(m.fails(), 0);
        assert!(m.allows(50 * S, lim));
        assert!(m.failed_after(48 * S) && !m.failed_after(49 * S));
    }

    #[test]
    fn clearing_ends_a_mark_at_once() {
        let (m, lim) = (Marks::default(), limits(1));
        m.failure(S, lim);
        assert!(m.clear(lim), "it was marked");
        assert!(m.allows(S, lim), "back before fail_timeout");
        assert!(!m.clear(lim), "nothing left to clear");
        assert!(m.failure(2 * S, lim).marked, "the next failure marks again");
    }
}
