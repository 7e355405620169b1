//! Every metric gtd exports, described once: name, kind, labels and meaning. The table of
//! docs/design.md's "Metrics" is checked against [`ALL`] by a test (`tests/readme.rs`), and
//! the names deploy/'s alerts and dashboard query against a running node
//! (`tests/deploy/prometheus.rs`), so none of them can drift apart.
//!
//! Each node owns its own registry (no global recorder), so several nodes can live in one
//! process (tests, `gtd demo`). Hot paths hold pre-registered handles: incrementing one is an
//! atomic add, with no lookup and no allocation.
//!
//! The registry is gtd's own (`metrics-util`'s sharded map, rendered here with the Prometheus
//! exporter's escaping) rather than `metrics-exporter-prometheus`'s recorder, because that one
//! cannot forget a series: after a reload removed a group, its gauges would be exported with
//! their last values forever. Each [`Snapshot`](super::snapshot::Snapshot) records the series
//! it registered; once a reload has swapped it in, [`Registry::retain`] ends every series of the
//! listeners, groups and endpoints that are gone — gauges, counters and histograms alike, as a
//! Prometheus client library's `DeleteLabelValues` would.

use std::collections::{HashMap, HashSet};
use std::fmt::{Display, Write as _};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use metrics::{Counter, Gauge, Histogram, Key, Label};
use metrics_exporter_prometheus::formatting::{
    sanitize_label_value, write_help_line, write_type_line,
};
use metrics_util::registry::{AtomicStorage, Registry as Series};
use metrics_util::storage::{AtomicBucket, Histogram as Buckets};

use gtd_core::sync::lock;

/// What kind of series a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic count.
    Counter,
    /// Value that goes up and down.
    Gauge,
    /// Distribution (seconds).
    Histogram,
}

/// One metric's definition.
#[derive(Debug, Clone, Copy)]
pub struct Def {
    /// Exported name.
    pub name: &'static str,
    /// Series kind.
    pub kind: Kind,
    /// Label names, in order.
    pub labels: &'static [&'static str],
    /// What it counts.
    pub help: &'static str,
}

