//! The UDP listener's flow table (`crates/node/src/l4/udp.rs` `Flows`, through `gtd::fuzzing`): a
//! sequence of operations with arbitrary keys and times, checked after each one against a
//! model (a `HashMap` of what should be there). What the table promises:
//! - a flow is found after its insertion (with a new id, replacing any flow of its key) and
//!   until it is removed, evicted or expired; nothing else is ever found;
//! - `evict` removes exactly one flow when there is one, and says false only when empty;
//! - `make_room(most)` leaves fewer than `most` flows (or none), so the receive loop's table
//!   never holds more than `udp_max_flows` (at least one: the flow being opened);
//! - `expire(idle)` drops exactly the flows idle for `idle` ms, and with them every stale entry
//!   of the eviction order (which otherwise holds one entry per flow, at least);
//! - second chance: while time only moves forward, as long as some flow has not been active
//!   since it opened, the flow evicted is either the oldest such flow or one idle since an
//!   earlier eviction: a flow active since the last eviction round is never the one evicted.
//!
//! Times may also go back, and activity be stamped ahead of the loop's clock (the reply tasks
//! write it too): then only the first four promises are checked.

#![no_main]

use std::collections::HashMap;

use arbitrary::Arbitrary;
use gtd::fuzzing::FlowTable;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    /// `udp_max_flows` for the receive loop's datagrams (at most 64 here).
    max_flows: u8,
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    /// A datagram from `key` as the receive loop handles it: an existing flow it may keep
    /// (`keep`, what `still_good` says) is used; otherwise it is dropped, room is made, and a
    /// new flow opened.
    Datagram {
        key: u8,
        dt: u16,
        keep: bool,
    },
    /// A bare insertion (no room made first).
    Insert {
        key: u8,
        dt: u16,
    },
    /// Activity on a flow, stamped `ahead` ms past the clock (a reply task's write).
    Touch {
        key: u8,
        dt: u16,
        ahead: u8,
    },
    Remove {
        key: u8,
    },
    Lookup {
        key: u8,
    },
    /// The calls that take the loop's clock, read `back` ms late.
    Evict {
        dt: u16,
        back: u8,
    },
    MakeRoom {
        most: u8,
        dt: u16,
        back: u8,
    },
    Expire {
        idle: u16,
        dt: u16,
        back: u8,
    },
}

/// A flow as the model knows it.
#[derive(Debug, Clone, Copy)]
struct Model {
    id: u64,
    /// Last activity.
    last: u64,
    /// When it was opened.
    opened: u64,
}

struct World {
    table: FlowTable,
    model: HashMap<u16, Model>,
    now: u64,
    /// The latest id handed out.
    last_id: u64,
    /// The clock of the latest eviction (by `evict` or `make_room`).
    last_evict: Option<u64>,
    /// Time went back or activity was stamped ahead at least once.
    skewed: bool,
}

fuzz_target!(|input: Input| {
    let most = usize::from(input.max_flows % 64) + 1;
    let mut w = World {
        table: FlowTable::default(),
        model: HashMap::new(),
        now: 0,
        last_id: 0,
        last_evict: None,
        skewed: false,
    };
    for op in input.ops {
        w.apply(op, most);
        w.check();
    }
});

impl World {
    fn tick(&mut self, dt: u16) {
        self.now += u64::from(dt);
    }

    /// The clock a call reads, `back` ms behind.
    fn clock(&mut self, back: u8) -> u64 {
        if back > 0 {
            self.skewed = true;
        }
        self.now.saturating_sub(u64::from(back))
    }

