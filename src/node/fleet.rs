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

use crate::fleet::etcd::pb::{etcdserverpb as rpc, mvccpb};
use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::{Value, json};

use super::Inner;
use crate::fleet::registry::{Entry, Refusal, listeners_of};
use crate::fleet::{Revision, Store};

/// `gtd run --etcd ...`.
#[derive(Debug, Clone)]
pub struct Options {
    /// etcd's members and the credentials to show them.
    pub etcd: crate::fleet::Access,
    /// Key prefix.
    pub prefix: String,
    /// Where the served revision is cached.
    pub cache: PathBuf,
    /// The node's registry id (default `REGION@HOST:ADMIN_PORT`).
    pub node_id: Option<String>,
    /// The registry lease's time to live: a node that dies leaves the registry within it.
    pub lease_ttl: Duration,
}

/// How often a node rewrites its registry entry.
const REFRESH: Duration = Duration::from_secs(2);
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
    /// The connection of the running session (for `GET /fleet`).
    store: std::sync::Mutex<Option<Store>>,
    /// The running session's registry lease (0: none).
    lease: std::sync::atomic::AtomicI64,
    connected: AtomicBool,
    /// The last error reaching etcd.
    error: std::sync::Mutex<Option<String>>,
}

/// The revision a node starts with: etcd's current one when etcd answers, else the cached
/// one; with both, the cached one is the fallback when the current one cannot be applied.
pub(crate) struct Initial {
    pub(crate) first: (Arc<Revision>, Source),
    pub(crate) fallback: Option<Arc<Revision>>,
    /// Why etcd was not used, when it was not.
    pub(crate) etcd_error: Option<String>,
}

impl Fleet {
    pub(crate) fn new(opts: Options, applied: (Arc<Revision>, Source)) -> Fleet {
        Fleet {
            opts,
            applied: std::sync::Mutex::new(applied),
            refused: std::sync::Mutex::new(None),
            store: std::sync::Mutex::new(None),
            lease: std::sync::atomic::AtomicI64::new(0),
            connected: AtomicBool::new(false),
            error: std::sync::Mutex::new(None),
        }
    }

    /// Leaves the registry at once (the drain began): revokes the session's lease, waiting
    /// for etcd at most 2 s. The node's process may end as soon as the drain does, so the
    /// follower task cannot be left to do it.
    pub(crate) async fn leave(&self) {
        let lease = self.lease.swap(0, Ordering::Relaxed);
        let store = self.store.lock().expect("fleet state").clone();
        if let (Some(store), true) = (store, lease != 0) {
            match tokio::time::timeout(Duration::from_secs(2), store.client().lease_revoke(lease))
                .await
            {
                Ok(Ok(_)) => tracing::info!("fleet: left the registry"),
                Ok(Err(e)) => tracing::warn!(error = %crate::fleet::describe_error(&e),
                    "fleet: the registry entry stays until its lease runs out"),
                Err(_) => tracing::warn!(
                    "fleet: etcd did not answer; the registry entry stays until its lease runs out"
                ),
            }
        }
    }

    /// The revision served.
    pub(crate) fn applied(&self) -> Arc<Revision> {
        Arc::clone(&self.applied.lock().expect("fleet state").0)
    }

    pub(crate) fn refuse(&self, revision: u64, reason: String) {
        *self.refused.lock().expect("fleet state") = Some(Refusal { revision, reason });
    }

    pub(crate) fn set_applied(&self, r: Arc<Revision>, source: Source) {
        let n = r.revision;
        *self.applied.lock().expect("fleet state") = (r, source);
        let mut refused = self.refused.lock().expect("fleet state");
        if refused.as_ref().is_some_and(|x| x.revision <= n) {
            *refused = None;
        }
    }

    fn set_error(&self, e: Option<String>) {
        self.connected.store(e.is_none(), Ordering::Relaxed);
        *self.error.lock().expect("fleet state") = e;
    }

