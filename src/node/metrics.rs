//! Every metric gtd exports, described once: name, kind, labels and meaning. The README's table
//! is checked against [`ALL`] by a test, so the two cannot drift apart.
//!
//! Each node owns its own Prometheus recorder (no global), so several nodes can live in one
//! process (tests, `gtd demo`). Hot paths hold pre-registered handles: incrementing one is an
//! atomic add, with no lookup and no allocation.

use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram, Key, Label, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

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
/// Attempts after the first one.
pub const RETRIES_TOTAL: Def = Def {
    name: "gtd_retries_total",
    kind: Kind::Counter,
    labels: &["listener"],
    help: "Attempts made after a failed one (another endpoint or group; TCP connects and HTTP requests)",
};
/// Time to connect to an endpoint.
pub const CONNECT_SECONDS: Def = Def {
    name: "gtd_connect_seconds",
    kind: Kind::Histogram,
    labels: &["listener", "group"],
    help: "Time to establish a connection to an endpoint (HTTP: TLS handshake included)",
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
    help: "Round-trip time from this node used to rank the group (measured or estimated)",
};
/// Endpoint usability.
pub const ENDPOINT_HEALTHY: Def = Def {
    name: "gtd_endpoint_healthy",
    kind: Kind::Gauge,
    labels: &["listener", "group", "endpoint"],
    help: "1 when the endpoint is usable (enabled, not down or draining, checks allow it)",
};
/// Times a listener entered failover.
pub const FAILOVERS_TOTAL: Def = Def {
    name: "gtd_failovers_total",
    kind: Kind::Counter,
    labels: &["listener"],
    help: "Times the listener's top group became unhealthy and another group took over",
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

/// Every metric, for the exporter's descriptions and the README check.
pub const ALL: &[Def] = &[
    CONNECTIONS_TOTAL,
    CONNECTIONS_ACTIVE,
    BYTES_TOTAL,
    NO_ROUTE_TOTAL,
    CONNECT_FAILURES_TOTAL,
    RETRIES_TOTAL,
    CONNECT_SECONDS,
    UDP_FLOWS_ACTIVE,
    UDP_FLOWS_EVICTED_TOTAL,
    GROUP_SHARE,
    GROUP_HEALTHY,
    GROUP_RTT_SECONDS,
    ENDPOINT_HEALTHY,
    FAILOVERS_TOTAL,
    REQUESTS_TOTAL,
    UPSTREAM_RESPONSE_SECONDS,
    STICKY_HITS_TOTAL,
    CONFIG_RELOADS_TOTAL,
];

/// A node's registry: registers handles and renders the exposition.
#[derive(Clone)]
pub struct Registry {
    recorder: Arc<PrometheusRecorder>,
    handle: PrometheusHandle,
}

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

static METADATA: Metadata<'static> = Metadata::new(module_path!(), metrics::Level::INFO, None);

impl Registry {
    /// A fresh registry with every metric described.
    pub fn new() -> Registry {
        let recorder = PrometheusBuilder::new()
            .set_buckets(&[
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0,
            ])
            .expect("static buckets are valid")
            .build_recorder();
        for def in ALL {
            let name = metrics::KeyName::from_const_str(def.name);
            let help = SharedString::const_str(def.help);
            match def.kind {
                Kind::Counter => recorder.describe_counter(name, None, help),
                Kind::Gauge => recorder.describe_gauge(name, None, help),
                Kind::Histogram => recorder.describe_histogram(name, Some(Unit::Seconds), help),
            }
        }
        let handle = recorder.handle();
        Registry {
            recorder: Arc::new(recorder),
            handle,
        }
    }

    fn key(def: &Def, values: &[&str]) -> Key {
        debug_assert_eq!(def.labels.len(), values.len(), "{}: label values", def.name);
        let labels: Vec<Label> = def
            .labels
            .iter()
            .zip(values)
            .map(|(k, v)| Label::new(*k, (*v).to_owned()))
            .collect();
        Key::from_parts(def.name, labels)
    }

    /// The counter `def` with these label values (same order as `def.labels`).
    pub fn counter(&self, def: &Def, values: &[&str]) -> Counter {
        debug_assert_eq!(def.kind, Kind::Counter);
        self.recorder
            .register_counter(&Self::key(def, values), &METADATA)
    }

    /// The gauge `def` with these label values.
    pub fn gauge(&self, def: &Def, values: &[&str]) -> Gauge {
        debug_assert_eq!(def.kind, Kind::Gauge);
        self.recorder
            .register_gauge(&Self::key(def, values), &METADATA)
    }

    /// The histogram `def` with these label values.
    pub fn histogram(&self, def: &Def, values: &[&str]) -> Histogram {
        debug_assert_eq!(def.kind, Kind::Histogram);
        self.recorder
            .register_histogram(&Self::key(def, values), &METADATA)
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// Drains histogram buffers; call periodically.
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }
}
