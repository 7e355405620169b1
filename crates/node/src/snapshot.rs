//! The routing snapshot: the pure routing plan ([`gtd_core::split::plan`]) with this node's I/O
//! handles attached — balancer state, metric handles, and for HTTP listeners the TLS acceptor,
//! sticky cookies and each group's pooled client, each group's check. Read lock-free by every
//! decision; writers (reload, the planner, the admin API) build new values and swap them in.
//!
//! The snapshot lies beneath the data planes (`http/`, `l4/`, `checks/`, `admin/`) and above
//! the state they keep per listener and group, which it holds by type: an HTTP listener's
//! [`HttpState`], a group's [`Upstream`] and check [`Spec`], the access log's [`Handle`]. Those
//! types' files import nothing of the snapshot (the data planes that read them do), so the
//! compiler checks what each plane reads, with no downcast on the request path.
//!
//! Two levels of swapping:
//! - [`Snapshot`] (whole config) is replaced on reload; balancers are rebuilt with
//!   `GroupBalancer::rebuild` so unchanged endpoints keep their counters and health;
//! - each listener's [`ListenerPlan`] is replaced by the planner when a fact changes (an
//!   endpoint disabled, marked failed, recovered), so the rotation restarts from the new shares
//!   and the next decision sees them.
//!
//! Certificates are read here, so a bad one fails the start or reload that wanted it.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwap;
use metrics::{Counter, Gauge, Histogram};

use gtd_core::balance::GroupBalancer;
use gtd_core::config::{Config, Listener, PriorityBy};
use gtd_core::geoip::Place;
use gtd_core::health::rtt::group_rtt;
use gtd_core::split::{self, GroupFacts, ListenerPlan, Mode, Ranker, Ranking};
use gtd_core::sync::lock;

use super::access::Handle;
use super::checks::probe::{Spec, SpecError};
use super::descriptors::{self, Share, Shared};
use super::dns;
use super::events::EventLog;
use super::http::HttpState;
use super::http::upstream::{Upstream, UpstreamError};
use super::location::{ByLocation, ClientSeries};
use super::telemetry::{self as m, Registered, Registry, code_classes};
use super::timers::Pace;
use super::watch::{CheckResult, Watch};

/// Why a config could not be built into a snapshot (the start fails, a reload keeps the running
/// one): the listener, the group when it is one's, then the cause, whose message names the file.
#[derive(Debug, thiserror::Error)]
#[error("listener {listener:?}{}: {cause}", group.as_ref().map(|g| format!(" group {g:?}")).unwrap_or_default())]
pub struct BuildError {
    listener: String,
    group: Option<String>,
    /// Boxed: a snapshot's results stay small on their way up.
    cause: Box<BuildCause>,
}

/// What [`BuildError`] says went wrong.
#[derive(Debug, thiserror::Error)]
enum BuildCause {
    /// An HTTPS listener's certificates.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// A group's client towards its endpoints.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// A group's health check.
    #[error(transparent)]
    Check(#[from] SpecError),
}

impl BuildError {
    /// `cause` in listener `l` (in `group`, when one's).
    fn new(l: &Listener, group: Option<&str>, cause: impl Into<BuildCause>) -> BuildError {
        BuildError {
            listener: l.name.clone(),
            group: group.map(str::to_owned),
            cause: Box::new(cause.into()),
        }
    }
}

/// An endpoint's or group's `state` before the planner first published it (see
/// [`crate::outcomes`]): the first state published over it is set without an event.
pub(crate) const UNKNOWN: u8 = u8::MAX;

/// The whole routing state of a node at one config version.
#[derive(Debug)]
pub struct Snapshot {
    /// The config it was built from.
    pub config: Arc<Config>,
    /// Listeners this node serves (those listing its region), config order.
    pub listeners: Vec<Arc<ListenerState>>,
    /// Most flows each UDP listener keeps: its `udp_max_flows`, but at most its equal share of
    /// three quarters of the open files limit (each flow holds a socket), so that UDP flows
    /// never starve TCP connections, HTTP and the admin API of descriptors.
    pub udp_flow_share: usize,
    /// The metric series it registered: once it runs, the node's registry keeps these (and the
    /// node's own) and ends the others, so removed groups and endpoints leave `/metrics`.
    pub series: Registered,
    /// Where HTTP requests send their access log lines; `None` when `[log] access` is off.
    /// Set once the node's writer has the config's sink (the HTTP wing's access log).
    pub(crate) access: Option<Handle>,
    /// The shared part of the open files (carried from the snapshot before) and its size
    /// for this config, set when it goes into service.
    fds: (Arc<Shared>, isize),
}

impl Snapshot {
    /// The listener on `port` of this transport (`udp` or not).
    pub fn listener_on(&self, port: u16, udp: bool) -> Option<&Arc<ListenerState>> {
        self.listeners.iter().find(|l| {
            l.cfg.port == port && (l.cfg.protocol == gtd_core::config::Protocol::Udp) == udp
        })
    }

