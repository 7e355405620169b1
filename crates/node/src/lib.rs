//! The listener node (`gtd run`): serves every listener that lists its acceleration region.
//!
//! Data flow: [`Node::start`] loads the config, builds a [`snapshot::Snapshot`] (the pure
//! routing plan of [`gtd_core::split::plan`] with this node's handles attached) and binds every
//! listener's socket. [`accept`] admits TCP-borne connections and hands them to [`l4`] (TCP) or
//! [`http`] (HTTP, HTTPS); [`l4`]'s UDP loop receives datagrams. Each loads the snapshot per
//! connection, flow or request (lock-free) and walks its attempts with [`attempt`], which asks
//! `split` and `balance` for every decision; [`connect`] opens the sockets towards endpoints.
//! [`checks`] runs each group's active health checks (or a light probe for its RTT); the
//! planner re-reads group health and measured RTTs every 250 ms (health at once after a check's
//! verdict changes, admin toggles and passive failures) and swaps in a new plan when a fact or
//! the order changed. Reload (SIGHUP, `POST /reload`)
//! builds and validates a whole new snapshot, binds new ports, then swaps it in; a bad config
//! keeps the running one. SIGTERM stops accepting and drains.

pub mod accept;
pub(crate) mod access;
pub mod admin;
pub mod attempt;
pub(crate) mod checks;
pub mod connect;
pub mod dashboard;
pub(crate) mod descriptors;
pub(crate) mod dns;
mod error;
pub mod events;
pub mod fleet;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod l4;
pub mod location;
mod outcomes;
pub mod snapshot;
#[cfg(test)]
mod start_props;
mod status;
pub mod telemetry;
mod timers;
mod tls;
mod toggle;
pub(crate) mod watch;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use gtd_core::config::{self, Config, Listener, Protocol};
use gtd_fleet::Revision;

use self::access::{AccessLog, Sink};
use self::snapshot::Snapshot;
use self::telemetry::Registry;

pub use self::access::{AccessLogError, LogFormat};
pub use self::error::Error;
pub use self::tls::client_config as tls_client_config;

type Result<T, E = Error> = std::result::Result<T, E>;

/// How to start a node.
#[derive(Debug, Clone)]
pub struct Options {
    /// The config file (re-read on reload).
    pub config: PathBuf,
    /// Region catalogue override.
    pub regions: Option<PathBuf>,
    /// This node's acceleration region.
    pub region: String,
    /// Address the listeners bind to.
    pub bind: IpAddr,
    /// Admin bind override (tests, demo); else `[admin] bind`.
    pub admin_bind: Option<SocketAddr>,
    /// Outbound source address override (several nodes on one host, the demo); else
    /// `[node] source_ip`.
    pub source_ip: Option<IpAddr>,
    /// How the access log writes its lines (`gtd run --log-format`, which sets the node's
    /// other logs alike).
    pub log_format: LogFormat,
    /// Serve the fleet's revisions from etcd instead of the config file (`gtd run --etcd`).
    pub fleet: Option<fleet::Options>,
}

/// A running node.
pub struct Node {
    inner: Arc<Inner>,
}

/// A bound listener socket and the token that stops its loop.
struct Bound {
    addr: SocketAddr,
    stop: CancellationToken,
    /// The listening TCP socket (a second handle on it), to set a reload's `backlog` on.
    listening: Option<std::os::fd::OwnedFd>,
}

/// How long the end of a drain waits for the connections it cut to log their lines.
const LAST_LINES: Duration = Duration::from_secs(1);

