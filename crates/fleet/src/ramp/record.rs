//! A ramp's record (issue 38): its plan, settings, state and log as stored in etcd under
//! `PREFIX/ramp`, and its reads and guarded writes there. What [`super::drive`] moves on, what
//! `gtd ramp status`, `gtd fleet` and the dashboard show, what a plain `gtd push` checks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::gates::{Counts, Timing};
use crate::etcd::pb::etcdserverpb as rpc;
use crate::{Error, Revision, Store, now_ms};

/// Per listener and group (in the node's priority order), percent of the node's decisions:
/// what each step's plan predicts for a node, kept in the record.
pub type Shares = Vec<(String, Vec<(String, f64)>)>;

/// Where a ramp is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Moving (or going back).
    Running,
    /// `gtd ramp pause`: neither advancing nor judging.
    Paused,
    /// Every step passed: the fleet is on the new config.
    Completed,
    /// A gate failed: the fleet went back to the starting revision.
    Reverted,
    /// `gtd ramp abort` (back to the start), `gtd push --force` or a revision published beside
    /// the ramp (stopped where it is).
    Aborted,
}

impl State {
    /// The ramp is over.
    pub fn done(self) -> bool {
        matches!(self, State::Completed | State::Reverted | State::Aborted)
    }

    /// In a word.
    pub fn word(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Paused => "paused",
            State::Completed => "completed",
            State::Reverted => "reverted",
            State::Aborted => "aborted",
        }
    }
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    /// Publish step `step` (1-based).
    Publish {
        /// The step.
        step: usize,
    },
    /// Step `step` is published as `revision`: wait until every node applied it.
    Applying {
        /// The step.
        step: usize,
        /// Its revision.
        revision: u64,
        /// Since when, ms since the epoch.
        since_ms: u64,
    },
    /// Every node applied it: the window runs from the counters in `window`.
    Judging {
        /// The step.
        step: usize,
        /// Its revision.
        revision: u64,
        /// When the window started, ms since the epoch.
        since_ms: u64,
        /// Per node id, per `LISTENER/GROUP`, the counters at the window's start.
        window: BTreeMap<String, BTreeMap<String, Counts>>,
        /// Per node id, its response-time histograms and endpoints' served at the window's
        /// start (a record written before the latency gate has none: those gates see the
        /// whole of each node's history).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        timing: BTreeMap<String, Timing>,
        /// The step is held (inconclusive at `--max-wait`, `--on-inconclusive hold`).
        held: bool,
    },
    /// Going back: publish step `next` (0: the starting revision), then the one below.
    Down {
        /// The step to publish next; 0 is the starting revision.
        next: usize,
        /// When the last one was published (0: go now).
        since_ms: u64,
        /// What the ramp ends as.
        ending: State,
    },
    /// Nothing more.
    Done,
}

/// What `--on-inconclusive` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Inconclusive {
    /// Neither advance nor go back; go back after `--hold-limit`.
    Hold,
    /// Go back.
    Revert,
    /// Advance on what was seen.
    Proceed,
}

/// How the ramp waits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Least a step lasts, ms.
    pub min_wait_ms: u64,
    /// Longest a step waits for enough evidence, ms.
    pub max_wait_ms: u64,
    /// Least the last step lasts, ms.
    pub bake_ms: u64,
    /// How long a held step waits before going back, ms.
    pub hold_limit_ms: u64,
    /// An inconclusive step.
    pub on_inconclusive: Inconclusive,
    /// Revisions kept by each publish.
    pub keep: u64,
}

/// One step as planned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Planned {
    /// Percent of the whole move.
    pub target: f64,
    /// Predicted moved share of decisions, percent.
    pub moved: f64,
    /// The revision to publish (its number set when published).
    pub draft: Revision,
    /// Per node id, the predicted shares.
    pub shares: Vec<(String, Shares)>,
}

/// One line of the ramp's log (each decision, with its figures).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Logged {
    /// When, ms since the epoch.
    pub at_ms: u64,
    /// The step the fleet was on.
    pub step: usize,
    /// Who wrote it (the driving node, or the command).
    pub by: String,
    /// What happened, one line or more.
    pub text: String,
}

