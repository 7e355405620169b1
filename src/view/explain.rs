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

/// What the node (or `sim`) knows of one listener for an explanation.
pub struct ExplainFacts<'a> {
    /// Its config.
    pub listener: &'a Listener,
    /// The node's region.
    pub region: &'a str,
    /// The plans this client's decisions follow (the node's, or by the client's location).
    pub planned: &'a ListenerPlan,
    /// The ranking now (its RTTs may be newer than the plan's), as `/status` shows it.
    pub ranked: &'a Ranking,
    /// The groups' balancers, config order.
    pub balancers: Vec<&'a GroupBalancer>,
    /// `planned` orders the groups by the client's location.
    pub by_location: bool,
}

/// What is asked: a client, and for HTTP the request's host, path and key.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The client address.
    pub client: IpAddr,
    /// The request's `Host`.
    pub host: Option<&'a str>,
    /// The request's path.
    pub path: Option<&'a str>,
    /// What the hash key's request variables read (`sim --key`).
    pub key: Option<&'a str>,
    /// Request headers (`sim --header`), for forwarding rules and hash keys.
    pub headers: &'a [(String, String)],
}

impl RequestKey for Ask<'_> {
    fn remote_ip(&self) -> IpAddr {
        self.client
    }

    fn request_uri(&self) -> Option<&str> {
        self.key.or(self.path)
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.key.or_else(|| {
            if name.eq_ignore_ascii_case("host") {
                self.host
            } else {
                self.headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.as_str())
            }
        })
    }

    fn cookie(&self, _name: &str) -> Option<&str> {
        self.key
    }
}

/// A time in ms to the microsecond, `None` when unknown (as `/status` shows RTTs).
fn ms(v: f64) -> Option<f64> {
    v.is_finite().then(|| (v * 1000.0).round() / 1000.0)
}

/// Two decimals, for the words.
fn pct(v: f64) -> String {
    format!("{v:.2}")
}