/// State shared by the node's tasks.
pub(crate) struct Inner {
    opts: Options,
    region: String,
    pub(crate) snapshot: ArcSwap<Snapshot>,
    pub(crate) registry: Registry,
    /// Connection and flow tasks (drained on shutdown).
    pub(crate) tracker: TaskTracker,
    started: Instant,
    /// Bound sockets by (udp, port); the lock serialises reloads (never taken by decisions).
    bound: Mutex<BTreeMap<(bool, u16), Bound>>,
    /// Stops the accept and receive loops (SIGTERM: the drain begins).
    stop: CancellationToken,
    /// Stops the planner and the admin server once the drain is over, so that `/metrics` and
    /// `/status` watch it; cuts the TCP relays and UDP flows still open then.
    drained: CancellationToken,
    /// Set once the drain began: `/healthz` answers 503, for load balancers in front.
    pub(crate) draining: std::sync::atomic::AtomicBool,
    /// `gtd_draining`, set with `draining`.
    draining_gauge: ::metrics::Gauge,
    /// Stops the running snapshot's health checks (replaced by each reload's).
    pub(crate) checks: std::sync::Mutex<CancellationToken>,
    /// Endpoint host names and their addresses.
    pub(crate) names: Arc<dns::Names>,
    admin_addr: SocketAddr,
    /// The access log's writer (the snapshot holds the handle requests, connections and
    /// flows use).
    access: AccessLog,
    /// The fleet's revisions and the registry, with `--etcd`.
    pub(crate) fleet: Option<fleet::Fleet>,
    reloads_ok: ::metrics::Counter,
    reloads_err: ::metrics::Counter,
}

/// Reads and validates the config: a fleet revision's text when given, else the file.
fn load(opts: &Options, revision: Option<&Revision>) -> Result<Config> {
    let (loaded, file) = match revision {
        Some(r) => (r.validate(), r.config_file()),
        None => (
            config::load(&opts.config, opts.regions.as_deref()),
            opts.config.clone(),
        ),
    };
    let mut config = loaded.map_err(|errors| Error::Config { file, errors })?;
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    config.serves(&opts.region)?;
    if let Some(ip) = opts.source_ip {
        config.node.source_ip = Some(ip);
    }
    // An address this machine does not have would fail every connection to an endpoint, each
    // failure this node's own (connect::exhausted): refused here, at start and on reload.
    // (Only EADDRNOTAVAIL: a bind that fails for want of a descriptor says nothing about the
    // address. An IPv6 address still in duplicate address detection is refused too; with
    // net.ipv4.ip_nonlocal_bind set, any address passes.)
    if let Some(ip) = config.node.source_ip
        && let Err(error) = std::net::UdpSocket::bind(SocketAddr::new(ip, 0))
        && rustix::io::Errno::from_io_error(&error) == Some(rustix::io::Errno::ADDRNOTAVAIL)
    {
        let from = match opts.source_ip {
            Some(_) => "--source-ip".to_owned(),
            None => format!("{}: [node] source_ip =", config.source.display()),
        };
        return Err(Error::SourceIp { ip, from, error });
    }
    Ok(config)
}

/// Refuses `config` for an admin server on `bind` that anyone beyond this host could reach
/// without a token (at start, with `--admin`; on every reload, since the server stays bound).
fn guard_admin(config: &Config, bind: SocketAddr) -> Result<()> {
    if !config.admin.exposed(bind) {
        return Ok(());
    }
    Err(Error::Admin {
        bind,
        config: config.source.clone(),
    })
}

