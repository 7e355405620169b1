//! The `gtd` binary's memory allocator: jemalloc, set to give the kernel back, within about a
//! second, the pages a burst of connections used and freed.
//!
//! With glibc's malloc a node that served a burst of connections kept the burst's peak: each
//! connection's HTTP/1 buffers (8 to 24 KiB while it is served, none once it rests) were freed
//! between the small allocations that connections keep while they wait, and glibc can return
//! only whole free pages at the top of its heaps. Measured with `benches/proxy/cost.sh` (2,000
//! connections, release builds), an idle HTTP/1.1 keep-alive client cost 17.1 KB after a burst
//! and 4.0 KB when clients arrived over time; with jemalloc 4.1 KB and 3.4 KB, for 2 % more
//! instructions per request (docs/performance.md, "The allocator").
//!
//! jemalloc keeps allocations of one size class together, so a burst's buffers free whole
//! pages, and its background thread purges pages that stayed unused for `DIRTY_DECAY_MS`
//! (`MADV_DONTNEED` at once, `muzzy_decay_ms` 0: pages only marked `MADV_FREE` would still
//! count as the node's resident memory until the kernel needs them). Under steady load freed
//! memory is used again well within that second and nothing is purged.

use tikv_jemalloc_ctl::{Access, AsName};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How long freed pages stay resident before the background thread gives them back.
const DIRTY_DECAY_MS: isize = 1_000;

/// Sets the decay times, for the arena that exists before any thread but this one allocated
/// (`arena.0`) and those made later (as threads allocate first, up to four per CPU), and starts
/// jemalloc's background thread, which purges without waiting for an allocation to do it.
/// Set at run time rather than through jemalloc's build-time `malloc_conf`, so that a build
/// from anywhere (`cargo install --git`, another workspace) behaves the same.
pub(crate) fn tune() -> tikv_jemalloc_ctl::Result<()> {
    for key in [&b"arenas.dirty_decay_ms\0"[..], b"arena.0.dirty_decay_ms\0"] {
        key.name().write(DIRTY_DECAY_MS)?;
    }
    for key in [&b"arenas.muzzy_decay_ms\0"[..], b"arena.0.muzzy_decay_ms\0"] {
        key.name().write(0isize)?;
    }
    tikv_jemalloc_ctl::background_thread::write(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuning_takes() {
        tune().expect("jemalloc accepts its settings");
        assert!(tikv_jemalloc_ctl::background_thread::read().unwrap());
        let dirty: isize = b"arenas.dirty_decay_ms\0".name().read().unwrap();
        let muzzy: isize = b"arenas.muzzy_decay_ms\0".name().read().unwrap();
        assert_eq!((dirty, muzzy), (DIRTY_DECAY_MS, 0));
        // The arena that exists before main makes any thread.
        let dirty: isize = b"arena.0.dirty_decay_ms\0".name().read().unwrap();
        assert_eq!(dirty, DIRTY_DECAY_MS);
        // An arena made after the tuning, as the node's threads make theirs. (A thread of this
        // test binary may be given an arena an earlier test's thread made before the tuning,
        // so the arena is made here rather than looked up from a new thread.)
        let arena: u32 = b"arenas.create\0".name().read().unwrap();
        let key = format!("arena.{arena}.dirty_decay_ms\0");
        let dirty: isize = key.as_bytes().name().read().unwrap();
        assert_eq!(dirty, DIRTY_DECAY_MS);
        let key = format!("arena.{arena}.muzzy_decay_ms\0");
        let muzzy: isize = key.as_bytes().name().read().unwrap();
        assert_eq!(muzzy, 0);
    }
}