impl Explain {
    /// The explanation for `ask` on the listener of `facts`, reading endpoint states at `now`.
    pub fn build(facts: &ExplainFacts<'_>, ask: &Ask<'_>, now: Instant) -> Explain {
        let l = facts.listener;
        let planned = facts.planned;
        let http = l.protocol.is_http();
        // An HTTP listener's forwarding rules decide first which plan the request follows.
        let matched = (http && !l.routes.is_empty()).then(|| {
            Rules::new(&l.routes).find(&Parts {
                host: ask.host,
                path: ask.path.unwrap_or("/"),
                headers: ask.headers,
            })
        });
        let route = match matched {
            Some(Match::Route(r)) => Some(r),
            _ => None,
        };
        let plan = planned.for_route(route);
        let in_rule =
            |gi: usize| route.is_none_or(|r| l.routes[r].groups.contains(&l.groups[gi].name));
        let routed = !matches!(matched, Some(Match::NotFound));
        let reachable = |gi: usize| routed && plan.shares[gi].total > 0.0;

        // The group the decision goes to, when one does.
        let scores = plan.scores(ask.client);
        let chosen_group = match l.affinity {
            Affinity::SourceIp => routed.then(|| plan.choose(ask.client)).flatten(),
            Affinity::None => {
                let mut with_share = plan.order.iter().filter(|&&gi| reachable(gi));
                match (with_share.next(), with_share.next()) {
                    (Some(&gi), None) => Some(gi),
                    _ => None,
                }
            }
        };

        let top = plan
            .order
            .iter()
            .copied()
            .find(|&gi| in_rule(gi) && planned.facts[gi].ratio > 0.0);
        let eligible_count = plan.order.iter().filter(|&&gi| plan.eligible[gi]).count();
        let mut remaining = 100.0_f64;
        let mut groups = Vec::with_capacity(plan.order.len());
        for (pos, &gi) in plan.order.iter().enumerate() {
            let g = &l.groups[gi];
            let b = facts.balancers[gi];
            let fact = planned.facts[gi];
            let ratio = if in_rule(gi) { fact.ratio } else { 0.0 };
            let share = plan.shares[gi];
            let usable = b.usable_count(now);
            let (step, share_reason) = share_words(
                l,
                plan,
                ShareFacts {
                    in_rule: in_rule(gi),
                    ratio,
                    healthy: fact.healthy,
                    is_top: top == Some(gi),
                    remaining,
                    eligible: eligible_count,
                },
                share,
            );
            if plan.mode != Mode::Failover || l.failover != FailoverMode::NextPriority {
                remaining = (remaining - share.first_pass).max(0.0);
            }
            let failover = (plan.mode == Mode::Failover && share.total > 0.0)
                .then(|| top.filter(|&t| t != gi))
                .flatten()
                .map(|t| {
                    let from = &l.groups[t];
                    let down = facts.balancers[t].usable_count(now);
                    Takeover {
                        from: from.name.clone(),
                        to: g.name.clone(),
                        policy: l.failover.as_str().to_owned(),
                        reason: format!(
                            "{} ranks first with a ratio but is unhealthy ({down} of {} endpoints \
                             usable, min_healthy {}); {}",
                            from.name,
                            from.endpoints.len(),
                            from.min_healthy,
                            match l.failover {
                                FailoverMode::NextPriority => format!(
                                    "failover = \"next-priority\" sends all traffic to the \
                                     highest-priority healthy group, {}, ratios ignored",
                                    g.name
                                ),
                                FailoverMode::Recompute => "failover = \"recompute\" runs the \
                                                            cascade over the healthy groups"
                                    .to_owned(),
                                FailoverMode::Graceful => "failover = \"graceful\": it keeps \
                                                           nothing and passes its share down"
                                    .to_owned(),
                            }
                        ),
                    }
                });
            let graceful = (l.failover == FailoverMode::Graceful).then_some(Graceful {
                usable: fact.fraction,
                keep: share.keep,
                spill: share.spill,
                overprovisioning: l.overprovisioning,
            });
            let pick = reachable(gi)
                .then(|| {
                    let under_rotation = l.affinity == Affinity::None;
                    (under_rotation || chosen_group == Some(gi))
                        .then(|| pick_explain(l, gi, b, ask, plan, now))
                })
                .flatten();
            groups.push(GroupExplain {
                name: g.name.clone(),
                region: g.region.clone(),
                rank: pos + 1,
                rtt_ms: ms(facts.ranked.rtt_ms[gi]),
                rtt_source: facts.ranked.source[gi].as_str().to_owned(),
                rank_reason: rank_words(facts, plan, pos, gi),
                ratio,
                health: if fact.healthy { "healthy" } else { "unhealthy" }.to_owned(),
                usable,
                endpoints: g.endpoints.len(),
                min_healthy: g.min_healthy,
                share: share.total,
                first_pass: share.first_pass,
                leftover: share.leftover,
                step: step.to_owned(),
                share_reason,
                failover,
                graceful,
                pick,
            });
        }

        let name = |gi: usize| l.groups[gi].name.clone();
        let (chosen, chances) = match l.affinity {
            Affinity::SourceIp => {
                let chosen = chosen_group.map(|gi| {
                    let scores: Vec<Score> = plan
                        .order
                        .iter()
                        .filter_map(|&g| {
                            let s = scores.as_ref()?.iter().find(|(i, _)| *i == g)?.1;
                            Some(Score {
                                group: name(g),
                                score: s,
                            })
                        })
                        .collect();
                    Chosen {
                        group: name(gi),
                        reason: format!(
                            "affinity = \"source-ip\": the rendezvous hash of {} scores each group \
                             with a share share / -ln(u); {} scores highest, so every decision \
                             for this client goes there while the shares stay as they are",
                            ask.client,
                            name(gi)
                        ),
                        scores,
                    }
                });
                (chosen, None)
            }
            Affinity::None => {
                let chances = plan
                    .order
                    .iter()
                    .filter(|&&gi| reachable(gi))
                    .map(|&gi| Chance {
                        group: name(gi),
                        percent: plan.shares[gi].total,
                    })
                    .collect();
                (None, Some(chances))
            }
        };
        let pick = chosen_group.and_then(|gi| {
            groups
                .iter()
                .find(|g| g.name == l.groups[gi].name)
                .and_then(|g| g.pick.clone())
        });
        let rule = matched.map(|m| rule_words(l, m));
        let summary = summary(l, ask, plan, matched, chosen_group, &pick, &chances);
        let request =
            (ask.host.is_some() || ask.path.is_some() || ask.key.is_some()).then(|| RequestAsked {
                host: ask.host.map(str::to_owned),
                path: ask.path.map(str::to_owned),
                key: ask.key.map(str::to_owned),
            });
        Explain {
            listener: l.name.clone(),
            protocol: l.protocol.as_str().to_owned(),
            region: facts.region.to_owned(),
            client: ask.client.to_string(),
            mode: plan.mode.as_str().to_owned(),
            failover: l.failover.as_str().to_owned(),
            affinity: match l.affinity {
                Affinity::None => "none",
                Affinity::SourceIp => "source-ip",
            }
            .to_owned(),
            priority_by: if facts.by_location {
                "client-location"
            } else {
                "node"
            }
            .to_owned(),
            request,
            rule,
            groups,
            chosen,
            chances,
            pick,
            sticky_cookie: l.sticky.as_ref().map(|s| s.cookie.clone()),
            summary,
        }
    }