impl Node {
    /// Loads the config, binds every socket and starts serving. Fails (binding nothing) on a bad
    /// config or a port that cannot be bound.
    ///
    /// With `--etcd`: the fleet's current revision, or the cached one when etcd does not
    /// answer; when the current one cannot be applied and a different one is cached, that
    /// one, with the current one reported refused.
    pub async fn start(opts: Options) -> Result<Node> {
        let Some(fleet_opts) = opts.fleet.clone() else {
            return Node::start_with(opts, None).await;
        };
        let initial = fleet::initial(&fleet_opts).await?;
        if let Some(e) = &initial.etcd_error {
            tracing::warn!(error = %e, revision = initial.first.0.revision,
                "etcd: no revision from etcd at start (down, or refusing this node); serving the cached revision");
        }
        let first = initial.first.0.revision;
        let started = Node::start_with(
            opts.clone(),
            Some(fleet::Fleet::new(
                fleet_opts.clone(),
                initial.first,
                initial.drains.clone(),
            )),
        )
        .await;
        match (started, initial.fallback) {
            (Ok(node), _) => Ok(node),
            (Err(e), Some(cached)) => {
                let reason = format!("{e:#}");
                tracing::error!(
                    revision = first,
                    cached = cached.revision,
                    "the current revision cannot be applied; serving the cached one: {}",
                    reason.lines().collect::<Vec<_>>().join("; ")
                );
                let fleet =
                    fleet::Fleet::new(fleet_opts, (cached, fleet::Source::Cache), initial.drains);
                fleet.refuse(first, reason);
                Node::start_with(opts, Some(fleet)).await
            }
            (Err(e), None) => Err(e),
        }
    }

    async fn start_with(opts: Options, mut fleet: Option<fleet::Fleet>) -> Result<Node> {
        let revision = fleet.as_ref().map(fleet::Fleet::applied);
        let config = Arc::new(load(&opts, revision.as_deref())?);
        // A fleet's drains, applied as the config's own `drain`.
        let config = match &fleet {
            Some(f) => {
                f.set_base(Arc::clone(&config));
                Arc::new(f.overlay(&config))
            }
            None => config,
        };
        let registry = Registry::new();
        let draining_gauge = telemetry::node_series(&registry);
        if let Some(f) = &mut fleet {
            f.export(&registry);
            // The drains in force from the start, on the timeline as later ones.
            events::drains_changed(registry.events(), &[], &f.drains());
        }
        let names = dns::Names::new(&registry);
        names
            .prepare(&config, &opts.region)
            .await
            .map_err(|e| Error::Resolver(e.to_string()))?;
        let now = Instant::now();
        let mut snapshot = Snapshot::build(
            config.clone(),
            &opts.region,
            None,
            &registry,
            &names.table(),
            now,
        )?;
        let access = AccessLog::new(opts.log_format, &registry);
        let sink = Sink::open(&config.log.access)?;
        snapshot.access = access.install(sink).await?;
        snapshot.publish(now);
        let admin_bind = opts.admin_bind.unwrap_or(config.admin.bind);
        guard_admin(&config, admin_bind)?;
        let admin = TcpListener::bind(admin_bind)
            .await
            .map_err(|error| Error::AdminBind {
                addr: admin_bind,
                error,
            })?;
        let admin_addr = admin.local_addr()?;
        let inner = Arc::new(Inner {
            region: opts.region.clone(),
            opts,
            snapshot: ArcSwap::from_pointee(snapshot),
            reloads_ok: registry.counter(&telemetry::CONFIG_RELOADS_TOTAL, &["ok"]),
            reloads_err: registry.counter(&telemetry::CONFIG_RELOADS_TOTAL, &["error"]),
            registry,
            tracker: TaskTracker::new(),
            started: now,
            bound: Mutex::new(BTreeMap::new()),
            stop: CancellationToken::new(),
            drained: CancellationToken::new(),
            draining: std::sync::atomic::AtomicBool::new(false),
            draining_gauge,
            checks: std::sync::Mutex::new(CancellationToken::new()),
            names,
            admin_addr,
            access,
            fleet,
        });
        inner.names.commit(&config, &inner.region);
        // Before any port opens: an `essential` endpoint is out until it passes its checks.
        checks::start(&inner, &inner.snapshot.load());
        {
            let mut bound = inner.bound.lock().await;
            let wanted = wanted_ports(&inner.snapshot.load());
            let fresh = bind_all(inner.opts.bind, &wanted, &bound, &inner.snapshot.load()).await?;
            start_loops(&inner, fresh, &mut bound);
        }
        tokio::spawn(admin::serve(inner.clone(), admin, inner.drained.clone()));
        tokio::spawn(planner(inner.clone()));
        tokio::spawn(follow_names(inner.clone()));
        tokio::spawn(fleet::follow(inner.clone()));
        // What it loaded, so that a log read later says which config this run served.
        let loaded = match &inner.fleet {
            Some(f) => f.serving(),
            None => inner.opts.config.display().to_string(),
        };
        tracing::info!(region = %inner.region, admin = %admin_addr, config = %loaded, "node started");
        Ok(Node { inner })
    }