/// Which gtd runs.
pub const BUILD_INFO: Def = Def {
    name: "gtd_build_info",
    kind: Kind::Gauge,
    labels: &["version", "commit"],
    help: "Always 1; the labels name the build: version (the crate's) and commit (the git commit it was built from, unknown when built without a git checkout, as from a source tarball)",
};
/// The fleet revision served.
pub const CONFIG_REVISION: Def = Def {
    name: "gtd_config_revision",
    kind: Kind::Gauge,
    labels: &[],
    help: "The fleet revision the node serves (gtd push's number), from etcd or from the revision cache; only on a node following a fleet (gtd run --etcd): a node serving a config file exports neither this nor gtd_etcd_connected",
};
/// Whether the node follows etcd.
pub const ETCD_CONNECTED: Def = Def {
    name: "gtd_etcd_connected",
    kind: Kind::Gauge,
    labels: &[],
    help: "1 while the node follows the fleet on etcd (its watch on the revision lives; its registry entry is kept apart and may lag), 0 while etcd is unreachable or refuses it (it keeps serving its revision); only with --etcd",
};
/// Whether the node is draining.
pub const DRAINING: Def = Def {
    name: "gtd_draining",
    kind: Kind::Gauge,
    labels: &[],
    help: "1 once the node began to drain (SIGTERM or SIGINT: listeners closed, /healthz 503, open connections finishing), else 0",
};
/// The step of the ramp this node drives.
pub const RAMP_STEP: Def = Def {
    name: "gtd_ramp_step",
    kind: Kind::Gauge,
    labels: &[],
    help: "The step of the ramp (gtd push --ramp) the fleet is on, 0 for its starting revision, on the node driving it (0 on the others); only with --etcd",
};
/// The state of the ramp this node drives.
pub const RAMP_STATE: Def = Def {
    name: "gtd_ramp_state",
    kind: Kind::Gauge,
    labels: &[],
    help: "The ramp this node drives: 0 none, 1 running, 2 paused, 3 going back, 4 completed, 5 reverted, 6 aborted, 7 held: a step without enough traffic to judge it (gtd ramp status says why); only with --etcd",
};
/// TCP connections and UDP flows handed to an endpoint.
pub const CONNECTIONS_TOTAL: Def = Def {
    name: "gtd_connections_total",
    kind: Kind::Counter,
    labels: &["listener", "group", "endpoint"],
    help: "Connections and UDP flows established to an endpoint (TCP: one per client connection; HTTP: each pooled connection gtd opens)",
};
/// Client connections open now.
pub const CONNECTIONS_ACTIVE: Def = Def {
    name: "gtd_connections_active",
    kind: Kind::Gauge,
    labels: &["listener"],
    help: "Client TCP connections open now",
};
/// Cleartext HTTP/1 client connections parked between requests.
pub const HTTP_CONNECTIONS_PARKED: Def = Def {
    name: "gtd_http_connections_parked",
    kind: Kind::Gauge,
    labels: &["listener"],
    help: "Cleartext HTTP/1 client connections resting between requests with only their socket held (parked)",
};
/// Client connections refused, by reason.
pub const CONNECTIONS_REFUSED_TOTAL: Def = Def {
    name: "gtd_connections_refused_total",
    kind: Kind::Counter,
    labels: &["listener", "reason"],
    help: "Client TCP connections refused before any decision (reason max_connections: the listener had max_connections open, HTTP clients got 503; reason open_files: the listener used its part of the open files limit)",
};
/// Payload bytes relayed.
pub const BYTES_TOTAL: Def = Def {
    name: "gtd_bytes_total",
    kind: Kind::Counter,
    labels: &["listener", "direction"],
    help: "Payload bytes relayed; direction is upstream (client to endpoint) or downstream",
};
/// Decisions that found no usable group or endpoint.
pub const NO_ROUTE_TOTAL: Def = Def {
    name: "gtd_no_route_total",
    kind: Kind::Counter,
    labels: &["listener"],
    help: "Connections closed, datagrams dropped or requests answered 503 because no group could take them",
};
/// Failed connection attempts to an endpoint (passive failures).
pub const CONNECT_FAILURES_TOTAL: Def = Def {
    name: "gtd_connect_failures_total",
    kind: Kind::Counter,
    labels: &["listener", "group", "endpoint"],
    help: "Failed connection attempts to an endpoint (TCP and HTTP), each counted as a passive failure",
};
/// Outlier ejections of an endpoint (HTTP).
pub const OUTLIER_EJECTIONS_TOTAL: Def = Def {
    name: "gtd_outlier_ejections_total",
    kind: Kind::Counter,
    labels: &["listener", "group", "endpoint"],
    help: "Times outlier detection ejected an HTTP endpoint (consecutive_5xx or consecutive_gateway_failures answers in a row); /status shows an ejection in progress",
};
/// Passive marks of an endpoint (every protocol).
pub const PASSIVE_MARKS_TOTAL: Def = Def {
    name: "gtd_passive_marks_total",
    kind: Kind::Counter,
    labels: &["listener", "group", "endpoint"],
    help: "Times passive failures took an endpoint out of rotation (max_fails failed attempts within fail_timeout, or the attempt after fail_timeout failed again; TCP, UDP and HTTP); /status shows a mark in progress",
};
/// Attempts after the first one.
pub const RETRIES_TOTAL: Def = Def {
    name: "gtd_retries_total",
    kind: Kind::Counter,
    labels: &["listener"],
    help: "Attempts made after a failed one (another endpoint or group; TCP connects, UDP flow set-ups and HTTP requests)",
};
/// Time to connect to an endpoint.
pub const CONNECT_SECONDS: Def = Def {
    name: "gtd_connect_seconds",
    kind: Kind::Histogram,
    labels: &["listener", "group"],
    help: "Time to establish a connection to an endpoint (HTTP: TLS handshake included)",
};
/// Client connections and flows by where the client is (`[geoip]`).
pub const CLIENT_CONNECTIONS_TOTAL: Def = Def {
    name: "gtd_client_connections_total",
    kind: Kind::Counter,
    labels: &["listener", "continent", "country"],
    help: "Client TCP connections, UDP flows and HTTP client connections by the client's place in the [geoip] database (only with [geoip]): continent AF, AN, AS, EU, NA, OC, SA or unknown; country one of [geoip] countries, else other; both unknown when the address is not in the database",
};
/// HTTP requests by where the client is (`[geoip]`).
pub const CLIENT_REQUESTS_TOTAL: Def = Def {
    name: "gtd_client_requests_total",
    kind: Kind::Counter,
    labels: &["listener", "continent", "country"],
    help: "HTTP requests by the client's place (only with [geoip]; labels as gtd_client_connections_total, the connection's place)",
};
/// UDP flows in the table now.
pub const UDP_FLOWS_ACTIVE: Def = Def {
    name: "gtd_udp_flows_active",
    kind: Kind::Gauge,
    labels: &["listener"],
    help: "UDP flows (client address to endpoint socket) in the flow table",
};
/// UDP flows evicted because the table was full or the node out of open files.
pub const UDP_FLOWS_EVICTED_TOTAL: Def = Def {
    name: "gtd_udp_flows_evicted_total",
    kind: Kind::Counter,
    labels: &["listener"],
    help: "UDP flows evicted (least recently active first) because the table was full (udp_max_flows, or the listener's share of the open files limit) or the node out of open files",
};
/// UDP flows opened while the node drained.
pub const UDP_FLOWS_DRAINING_TOTAL: Def = Def {
    name: "gtd_udp_flows_draining_total",
    kind: Kind::Counter,
    labels: &["listener"],
    help: "UDP flows opened for new clients while the node drained (after SIGTERM): served like any flow until they go idle or drain_timeout ends, since the listener's socket stays open for the flows there were and the kernel cannot refuse one client on it",
};
/// Datagrams dropped before gtd read them.
pub const UDP_DATAGRAMS_DROPPED_TOTAL: Def = Def {
    name: "gtd_udp_datagrams_dropped_total",
    kind: Kind::Counter,
    labels: &["listener", "reason"],
    help: "Datagrams dropped on a UDP listener's socket before gtd read them (reason socket_buffer: the kernel's receive buffer was full, as SO_RXQ_OVFL reports it)",
};
/// Group share on this node.
pub const GROUP_SHARE: Def = Def {
    name: "gtd_group_share",
    kind: Kind::Gauge,
    labels: &["listener", "group"],
    help: "The group's share of this node's traffic, percent (as sim prints it)",
};
/// Group health on this node.
pub const GROUP_HEALTHY: Def = Def {
    name: "gtd_group_healthy",
    kind: Kind::Gauge,
    labels: &["listener", "group"],
    help: "1 when the group has at least min_healthy usable endpoints",
};
/// Group RTT used for priority.
pub const GROUP_RTT_SECONDS: Def = Def {
    name: "gtd_group_rtt_seconds",
    kind: Kind::Gauge,
    labels: &["listener", "group"],
    help: "Round-trip time from this node used to rank the group: measured by its health checks or light probes (the average of its best usable endpoint), else the catalogue's (its `[rtt]` entry or the estimate)",
};
/// Groups taken below min_healthy by drains.
pub const GROUP_DRAINED: Def = Def {
    name: "gtd_group_drained",
    kind: Kind::Gauge,
    labels: &["listener", "group"],
    help: "1 when the group is not healthy only because endpoints of it are drained (gtd drain, drain = true, the admin API): counting them, it would have min_healthy; a planned drain, not a failure",
};
/// Endpoint health, drains aside.
pub const ENDPOINT_HEALTHY: Def = Def {
    name: "gtd_endpoint_healthy",
    kind: Kind::Gauge,
    labels: &["listener", "group", "endpoint"],
    help: "1 when the endpoint may serve but for a drain: enabled, not down, and its checks, passive marking and outlier detection allow it (a drained endpoint that is fine reads 1, with gtd_endpoint_drained 1)",
};
/// Endpoint drains.
pub const ENDPOINT_DRAINED: Def = Def {
    name: "gtd_endpoint_drained",
    kind: Kind::Gauge,
    labels: &["listener", "group", "endpoint"],
    help: "1 while the endpoint is drained (gtd drain, drain = true, or the admin API): no new traffic, what it has finishes; it takes traffic when gtd_endpoint_healthy is 1 and this is 0",
};
/// Endpoint active checks' verdict.
pub const ENDPOINT_CHECKS_HEALTHY: Def = Def {
    name: "gtd_endpoint_checks_healthy",
    kind: Kind::Gauge,
    labels: &["listener", "group", "endpoint"],
    help: "The verdict of the endpoint's active health checks, 1 healthy, 0 out (only endpoints of groups with health checks)",
};
/// Active health checks, by result.
pub const HEALTH_CHECKS_TOTAL: Def = Def {
    name: "gtd_health_checks_total",
    kind: Kind::Counter,
    labels: &["listener", "group", "endpoint", "result"],
    help: "Active health checks of an endpoint by result: passed, unexpected (answered, but not the expected status, header or body), refused (refused or reset), timeout, error (TLS, a malformed answer), skipped (not run: this node was out of open files, memory or local ports; no verdict)",
};
/// The listener's mode on this node.
pub const LISTENER_MODE: Def = Def {
    name: "gtd_listener_mode",
    kind: Kind::Gauge,
    labels: &["listener", "mode"],
    help: "1 for the listener's mode now, 0 for the three others (as sim and /status name them): cascade (its top group with ratio > 0 is healthy), failover (that group is unhealthy and others took over), fail-open (no group is healthy and fail_open routes as if all were), no-route",
};
/// Times a listener entered failover.
pub const FAILOVERS_TOTAL: Def = Def {
    name: "gtd_failovers_total",
    kind: Kind::Counter,
    labels: &["listener"],
    help: "Times the listener's top group became unhealthy and another group took over",
};
/// Priority orders a listener adopted.
pub const RANK_CHANGES_TOTAL: Def = Def {
    name: "gtd_rank_changes_total",
    kind: Kind::Counter,
    labels: &["listener"],
    help: "Times the listener adopted a new priority order of its groups from measured round trips (past the margin and rank_dwell); the split follows the new order",
};
/// How long a reorder has waited.
pub const RANK_PENDING_SECONDS: Def = Def {
    name: "gtd_rank_pending_seconds",
    kind: Kind::Gauge,
    labels: &["listener"],
    help: "Seconds the order the listener's measured round trips call for has differed from the order in use at every round (0 when they agree); above rank_dwell, the reorder is held back by groups within each other's margin that keep trading places",
};
/// HTTP requests answered, by who answered and the status class.
pub const REQUESTS_TOTAL: Def = Def {
    name: "gtd_requests_total",
    kind: Kind::Counter,
    labels: &["listener", "group", "endpoint", "code_class"],
    help: "HTTP responses by status class (1xx..5xx): an endpoint's answers (every attempt's, retried ones included) under its group and endpoint; gtd's own answers (404 no rule, 502 unreachable, 503 no route, 504 timeout) with group and endpoint empty",
};
/// Time to the response headers of an endpoint.
pub const UPSTREAM_RESPONSE_SECONDS: Def = Def {
    name: "gtd_upstream_response_seconds",
    kind: Kind::Histogram,
    labels: &["listener", "group"],
    help: "Time from sending an HTTP request to an endpoint to its response headers",
};
/// Requests that followed their sticky cookie.
pub const STICKY_HITS_TOTAL: Def = Def {
    name: "gtd_sticky_hits_total",
    kind: Kind::Counter,
    labels: &["listener"],
    help: "HTTP requests sent to the endpoint their sticky cookie names",
};
/// Config reloads.
pub const CONFIG_RELOADS_TOTAL: Def = Def {
    name: "gtd_config_reloads_total",
    kind: Kind::Counter,
    labels: &["result"],
    help: "Config reloads by result (ok or error; an error keeps the running config)",
};
/// DNS lookups of endpoint names.
pub const DNS_LOOKUPS_TOTAL: Def = Def {
    name: "gtd_dns_lookups_total",
    kind: Kind::Counter,
    labels: &["result"],
    help: "Lookups of endpoint host names by result (ok; nxdomain or no_address: the name has no address, its endpoints leave rotation; timeout or error: the last good addresses are kept)",
};
/// Access log lines lost.
pub const ACCESS_LOG_DROPPED_TOTAL: Def = Def {
    name: "gtd_access_log_dropped_total",
    kind: Kind::Counter,
    labels: &["reason"],
    help: "Access log lines lost (reason queue_full: the writer had 8192 lines waiting, so the request, connection or flow did not wait for it; write_error: writing them failed); exported once the access log is first on",
};
/// Every metric, for the exporter's descriptions and the README check.
pub const ALL: &[Def] = &[
    BUILD_INFO,
    CONFIG_REVISION,
    ETCD_CONNECTED,
    RAMP_STEP,
    RAMP_STATE,
    DRAINING,
    CONNECTIONS_TOTAL,
    CONNECTIONS_ACTIVE,
    HTTP_CONNECTIONS_PARKED,
    CONNECTIONS_REFUSED_TOTAL,
    BYTES_TOTAL,
    NO_ROUTE_TOTAL,
    CONNECT_FAILURES_TOTAL,
    OUTLIER_EJECTIONS_TOTAL,
    PASSIVE_MARKS_TOTAL,
    RETRIES_TOTAL,
    CONNECT_SECONDS,
    CLIENT_CONNECTIONS_TOTAL,
    CLIENT_REQUESTS_TOTAL,
    UDP_FLOWS_ACTIVE,
    UDP_FLOWS_EVICTED_TOTAL,
    UDP_FLOWS_DRAINING_TOTAL,
    UDP_DATAGRAMS_DROPPED_TOTAL,
    GROUP_SHARE,
    GROUP_HEALTHY,
    GROUP_RTT_SECONDS,
    GROUP_DRAINED,
    ENDPOINT_HEALTHY,
    ENDPOINT_DRAINED,
    ENDPOINT_CHECKS_HEALTHY,
    HEALTH_CHECKS_TOTAL,
    LISTENER_MODE,
    FAILOVERS_TOTAL,
    RANK_CHANGES_TOTAL,
    RANK_PENDING_SECONDS,
    REQUESTS_TOTAL,
    UPSTREAM_RESPONSE_SECONDS,
    STICKY_HITS_TOTAL,
    CONFIG_RELOADS_TOTAL,
    DNS_LOOKUPS_TOTAL,
    ACCESS_LOG_DROPPED_TOTAL,
];