    /// The group named `name`.
    pub fn group(&self, name: &str) -> Option<&GroupExplain> {
        self.groups.iter().find(|g| g.name == name)
    }
}

/// What [`share_words`] reads of one group.
struct ShareFacts {
    in_rule: bool,
    ratio: f64,
    healthy: bool,
    is_top: bool,
    /// What the cascade's walk had left when it reached the group, percent.
    remaining: f64,
    /// Groups the leftover is split among.
    eligible: usize,
}

/// Which cascade step gave a group its share, and why, in words.
fn share_words(
    l: &Listener,
    plan: &Plan,
    f: ShareFacts,
    share: crate::split::Share,
) -> (&'static str, String) {
    if !f.in_rule {
        return ("nothing", "not one of the matched rule's groups".to_owned());
    }
    if f.ratio <= 0.0 {
        return (
            "nothing",
            "ratio 0: it takes nothing, not even leftover (a drained group)".to_owned(),
        );
    }
    if plan.mode == Mode::NoRoute {
        return (
            "nothing",
            "no group can take traffic: the listener has no route".to_owned(),
        );
    }
    if !f.healthy && plan.mode != Mode::FailOpen {
        let why = if f.is_top {
            "unhealthy, and it ranks first with a ratio: failover"
        } else {
            "unhealthy: the cascade skips it"
        };
        return ("nothing", why.to_owned());
    }
    if l.failover == FailoverMode::Graceful {
        let reached = share.first_pass + share.leftover + share.spill;
        return (
            "graceful",
            format!(
                "the cascade offered it {} (first pass {}, leftover {}) and the groups above \
                 passed down {}; it keeps {:.4} of that (min(1, overprovisioning {} × usable \
                 part of its weight)): {} %",
                pct(share.first_pass + share.leftover),
                pct(share.first_pass),
                pct(share.leftover),
                pct(share.spill),
                share.keep,
                l.overprovisioning,
                pct(share.total),
            ) + if reached > 0.0 && (share.total - reached * share.keep).abs() > 1e-9 {
                ", scaled up as the last groups passed some down past the end"
            } else {
                ""
            },
        );
    }
    if plan.mode == Mode::Failover && l.failover == FailoverMode::NextPriority {
        return if share.total > 0.0 {
            (
                "failover",
                "the highest-priority healthy group with a ratio: it takes 100 %, ratios ignored"
                    .to_owned(),
            )
        } else {
            (
                "nothing",
                "failover = \"next-priority\": the group that took over has all of it".to_owned(),
            )
        };
    }
    let open = if plan.mode == Mode::FailOpen {
        "no group is healthy and fail_open routes as if all were: "
    } else {
        ""
    };
    let first = format!(
        "took {} % of the remaining {} % (ratio {})",
        pct(share.first_pass),
        pct(f.remaining),
        f.ratio
    );
    let left = format!(
        "{} % of the leftover, split equally among {} eligible groups",
        pct(share.leftover),
        f.eligible
    );
    match (share.first_pass > 0.0, share.leftover > 0.0) {
        (true, true) => ("first-pass+leftover", format!("{open}{first}, then {left}")),
        (true, false) => (
            "first-pass",
            format!("{open}{first}; nothing was left over"),
        ),
        (false, true) => (
            "leftover",
            format!("{open}the groups above took everything in the walk; {left}"),
        ),
        (false, false) => (
            "nothing",
            format!("{open}the groups above took everything, and nothing was left over"),
        ),
    }
}