    /// The listener named `name`.
    pub fn listener(&self, name: &str) -> Option<&Arc<ListenerState>> {
        self.listeners.iter().find(|l| l.cfg.name == name)
    }

    /// This snapshot was replaced by `next`: the idle endpoint connections of its HTTP groups
    /// close, and those still carrying a request close when it ends, except in the pools
    /// `next` carried over (`Upstream::attach`). New requests take the running snapshot's
    /// pools; this one's lives on only while a connection accepted under it is open.
    pub(crate) fn retire(&self, next: &Snapshot) {
        let kept: Vec<&Upstream> = next.upstreams().collect();
        for up in self.upstreams() {
            if !kept.iter().any(|k| k.shares_pools(up)) {
                up.retire();
            }
        }
    }

    /// The HTTP groups' upstreams.
    fn upstreams(&self) -> impl Iterator<Item = &Upstream> {
        self.listeners
            .iter()
            .flat_map(|l| &l.groups)
            .filter_map(|g| g.upstream.as_deref())
    }
}

/// One listener's runtime state.
#[derive(Debug)]
pub struct ListenerState {
    /// Its config (shared with the access log lines of its requests, which name it).
    pub cfg: Arc<Listener>,
    /// Groups, config order.
    pub groups: Vec<GroupState>,
    /// The current plan (replaced when facts change).
    pub planned: ArcSwap<ListenerPlan>,
    /// The live ranking, fed measured RTTs by the planner.
    ranker: Mutex<Ranker>,
    /// The ranking now (order and each group's RTT): what the next plan is built on and what
    /// `/status` and the RTT gauges show.
    pub ranked: ArcSwap<Ranking>,
    /// Metric handles.
    pub metrics: ListenerMetrics,
    /// Open client connections (shared with the listener's previous versions across reloads,
    /// so `max_connections` counts connections accepted under an older config too).
    pub active: Arc<AtomicUsize>,
    /// HTTP/HTTPS listeners: rules, sticky table, TLS (the HTTP wing's state).
    pub http: Option<Box<HttpState>>,
    /// The `[geoip]` database clients are looked up in (`None` without `[geoip]`).
    pub geoip: Option<Arc<gtd_core::geoip::Database>>,
    /// `priority_by = "client-location"`: the plans by the client's order of groups.
    pub by_location: Option<ByLocation>,
    /// Its part of the node's open files (see [`crate::descriptors`]), and that part's
    /// size under this config (set when the snapshot goes into service).
    pub(crate) fds: Arc<Share>,
    fds_own: isize,
    /// The node's event timeline: failovers, rank changes, marks and ejections go there.
    pub(crate) events: Arc<EventLog>,
    /// A held-back reorder is on the timeline (once per episode).
    held_told: AtomicBool,
}

/// One group's runtime state.
#[derive(Debug)]
pub struct GroupState {
    /// Group name.
    pub name: String,
    /// Endpoint choice and per-endpoint state (shared by all threads).
    pub balancer: Arc<GroupBalancer>,
    /// Metric handles per endpoint (config order).
    pub endpoints: Vec<EndpointMetrics>,
    /// Connect time histogram.
    pub connect_seconds: Histogram,
    /// HTTP listeners: the pooled client towards the group's endpoints (the HTTP wing's).
    pub upstream: Option<Box<Upstream>>,
    /// Each endpoint's check state (config order).
    pub(crate) watches: Vec<Arc<Watch>>,
    /// The group's check (or light probe); `None` for a UDP group without checks.
    pub(crate) probe: Option<Arc<Spec>>,
    share: Gauge,
    healthy: Gauge,
    drained: Gauge,
    rtt: Gauge,
    /// Its state as last published ([`crate::outcomes::GroupHealth`]), for the timeline.
    pub(crate) state: AtomicU8,
}

/// Every mode a listener can be in, in `gtd_listener_mode`'s order.
const MODES: [Mode; 4] = [Mode::Cascade, Mode::Failover, Mode::FailOpen, Mode::NoRoute];

/// Per-listener metric handles.
#[derive(Debug)]
pub struct ListenerMetrics {
    /// Open client connections.
    pub connections_active: Gauge,
    /// Connections refused at `max_connections`.
    pub refused_full: Counter,
    /// Connections refused because the listener used its part of the open files.
    pub refused_files: Counter,
    /// Paces the warning about those refusals (at most one every 10 s).
    pub(crate) refused_warning: Pace,
    /// Decisions with no route.
    pub no_route: Counter,
    /// Bytes client → endpoint.
    pub bytes_up: Counter,
    /// Bytes endpoint → client.
    pub bytes_down: Counter,
    /// Attempts after a failed one.
    pub retries: Counter,
    /// UDP flows in the table.
    pub udp_flows: Gauge,
    /// UDP flows evicted when full.
    pub udp_evicted: Counter,
    /// UDP flows opened while the node drained.
    pub udp_draining: Counter,
    /// Datagrams the kernel dropped on the listener's socket (its count, set as reported).
    pub udp_kernel_drops: Counter,
    /// `gtd_listener_mode`, in the order of [`MODES`].
    pub mode: [Gauge; 4],
    /// Entries into failover.
    pub failovers: Counter,
    /// Priority orders adopted from measured round trips.
    pub rank_changes: Counter,
    /// Seconds the order the RTTs call for has differed from the order in use.
    pub rank_pending: Gauge,
    /// Clients by continent and country (`[geoip]` only).
    pub clients: Option<ClientSeries>,
}

/// Per-endpoint metric handles.
#[derive(Debug)]
pub struct EndpointMetrics {
    /// Connections/flows handed to it.
    pub connections: Counter,
    /// Failed attempts.
    pub failures: Counter,
    /// Outlier ejections (no-op handle on TCP/UDP listeners).
    pub ejections: Counter,
    /// Passive marks (failures that took it out of rotation).
    pub marks: Counter,
    /// May serve but for a drain (gauge kept by the planner).
    pub healthy: Gauge,
    /// Drained (gauge kept by the planner).
    pub drained: Gauge,
    /// The active checks' verdict (no-op handle for a group without checks).
    pub checks_healthy: Gauge,
    /// Its state as last published ([`crate::outcomes::Out`]), for the timeline.
    pub(crate) state: AtomicU8,
    /// HTTP responses by status class 1xx..5xx (no-op handles on TCP/UDP listeners).
    pub requests: [Counter; 5],
    /// Active checks by result, in the order of `CheckResult::ALL` (no-op handles for a
    /// group without checks).
    pub(crate) checks: [Counter; CheckResult::ALL.len()],
}

impl Snapshot {
    /// Builds the snapshot for a node in `region`. With `previous`, groups and endpoints that
    /// still exist keep their balancer state (counters, failures, health, admin toggles).
    /// Fails when a certificate or key of an HTTPS listener or a group's TLS cannot be used; the
    /// message names the listener and the file.
    pub(crate) fn build(
        config: Arc<Config>,
        region: &str,
        previous: Option<&Snapshot>,
        registry: &Registry,
        names: &dns::Table,
        now: Instant,
    ) -> Result<Snapshot, BuildError> {
        let registry = &registry.scope();
        let serving: Vec<&Listener> = config
            .listeners
            .iter()
            .filter(|l| l.regions.iter().any(|r| r == region))
            .collect();
        let is_udp = |l: &Listener| l.protocol == gtd_core::config::Protocol::Udp;
        let open_files = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        let udp_flow_share = open_files.map_or(usize::MAX, |n| {
            usize::try_from(n / 4 * 3).unwrap_or(usize::MAX)
                / serving.iter().filter(|l| is_udp(l)).count().max(1)
        });
        let tcp_borne = serving.iter().filter(|l| !is_udp(l)).count();
        let (own, shared) =
            descriptors::split(open_files, reserve(&serving, udp_flow_share), tcp_borne);
        let shared_size = shared;
        let shared = previous.map_or_else(|| Shared::new(shared_size), |p| p.fds.0.clone());
        let listeners = serving
            .iter()
            .map(|l| {
                let old = previous.and_then(|p| p.listener(&l.name));
                let own = if is_udp(l) { 0 } else { own };
                // A listener that stays keeps its part (its connections give back to it).
                let fds = match old {
                    Some(o) => (o.fds.clone(), own),
                    None => (Share::new(own, shared.clone()), own),
                };
                let l = dns::expand(l, names);
                let at = (region, fds);
                let old = old.map(|o| o.as_ref());
                ListenerState::build(&l, old, registry, &config, at, now).map(Arc::new)
            })
            .collect::<Result<Vec<Arc<ListenerState>>, _>>()?;
        let udp: Vec<&ListenerState> = listeners
            .iter()
            .map(AsRef::as_ref)
            .filter(|l| is_udp(&l.cfg))
            .collect();
        for l in udp.iter().filter(|l| l.cfg.udp_max_flows > udp_flow_share) {
            let what = "the flow table holds fewer flows than udp_max_flows, evicting the least \
                        recently active; raise the hard limit (ulimit -Hn, LimitNOFILE=) for more";
            // A udp_max_flows the operator wrote that cannot be honoured is a warning; the
            // default one, capped on a machine with a modest limit, is only worth a line.
            if l.cfg.udp_max_flows == Listener::DEFAULT_UDP_MAX_FLOWS {
                tracing::info!(
                    listener = %l.cfg.name,
                    flows = udp_flow_share,
                    open_files = open_files.unwrap_or(0),
                    "UDP flows capped at 3/4 of the open files limit (split between UDP \
                     listeners): {what}"
                );
            } else {
                tracing::warn!(
                    listener = %l.cfg.name,
                    udp_max_flows = l.cfg.udp_max_flows,
                    flows = udp_flow_share,
                    open_files = open_files.unwrap_or(0),
                    "udp_max_flows is above this listener's share of the open files limit (3/4 \
                     of it, split between UDP listeners): {what}"
                );
            }
        }
        Ok(Snapshot {
            config,
            listeners,
            udp_flow_share,
            series: registry.registered(),
            access: None,
            fds: (shared, shared_size),
        })
    }

