//! A node in a fleet (`gtd run --etcd`): it serves the fleet's current revision, follows
//! `PREFIX/revision` and applies each new one as a reload does, keeps its registry entry under
//! a lease, and caches the revision it serves on disk so that a restart while etcd is down
//! still starts (docs/operations.md).
//!
//! Nothing here is on the request path: the follower is one task, and a revision reaches the
//! data plane only through [`Inner::reload_with`]'s atomic swap.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gtd_fleet::etcd::pb::{etcdserverpb as rpc, mvccpb};
use metrics::Gauge;

use super::Inner;
use super::telemetry::{self, Registry};
use gtd_core::config::Config;
use gtd_core::sync::lock;
use gtd_core::view::FleetView;
use gtd_fleet::drain::Drain;
use gtd_fleet::etcd::Answers;
use gtd_fleet::registry::Refusal;
use gtd_fleet::{Revision, Store};

mod registry;
mod witness;

/// Why a fleet node has no revision to start from, or lost etcd (the follower describes it,
/// with [`gtd_fleet::describe`], and tries again).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reaching etcd, or reading the fleet's keys.
    #[error(transparent)]
    Store(#[from] gtd_fleet::Error),
    /// `PREFIX/revision` is not there.
    #[error("nothing is published under {prefix} yet (gtd push first)")]
    Unpublished {
        /// The fleet's prefix.
        prefix: String,
    },
    /// etcd gave no revision (described) and the cache none either.
    #[error("{etcd}; and no cached revision to start from: {cache}")]
    NoRevision {
        /// Why not etcd's, in a few words.
        etcd: String,
        /// Why not the cached one.
        cache: CacheError,
    },
    /// etcd ended the watch.
    #[error("the watch ended")]
    WatchEnded,
    /// etcd cancelled the watch, for this reason.
    #[error("the watch was cancelled: {0}")]
    WatchCancelled(String),
    /// The node stopped while waiting for a leader.
    #[error("stopping")]
    Stopping,
}

/// The class of etcd's failure, when the store's error is one (for [`gtd_fleet::transient`]).
impl gtd_fleet::Classified for Error {
    fn class(&self) -> Option<gtd_fleet::Class> {
        match self {
            Error::Store(e) => e.class(),
            _ => None,
        }
    }
}

/// As [`gtd_fleet::describe`] reads errors.
impl AsRef<dyn std::error::Error + Send + Sync + 'static> for Error {
    fn as_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }
}

/// Why the revision cache cannot be read or written (the message says all, inner error
/// included).
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The file cannot be read.
    #[error("reading {}: {error}", path.display())]
    Read {
        /// The cache file.
        path: PathBuf,
        /// Why not.
        error: gtd_core::files::FileError,
    },
    /// The file holds something else.
    #[error("{} does not hold a gtd revision: {error}", path.display())]
    NotARevision {
        /// The cache file.
        path: PathBuf,
        /// What JSON says.
        error: serde_json::Error,
    },
    /// The revision does not serialise (never seen).
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
    /// The temp file cannot be written.
    #[error("writing {}: {error}", path.display())]
    Write {
        /// The temp file.
        path: PathBuf,
        /// Why not.
        error: std::io::Error,
    },
    /// The temp file cannot take the cache's name.
    #[error("renaming to {}: {error}", path.display())]
    Rename {
        /// The cache file.
        path: PathBuf,
        /// Why not.
        error: std::io::Error,
    },
}

type Result<T, E = Error> = std::result::Result<T, E>;

/// `gtd run --etcd ...`.
#[derive(Debug, Clone)]
pub struct Options {
    /// etcd's members and the credentials to show them.
    pub etcd: gtd_fleet::Access,
    /// Key prefix.
    pub prefix: String,
    /// Where the served revision is cached.
    pub cache: PathBuf,
    /// The node's registry id (default `REGION@HOST:ADMIN_PORT`).
    pub node_id: Option<String>,
    /// The registry lease's time to live: a node that dies leaves the registry within it.
    pub lease_ttl: Duration,
}

/// The first wait before connecting again: short, since the usual cause is one member gone,
/// and another answers at once (or as soon as it has elected a leader).
const MIN_BACKOFF: Duration = Duration::from_millis(200);
/// The longest wait between two attempts to reach etcd: short, so that a node serves the
/// current revision within seconds of the cluster's return (an attempt costs etcd one
/// connection and a status call).
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Where the served revision came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// Read from etcd.
    Etcd,
    /// Read from the cache file at start, etcd being down or refusing the node.
    Cache,
}