/// Why a group has its rank, in words.
fn rank_words(facts: &ExplainFacts<'_>, plan: &Plan, pos: usize, gi: usize) -> String {
    let l = facts.listener;
    let g = &l.groups[gi];
    if facts.by_location {
        return format!(
            "priority_by = \"client-location\": rank {} by distance from the client's location",
            pos + 1
        );
    }
    let rtt = facts.ranked.rtt_ms[gi];
    let from = match facts.ranked.source[gi] {
        RttSource::Static => {
            let p = g
                .priority
                .as_ref()
                .and_then(|p| p.for_region(facts.region))
                .unwrap_or(0);
            return format!(
                "static priority {p} from {}: measurements do not move it",
                facts.region
            );
        }
        RttSource::Measured => "measured from this node",
        RttSource::Catalog => "the catalogue's [rtt] entry (no measurement yet)",
        RttSource::Estimated => "estimated from the regions' coordinates (no measurement yet)",
    };
    let mut words = format!("{} ms, {from}", rtt_text(rtt));
    // A faster group below it: the rank margin holds the order.
    if let Some(&faster) = plan.order[pos + 1..]
        .iter()
        .find(|&&o| facts.ranked.rtt_ms[o] < rtt)
    {
        words += &format!(
            "; {} below is faster ({} ms) but not by more than rank_margin (max({} ms, {} %)), \
             so the order holds",
            l.groups[faster].name,
            rtt_text(facts.ranked.rtt_ms[faster]),
            l.rank_margin.floor_ms,
            l.rank_margin.fraction * 100.0
        );
    } else if pos == 0 {
        words += "; the lowest";
    }
    words
}

fn rtt_text(v: f64) -> String {
    ms(v).map_or_else(|| "unknown".to_owned(), |v| format!("{v}"))
}

/// The forwarding rule a request took, in words.
fn rule_words(l: &Listener, m: Match) -> RuleMatch {
    match m {
        Match::Route(r) => RuleMatch {
            outcome: "route".to_owned(),
            rule: Some(r + 1),
            matches: Some(describe(&l.routes[r])),
            groups: l.routes[r].groups.clone(),
            reason: format!(
                "rule {} ({}) matches; the cascade runs over its groups only",
                r + 1,
                describe(&l.routes[r])
            ),
        },
        Match::Default => RuleMatch {
            outcome: "default".to_owned(),
            rule: None,
            matches: None,
            groups: l.groups.iter().map(|g| g.name.clone()).collect(),
            reason: "no rule matches: the listener's own cascade over every group".to_owned(),
        },
        Match::NotFound => RuleMatch {
            outcome: "not-found".to_owned(),
            rule: None,
            matches: None,
            groups: Vec::new(),
            reason: "the host is claimed by a rule but no rule covers this path and no \
                     host-only rule exists: the node answers 404"
                .to_owned(),
        },
    }
}

