//! The node's registry entry (`PREFIX/nodes/ID`, docs/operations.md "The registry"): written
//! under a lease, and rewritten only when what it says changes. The lease says the node is
//! alive (a node that dies leaves the registry when its lease runs out), so an unchanged entry
//! costs etcd nothing but the lease's keep-alives, which add no revision to its history.
//!
//! Each write of the entry also records the node as expected (`PREFIX/expected/ID`,
//! [`gtd_fleet::expected`]) when no record is there yet, in the same transaction: the first
//! registration costs no extra write, and later ones leave the record alone.
//!
//! A task apart from the follower's watch: a write that etcd holds up (an election, a slow
//! disk) never holds up a revision, and a failed write is tried again at the next look without
//! ending the follower's session.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{Fleet, Inner};
use gtd_core::sync::lock;
use gtd_core::view::ListenerView;
use gtd_fleet::Store;
use gtd_fleet::registry::{Entry, ErrorSummary, Toggle, error_summary, out_of_rotation};

/// How often the node looks whether its entry changed (between the revisions and reloads that
/// wake it at once): group health and shares move without either.
const LOOK: Duration = Duration::from_secs(2);

/// The registration of one follower session: its task ends with it.
pub(super) struct Registration {
    task: JoinHandle<()>,
    wake: Arc<Notify>,
}

impl Registration {
    /// Keeps the node's entry in the registry through `store` until dropped.
    pub(super) fn start(inner: Arc<Inner>, store: Store) -> Registration {
        let wake = Arc::new(Notify::new());
        let task = tokio::spawn(keep(inner, store, Arc::clone(&wake)));
        Registration { task, wake }
    }