    /// The `/status` document, in process (the demo's view reads it).
    pub fn status(&self) -> gtd_core::view::Status {
        admin::status(&self.inner)
    }

    /// The admin server's address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.inner.admin_addr
    }

    /// Every bound listener socket: (listener name, address).
    pub async fn listener_addrs(&self) -> Vec<(String, SocketAddr)> {
        let bound = self.inner.bound.lock().await;
        let snap = self.inner.snapshot.load();
        snap.listeners
            .iter()
            .filter_map(|l| {
                let udp = l.cfg.protocol == Protocol::Udp;
                bound
                    .get(&(udp, l.cfg.port))
                    .map(|b| (l.cfg.name.clone(), b.addr))
            })
            .collect()
    }

    /// Reloads the config file (as SIGHUP does).
    pub async fn reload(&self) -> Result<()> {
        self.inner.reload().await
    }

    /// Stops accepting, lets open connections finish for up to the longest `drain_timeout`,
    /// then closes what is left.
    pub async fn shutdown(self) {
        self.shutdown_within(Duration::MAX).await;
    }

    /// [`Self::shutdown`], draining for `most` at the longest: for a caller that knows no
    /// client is left to wait for (the demo, once its load has stopped, would otherwise wait
    /// for its idle UDP flows).
    pub async fn shutdown_within(self, most: Duration) {
        let drain = self
            .inner
            .snapshot
            .load()
            .listeners
            .iter()
            .map(|l| l.cfg.drain_timeout)
            .max()
            .unwrap_or_default()
            .min(most);
        self.inner
            .draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.inner.draining_gauge.set(1.0);
        self.inner.stop.cancel();
        {
            let mut bound = self.inner.bound.lock().await;
            for (_, b) in std::mem::take(&mut *bound) {
                b.stop.cancel();
            }
        }
        // A fleet node leaves the registry as its drain begins, not when its lease runs out.
        if let Some(fleet) = &self.inner.fleet {
            fleet.leave().await;
        }
        self.inner.tracker.close();
        let open = self.inner.tracker.len();
        if open > 0 {
            // `open` counts connections and each UDP listener with its flows.
            tracing::info!(
                open,
                drain_s = drain.as_secs_f64(),
                "draining connections and UDP flows"
            );
        }
        if tokio::time::timeout(drain, self.inner.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                left = self.inner.tracker.len(),
                "drain timeout: closing remaining connections"
            );
        }
        // TCP relays and UDP loops still open end now, each with its log line (given a moment
        // to send it; an HTTP exchange still open is dropped with the runtime).
        self.inner.drained.cancel();
        let _ = tokio::time::timeout(LAST_LINES, self.inner.tracker.wait()).await;
        // The last lines, before the process may exit.
        self.inner.access.flush().await;
    }

    /// Runs until SIGTERM or SIGINT (then drains); SIGHUP reloads. `signals` were taken
    /// before the node started, so that one sent as soon as its ports answer is not lost (or,
    /// with the default actions, fatal).
    pub async fn run_until_signal(self, signals: Signals) -> Result<()> {
        let Signals {
            mut term,
            mut int,
            mut hup,
        } = signals;
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = hup.recv() => {
                    // A rejected reload is logged by the reload itself, once.
                    let _ = self.reload().await;
                }
            }
        }
        tracing::info!("stopping");
        self.shutdown().await;
        Ok(())
    }
}

/// The signals a node answers (see [`Node::run_until_signal`]); taken over from their default
/// actions when made.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Takes SIGTERM, SIGINT and SIGHUP (inside the runtime).
    pub fn take() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