    /// Sets the group and endpoint gauges from this snapshot's plans: once it runs (a build
    /// does not, since the gauges of what stays are shared with the running snapshot, and a
    /// rejected reload must leave them alone).
    pub fn publish(&self, now: Instant) {
        self.fds.0.resize(self.fds.1);
        for l in &self.listeners {
            l.fds.resize(l.fds_own);
            l.publish(now);
        }
    }
}

/// The descriptors `listeners` need besides their connections (see
/// [`crate::descriptors`]): their listening sockets, a check or probe per endpoint, the
/// idle connections HTTP groups keep, and UDP flows (at most `udp_flow_share` a listener).
fn reserve(listeners: &[&Listener], udp_flow_share: usize) -> u64 {
    let mut n: usize = 0;
    for l in listeners {
        n = n.saturating_add(1);
        if l.protocol == gtd_core::config::Protocol::Udp {
            n = n.saturating_add(l.udp_max_flows.min(udp_flow_share));
        }
        for g in &l.groups {
            let keep = if l.protocol.is_http() {
                g.keepalive as usize
            } else {
                0
            };
            n = n.saturating_add(g.endpoints.len().saturating_mul(1 + keep));
        }
    }
    u64::try_from(n).unwrap_or(u64::MAX)
}

impl ListenerState {
    /// Connection refused: the listener used its part of the open files (and the shared part
    /// is gone). Counted, and warned about at most every 10 s.
    pub(crate) fn refused_files(&self) {
        static PACE: Pace = Pace::new();
        self.metrics.refused_files.increment(1);
        if PACE.due() {
            tracing::warn!(
                listener = %self.cfg.name,
                "this listener used its part of the open files limit: new connections and \
                 requests are refused (counted in gtd_connections_refused_total{{reason=\"open_files\"}}) \
                 while other listeners and the admin API keep theirs; raise the hard limit \
                 (ulimit -Hn, LimitNOFILE=); this warning at most every 10 s"
            );
        }
    }

