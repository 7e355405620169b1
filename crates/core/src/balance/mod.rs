//! Inside a group: the balancing methods of docs/design.md §4, behind one interface.
//!
//! A [`GroupBalancer`] is built from a validated [`config::Group`] for one (listener, group) on
//! a node and is shared by all its threads. [`GroupBalancer::pick`] chooses an endpoint for a
//! request, connection or flow and returns a [`Pick`] guard that counts it as active until
//! dropped and records its outcome (success, failure, timing, reported feedback). The node and
//! the simulator both call this code; there is no second implementation.
//!
//! # Methods (one module each, one `Select` interface)
//! `round_robin` (the rotation every method falls back to), `hash` (plain and ketama),
//! `ip_hash`, `least_conn`, `random` (and `two`), `least_time`, `feedback`. The deterministic
//! ones give the same answers as nginx for the same server list (names, ports, weights) and the
//! same keys — `tests/balance_nginx.rs` checks that against a running nginx.
//!
//! # Explaining a pick
//! [`GroupBalancer::trace`] says why a pick for a request would go where it goes (`GET
//! /explain`): the hash methods' walks are one function each that the pick and the trace both
//! call — the pick acquires at each step, the trace only asks whether the endpoint could be
//! chosen — so the explanation is the pick's own arithmetic, and asking moves nothing.
//!
//! # State and concurrency
//! Per-endpoint state ([`EndpointState`]) is atomics only: active count, failures, failure
//! times, weight penalty, slow-start ramp start, admin/health flags, EWMAs. Per-group state is
//! the rotation counter, the current weights of the smooth rotation (`AtomicI64` per endpoint)
//! and a SplitMix64 stream (`AtomicU64`). **The pick path takes no lock and allocates nothing**:
//! it reads immutable tables built with the balancer (rotation sequence, cumulative weights,
//! ketama ring), updates atomics with `fetch_add` and compare-and-swap loops, and returns a guard
//! holding an `Arc` clone (a reference-count increment). Hash keys are streamed into a CRC
//! instead of being built as strings.
//!
//! The one place where the steady state differs from a transient state is the rotation (and
//! `least_conn`'s tie-break, which is the rotation): while every endpoint is at full weight it
//! reads a precomputed sequence with one atomic increment; while some weight is reduced (a
//! failure penalty being restored, a slow-start ramp) it runs nginx's arithmetic on the atomic
//! current weights in O(n) (see `round_robin.rs`). Which of the two applies is decided without
//! scanning: every event that reduces a weight or starts a ramp bumps a generation counter
//! shared by the group's endpoint states; the balancer remembers the generation at which it last
//! saw all weights full, and a pick that finds that stale re-checks (O(n) loads) before taking
//! the O(n) path. No pick ever waits for another.
//!
//! # Time
//! `now` is always injected (a `std::time::Instant`); nothing here reads a clock, so tests drive
//! fail timeouts and ramps with instants built from a base, without waiting.

mod crc32;
mod endpoint;
pub mod errors;
mod feedback;
mod hash;
mod ip_hash;
mod key;
mod least_conn;
mod least_time;
mod outlier;
mod passive;
mod random;
mod rng;
mod round_robin;
mod trace;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::config::{self, Address, Balance, Endpoint, Measure, Outlier, Protocol};
use crate::health::outlier::{Answer, room_for_one_more};

pub use endpoint::EndpointState;
pub use key::{RequestKey, StaticRequest};
pub use rng::{Rng, SplitMix64};
pub use trace::{HashStep, HashWalk, PickTrace, Walk};

use endpoint::Hub;
use round_robin::Rotation;

/// Which endpoints a pick may choose (docs/design.md §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Admit {
    /// Usable ones: enabled, not `down`, not draining, allowed by active and passive checks.
    #[default]
    Usable,
    /// Fail-open (the listener has no healthy group and `fail_open = true`): as if every
    /// endpoint were healthy — the active checks' verdict and passive marking are ignored —
    /// but still never a disabled, `down` or draining one.
    IgnoringHealth,
}

