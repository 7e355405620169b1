//! A ramp that belongs to the fleet (issue 38, items 3–7): its plan and state in etcd under
//! `PREFIX/ramp`, driven by one node at a time — the node holding `PREFIX/ramp-owner` under a
//! lease of its own; when it dies the lease runs out and another node takes the ramp where the
//! record says it is. Each step is published as a revision with its message; after each step
//! the driver reads every node's own counters (its `/status` and `/metrics`, no store in
//! between, [`super::read`]) and judges the step by the *took*, *errors*, *latency* and
//! *saturation* gates ([`super::gates`]).
//!
//! Every change of the record is a transaction guarded by the record's `mod_revision` (so
//! that `gtd ramp pause`/`abort` are never overwritten) and, for the driver, by the owner key
//! still naming it. The record itself, and its reads and writes, are [`super::record`].

use std::collections::BTreeMap;
use std::time::Duration;

use super::Shares;
use super::gates::{Counts, ErrorGate, Judged, LatencyGate, Timing, Took};
use super::read::{reach, reading};
use super::record::{Inconclusive, Phase, Record, Settings, State, owner_key, read, write};

use crate::etcd::pb::etcdserverpb as rpc;
use crate::{Error, Revision, Store, now_ms};

/// What the driving node reports: events for its timeline, and its gauges.
pub struct Hooks {
    /// A line for the node's event timeline.
    pub event: Box<dyn Fn(String) + Send + Sync>,
    /// `gtd_ramp_step`, `gtd_ramp_state` (both 0 when this node drives nothing).
    pub gauges: Box<dyn Fn(i64, i64) + Send + Sync>,
}

/// How long the owner key outlives a dead driver, seconds.
const OWNER_TTL: i64 = 5;
/// How often the driver looks while a ramp runs.
const TICK: Duration = Duration::from_millis(500);
/// How often a node looks for a ramp while none runs.
const IDLE: Duration = Duration::from_secs(2);
/// Longest a node may take to apply a step before the took gate names it.
const APPLY_LIMIT_MS: u64 = 30_000;

struct Owned {
    lease: i64,
    keeper: crate::etcd::LeaseKeeper,
    answers: crate::etcd::Answers<rpc::LeaseKeepAliveResponse>,
}

async fn claim(store: &Store, id: &str) -> Result<Option<Owned>, Error> {
    use rpc::compare::{CompareResult, CompareTarget, TargetUnion};
    use rpc::request_op::Request;
    let e = crate::etcd_error;
    let lease = store
        .client()
        .lease_grant(OWNER_TTL)
        .await
        .map_err(e("granting the ramp lease"))?
        .id;
    let k = owner_key(store).into_bytes();
    let resp = store
        .client()
        .txn(rpc::TxnRequest {
            compare: vec![rpc::Compare {
                result: CompareResult::Equal.into(),
                target: CompareTarget::Create.into(),
                key: k.clone(),
                target_union: Some(TargetUnion::CreateRevision(0)),
                ..Default::default()
            }],
            success: vec![rpc::RequestOp {
                request: Some(Request::RequestPut(rpc::PutRequest {
                    key: k,
                    value: id.as_bytes().to_vec(),
                    lease,
                    ..Default::default()
                })),
            }],
            failure: vec![],
        })
        .await
        .map_err(e("claiming the ramp"))?;
    if !resp.succeeded {
        let _ = store.client().lease_revoke(lease).await;
        return Ok(None);
    }
    let (keeper, answers) = store
        .client()
        .lease_keep_alive(lease)
        .await
        .map_err(e("keeping the ramp lease"))?;
    Ok(Some(Owned {
        lease,
        keeper,
        answers,
    }))
}

async fn renew(owned: &mut Owned) -> bool {
    if owned.keeper.keep_alive().await.is_err() {
        return false;
    }
    matches!(
        tokio::time::timeout(Duration::from_secs(2), owned.answers.message()).await,
        Ok(Ok(Some(r))) if r.ttl > 0
    )
}