/// The node's fleet state.
pub(crate) struct Fleet {
    pub(crate) opts: Options,
    /// The revision served and where it came from.
    applied: std::sync::Mutex<(Arc<Revision>, Source)>,
    /// The latest revision refused, and why.
    refused: std::sync::Mutex<Option<Refusal>>,
    /// The fleet-wide drains (`PREFIX/drains/`), as last read.
    drains: std::sync::Mutex<Arc<[Drain]>>,
    /// The running config as loaded, before the drains were applied to it: what a change of
    /// the drains is applied to again.
    base: std::sync::Mutex<Option<Arc<Config>>>,
    /// The connection of the running session (for `GET /fleet`).
    store: std::sync::Mutex<Option<Store>>,
    /// The running session's registry lease (0: none).
    lease: std::sync::atomic::AtomicI64,
    connected: AtomicBool,
    /// The last error reaching etcd.
    error: std::sync::Mutex<Option<String>>,
    /// `gtd_config_revision` and `gtd_etcd_connected` (no-ops until [`Fleet::export`]).
    gauges: (Gauge, Gauge),
    /// `gtd_ramp_step` and `gtd_ramp_state` (no-ops until [`Fleet::export`]).
    ramp_gauges: (Gauge, Gauge),
}

/// The revision a node starts with: etcd's current one when etcd answers, else the cached
/// one; with both, the cached one is the fallback when the current one cannot be applied.
pub(crate) struct Initial {
    pub(crate) first: (Arc<Revision>, Source),
    pub(crate) fallback: Option<Arc<Revision>>,
    /// The fleet-wide drains, read with the revision (none when etcd did not answer).
    pub(crate) drains: Vec<Drain>,
    /// Why etcd was not used, when it was not.
    pub(crate) etcd_error: Option<String>,
}

impl Fleet {
    pub(crate) fn new(
        opts: Options,
        applied: (Arc<Revision>, Source),
        drains: Vec<Drain>,
    ) -> Fleet {
        Fleet {
            opts,
            applied: std::sync::Mutex::new(applied),
            refused: std::sync::Mutex::new(None),
            drains: std::sync::Mutex::new(drains.into()),
            base: std::sync::Mutex::new(None),
            store: std::sync::Mutex::new(None),
            lease: std::sync::atomic::AtomicI64::new(0),
            connected: AtomicBool::new(false),
            error: std::sync::Mutex::new(None),
            gauges: (Gauge::noop(), Gauge::noop()),
            ramp_gauges: (Gauge::noop(), Gauge::noop()),
        }
    }

    /// Registers `gtd_config_revision` and `gtd_etcd_connected` in the node's registry (only
    /// a fleet node has them) and sets them to the revision served and the connection now.
    pub(crate) fn export(&mut self, registry: &Registry) {
        self.gauges = (
            registry.gauge(&telemetry::CONFIG_REVISION, &[]),
            registry.gauge(&telemetry::ETCD_CONNECTED, &[]),
        );
        self.ramp_gauges = (
            registry.gauge(&telemetry::RAMP_STEP, &[]),
            registry.gauge(&telemetry::RAMP_STATE, &[]),
        );
        self.gauges.0.set(self.applied().revision as f64);
        let connected = self.connected.load(Ordering::Relaxed);
        self.gauges.1.set(if connected { 1.0 } else { 0.0 });
    }

    /// Leaves the registry at once (the drain began): revokes the session's lease, waiting
    /// for etcd at most 2 s. The node's process may end as soon as the drain does, so the
    /// follower task cannot be left to do it.
    pub(crate) async fn leave(&self) {
        let lease = self.lease.swap(0, Ordering::Relaxed);
        let store = lock(&self.store).clone();
        if let (Some(store), true) = (store, lease != 0) {
            match tokio::time::timeout(Duration::from_secs(2), store.client().lease_revoke(lease))
                .await
            {
                Ok(Ok(_)) => tracing::info!("fleet: left the registry"),
                Ok(Err(e)) => tracing::warn!(error = %e.brief(),
                    "fleet: the registry entry stays until its lease runs out"),
                Err(_) => tracing::warn!(
                    "fleet: etcd did not answer; the registry entry stays until its lease runs out"
                ),
            }
        }
    }