/// What one pick sees: the group's endpoints and per-pick inputs. Methods read it and update
/// atomics through it; it lives on the stack of one pick.
pub(crate) struct Ctx<'a, R: Rng> {
    endpoints: &'a [Arc<EndpointState>],
    /// Current weights of the smooth rotation, by endpoint index.
    pub(crate) cw: &'a [AtomicI64],
    /// `now` in nanoseconds since the lineage epoch.
    pub(crate) t: u64,
    exclude: &'a [usize],
    /// [`Admit::IgnoringHealth`]: health verdicts do not count.
    ignore_health: bool,
    /// Random source (shared atomic stream, or the caller's own).
    pub(crate) rng: &'a mut R,
    full: &'a FullWeights,
}

impl<R: Rng> Ctx<'_, R> {
    pub(crate) fn ep(&self, i: usize) -> &EndpointState {
        &self.endpoints[i]
    }

    /// May be chosen now (usable — or only admissible, when ignoring health —, below
    /// `max_conns`, not excluded by a retry).
    pub(crate) fn candidate(&self, i: usize) -> bool {
        let ep = &self.endpoints[i];
        !self.exclude.contains(&i)
            && ep.admissible()
            && (self.ignore_health || ep.healthy(self.t))
            && ep.has_room()
    }

    /// Counts the pick on endpoint `i`; false if a concurrent pick took its last slot or probe
    /// (no probe is needed when ignoring health).
    pub(crate) fn acquire(&self, i: usize) -> bool {
        self.endpoints[i].try_acquire(self.t, !self.ignore_health)
    }

    /// [`Self::candidate`] and then [`Self::acquire`].
    pub(crate) fn take(&self, i: usize) -> bool {
        self.candidate(i) && self.acquire(i)
    }

    /// True when every endpoint was at full weight at the last check and nothing changed since.
    pub(crate) fn weights_full(&self) -> bool {
        self.full.known_full()
    }

    /// Re-checks whether every endpoint is back at full weight.
    pub(crate) fn refresh_weights_full(&self) {
        self.full.refresh(self.endpoints, self.t);
    }
}

/// "Every endpoint is at full weight as of generation g" — lets the rotation use its table.
#[derive(Debug)]
struct FullWeights {
    hub: Arc<Hub>,
    full_at: AtomicU64,
}

impl FullWeights {
    fn new(hub: Arc<Hub>, endpoints: &[Arc<EndpointState>], t: u64) -> Self {
        let f = FullWeights {
            hub,
            full_at: AtomicU64::new(u64::MAX),
        };
        f.refresh(endpoints, t);
        f
    }

    fn known_full(&self) -> bool {
        self.full_at.load(Ordering::Acquire) == self.hub.generation()
    }

    fn refresh(&self, endpoints: &[Arc<EndpointState>], t: u64) {
        // Read the generation first: an event after this read makes the stored value stale,
        // which only ever sends picks to the exact O(n) path.
        let g = self.hub.generation();
        let full = endpoints.iter().all(|e| e.at_full_weight(t));
        self.full_at
            .store(if full { g } else { u64::MAX }, Ordering::Release);
    }
}

/// Cumulative configured weights over a tier's members (`hash`, `ip_hash`, `random` map a
/// number below the total onto the member whose segment contains it, as nginx's walk does).
#[derive(Debug)]
pub(crate) struct WeightRanges {
    ends: Box<[u64]>,
    total: u64,
}

impl WeightRanges {
    fn new(configs: &[Endpoint], members: &[u32]) -> Self {
        let mut acc = 0u64;
        let ends = members
            .iter()
            .map(|&i| {
                acc += u64::from(configs[i as usize].weight);
                acc
            })
            .collect();
        WeightRanges { ends, total: acc }
    }

    /// Sum of the weights.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Position (in the tier's member list) of the segment holding `x < total`.
    pub(crate) fn locate(&self, x: u64) -> usize {
        self.ends.partition_point(|&e| e <= x)
    }
}