    /// The `fleet` object of `/status`.
    pub(crate) fn status(&self, id: &str) -> Value {
        let (applied, source) = {
            let a = self.applied.lock().expect("fleet state");
            (a.0.revision, a.1)
        };
        json!({
            "id": id, "prefix": self.opts.prefix, "etcd": self.opts.etcd.endpoints(),
            "tls": self.opts.etcd.tls(), "user": self.opts.etcd.user(),
            "applied": applied, "source": source.as_str(),
            "refused": *self.refused.lock().expect("fleet state"),
            "connected": self.connected.load(Ordering::Relaxed),
            "error": *self.error.lock().expect("fleet state"),
        })
    }

    /// A connection for one `GET /fleet`: the session's, or a new one.
    pub(crate) async fn store(&self) -> Result<Store, crate::fleet::Error> {
        let running = self.store.lock().expect("fleet state").clone();
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
    let from_etcd = async {
        let mut store = Store::connect(&opts.etcd, &opts.prefix).await?;
        let seen = store.current().await?;
        store.named(seen.number).await?.ok_or_else(|| {
            anyhow!(
                "nothing is published under {} yet (gtd push first)",
                store.prefix()
            )
        })
    }
    .await;
    match (from_etcd, cached) {
        (Ok(r), cached) => Ok(Initial {
            fallback: cached.ok().filter(|c| !c.same_text(&r)).map(Arc::new),
            first: (Arc::new(r), Source::Etcd),
            etcd_error: None,
        }),
        (Err(e), Ok(c)) => Ok(Initial {
            first: (Arc::new(c), Source::Cache),
            fallback: None,
            etcd_error: Some(crate::fleet::describe(&e)),
        }),
        (Err(e), Err(c)) => Err(anyhow!(
            "{}; and no cached revision to start from: {c:#}",
            crate::fleet::describe(&e)
        )),
    }
}

fn read_cache(path: &Path) -> Result<Revision> {
    let bytes = crate::files::read(path, 4 * crate::files::MAX_CONFIG_BYTES)
        .map_err(|e| anyhow!("reading {}: {e}", path.display()))?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{} does not hold a gtd revision", path.display()))
}

/// Writes the revision served to the cache file (a temp file renamed over it, so that a crash
/// leaves the old one or the new one, never half of either).
fn write_cache(path: &Path, r: &Revision) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(r)?)
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
}

