//! Per-endpoint run-time state shared by every thread of a node, and the rules that change it:
//! passive failure marking ([`super::passive`]), outlier ejection ([`super::outlier`]),
//! effective-weight recovery and the slow-start ramp.
//!
//! Everything here is an atomic. The weight rules are nginx's (`ngx_http_upstream_round_robin.c`),
//! restated for atomics:
//!
//! - a failure lowers the effective weight by `weight / max_fails` (integer division, floored
//!   at zero) — or, with `slow_start`, steps the endpoint back `slow_start / max_fails` down its
//!   ramp instead;
//! - every pick that considers an endpoint in the weighted rotation restores one unit of
//!   effective weight.
//!
//! nginx never marks the only server of an upstream; gtd does, because a group whose only
//! endpoint fails must fail over (docs/design.md §3.3).
//!
//! Times are nanoseconds since the balancer lineage's epoch (an injected `Instant`), so tests
//! drive every transition with instants built from a base, without waiting.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::errors::{ErrorCounts, ErrorKind, Recent};
use super::outlier::Ejection;
use super::passive::{Limits, Marks};
use crate::config::{Address, Endpoint, Outlier};
use crate::health::outlier::Answer;

/// Full weight on the slow-start ramp, in thousandths.
pub(crate) const RAMP_SCALE: u64 = 1000;
/// The ramp's starting point: 1% of the weight, "near zero" but enough to be picked now and
/// then, so a cold endpoint warms up instead of waiting for the ramp to grow.
pub(crate) const RAMP_FLOOR: u64 = 10;
/// `ramp_start` when no ramp is running.
const NO_RAMP: i64 = i64::MIN;
/// An EWMA that has no sample yet (a NaN bit pattern no arithmetic produces here).
const UNMEASURED: u64 = u64::MAX;

/// State shared by all endpoint states of one balancer lineage (a group across reloads): the
/// clock epoch and a generation counter bumped whenever some endpoint's weight leaves or
/// re-enters a ramp or a failure penalty, so the rotation knows when its precomputed table may
/// no longer describe the effective weights.
#[derive(Debug)]
pub(crate) struct Hub {
    epoch: Instant,
    generation: AtomicU64,
}

impl Hub {
    pub(crate) fn new(epoch: Instant) -> Arc<Self> {
        Arc::new(Hub {
            epoch,
            generation: AtomicU64::new(0),
        })
    }

