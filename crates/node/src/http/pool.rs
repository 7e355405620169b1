//! Idle keep-alive connections to a group's endpoints, one pool type for both HTTP clients
//! (hyper's connections and gtd's own, [`super::client`]): up to `keepalive` idle connections
//! per endpoint, last in first out (the most recently used is the likeliest still open), each
//! closed once idle for `idle_timeout` — when next looked at, or by [`KeepAlive::sweep`],
//! which the node calls every second. A connection is handed out only when provably idle: its
//! endpoint has neither written nor closed since its last response ended
//! ([`Reusable::quiet`], asked outside the lock when it is taken; the sweep asks every idle
//! one and closes those that spoke). The request path takes one short, uncontended lock per
//! endpoint and hashes nothing.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gtd_core::sync::lock;

/// Milliseconds since `base`, plus one: never 0, never `u64::MAX` (values a connection's
/// clock may keep for "in use").
pub(crate) fn stamp(base: Instant) -> u64 {
    u64::try_from(base.elapsed().as_millis()).unwrap_or(u64::MAX - 2) + 1
}

/// A connection that may go back to the pool.
pub(crate) trait Reusable {
    /// Whether it can carry another request (not closed, nothing unread on it), as far as the
    /// connection's own state tells: asked when it comes back and when it is taken.
    fn reusable(&self) -> bool;

    /// Whether the endpoint has been silent since the connection went idle: no byte and no end
    /// waiting on it. Asked of the socket itself (it may cost a system call, never blocks) when
    /// the connection is taken and at every [`KeepAlive::sweep`]; one that is not is closed.
    /// A connection with its own task watching it while idle (hyper's) leaves this true.
    fn quiet(&self) -> bool {
        true
    }

    /// Gives back what the connection needs only while it carries a request (its buffers):
    /// asked by [`KeepAlive::sweep`] of every connection idle for [`REST_AFTER_MS`] or more, so
    /// that under load, when connections are taken again within milliseconds, nothing is freed
    /// and taken again per request. Cheap once done: asked again at every sweep.
    fn rest(&mut self) {}
}

/// How long a connection stays idle in the pool before it gives back its buffers
/// ([`Reusable::rest`]): as long as a client connection rests before it is parked.
pub(crate) const REST_AFTER_MS: u64 = 1000;

/// An idle connection and when it went idle ([`stamp`]).
type Parked<C> = (C, u64);

/// Idle connections per endpoint (config order).
pub(crate) struct KeepAlive<C> {
    /// Each endpoint's idle connections, with when each went idle ([`Self::stamp`]); the most
    /// recent last.
    slots: Box<[Mutex<Vec<Parked<C>>>]>,
    keepalive: usize,
    base: Instant,
    idle_ms: u64,
    /// Set once the snapshot that made the pool is replaced ([`Self::retire`]).
    retired: AtomicBool,
}

impl<C: Reusable> KeepAlive<C> {
    /// A pool for `endpoints` endpoints keeping up to `keepalive` idle connections each for
    /// `idle` at most.
    pub(crate) fn new(endpoints: usize, keepalive: usize, idle: Duration) -> KeepAlive<C> {
        KeepAlive {
            slots: (0..endpoints).map(|_| Mutex::default()).collect(),
            keepalive,
            base: Instant::now(),
            idle_ms: u64::try_from(idle.as_millis()).unwrap_or(u64::MAX),
            retired: AtomicBool::new(false),
        }
    }

    /// Most idle connections kept per endpoint.
    pub(crate) fn keepalive(&self) -> usize {
        self.keepalive
    }

    /// Milliseconds since the pool was made, plus one: never 0 ([`stamp`]).
    pub(crate) fn stamp(&self) -> u64 {
        stamp(self.base)
    }

    /// When the pool was made (what [`Self::stamp`] counts from).
    pub(crate) fn base(&self) -> Instant {
        self.base
    }

    /// The most recently idle connection to endpoint `index` that can still be used; those
    /// idle too long, no longer reusable or no longer [`Reusable::quiet`] (the endpoint wrote
    /// or closed while it was idle) are dropped (closed) on the way.
    pub(crate) fn take(&self, index: usize) -> Option<C> {
        loop {
            let conn = {
                let now = self.stamp();
                let mut slot = lock(&self.slots[index]);
                loop {
                    let (conn, since) = slot.pop()?;
                    if now.saturating_sub(since) < self.idle_ms && conn.reusable() {
                        break conn;
                    }
                }
            };
            // Outside the lock: it may cost a system call.
            if conn.quiet() {
                return Some(conn);
            }
        }
    }

    /// Gives a connection back after its response ended; dropped when it cannot be reused, the
    /// endpoint already has `keepalive` idle ones, or `keepalive` is 0.
    pub(crate) fn put(&self, index: usize, conn: C) {
        if self.keepalive == 0 || !conn.reusable() {
            return;
        }
        let since = self.stamp();
        let mut slot = lock(&self.slots[index]);
        // Under the slot's lock, which [`Self::retire`] takes after setting the flag: a
        // connection is either in the slot when it is emptied or sees the flag.
        if slot.len() < self.keepalive && !self.retired.load(Ordering::Relaxed) {
            slot.push((conn, since));
        }
    }

    /// Closes the connections idle for `idle_timeout`, and those on which the endpoint wrote
    /// or closed while they were idle (not [`Reusable::quiet`]): every idle connection is
    /// looked at, so one an endpoint spoke on unasked does not wait for a request to be found
    /// out (the closing is done outside the lock).
    pub(crate) fn sweep(&self) {
        self.sweep_at(self.stamp());
    }

