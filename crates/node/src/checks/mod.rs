//! Active health checks and RTT probes, the node's I/O side (docs/design.md §3.1, §5).
//!
//! One task per endpoint runs its group's check ([`probe`]) every `interval`, starting at a
//! fixed offset within the interval ([`gtd_core::health::spread`]) so that a node's checks do not
//! all go at once, and one check at a time (a check never outlives its timeout, never above the
//! interval). Each outcome goes to the endpoint's [`Watch`]: the round trip into its RTT
//! average, the result into its verdict machine ([`gtd_core::health::Verdict`]). A change of
//! verdict is logged once, on one line with its reason, written to the balancer's endpoint
//! state (`active_healthy`) and re-plans the listener at once; the planner reads the RTTs for
//! the ranking ([`gtd_core::split::Ranker`]). A group without checks gets a light probe (a TCP
//! connect every 10 s) for its RTT alone.
//!
//! Watches live in the snapshot and are carried by a reload for endpoints that stay (shared
//! when the group's check did not change, so health and the schedule continue; re-ruled when
//! it did). Each snapshot's tasks stop when the next one starts, and all of them at shutdown.

pub(crate) mod probe;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use gtd_core::health::Change;
use gtd_core::sync::lock;

use super::Inner;
use super::snapshot::{ListenerState, Snapshot};
pub(crate) use super::watch::{Last, Watch};

impl Watch {
    /// Takes one outcome; returns the verdict's change, if any. Only a check that passed is an
    /// RTT sample: a refused, late or wrong answer says nothing about the path's round trip.
    fn record(&self, outcome: &probe::Outcome) -> Option<Change> {
        let mut s = self.lock();
        if let Some(rtt) = outcome.rtt
            && outcome.result == probe::Result::Passed
        {
            s.rtt.observe(rtt.as_secs_f64() * 1000.0);
        }
        let verdict = s.verdict.as_mut()?;
        let change = outcome.result.check().and_then(|c| verdict.observe(c));
        s.last = Some(Last {
            at: SystemTime::now(),
            result: outcome.result,
            reason: outcome.reason.clone(),
        });
        change
    }
}

/// Starts the checks of `snap` (the snapshot now running) and stops those of the one before:
/// first writes every endpoint's current verdict to its balancer state (a new `essential`
/// endpoint is out until it passes), then one task per endpoint that is not `down`.
pub(crate) fn start(inner: &Arc<Inner>, snap: &Snapshot) {
    let token = inner.drained.child_token();
    let before = std::mem::replace(&mut *lock(&inner.checks), token.clone());
    before.cancel();
    let source = snap.config.node.source_ip;
    let now = Instant::now();
    for l in &snap.listeners {
        for (gi, g) in l.groups.iter().enumerate() {
            for (ei, ep) in g.balancer.endpoints().iter().enumerate() {
                let watch = &g.watches[ei];
                ep.set_active_healthy(watch.healthy(), now);
                if let Some(spec) = g.probe.clone()
                    && !ep.config().down
                {
                    tokio::spawn(run(
                        Arc::clone(l),
                        gi,
                        ei,
                        Arc::clone(&spec),
                        Arc::clone(watch),
                        source,
                        token.clone(),
                    ));
                }
            }
        }
        l.replan(now);
    }
}

/// Checks one endpoint until `stop`.
async fn run(
    l: Arc<ListenerState>,
    gi: usize,
    ei: usize,
    spec: probe::Shared,
    watch: Arc<Watch>,
    source: Option<IpAddr>,
    stop: CancellationToken,
) {
    let address = l.groups[gi].balancer.endpoints()[ei].address().clone();
    let interval = spec.interval;
    let now = tokio::time::Instant::now();
    // A reload continues the schedule; a new endpoint starts at its place in the interval.
    let mut due = watch
        .lock()
        .next_due
        .filter(|&d| d >= now && d <= now + interval)
        .unwrap_or_else(|| {
            now + gtd_core::health::spread(&l.cfg.name, &l.groups[gi].name, &address.id(), interval)
        });
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(due) => {}
        }
        due += interval;
        watch.lock().next_due = Some(due);
        let outcome = tokio::select! {
            () = stop.cancelled() => return,
            o = spec.run(&address, source) => o,
        };
        if stop.is_cancelled() {
            return;
        }
        l.checked(gi, ei, &spec, &watch, &outcome);
        // A check that ended at or past the next one's time (it timed out: its timeout may
        // equal the interval; or the runtime stalled) is followed by the next at once, and the
        // schedule goes on from there: an endpoint is checked every interval, never less often.
        let now = tokio::time::Instant::now();
        if due < now {
            due = now;
        }
    }
}

impl ListenerState {
    /// One check of endpoint `ei` of group `gi` ended: counted, recorded, and acted on when the
    /// verdict changed.
    fn checked(
        &self,
        gi: usize,
        ei: usize,
        spec: &probe::Spec,
        watch: &Watch,
        outcome: &probe::Outcome,
    ) {
        let g = &self.groups[gi];
        if spec.check.is_some() {
            let i = probe::Result::ALL
                .iter()
                .position(|r| *r == outcome.result)
                .unwrap_or(0);
            g.endpoints[ei].checks[i].increment(1);
        }
        let Some(change) = watch.record(outcome) else {
            return;
        };
        let now = Instant::now();
        let ep = &g.balancer.endpoints()[ei];
        ep.set_active_healthy(change.healthy, now);
        let reason = format!("{change}: {}", outcome.reason);
        if change.healthy {
            tracing::info!(
                listener = %self.cfg.name,
                group = %g.name,
                endpoint = %ep.address(),
                %reason,
                "health checks: endpoint healthy"
            );
        } else {
            tracing::warn!(
                listener = %self.cfg.name,
                group = %g.name,
                endpoint = %ep.address(),
                %reason,
                "health checks: endpoint unhealthy"
            );
        }
        self.replan(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn outcome(result: probe::Result, ms: u64) -> probe::Outcome {
        probe::Outcome {
            result,
            reason: String::new(),
            rtt: Some(Duration::from_millis(ms)),
        }
    }

    #[test]
    fn only_a_passed_check_is_an_rtt_sample() {
        let w = Watch::new(None);
        // A wrong answer that came back at once says nothing about the path.
        w.record(&outcome(probe::Result::Unexpected, 1));
        assert_eq!(w.rtt(), (None, 0));
        w.record(&outcome(probe::Result::Passed, 40));
        w.record(&outcome(probe::Result::Timeout, 2));
        assert_eq!(w.rtt(), (Some(40.0), 1));
        w.forget_rtt();
        assert_eq!(w.rtt(), (None, 0));
    }
}
