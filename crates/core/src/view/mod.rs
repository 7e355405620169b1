//! What a node shows, as types: the `/status` document ([`Status`]), the listeners a registry
//! entry carries ([`ListenerView::for_registry`]) and the per-group rows `sim` prints
//! ([`GroupView`] over [`EndpointShare`]). The JSON contract is documented once, in
//! docs/status.md (a test keeps the two the same).
//!
//! Every type is serde both ways: the node serializes, the demo, `gtd fleet` and the tests
//! deserialize instead of looking keys up. The values are built by the pure functions of
//! [`build`] from the plan and the live facts the node gathers (no I/O, no clock). Fields added
//! later carry `#[serde(default)]`, so that an older node's document still reads.

pub mod build;
mod events;
pub mod explain;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

pub use build::{CheckFacts, EndpointFacts, GroupLive, LastCheck, ListenerFacts};
pub use events::{EventView, Events};
pub use explain::Explain;

/// The `/status` document (docs/design.md §7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// The node itself.
    pub node: NodeView,
    /// Its listeners, in config order.
    pub listeners: Vec<ListenerView>,
    /// Each endpoint host name the node resolves, by name.
    pub dns: BTreeMap<String, DnsView>,
    /// Its fleet state, on a node that follows a fleet (`gtd run --etcd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetView>,
}

/// `/status`'s `node`: who answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    /// Its acceleration region.
    pub region: String,
    /// gtd's version.
    pub version: String,
    /// Seconds since it started.
    pub uptime_s: u64,
    /// The config file it serves (a fleet node: its revision cache).
    pub config: String,
}

/// A listener as one node runs it now. The registry's entries carry it too, without what
/// changes every few seconds ([`ListenerView::for_registry`]); an older entry's listener has
/// only `name`, `mode` and `groups`, so every field defaults.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ListenerView {
    /// Its name.
    pub name: String,
    /// `http`, `https`, `tcp` or `udp`.
    pub protocol: String,
    /// Its port.
    pub port: u16,
    /// `cascade`, `failover`, `fail-open` or `no-route`.
    pub mode: String,
    /// `next-priority`, `recompute` or `graceful`.
    pub failover: String,
    /// `fail_open` as configured.
    pub fail_open: bool,
    /// Its groups in the node's priority order.
    pub groups: Vec<GroupView>,
    /// Each forwarding rule's split (HTTP listeners with `[[listener.route]]`), config order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteView>,
}

/// A group taking its share back over the listener's `failback_ramp` (docs/design.md §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RecoveringView {
    /// Seconds since it turned healthy.
    pub since_s: f64,
    /// The listener's `failback_ramp`, seconds.
    pub ramp_s: f64,
    /// How far along the ramp it is, 0..=1: its share is this part of `full_share`.
    pub fraction: f64,
    /// Its share once the ramp is over, percent.
    pub full_share: f64,
}

/// A group as one node sees it. The field order and the optional fields are those of `sim`'s
/// per-group JSON, so that `GroupView<EndpointShare>` is that row byte for byte; the last three
/// fields are `/status`'s own (`sim` leaves them out).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GroupView<E = EndpointView> {
    /// Its name.
    pub name: String,
    /// Its rank, 1 first.
    pub priority: usize,
    /// The RTT it is ranked by, ms (`None`, written `null`: unknown).
    pub rtt_ms: Option<f64>,
    /// Where that RTT comes from: `measured`, `catalog`, `estimated` or `static`.
    pub rtt_source: String,
    /// The region it is in.
    pub region: String,
    /// Its traffic distribution ratio, percent.
    pub ratio: f64,
    /// It has at least `min_healthy` usable endpoints.
    pub healthy: bool,
    /// Not healthy only because endpoints of it are drained (`gtd drain`, `drain = true`, the
    /// admin API): a planned drain, not a failure (`/status`, the registry; `sim` leaves it
    /// out).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub drained: bool,
    /// The share it took in the cascade's walk, percent.
    pub first_pass: f64,
    /// Its part of what the walk left over, percent.
    pub leftover: f64,
    /// Its share of the decisions, percent.
    pub share: f64,
    /// Its balancing method.
    pub method: String,
    /// Its endpoints, config order.
    pub endpoints: Vec<E>,
    /// `sim --verify`: the share observed, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed: Option<f64>,
    /// `failover = "graceful"`: the usable part of its weight, 0..=1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usable: Option<f64>,
    /// `failover = "graceful"`: the part of what reaches it that it keeps, 0..=1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep: Option<f64>,
    /// `failover = "graceful"`: what the groups above passed down to it, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spill: Option<f64>,
    /// `sim --compare`: its share under the other config, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share_before: Option<f64>,
    /// `sim --compare`: `share - share_before`, points.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<f64>,
    /// Taking its share back after it recovered (`failback_ramp`): `share` is the share at
    /// this moment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovering: Option<RecoveringView>,
    /// `/status`: the share in parts [first pass, leftover, spill], each at what it keeps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parts: Option<[f64; 3]>,
    /// `/status`: requests or connections it served since the node started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served: Option<u64>,
    /// `/status`: why it has its rank.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<RankView>,
}