    fn build(
        l: &Listener,
        old: Option<&ListenerState>,
        registry: &Registry,
        config: &Config,
        (region, (fds, fds_own)): (&str, (Arc<Share>, isize)),
        now: Instant,
    ) -> Result<ListenerState, BuildError> {
        let name = l.name.as_str();
        let http_listener = l.protocol.is_http();
        let udp = l.protocol == gtd_core::config::Protocol::Udp;
        let groups: Vec<GroupState> = l
            .groups
            .iter()
            .map(|g| GroupState::build(l, g, old, registry, config, region, now))
            .collect::<Result<_, BuildError>>()?;
        let http = if http_listener {
            let http = HttpState::build(l, registry).map_err(|e| BuildError::new(l, None, e))?;
            Some(Box::new(http))
        } else {
            None
        };
        let metrics = ListenerMetrics {
            connections_active: registry.gauge(&m::CONNECTIONS_ACTIVE, &[name]),
            refused_full: registry
                .counter(&m::CONNECTIONS_REFUSED_TOTAL, &[name, "max_connections"]),
            refused_files: registry.counter(&m::CONNECTIONS_REFUSED_TOTAL, &[name, "open_files"]),
            refused_warning: Pace::new(),
            no_route: registry.counter(&m::NO_ROUTE_TOTAL, &[name]),
            bytes_up: registry.counter(&m::BYTES_TOTAL, &[name, "upstream"]),
            bytes_down: registry.counter(&m::BYTES_TOTAL, &[name, "downstream"]),
            retries: registry.counter(&m::RETRIES_TOTAL, &[name]),
            // Only UDP listeners have flows: no always-zero series for the others.
            udp_flows: if udp {
                registry.gauge(&m::UDP_FLOWS_ACTIVE, &[name])
            } else {
                Gauge::noop()
            },
            udp_evicted: if udp {
                registry.counter(&m::UDP_FLOWS_EVICTED_TOTAL, &[name])
            } else {
                Counter::noop()
            },
            udp_draining: if udp {
                registry.counter(&m::UDP_FLOWS_DRAINING_TOTAL, &[name])
            } else {
                Counter::noop()
            },
            udp_kernel_drops: if udp {
                registry.counter(&m::UDP_DATAGRAMS_DROPPED_TOTAL, &[name, "socket_buffer"])
            } else {
                Counter::noop()
            },
            mode: MODES.map(|mode| registry.gauge(&m::LISTENER_MODE, &[name, mode.as_str()])),
            failovers: registry.counter(&m::FAILOVERS_TOTAL, &[name]),
            rank_changes: registry.counter(&m::RANK_CHANGES_TOTAL, &[name]),
            rank_pending: registry.gauge(&m::RANK_PENDING_SECONDS, &[name]),
            clients: config
                .geoip
                .as_ref()
                .map(|g| ClientSeries::register(registry, name, &g.countries, http_listener)),
        };
        let mut ranker = Ranker::new(l, &config.catalog, region);
        if let Some(o) = old {
            ranker = o.ranker().clone().carried(ranker);
        }
        let ranking = ranker.ranking().clone();
        let facts = facts(l, &groups, now);
        let by_location = (l.priority_by == PriorityBy::ClientLocation && config.geoip.is_some())
            .then(|| ByLocation::new(l, &config.catalog, ranking.clone(), facts.clone()));
        // A reload keeps the failback ramps of the groups it keeps.
        let recovered = old.map_or_else(
            || vec![None; l.groups.len()],
            |o| {
                let was = o.planned.load();
                l.groups
                    .iter()
                    .zip(&facts)
                    .map(|(g, f)| {
                        let oi = o.cfg.groups.iter().position(|x| x.name == g.name)?;
                        let at = was.recovered.get(oi).copied().flatten()?;
                        (f.healthy && now < at + l.failback_ramp).then_some(at)
                    })
                    .collect()
            },
        );
        let planned = ListenerPlan::build_ramped(l, ranking.clone(), facts, l.affinity, recovered);
        // A rebuild that leaves the split as it was goes on with its rotation: otherwise each
        // reload or DNS change would start it again at the largest share.
        if let Some(o) = old {
            planned.continue_from(&o.planned.load());
        }
        let active = old.map_or_else(|| Arc::new(AtomicUsize::new(0)), |o| o.active.clone());
        let rt = ListenerState {
            cfg: Arc::new(l.clone()),
            groups,
            planned: ArcSwap::from_pointee(planned),
            ranker: Mutex::new(ranker),
            ranked: ArcSwap::from_pointee(ranking),
            metrics,
            active,
            http,
            geoip: config.geoip.as_ref().map(|g| Arc::clone(&g.db)),
            by_location,
            fds,
            fds_own,
            events: Arc::clone(registry.events()),
            held_told: AtomicBool::new(old.is_some_and(|o| o.held_told.load(Ordering::Relaxed))),
        };
        Ok(rt)
    }