    /// The fleet-wide drains as last read.
    pub(crate) fn drains(&self) -> Arc<[Drain]> {
        Arc::clone(&lock(&self.drains))
    }

    /// Records the drains read; true when they differ from those held.
    fn set_drains(&self, drains: Vec<Drain>) -> bool {
        let mut held = lock(&self.drains);
        if *held.as_ref() == drains[..] {
            return false;
        }
        *held = drains.into();
        true
    }

    /// `base` (a config as loaded) with the drains applied ([`gtd_fleet::drain::apply`]).
    pub(crate) fn overlay(&self, base: &Config) -> Config {
        let mut config = base.clone();
        gtd_fleet::drain::apply(&mut config, &self.drains());
        config
    }

    /// The running config as loaded, before the drains (set with each snapshot swapped in).
    pub(crate) fn base(&self) -> Option<Arc<Config>> {
        lock(&self.base).clone()
    }

    pub(crate) fn set_base(&self, base: Arc<Config>) {
        *lock(&self.base) = Some(base);
    }

    /// The revision served.
    pub(crate) fn applied(&self) -> Arc<Revision> {
        Arc::clone(&lock(&self.applied).0)
    }

    /// What the node serves, as its log lines name it: `revision 7 (etcd)`, or
    /// `revision 6 (cache)` when it came from the cache file.
    pub(crate) fn serving(&self) -> String {
        let (r, source) = &*lock(&self.applied);
        format!("revision {} ({})", r.revision, source.as_str())
    }

    pub(crate) fn refuse(&self, revision: u64, reason: String) {
        *lock(&self.refused) = Some(Refusal { revision, reason });
    }

    pub(crate) fn set_applied(&self, r: Arc<Revision>, source: Source) {
        let n = r.revision;
        *lock(&self.applied) = (r, source);
        self.gauges.0.set(n as f64);
        let mut refused = lock(&self.refused);
        if refused.as_ref().is_some_and(|x| x.revision <= n) {
            *refused = None;
        }
    }

    fn set_error(&self, e: Option<String>) {
        self.connected.store(e.is_none(), Ordering::Relaxed);
        self.gauges.1.set(if e.is_none() { 1.0 } else { 0.0 });
        *lock(&self.error) = e;
    }

    /// The `fleet` object of `/status`.
    pub(crate) fn status(&self, id: &str) -> FleetView {
        let (applied, source) = {
            let a = lock(&self.applied);
            (a.0.revision, a.1)
        };
        FleetView {
            id: id.to_owned(),
            prefix: self.opts.prefix.clone(),
            etcd: self.opts.etcd.endpoints().to_vec(),
            tls: self.opts.etcd.tls(),
            user: self.opts.etcd.user().map(str::to_owned),
            applied,
            source: source.as_str().to_owned(),
            refused: lock(&self.refused).clone(),
            connected: self.connected.load(Ordering::Relaxed),
            error: lock(&self.error).clone(),
        }
    }

    /// A connection for one `GET /fleet`: the session's, or a new one.
    pub(crate) async fn store(&self) -> Result<Store, gtd_fleet::Error> {
        let running = lock(&self.store).clone();
        match running {
            Some(s) => Ok(s),
            None => Store::connect(&self.opts.etcd, &self.opts.prefix).await,
        }
    }
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Etcd => "etcd",
            Source::Cache => "cache",
        }
    }
}