/// The ramp's record, `PREFIX/ramp`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// `ramp-START-MS`.
    pub id: String,
    /// Where it is.
    pub state: State,
    /// What the driver does next.
    pub phase: Phase,
    /// Who pushed it.
    pub by: String,
    /// `-m`.
    pub message: String,
    /// When it was stored.
    pub created_at_ms: u64,
    /// The revision it started from.
    pub start_revision: u64,
    /// That revision's text, what going back publishes again.
    pub start: Revision,
    /// The groups the move sends traffic to, `LISTENER/GROUP`.
    pub receiving: Vec<String>,
    /// The steps.
    pub steps: Vec<Planned>,
    /// How it waits.
    pub settings: Settings,
    /// Per `LISTENER/GROUP`, the nodes' counters summed when the ramp began (the baseline
    /// rates).
    pub baseline: Option<BTreeMap<String, Counts>>,
    /// Per node id, its response-time histograms and measured RTTs when the ramp began (the
    /// latency gate's baseline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<BTreeMap<String, Timing>>,
    /// The capacity the plan assumed (the new config's) of each receiving group and endpoint
    /// that has one, `LISTENER/GROUP[/ENDPOINT]`: the saturation gate's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, f64>,
    /// The step the fleet is on (0: the starting revision).
    pub at: usize,
    /// The revision the ramp published last (the starting one at first).
    pub revision: u64,
    /// The node driving it.
    pub owner: Option<String>,
    /// `gtd ramp abort` asked to go back.
    pub abort: bool,
    /// Every decision.
    pub log: Vec<Logged>,
    /// How it ended.
    pub outcome: Option<String>,
    /// The last step's verdict in a line, said in the next revision's message (so that `gtd
    /// fleet history` shows why each step was taken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// The fleet-wide drains on the ramp's listeners when it was planned (`LISTENER/GROUP[/
    /// ENDPOINT]`), the ones its predictions assume (a record stored before drains were
    /// watched has none, and its steps are judged whatever the drains).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drains: Option<Vec<String>>,
    /// The step waits: the fleet's drains on its listeners differ from [`Record::drains`]
    /// (`gtd drain` during the ramp), so its shares are not the plan's and it is not judged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drained: bool,
}

impl Record {
    pub(crate) fn note(&mut self, by: &str, text: String) {
        self.log.push(Logged {
            at_ms: now_ms(),
            step: self.at,
            by: by.to_owned(),
            text,
        });
    }

    /// `gtd_ramp_state`: 0 none, 1 running, 2 paused, 3 going back, 4 completed, 5 reverted,
    /// 6 aborted, 7 held (a step without enough traffic to judge it).
    pub fn gauge(&self) -> i64 {
        match (self.state, &self.phase) {
            (State::Running, Phase::Down { .. }) => 3,
            (State::Running, Phase::Judging { held: true, .. }) => 7,
            (State::Running, _) => 1,
            (State::Paused, _) => 2,
            (State::Completed, _) => 4,
            (State::Reverted, _) => 5,
            (State::Aborted, _) => 6,
        }
    }

    /// `gtd ramp status` in words.
    pub fn render(&self) -> String {
        let mut out = format!(
            "ramp {} · {} · step {}/{} · revision {} (started from {}) · driven by {}\n",
            self.id,
            self.state.word(),
            self.at,
            self.steps.len(),
            self.revision,
            self.start_revision,
            self.owner.as_deref().unwrap_or("no node yet")
        );
        if let Some(o) = &self.outcome {
            out.push_str(&format!("outcome: {o}\n"));
        }
        for l in &self.log {
            out.push_str(&format!("[step {}] {}: {}\n", l.step, l.by, l.text));
        }
        out
    }
}