    /// Re-reads the facts (health of every group); when they changed, installs a new plan.
    /// Returns true when it did. Cheap when nothing changed; called by the planner tick, after
    /// admin toggles and after passive failures.
    pub fn replan(&self, now: Instant) -> bool {
        let current = self.planned.load();
        let facts = facts(&self.cfg, &self.groups, now);
        let ranked = self.ranked.load();
        // A failback ramp that is over leaves the plan: the next is the plain one.
        let ramping = current.ramp_ends();
        let ramp_over = ramping.is_some_and(|end| now >= end);
        if facts == current.facts && ranked.order == current.ranking.order && !ramp_over {
            if ramping.is_some() {
                // The share gauges follow the ramp.
                self.publish_shares(&current, now);
            }
            self.publish_endpoints(now);
            return false;
        }
        let was = current.plan.mode;
        if let Some(b) = &self.by_location {
            b.replan(&self.cfg, &ranked, &facts);
        }
        // Groups that turned healthy take their share back over `failback_ramp`.
        let recovered = split::failback::carry(
            &current.facts,
            &current.recovered,
            &facts,
            self.cfg.failback_ramp,
            now,
        );
        let next = ListenerPlan::build_ramped(
            &self.cfg,
            (**ranked).clone(),
            facts,
            self.cfg.affinity,
            recovered,
        );
        next.continue_from(&current);
        self.ramps_started(&current, &next);
        if next.plan.mode == Mode::Failover && was != Mode::Failover {
            self.metrics.failovers.increment(1);
        }
        if next.plan.mode != was {
            self.mode_changed(&current, &next);
        }
        tracing::info!(
            listener = %self.cfg.name,
            mode = next.plan.mode.as_str(),
            shares = ?self.groups.iter().zip(&next.plan.shares).map(|(g, s)| (g.name.as_str(), s.total)).collect::<Vec<_>>(),
            "split changed"
        );
        self.planned.store(Arc::new(next));
        self.publish(now);
        true
    }

    fn ranker(&self) -> std::sync::MutexGuard<'_, Ranker> {
        lock(&self.ranker)
    }