/// Primaries or backups: member endpoint indexes in config order, with their rotation.
#[derive(Debug)]
pub(crate) struct Tier {
    pub(crate) members: Box<[u32]>,
    pub(crate) rotation: Rotation,
    pub(crate) ranges: WeightRanges,
}

impl Tier {
    fn new(configs: &[Endpoint], backup: bool) -> Self {
        let members: Box<[u32]> = (0..configs.len() as u32)
            .filter(|&i| configs[i as usize].backup == backup)
            .collect();
        Tier {
            rotation: Rotation::new(configs, &members),
            ranges: WeightRanges::new(configs, &members),
            members,
        }
    }
}

/// Endpoint data for computing expected shares.
pub(crate) struct View<'a> {
    pub(crate) endpoints: &'a [Arc<EndpointState>],
    pub(crate) t: u64,
    /// Fail-open: every admissible endpoint counts, whatever its health.
    pub(crate) admit: Admit,
}

impl View<'_> {
    /// Endpoint `i` may be chosen (`max_conns` aside) under this view's admission.
    pub(crate) fn counts(&self, i: usize) -> bool {
        let e = &self.endpoints[i];
        match self.admit {
            Admit::Usable => e.available(self.t),
            Admit::IgnoringHealth => e.is_admissible(),
        }
    }
}

/// Writes configured (`effective = false`) or current rotation (`true`) weights of the usable
/// members of `tier` into `out`.
pub(crate) fn weight_shares(view: &View<'_>, tier: &Tier, effective: bool, out: &mut [f64]) {
    for &m in tier.members.iter() {
        let e = &view.endpoints[m as usize];
        if view.counts(m as usize) {
            out[m as usize] = if effective {
                e.swrr_weight(view.t) as f64
            } else {
                f64::from(e.config().weight)
            };
        }
    }
}

/// The interface every balancing method implements.
pub(crate) trait Select {
    /// Picks and acquires an endpoint of `tier` (`primary` tells primaries from backups;
    /// methods without backup support use the rotation for backups).
    fn select<K: RequestKey + ?Sized, R: Rng>(
        &self,
        ctx: &mut Ctx<'_, R>,
        request: &K,
        tier: &Tier,
        primary: bool,
    ) -> Option<usize>;

    /// Writes the unnormalised expected share of each usable member of `tier` into `out`
    /// (indexed by endpoint); false when shares depend on load.
    fn shares(&self, view: &View<'_>, tier: &Tier, primary: bool, out: &mut [f64]) -> bool {
        let _ = primary;
        weight_shares(view, tier, false, out);
        true
    }
}

/// The configured method with its prepared data.
#[derive(Debug)]
enum Method {
    RoundRobin(round_robin::RoundRobin),
    Hash(hash::Hash),
    Ketama(hash::Ketama),
    IpHash(ip_hash::IpHash),
    LeastConn(least_conn::LeastConn),
    Random(random::Random),
    LeastTime(least_time::LeastTime),
    Feedback(feedback::Feedback),
}

macro_rules! dispatch {
    ($self:expr, $m:ident => $e:expr) => {
        match $self {
            Method::RoundRobin($m) => $e,
            Method::Hash($m) => $e,
            Method::Ketama($m) => $e,
            Method::IpHash($m) => $e,
            Method::LeastConn($m) => $e,
            Method::Random($m) => $e,
            Method::LeastTime($m) => $e,
            Method::Feedback($m) => $e,
        }
    };
}

/// What a [`Pick`] needs to record outcomes without looking back at its balancer.
#[derive(Debug, Clone, Copy)]
struct PickParams {
    /// `least_time`: the timing that feeds the average.
    measure: Option<Measure>,
    /// `feedback`: reported values feed the average.
    feedback: bool,
    /// EWMA history weight (`factor`).
    factor: f64,
}