/// The node's registry id.
pub(crate) fn node_id(inner: &Inner, fleet: &Fleet) -> String {
    fleet.opts.node_id.clone().unwrap_or_else(|| {
        format!(
            "{}@{}:{}",
            inner.region,
            crate::fleet::hostname(),
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
    let started = fleet.applied.lock().expect("fleet state").clone();
    if started.1 == Source::Etcd {
        cache(fleet, &started.0).await;
    }
    let mut backoff = Duration::from_millis(500);
    loop {
        let began = std::time::Instant::now();
        let result = session(&inner, fleet).await;
        match result {
            // Stopping: the session's connection and lease stay for `Fleet::leave`.
            Ok(()) => return,
            Err(e) => {
                *fleet.store.lock().expect("fleet state") = None;
                fleet.lease.store(0, Ordering::Relaxed);
                let e = crate::fleet::describe(&e);
                let was = fleet.error.lock().expect("fleet state").clone();
                if was.as_deref() != Some(&e) {
                    tracing::warn!(error = %e, "etcd: not following (down, or refusing this node); serving revision {} and retrying", fleet.applied().revision);
                }
                fleet.set_error(Some(e));
            }
        }
        // A session that lasted starts the backoff over.
        if began.elapsed() > MAX_BACKOFF {
            backoff = Duration::from_millis(500);
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

/// One connection's life: a lease, the entry, the watch. Returns `Ok` when the node stops,
/// an error when etcd is lost (the caller reconnects).
async fn session(inner: &Arc<Inner>, fleet: &Fleet) -> Result<()> {
    let mut store = Store::connect(&fleet.opts.etcd, &fleet.opts.prefix).await?;
    let ttl = fleet.opts.lease_ttl.as_secs().max(1) as i64;
    let lease = store
        .client()
        .lease_grant(ttl)
        .await
        .context("granting the registry lease")?
        .id;
    let (mut keeper, mut kept) = store
        .client()
        .lease_keep_alive(lease)
        .await
        .context("keeping the registry lease")?;
    let seen = store.current().await?;
    *fleet.store.lock().expect("fleet state") = Some(store.clone());
    fleet.lease.store(lease, Ordering::Relaxed);
    let id = node_id(inner, fleet);
    catch_up(inner, fleet, &mut store, seen.number).await?;
    register(inner, fleet, &mut store, &id, lease).await?;
    // Followed again only once registered: a session that fails there (a user without write
    // permission on the registry) keeps its error, logged once, not once per attempt.
    let was = fleet.error.lock().expect("fleet state").clone();
    fleet.set_error(None);
    if was.is_some() {
        tracing::info!("etcd: following again");
    }
    let key = store.current_key();
    let mut events = store
        .client()
        .watch(&key, seen.header + 1)
        .await
        .context("watching the current revision")?;
    let mut refresh = tokio::time::interval(REFRESH);
    let mut keep = tokio::time::interval(Duration::from_secs((ttl as u64 / 3).max(1)));
    loop {
        tokio::select! {
            // The drain began: `Node::shutdown` revokes the lease.
            _ = inner.stop.cancelled() => {
                return Ok(());
            }
            message = events.message() => {
                let response = message.context("watching the current revision")?
                    .ok_or_else(|| anyhow!("the watch ended"))?;
                if response.canceled {
                    bail!("the watch was cancelled: {}", response.cancel_reason);
                }
                let mut latest = None;
                for event in &response.events {
                    if event.r#type() == mvccpb::event::EventType::Put
                        && let Some(kv) = &event.kv
                    {
                        latest = std::str::from_utf8(&kv.value)
                            .ok()
                            .and_then(|v| v.trim().parse::<u64>().ok());
                    }
                }
                if let Some(n) = latest {
                    catch_up(inner, fleet, &mut store, n).await?;
                    register(inner, fleet, &mut store, &id, lease).await?;
                }
            }
            _ = refresh.tick() => register(inner, fleet, &mut store, &id, lease).await?,
            _ = keep.tick() => keeper.keep_alive().await.context("keeping the registry lease")?,
            response = kept.message() => {
                let response = response.context("keeping the registry lease")?
                    .ok_or_else(|| anyhow!("the lease keep-alive stream ended"))?;
                if response.ttl <= 0 {
                    bail!("the registry lease expired");
                }
            }
        }
    }
}

/// Applies revision `n` unless the node serves it already or refused it.
async fn catch_up(inner: &Arc<Inner>, fleet: &Fleet, store: &mut Store, n: u64) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let (applied, source) = {
        let a = fleet.applied.lock().expect("fleet state");
        (Arc::clone(&a.0), a.1)
    };
    let refused = fleet
        .refused
        .lock()
        .expect("fleet state")
        .as_ref()
        .map(|r| r.revision);
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
        Err(e) => fleet.refuse(n, e),
    }
    Ok(())
}

/// Writes the node's registry entry under its lease.
async fn register(
    inner: &Arc<Inner>,
    fleet: &Fleet,
    store: &mut Store,
    id: &str,
    lease: i64,
) -> Result<()> {
    let status = super::admin::status(inner);
    let (applied, source) = {
        let a = fleet.applied.lock().expect("fleet state");
        (a.0.revision, a.1)
    };
    let entry = Entry {
        id: id.to_owned(),
        region: inner.region.clone(),
        admin: inner.admin_addr.to_string(),
        bind: inner.opts.bind.to_string(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        applied: Some(applied),
        source: source.as_str().to_owned(),
        refused: fleet.refused.lock().expect("fleet state").clone(),
        uptime_s: inner.started.elapsed().as_secs(),
        updated_at_ms: crate::fleet::now_ms(),
        listeners: listeners_of(&status),
    };
    let key = format!("{}{id}", store.nodes_key());
    store
        .client()
        .put(rpc::PutRequest {
            key: key.into_bytes(),
            value: serde_json::to_vec(&entry)?,
            lease,
            ..Default::default()
        })
        .await
        .context("writing the registry entry")?;
    Ok(())
}