    /// Why group `group` (config index) has its rank (`/status`).
    pub fn why_ranked(&self, group: usize, now: Instant) -> split::ranker::GroupRank {
        self.ranker().why(group, now)
    }

    /// Feeds the ranker each group's measured RTT (its best usable endpoint's average) and
    /// publishes the ranking; true when the order changed (the planner then re-plans). The
    /// planner's tick calls it, never a decision.
    pub fn rerank(&self, now: Instant) -> bool {
        let mut samples = vec![0; self.groups.len()];
        let measured: Vec<Option<f64>> = self
            .groups
            .iter()
            .zip(&mut samples)
            .map(|(g, samples)| {
                group_rtt(g.balancer.endpoints().iter().zip(&g.watches).map(|(e, w)| {
                    let (rtt, n) = w.rtt();
                    *samples += n;
                    (e.is_usable(now), rtt)
                }))
            })
            .collect();
        let mut ranker = self.ranker();
        let moved = ranker.observe(&measured, &samples, now);
        let ranking = ranker.ranking().clone();
        let (differs, held) = ranker.held(now);
        let held = held.map(<[usize]>::to_vec);
        let dwell = self.cfg.rank_dwell;
        drop(ranker);
        self.metrics.rank_pending.set(differs);
        match held {
            Some(target) if !self.held_told.swap(true, Ordering::Relaxed) => {
                self.held(&ranking.order, &target, &ranking, differs, dwell);
            }
            Some(_) => {}
            None => self.held_told.store(false, Ordering::Relaxed),
        }
        if moved {
            self.metrics.rank_changes.increment(1);
            self.reranked(&self.ranked.load().order, &ranking, &samples);
            tracing::info!(
                listener = %self.cfg.name,
                order = ?ranking.order.iter().map(|&i| (self.groups[i].name.as_str(), ranking.rtt_ms[i])).collect::<Vec<_>>(),
                "priority changed: measured round trips reordered the groups"
            );
        }
        for (g, ms) in self.groups.iter().zip(&ranking.rtt_ms) {
            g.rtt.set(ms / 1000.0);
        }
        self.ranked.store(Arc::new(ranking));
        moved
    }

    /// Updates the group and endpoint gauges from the current plan.
    fn publish(&self, now: Instant) {
        let p = self.planned.load();
        let ranked = self.ranked.load();
        for (gauge, mode) in self.metrics.mode.iter().zip(MODES) {
            gauge.set(if p.plan.mode == mode { 1.0 } else { 0.0 });
        }
        self.publish_shares(&p, now);
        for (i, g) in self.groups.iter().enumerate() {
            g.healthy.set(if p.facts[i].healthy { 1.0 } else { 0.0 });
            g.rtt.set(ranked.rtt_ms[i] / 1000.0);
        }
        self.publish_endpoints(now);
    }

    /// Sets each group's share gauge to its share at `now` (a recovering group's moves).
    fn publish_shares(&self, p: &ListenerPlan, now: Instant) {
        for (g, s) in self.groups.iter().zip(p.plan.shares_at(now)) {
            g.share.set(s.total);
        }
    }

    /// Puts each group that started taking its share back on the timeline.
    fn ramps_started(&self, was: &ListenerPlan, next: &ListenerPlan) {
        for &(gi, _) in next.plan.recovering() {
            if was.recovered.get(gi).is_some_and(Option::is_some) {
                continue;
            }
            let name = self.groups[gi].name.as_str();
            let ramp = self.cfg.failback_ramp.as_secs_f64();
            let full = next.plan.shares[gi].total;
            tracing::info!(
                listener = %self.cfg.name,
                group = name,
                ramp_s = ramp,
                share = full,
                "failback ramp: the group is healthy again and takes its share back linearly"
            );
            self.events.record(
                crate::events::Kind::Failback,
                crate::events::Place {
                    listener: Some(&self.cfg.name),
                    group: Some(name),
                    endpoint: None,
                },
                format!(
                    "{name} healthy again: takes its share back linearly over failback_ramp \
                     {ramp} s, from 0 % now to {} % at the end",
                    (full * 100.0).round() / 100.0
                ),
            );
        }
    }

    /// Sets the endpoint and group state gauges, and puts each change of an endpoint's or a
    /// group's state on the timeline, both ways, with its cause.
    fn publish_endpoints(&self, now: Instant) {
        let p = self.planned.load();
        let one = |b: bool| if b { 1.0 } else { 0.0 };
        for (gi, g) in self.groups.iter().enumerate() {
            for (ei, (state, metrics)) in
                g.balancer.endpoints().iter().zip(&g.endpoints).enumerate()
            {
                metrics.healthy.set(one(state.is_serving(now)));
                metrics.drained.set(one(state.is_draining()));
                metrics.checks_healthy.set(one(state.is_active_healthy()));
                self.endpoint_state(gi, ei, now);
            }
            let healthy = p.facts.get(gi).is_some_and(|f| f.healthy);
            let drained = !healthy && self.drained_only(gi, now);
            g.drained.set(one(drained));
            self.group_state(gi, healthy, drained, now);
        }
    }