/// Reads the revision to start with (see [`Initial`]).
pub(crate) async fn initial(opts: &Options) -> Result<Initial> {
    let cached = read_cache(&opts.cache);
    let read = || async {
        let mut store = Store::connect(&opts.etcd, &opts.prefix).await?;
        let seen = store.current().await?;
        let r = store
            .named(seen.number)
            .await?
            .ok_or_else(|| Error::Unpublished {
                prefix: store.prefix().to_owned(),
            })?;
        // Read at start, so that a node restarted while an endpoint is drained never sends
        // it new traffic.
        let (drains, _) = store.drains().await?;
        Ok::<_, Error>((r, drains))
    };
    // A node started while etcd elects a leader (the fleet and its etcd started together, a
    // restart as the leader dies) is told "leader changed" or "no leader": it asks again until
    // the new leader answers, as long as an election takes, rather than exit or start from an
    // older cached revision.
    // A node with nothing cached asks again on any answer an outage gives (a member that
    // times out mid-election says "request timed out", not "leader changed"); no member
    // reached (a refused connection) or refused credentials are not such answers, and end
    // the wait at once.
    let answered_outage = |e: &Error| matches!(e, Error::Store(s @ gtd_fleet::Error::Etcd { .. }) if gtd_fleet::transient(s));
    let again = |e: &Error| gtd_fleet::in_election(e) || (cached.is_err() && answered_outage(e));
    let began = tokio::time::Instant::now();
    let mut from_etcd = read().await;
    while let Err(e) = &from_etcd {
        if !again(e) || began.elapsed() >= LEADERLESS {
            break;
        }
        tracing::info!(error = %gtd_fleet::describe(e), "etcd is electing a leader; asking again");
        tokio::time::sleep(MIN_BACKOFF).await;
        from_etcd = read().await;
    }
    match (from_etcd, cached) {
        (Ok((r, drains)), cached) => Ok(Initial {
            fallback: cached.ok().filter(|c| !c.same_text(&r)).map(Arc::new),
            first: (Arc::new(r), Source::Etcd),
            drains,
            etcd_error: None,
        }),
        (Err(e), Ok(c)) => Ok(Initial {
            first: (Arc::new(c), Source::Cache),
            fallback: None,
            // The drains as last read from etcd: a node restarted while etcd is down keeps
            // them too.
            drains: read_drains_cache(&opts.cache),
            etcd_error: Some(gtd_fleet::describe(&e)),
        }),
        (Err(e), Err(cache)) => Err(Error::NoRevision {
            etcd: gtd_fleet::describe(&e),
            cache,
        }),
    }
}

fn read_cache(path: &Path) -> Result<Revision, CacheError> {
    let bytes =
        gtd_core::files::read(path, 4 * gtd_core::files::MAX_CONFIG_BYTES).map_err(|error| {
            CacheError::Read {
                path: path.to_owned(),
                error,
            }
        })?;
    serde_json::from_slice(&bytes).map_err(|error| CacheError::NotARevision {
        path: path.to_owned(),
        error,
    })
}

/// Where the drains are cached: beside the revision cache (`revision-r.json`:
/// `revision-r.drains.json`).
fn drains_cache(cache: &Path) -> PathBuf {
    cache.with_extension("drains.json")
}

/// The cached drains; none when there is no cache or it does not read (said in the log).
fn read_drains_cache(cache: &Path) -> Vec<Drain> {
    let path = drains_cache(cache);
    let Ok(bytes) = gtd_core::files::read(&path, gtd_core::files::MAX_CONFIG_BYTES) else {
        return Vec::new();
    };
    serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        tracing::warn!(file = %path.display(), error = %e, "the drains cache does not read; starting without drains");
        Vec::new()
    })
}

/// Writes the drains held beside the revision cache (as [`write_cache`] does).
async fn cache_drains(fleet: &Fleet) {
    let path = drains_cache(&fleet.opts.cache);
    let drains = fleet.drains();
    let written = tokio::task::spawn_blocking(move || {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(&*drains)?)?;
        std::fs::rename(&tmp, &path)
    })
    .await;
    if let Ok(Err(e)) = written {
        tracing::warn!(error = %e, "the drains cache was not written");
    }
}

/// Writes the revision served to the cache file (a temp file renamed over it, so that a crash
/// leaves the old one or the new one, never half of either).
fn write_cache(path: &Path, r: &Revision) -> Result<(), CacheError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(r)?).map_err(|error| CacheError::Write {
        path: tmp.clone(),
        error,
    })?;
    std::fs::rename(&tmp, path).map_err(|error| CacheError::Rename {
        path: path.to_owned(),
        error,
    })
}

/// The node's registry id.
pub(crate) fn node_id(inner: &Inner, fleet: &Fleet) -> String {
    fleet.opts.node_id.clone().unwrap_or_else(|| {
        format!(
            "{}@{}:{}",
            inner.region,
            gtd_fleet::hostname(),
            inner.admin_addr.port()
        )
    })
}

