//! gtd's one policy for a poisoned lock: take the data and go on.
//!
//! A `std::sync` lock is poisoned when a thread panicked while holding it. gtd's critical
//! sections are short and await-free, and each leaves its data consistent at every step (a
//! field set, a map entry replaced, a counter moved): what a panic interrupts is a step, not an
//! invariant. Refusing the data after such a panic would only turn one task's panic into a
//! second one in every task that touches the lock (the data plane among them), so every std
//! lock in the workspace is taken through [`lock`], [`read`] and [`write`], which recover the
//! guard with [`PoisonError::into_inner`]. Clippy holds to it: `clippy.toml` disallows
//! `Mutex::lock`, `RwLock::read` and `RwLock::write` everywhere else (docs/design.md, "Errors").
//! tokio's locks do not poison and are taken as they are.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `m`'s guard, poisoned or not (see the module's policy).
#[allow(clippy::disallowed_methods)]
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `l`'s read guard, poisoned or not (see the module's policy).
#[allow(clippy::disallowed_methods)]
pub fn read<T: ?Sized>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// `l`'s write guard, poisoned or not (see the module's policy).
#[allow(clippy::disallowed_methods)]
pub fn write<T: ?Sized>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f`, which panics holding a lock, on another thread: the lock is poisoned.
    fn poison(f: impl FnOnce() + Send) {
        std::thread::scope(|s| {
            let panicked = s.spawn(f).join();
            assert!(panicked.is_err());
        });
    }

    #[test]
    fn a_poisoned_mutex_still_gives_its_data() {
        let m = Mutex::new(1);
        poison(|| {
            let mut held = lock(&m);
            *held = 2;
            panic!("a panic while holding the lock");
        });
        assert!(m.is_poisoned());
        assert_eq!(*lock(&m), 2);
        *lock(&m) = 3;
        assert_eq!(*lock(&m), 3);
    }

    #[test]
    fn a_poisoned_rwlock_still_gives_its_data() {
        let l = RwLock::new(vec![1]);
        poison(|| {
            let mut held = write(&l);
            held.push(2);
            panic!("a panic while holding the lock");
        });
        assert!(l.is_poisoned());
        assert_eq!(*read(&l), [1, 2]);
        write(&l).push(3);
        assert_eq!(*read(&l), [1, 2, 3]);
    }
}