/// Drives whatever ramp is stored under `access`'s `prefix`, as node `id`, until the task is
/// dropped: claims the ramp when nobody holds it, renews its claim, and moves the ramp on.
pub async fn drive(access: crate::Access, prefix: String, id: String, hooks: Hooks) {
    let mut store = None;
    let mut owned: Option<Owned> = None;
    let mut said = String::new();
    let mut active = false;
    loop {
        tokio::time::sleep(if active { TICK } else { IDLE }).await;
        let s = match &store {
            Some(s) => s,
            None => match Store::connect(&access, &prefix).await {
                Ok(s) => store.insert(s),
                Err(_) => continue,
            },
        };
        let mut s = s.clone();
        match tick(&mut s, &id, &hooks, &mut owned).await {
            Ok(running) => {
                active = running;
                said.clear();
            }
            Err(e) => {
                let e = crate::describe(&e);
                if e != said {
                    let hint = if e.contains("permission denied") {
                        "; with etcd's users on, a node drives a ramp only with the gtd-ramp role \
                         (deploy/etcd/roles.sh, docs/operations.md \"Securing etcd\")"
                    } else {
                        ""
                    };
                    tracing::warn!(error = %e, "ramp: this node could not drive the ramp now{hint}");
                    said = e;
                }
                if let Some(o) = owned.take() {
                    let _ = s.client().lease_revoke(o.lease).await;
                }
                (hooks.gauges)(0, 0);
            }
        }
    }
}

/// One look: whether a ramp is running (the next look comes sooner).
async fn tick(
    store: &mut Store,
    id: &str,
    hooks: &Hooks,
    owned: &mut Option<Owned>,
) -> Result<bool, Error> {
    let Some((mut rec, seen)) = read(store).await? else {
        return Ok(false);
    };
    if rec.state.done() {
        if let Some(o) = owned.take() {
            let _ = store.client().lease_revoke(o.lease).await;
            (hooks.gauges)(rec.at as i64, rec.gauge());
        }
        return Ok(false);
    }
    match owned {
        Some(o) => {
            if !renew(o).await {
                *owned = None;
                (hooks.event)(format!("ramp {}: this node lost the ramp's lease", rec.id));
                (hooks.gauges)(0, 0);
                return Ok(true);
            }
        }
        None => {
            // Someone holds it: nothing to claim (no lease granted for nothing).
            let held = store
                .client()
                .range(rpc::RangeRequest {
                    key: owner_key(store).into_bytes(),
                    count_only: true,
                    ..Default::default()
                })
                .await
                .map_err(crate::etcd_error("reading the ramp's owner"))?;
            if held.count > 0 {
                return Ok(true);
            }
            let Some(o) = claim(store, id).await? else {
                return Ok(true);
            };
            *owned = Some(o);
            let was = rec.owner.replace(id.to_owned());
            let text = match was {
                Some(w) if w != id => format!("took the ramp over from {w}"),
                _ => "drives the ramp".to_owned(),
            };
            (hooks.event)(format!("ramp {}: this node {text}", rec.id));
            rec.note(id, text);
            write(store, &rec, seen, Some(id)).await?;
            return Ok(true);
        }
    }
    let before = rec.log.len();
    if advance(store, &mut rec, id).await? && write(store, &rec, seen, Some(id)).await? {
        for l in &rec.log[before..] {
            (hooks.event)(format!("ramp {} step {}: {}", rec.id, l.step, l.text));
        }
    }
    (hooks.gauges)(rec.at as i64, rec.gauge());
    Ok(true)
}

fn elapsed(since: u64) -> u64 {
    now_ms().saturating_sub(since)
}

/// Going back: straight to the start (`severe`, or from step 1), else down the steps taken.
fn back(rec: &mut Record, id: &str, severe: bool, why: String) {
    let next = if severe || rec.at <= 1 { 0 } else { rec.at - 1 };
    rec.note(
        id,
        format!(
            "going back{}: {why}",
            if next == 0 {
                " to the starting revision".to_owned()
            } else {
                format!(" down the steps, to step {next}")
            }
        ),
    );
    rec.outcome = Some(why);
    rec.phase = Phase::Down {
        next,
        since_ms: 0,
        ending: State::Reverted,
    };
}