/// The follower: one session with etcd after another, with backoff between them, until the
/// node stops. Also caches the revision the node started with when it came from etcd.
pub(crate) async fn follow(inner: Arc<Inner>) {
    let Some(fleet) = inner.fleet.as_ref() else {
        return;
    };
    let started = lock(&fleet.applied).clone();
    if started.1 == Source::Etcd {
        cache(fleet, &started.0).await;
        cache_drains(fleet).await;
    }
    let mut backoff = MIN_BACKOFF;
    loop {
        let began = std::time::Instant::now();
        let result = session(&inner, fleet).await;
        match result {
            // Stopping: the session's connection and lease stay for `Fleet::leave`.
            Ok(()) => return,
            Err(e) => {
                *lock(&fleet.store) = None;
                let e = gtd_fleet::describe(&e);
                let was = lock(&fleet.error).clone();
                if was.as_deref() != Some(&e) {
                    tracing::warn!(error = %e, "etcd: not following (down, or refusing this node); serving revision {} and retrying", fleet.applied().revision);
                }
                fleet.set_error(Some(e));
            }
        }
        // A session that lasted starts the backoff over.
        if began.elapsed() > MAX_BACKOFF {
            backoff = MIN_BACKOFF;
        }
        // Up to a fifth more, so that nodes that lost etcd together do not return in step.
        let jitter = backoff.mul_f64(
            f64::from(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos() % 1000),
            ) / 5000.0,
        );
        tokio::select! {
            _ = inner.stop.cancelled() => return,
            _ = tokio::time::sleep(backoff + jitter) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn cache(fleet: &Fleet, r: &Arc<Revision>) {
    let path = fleet.opts.cache.clone();
    let r = Arc::clone(r);
    let written = tokio::task::spawn_blocking(move || write_cache(&path, &r)).await;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %format!("{e:#}"), "the revision cache was not written")
        }
        Err(e) => tracing::warn!(error = %e, "the revision cache was not written"),
    }
}

/// One connection's life: the current revision read, then its key watched, with the registry
/// entry kept by a task of its own ([`registry`]) so that a write etcd holds up (an election)
/// never holds up a revision. Returns `Ok` when the node stops, an error when the member is
/// lost or stays without a leader (the caller connects again, to any member).
async fn session(inner: &Arc<Inner>, fleet: &Fleet) -> Result<()> {
    // Serializable reads: they answer during an election, and the watch from their header
    // brings whatever they missed.
    let mut store = Store::connect(&fleet.opts.etcd, &fleet.opts.prefix)
        .await?
        .serializable();
    let seen = store.current().await?;
    *lock(&fleet.store) = Some(store.clone());
    catch_up(inner, fleet, &mut store, seen.number).await?;
    let drains_seen = reread_drains(inner, fleet, &mut store).await?;
    let registration = registry::Registration::start(Arc::clone(inner), store.clone());
    let compaction = tokio::spawn(compact(store.clone()));
    let _compaction = AbortOnDrop(compaction);
    let id = node_id(inner, fleet);
    let _witness = AbortOnDrop(tokio::spawn(witness::watch(store.clone(), id.clone())));
    let _ramp = AbortOnDrop(tokio::spawn(drive_ramps(Arc::clone(inner), fleet, id)));
    let was = lock(&fleet.error).clone();
    fleet.set_error(None);
    if was.is_some() {
        tracing::info!("etcd: following again");
    }
    let key = store.current_key();
    // The first store revision the watch has not delivered.
    let mut from = seen.header + 1;
    let mut events = watch(inner, &store, &key, Vec::new(), from).await?;
    // The drains' keys, watched alike: any change, and they are read again whole.
    let drains_key = store.drains_key();
    let drains_end = gtd_fleet::prefix_end(drains_key.as_bytes());
    let mut drains_from = drains_seen + 1;
    let mut drain_events =
        watch(inner, &store, &drains_key, drains_end.clone(), drains_from).await?;
    loop {
        let message = tokio::select! {
            // The drain began: `Node::shutdown` revokes the lease.
            _ = inner.stop.cancelled() => return Ok(()),
            message = events.message() => message,
            message = drain_events.message() => {
                match message {
                    Ok(Some(r)) if r.canceled && r.compact_revision > 0 => {
                        // Compacted past `drains_from`: read them afresh, watch from there.
                        drains_from = reread_drains(inner, fleet, &mut store).await? + 1;
                        registration.changed();
                    }
                    Ok(Some(r)) if r.canceled => return Err(Error::WatchCancelled(r.cancel_reason)),
                    Ok(Some(r)) => {
                        let next = delivered(&r, drains_from);
                        if !r.events.is_empty() {
                            reread_drains(inner, fleet, &mut store).await?;
                            registration.changed();
                        }
                        drains_from = next;
                        continue;
                    }
                    Ok(None) => return Err(Error::WatchEnded),
                    Err(e) if e.is_leaderless() => {}
                    Err(e) => return Err(watch_error(e)),
                }
                drain_events = watch(inner, &store, &drains_key, drains_end.clone(), drains_from).await?;
                continue;
            }
        };
        let response = match message {
            Ok(Some(r)) => r,
            Ok(None) => return Err(Error::WatchEnded),
            // An election ended the stream (etcd ends `hasleader` streams of a member without
            // a leader): the member is alive, so watch again from where this one stopped.
            Err(e) if e.is_leaderless() => {
                events = watch(inner, &store, &key, Vec::new(), from).await?;
                continue;
            }
            Err(e) => return Err(watch_error(e)),
        };
        if response.canceled {
            if response.compact_revision > 0 {
                // Compacted past `from` while this node was away: read the current revision
                // afresh and watch from there.
                let seen = store.current().await?;
                catch_up(inner, fleet, &mut store, seen.number).await?;
                registration.changed();
                from = seen.header + 1;
                events = watch(inner, &store, &key, Vec::new(), from).await?;
                continue;
            }
            return Err(Error::WatchCancelled(response.cancel_reason));
        }
        let mut latest = None;
        for event in &response.events {
            if let Some(kv) = &event.kv {
                from = from.max(kv.mod_revision + 1);
                if event.r#type() == mvccpb::event::EventType::Put {
                    latest = std::str::from_utf8(&kv.value)
                        .ok()
                        .and_then(|v| v.trim().parse::<u64>().ok());
                }
            }
        }
        if response.events.is_empty() && !response.created {
            // A progress report: nothing up to its header is left to deliver.
            if let Some(h) = &response.header {
                from = from.max(h.revision + 1);
            }
        }
        if let Some(n) = latest {
            catch_up(inner, fleet, &mut store, n).await?;
            registration.changed();
        }
    }
}