/// The balancer of one group on one node (one per listener and group). `Send + Sync`; share it
/// behind an `Arc` or inside the routing snapshot.
#[derive(Debug)]
pub struct GroupBalancer {
    method: Method,
    endpoints: Box<[Arc<EndpointState>]>,
    cw: Box<[AtomicI64]>,
    primary: Tier,
    backup: Tier,
    full: FullWeights,
    rng: rng::SharedRng,
    params: PickParams,
    protocol: Protocol,
    feedback_header: Option<Box<str>>,
    /// HTTP: outlier detection's rules (`None`: off, or not HTTP).
    outlier: Option<Outlier>,
}

impl GroupBalancer {
    /// Builds the balancer of `group` on a `protocol` listener; `now` starts its clock.
    pub fn new(group: &config::Group, protocol: Protocol, now: Instant) -> Self {
        let hub = Hub::new(now);
        let endpoints = group
            .endpoints
            .iter()
            .map(|c| Arc::new(EndpointState::new(c.clone(), Arc::clone(&hub))))
            .collect();
        Self::assemble(group, protocol, endpoints, hub, now)
    }

    /// Rebuilds after a config reload. Endpoints whose address (text as written and, for a
    /// name, the resolved IP; the n-th occurrence of a repeated one matches the n-th) existed in
    /// `previous` keep their run-time state: active count, failures, health and admin flags, averages. New endpoints with
    /// `slow_start` ramp up. `previous` must be this group's balancer.
    pub fn rebuild(
        group: &config::Group,
        protocol: Protocol,
        previous: &GroupBalancer,
        now: Instant,
    ) -> Self {
        let hub = Arc::clone(&previous.full.hub);
        // Previous states by address, in config order; each new endpoint takes the first one
        // left for its address, so the n-th occurrence of a repeated address gets the n-th.
        let mut by_address: HashMap<&Address, VecDeque<&Arc<EndpointState>>> = HashMap::new();
        for e in previous.endpoints.iter() {
            by_address.entry(e.address()).or_default().push_back(e);
        }
        let mut endpoints = Vec::with_capacity(group.endpoints.len());
        for cfg in &group.endpoints {
            let old = by_address.get_mut(&cfg.address).and_then(|q| q.pop_front());
            let state = match old {
                Some(old) if old.config() == cfg => Arc::clone(old),
                Some(old) => Arc::new(old.reconfigured(cfg.clone(), now)),
                None => {
                    let fresh = EndpointState::new(cfg.clone(), Arc::clone(&hub));
                    fresh.start_ramp_at(now);
                    name_toggles(previous, &cfg.address, &fresh, now);
                    Arc::new(fresh)
                }
            };
            endpoints.push(state);
        }
        Self::assemble(group, protocol, endpoints.into_boxed_slice(), hub, now)
    }

    fn assemble(
        group: &config::Group,
        protocol: Protocol,
        endpoints: Box<[Arc<EndpointState>]>,
        hub: Arc<Hub>,
        now: Instant,
    ) -> Self {
        let configs = &group.endpoints;
        let primary = Tier::new(configs, false);
        let backup = Tier::new(configs, true);
        let mut params = PickParams {
            measure: None,
            feedback: false,
            factor: 0.0,
        };
        let method = match &group.balance {
            Balance::RoundRobin => Method::RoundRobin(round_robin::RoundRobin),
            Balance::Hash {
                key,
                consistent: false,
            } => Method::Hash(hash::Hash::new(key)),
            Balance::Hash {
                key,
                consistent: true,
            } => Method::Ketama(hash::Ketama::new(key, configs, &primary)),
            Balance::IpHash => Method::IpHash(ip_hash::IpHash),
            Balance::LeastConn => Method::LeastConn(least_conn::LeastConn),
            Balance::Random { two } => Method::Random(random::Random { two: *two }),
            Balance::LeastTime { measure, factor } => {
                params.measure = Some(least_time::normalise_measure(*measure, protocol));
                params.factor = *factor;
                Method::LeastTime(least_time::LeastTime)
            }
            Balance::Feedback {
                inverse, factor, ..
            } => {
                params.feedback = true;
                params.factor = *factor;
                Method::Feedback(feedback::Feedback { inverse: *inverse })
            }
        };
        let t = hub.nanos(now);
        GroupBalancer {
            method,
            cw: endpoints.iter().map(|_| AtomicI64::new(0)).collect(),
            full: FullWeights::new(hub, &endpoints, t),
            endpoints,
            primary,
            backup,
            rng: rng::SharedRng::new(rng::process_seed()),
            params,
            protocol,
            feedback_header: match &group.balance {
                Balance::Feedback { header, .. } => Some(header.as_str().into()),
                _ => None,
            },
            outlier: group.outlier.filter(|_| protocol.is_http()),
        }
    }