/// One move of the state machine; whether the record changed.
async fn advance(store: &mut Store, rec: &mut Record, id: &str) -> Result<bool, Error> {
    if rec.abort && !matches!(rec.phase, Phase::Down { .. } | Phase::Done) {
        rec.note(
            id,
            "aborted (gtd ramp abort): back to the starting revision".to_owned(),
        );
        rec.outcome = Some("aborted by gtd ramp abort".to_owned());
        rec.phase = Phase::Down {
            next: 0,
            since_ms: 0,
            ending: State::Aborted,
        };
        return Ok(true);
    }
    if rec.state == State::Paused {
        return Ok(false);
    }
    let n = rec.steps.len();
    let settings = rec.settings.clone();
    match rec.phase.clone() {
        Phase::Done => Ok(false),
        Phase::Publish { step } => publish_step(store, rec, id, n, step).await,
        Phase::Applying {
            step,
            revision,
            since_ms,
        } => applying(store, rec, id, &settings, (step, revision, since_ms)).await,
        Phase::Judging {
            step,
            revision,
            since_ms,
            window,
            timing,
            held,
        } => {
            judging(
                store,
                rec,
                id,
                n,
                &settings,
                (step, revision, since_ms),
                (&window, &timing),
                held,
            )
            .await
        }
        Phase::Down {
            next,
            since_ms,
            ending,
        } => going_down(store, rec, id, n, &settings, (next, since_ms, ending)).await,
    }
}

/// [`Phase::Publish`]: the step's revision goes out (the baseline counters first, once).
async fn publish_step(
    store: &mut Store,
    rec: &mut Record,
    id: &str,
    n: usize,
    step: usize,
) -> Result<bool, Error> {
    if rec.baseline.is_none() {
        let entries = store.nodes().await?;
        let mut base: BTreeMap<String, Counts> = BTreeMap::new();
        let mut timing = BTreeMap::new();
        let mut unread = Vec::new();
        for (node, _) in &rec.steps[step - 1].shares {
            let Some(e) = entries.iter().find(|e| &e.id == node) else {
                continue;
            };
            match reading(&reach(&e.admin, &e.id), &e.id).await {
                Ok((c, t)) => {
                    for (g, c) in c {
                        base.entry(g).or_default().add(&c);
                    }
                    timing.insert(node.clone(), t);
                }
                Err(why) => unread.push(format!("{node} ({why})")),
            }
        }
        rec.baseline = Some(base);
        rec.timing = Some(timing);
        if !unread.is_empty() {
            rec.note(
                id,
                format!(
                    "baseline: not read, so without a latency gate: {}",
                    unread.join("; ")
                ),
            );
        }
    }
    let p = &rec.steps[step - 1];
    let message = format!(
        "ramp {}: step {step}/{n}, {} % of the move ({} % of decisions moved){}",
        rec.id,
        super::num(p.target),
        super::num(p.moved),
        if rec.message.is_empty() {
            String::new()
        } else {
            format!(": {}", rec.message)
        }
    );
    let message = match rec.verdict.take() {
        Some(v) => format!("{message} (after {v})"),
        None => message,
    };
    let draft = p.draft.clone();
    match publish(store, rec, draft, message, id).await? {
        Ok(r) => {
            rec.at = step;
            rec.revision = r;
            rec.note(id, format!("step {step}/{n} published as revision {r}"));
            rec.phase = Phase::Applying {
                step,
                revision: r,
                since_ms: now_ms(),
            };
        }
        Err(why) => stopped(rec, id, why),
    }
    Ok(true)
}