    /// Something the entry shows may have changed (a revision applied or refused): look now.
    pub(super) fn changed(&self) {
        self.wake.notify_one();
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One lease after another, until the session ends: the previous session's lease when it is
/// still alive (the entry stays attached to it), else a new one.
async fn keep(inner: Arc<Inner>, store: Store, wake: Arc<Notify>) {
    let Some(fleet) = inner.fleet.as_ref() else {
        return;
    };
    let ttl = fleet.opts.lease_ttl.as_secs().max(1) as i64;
    let mut backoff = Duration::from_millis(200);
    let mut said: Option<String> = None;
    // Whether the writes record the node as expected (off once etcd refused it: a node role
    // without write permission on PREFIX/expected/ still keeps its entry).
    let mut expect = true;
    loop {
        let mut lease = fleet.lease.load(Ordering::Relaxed);
        if lease == 0 {
            match store.client().lease_grant(ttl).await {
                Ok(granted) => {
                    lease = granted.id;
                    fleet.lease.store(lease, Ordering::Relaxed);
                }
                Err(e) => {
                    report(&mut said, format!("granting the registry lease: {e}"));
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            }
        }
        let why = hold(
            &inner,
            fleet,
            &store,
            (lease, ttl),
            &wake,
            &mut said,
            &mut expect,
        )
        .await;
        report(&mut said, why);
        // Expired or refused: the next lease is a new one. A broken stream keeps it: the next
        // try renews it if it still lives.
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Renews `lease` and writes the entry whenever it changed; returns why it stopped.
async fn hold(
    inner: &Arc<Inner>,
    fleet: &Fleet,
    store: &Store,
    (lease, ttl): (i64, i64),
    wake: &Notify,
    said: &mut Option<String>,
    expect: &mut bool,
) -> String {
    let (mut keeper, mut kept) = match store.client().lease_keep_alive(lease).await {
        Ok(k) => k,
        Err(e) => return format!("keeping the registry lease: {e}"),
    };
    // What was last written, its clock fields left out: an entry is rewritten when that differs.
    let mut written: Option<Vec<u8>> = None;
    let mut look = tokio::time::interval(LOOK);
    let mut renew = tokio::time::interval(Duration::from_secs((ttl as u64 / 3).max(1)));
    let mut writing: Option<std::pin::Pin<Box<dyn Future<Output = Write> + Send>>> = None;
    // The errors the entry says, paced (at most one change every 10 s).
    let mut errors = ErrorSummary::default();
    loop {
        tokio::select! {
            _ = renew.tick() => {
                if keeper.keep_alive().await.is_err() {
                    return "the lease keep-alive stream closed".to_owned();
                }
                continue;
            }
            answer = kept.message() => match answer {
                Ok(Some(a)) if a.ttl <= 0 => {
                    // Gone (it ran out while etcd could not be reached): a new one, and the
                    // entry again.
                    fleet.lease.store(0, Ordering::Relaxed);
                    return "the registry lease expired".to_owned();
                }
                Ok(Some(_)) => continue,
                Ok(None) => return "the lease keep-alive stream ended".to_owned(),
                Err(e) => return format!("keeping the registry lease: {e}"),
            },
            done = async { writing.as_mut().expect("guarded").await }, if writing.is_some() => {
                writing = None;
                match done {
                    Write::Done(shape) => {
                        written = Some(shape);
                        if said.take().is_some() {
                            tracing::info!("fleet: registry entry written again");
                        }
                    }
                    Write::Failed(e) if *expect && e.contains("permission denied") => {
                        tracing::warn!(error = %e, "fleet: this node may not write its expected \
                            record (PREFIX/expected/, docs/operations.md); writing its registry \
                            entry alone, so it is not shown missing when it is gone");
                        *expect = false;
                        wake.notify_one();
                    }
                    Write::Failed(e) => report(said, e),
                }
                continue;
            }
            _ = look.tick() => {}
            () = wake.notified() => {}
        }
        if writing.is_some() {
            continue;
        }
        let entry = entry(inner, fleet, &mut errors);
        let shape = shape(&entry);
        if written.as_ref() == Some(&shape) {
            continue;
        }
        let client = store.client().clone();
        let txn = gtd_fleet::expected::register(store, &entry, lease, *expect)
            .expect("an entry is plain data");
        writing = Some(Box::pin(async move {
            match client.txn(txn).await {
                Ok(_) => Write::Done(shape),
                Err(e) => Write::Failed(format!("writing the registry entry: {}", e.brief())),
            }
        }));
    }
}

/// How one write of the entry ended.
enum Write {
    /// Written: the entry's shape.
    Done(Vec<u8>),
    /// Not written, and why.
    Failed(String),
}

/// Logs `why` once until it changes or the entry is written again.
fn report(said: &mut Option<String>, why: String) {
    if said.as_deref() != Some(why.as_str()) {
        tracing::warn!(error = %why, "fleet: registry entry not written; trying again");
        *said = Some(why);
    }
}

/// The node's entry now, with its errors as `errors` paces them.
fn entry(inner: &Arc<Inner>, fleet: &Fleet, errors: &mut ErrorSummary) -> Entry {
    let (applied, source) = {
        let a = lock(&fleet.applied);
        (a.0.revision, a.1)
    };
    let views = {
        let snap = inner.snapshot.load();
        let names = inner.names.table();
        super::super::status::listeners(inner, &snap, &names, Instant::now())
    };
    let now = Instant::now();
    let ms = gtd_fleet::now_ms();
    let up = inner.started.elapsed();
    Entry {
        id: super::node_id(inner, fleet),
        region: inner.region.clone(),
        admin: inner.admin_addr.to_string(),
        bind: inner.opts.bind.to_string(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        applied: Some(applied),
        source: source.as_str().to_owned(),
        refused: lock(&fleet.refused).clone(),
        uptime_s: up.as_secs(),
        started_at_ms: ms.saturating_sub(up.as_millis() as u64),
        updated_at_ms: ms,
        listeners: views.iter().map(ListenerView::for_registry).collect(),
        errors: errors.offer(error_summary(&views), now).to_vec(),
        toggles: toggles(inner),
        unhealthy: out_of_rotation(&views),
    }
}

/// Every endpoint whose admin toggle says otherwise than its config's `enabled`, or that the
/// admin API drained.
fn toggles(inner: &Inner) -> Vec<Toggle> {
    let snap = inner.snapshot.load();
    let mut out = Vec::new();
    for l in &snap.listeners {
        for (g, gc) in l.groups.iter().zip(&l.cfg.groups) {
            for (state, ec) in g.balancer.endpoints().iter().zip(&gc.endpoints) {
                if state.is_enabled() != ec.enabled || state.is_admin_drained() {
                    out.push(Toggle {
                        listener: l.cfg.name.clone(),
                        group: g.name.clone(),
                        endpoint: ec.address.id().to_string(),
                        enabled: state.is_enabled(),
                        drained: state.is_admin_drained(),
                    });
                }
            }
        }
    }
    out
}

/// The entry without what the clock moves (when it was written, the uptime then): the part
/// whose change is worth a write.
fn shape(entry: &Entry) -> Vec<u8> {
    let still = Entry {
        uptime_s: 0,
        started_at_ms: 0,
        updated_at_ms: 0,
        ..entry.clone()
    };
    serde_json::to_vec(&still).expect("an entry is plain data")
}