    /// Nanoseconds from the epoch to `now` (0 before it).
    pub(crate) fn nanos(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The mutable part, shared across config reloads by endpoints with the same address.
#[derive(Debug)]
struct Runtime {
    hub: Arc<Hub>,
    /// Connections/requests in flight (counted by [`super::Pick`] guards).
    active: AtomicU32,
    /// Passive marking (`max_fails` within `fail_timeout`).
    marks: Marks,
    /// Outlier detection's streaks and ejection (HTTP).
    ejection: Ejection,
    /// Weight units lost to failures, restored one per pick (nginx's `weight - effective_weight`).
    deficit: AtomicU32,
    /// Start of the slow-start ramp (may lie before the epoch after a step back), or `NO_RAMP`.
    ramp_start: AtomicI64,
    /// Administratively enabled (admin API; survives reloads).
    enabled: AtomicBool,
    /// Drained through this node's admin API (survives reloads until undrained), beside the
    /// config's `drain` (the file's, or a fleet-wide drain applied to it).
    drained: AtomicBool,
    /// The admin API's last toggle of it named its whole name (`NAME:PORT`), not this address
    /// alone (`NAME:PORT@IP`): a new address of the name takes such toggles over.
    by_name: AtomicBool,
    /// The active health check's verdict (true until a checker says otherwise).
    active_healthy: AtomicBool,
    /// EWMA of response time in nanoseconds (`least_time`), as `f64` bits.
    latency: AtomicU64,
    /// EWMA of the reported value (`feedback`), as `f64` bits.
    feedback: AtomicU64,
    /// 5xx answers, timeouts and connect failures of the last minute.
    errors: Recent,
}

/// One endpoint of a group as the balancer sees it: its configuration (fixed for this balancer)
/// and its run-time state (atomics shared by all threads, kept across reloads for the same
/// address).
///
/// The admin API and health checkers write `enabled` and `active_healthy` here; status and the
/// simulator read counters. Cloning the `Arc` around it is what a [`super::Pick`] guard holds.
#[derive(Debug)]
pub struct EndpointState {
    config: Endpoint,
    rt: Arc<Runtime>,
}

impl EndpointState {
    /// A fresh endpoint.
    pub(crate) fn new(config: Endpoint, hub: Arc<Hub>) -> Self {
        let rt = Runtime {
            hub,
            active: AtomicU32::new(0),
            marks: Marks::default(),
            ejection: Ejection::default(),
            deficit: AtomicU32::new(0),
            ramp_start: AtomicI64::new(NO_RAMP),
            enabled: AtomicBool::new(config.enabled),
            drained: AtomicBool::new(false),
            by_name: AtomicBool::new(false),
            active_healthy: AtomicBool::new(true),
            latency: AtomicU64::new(UNMEASURED),
            feedback: AtomicU64::new(UNMEASURED),
            errors: Recent::default(),
        };
        EndpointState {
            config,
            rt: Arc::new(rt),
        }
    }

    /// The same run-time state under a new configuration (a reload changed parameters). An
    /// `enabled` that changed in the file takes effect; one left alone keeps the admin's choice.
    /// The changed endpoint starts with a clean record: its passive mark and any outlier
    /// ejection end (docs/design.md §5), as the operator who changed it expects it tried again.
    /// Not when only `drain` or `capacity` changed: draining a failing endpoint (in the file or
    /// with `gtd drain`) says nothing of its health, and must not send its bound clients back.
    pub(crate) fn reconfigured(&self, config: Endpoint, now: Instant) -> Self {
        if config.enabled != self.config.enabled {
            self.rt.enabled.store(config.enabled, Ordering::Release);
        }
        let t = self.rt.hub.nanos(now);
        let judged_again = Endpoint {
            drain: self.config.drain,
            capacity: self.config.capacity,
            ..config.clone()
        } != self.config;
        let next = EndpointState {
            config,
            rt: Arc::clone(&self.rt),
        };
        if judged_again {
            next.clear_record(t);
        }
        next
    }

    /// True when `other` is the same endpoint at run time (its state was carried over by a
    /// reload), even if its configuration changed.
    pub fn same_runtime(&self, other: &EndpointState) -> bool {
        Arc::ptr_eq(&self.rt, &other.rt)
    }

    /// The configuration this balancer was built with.
    pub fn config(&self) -> &Endpoint {
        &self.config
    }

    /// The endpoint's address as configured.
    pub fn address(&self) -> &Address {
        &self.config.address
    }

    /// Connections/requests in flight.
    pub fn active(&self) -> u32 {
        self.rt.active.load(Ordering::Relaxed)
    }

    /// Recent failures (the count compared with `max_fails`).
    pub fn fails(&self) -> u32 {
        self.rt.marks.fails()
    }

    /// Administratively enabled.
    pub fn is_enabled(&self) -> bool {
        self.rt.enabled.load(Ordering::Acquire)
    }

    /// Enables or disables the endpoint (admin API). Enabling ends a passive mark and an
    /// outlier ejection (docs/design.md §5), even of an endpoint enabled already; enabling a
    /// disabled endpoint starts its slow-start ramp.
    pub fn set_enabled(&self, enabled: bool, now: Instant) {
        let t = self.rt.hub.nanos(now);
        let was = self.rt.enabled.swap(enabled, Ordering::AcqRel);
        if enabled {
            self.clear_record(t);
        }
        if enabled && !was {
            self.start_ramp(t);
        }
    }

    /// Drained through the admin API (the config's `drain` aside).
    pub fn is_admin_drained(&self) -> bool {
        self.rt.drained.load(Ordering::Acquire)
    }

    /// Drains or undrains the endpoint (admin API): no new traffic while drained, what is bound
    /// to it finishes. Says nothing of its health, so its record stays.
    pub fn set_drained(&self, drained: bool) {
        self.rt.drained.store(drained, Ordering::Release);
    }

    /// Whether the admin API's last toggle named the endpoint's whole name rather than this
    /// address alone.
    pub fn toggled_by_name(&self) -> bool {
        self.rt.by_name.load(Ordering::Acquire)
    }

    /// Records whether the admin API's toggle just applied named the whole name.
    pub fn set_toggled_by_name(&self, by_name: bool) {
        self.rt.by_name.store(by_name, Ordering::Release);
    }

    /// Draining: the config's `drain` (the file's or a fleet drain) or the admin API's.
    pub fn is_draining(&self) -> bool {
        self.config.drain || self.is_admin_drained()
    }

    /// The active health check's verdict.
    pub fn is_active_healthy(&self) -> bool {
        self.rt.active_healthy.load(Ordering::Acquire)
    }

    /// Records the active health check's verdict. A transition to healthy ends a passive mark
    /// and an outlier ejection (the checks saw the endpoint go and come back: it was restarted
    /// or repaired, docs/design.md §5) and starts the slow-start ramp. Checks that pass all
    /// along end neither: they are what missed the fault.
    pub fn set_active_healthy(&self, healthy: bool, now: Instant) {
        let was = self.rt.active_healthy.swap(healthy, Ordering::AcqRel);
        if healthy && !was {
            let t = self.rt.hub.nanos(now);
            self.clear_record(t);
            self.start_ramp(t);
        }
    }

    /// Ejected by outlier detection at `now`.
    pub fn is_ejected(&self, now: Instant) -> bool {
        self.rt.ejection.ejected(self.rt.hub.nanos(now))
    }

    /// What is left of an outlier ejection at `now`, if the endpoint is ejected.
    pub fn ejected_for(&self, now: Instant) -> Option<Duration> {
        self.rt.ejection.remaining(self.rt.hub.nanos(now))
    }

    /// Outlier ejections so far (kept across reloads that leave the endpoint alone).
    pub fn ejections(&self) -> u64 {
        self.rt.ejection.total()
    }

    /// True while passive checks keep the endpoint out (`max_fails` reached within
    /// `fail_timeout`, or its one probe after `fail_timeout` is still in flight).
    pub fn is_passively_down(&self, now: Instant) -> bool {
        !self.passive_allows(self.rt.hub.nanos(now))
    }

    /// Usable (docs/design.md §3.3): enabled, not `down`, not draining, allowed by active and passive
    /// checks. Being at `max_conns` does not make an endpoint unusable.
    pub fn is_usable(&self, now: Instant) -> bool {
        self.available(self.rt.hub.nanos(now))
    }

    /// May keep serving what is already bound to it (a sticky client, a UDP flow): usable, or
    /// draining — a draining endpoint finishes what it has.
    pub fn is_serving(&self, now: Instant) -> bool {
        self.serving(self.rt.hub.nanos(now))
    }

    /// Enabled and not `down`: what fail-open still requires of an endpoint that keeps what is
    /// bound to it (draining or not).
    pub fn is_admitted(&self) -> bool {
        self.admitted()
    }

    /// Admissible: enabled, not `down`, not draining — usable but for the health verdicts
    /// (active checks, passive marking), which fail-open ignores (docs/design.md §3.3).
    pub fn is_admissible(&self) -> bool {
        self.admissible()
    }

    /// True when an attempt on this endpoint failed after `since` (a UDP flow opened then
    /// leaves an endpoint that fails it even while fail-open keeps marked endpoints in use).
    pub fn failed_since(&self, since: Instant) -> bool {
        self.rt.marks.failed_after(self.rt.hub.nanos(since))
    }

    /// The weight a weighted rotation currently gives the endpoint: configured weight minus the
    /// failure penalty, times the slow-start ramp (0.01..=1).
    pub fn effective_weight(&self, now: Instant) -> f64 {
        let t = self.rt.hub.nanos(now);
        self.swrr_weight(t) as f64 / RAMP_SCALE as f64
    }

    /// The `least_time` average, once measured.
    pub fn latency(&self) -> Option<Duration> {
        load_ewma(&self.rt.latency).map(|ns| Duration::from_nanos(ns as u64))
    }

    /// The `feedback` average, once reported.
    pub fn feedback(&self) -> Option<f64> {
        load_ewma(&self.rt.feedback)
    }

    /// Its 5xx answers, timeouts and connect failures of the minute before `now`
    /// ([`super::errors`]).
    pub fn recent_errors(&self, now: Instant) -> ErrorCounts {
        self.rt.errors.counts(self.rt.hub.nanos(now))
    }

    /// Counts an error of `kind` at `now` into the last minute's (no lock, no allocation).
    pub fn record_error(&self, kind: ErrorKind, now: Instant) {
        self.rt.errors.record(kind, self.rt.hub.nanos(now));
    }

    // ----- crate-internal: the pick path -----

    pub(crate) fn nanos(&self, now: Instant) -> u64 {
        self.rt.hub.nanos(now)
    }

    fn limits(&self) -> Limits {
        Limits {
            max_fails: self.config.max_fails,
            fail_timeout: nanos(self.config.fail_timeout),
        }
    }

    fn passive_allows(&self, t: u64) -> bool {
        self.rt.marks.allows(t, self.limits())
    }

    /// Ends a passive mark and an outlier ejection: the endpoint starts again with a clean
    /// record (admin enable, a reload that changed it).
    fn clear_record(&self, t: u64) {
        self.rt.marks.clear(self.limits());
        self.rt.ejection.clear(t);
    }

    /// May be chosen at `t`, `max_conns` aside: admissible and healthy.
    pub(crate) fn available(&self, t: u64) -> bool {
        self.admissible() && self.healthy(t)
    }

    /// May serve at `t` a client already bound to it (sticky): like [`Self::available`] but a
    /// draining endpoint still serves its bound clients.
    pub(crate) fn serving(&self, t: u64) -> bool {
        self.admitted() && self.healthy(t)
    }

    /// May take new traffic whatever the health verdicts say: not `down`, enabled, not
    /// draining. What fail-open still requires (docs/design.md §3.3).
    pub(crate) fn admissible(&self) -> bool {
        !self.config.drain && !self.rt.drained.load(Ordering::Relaxed) && self.admitted()
    }

    /// Not `down` and enabled: what the config and the admin API allow, draining aside.
    pub(crate) fn admitted(&self) -> bool {
        !self.config.down && self.rt.enabled.load(Ordering::Relaxed)
    }

    /// Allowed at `t` by the active check's verdict, passive marking and outlier detection.
    pub(crate) fn healthy(&self, t: u64) -> bool {
        self.rt.active_healthy.load(Ordering::Relaxed)
            && self.passive_allows(t)
            && !self.rt.ejection.ejected(t)
    }

    /// Below `max_conns` (always, when unlimited).
    pub(crate) fn has_room(&self) -> bool {
        self.config
            .max_conns
            .is_none_or(|m| self.rt.active.load(Ordering::Relaxed) < m)
    }

    /// Counts one more connection if `max_conns` allows and, for a marked endpoint whose
    /// `fail_timeout` has passed, claims its single probe. False when another thread got there
    /// first; nothing is counted then.
    ///
    /// With `honour_marking` false (fail-open) a marked endpoint is not refused for want of its
    /// probe. The pick still claims the probe when `fail_timeout` has passed, so that its
    /// success ends the marking as any probe's does.
    pub(crate) fn try_acquire(&self, t: u64, honour_marking: bool) -> bool {
        let rt = &self.rt;
        match self.config.max_conns {
            Some(max) => {
                if rt
                    .active
                    .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |a| {
                        (a < max).then_some(a + 1)
                    })
                    .is_err()
                {
                    return false;
                }
            }
            None => {
                rt.active.fetch_add(1, Ordering::AcqRel);
            }
        }
        let lim = self.limits();
        let probe_won = rt.marks.claim_probe(t, lim);
        if honour_marking && rt.marks.marked(lim) && !probe_won {
            self.release();
            return false;
        }
        true
    }

    /// Undoes one [`Self::try_acquire`].
    pub(crate) fn release(&self) {
        self.rt.active.fetch_sub(1, Ordering::AcqRel);
    }

    /// Slow-start position in thousandths of the weight.
    pub(crate) fn ramp_milli(&self, t: u64) -> u64 {
        let Some(ss) = self.config.slow_start else {
            return RAMP_SCALE;
        };
        let start = self.rt.ramp_start.load(Ordering::Acquire);
        if start == NO_RAMP {
            return RAMP_SCALE;
        }
        let ss = i128::from(nanos(ss));
        let elapsed = i128::from(t) - i128::from(start);
        if elapsed >= ss || ss == 0 {
            RAMP_SCALE
        } else if elapsed <= 0 {
            RAMP_FLOOR
        } else {
            ((elapsed * i128::from(RAMP_SCALE) / ss) as u64).max(RAMP_FLOOR)
        }
    }

    /// Weight in the rotation's units (thousandths): `(weight - deficit) * ramp`.
    pub(crate) fn swrr_weight(&self, t: u64) -> i64 {
        let w = self
            .config
            .weight
            .saturating_sub(self.rt.deficit.load(Ordering::Relaxed));
        (u64::from(w) * self.ramp_milli(t)) as i64
    }

    /// Configured weight times the ramp, in thousandths (`least_conn` compares against it).
    pub(crate) fn ramped_weight(&self, t: u64) -> u64 {
        u64::from(self.config.weight) * self.ramp_milli(t)
    }

    /// A pick considered this endpoint: restore one unit of a failure penalty.
    pub(crate) fn restore_one(&self) {
        if self.rt.deficit.load(Ordering::Relaxed) > 0 {
            let _ = self
                .rt
                .deficit
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |d| d.checked_sub(1));
        }
    }