    /// Restarts the balancer's random stream at `seed` (the simulator and tests use this for
    /// reproducible `random`, `least_time` and `feedback` picks).
    pub fn set_seed(&self, seed: u64) {
        self.rng.reseed(seed);
    }

    /// Picks an endpoint for `request`; `None` when no endpoint (backups included) can take it
    /// now — every usable one at `max_conns`, or none usable. The caller then tries the next
    /// eligible group.
    pub fn pick<K: RequestKey + ?Sized>(&self, request: &K, now: Instant) -> Option<Pick> {
        self.pick_excluding(request, &[], now)
    }

    /// Like [`Self::pick`] but never chooses an endpoint index in `exclude` (the endpoints a
    /// retried request already tried).
    pub fn pick_excluding<K: RequestKey + ?Sized>(
        &self,
        request: &K,
        exclude: &[usize],
        now: Instant,
    ) -> Option<Pick> {
        self.pick_admitting(request, exclude, Admit::Usable, now)
    }

    /// Like [`Self::pick_excluding`] among the endpoints `admit` allows: with
    /// [`Admit::IgnoringHealth`] (a fail-open listener) endpoints that health checks or passive
    /// marking keep out are chosen as if healthy; disabled, `down` and draining ones never are.
    /// Every method, backups (only when no primary can serve) and `max_conns` work as usual.
    pub fn pick_admitting<K: RequestKey + ?Sized>(
        &self,
        request: &K,
        exclude: &[usize],
        admit: Admit,
        now: Instant,
    ) -> Option<Pick> {
        let mut rng = self.rng.handle();
        self.pick_admitting_with(request, exclude, admit, now, &mut rng)
    }

    /// Like [`Self::pick_excluding`] with the caller's random source.
    pub fn pick_with<K: RequestKey + ?Sized, R: Rng>(
        &self,
        request: &K,
        exclude: &[usize],
        now: Instant,
        rng: &mut R,
    ) -> Option<Pick> {
        self.pick_admitting_with(request, exclude, Admit::Usable, now, rng)
    }

    /// Like [`Self::pick_admitting`] with the caller's random source.
    pub fn pick_admitting_with<K: RequestKey + ?Sized, R: Rng>(
        &self,
        request: &K,
        exclude: &[usize],
        admit: Admit,
        now: Instant,
        rng: &mut R,
    ) -> Option<Pick> {
        let mut ctx = Ctx {
            endpoints: &self.endpoints,
            cw: &self.cw,
            t: self.full.hub.nanos(now),
            exclude,
            ignore_health: admit == Admit::IgnoringHealth,
            rng,
            full: &self.full,
        };
        let (index, backup) = match dispatch!(&self.method, m => m.select(&mut ctx, request, &self.primary, true))
        {
            Some(i) => (i, false),
            None if self.backup.members.is_empty() => return None,
            None => (
                dispatch!(&self.method, m => m.select(&mut ctx, request, &self.backup, false))?,
                true,
            ),
        };
        Some(Pick {
            endpoint: Arc::clone(&self.endpoints[index]),
            index,
            backup,
            params: self.params,
        })
    }

    /// Acquires the endpoint at `index` for a client pinned to it (a sticky cookie): allowed
    /// while it is usable *or draining* — a draining endpoint finishes what is bound to it —
    /// and below `max_conns`. `None` otherwise; the caller then picks normally.
    pub fn pick_sticky(&self, index: usize, now: Instant) -> Option<Pick> {
        self.pick_sticky_admitting(index, Admit::Usable, now)
    }