/// Histogram bucket bounds, seconds: 0.5 ms to 10 s.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A node's registry: registers handles, renders the exposition and ends the series of what a
/// reload removed.
///
/// Clones share the series. Every handle also remembers the keys registered through it: the
/// node's own handle its node-wide series, a [`Registry::scope`] the series of one snapshot.
#[derive(Clone)]
pub struct Registry {
    shared: Arc<Shared>,
    registered: Arc<Mutex<HashSet<Key>>>,
}

struct Shared {
    series: Series<Key, AtomicStorage>,
    /// Histogram samples folded into buckets by [`Registry::upkeep`] (the hot path only pushes
    /// to the series' lock-free sample buffer).
    buckets: Mutex<HashMap<Key, Buckets>>,
    /// The node's event timeline (kept beside the series: every part that counts can record).
    events: Arc<super::events::EventLog>,
}

/// The keys of the series one snapshot registered (see [`Registry::retain`]).
#[derive(Debug, Default)]
pub struct Registered(HashSet<Key>);

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// A fresh, empty registry.
    pub fn new() -> Registry {
        Registry {
            shared: Arc::new(Shared {
                series: Series::atomic(),
                buckets: Mutex::new(HashMap::new()),
                events: Arc::default(),
            }),
            registered: Arc::default(),
        }
    }

    /// A handle on the same series that remembers only what is registered through it (a
    /// snapshot's build uses one; [`Registry::registered`] then lists its series).
    pub fn scope(&self) -> Registry {
        Registry {
            shared: self.shared.clone(),
            registered: Arc::default(),
        }
    }

    /// The node's event timeline (`GET /events`).
    pub fn events(&self) -> &Arc<super::events::EventLog> {
        &self.shared.events
    }

    /// The keys registered through this handle so far.
    pub fn registered(&self) -> Registered {
        Registered(lock(&self.registered).clone())
    }

    /// Ends every series registered neither through this handle (the node's own) nor in `live`
    /// (the running snapshot's): the series of listeners, groups and endpoints a reload removed
    /// leave the exposition. Handles still held for them (connections opened before the
    /// reload) keep working but are no longer exported; a later reload that brings the thing
    /// back starts its series again from zero.
    pub fn retain(&self, live: &Registered) {
        let own = lock(&self.registered);
        let keep = |key: &Key| own.contains(key) || live.0.contains(key);
        let series = &self.shared.series;
        series.retain_counters(|key, _| keep(key));
        series.retain_gauges(|key, _| keep(key));
        series.retain_histograms(|key, _| keep(key));
        lock(&self.shared.buckets).retain(|key, _| keep(key));
    }

    fn key(&self, def: &Def, values: &[&str]) -> Key {
        debug_assert_eq!(def.labels.len(), values.len(), "{}: label values", def.name);
        let key = series_key(def, values);
        lock(&self.registered).insert(key.clone());
        key
    }

    /// The counter `def` with these label values (same order as `def.labels`).
    pub fn counter(&self, def: &Def, values: &[&str]) -> Counter {
        debug_assert_eq!(def.kind, Kind::Counter);
        self.shared
            .series
            .get_or_create_counter(&self.key(def, values), |c| Counter::from_arc(c.clone()))
    }

    /// The value of counter `def` with these label values, read without registering it: 0
    /// when no such series exists (never registered, or ended by a reload). For `/status`,
    /// which reports the same counts the exposition does.
    pub fn counter_value(&self, def: &Def, values: &[&str]) -> u64 {
        debug_assert_eq!(def.kind, Kind::Counter);
        self.shared
            .series
            .get_counter(&series_key(def, values))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// The gauge `def` with these label values.
    pub fn gauge(&self, def: &Def, values: &[&str]) -> Gauge {
        debug_assert_eq!(def.kind, Kind::Gauge);
        self.shared
            .series
            .get_or_create_gauge(&self.key(def, values), |g| Gauge::from_arc(g.clone()))
    }

    /// The histogram `def` with these label values.
    pub fn histogram(&self, def: &Def, values: &[&str]) -> Histogram {
        debug_assert_eq!(def.kind, Kind::Histogram);
        self.shared
            .series
            .get_or_create_histogram(&self.key(def, values), |h| Histogram::from_arc(h.clone()))
    }

    /// The Prometheus text exposition: every metric that has a series, in [`ALL`]'s order,
    /// its series sorted by labels.
    pub fn render(&self) -> String {
        self.upkeep();
        let series = &self.shared.series;
        let mut values: Vec<(Key, Value)> = Vec::new();
        series.visit_counters(|key, c| {
            values.push((key.clone(), Value::Counter(c.load(Ordering::Relaxed))));
        });
        series.visit_gauges(|key, g| {
            let value = f64::from_bits(g.load(Ordering::Relaxed));
            values.push((key.clone(), Value::Gauge(value)));
        });
        for (key, b) in lock(&self.shared.buckets).iter() {
            values.push((key.clone(), Value::Histogram(b.clone())));
        }
        values.sort_unstable_by(|a, b| a.0.cmp(&b.0));

        let mut out = String::new();
        for def in ALL {
            let mut of_def = values
                .iter()
                .filter(|(k, _)| k.name() == def.name)
                .peekable();
            if of_def.peek().is_none() {
                continue;
            }
            header(&mut out, def);
            for (key, value) in of_def {
                let name = def.name;
                match value {
                    Value::Counter(v) => sample(&mut out, name, "", &labels(key, None), v),
                    Value::Gauge(v) => sample(&mut out, name, "", &labels(key, None), Float(*v)),
                    Value::Histogram(b) => {
                        for (le, count) in b.buckets() {
                            let l = labels(key, Some(&le.to_string()));
                            sample(&mut out, name, "_bucket", &l, count);
                        }
                        let l = labels(key, Some("+Inf"));
                        sample(&mut out, name, "_bucket", &l, b.count());
                        let l = labels(key, None);
                        sample(&mut out, name, "_sum", &l, Float(b.sum()));
                        sample(&mut out, name, "_count", &l, b.count());
                    }
                }
            }
        }
        out
    }

    /// Folds the histograms' buffered samples into their buckets; call periodically (the
    /// buffers grow until then).
    pub fn upkeep(&self) {
        let mut buckets = lock(&self.shared.buckets);
        self.shared
            .series
            .visit_histograms(|key, samples: &Arc<AtomicBucket<f64>>| {
                let b = buckets.entry(key.clone()).or_insert_with(|| {
                    Buckets::new(BUCKETS).expect("static buckets are not empty")
                });
                samples.clear_with(|s| b.record_many(s));
            });
    }
}