    /// Group `gi` is unhealthy only because of drains: counting its drained endpoints that
    /// are fine, it has `min_healthy`.
    pub(crate) fn drained_only(&self, gi: usize, now: Instant) -> bool {
        let endpoints = self.groups[gi]
            .balancer
            .endpoints()
            .iter()
            .map(AsRef::as_ref);
        gtd_core::balance::drained_only(endpoints, self.cfg.groups[gi].min_healthy, now)
    }

    /// Where the `[geoip]` database puts `client`: looked up once per connection or flow
    /// (`None` without `[geoip]`, or when the address is not in the database).
    pub fn locate(&self, client: IpAddr) -> Option<Place> {
        self.geoip.as_ref()?.lookup(client)
    }

    /// Counts a client connection or flow by its place (nothing without `[geoip]`).
    pub fn count_client(&self, place: Option<&Place>) {
        if let Some(c) = &self.metrics.clients {
            c.connection(place);
        }
    }

    /// Counts an HTTP request by its connection's place (nothing without `[geoip]`).
    pub fn count_request(&self, place: Option<&Place>) {
        if let Some(c) = &self.metrics.clients {
            c.request(place);
        }
    }

    /// Under `priority_by = "client-location"`, the plan for a client at `place`: its groups
    /// by distance from the place's coordinates. `None` (the node's own plan decides) for other
    /// listeners, and for a client the database has no coordinates for.
    pub fn client_plan(&self, place: Option<&Place>) -> Option<Arc<ListenerPlan>> {
        let at = place?.location?;
        Some(self.by_location.as_ref()?.plan(&self.cfg, at))
    }

    /// The client's group for a new connection/flow/request at `now` (config index), or `None`.
    pub fn choose(&self, client: IpAddr, now: Instant) -> Option<usize> {
        self.planned.load().plan.choose_at(client, now)
    }
}

/// The config of group `name` in the listener's previous version.
fn old_listener_group<'a>(
    old: Option<&'a Listener>,
    name: &str,
) -> Option<&'a gtd_core::config::Group> {
    old?.groups.iter().find(|g| g.name == name)
}

/// The facts of the listener's groups now: config ratios, health from the balancers.
fn facts(l: &Listener, groups: &[GroupState], now: Instant) -> Vec<GroupFacts> {
    split::plan::facts(
        l,
        |i| l.groups[i].ratio,
        groups.iter().map(|g| g.balancer.as_ref()),
        now,
    )
}

impl GroupState {
    /// Group `g` of listener `l` (`old`: the listener before a reload, whose groups that stay
    /// keep their balancer state, check state and timeline state): its balancer, its metric
    /// series, an HTTP group's upstream and the group's check.
    fn build(
        l: &Listener,
        g: &gtd_core::config::Group,
        old: Option<&ListenerState>,
        registry: &Registry,
        config: &Config,
        region: &str,
        now: Instant,
    ) -> Result<GroupState, BuildError> {
        let name = l.name.as_str();
        let old_cfg = old.map(|o| &*o.cfg);
        let http_listener = l.protocol.is_http();
        let udp = l.protocol == gtd_core::config::Protocol::Udp;
        let previous = old.and_then(|o| o.groups.iter().find(|x| x.name == g.name));
        let balancer = match previous {
            Some(p) if old.is_some_and(|o| o.cfg.protocol == l.protocol) => {
                GroupBalancer::rebuild(g, l.protocol, &p.balancer, now)
            }
            _ => GroupBalancer::new(g, l.protocol, now),
        };
        let gname = g.name.as_str();
        let checked = g.health_check.is_some();
        // What the timeline last said of an endpoint that stays.
        let was = |e: &gtd_core::config::Endpoint| {
            previous
                .and_then(|p| {
                    let i = p
                        .balancer
                        .endpoints()
                        .iter()
                        .position(|x| x.address() == &e.address)?;
                    Some(p.endpoints[i].state.load(Ordering::Relaxed))
                })
                .unwrap_or(UNKNOWN)
        };
        let endpoints: Vec<EndpointMetrics> = g
            .endpoints
            .iter()
            .map(|e| {
                EndpointMetrics::register(
                    registry,
                    [name, gname],
                    e,
                    checked,
                    http_listener,
                    was(e),
                )
            })
            .collect();
        let connect_seconds = registry.histogram(&m::CONNECT_SECONDS, &[name, gname]);
        let upstream = if http_listener {
            // The connections its clients open count into the endpoints' series.
            let opened = endpoints.iter().map(|e| e.connections.clone()).collect();
            let was = previous.and_then(|p| p.upstream.as_deref());
            let up = Upstream::attach(l, g, config, registry, &connect_seconds, opened, was)
                .map_err(|e| BuildError::new(l, Some(&g.name), e))?;
            Some(Box::new(up))
        } else {
            None
        };
        // Endpoints that stay keep their check state (docs/design.md §5).
        let watches = g
            .endpoints
            .iter()
            .map(|e| {
                let kept = previous.and_then(|p| {
                    let old = p
                        .balancer
                        .endpoints()
                        .iter()
                        .position(|x| x.address() == &e.address)?;
                    let was = old_listener_group(old_cfg, &p.name)?;
                    let w = Watch::carried(
                        &p.watches[old],
                        was.health_check.as_ref(),
                        g.health_check.as_ref(),
                    );
                    // Samples of another kind of round trip do not average in.
                    if old_cfg.is_some_and(|o| o.rtt_from != l.rtt_from) {
                        w.forget_rtt();
                    }
                    Some(w)
                });
                kept.unwrap_or_else(|| Arc::new(Watch::new(g.health_check.as_ref())))
            })
            .collect();
        let probe = Spec::of(name, udp, g, region, l.connect_timeout, l.rtt_from)
            .map_err(|e| BuildError::new(l, Some(&g.name), e))?
            .map(Arc::new);
        Ok(GroupState {
            name: g.name.clone(),
            balancer: Arc::new(balancer),
            endpoints,
            connect_seconds,
            upstream,
            watches,
            probe,
            share: registry.gauge(&m::GROUP_SHARE, &[name, gname]),
            healthy: registry.gauge(&m::GROUP_HEALTHY, &[name, gname]),
            drained: registry.gauge(&m::GROUP_DRAINED, &[name, gname]),
            rtt: registry.gauge(&m::GROUP_RTT_SECONDS, &[name, gname]),
            state: AtomicU8::new(previous.map_or(UNKNOWN, |p| p.state.load(Ordering::Relaxed))),
        })
    }
}