impl Inner {
    pub(crate) fn source_ip(&self) -> Option<IpAddr> {
        self.snapshot.load().config.node.source_ip
    }

    /// Reloads what the node serves: the config file, or in a fleet the revision it serves
    /// (certificates and the access log file opened again).
    pub(crate) async fn reload(self: &Arc<Self>) -> Result<()> {
        self.reload_with(None).await
    }

    /// Build and validate the new state, bind new ports, then swap; else keep the old. The
    /// state comes from `new` (a revision from etcd, recorded as served once swapped in), else
    /// in a fleet from the revision served, else from the config file. Both are read under
    /// the reload lock, so a SIGHUP racing a new revision cannot put the older one back.
    pub(crate) async fn reload_with(self: &Arc<Self>, new: Option<Arc<Revision>>) -> Result<()> {
        let mut bound = self.bound.lock().await;
        let revision = new
            .clone()
            .or_else(|| self.fleet.as_ref().map(fleet::Fleet::applied));
        let what = match &revision {
            Some(r) => format!("revision {}", r.revision),
            None => self.opts.config.display().to_string(),
        };
        // Draining (SIGTERM): the ports are closed for good; a reload would open them again
        // with nothing accepting on them.
        if self.stop.is_cancelled() {
            return Err(Error::Draining);
        }
        let result: Result<()> = async {
            // Reading the files and building the snapshot (certificates included) block: off
            // the runtime, so that a slow disk holds only the reload, not the traffic.
            // The access log file is opened again here, so that a SIGHUP after logrotate moved
            // it writes a new one.
            let inner = Arc::clone(self);
            let config =
                tokio::task::spawn_blocking(move || load(&inner.opts, revision.as_deref()))
                    .await
                    .map_err(interrupted("reading the config"))??;
            // The admin server stays where it was bound: a config that takes its token away
            // while it is reachable beyond this host would open reloads and toggles to anyone.
            guard_admin(&config, self.admin_addr)?;
            let base = Arc::new(config);
            // A fleet's drains, applied as the config's own `drain`.
            let config = match &self.fleet {
                Some(f) => Arc::new(f.overlay(&base)),
                None => Arc::clone(&base),
            };
            // New names are looked up before the snapshot that uses them is built.
            self.names
                .prepare(&config, &self.region)
                .await
                .map_err(|e| Error::Resolver(e.to_string()))?;
            let access = config.log.access.clone();
            let sink = tokio::task::spawn_blocking(move || Sink::open(&access))
                .await
                .map_err(interrupted("opening the access log"))??;
            let mut next = self.build(config).await?;
            let wanted = wanted_ports(&next);
            let fresh = bind_all(self.opts.bind, &wanted, &bound, &next).await?;
            // The writer takes the new sink before the snapshot whose requests use it runs.
            next.access = self.access.install(sink).await?;
            relisten(&bound, &next);
            let next = Arc::new(next);
            self.snapshot.swap(Arc::clone(&next)).retire(&next);
            if let Some(f) = &self.fleet {
                f.set_base(base);
            }
            self.names.commit(&next.config, &self.region);
            checks::start(self, &next);
            // Ports no longer configured stop accepting; their open connections carry on.
            let gone: Vec<(bool, u16)> = bound
                .keys()
                .filter(|k| !wanted.contains(k))
                .copied()
                .collect();
            for key in gone {
                if let Some(b) = bound.remove(&key) {
                    b.stop.cancel();
                }
            }
            start_loops(self, fresh, &mut bound);
            Ok(())
        }
        .await;
        // Whatever happened, `/metrics` now shows the series of the running snapshot (and the
        // node's own): those of removed listeners, groups and endpoints end, and so do those a
        // rejected config registered before it failed.
        let running = self.snapshot.load();
        self.registry.retain(&running.series);
        running.publish(Instant::now());
        events::reloaded(self.registry.events(), new.as_deref(), &what, &result);
        match &result {
            Ok(()) => {
                if let (Some(f), Some(r)) = (&self.fleet, new) {
                    f.set_applied(r, fleet::Source::Etcd);
                }
                self.reloads_ok.increment(1);
                tracing::info!(config = %what, "config reloaded");
            }
            Err(e) => {
                self.reloads_err.increment(1);
                // One line, however many errors: each is FILE:LINE:COL: message.
                tracing::error!(
                    config = %what,
                    "reload rejected, the running config stays: {}",
                    e.to_string().lines().collect::<Vec<_>>().join("; ")
                );
            }
        }
        result
    }