    /// No failure penalty and no ramp in progress at `t`.
    pub(crate) fn at_full_weight(&self, t: u64) -> bool {
        self.rt.deficit.load(Ordering::Acquire) == 0 && self.ramp_milli(t) == RAMP_SCALE
    }

    fn start_ramp(&self, t: u64) {
        if self.config.slow_start.is_some() {
            self.rt.ramp_start.store(t as i64, Ordering::Release);
            self.rt.hub.bump();
        }
    }

    /// A new endpoint added by a reload warms up like a recovered one.
    pub(crate) fn start_ramp_at(&self, now: Instant) {
        self.start_ramp(self.rt.hub.nanos(now));
    }

    /// A failed attempt (connect error, timeout, unhealthy status) at `t`. True when this
    /// failure took the endpoint out: `max_fails` reached, or the probe after `fail_timeout`
    /// failed.
    pub(crate) fn record_failure(&self, t: u64) -> bool {
        let rt = &self.rt;
        let cfg = &self.config;
        let failed = rt.marks.failure(t, self.limits());
        if !failed.counted {
            return false;
        }
        let max = cfg.max_fails;
        match cfg.slow_start {
            Some(ss) => {
                let ss = i64::try_from(nanos(ss)).unwrap_or(i64::MAX);
                let start = rt.ramp_start.load(Ordering::Acquire);
                let t = t as i64;
                let elapsed = if start == NO_RAMP {
                    ss
                } else {
                    t.saturating_sub(start).clamp(0, ss)
                };
                let progress = (elapsed - ss / i64::from(max)).max(0);
                rt.ramp_start.store(t - progress, Ordering::Release);
            }
            None => {
                let step = cfg.weight / max;
                let _ = rt
                    .deficit
                    .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |d| {
                        Some(d.saturating_add(step).min(cfg.weight))
                    });
            }
        }
        rt.hub.bump();
        failed.marked
    }

    /// A successful attempt at `t`. True when it ended a passive marking (the probe after
    /// `fail_timeout` succeeded).
    pub(crate) fn record_success(&self, t: u64) -> bool {
        let ended = self.rt.marks.success(self.limits());
        if ended {
            self.start_ramp(t);
        }
        ended
    }

    /// True when a success may have something to end (failures are counted): lets a caller
    /// that would read the clock for every datagram read it only then.
    pub(crate) fn success_pending(&self) -> bool {
        self.rt.marks.fails() > 0
    }

    /// Counts an HTTP answer into the outlier streaks; true when a streak reached its limit
    /// (the group then decides whether the endpoint may be ejected).
    pub(crate) fn observe_answer(&self, answer: Answer, rules: &Outlier) -> bool {
        self.rt.ejection.observe(answer, rules)
    }

    /// Ejects the endpoint at `t` for as long as the rules say; `None` if another thread did.
    pub(crate) fn eject(&self, t: u64, rules: &Outlier) -> Option<Duration> {
        self.rt.ejection.eject(t, rules)
    }

    /// Ejected at `t`.
    pub(crate) fn ejected_at(&self, t: u64) -> bool {
        self.rt.ejection.ejected(t)
    }

    /// Folds a response-time sample (nanoseconds) into the `least_time` EWMA.
    pub(crate) fn record_latency(&self, sample_ns: f64, factor: f64) {
        update_ewma(&self.rt.latency, sample_ns.max(1.0), factor);
    }

    /// Folds a reported value into the `feedback` EWMA.
    pub(crate) fn record_feedback(&self, value: f64, factor: f64) {
        if value.is_finite() {
            update_ewma(&self.rt.feedback, value.max(0.0), factor);
        }
    }

    pub(crate) fn latency_ns(&self) -> Option<f64> {
        load_ewma(&self.rt.latency)
    }

    pub(crate) fn feedback_value(&self) -> Option<f64> {
        load_ewma(&self.rt.feedback)
    }
}

fn load_ewma(cell: &AtomicU64) -> Option<f64> {
    let bits = cell.load(Ordering::Relaxed);
    (bits != UNMEASURED).then(|| f64::from_bits(bits))
}

/// `avg = factor * avg + (1 - factor) * sample`; the first sample is taken as is.
fn update_ewma(cell: &AtomicU64, sample: f64, factor: f64) {
    let _ = cell.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |bits| {
        let next = if bits == UNMEASURED {
            sample
        } else {
            factor * f64::from_bits(bits) + (1.0 - factor) * sample
        };
        Some(next.to_bits())
    });
}

#[cfg(test)]
mod tests;