/// The first store revision past what a watch's `response` delivered, from `from`: past its
/// events, or for a progress report past its header.
fn delivered(response: &rpc::WatchResponse, from: i64) -> i64 {
    let mut next = from;
    for kv in response.events.iter().filter_map(|e| e.kv.as_ref()) {
        next = next.max(kv.mod_revision + 1);
    }
    if response.events.is_empty()
        && !response.created
        && let Some(h) = &response.header
    {
        next = next.max(h.revision + 1);
    }
    next
}

/// Reads the fleet-wide drains and, when they changed, applies them to the running config
/// ([`redrain`]); returns etcd's store revision they were read at.
async fn reread_drains(inner: &Arc<Inner>, fleet: &Fleet, store: &mut Store) -> Result<i64> {
    let (drains, header) = store.drains().await?;
    let count = drains.len();
    let before = fleet.drains();
    if fleet.set_drains(drains) {
        tracing::info!(drains = count, "fleet: the drains changed; applying them");
        super::events::drains_changed(inner.registry.events(), &before, &fleet.drains());
        redrain(inner).await;
        cache_drains(fleet).await;
    }
    Ok(header)
}

/// The drains changed: the running config, as loaded, is built again with them (the same
/// ports, so nothing is bound), as a name's new addresses are. Open connections and flows carry
/// on; endpoints keep their state (a drained one its connections, which finish), and the
/// balancers and the split see `drain` as if the config said it.
async fn redrain(inner: &Arc<Inner>) {
    let _bound = inner.bound.lock().await;
    if inner.stop.is_cancelled() {
        return;
    }
    let Some(fleet) = &inner.fleet else {
        return;
    };
    let Some(base) = fleet.base() else {
        return;
    };
    if let Err(e) = inner.rebuild(Arc::new(fleet.overlay(&base))).await {
        tracing::error!("fleet: the drains could not be applied: {e}");
    }
}