/// [`Phase::Applying`]: waits until every node judged applied the step's revision, or goes
/// back naming those that did not.
async fn applying(
    store: &mut Store,
    rec: &mut Record,
    id: &str,
    settings: &Settings,
    (step, revision, since_ms): (usize, u64, u64),
) -> Result<bool, Error> {
    let entries = store.nodes().await?;
    let mut lagging = Vec::new();
    let mut window = BTreeMap::new();
    let mut timing = BTreeMap::new();
    let mut unread = Vec::new();
    for (node, _) in &rec.steps[step - 1].shares {
        let Some(e) = entries.iter().find(|e| &e.id == node) else {
            continue;
        };
        if e.applied != Some(revision) {
            lagging.push(format!(
                "{node} still on revision {}",
                e.applied.map_or("none".to_owned(), |a| a.to_string())
            ));
            continue;
        }
        // One that does not answer, or answers as another node, is left out of the window
        // (and of the gates), and the log names it and why.
        match reading(&reach(&e.admin, &e.id), &e.id).await {
            Ok((c, t)) => {
                window.insert(node.clone(), c);
                timing.insert(node.clone(), t);
            }
            Err(why) => unread.push(format!("{node} ({why})")),
        }
    }
    if lagging.is_empty() {
        let unread = if unread.is_empty() {
            String::new()
        } else {
            format!("; not read, so not judged: {}", unread.join("; "))
        };
        rec.note(
            id,
            format!(
                "every node applied revision {revision}: the window starts ({} nodes){unread}",
                window.len()
            ),
        );
        rec.phase = Phase::Judging {
            step,
            revision,
            since_ms: now_ms(),
            window,
            timing,
            held: false,
        };
        return Ok(true);
    }
    if elapsed(since_ms) > APPLY_LIMIT_MS.max(settings.min_wait_ms) {
        back(rec, id, true, format!("took: {}", lagging.join("; ")));
        return Ok(true);
    }
    Ok(false)
}

/// A step's window as it started: per node its counters and its [`Timing`].
type Window<'a> = (
    &'a BTreeMap<String, BTreeMap<String, Counts>>,
    &'a BTreeMap<String, Timing>,
);

/// Goes back when the errors, latency or saturation gate failed (back to the start at once
/// on a severe error increase, else down the steps); whether it did.
fn failed(rec: &mut Record, id: &str, step: usize, judged: &Judged) -> bool {
    let (gate, bad, severe) = if let Some(bad) = judged.errors.iter().find(|g| g.failed()) {
        let severe = judged.errors.iter().any(ErrorGate::severe);
        ("errors", bad.line(), severe)
    } else if let Some(bad) = judged.latency.iter().find(|g| g.failed()) {
        ("latency", bad.line(), false)
    } else if let Some(bad) = judged.saturation.iter().find(|g| g.failed()) {
        ("saturation", bad.line(), false)
    } else {
        return false;
    };
    rec.note(
        id,
        format!(
            "step {step} failed the {gate} gate:\n  {}",
            judged.figures()
        ),
    );
    back(rec, id, severe, bad);
    true
}

/// The fleet-wide drains on the listeners of `receiving` (`LISTENER/GROUP`), in key order, as
/// [`Record::drains`] names them.
pub(crate) fn drain_names(drains: &[crate::drain::Drain], receiving: &[String]) -> Vec<String> {
    drains
        .iter()
        .filter(|d| {
            receiving
                .iter()
                .any(|r| r.split('/').next() == Some(d.listener.as_str()))
        })
        .map(|d| d.target().to_string())
        .collect()
}