/// The ramp as `gtd fleet --json` and `GET /fleet` show it (the dashboard's fleet tab): its
/// state, step and plan, why it is held or paused, and the last verdict with every gate's
/// line, without the steps' config texts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct View {
    /// `ramp-START-MS`.
    pub id: String,
    /// Where it is (`running`, `paused`, `completed`, `reverted`, `aborted`).
    pub state: State,
    /// `gtd_ramp_state`'s value ([`Record::gauge`]): 3 going back, 7 held.
    pub gauge: i64,
    /// What the driver does next: `publish`, `applying`, `judging`, `down` or `done`.
    pub phase: &'static str,
    /// The step is held: not enough traffic by `--max-wait` to judge it.
    pub held: bool,
    /// Going back (to the starting revision, or down the steps).
    pub going_back: bool,
    /// The step waits on a drain: the fleet's drains on its listeners are not the plan's.
    pub drained: bool,
    /// Why it is held, waits on a drain or is paused (the log's line that said so), else
    /// `null`.
    pub why: Option<String>,
    /// The step the fleet is on (0: the starting revision).
    pub at: usize,
    /// The plan: each step's percent of the whole move, in order.
    pub steps: Vec<f64>,
    /// The plan: each step's predicted moved share of the fleet's decisions, percent.
    pub moved: Vec<f64>,
    /// The revision the ramp published last.
    pub revision: u64,
    /// The revision it started from.
    pub start_revision: u64,
    /// The groups the move sends traffic to.
    pub receiving: Vec<String>,
    /// The node driving it.
    pub owner: Option<String>,
    /// Who pushed it.
    pub by: String,
    /// `-m`.
    pub message: String,
    /// When it was stored, ms since the epoch.
    pub created_at_ms: u64,
    /// How it ended.
    pub outcome: Option<String>,
    /// The last judgement of a step (passed, failed, held or inconclusive) with its figures.
    pub verdict: Option<Verdict>,
}

/// A step's judgement as the log says it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// When, ms since the epoch.
    pub at_ms: u64,
    /// The step judged.
    pub step: usize,
    /// The node that judged it.
    pub by: String,
    /// What was decided (`step 1/2 passed`, `step 2 failed the errors gate`, `held: ...`).
    pub said: String,
    /// Every gate's line: took, errors, latency, saturation, each ending in its verdict.
    pub gates: Vec<String>,
}

impl Record {
    /// [`View`] of this record.
    pub fn view(&self) -> View {
        let (phase, held) = match &self.phase {
            Phase::Publish { .. } => ("publish", false),
            Phase::Applying { .. } => ("applying", false),
            Phase::Judging { held, .. } => ("judging", *held),
            Phase::Down { .. } => ("down", false),
            Phase::Done => ("done", false),
        };
        // A judgement is a line said with every gate's figures below it.
        let verdict = self
            .log
            .iter()
            .rev()
            .find(|l| l.text.contains("\n  "))
            .map(|l| {
                let mut lines = l.text.lines();
                Verdict {
                    at_ms: l.at_ms,
                    step: l.step,
                    by: l.by.clone(),
                    said: lines
                        .next()
                        .unwrap_or_default()
                        .trim_end_matches(':')
                        .to_owned(),
                    gates: lines.map(|g| g.trim().to_owned()).collect(),
                }
            });
        let why = if self.drained && self.state == State::Running {
            self.log
                .iter()
                .rev()
                .find(|l| l.text.starts_with("drained: "))
                .map(|l| l.text.clone())
        } else if held {
            self.log
                .iter()
                .rev()
                .find(|l| l.text.starts_with("held: "))
                .map(|l| {
                    l.text
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .trim_end_matches(':')
                        .to_owned()
                })
        } else if self.state == State::Paused {
            self.log
                .iter()
                .rev()
                .find(|l| l.text.starts_with("gtd ramp pause"))
                .map(|l| {
                    let said = l.text.trim_start_matches("gtd ramp pause: ");
                    format!("{said} (by {})", l.by)
                })
        } else {
            None
        };
        View {
            id: self.id.clone(),
            state: self.state,
            gauge: self.gauge(),
            phase,
            held,
            going_back: matches!(self.phase, Phase::Down { .. }),
            drained: self.drained && self.state == State::Running,
            why,
            at: self.at,
            steps: self.steps.iter().map(|s| s.target).collect(),
            moved: self.steps.iter().map(|s| s.moved).collect(),
            revision: self.revision,
            start_revision: self.start_revision,
            receiving: self.receiving.clone(),
            owner: self.owner.clone(),
            by: self.by.clone(),
            message: self.message.clone(),
            created_at_ms: self.created_at_ms,
            outcome: self.outcome.clone(),
            verdict,
        }
    }
}

/// `PREFIX/ramp`.
pub fn key(store: &Store) -> String {
    format!("{}/ramp", store.prefix())
}