    /// [`Self::sweep`] at `now` ([`Self::stamp`]); those idle for [`REST_AFTER_MS`] give back
    /// their buffers.
    fn sweep_at(&self, now: u64) {
        for slot in &self.slots {
            let gone: Vec<Parked<C>> = {
                let mut idle = lock(slot);
                let keep = idle
                    .iter()
                    .position(|(_, since)| now.saturating_sub(*since) < self.idle_ms)
                    .unwrap_or(idle.len());
                let mut gone: Vec<Parked<C>> = idle.drain(..keep).collect();
                gone.extend(idle.extract_if(.., |(conn, _)| !conn.quiet()));
                for (conn, since) in idle.iter_mut() {
                    if now.saturating_sub(*since) >= REST_AFTER_MS {
                        conn.rest();
                    }
                }
                gone
            };
            drop(gone);
        }
    }

    /// The snapshot that made this pool was replaced: its idle connections close now, and those
    /// still carrying a request close when their response ends instead of coming back. Nothing
    /// sweeps a replaced snapshot's pools, and a client connection accepted before a reload
    /// keeps that snapshot's listener alive for as long as it stays open: without this, a
    /// connection that came back after the reload would stay open (in `CLOSE_WAIT` once its
    /// endpoint closed its side) for the client connection's life.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
        for slot in &self.slots {
            let gone = std::mem::take(&mut *lock(slot));
            drop(gone);
        }
    }

    /// Idle connections to endpoint `index` now.
    #[cfg(test)]
    fn idle(&self, index: usize) -> usize {
        lock(&self.slots[index]).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A stand-in connection: reusable until told otherwise, quiet until its endpoint speaks.
    struct Conn(u32, Arc<AtomicBool>, Arc<AtomicBool>);

    impl Reusable for Conn {
        fn reusable(&self) -> bool {
            !self.1.load(Ordering::Relaxed)
        }

        fn quiet(&self) -> bool {
            !self.2.load(Ordering::Relaxed)
        }
    }

    fn conn(id: u32) -> (Conn, Arc<AtomicBool>) {
        let closed = Arc::new(AtomicBool::new(false));
        (Conn(id, closed.clone(), Arc::default()), closed)
    }

    #[test]
    fn a_connection_its_endpoint_spoke_on_while_idle_is_never_handed_out() {
        let pool = KeepAlive::new(1, 4, Duration::from_secs(60));
        let spoke = [(); 3].map(|()| Arc::new(AtomicBool::new(false)));
        for (id, flag) in (1..).zip(&spoke) {
            pool.put(0, Conn(id, Arc::default(), flag.clone()));
        }
        spoke[2].store(true, Ordering::Relaxed);
        assert_eq!(
            pool.take(0).map(|c| c.0),
            Some(2),
            "3 spoke: closed, skipped"
        );
        spoke[0].store(true, Ordering::Relaxed);
        pool.sweep();
        assert_eq!(pool.idle(0), 0, "the sweep looks at every idle connection");
    }

    #[test]
    fn last_in_first_out_up_to_keepalive() {
        let pool = KeepAlive::new(2, 2, Duration::from_secs(60));
        for id in 1..=3 {
            pool.put(0, conn(id).0);
        }
        assert_eq!(pool.idle(0), 2, "the third is closed: keepalive is 2");
        assert_eq!(pool.take(0).map(|c| c.0), Some(2));
        assert_eq!(pool.take(0).map(|c| c.0), Some(1));
        assert!(pool.take(0).is_none());
        assert!(pool.take(1).is_none(), "endpoints do not share connections");
    }

    #[test]
    fn closed_connections_are_skipped_and_never_kept() {
        let pool = KeepAlive::new(1, 4, Duration::from_secs(60));
        let (a, _) = conn(1);
        let (b, b_closed) = conn(2);
        pool.put(0, a);
        pool.put(0, b);
        b_closed.store(true, Ordering::Relaxed);
        assert_eq!(pool.take(0).map(|c| c.0), Some(1));
        let (c, c_closed) = conn(3);
        c_closed.store(true, Ordering::Relaxed);
        pool.put(0, c);
        assert_eq!(pool.idle(0), 0);
    }

    #[test]
    fn keepalive_zero_keeps_nothing() {
        let pool = KeepAlive::new(1, 0, Duration::from_secs(60));
        pool.put(0, conn(1).0);
        assert!(pool.take(0).is_none());
    }

    /// A stand-in connection that counts its rests.
    struct Resting(Arc<std::sync::atomic::AtomicU32>);

    impl Reusable for Resting {
        fn reusable(&self) -> bool {
            true
        }

        fn rest(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn connections_idle_for_a_second_give_back_their_buffers_and_busy_ones_do_not() {
        let pool = KeepAlive::new(1, 4, Duration::from_secs(60));
        let rests = Arc::new(std::sync::atomic::AtomicU32::new(0));
        pool.put(0, Resting(Arc::clone(&rests)));
        let put_at = pool.stamp();
        pool.sweep_at(put_at + REST_AFTER_MS / 2);
        assert_eq!(
            rests.load(Ordering::Relaxed),
            0,
            "idle for half a second: kept"
        );
        pool.sweep_at(put_at + REST_AFTER_MS);
        assert_eq!(rests.load(Ordering::Relaxed), 1, "idle for a second: rests");
        assert!(pool.take(0).is_some(), "and is still handed out");
    }

    #[test]
    fn idle_connections_expire() {
        let pool = KeepAlive::new(1, 4, Duration::ZERO);
        pool.put(0, conn(1).0);
        pool.put(0, conn(2).0);
        assert!(
            pool.take(0).is_none(),
            "idle for idle_timeout (0): closed when looked at"
        );
        pool.put(0, conn(3).0);
        pool.sweep();
        assert_eq!(pool.idle(0), 0);
    }
}