/// A drain during the step (issue 38): while the fleet's drains on the ramp's listeners differ
/// from those the plan assumed, the step is not judged (a drain is an emergency's tool, not a
/// gate's failure); once they are back the step's window starts again. `Some(changed)` when
/// the step is not to be judged now.
async fn drain_wait(
    store: &mut Store,
    rec: &mut Record,
    id: &str,
    (step, revision): (usize, u64),
) -> Result<Option<bool>, Error> {
    let Some(planned) = rec.drains.clone() else {
        return Ok(None);
    };
    let (drains, _) = store.drains().await?;
    let now = drain_names(&drains, &rec.receiving);
    let list = |d: &[String]| {
        if d.is_empty() {
            "none".to_owned()
        } else {
            d.join(", ")
        }
    };
    if now != planned {
        if rec.drained {
            return Ok(Some(false));
        }
        rec.drained = true;
        rec.note(
            id,
            format!(
                "drained: the fleet-wide drains on the ramp's listeners changed during step \
                 {step} (now {}; the plan assumed {}): the step is not judged until they are \
                 back (gtd undrain), or gtd ramp abort",
                list(&now),
                list(&planned)
            ),
        );
        return Ok(Some(true));
    }
    if !rec.drained {
        return Ok(None);
    }
    rec.drained = false;
    rec.note(
        id,
        format!(
            "the drains are as planned again ({}): step {step}'s window starts again",
            list(&now)
        ),
    );
    rec.phase = Phase::Applying {
        step,
        revision,
        since_ms: now_ms(),
    };
    Ok(Some(true))
}

/// [`Phase::Judging`]: the step's gates once its window has enough evidence; advances, holds
/// or goes back.
#[allow(clippy::too_many_arguments)]
async fn judging(
    store: &mut Store,
    rec: &mut Record,
    id: &str,
    n: usize,
    settings: &Settings,
    (step, revision, since_ms): (usize, u64, u64),
    window: Window<'_>,
    held: bool,
) -> Result<bool, Error> {
    if let Some(changed) = drain_wait(store, rec, id, (step, revision)).await? {
        return Ok(changed);
    }
    let waited = elapsed(since_ms);
    if waited < settings.min_wait_ms {
        return Ok(false);
    }
    let judged = gates(store, rec, (step, revision, since_ms), window).await?;
    let figures = || judged.figures();
    if !judged.lagging.is_empty() {
        back(
            rec,
            id,
            true,
            format!("took: {}", judged.lagging.join("; ")),
        );
        return Ok(true);
    }
    if failed(rec, id, step, &judged) {
        return Ok(true);
    }
    let errors = &judged.errors;
    let took = &judged.took;
    // A p99 over its limit on a short sample keeps the step from passing until it is judged.
    let conclusive = errors.iter().all(ErrorGate::conclusive)
        && !judged.latency.iter().any(LatencyGate::pending);
    let least = if step == n {
        settings.min_wait_ms.max(settings.bake_ms)
    } else {
        settings.min_wait_ms
    };
    let short = !conclusive && waited >= settings.max_wait_ms;
    if short {
        match settings.on_inconclusive {
            // Advancing on what was seen: an increase above the limit on that short sample
            // still fails the step.
            Inconclusive::Proceed => {
                if let Some(bad) = errors.iter().find(|g| g.above()) {
                    rec.note(
                        id,
                        format!(
                            "step {step} failed the errors gate on a short sample:\n  {}",
                            figures()
                        ),
                    );
                    back(rec, id, false, bad.line());
                    return Ok(true);
                }
            }
            Inconclusive::Revert => {
                rec.note(id, format!("step {step} inconclusive:\n  {}", figures()));
                back(
                    rec,
                    id,
                    false,
                    "inconclusive at --max-wait (--on-inconclusive revert)".to_owned(),
                );
                return Ok(true);
            }
            Inconclusive::Hold => {
                if waited >= settings.hold_limit_ms.max(settings.max_wait_ms) {
                    back(
                        rec,
                        id,
                        false,
                        "held past --hold-limit without enough traffic".to_owned(),
                    );
                    return Ok(true);
                }
                if !held {
                    rec.note(
                        id,
                        format!(
                            "held: not enough traffic by --max-wait to judge step {step}; \
                             neither advancing nor going back:\n  {}",
                            figures()
                        ),
                    );
                    if let Phase::Judging { held, .. } = &mut rec.phase {
                        *held = true;
                    }
                    return Ok(true);
                }
                return Ok(false);
            }
        }
    } else if !(conclusive && waited >= least) {
        return Ok(false);
    }
    if let Some(bad) = took.iter().find(|t| !t.ok()) {
        rec.note(
            id,
            format!("step {step} failed the took gate:\n  {}", figures()),
        );
        back(rec, id, false, bad.line());
        return Ok(true);
    }
    rec.note(
        id,
        format!(
            "step {step}/{n} passed{}:\n  {}",
            if short {
                " on a short sample (--on-inconclusive proceed)"
            } else {
                ""
            },
            figures()
        ),
    );
    rec.verdict = Some(judged.summary(step));
    if step == n {
        rec.state = State::Completed;
        rec.phase = Phase::Done;
        rec.outcome = Some(format!(
            "completed: the fleet is on revision {revision}, the new config"
        ));
    } else {
        rec.phase = Phase::Publish { step: step + 1 };
    }
    Ok(true)
}