impl EndpointMetrics {
    /// Registers the series of endpoint `e` of group `labels` (listener, group): its check
    /// results when the group is `checked`, its HTTP answers on an `http` listener; `was` is
    /// what the timeline last said of it.
    fn register(
        registry: &Registry,
        [name, gname]: [&str; 2],
        e: &gtd_core::config::Endpoint,
        checked: bool,
        http_listener: bool,
        was: u8,
    ) -> EndpointMetrics {
        let id = e.address.id();
        let labels = [name, gname, &*id];
        let checks = std::array::from_fn(|i| {
            if checked {
                let [l, g, e] = labels;
                let result = CheckResult::ALL[i].as_str();
                registry.counter(&m::HEALTH_CHECKS_TOTAL, &[l, g, e, result])
            } else {
                Counter::noop()
            }
        });
        EndpointMetrics {
            checks,
            connections: registry.counter(&m::CONNECTIONS_TOTAL, &labels),
            failures: registry.counter(&m::CONNECT_FAILURES_TOTAL, &labels),
            ejections: if http_listener {
                registry.counter(&m::OUTLIER_EJECTIONS_TOTAL, &labels)
            } else {
                Counter::noop()
            },
            marks: registry.counter(&m::PASSIVE_MARKS_TOTAL, &labels),
            healthy: registry.gauge(&m::ENDPOINT_HEALTHY, &labels),
            drained: registry.gauge(&m::ENDPOINT_DRAINED, &labels),
            checks_healthy: if checked {
                registry.gauge(&m::ENDPOINT_CHECKS_HEALTHY, &labels)
            } else {
                Gauge::noop()
            },
            state: AtomicU8::new(was),
            requests: if http_listener {
                code_classes(registry, &labels)
            } else {
                std::array::from_fn(|_| Counter::noop())
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an operator reads of a snapshot that could not be built: the listener, the group
    /// when it is one's, then the cause as its own error says it.
    #[test]
    fn a_build_error_names_the_listener_and_group_then_the_cause() {
        let header = || UpstreamError::FeedbackHeader {
            header: "x load".to_owned(),
            error: http::HeaderName::from_bytes(b"x load").unwrap_err(),
        };
        let in_group = BuildError {
            listener: "web".to_owned(),
            group: Some("beijing".to_owned()),
            cause: Box::new(header().into()),
        };
        assert_eq!(
            in_group.to_string(),
            format!("listener \"web\" group \"beijing\": {}", header())
        );
        assert!(
            in_group
                .to_string()
                .starts_with("listener \"web\" group \"beijing\": feedback_header \"x load\": ")
        );
        let listener = BuildError {
            listener: "web".to_owned(),
            group: None,
            cause: Box::new(crate::tls::TlsError::NoCertificate.into()),
        };
        assert_eq!(
            listener.to_string(),
            "listener \"web\": https listener without certificates"
        );
    }
}