/// A float as the text format spells it: `+Inf`, `-Inf` and `NaN` where Rust would print
/// `inf`, `-inf` and `NaN` (a group whose RTT is unknown has an infinite one).
struct Float(f64);

impl Display for Float {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            v if v == f64::INFINITY => f.write_str("+Inf"),
            v if v == f64::NEG_INFINITY => f.write_str("-Inf"),
            v => write!(f, "{v}"),
        }
    }
}

/// A series' value at render time.
enum Value {
    Counter(u64),
    Gauge(f64),
    Histogram(Buckets),
}

/// `# HELP` and `# TYPE` of a metric, after a blank line separating it from the previous one.
fn header(out: &mut String, def: &Def) {
    if !out.is_empty() {
        out.push('\n');
    }
    let kind = match def.kind {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
        Kind::Histogram => "histogram",
    };
    write_help_line(out, def.name, None, None, def.help);
    write_type_line(out, def.name, None, None, kind);
}

/// `name="value",...` of a series, with `le` last for a histogram bucket.
fn labels(key: &Key, le: Option<&str>) -> String {
    let mut text = String::new();
    for label in key.labels() {
        let sep = if text.is_empty() { "" } else { "," };
        let value = sanitize_label_value(label.value());
        let _ = write!(text, "{sep}{}=\"{value}\"", label.key());
    }
    if let Some(le) = le {
        let sep = if text.is_empty() { "" } else { "," };
        let _ = write!(text, "{sep}le=\"{le}\"");
    }
    text
}

