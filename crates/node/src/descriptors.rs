//! Open files shared between listeners (docs/design.md §6, open files): one listener at its
//! limit never starves another listener or the admin API.
//!
//! The open files limit, less a reserve (the admin server and its clients, log files, DNS,
//! listening sockets, health checks, the idle connections HTTP groups keep, UDP flows), is the
//! budget of the TCP-borne listeners' connections: a client connection, the endpoint connection
//! of a TCP relay, and each HTTP exchange in flight (one endpoint connection, from before its
//! request until its response body ends). Half of the budget is split evenly as each listener's
//! own; the other half is shared, first come. A listener takes from its own part first, then
//! from the shared one; with both empty the connection is closed (a new client) or answered
//! `503` (an HTTP request), no endpoint blamed. A listener that took everything it could still
//! leaves every other one its own part, and the reserve stays for the rest.

use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

/// Descriptors always left to what is not a listener's connections.
const BASE_RESERVE: u64 = 64;

/// How the budget splits, from the open files limit (`None`: unlimited), the reserve and the
/// number of TCP-borne listeners: (each listener's own part, the shared part). Pure.
pub(crate) fn split(limit: Option<u64>, reserve: u64, listeners: usize) -> (isize, isize) {
    let Some(limit) = limit else {
        return (0, isize::MAX / 2);
    };
    // However much a config asks to keep aside, half the limit stays for connections.
    let reserve = (BASE_RESERVE + reserve).min(limit / 2);
    let budget = isize::try_from(limit - reserve).unwrap_or(isize::MAX / 2);
    let n = isize::try_from(listeners.max(1)).unwrap_or(isize::MAX);
    let own = budget / 2 / n;
    (own, budget - own * n)
}

/// A number of descriptors, and how many of them are free. Carried across reloads (and DNS
/// rebuilds): the connections of the running snapshot give back to what the next one takes
/// from, so a rebuild never hands out a second budget.
#[derive(Debug)]
struct Part {
    free: AtomicIsize,
    size: AtomicIsize,
}

impl Part {
    fn new(size: isize) -> Part {
        Part {
            free: AtomicIsize::new(size),
            size: AtomicIsize::new(size),
        }
    }

    /// Makes it `size` descriptors, those in use staying in use.
    fn resize(&self, size: isize) {
        let was = self.size.swap(size, Ordering::Relaxed);
        self.free.fetch_add(size - was, Ordering::Relaxed);
    }
}

/// The shared part of a node's budget.
#[derive(Debug)]
pub(crate) struct Shared(Part);

impl Shared {
    pub(crate) fn new(size: isize) -> Arc<Shared> {
        Arc::new(Shared(Part::new(size)))
    }

    /// Makes it `size` descriptors (a snapshot put in service).
    pub(crate) fn resize(&self, size: isize) {
        self.0.resize(size);
    }
}

/// One listener's part: its own descriptors and the node's shared ones.
#[derive(Debug)]
pub(crate) struct Share {
    own: Part,
    shared: Arc<Shared>,
}

impl Share {
    pub(crate) fn new(own: isize, shared: Arc<Shared>) -> Arc<Share> {
        Arc::new(Share {
            own: Part::new(own),
            shared,
        })
    }

    /// Makes the listener's own part `size` descriptors (a snapshot put in service).
    pub(crate) fn resize(&self, size: isize) {
        self.own.resize(size);
    }

    /// `n` descriptors, from the listener's own part or else the shared one; `None` when
    /// neither has them.
    pub(crate) fn take(self: &Arc<Share>, n: i32) -> Option<Fds> {
        let (count, n) = (n, n as isize);
        if self.own.free.fetch_sub(n, Ordering::Relaxed) >= n {
            return Some(Fds {
                share: Arc::clone(self),
                n: count,
                own: true,
            });
        }
        self.own.free.fetch_add(n, Ordering::Relaxed);
        if self.shared.0.free.fetch_sub(n, Ordering::Relaxed) >= n {
            return Some(Fds {
                share: Arc::clone(self),
                n: count,
                own: false,
            });
        }
        self.shared.0.free.fetch_add(n, Ordering::Relaxed);
        None
    }
}

/// Descriptors taken from a [`Share`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Fds {
    share: Arc<Share>,
    /// 1 or 2 (a connection's own descriptors): an `i32` keeps every connection's task 8 bytes
    /// smaller.
    n: i32,
    own: bool,
}

impl Drop for Fds {
    fn drop(&mut self) {
        let free = if self.own {
            &self.share.own.free
        } else {
            &self.share.shared.0.free
        };
        free.fetch_add(self.n as isize, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_splits_into_own_parts_and_a_shared_one() {
        // 1024 - 64 - 100 = 860: 430 split by 2, 430 shared.
        assert_eq!(split(Some(1024), 100, 2), (215, 430));
        // A reserve past half the limit leaves half.
        assert_eq!(split(Some(1024), 10_000, 1), (256, 256));
        assert_eq!(split(Some(1024), 0, 0), (480, 480));
        assert!(split(None, 0, 3).1 > 1 << 40);
    }

    #[test]
    fn a_listener_that_took_all_it_could_leaves_the_others_their_own() {
        let shared = Shared::new(4);
        let (a, b) = (Share::new(2, shared.clone()), Share::new(2, shared));
        let held: Vec<Fds> = std::iter::from_fn(|| a.take(1)).collect();
        assert_eq!(held.len(), 6, "its own 2 and the shared 4");
        let b_own = (b.take(1).unwrap(), b.take(1).unwrap());
        assert!(b.take(1).is_none());
        drop(held);
        let b_shared = b.take(2).expect("given back to the shared part");
        assert!(a.take(3).is_none());
        assert!(a.take(2).is_some());
        drop((b_own, b_shared));
    }

    #[test]
    fn a_resize_keeps_what_is_in_use() {
        let shared = Shared::new(2);
        let a = Share::new(1, shared.clone());
        let held = (a.take(1).unwrap(), a.take(2).unwrap());
        // A rebuild with the same budget hands out nothing more…
        shared.resize(2);
        a.resize(1);
        assert!(a.take(1).is_none());
        // …a larger one the difference, and what is given back lands in the new sizes.
        shared.resize(3);
        let third = a.take(1).unwrap();
        assert!(a.take(1).is_none());
        drop((held, third));
        assert!(a.take(4).is_none() && a.take(3).is_some());
    }
}