    /// Builds a snapshot of `config` with the names' addresses now, carrying the running one's
    /// state; off the runtime, since certificates are read.
    async fn build(self: &Arc<Self>, config: Arc<Config>) -> Result<Snapshot> {
        let inner = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let old = inner.snapshot.load_full();
            Snapshot::build(
                config,
                &inner.region,
                Some(&old),
                &inner.registry,
                &inner.names.table(),
                Instant::now(),
            )
        })
        .await
        .map_err(interrupted("building the snapshot"))?
        .map_err(Error::Snapshot)
    }

    /// A name's addresses changed: the running config is built again with them (the same
    /// ports, so nothing is bound), connections carry on, and addresses that stay keep their
    /// state.
    async fn refresh(self: &Arc<Self>) {
        let _bound = self.bound.lock().await;
        if self.stop.is_cancelled() {
            return;
        }
        let config = Arc::clone(&self.snapshot.load().config);
        if let Err(e) = self.rebuild(config).await {
            tracing::error!("dns: the new addresses could not be put in service: {e}");
        }
    }

    /// Builds `config` (the running one, changed in what needs no port bound: new addresses,
    /// the fleet's drains, [`fleet`]'s `redrain`) and swaps it in, with the running snapshot's
    /// access log; the caller holds the reload lock.
    async fn rebuild(self: &Arc<Self>, config: Arc<Config>) -> Result<()> {
        let mut next = self.build(config).await?;
        // The same access log writer and sink as the running snapshot.
        next.access = self.snapshot.load().access.clone();
        let next = Arc::new(next);
        self.snapshot.swap(Arc::clone(&next)).retire(&next);
        checks::start(self, &next);
        self.registry.retain(&next.series);
        next.publish(Instant::now());
        Ok(())
    }
}

/// [`Error::Interrupted`] while `doing`, for `map_err`.
fn interrupted(doing: &'static str) -> impl FnOnce(tokio::task::JoinError) -> Error {
    move |error| Error::Interrupted { doing, error }
}

/// (udp, port) of every listener in the snapshot.
fn wanted_ports(snap: &Snapshot) -> Vec<(bool, u16)> {
    snap.listeners
        .iter()
        .map(|l| (l.cfg.protocol == Protocol::Udp, l.cfg.port))
        .collect()
}

/// A socket bound for a port that had none.
enum Fresh {
    Tcp(u16, TcpListener),
    Udp(u16, l4::udp_socket::Listen),
}

/// Binds every wanted port not bound yet; all or nothing. A failure names the listener.
async fn bind_all(
    ip: IpAddr,
    wanted: &[(bool, u16)],
    bound: &BTreeMap<(bool, u16), Bound>,
    snap: &Snapshot,
) -> Result<Vec<Fresh>> {
    let mut fresh = Vec::new();
    for &(udp, port) in wanted {
        if bound.contains_key(&(udp, port)) {
            continue;
        }
        let addr = SocketAddr::new(ip, port);
        let listener = snap.listener_on(port, udp);
        let name = listener.map_or("", |l| l.cfg.name.as_str());
        if udp {
            let s = UdpSocket::bind(addr)
                .await
                .and_then(l4::udp_socket::Listen::new)
                .map_err(|error| bind_error(name, "udp", addr, error))?;
            fresh.push(Fresh::Udp(port, s));
        } else {
            let backlog = listener.map_or(Listener::DEFAULT_BACKLOG, |l| l.cfg.backlog);
            let s =
                listen_tcp(addr, backlog).map_err(|error| bind_error(name, "tcp", addr, error))?;
            fresh.push(Fresh::Tcp(port, s));
        }
    }
    Ok(fresh)
}

