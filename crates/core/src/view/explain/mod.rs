//! Why one client's connection or request goes where it goes: the `GET /explain` document and
//! `sim --client`'s `explain` (docs/explain.md), one type and one builder for both.
//!
//! [`Explain::build`] reads the decision code's own values — the [`ListenerPlan`] decisions
//! follow (ranking, cascade shares, mode, the forwarding rules' plans), [`Plan::scores`] for
//! source-ip affinity, [`GroupBalancer::trace`] for the pick inside a group — and puts words
//! to them. It decides nothing itself: the node hands it its live plan and balancers, `sim` the
//! ones it built for a node of that region, and both print what the data path would do.
//! Pure (the time to read endpoint states at is an argument); allocates, so it runs on the
//! admin path only, on demand.

use std::net::IpAddr;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::balance::{GroupBalancer, PickTrace, RequestKey, Walk};
use crate::config::{Affinity, FailoverMode, Listener};
use crate::split::rules::{Match, Parts, Rules, describe};
use crate::split::{ListenerPlan, Mode, Plan, Ranking, RttSource};

/// The `/explain` document: why a client's connection or request goes where it goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explain {
    /// The listener.
    pub listener: String,
    /// Its protocol.
    pub protocol: String,
    /// The node's acceleration region.
    pub region: String,
    /// The client address asked about.
    pub client: String,
    /// The mode of the plan the decision follows: `cascade`, `failover`, `fail-open` or
    /// `no-route`.
    pub mode: String,
    /// The listener's `failover`: `next-priority`, `recompute` or `graceful`.
    pub failover: String,
    /// `none` (a rotation over the shares picks each decision's group) or `source-ip`.
    pub affinity: String,
    /// What ordered the groups: `node` (this node's ranking) or `client-location`.
    pub priority_by: String,
    /// The request asked about (HTTP: `host`, `path`, `key`), when any was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestAsked>,
    /// An HTTP listener with forwarding rules: the rule the request takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<RuleMatch>,
    /// Every group of the listener in the plan's priority order.
    pub groups: Vec<GroupExplain>,
    /// Source-ip affinity: the group this client goes to, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen: Option<Chosen>,
    /// Rotation (`affinity = "none"`): each group's chance of taking one of this client's
    /// decisions, percent, priority order (groups with a share only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chances: Option<Vec<Chance>>,
    /// The balancer's pick inside the group the decision goes to, when one group takes it
    /// (always under source-ip; under rotation when one group has the whole share). The pick
    /// in each group a rotation can reach is in that group's `pick`.
    pub pick: Option<PickExplain>,
    /// The listener's sticky cookie: a request carrying it goes where it names instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sticky_cookie: Option<String>,
    /// The answer in one sentence.
    pub summary: String,
}

/// The request an explanation was asked for.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RequestAsked {
    /// The `Host`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The path (no query).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The hash key's variables (`$request_uri`, `$http_*`, `$cookie_*`) all read this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// The forwarding rule a request takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleMatch {
    /// `route` (a rule matched), `default` (none did: every group) or `not-found` (the host
    /// is some rule's but no rule covers the path: 404).
    pub outcome: String,
    /// The rule, 1-based config order (`route` only).
    pub rule: Option<usize>,
    /// What it matches, as written (`host …, path …, header …`).
    pub matches: Option<String>,
    /// The groups it names (the cascade runs over these only).
    pub groups: Vec<String>,
    /// Why, in words.
    pub reason: String,
}

/// One group: its rank and its share, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupExplain {
    /// Its name.
    pub name: String,
    /// Its region.
    pub region: String,
    /// Its rank, 1 first.
    pub rank: usize,
    /// The RTT it is ranked by, ms (`null`: unknown).
    pub rtt_ms: Option<f64>,
    /// `measured`, `catalog`, `estimated` or `static`.
    pub rtt_source: String,
    /// Why it has its rank.
    pub rank_reason: String,
    /// Its ratio in the plan followed, percent (0 for a group the matched rule leaves out).
    pub ratio: f64,
    /// `healthy` or `unhealthy`.
    pub health: String,
    /// Its usable endpoints ...
    pub usable: usize,
    /// ... of its endpoints ...
    pub endpoints: usize,
    /// ... against `min_healthy`.
    pub min_healthy: u32,
    /// Its share of the decisions, percent.
    pub share: f64,
    /// Taken in the cascade's walk, percent.
    pub first_pass: f64,
    /// Its part of what the walk left over, percent.
    pub leftover: f64,
    /// Which step gave it its share: `first-pass`, `leftover`, `first-pass+leftover`,
    /// `failover` (it took over from an unhealthy group), `graceful` (what it kept of what
    /// reached it) or `nothing`.
    pub step: String,
    /// Why it has its share, with the numbers.
    pub share_reason: String,
    /// The group that took over from an unhealthy one: from which, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<Takeover>,
    /// `failover = "graceful"`: what its share was graded by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graceful: Option<Graceful>,
    /// The pick inside it, when this client's decisions can reach it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pick: Option<PickExplain>,
}

