//! Entry points for the fuzz targets in `fuzz/` (docs/fuzzing.md) into parts of the crate that
//! are otherwise private. Not an API: nothing here is used by gtd itself, and each item only
//! forwards to the code the node runs, unchanged. (The other targets call public items:
//! [`gtd_core::config::parse`], [`crate::http::h1`], [`crate::l4::proxy_protocol`]
//! and [`crate::admin::Route`].)

use crate::l4::udp::{Flows, Tracked};

/// A config file's bytes as `gtd check` reads them: the text, or the 1-based line and column
/// (in characters) of the first byte that is not UTF-8.
pub fn config_text(bytes: Vec<u8>) -> Result<String, (usize, usize)> {
    gtd_core::config::text(bytes)
}

/// The UDP listener's flow table (`node/l4/udp.rs`) over small integer keys, with flows that
/// are only an id and a last-activity stamp: every operation the receive loop and the sweep
/// perform on it, and nothing else.
#[derive(Default)]
pub struct FlowTable {
    flows: Flows<u16, Probe>,
}

/// A flow as the table sees it.
struct Probe {
    id: u64,
    last: u64,
}

impl Tracked for Probe {
    fn id(&self) -> u64 {
        self.id
    }

    fn set_id(&mut self, id: u64) {
        self.id = id;
    }

    fn last_ms(&self) -> u64 {
        self.last
    }
}

impl FlowTable {
    /// A flow for `key` opened at `now_ms` (active then, as a new flow is), replacing any
    /// flow of that key; its id.
    pub fn insert(&mut self, key: u16, now_ms: u64) -> u64 {
        self.flows.insert(
            key,
            Probe {
                id: 0,
                last: now_ms,
            },
            now_ms,
        );
        self.flows.map[&key].id
    }

    /// A datagram on `key`'s flow (either way) at `at_ms`: false when there is no such flow.
    pub fn touch(&mut self, key: u16, at_ms: u64) -> bool {
        match self.flows.map.get_mut(&key) {
            Some(flow) => {
                flow.last = at_ms;
                true
            }
            None => false,
        }
    }

    /// Drops `key`'s flow as the receive loop does when it may not keep its endpoint (its
    /// entries in the eviction order stay, to be skipped): false when there was none.
    pub fn remove(&mut self, key: u16) -> bool {
        self.flows.map.remove(&key).is_some()
    }

    /// `key`'s flow: its id and last activity.
    pub fn get(&self, key: u16) -> Option<(u64, u64)> {
        self.flows.map.get(&key).map(|f| (f.id, f.last))
    }

    /// Evicts the least recently active flow; false when the table is empty.
    pub fn evict(&mut self, now_ms: u64) -> bool {
        self.flows.evict(now_ms)
    }

    /// Evicts until fewer than `most` flows are left or none is: the number evicted.
    pub fn make_room(&mut self, most: usize, now_ms: u64) -> u64 {
        self.flows.make_room(most, now_ms)
    }

    /// Drops the flows idle for `idle_ms` at `now_ms`.
    pub fn expire(&mut self, idle_ms: u64, now_ms: u64) {
        self.flows.expire(idle_ms, now_ms);
    }

    /// Flows held.
    pub fn len(&self) -> usize {
        self.flows.map.len()
    }

    /// True when no flow is held.
    pub fn is_empty(&self) -> bool {
        self.flows.map.is_empty()
    }

    /// Entries in the eviction order, those of flows gone included.
    pub fn queued(&self) -> usize {
        self.flows.queued()
    }

    /// The keys of the flows held, in no order.
    pub fn keys(&self) -> impl Iterator<Item = u16> + '_ {
        self.flows.map.keys().copied()
    }
}