/// A task that ends when this value is dropped (with the session that started it).
/// This node's part in driving the fleet's ramp ([`gtd_fleet::ramp::drive`]): it claims the
/// ramp when no node holds it, and puts each decision it takes on its timeline.
fn drive_ramps(inner: Arc<Inner>, fleet: &Fleet, id: String) -> impl Future<Output = ()> + use<> {
    let events = Arc::clone(&inner);
    let gauges = fleet.ramp_gauges.clone();
    let hooks = gtd_fleet::ramp::drive::Hooks {
        event: Box::new(move |text| super::events::ramp(events.registry.events(), text)),
        gauges: Box::new(move |step, state| {
            gauges.0.set(step as f64);
            gauges.1.set(state as f64);
        }),
    };
    gtd_fleet::ramp::drive::drive(
        fleet.opts.etcd.clone(),
        fleet.opts.prefix.clone(),
        id,
        hooks,
    )
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// This node's part in compacting etcd's history ([`gtd_fleet::compact`]): a round every
/// interval, the first one interval after the session began. A node whose etcd user may not
/// write `PREFIX/compaction` says so once and leaves it to etcd's own auto-compaction.
async fn compact(store: Store) {
    let mut last = gtd_fleet::compact::Round::default();
    let mut said = false;
    loop {
        tokio::time::sleep(gtd_fleet::compact::INTERVAL).await;
        match gtd_fleet::compact::round(&store, last).await {
            Ok((next, outcome)) => {
                last = next;
                if let gtd_fleet::compact::Outcome::Won { compacted } = outcome
                    && compacted > 0
                {
                    tracing::info!(revision = compacted, "fleet: etcd's history compacted");
                }
            }
            Err(e) => {
                let e = gtd_fleet::describe(&e);
                if e.contains("permission denied") {
                    tracing::warn!(error = %e, "fleet: this node may not compact etcd's history \
                        (PREFIX/compaction); etcd's --auto-compaction-retention must (docs/operations.md)");
                    return;
                }
                if !said {
                    tracing::warn!(error = %e, "fleet: etcd's history not compacted this round");
                    said = true;
                }
            }
        }
    }
}

/// How long a member may know no leader before the node leaves it for another: longer than an
/// election (etcd's default election timeout is 1 s), short enough that a member cut off from
/// the others is not followed for long.
const LEADERLESS: Duration = Duration::from_secs(10);

/// A watch of `key` (to `range_end`, when not empty) from store revision `from`; while the
/// member knows no leader (an election), tried again every 100 ms for up to [`LEADERLESS`].
async fn watch(
    inner: &Inner,
    store: &Store,
    key: &str,
    range_end: Vec<u8>,
    from: i64,
) -> Result<Answers<rpc::WatchResponse>> {
    let began = tokio::time::Instant::now();
    loop {
        match store
            .client()
            .watch_range(key, range_end.clone(), from)
            .await
        {
            Err(e) if e.is_leaderless() && began.elapsed() < LEADERLESS => {
                tokio::select! {
                    _ = inner.stop.cancelled() => return Err(Error::Stopping),
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
            watch => return watch.map_err(watch_error),
        }
    }
}

/// A watch of `PREFIX/revision` or `PREFIX/drains/` that failed, as the store's error (etcd's
/// answer classified, as every other).
fn watch_error(e: gtd_fleet::etcd::Error) -> Error {
    Error::Store(gtd_fleet::Error::etcd("watching the current revision", e))
}

/// Applies revision `n` unless the node serves it already or refused it.
async fn catch_up(inner: &Arc<Inner>, fleet: &Fleet, store: &mut Store, n: u64) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let (applied, source) = {
        let a = lock(&fleet.applied);
        (Arc::clone(&a.0), a.1)
    };
    let refused = lock(&fleet.refused).as_ref().map(|r| r.revision);
    if applied.revision == n && source == Source::Etcd || refused == Some(n) {
        return Ok(());
    }
    let Some(r) = store.named(n).await? else {
        return Ok(());
    };
    let r = Arc::new(r);
    if applied.revision == n && applied.same_text(&r) {
        // Started from the cache, and etcd has not moved since: now it is etcd's.
        fleet.set_applied(Arc::clone(&r), Source::Etcd);
        return Ok(());
    }
    match inner.reload_with(Some(Arc::clone(&r))).await {
        // Recorded as served by the reload, under its lock.
        Ok(()) => {
            tracing::info!(revision = n, "fleet: revision applied");
            cache(fleet, &r).await;
        }
        // The reload logged why, with every error.
        Err(e) => fleet.refuse(n, e.to_string()),
    }
    Ok(())
}