    /// Like [`Self::pick_sticky`] among the endpoints `admit` allows: with
    /// [`Admit::IgnoringHealth`] the health verdicts do not count (a draining endpoint still
    /// serves its bound clients; a disabled or `down` one never does).
    pub fn pick_sticky_admitting(&self, index: usize, admit: Admit, now: Instant) -> Option<Pick> {
        let e = self.endpoints.get(index)?;
        let t = self.full.hub.nanos(now);
        let honour_health = admit == Admit::Usable;
        let serves = if honour_health {
            e.serving(t)
        } else {
            e.admitted()
        };
        (serves && e.has_room() && e.try_acquire(t, honour_health)).then(|| Pick {
            endpoint: Arc::clone(e),
            index,
            backup: e.config().backup,
            params: self.params,
        })
    }

    /// Expected share of each endpoint (config order, fractions summing to 1) where weights make
    /// it knowable: `round_robin` (current effective weights), `random`, `ip_hash` and plain
    /// `hash` (configured weights) over the usable primaries — backups get 0 unless no primary
    /// is usable, then they share by weight; consistent `hash`: the ring's key space, computed
    /// arc by arc. `None` for `least_conn`, `least_time` and `feedback` (load-dependent). All
    /// zeros when no endpoint is usable.
    ///
    /// Hash shares are shares of the key space: traffic follows them when keys are spread
    /// evenly. For plain `hash` with an unusable server they are approximate: nginx's rehash
    /// rounds are CRC-correlated with the first, so that server's keys do not spread exactly by
    /// weight (a few points off).
    pub fn expected_shares(&self, now: Instant) -> Option<Vec<f64>> {
        self.expected_shares_admitting(now, Admit::Usable)
    }

    /// [`Self::expected_shares`] under `admit`: in fail-open, over every admissible endpoint
    /// whatever its health, as fail-open picks choose.
    pub fn expected_shares_admitting(&self, now: Instant, admit: Admit) -> Option<Vec<f64>> {
        let view = View {
            endpoints: &self.endpoints,
            t: self.full.hub.nanos(now),
            admit,
        };
        let mut out = vec![0.0; self.endpoints.len()];
        let usable = |tier: &Tier| tier.members.iter().any(|&i| view.counts(i as usize));
        let tier = if usable(&self.primary) {
            Some((&self.primary, true))
        } else if usable(&self.backup) {
            Some((&self.backup, false))
        } else {
            None
        };
        let (tier, primary) = tier.unwrap_or((&self.primary, true));
        if !dispatch!(&self.method, m => m.shares(&view, tier, primary, &mut out)) {
            return None;
        }
        let sum: f64 = out.iter().sum();
        if sum > 0.0 {
            out.iter_mut().for_each(|s| *s /= sum);
        }
        Some(out)
    }

    /// Usable endpoints now: enabled, not `down`, not draining, allowed by active and passive
    /// checks; backups included. The group is healthy while this is at least `min_healthy`.
    pub fn usable_count(&self, now: Instant) -> usize {
        let t = self.full.hub.nanos(now);
        self.endpoints.iter().filter(|e| e.available(t)).count()
    }

    /// The usable part of the group, 0..=1: the configured weight of its usable endpoints over
    /// the weight of all of them (backups included, as in [`Self::usable_count`]). What
    /// `failover = "graceful"` grades a group by (docs/design.md §3.3).
    pub fn usable_fraction(&self, now: Instant) -> f64 {
        let t = self.full.hub.nanos(now);
        config::usable_fraction(
            self.endpoints
                .iter()
                .map(|e| (e.config().weight, e.available(t))),
        )
    }

    /// Unhealthy only because endpoints of it are drained ([`drained_only`]).
    pub fn is_drained_only(&self, min_healthy: u32, now: Instant) -> bool {
        !self.is_healthy(min_healthy, now)
            && drained_only(self.endpoints.iter().map(AsRef::as_ref), min_healthy, now)
    }