/// One sample line: `name_suffix{labels} value`.
fn sample(out: &mut String, name: &str, suffix: &str, labels: &str, value: impl Display) {
    if labels.is_empty() {
        let _ = writeln!(out, "{name}{suffix} {value}");
    } else {
        let _ = writeln!(out, "{name}{suffix}{{{labels}}} {value}");
    }
}

/// The commit gtd was built from (`build.rs`: `git rev-parse HEAD` where the source has a
/// `.git`), else `unknown`.
pub const COMMIT: &str = env!("GTD_COMMIT");

/// Registers `gtd_build_info` (1, with this build's version and commit) and `gtd_draining`
/// (0), the node's own series; returns the draining gauge for the stop to set.
pub(crate) fn node_series(registry: &Registry) -> Gauge {
    registry
        .gauge(&BUILD_INFO, &[env!("CARGO_PKG_VERSION"), COMMIT])
        .set(1.0);
    let draining = registry.gauge(&DRAINING, &[]);
    draining.set(0.0);
    draining
}

/// `gtd_requests_total` handles for classes 1xx..5xx with these (listener, group, endpoint).
pub(crate) fn code_classes(registry: &Registry, labels: &[&str; 3]) -> [Counter; 5] {
    ["1xx", "2xx", "3xx", "4xx", "5xx"]
        .map(|class| registry.counter(&REQUESTS_TOTAL, &[labels[0], labels[1], labels[2], class]))
}