/// [`Error::Bind`] for listener `name`.
fn bind_error(
    name: &str,
    protocol: &'static str,
    addr: SocketAddr,
    error: std::io::Error,
) -> Error {
    Error::Bind {
        name: name.to_owned(),
        protocol,
        addr,
        error,
    }
}

/// A TCP socket listening on `addr` with `backlog` (std's listeners ask for 128).
fn listen_tcp(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As std's TcpListener::bind: a restarted node binds while old connections linger.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// Sets each kept TCP port's `backlog` to the new snapshot's (listen(2) again on a listening
/// socket changes only its queue length).
fn relisten(bound: &BTreeMap<(bool, u16), Bound>, snap: &Snapshot) {
    for (&(udp, port), b) in bound {
        if let (false, Some(fd), Some(l)) = (udp, &b.listening, snap.listener_on(port, false)) {
            let backlog = i32::try_from(l.cfg.backlog).unwrap_or(i32::MAX);
            if let Err(e) = rustix::net::listen(fd, backlog) {
                tracing::warn!(listener = %l.cfg.name, error = %e, "setting backlog failed; the old one stays");
            }
        }
    }
}

fn start_loops(inner: &Arc<Inner>, fresh: Vec<Fresh>, bound: &mut BTreeMap<(bool, u16), Bound>) {
    for f in fresh {
        let stop = inner.stop.child_token();
        match f {
            Fresh::Tcp(port, socket) => {
                let addr = socket.local_addr().expect("bound socket has an address");
                use std::os::fd::AsFd;
                bound.insert(
                    (false, port),
                    Bound {
                        addr,
                        stop: stop.clone(),
                        listening: socket.as_fd().try_clone_to_owned().ok(),
                    },
                );
                tokio::spawn(accept::accept_loop(inner.clone(), socket, port, stop));
            }
            Fresh::Udp(port, socket) => {
                let addr = socket.local_addr().expect("bound socket has an address");
                bound.insert(
                    (true, port),
                    Bound {
                        addr,
                        stop: stop.clone(),
                        listening: None,
                    },
                );
                tokio::spawn(l4::udp::udp_loop(
                    inner.clone(),
                    Arc::new(socket),
                    port,
                    stop,
                ));
            }
        }
    }
}

/// Rebuilds the snapshot each time a name's addresses change, until the drain ends.
async fn follow_names(inner: Arc<Inner>) {
    loop {
        tokio::select! {
            () = inner.drained.cancelled() => break,
            () = inner.names.changed.notified() => inner.refresh().await,
        }
    }
    inner.names.stop();
}

/// Re-reads group health and measured RTTs every 250 ms, closes expired idle endpoint connections every second
/// and keeps the metrics exporter tidy.
async fn planner(inner: Arc<Inner>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n = 0_u64;
    loop {
        tokio::select! {
            () = inner.drained.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = Instant::now();
        for l in &inner.snapshot.load().listeners {
            l.rerank(now);
            l.replan(now);
        }
        n += 1;
        if n.is_multiple_of(4) {
            for l in &inner.snapshot.load().listeners {
                for g in &l.groups {
                    if let Some(up) = g.upstream.as_deref() {
                        up.sweep();
                    }
                }
            }
        }
        // Every tick: the exporter buffers each histogram sample until upkeep folds them into
        // buckets, on this thread; at 60k requests/s, every 5 s (as before) that was a 1.7 ms
        // stall of every connection, every 250 ms it is about 85 µs.
        inner.registry.upkeep();
    }
}