    /// The group's health (docs/design.md §3.3): at least `min_healthy` usable endpoints, whether or not
    /// health checks are configured. The node and the simulator both ask this.
    pub fn is_healthy(&self, min_healthy: u32, now: Instant) -> bool {
        self.usable_count(now) >= min_healthy as usize
    }

    /// Counts an HTTP attempt's `answer` on `pick` into outlier detection (docs/design.md §5,
    /// [`crate::health::outlier`]). When a streak reaches its limit and the group has room
    /// under `max_ejection_percent`, the endpoint is ejected: the ejection's length is returned.
    /// Cheap on the common path (a fine answer with no streak: two loads); the group is scanned
    /// only when a streak has tripped.
    pub fn observe_answer(&self, pick: &Pick, answer: Answer, now: Instant) -> Option<Duration> {
        let rules = self.outlier.as_ref()?;
        let e = pick.endpoint();
        if !e.observe_answer(answer, rules) {
            return None;
        }
        let t = self.full.hub.nanos(now);
        if e.ejected_at(t) {
            return None;
        }
        let ejected = self.endpoints.iter().filter(|x| x.ejected_at(t)).count();
        if !room_for_one_more(ejected, self.endpoints.len(), rules) {
            return None;
        }
        e.eject(t, rules)
    }

    /// The endpoints in config order: admin and health checks set `enabled` and
    /// `active_healthy` here; status reads counters.
    pub fn endpoints(&self) -> &[Arc<EndpointState>] {
        &self.endpoints
    }

    /// The method's config name (`round_robin`, `hash`, ...).
    pub fn method_name(&self) -> &'static str {
        match &self.method {
            Method::RoundRobin(_) => "round_robin",
            Method::Hash(_) | Method::Ketama(_) => "hash",
            Method::IpHash(_) => "ip_hash",
            Method::LeastConn(_) => "least_conn",
            Method::Random(_) => "random",
            Method::LeastTime(_) => "least_time",
            Method::Feedback(_) => "feedback",
        }
    }

    /// `least_time`: which timing the listener should report through [`Pick::record_timing`].
    pub fn measure(&self) -> Option<Measure> {
        self.params.measure
    }

    /// `feedback`: the response header whose value the listener reports through
    /// [`Pick::record_feedback`].
    pub fn feedback_header(&self) -> Option<&str> {
        self.feedback_header.as_deref()
    }

    /// The listener protocol the balancer was built for.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Length of the precomputed rotation of the primaries (0: the group is too large and
    /// uneven for a table and always rotates in O(n)). For diagnostics and benchmarks.
    pub fn rotation_table_len(&self) -> usize {
        self.primary.rotation.table_len()
    }
}

/// A chosen endpoint. Counts one active connection/request on it until dropped, and records
/// the attempt's outcome. `'static + Send + Sync`: it can move into the task that serves the
/// connection.
#[derive(Debug)]
pub struct Pick {
    endpoint: Arc<EndpointState>,
    index: usize,
    backup: bool,
    params: PickParams,
}

impl Pick {
    /// Index of the endpoint in the group (config order); pass it to
    /// [`GroupBalancer::pick_excluding`] when retrying.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The endpoint's address as configured.
    pub fn address(&self) -> &Address {
        self.endpoint.address()
    }

    /// The endpoint's state.
    pub fn endpoint(&self) -> &Arc<EndpointState> {
        &self.endpoint
    }

    /// True when no primary could serve and a backup was chosen.
    pub fn is_backup(&self) -> bool {
        self.backup
    }

    /// The attempt succeeded (connected / got an acceptable response). Ends a passive marking
    /// when this was the probe after `fail_timeout`, and then returns true.
    pub fn success(&self, now: Instant) -> bool {
        self.endpoint.record_success(self.endpoint.nanos(now))
    }