/// The pick inside group `gi`, from its balancer's trace.
fn pick_explain(
    l: &Listener,
    gi: usize,
    b: &GroupBalancer,
    ask: &Ask<'_>,
    plan: &Plan,
    now: Instant,
) -> PickExplain {
    let g = &l.groups[gi];
    let t: PickTrace = b.trace(ask, plan.admit(), now);
    let address = |i: usize| g.endpoints[i].address.text.clone();
    let endpoints = g
        .endpoints
        .iter()
        .zip(b.endpoints())
        .enumerate()
        .map(|(i, (cfg, state))| PickEndpoint {
            address: cfg.address.text.clone(),
            weight: cfg.weight,
            backup: cfg.backup,
            candidate: t.candidates[i],
            share: t.shares.as_ref().map(|s| s[i] * 100.0),
            active: state.active(),
            effective_weight: state.effective_weight(now),
            latency_ms: state.latency().map(|d| d.as_secs_f64() * 1000.0),
            feedback: state.feedback(),
        })
        .collect();
    let none_usable = !t.candidates.iter().any(|&c| c);
    let hash_of = |w: &crate::balance::HashWalk| HashExplain {
        key: w.key.clone(),
        hash: w.hash,
        space: w.space,
        steps: w
            .steps
            .iter()
            .map(|s| HashStepExplain {
                round: s.round,
                hash: s.hash,
                slot: s.slot,
                endpoint: address(s.endpoint),
                usable: s.usable,
            })
            .collect(),
    };
    let (by, reason, hash) = match &t.walk {
        _ if none_usable => (
            "none",
            "no endpoint can take it (none usable, or all at max_conns): the next eligible \
             group is tried"
                .to_owned(),
            None,
        ),
        Walk::Hash(w) => {
            let last = w
                .steps
                .last()
                .expect("a walk that named an endpoint has a step");
            let skipped = w.steps.len() - 1;
            let how = match w.kind {
                "ip_hash" => format!(
                    "ip_hash of {} (the first three octets of IPv4, all of IPv6) is {}; {} mod \
                     total weight {} = slot {}",
                    w.key, last.hash, last.hash, w.space, last.slot
                ),
                "hash consistent" => format!(
                    "crc32({:?}) = {}; the first ring point at or after it is point {} ({}) of {}",
                    w.key, w.hash, last.slot, last.hash, w.space
                ),
                _ => format!(
                    "crc32({:?}) = {}; slot {} of total weight {}",
                    w.key, last.hash, last.slot, w.space
                ),
            };
            let skipped = if skipped > 0 {
                format!(" after {skipped} step(s) landing on endpoints that could not take it")
            } else {
                String::new()
            };
            (
                w.kind,
                format!("{how}: {}{skipped}", address(last.endpoint)),
                Some(hash_of(w)),
            )
        }
        Walk::HashThenRotation(w) => {
            let why = if w.key.is_empty() {
                "the key is empty for this request".to_owned()
            } else {
                format!("no usable endpoint within {} steps", w.steps.len())
            };
            (
                "rotation",
                format!(
                    "{} walk: {why}, so the weighted rotation picks (each endpoint its weight's \
                     part)",
                    w.kind
                ),
                Some(hash_of(w)),
            )
        }
        Walk::Rotation { because } => (
            "rotation",
            match because {
                Some(why) => format!("{why}: the weighted rotation picks"),
                None => "smooth weighted rotation: each endpoint gets its weight's part of the \
                         picks, whoever the client is"
                    .to_owned(),
            },
            None,
        ),
        Walk::Random { two } => (
            "random",
            if *two {
                "random two: two weighted draws, the one with fewer active connections per \
                 weight"
                    .to_owned()
            } else {
                "a weighted random draw: each endpoint its weight's part".to_owned()
            },
            None,
        ),
        Walk::Load => (
            "load",
            format!(
                "{} is load-dependent: it reads the endpoints' {} now (listed per endpoint)",
                t.method,
                match t.method {
                    "least_conn" => "active connections per weight",
                    "least_time" => "average response times",
                    _ => "reported feedback values",
                }
            ),
            None,
        ),
    };
    let backup = if t.backup {
        " (no primary can serve: backups)"
    } else {
        ""
    };
    PickExplain {
        group: g.name.clone(),
        method: g.balance.name().to_owned(),
        endpoint: t.endpoint.map(address),
        by: by.to_owned(),
        reason: format!("{reason}{backup}"),
        hash,
        endpoints,
    }
}