/// [`Phase::Down`]: the next revision on the way back, spaced by `--min-wait`.
async fn going_down(
    store: &mut Store,
    rec: &mut Record,
    id: &str,
    n: usize,
    settings: &Settings,
    (next, since_ms, ending): (usize, u64, State),
) -> Result<bool, Error> {
    if since_ms != 0 && elapsed(since_ms) < settings.min_wait_ms {
        return Ok(false);
    }
    let (draft, message) = if next == 0 {
        let mut d = rec.start.clone();
        d.rollback_of = Some(rec.start_revision);
        (
            d,
            format!(
                "ramp {}: back to revision {} ({})",
                rec.id,
                rec.start_revision,
                rec.outcome.clone().unwrap_or_default()
            ),
        )
    } else {
        (
            rec.steps[next - 1].draft.clone(),
            format!("ramp {}: back down to step {next}/{n}", rec.id),
        )
    };
    match publish(store, rec, draft, message, id).await? {
        Ok(r) => {
            rec.at = next;
            rec.revision = r;
            if next == 0 {
                rec.note(
                    id,
                    format!(
                        "back on the starting revision's config as revision {r}: the \
                         ramp {}",
                        ending.word()
                    ),
                );
                rec.state = ending;
                rec.phase = Phase::Done;
            } else {
                rec.note(id, format!("back down to step {next} as revision {r}"));
                rec.phase = Phase::Down {
                    next: next - 1,
                    since_ms: now_ms(),
                    ending,
                };
            }
        }
        Err(why) => stopped(rec, id, why),
    }
    Ok(true)
}

fn stopped(rec: &mut Record, id: &str, why: String) {
    rec.note(id, format!("stopped: {why}"));
    rec.outcome = Some(why);
    rec.state = State::Aborted;
    rec.phase = Phase::Done;
}

/// Publishes `draft` after the ramp's last revision; `Err` (the ramp stops) when another
/// push came in between.
async fn publish(
    store: &mut Store,
    rec: &Record,
    mut draft: Revision,
    message: String,
    id: &str,
) -> Result<Result<u64, String>, Error> {
    let seen = store.current().await?;
    if seen.number != rec.revision {
        // This driver (or the one before) published and died before recording it.
        if seen.number > rec.revision
            && let Some(cur) = store.revision(seen.number).await?
            && cur.same_text(&draft)
            && cur.message == message
        {
            return Ok(Ok(seen.number));
        }
        return Ok(Err(format!(
            "revision {} was published during the ramp (the ramp's last is {}): the ramp \
             stopped and left it",
            seen.number, rec.revision
        )));
    }
    draft.message = message;
    draft.pushed_at_ms = now_ms();
    draft.pushed_by = format!("{} (ramp {} driven by {id})", rec.by, rec.id);
    let published = store.publish(seen, draft, rec.settings.keep).await?;
    Ok(Ok(published.revision))
}