/// An endpoint as one node sees it now (`/status`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct EndpointView {
    /// Its address as the config writes it.
    pub address: String,
    /// Usable now: enabled, not down, not failing its checks, not passively down, not ejected.
    pub healthy: bool,
    /// Not disabled through the admin API.
    pub enabled: bool,
    /// Requests or connections in flight.
    pub active: u32,
    /// Its weight.
    pub weight: u32,
    /// Failures counted in the current `fail_timeout`.
    pub fails: u32,
    /// `max_fails` failures took it out for `fail_timeout`.
    pub passive_down: bool,
    /// Outlier detection ejected it.
    pub ejected: bool,
    /// Ejections not yet forgotten.
    pub ejections: u64,
    /// Seconds left of its ejection.
    pub ejected_for_s: Option<f64>,
    /// Its active checks (`None`: its group has none).
    pub check: Option<CheckView>,
    /// Average RTT of its checks or probes, ms.
    pub rtt_ms: Option<f64>,
    /// `backup` as configured.
    pub backup: bool,
    /// `down` as configured.
    pub down: bool,
    /// Draining: `drain` as configured, or a fleet-wide drain (`gtd drain`) applied as if
    /// configured.
    pub drain: bool,
    /// Who drains it and from where (`null`: it is not draining).
    #[serde(default)]
    pub drained_by: Option<DrainView>,
    /// Requests or connections it served since the node started.
    pub served: u64,
    /// Its errors of the last minute (an older node's document has none: zeros).
    #[serde(default)]
    pub errors: ErrorsView,
    /// A name's address: the target's id, `NAME:PORT@IP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// A name's endpoint: the address it resolved to (`Some(None)`, written `null`: none).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub resolved: Option<Option<String>>,
    /// A name with no address: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_error: Option<String>,
}

/// An endpoint's errors over the last minute ([`crate::balance::errors`]: a count leaves
/// between 55 and 60 s after it happened).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ErrorsView {
    /// HTTP answers with a status of 500 or above.
    pub status_5xx: u64,
    /// Attempts that got no answer in time (HTTP `upstream_timeout`, TCP `first_byte_timeout`).
    pub timeouts: u64,
    /// Attempts that got no connection (TCP, HTTP, UDP: refused, unreachable, TLS failed).
    pub connect: u64,
    /// The three together.
    pub total: u64,
}

/// Why an endpoint drains: the config says so, or a fleet-wide drain.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DrainView {
    /// `config` (its `drain = true`), `fleet` (`gtd drain`, through etcd) or `admin` (`POST
    /// /endpoints/.../drain` on this node).
    pub source: String,
    /// A fleet drain: who drained it (`user@host`, and the etcd user).
    pub by: Option<String>,
    /// A fleet drain: when, ms since the Unix epoch.
    pub at_ms: Option<u64>,
    /// A fleet drain: its message (`gtd drain -m`).
    pub message: Option<String>,
    /// A fleet drain: what it names, `LISTENER/GROUP/ENDPOINT` or `LISTENER/GROUP`.
    pub target: Option<String>,
}

impl DrainView {
    /// The config's own `drain = true`.
    pub fn config() -> DrainView {
        DrainView {
            source: "config".to_owned(),
            ..DrainView::default()
        }
    }

    /// A drain through this node's admin API.
    pub fn admin() -> DrainView {
        DrainView {
            source: "admin".to_owned(),
            ..DrainView::default()
        }
    }
}

/// An endpoint's active checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckView {
    /// The checks' verdict.
    pub healthy: bool,
    /// The last check's result (`passed`, `failed`, `unexpected`, ...).
    pub result: Option<String>,
    /// Why it ended so.
    pub reason: Option<String>,
    /// When it ended, ms since the Unix epoch.
    pub at_unix_ms: Option<u64>,
    /// Passes needed to turn healthy now (flap damping raises it).
    pub passes_needed: u32,
    /// Checks so far.
    pub checks: u64,
}

/// An endpoint of `sim`'s per-group rows: its share of the region's traffic.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct EndpointShare {
    /// Its address as the config writes it.
    pub address: String,
    /// Percent of the region's traffic (`None`, written `null`: load-dependent).
    pub share: Option<f64>,
    /// Its weight.
    pub weight: u32,
    /// `up`, `backup`, `down`, `disabled`, `drain` or `failing`.
    pub state: String,
    /// `sim --verify`: the share observed, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<f64>,
}

