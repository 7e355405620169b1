//! [`Explain::build`]: the decision code's values in words.

use super::pick::pick_explain;
use super::*;

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
pub(super) fn pct(v: f64) -> String {
    format!("{v:.2}")
}

impl Explain {
    /// The explanation for `ask` on the listener of `facts`, reading endpoint states at `now`:
    /// the plan the request follows, each group's rank, share and pick, the group the decision
    /// goes to (or each group's chance), and the summary.
    pub fn build(facts: &ExplainFacts<'_>, ask: &Ask<'_>, now: Instant) -> Explain {
        let l = facts.listener;
        let followed = Followed::new(l, facts.planned, ask, now);
        let plan = followed.plan;
        let chosen_group = chosen_group(l, &followed, ask.client, now);
        let groups = group_explains(facts, ask, &followed, chosen_group, now);
        let (chosen, chances) = chosen_or_chances(l, &followed, ask.client, chosen_group);
        let pick = chosen_group.and_then(|gi| {
            groups
                .iter()
                .find(|g| g.name == l.groups[gi].name)
                .and_then(|g| g.pick.clone())
        });
        let matched = followed.matched;
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

/// The plan a request follows: an HTTP listener's forwarding rules decide first which one.
struct Followed<'p> {
    /// The rule the request matched (HTTP listeners with rules only).
    matched: Option<Match>,
    /// The matched rule's index, when a rule (not the default) takes it.
    route: Option<usize>,
    /// That rule's plan, or the listener's.
    plan: &'p Plan,
    /// False when a rule claims the host but none covers the path: nothing takes it.
    routed: bool,
    /// The split at this moment: recovering groups are part way back (`failback_ramp`).
    shares: Vec<crate::split::Share>,
}

impl<'p> Followed<'p> {
    fn new(l: &Listener, planned: &'p ListenerPlan, ask: &Ask<'_>, now: Instant) -> Followed<'p> {
        let matched = (l.protocol.is_http() && !l.routes.is_empty()).then(|| {
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
        Followed {
            matched,
            route,
            plan,
            routed: !matches!(matched, Some(Match::NotFound)),
            shares: plan.shares_at(now),
        }
    }

    /// Group `gi` is one of the matched rule's (every group is, without a rule).
    fn in_rule(&self, l: &Listener, gi: usize) -> bool {
        self.route
            .is_none_or(|r| l.routes[r].groups.contains(&l.groups[gi].name))
    }

    /// Some of the request's decisions can reach group `gi`.
    fn reachable(&self, gi: usize) -> bool {
        self.routed && self.shares[gi].total > 0.0
    }
}

/// The group every decision for `client` goes to, when one does: the rendezvous hash's under
/// source-ip, else the only group with a share.
fn chosen_group(
    l: &Listener,
    followed: &Followed<'_>,
    client: IpAddr,
    now: Instant,
) -> Option<usize> {
    let plan = followed.plan;
    match l.affinity {
        Affinity::SourceIp => followed
            .routed
            .then(|| plan.choose_at(client, now))
            .flatten(),
        Affinity::None => {
            let mut with_share = plan.order.iter().filter(|&&gi| followed.reachable(gi));
            match (with_share.next(), with_share.next()) {
                (Some(&gi), None) => Some(gi),
                _ => None,
            }
        }
    }
}

/// Each group in priority order: its rank, its share and the cascade step that gave it, a
/// takeover, graceful's grading, and the pick inside it where decisions reach it.
fn group_explains(
    facts: &ExplainFacts<'_>,
    ask: &Ask<'_>,
    followed: &Followed<'_>,
    chosen_group: Option<usize>,
    now: Instant,
) -> Vec<GroupExplain> {
    let l = facts.listener;
    let planned = facts.planned;
    let plan = followed.plan;
    let top = plan
        .order
        .iter()
        .copied()
        .find(|&gi| followed.in_rule(l, gi) && planned.facts[gi].ratio > 0.0);
    let eligible_count = plan.order.iter().filter(|&&gi| plan.eligible[gi]).count();
    let mut remaining = 100.0_f64;
    let mut groups = Vec::with_capacity(plan.order.len());
    for (pos, &gi) in plan.order.iter().enumerate() {
        let g = &l.groups[gi];
        let b = facts.balancers[gi];
        let fact = planned.facts[gi];
        let in_rule = followed.in_rule(l, gi);
        let ratio = if in_rule { fact.ratio } else { 0.0 };
        let share = followed.shares[gi];
        let usable = b.usable_count(now);
        let (step, mut share_reason) = share_words(
            l,
            plan,
            ShareFacts {
                in_rule,
                ratio,
                healthy: fact.healthy,
                is_top: top == Some(gi),
                remaining,
                eligible: eligible_count,
            },
            share,
        );
        if let Some(r) = crate::view::RecoveringView::of(plan, gi, now) {
            share_reason.push_str(&format!(
                "; it recovered {:.0} s ago and takes its share back over failback_ramp \
                 {:.0} s: {:.1} % of the way, {:.2} of its {:.2}",
                r.since_s,
                r.ramp_s,
                r.fraction * 100.0,
                share.total,
                r.full_share
            ));
        }
        if plan.mode != Mode::Failover || l.failover != FailoverMode::NextPriority {
            remaining = (remaining - share.first_pass).max(0.0);
        }
        let failover = (plan.mode == Mode::Failover && share.total > 0.0)
            .then(|| top.filter(|&t| t != gi))
            .flatten()
            .map(|t| takeover(facts, t, gi, now));
        let graceful = (l.failover == FailoverMode::Graceful).then_some(Graceful {
            usable: fact.fraction,
            keep: share.keep,
            spill: share.spill,
            overprovisioning: l.overprovisioning,
        });
        let pick = followed
            .reachable(gi)
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
    groups
}

/// Group `to` took over from `from` (config indices), the top group with a ratio, which is
/// unhealthy: why, under the listener's failover.
fn takeover(facts: &ExplainFacts<'_>, from: usize, to: usize, now: Instant) -> Takeover {
    let l = facts.listener;
    let (from, down, to) = (
        &l.groups[from],
        facts.balancers[from].usable_count(now),
        &l.groups[to],
    );
    Takeover {
        from: from.name.clone(),
        to: to.name.clone(),
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
                    to.name
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
}

/// Under source-ip, the group the rendezvous hash names and every group's score; under
/// rotation, each reachable group's chance.
fn chosen_or_chances(
    l: &Listener,
    followed: &Followed<'_>,
    client: IpAddr,
    chosen_group: Option<usize>,
) -> (Option<Chosen>, Option<Vec<Chance>>) {
    let plan = followed.plan;
    let name = |gi: usize| l.groups[gi].name.clone();
    match l.affinity {
        Affinity::SourceIp => {
            let scores = plan.scores(client);
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
                        "affinity = \"source-ip\": the rendezvous hash of {client} scores each \
                         group with a share share / -ln(u); {} scores highest, so every \
                         decision for this client goes there while the shares stay as they are",
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
                .filter(|&&gi| followed.reachable(gi))
                .map(|&gi| Chance {
                    group: name(gi),
                    percent: followed.shares[gi].total,
                })
                .collect();
            (None, Some(chances))
        }
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