    /// True when [`Self::success`] may have something to end (the endpoint has failures
    /// counted): a caller that would read the clock for every reply datagram reads it only then.
    pub fn success_pending(&self) -> bool {
        self.endpoint.success_pending()
    }

    /// The attempt failed (connect error, timeout, unhealthy status): counts towards
    /// `max_fails` and lowers the effective weight (or steps back the slow-start ramp).
    /// Returns true when this failure took the endpoint out of rotation (`max_fails` reached
    /// within `fail_timeout`, or the probe after it failed): the moment to tell the operator.
    pub fn failure(&self, now: Instant) -> bool {
        self.endpoint.record_failure(self.endpoint.nanos(now))
    }

    /// The attempt ended in an error of `kind` (a 5xx answer, a timeout, no connection):
    /// counted in the endpoint's last minute (`/status`'s `errors`), whether or not it counts
    /// towards passive marking.
    pub fn error(&self, kind: errors::ErrorKind, now: Instant) {
        self.endpoint.record_error(kind, now);
    }

    /// Reports a timing of this attempt. Listeners may report every timing they have; only the
    /// one the group's `least_time` measures feeds its average. A timed-out attempt should be
    /// reported with the time it took to give up, so a hung endpoint's average grows.
    pub fn record_timing(&self, measure: Measure, elapsed: Duration) {
        if self.measures(measure) {
            self.endpoint
                .record_latency(elapsed.as_nanos() as f64, self.params.factor);
        }
    }

    /// True when the group's `least_time` measures `measure` (so a caller need not read the
    /// clock for a timing nobody uses).
    pub fn measures(&self, measure: Measure) -> bool {
        self.params.measure == Some(measure)
    }

    /// Reports the value the endpoint sent back (`feedback`); ignored by other methods.
    pub fn record_feedback(&self, value: f64) {
        if self.params.feedback {
            self.endpoint.record_feedback(value, self.params.factor);
        }
    }
}

impl Drop for Pick {
    fn drop(&mut self) {
        self.endpoint.release();
    }
}

#[cfg(test)]
pub(crate) mod testutil;

#[cfg(test)]
mod tests;

/// Whether drains alone keep a group of `endpoints` below `min_healthy`: some of them drain, and
/// counting those that are fine otherwise (enabled, not `down`, allowed by the health verdicts),
/// it has `min_healthy`. A planned drain, not a failure: `/status`, `gtd fleet` and
/// `gtd_group_drained` tell it from one (docs/design.md §3.3).
pub fn drained_only<'a>(
    endpoints: impl IntoIterator<Item = &'a EndpointState> + Clone,
    min_healthy: u32,
    now: Instant,
) -> bool {
    endpoints
        .clone()
        .into_iter()
        .any(EndpointState::is_draining)
        && endpoints.into_iter().filter(|e| e.is_serving(now)).count() >= min_healthy as usize
}

/// A new address of a name (one its DNS answer just gained) takes the admin toggles the name
/// was given as a whole: disabled when every address the name had was disabled through the
/// admin API by the name (`POST /endpoints/L/G/NAME:PORT/disable`), drained likewise. A new
/// address, or the same ones back after an NXDOMAIN emptied the set, must not undo what the
/// operator did to the name. A toggle of one address (`NAME:PORT@IP`) stays with that address,
/// and the config's own `enabled` and `drain` apply to every address anyway.
fn name_toggles(previous: &GroupBalancer, address: &Address, fresh: &EndpointState, now: Instant) {
    let mut same = previous
        .endpoints
        .iter()
        .filter(|e| e.address().text == address.text)
        .peekable();
    if same.peek().is_none() {
        return;
    }
    let (mut disabled, mut drained) = (true, true);
    for e in same {
        if !e.toggled_by_name() {
            return;
        }
        disabled &= !e.is_enabled();
        drained &= e.is_admin_drained();
    }
    if disabled {
        fresh.set_enabled(false, now);
    }
    if drained {
        fresh.set_drained(true);
    }
    fresh.set_toggled_by_name(true);
}