/// A failover, as the group that took over sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Takeover {
    /// The highest-priority group with a ratio, unhealthy.
    pub from: String,
    /// This group.
    pub to: String,
    /// The listener's `failover`.
    pub policy: String,
    /// Why, in words.
    pub reason: String,
}

/// `failover = "graceful"`'s grading of one group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Graceful {
    /// The usable part of its weight, 0..=1.
    pub usable: f64,
    /// The part of what reaches it that it keeps: `min(1, overprovisioning × usable)`.
    pub keep: f64,
    /// What the groups above passed down to it, percent.
    pub spill: f64,
    /// The listener's overprovisioning factor.
    pub overprovisioning: f64,
}

/// Source-ip affinity's choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chosen {
    /// The group.
    pub group: String,
    /// Why, in words.
    pub reason: String,
    /// Each group's rendezvous score for this client (`share / -ln(u)`), priority order; the
    /// highest wins.
    pub scores: Vec<Score>,
}

/// A group's rendezvous score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// The group.
    pub group: String,
    /// Its score.
    pub score: f64,
}

/// A group's chance of one decision under rotation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chance {
    /// The group.
    pub group: String,
    /// Percent.
    pub percent: f64,
}

/// The balancer's pick inside one group, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PickExplain {
    /// The group.
    pub group: String,
    /// Its balancing method.
    pub method: String,
    /// The endpoint, when the request itself decides it (a hash walk).
    pub endpoint: Option<String>,
    /// What decides: `hash`, `hash consistent`, `ip_hash` (the request: `endpoint` named),
    /// `rotation` (weights), `random` (a weighted draw), `load` (the endpoints' load now)
    /// or `none` (nothing usable).
    pub by: String,
    /// Why, in words.
    pub reason: String,
    /// Hash methods: the key and the walk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<HashExplain>,
    /// The group's endpoints, config order, with what the method reads of them now.
    pub endpoints: Vec<PickEndpoint>,
}

/// A hash walk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HashExplain {
    /// The key hashed (`ip_hash`: the address octets it reads).
    pub key: String,
    /// Its hash (`hash`: CRC-32; `ip_hash`: the first round's value).
    pub hash: u32,
    /// The total weight slots are taken modulo (`hash`, `ip_hash`), or the ring's points.
    pub space: u64,
    /// Every step walked, up to the one taken.
    pub steps: Vec<HashStepExplain>,
}

/// One step of a hash walk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HashStepExplain {
    /// The round (or ring point tried), from 0.
    pub round: u32,
    /// The round's hash (ketama: the ring point's value).
    pub hash: u32,
    /// The slot in the weight space (ketama: the point's index on the ring).
    pub slot: u64,
    /// The endpoint it landed on.
    pub endpoint: String,
    /// It could take the request.
    pub usable: bool,
}

/// An endpoint as the pick sees it now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PickEndpoint {
    /// Its address as the config writes it.
    pub address: String,
    /// Its configured weight.
    pub weight: u32,
    /// `backup` as configured.
    pub backup: bool,
    /// The pick may choose it now (usable, below `max_conns`).
    pub candidate: bool,
    /// Why the pick may not choose it, when it may not (ejected, marked, checked out, drained,
    /// disabled, `down`, at `max_conns`): every reason that holds, in that order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub why_not: Vec<String>,
    /// Its expected part of the group's picks, percent (`null`: load-dependent).
    pub share: Option<f64>,
    /// Requests or connections in flight.
    pub active: u32,
    /// The weight the rotation gives it now (failure penalty, slow start).
    pub effective_weight: f64,
    /// `least_time`: its average, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    /// `feedback`: its average reported value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<f64>,
}

mod build;
mod pick;
mod query;
mod text;

pub use build::{Ask, ExplainFacts};
pub use query::{Query, QueryError};

#[cfg(test)]
mod tests;