/// Why a group has its rank (the ranker's [`crate::split::ranker::GroupRank`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankView {
    /// Its place, 1 first.
    pub position: usize,
    /// Where its RTT comes from (`measured`, `catalog`, `estimated`, `static`).
    pub source: String,
    /// What a measured sample times (`connect` or `check`).
    pub rtt_from: String,
    /// The RTT it is ranked by, ms.
    pub rtt_ms: Option<f64>,
    /// Samples behind its endpoints' averages.
    pub samples: u64,
    /// How much faster a group below must be to pass it, ms (`None` under static priorities).
    pub margin_ms: Option<f64>,
    /// A new order waiting to be adopted, where it puts this group.
    pub pending: Option<PendingView>,
    /// The last change of order, where it put this group.
    pub last_change: Option<ChangeView>,
}

/// A pending reorder, as one group sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingView {
    /// Its place in the waiting order.
    pub position: usize,
    /// Consecutive rounds the order has been the target so far ...
    pub rounds: u8,
    /// ... of the rounds it needs.
    pub of: u8,
    /// Seconds it has been the target ...
    pub held_s: f64,
    /// ... of `rank_dwell`.
    pub dwell_s: f64,
}

/// The last change of order, as one group sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeView {
    /// Seconds ago.
    pub ago_s: f64,
    /// Its place before.
    pub from_position: usize,
    /// Its place after.
    pub to_position: usize,
    /// Every group's RTT at that round, in the new order, as `[name, ms]`.
    pub rtt_ms: Vec<(String, Option<f64>)>,
}

/// One forwarding rule's split on one node (`/status` and `sim`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteView {
    /// 1-based, config order.
    pub rule: usize,
    /// What it matches, as written (`host …, path …, header …`).
    pub matches: String,
    /// The rule's plan's mode.
    pub mode: String,
    /// The rule's groups in priority order, with their shares.
    pub groups: Vec<RouteShare>,
}

/// A group's share of one forwarding rule's decisions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteShare {
    /// The group.
    pub name: String,
    /// Its share, percent.
    pub share: f64,
}

/// What a node knows of one endpoint host name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DnsView {
    /// `resolved`, `stale` (the last lookup failed; the last good addresses are used) or
    /// `unresolved`.
    pub state: String,
    /// Its addresses, sorted.
    pub addresses: Vec<String>,
    /// How long the kept answer is valid, seconds.
    pub ttl_s: Option<f64>,
    /// Why the last lookup failed, if it did.
    pub error: Option<String>,
    /// When the last lookup ended, ms since the Unix epoch.
    pub checked_at_unix_ms: u64,
    /// Seconds to the next lookup.
    pub next_lookup_in_s: f64,
}

/// `/status`'s `fleet`: a fleet node's link to etcd and the revision it serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetView {
    /// Its registry id.
    pub id: String,
    /// The fleet's key prefix.
    pub prefix: String,
    /// etcd's members.
    pub etcd: Vec<String>,
    /// Whether it reaches etcd over TLS.
    pub tls: bool,
    /// The etcd user it authenticates as.
    pub user: Option<String>,
    /// The revision it serves.
    pub applied: u64,
    /// Where that revision came from: `etcd` or `cache`.
    pub source: String,
    /// The latest revision it refused, and why.
    pub refused: Option<Refusal>,
    /// Whether it follows etcd now.
    pub connected: bool,
    /// The last error reaching etcd.
    pub error: Option<String>,
}

/// A revision a node could not apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The revision's number.
    pub revision: u64,
    /// The node's reason (every error, `FILE:LINE:COL: ...` lines).
    pub reason: String,
}

/// Reads a key that is present (its value, `null` included) as `Some`, so that an absent key
/// (`None`) and a `null` (`Some(None)`) stay apart.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

impl Status {
    /// The listener named `name`.
    pub fn listener(&self, name: &str) -> Option<&ListenerView> {
        self.listeners.iter().find(|l| l.name == name)
    }
}

impl ListenerView {
    /// The group named `name`.
    pub fn group(&self, name: &str) -> Option<&GroupView> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// What a registry entry carries of it: all but what changes every few seconds without
    /// anything happening (RTTs, counters, endpoints, the ranker's clock), so that a node's
    /// entry changes when its mode, order, health or shares do.
    pub fn for_registry(&self) -> ListenerView {
        ListenerView {
            groups: self
                .groups
                .iter()
                .map(|g| GroupView {
                    rtt_ms: None,
                    endpoints: Vec::new(),
                    parts: None,
                    served: None,
                    rank: None,
                    ..g.clone()
                })
                .collect(),
            ..self.clone()
        }
    }
}

impl GroupView {
    /// The endpoint whose address is written `address` (the first target of a name).
    pub fn endpoint(&self, address: &str) -> Option<&EndpointView> {
        self.endpoints.iter().find(|e| e.address == address)
    }
}
