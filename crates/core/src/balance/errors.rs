//! An endpoint's errors of the last minute (docs/status.md, `ErrorsView`): HTTP 5xx answers,
//! upstream timeouts and connect failures, counted in a ring of [`BUCKETS`] buckets of
//! [`BUCKET`] each, rotated by time.
//!
//! Counting is on the data path (an attempt that failed), so it takes no lock and allocates
//! nothing: each (bucket, kind) is one `AtomicU64` holding the bucket's time slot in its high
//! half and its count in the low half. A count into a cell whose slot is older starts it again
//! at 1 (the rotation); a read adds the cells whose slot lies in the window. A success costs
//! nothing: only errors are counted.
//!
//! A count leaves the window between 55 and 60 s after it happened (the bucket it fell in
//! leaves whole). No clock: `t` is nanoseconds since the balancer lineage's epoch, passed in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Buckets in the ring.
pub const BUCKETS: usize = 12;
/// Each bucket's span.
pub const BUCKET: Duration = Duration::from_secs(5);
/// The span the counts cover: [`BUCKETS`] × [`BUCKET`].
pub const WINDOW: Duration = Duration::from_secs(60);

const BUCKET_NS: u64 = BUCKET.as_nanos() as u64;

/// What went wrong with an attempt on an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The endpoint answered an HTTP status of 500 or above.
    Status5xx,
    /// No answer in time: HTTP's `upstream_timeout`, TCP's `first_byte_timeout`, a TCP
    /// connection that ended with the client's bytes sent and none from the endpoint, a UDP
    /// flow that went idle with the client's datagrams sent and no reply.
    Timeout,
    /// No connection: refused, unreachable, reset, connect or TLS handshake failed.
    Connect,
}

impl ErrorKind {
    /// Every kind, in the order of the ring's cells.
    pub const ALL: [ErrorKind; 3] = [ErrorKind::Status5xx, ErrorKind::Timeout, ErrorKind::Connect];

    fn index(self) -> usize {
        self as usize
    }
}

/// An endpoint's errors over the window, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ErrorCounts {
    /// HTTP answers with a status of 500 or above.
    pub status_5xx: u64,
    /// Timeouts.
    pub timeouts: u64,
    /// Connect failures.
    pub connect: u64,
}

impl ErrorCounts {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.status_5xx + self.timeouts + self.connect
    }

    fn add(&mut self, kind: ErrorKind, n: u64) {
        match kind {
            ErrorKind::Status5xx => self.status_5xx += n,
            ErrorKind::Timeout => self.timeouts += n,
            ErrorKind::Connect => self.connect += n,
        }
    }
}

/// The ring: per bucket and kind, `slot << 32 | count`.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    cells: [[AtomicU64; 3]; BUCKETS],
}

/// The time slot `t` falls in (u32: 680 years of 5 s slots).
fn slot(t: u64) -> u64 {
    (t / BUCKET_NS) & u64::from(u32::MAX)
}

impl Recent {
    /// Counts one error of `kind` at `t`.
    pub(crate) fn record(&self, kind: ErrorKind, t: u64) {
        let s = slot(t);
        let cell = &self.cells[s as usize % BUCKETS][kind.index()];
        let _ = cell.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| {
            let (at, n) = (v >> 32, v & u64::from(u32::MAX));
            if at == s {
                Some(s << 32 | (n + 1).min(u64::from(u32::MAX)))
            } else if at < s {
                Some(s << 32 | 1)
            } else {
                // A thread that read the clock before another rotated this cell a minute
                // later: its error is older than the window the cell now holds.
                None
            }
        });
    }

    /// The errors of the window ending at `t`.
    pub(crate) fn counts(&self, t: u64) -> ErrorCounts {
        let now = slot(t);
        let mut out = ErrorCounts::default();
        for bucket in &self.cells {
            for (cell, kind) in bucket.iter().zip(ErrorKind::ALL) {
                let v = cell.load(Ordering::Acquire);
                let (at, n) = (v >> 32, v & u64::from(u32::MAX));
                if at <= now && now - at < BUCKETS as u64 {
                    out.add(kind, n);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn counts_by_kind_within_the_minute_then_age_out() {
        let r = Recent::default();
        assert_eq!(r.counts(0), ErrorCounts::default());
        r.record(ErrorKind::Status5xx, S);
        r.record(ErrorKind::Status5xx, 2 * S);
        r.record(ErrorKind::Timeout, 7 * S);
        r.record(ErrorKind::Connect, 30 * S);
        let all = ErrorCounts {
            status_5xx: 2,
            timeouts: 1,
            connect: 1,
        };
        assert_eq!(r.counts(30 * S), all);
        assert_eq!(all.total(), 4);
        // The first bucket (0-5 s) leaves at 60 s, the timeout's (5-10 s) at 65 s.
        assert_eq!(r.counts(60 * S - 1), all);
        assert_eq!(
            r.counts(60 * S),
            ErrorCounts {
                status_5xx: 0,
                ..all
            }
        );
        assert_eq!(
            r.counts(65 * S),
            ErrorCounts {
                connect: 1,
                ..ErrorCounts::default()
            }
        );
        assert_eq!(r.counts(90 * S), ErrorCounts::default());
    }

    #[test]
    fn a_bucket_used_again_a_minute_later_starts_from_its_new_errors() {
        let r = Recent::default();
        for _ in 0..5 {
            r.record(ErrorKind::Connect, 3 * S);
        }
        // 60 s later the same cell: the old five are gone, the new one counts.
        r.record(ErrorKind::Connect, 63 * S);
        assert_eq!(r.counts(63 * S).connect, 1);
        // An error stamped before the rotation (a thread's older clock) does not bring them
        // back nor count into the newer bucket.
        r.record(ErrorKind::Connect, 4 * S);
        assert_eq!(r.counts(63 * S).connect, 1);
        // An hour of quiet, then one error: only that one.
        r.record(ErrorKind::Timeout, 3600 * S);
        assert_eq!(
            r.counts(3600 * S),
            ErrorCounts {
                timeouts: 1,
                ..ErrorCounts::default()
            }
        );
    }

    #[test]
    fn threads_counting_at_once_lose_nothing() {
        let r = std::sync::Arc::new(Recent::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000 {
                        r.record(ErrorKind::Status5xx, 10 * S + i);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(r.counts(11 * S).status_5xx, 40_000);
    }
}