/// `PREFIX/ramp-owner`: the driving node's id, under its lease.
pub fn owner_key(store: &Store) -> String {
    format!("{}/ramp-owner", store.prefix())
}

/// The record and its `mod_revision` (none: no ramp was ever stored).
pub async fn read(store: &Store) -> Result<Option<(Record, i64)>, Error> {
    let resp = store
        .client()
        .range(rpc::RangeRequest {
            key: key(store).into_bytes(),
            // A stale read (`gtd fleet` without a quorum) reads the ramp the same way as the
            // rest of the fleet, from one member's own store.
            serializable: store.serializable,
            ..Default::default()
        })
        .await
        .map_err(crate::etcd_error("reading the ramp"))?;
    let Some(kv) = resp.kvs.first() else {
        return Ok(None);
    };
    let rec = serde_json::from_slice(&kv.value).map_err(|error| Error::NotARevision {
        key: key(store),
        error,
    })?;
    Ok(Some((rec, kv.mod_revision)))
}

/// Writes `rec` if the record is still at `seen` (0: absent) and, with `owner`, the owner key
/// still names it. Whether it was written.
pub async fn write(
    store: &Store,
    rec: &Record,
    seen: i64,
    owner: Option<&str>,
) -> Result<bool, Error> {
    use rpc::compare::{CompareResult, CompareTarget, TargetUnion};
    use rpc::request_op::Request;
    let k = key(store).into_bytes();
    let mut compare = vec![rpc::Compare {
        result: CompareResult::Equal.into(),
        target: CompareTarget::Mod.into(),
        key: k.clone(),
        target_union: Some(TargetUnion::ModRevision(seen)),
        ..Default::default()
    }];
    if let Some(o) = owner {
        compare.push(rpc::Compare {
            result: CompareResult::Equal.into(),
            target: CompareTarget::Value.into(),
            key: owner_key(store).into_bytes(),
            target_union: Some(TargetUnion::Value(o.as_bytes().to_vec())),
            ..Default::default()
        });
    }
    let value = serde_json::to_vec(rec).map_err(Error::Encode)?;
    let resp = store
        .client()
        .txn(rpc::TxnRequest {
            compare,
            success: vec![rpc::RequestOp {
                request: Some(Request::RequestPut(rpc::PutRequest {
                    key: k,
                    value,
                    ..Default::default()
                })),
            }],
            failure: vec![],
        })
        .await
        .map_err(crate::etcd_error("writing the ramp"))?;
    Ok(resp.succeeded)
}

/// The condition that the record is still at `seen` (0: absent), for another writer's
/// transaction: a plain push's, so that a ramp stored between its read and its publish
/// refuses it (`gtd push`, [`crate::push`]).
pub(crate) fn unchanged(store: &Store, seen: i64) -> rpc::Compare {
    use rpc::compare::{CompareResult, CompareTarget, TargetUnion};
    rpc::Compare {
        result: CompareResult::Equal.into(),
        target: CompareTarget::Mod.into(),
        key: key(store).into_bytes(),
        target_union: Some(TargetUnion::ModRevision(seen)),
        ..Default::default()
    }
}

/// The write of `rec`, for another writer's transaction (`gtd push --force`'s stopped ramp).
pub(crate) fn put(store: &Store, rec: &Record) -> Result<rpc::RequestOp, Error> {
    Ok(rpc::RequestOp {
        request: Some(rpc::request_op::Request::RequestPut(rpc::PutRequest {
            key: key(store).into_bytes(),
            value: serde_json::to_vec(rec).map_err(Error::Encode)?,
            ..Default::default()
        })),
    })
}

impl Record {
    /// `gtd push --force` during the ramp: stopped where it is (aborted, no going back: the
    /// push publishes `revision` in the same transaction), said in its log as `by`.
    pub(crate) fn replaced(&mut self, by: &str, revision: u64) {
        let why = format!(
            "stopped by gtd push --force at step {}/{}: revision {revision} replaced the \
             ramp's revision {}; the ramp did not go back",
            self.at,
            self.steps.len(),
            self.revision
        );
        self.note(by, why.clone());
        self.outcome = Some(why);
        self.state = State::Aborted;
        self.phase = Phase::Done;
    }
}