/// What an endpoint has served since its series began, by the counters `/metrics` exports:
/// HTTP responses it gave (`gtd_requests_total`, every class; retried attempts included) on
/// an HTTP listener, else connections and UDP flows established to it
/// (`gtd_connections_total`). `/status` reports it; the dashboard's observed share is its
/// growth between two polls.
pub(crate) fn served(registry: &Registry, http: bool, labels: &[&str; 3]) -> u64 {
    if http {
        ["1xx", "2xx", "3xx", "4xx", "5xx"]
            .iter()
            .map(|class| {
                registry.counter_value(&REQUESTS_TOTAL, &[labels[0], labels[1], labels[2], class])
            })
            .sum()
    } else {
        registry.counter_value(&CONNECTIONS_TOTAL, labels)
    }
}

/// The series of metric `def` with these label values (same order as `def.labels`).
fn series_key(def: &Def, values: &[&str]) -> Key {
    let labels: Vec<Label> = def
        .labels
        .iter()
        .zip(values)
        .map(|(k, v)| Label::new(*k, (*v).to_owned()))
        .collect();
    Key::from_parts(def.name, labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_values_are_read_without_registering() {
        let r = Registry::new();
        let scope = r.scope();
        assert_eq!(served(&scope, false, &["l", "g", "e"]), 0);
        scope
            .counter(&CONNECTIONS_TOTAL, &["l", "g", "e"])
            .increment(3);
        for (class, n) in [("2xx", 5), ("5xx", 2)] {
            scope
                .counter(&REQUESTS_TOTAL, &["h", "g", "e", class])
                .increment(n);
        }
        assert_eq!(served(&scope, false, &["l", "g", "e"]), 3);
        assert_eq!(served(&scope, true, &["h", "g", "e"]), 7);
        // Reading registered nothing: a reload's retain keeps exactly what was registered.
        let before = scope.registered().0.len();
        let _ = served(&scope, true, &["h", "g", "other"]);
        assert_eq!(scope.registered().0.len(), before);
    }

    #[test]
    fn the_node_series_name_the_build_and_start_undrained() {
        let r = Registry::new();
        let draining = node_series(&r);
        let text = r.render();
        let build = format!(
            "gtd_build_info{{version=\"{}\",commit=\"{COMMIT}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&build), "{text}");
        assert!(COMMIT == "unknown" || COMMIT.bytes().all(|b| b.is_ascii_hexdigit()));
        // A series without labels is written without braces.
        assert!(text.contains("\ngtd_draining 0\n"), "{text}");
        draining.set(1.0);
        assert!(r.render().contains("\ngtd_draining 1\n"));
        // Only a fleet node registers these (node/fleet.rs).
        assert!(!text.contains("gtd_config_revision") && !text.contains("gtd_etcd_connected"));
    }

    #[test]
    fn floats_are_spelled_as_the_text_format_wants() {
        let r = Registry::new();
        let g = r.gauge(&GROUP_RTT_SECONDS, &["l", "g"]);
        for (value, text) in [(f64::INFINITY, "+Inf"), (f64::NAN, "NaN"), (0.25, "0.25")] {
            g.set(value);
            let want = format!("gtd_group_rtt_seconds{{listener=\"l\",group=\"g\"}} {text}\n");
            assert!(r.render().contains(&want), "{}", r.render());
        }
    }
}