    fn apply(&mut self, op: Op, most: usize) {
        match op {
            Op::Datagram { key, dt, keep } => {
                self.tick(dt);
                let key = u16::from(key);
                let now = self.now;
                if !(keep && self.table.get(key).is_some()) {
                    assert_eq!(self.table.remove(key), self.model.remove(&key).is_some());
                    self.make_room(most, now);
                    self.insert(key, now);
                    assert!(
                        self.table.len() <= most,
                        "{} flows past udp_max_flows = {most}",
                        self.table.len()
                    );
                }
                self.touch(key, now);
            }
            Op::Insert { key, dt } => {
                self.tick(dt);
                self.insert(u16::from(key), self.now);
            }
            Op::Touch { key, dt, ahead } => {
                self.tick(dt);
                if ahead > 0 {
                    self.skewed = true;
                }
                self.touch(u16::from(key), self.now + u64::from(ahead));
            }
            Op::Remove { key } => {
                let key = u16::from(key);
                assert_eq!(self.table.remove(key), self.model.remove(&key).is_some());
                assert_eq!(self.table.get(key), None, "gone after removal");
            }
            Op::Lookup { key } => {
                let key = u16::from(key);
                let model = self.model.get(&key).map(|m| (m.id, m.last));
                assert_eq!(self.table.get(key), model);
            }
            Op::Evict { dt, back } => {
                self.tick(dt);
                let now = self.clock(back);
                self.evict(now);
            }
            Op::MakeRoom { most, dt, back } => {
                self.tick(dt);
                let now = self.clock(back);
                self.make_room(usize::from(most % 80), now);
            }
            Op::Expire { idle, dt, back } => {
                self.tick(dt);
                let now = self.clock(back);
                let idle = u64::from(idle);
                self.table.expire(idle, now);
                self.model.retain(|_, m| now.saturating_sub(m.last) < idle);
                assert_eq!(
                    self.table.queued(),
                    self.table.len(),
                    "no stale entries after a sweep"
                );
                for (&key, m) in &self.model {
                    assert!(self.table.get(key).is_some(), "{key} expired early: {m:?}");
                }
            }
        }
    }

    fn insert(&mut self, key: u16, now: u64) {
        let id = self.table.insert(key, now);
        assert!(
            id > self.last_id,
            "ids only grow: {id} after {}",
            self.last_id
        );
        self.last_id = id;
        self.model.insert(
            key,
            Model {
                id,
                last: now,
                opened: now,
            },
        );
        assert_eq!(
            self.table.get(key),
            Some((id, now)),
            "found after insertion"
        );
    }

    fn touch(&mut self, key: u16, at: u64) {
        let present = self.model.get_mut(&key).map(|m| m.last = at).is_some();
        assert_eq!(self.table.touch(key, at), present);
    }

    /// One eviction by the table, checked.
    fn evict(&mut self, now: u64) {
        let before: Vec<u16> = self.table.keys().collect();
        let evicted = self.table.evict(now);
        assert_eq!(evicted, !self.model.is_empty(), "false only when empty");
        if !evicted {
            return;
        }
        let gone: Vec<u16> = before
            .into_iter()
            .filter(|&k| self.table.get(k).is_none())
            .collect();
        assert_eq!(gone.len(), 1, "one flow evicted: {gone:?}");
        let key = gone[0];
        let victim = self
            .model
            .remove(&key)
            .expect("evicted a flow the model has");
        if !self.skewed {
            self.second_chance(key, victim);
        }
        self.last_evict = Some(now);
    }

    /// The second-chance promise, for a flow just evicted (time never went back).
    fn second_chance(&self, key: u16, victim: Model) {
        let quiet = |m: &Model| m.last <= m.opened;
        let oldest_quiet = self
            .model
            .values()
            .copied()
            .chain([victim])
            .filter(quiet)
            .min_by_key(|m| m.id);
        let Some(oldest_quiet) = oldest_quiet else {
            return;
        };
        let idle_since_eviction = self.last_evict.is_some_and(|t| victim.last <= t);
        assert!(
            victim.id == oldest_quiet.id || idle_since_eviction,
            "evicted {key} ({victim:?}), active since the last eviction ({:?}), while \
             {oldest_quiet:?} was never active since it opened",
            self.last_evict
        );
    }

    fn make_room(&mut self, most: usize, now: u64) {
        let before = self.table.len();
        let evicted = self.table.make_room(most, now);
        let after = self.table.len();
        assert!(
            after < most || after == 0,
            "{after} flows left, most {most}"
        );
        assert_eq!(evicted, (before - after) as u64);
        if evicted > 0 {
            let keys: Vec<u16> = self.table.keys().collect();
            self.model.retain(|k, _| keys.contains(k));
            self.last_evict = Some(now);
        }
    }

    fn check(&self) {
        assert_eq!(self.table.len(), self.model.len());
        assert_eq!(self.table.is_empty(), self.model.is_empty());
        assert!(
            self.table.queued() >= self.table.len(),
            "every flow has its entry in the eviction order"
        );
        for (&key, m) in &self.model {
            assert_eq!(self.table.get(key), Some((m.id, m.last)), "{key}");
        }
        for key in self.table.keys() {
            assert!(
                self.model.contains_key(&key),
                "{key} found but not inserted"
            );
        }
    }
}
