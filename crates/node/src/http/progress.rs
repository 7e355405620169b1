//! How far a request body got, shared by the body on its way up, the attempt waiting for the
//! response and the request's access log line.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::timers::origin;

/// How far a request body got: shared between the body on its way up and the attempt waiting
/// for the response (to tell a slow upload from a silent endpoint).
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// When the last piece went up: nanoseconds since [`origin`], plus one (0: none yet).
    pub(super) moved_at: AtomicU64,
    pub(super) done: AtomicBool,
    /// The last read of the client's body found nothing yet (as opposed to the endpoint not
    /// taking what was read).
    pub(super) awaiting_client: AtomicBool,
    /// Reading the client's body failed: the client went away or broke the framing.
    pub(super) client_broke: AtomicBool,
    /// Count the body's bytes in `received` (the access log is on).
    pub(super) counting: bool,
    /// Bytes of the body read from the client so far, when `counting`.
    pub(super) received: AtomicU64,
}

impl Progress {
    /// When the last piece of the body went up, if one did.
    pub(crate) fn moved_at(&self) -> Option<Instant> {
        let nanos = self.moved_at.load(Ordering::Acquire).checked_sub(1)?;
        Some(origin() + Duration::from_nanos(nanos))
    }

    pub(super) fn moved_now(&self) {
        let nanos = u64::try_from(origin().elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
        self.moved_at.store(nanos + 1, Ordering::Release);
    }

    pub(crate) fn awaiting_client(&self) -> bool {
        !self.done.load(Ordering::Acquire) && self.awaiting_client.load(Ordering::Relaxed)
    }

    pub(crate) fn client_broke(&self) -> bool {
        self.client_broke.load(Ordering::Acquire)
    }

    /// Bytes of the body read from the client so far (counted only for the access log).
    pub(crate) fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    pub(super) fn count(&self, n: usize) {
        if self.counting {
            self.received.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
}