/// The answer in one sentence.
fn summary(
    l: &Listener,
    ask: &Ask<'_>,
    plan: &Plan,
    matched: Option<Match>,
    chosen: Option<usize>,
    pick: &Option<PickExplain>,
    chances: &Option<Vec<Chance>>,
) -> String {
    if matches!(matched, Some(Match::NotFound)) {
        return format!("{}: no forwarding rule covers this path: 404", ask.client);
    }
    if plan.mode == Mode::NoRoute {
        return format!(
            "{}: no group can take traffic on {}: no route",
            ask.client, l.name
        );
    }
    let endpoint = |p: &Option<PickExplain>| match p {
        Some(PickExplain {
            endpoint: Some(e), ..
        }) => format!(", endpoint {e}"),
        Some(p) => format!(", endpoint by {}", p.by),
        None => String::new(),
    };
    match (chosen, chances) {
        (Some(gi), _) => format!(
            "{} → group {}{} ({})",
            ask.client,
            l.groups[gi].name,
            endpoint(pick),
            plan.mode.as_str()
        ),
        (None, Some(c)) => format!(
            "{} → the rotation over the shares picks each decision's group: {}",
            ask.client,
            c.iter()
                .map(|c| format!("{} {} %", c.group, pct(c.percent)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (None, None) => format!("{}: no route", ask.client),
    }
}

/// A bad `/explain` query: the parameter and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{parameter}: {message}")]
pub struct QueryError {
    /// The parameter at fault.
    pub parameter: &'static str,
    /// What is wrong.
    pub message: String,
}

/// The parameters of `GET /explain?listener=L&client=IP[&host=H&path=P&key=K]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The listener's name.
    pub listener: String,
    /// The client address.
    pub client: IpAddr,
    /// The request's host.
    pub host: Option<String>,
    /// The request's path (its query cut off).
    pub path: Option<String>,
    /// What the hash key's request variables read.
    pub key: Option<String>,
}

impl Query {
    /// Parses a query string (`a=b&c=d`, percent-encoded, `+` for a space). Pure: no node.
    pub fn parse(query: &str) -> Result<Query, QueryError> {
        let err = |parameter, message: String| QueryError { parameter, message };
        let (mut listener, mut client, mut host, mut path, mut key) =
            (None, None, None, None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_encoding::percent_decode_str(&value.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned();
            let slot = match name {
                "listener" => &mut listener,
                "client" => &mut client,
                "host" => &mut host,
                "path" => &mut path,
                "key" => &mut key,
                _ => continue,
            };
            *slot = Some(value);
        }
        let listener = listener
            .filter(|l| !l.is_empty())
            .ok_or_else(|| err("listener", "missing: give listener=NAME".to_owned()))?;
        let client = client
            .filter(|c| !c.is_empty())
            .ok_or_else(|| err("client", "missing: give client=IP".to_owned()))?;
        let client: IpAddr = client.parse().map_err(|_| {
            err(
                "client",
                format!("{client:?} is not an IP address (e.g. 203.0.113.9 or 2001:db8::1)"),
            )
        })?;
        let path = match path {
            Some(p) if !p.starts_with('/') => {
                return Err(err("path", format!("{p:?}: a path starts with /")));
            }
            Some(p) => Some(p.split_once('?').map_or(p.as_str(), |(p, _)| p).to_owned()),
            None => None,
        };
        Ok(Query {
            listener,
            client,
            host: host.filter(|h| !h.is_empty()),
            path,
            key,
        })
    }
}

impl Explain {
    /// The explanation as an operator reads it (`gtd explain`).
    pub fn text(&self) -> String {
        let mut out = format!(
            "{}\nlistener {} ({}) on the {} node: mode {}, failover {}, affinity {}, groups by {}\n",
            self.summary,
            self.listener,
            self.protocol,
            self.region,
            self.mode,
            self.failover,
            self.affinity,
            self.priority_by
        );
        if let Some(r) = &self.rule {
            out += &format!("rule: {}\n", r.reason);
        }
        out += "\ngroups, priority order:\n";
        for g in &self.groups {
            out += &format!(
                "  {}. {} ({}) rtt {} ms [{}], ratio {}, {} ({}/{} usable, min {}), share {} %\n",
                g.rank,
                g.name,
                g.region,
                g.rtt_ms
                    .map_or_else(|| "unknown".to_owned(), |v| v.to_string()),
                g.rtt_source,
                g.ratio,
                g.health,
                g.usable,
                g.endpoints,
                g.min_healthy,
                pct(g.share)
            );
            out += &format!("     rank: {}\n", g.rank_reason);
            out += &format!("     share ({}): {}\n", g.step, g.share_reason);
            if let Some(f) = &g.failover {
                out += &format!("     failover from {}: {}\n", f.from, f.reason);
            }
        }
        if let Some(c) = &self.chosen {
            out += &format!("\nchosen: {}: {}\n", c.group, c.reason);
        }
        if let Some(c) = &self.chances {
            out += "\nchances (rotation):";
            for c in c {
                out += &format!(" {} {} %", c.group, pct(c.percent));
            }
            out += "\n";
        }
        for g in &self.groups {
            let Some(p) = &g.pick else { continue };
            out += &format!(
                "\npick in {} ({}): {}\n  {}\n",
                p.group,
                p.method,
                p.endpoint.as_deref().unwrap_or("by the method"),
                p.reason
            );
            for e in &p.endpoints {
                out += &format!(
                    "    {} weight {}{}{} share {} active {}\n",
                    e.address,
                    e.weight,
                    if e.backup { " backup" } else { "" },
                    if e.candidate { "" } else { " (cannot take it)" },
                    e.share
                        .map_or_else(|| "load-dependent".to_owned(), |s| format!("{} %", pct(s))),
                    e.active
                );
            }
        }
        if let Some(c) = &self.sticky_cookie {
            out += &format!("\nA request carrying the {c} cookie goes where the cookie names.\n");
        }
        out
    }
}

#[cfg(test)]
mod tests;