/// Every gate of step `step` (published as `revision`) since `window` began at `since_ms`.
async fn gates(
    store: &mut Store,
    rec: &Record,
    (step, revision, since_ms): (usize, u64, u64),
    (window, timing): Window<'_>,
) -> Result<Judged, Error> {
    let entries = store.nodes().await?;
    let mut judged = Judged::default();
    let mut total: BTreeMap<String, Counts> = BTreeMap::new();
    let mut served: BTreeMap<String, u64> = BTreeMap::new();
    let (none, before) = (Timing::default(), rec.timing.clone().unwrap_or_default());
    for (node, shares) in &rec.steps[step - 1].shares {
        let Some(e) = entries.iter().find(|e| &e.id == node) else {
            continue;
        };
        if e.applied != Some(revision) {
            judged.lagging.push(format!(
                "{node} still on revision {}",
                e.applied.map_or("none".to_owned(), |a| a.to_string())
            ));
            continue;
        }
        let Some(start) = window.get(node) else {
            continue;
        };
        // A node that does not answer (stopped, restarting) is not judged: its registry
        // entry leaves with its lease, and the others' counters still judge the step.
        let Ok((now, now_timing)) = reading(&reach(&e.admin, &e.id), &e.id).await else {
            continue;
        };
        let delta = |g: &str| {
            now.get(g)
                .copied()
                .unwrap_or_default()
                .since(&start.get(g).copied().unwrap_or_default())
        };
        for g in now.keys() {
            total.entry(g.clone()).or_default().add(&delta(g));
        }
        let start_timing = timing.get(node).unwrap_or(&none);
        for (ep, n) in &now_timing.served {
            let was = start_timing.served.get(ep).copied().unwrap_or(0);
            // A node that restarted counts from 0 again.
            *served.entry(ep.clone()).or_default() += if *n >= was { n - was } else { *n };
        }
        // Only a node read when the ramp began and when the window began (not one that did
        // not answer then, nor a record stored before this gate) has a latency gate.
        if let (Some(b), Some(st)) = (before.get(node), timing.get(node)) {
            judged.latency.extend(super::gates::latency_gates(
                node,
                &rec.receiving,
                b,
                st,
                &now_timing,
            ));
        }
        judged.took.extend(took(node, shares, &delta));
    }
    for (g, c) in &total {
        served.insert(g.clone(), c.decisions);
    }
    judged.saturation =
        super::gates::saturation(&rec.capacity, &served, elapsed(since_ms) as f64 / 1000.0);
    judged.errors = errors(rec, &total);
    Ok(judged)
}

/// The took gate of one node: per listener and group its share of the window's decisions
/// (`delta` of each `LISTENER/GROUP`) against the prediction `shares`.
fn took(node: &str, shares: &Shares, delta: &dyn Fn(&str) -> Counts) -> Vec<Took> {
    let mut out = Vec::new();
    for (l, gs) in shares {
        let n: u64 = gs
            .iter()
            .map(|(g, _)| delta(&format!("{l}/{g}")).decisions)
            .sum();
        for (g, p) in gs {
            let d = delta(&format!("{l}/{g}")).decisions;
            out.push(Took {
                node: node.to_owned(),
                group: format!("{l}/{g}"),
                predicted: *p,
                observed: if n == 0 {
                    *p
                } else {
                    d as f64 * 100.0 / n as f64
                },
                sample: n,
                tolerance: super::gates::took_tolerance(*p, n),
            });
        }
    }
    out
}

/// The errors gate of each receiving group, from the judged nodes' counts in the window
/// summed (`total`).
fn errors(rec: &Record, total: &BTreeMap<String, Counts>) -> Vec<ErrorGate> {
    let base = rec.baseline.clone().unwrap_or_default();
    let mut others = Counts::default();
    for (g, c) in total {
        if !rec.receiving.contains(g) {
            others.add(c);
        }
    }
    rec.receiving
        .iter()
        .map(|g| {
            let own = base.get(g).copied().unwrap_or_default();
            let (against, b) = if own.attempts >= 100 {
                ("its own before the ramp", own)
            } else {
                ("the groups not receiving, same window", others)
            };
            ErrorGate::judge(
                g.clone(),
                against.to_owned(),
                b,
                total.get(g).copied().unwrap_or_default(),
            )
        })
        .collect()
}
