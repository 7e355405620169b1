//! What the simulator computes, before any rendering: one [`ListenerReport`] per listener, with
//! one [`RegionReport`] per node region (its groups, endpoints, rules and `--client`'s route),
//! and the [`Asks`] that add columns. Plain data: the engine and `--client` fill it, the
//! renderers (`render`, `svg`, `capacity`) read it.

use std::net::IpAddr;

use gtd_core::geoip::Place;
use gtd_core::split::rules::Match;
use gtd_core::split::{Mode, RttSource};
use gtd_core::view::Explain;

/// One listener seen from every region asked for.
#[derive(Debug, Clone)]
pub(crate) struct ListenerReport {
    pub(crate) name: String,
    pub(crate) protocol: &'static str,
    pub(crate) port: u16,
    pub(crate) failover: &'static str,
    /// `failover = "graceful"`'s factor.
    pub(crate) overprovisioning: f64,
    pub(crate) fail_open: bool,
    pub(crate) affinity: &'static str,
    /// `node` or `client-location`.
    pub(crate) priority_by: &'static str,
    pub(crate) regions: Vec<RegionReport>,
}

/// One listener on one acceleration region's node.
#[derive(Debug, Clone)]
pub(crate) struct RegionReport {
    pub(crate) region: String,
    pub(crate) mode: Mode,
    /// Groups in priority order.
    pub(crate) groups: Vec<GroupRow>,
    /// `--verify N`: decisions driven and the largest |observed - expected|, points.
    pub(crate) verify: Option<(u64, f64)>,
    /// `--client`: the group and endpoint chosen for that client.
    pub(crate) route: Option<Route>,
    /// `--client`: why, as a node of this region's `GET /explain` says it.
    pub(crate) explain: Option<Explain>,
    /// Each forwarding rule's split (HTTP listeners with `[[listener.route]]`), config order.
    pub(crate) routes: Vec<RouteReport>,
}

/// The split of one forwarding rule on one node: the cascade over the rule's groups only.
#[derive(Debug, Clone)]
pub(crate) struct RouteReport {
    /// 1-based, config order.
    pub(crate) index: usize,
    /// What it matches, as written (`host …, path …, header …`).
    pub(crate) rule: String,
    pub(crate) mode: Mode,
    /// (group, share %) of the rule's groups, priority order.
    pub(crate) groups: Vec<(String, f64)>,
}

/// Where `--client` goes.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    /// The forwarding rule the request matched, on a listener that has rules.
    pub(crate) rule: Option<Match>,
    /// How the node picks this client's group: `rotation` (`affinity = "none"`: each decision
    /// takes the next group of the rotation over the shares, whoever the client is) or
    /// `source-ip` (the rendezvous hash of the address names one group).
    pub(crate) chosen_by: &'static str,
    /// The group, when every decision for this client goes to one: always under source-ip,
    /// under rotation only when a single group has the whole share.
    pub(crate) group: Option<String>,
    /// The endpoint in `group`, when one is named.
    pub(crate) endpoint: Option<String>,
    /// What named the endpoint: `client` (ip_hash, or hash on a key the client's address or
    /// `--key` gives: this client always lands there) or `rotation` (the method does not map
    /// clients: the pick a fresh node would make next); `None` when no endpoint is named.
    pub(crate) endpoint_by: Option<&'static str>,
    /// Every group this client's decisions can go to (share > 0), priority order, with the
    /// chance of each; empty when there is no route.
    pub(crate) groups: Vec<ClientGroup>,
    /// The listener's sticky cookie: requests carrying it go where it names.
    pub(crate) sticky: Option<String>,
    /// With `[geoip]`: where the database places the client (`None`: not in it).
    pub(crate) place: Option<Option<Place>>,
    /// What ordered the groups for this client: `node` (the node's ranking) or
    /// `client-location` (distance from the client's coordinates).
    pub(crate) priority_by: &'static str,
}

/// One group `--client` can land in.
#[derive(Debug, Clone)]
pub(crate) struct ClientGroup {
    pub(crate) name: String,
    /// Percent of this client's decisions that go to the group (its share under rotation, 100
    /// under source-ip).
    pub(crate) percent: f64,
    pub(crate) method: &'static str,
    /// The endpoint, when the client decides it.
    pub(crate) endpoint: Option<String>,
    /// What decides the endpoint: `client` (ip_hash, or hash on a key the client's address or
    /// `--key` gives: `endpoint` is named and takes all of `percent`), `request-key` (hash on a
    /// request key not given: pass `--key`) or `method` (the balancing method spreads the
    /// client's decisions); the last two give only `endpoints`' shares.
    pub(crate) endpoint_by: &'static str,
    /// The request's key (`--key`) is part of what decides the endpoint.
    pub(crate) keyed: bool,
    /// Each endpoint (config order) with the percent of this client's decisions it gets;
    /// `None` when that is load-dependent.
    pub(crate) endpoints: Vec<(String, Option<f64>)>,
}

/// One group's line.
#[derive(Debug, Clone)]
pub(crate) struct GroupRow {
    pub(crate) name: String,
    pub(crate) group_region: String,
    /// 1-based rank.
    pub(crate) priority: usize,
    pub(crate) rtt_ms: f64,
    pub(crate) rtt_source: RttSource,
    pub(crate) ratio: f64,
    pub(crate) healthy: bool,
    pub(crate) first_pass: f64,
    pub(crate) leftover: f64,
    pub(crate) share: f64,
    /// The share in parts, [first pass, leftover, spill], each at what the group keeps of it
    /// ([`gtd_core::split::Share::kept_parts`]): what a picture draws.
    pub(crate) parts: [f64; 3],
    /// `failover = "graceful"`: the usable part of the group's weight, what it keeps of what
    /// reaches it, and what groups above passed down to it (docs/design.md §3.3).
    pub(crate) graded: Option<Graded>,
    pub(crate) method: &'static str,
    pub(crate) observed: Option<f64>,
    pub(crate) share_before: Option<f64>,
    /// `--recovering`: taking its share back over `failback_ramp`; `share` is the share now.
    pub(crate) recovering: Option<gtd_core::view::RecoveringView>,
    pub(crate) endpoints: Vec<EndpointRow>,
}

/// A group's grading under `failover = "graceful"`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Graded {
    /// Weight of the usable endpoints over the weight of all, 0..=1.
    pub(crate) usable: f64,
    /// `min(1, overprovisioning × usable)`; 0 when unhealthy.
    pub(crate) keep: f64,
    /// Percent passed down to it by the groups above.
    pub(crate) spill: f64,
}

/// One endpoint's line.
#[derive(Debug, Clone)]
pub(crate) struct EndpointRow {
    pub(crate) address: String,
    pub(crate) weight: u32,
    /// `up`, `backup`, `down`, `disabled`, `drain` or `failing` (health checks fail).
    pub(crate) state: &'static str,
    /// Usable, as the node's balancer says (`up` or `backup`).
    pub(crate) usable: bool,
    /// Percent of the region's traffic; `None` when load-dependent.
    pub(crate) share: Option<f64>,
    pub(crate) observed: Option<f64>,
}

/// Options that add columns.
#[derive(Debug, Clone, Default)]
pub(crate) struct Asks {
    pub(crate) region: Option<String>,
    pub(crate) verify: Option<u64>,
    pub(crate) client: Option<IpAddr>,
    pub(crate) key: Option<String>,
    /// With `client`: the request's host, path and headers, for forwarding rules.
    pub(crate) host: Option<String>,
    pub(crate) path: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
}
