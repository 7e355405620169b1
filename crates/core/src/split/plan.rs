//! The routing plan of one listener on one node, as a plain value: what the node runs and what
//! `sim` prints are built here, by the same functions, from the config, the catalogue and the
//! facts (health, RTT).
//!
//! - [`facts`]: each group's ratio and health, assembled in one place;
//! - [`ListenerPlan`]: the ranking, the listener's own [`Plan`] and one plan per forwarding
//!   rule, each over that rule's groups only (the others get ratio 0: nothing, not even
//!   leftover, and no retries);
//! - [`StickyTable`]: the sticky cookie's value for every endpoint and the way back from a
//!   value to its (group, endpoint).
//!
//! The node attaches its I/O handles (pools, TLS, metric handles) beside these values and swaps
//! a new [`ListenerPlan`] in whenever a fact changes.

use std::time::Instant;

use crate::balance::GroupBalancer;
use crate::config::{Affinity, FailoverMode, Listener};

use super::{GroupFacts, Plan, Ranking};

/// Each group's facts (config order): its ratio (`ratio(i)`, the config's or a what-if's),
/// whether it is healthy now (at least `min_healthy` of its endpoints usable in `balancers`)
/// and, on a `failover = "graceful"` listener, the usable part of its weight (1 otherwise).
pub fn facts<'a>(
    listener: &Listener,
    ratio: impl Fn(usize) -> f64,
    balancers: impl IntoIterator<Item = &'a GroupBalancer>,
    now: Instant,
) -> Vec<GroupFacts> {
    listener
        .groups
        .iter()
        .zip(balancers)
        .enumerate()
        .map(|(i, (g, b))| GroupFacts {
            ratio: ratio(i),
            healthy: b.is_healthy(g.min_healthy, now),
            fraction: if listener.failover == FailoverMode::Graceful {
                b.usable_fraction(now)
            } else {
                1.0
            },
        })
        .collect()
}

/// One listener's plans on one node, with the ranking and facts they were computed from.
#[derive(Debug, Clone)]
pub struct ListenerPlan {
    /// Priority order and the RTTs behind it.
    pub ranking: Ranking,
    /// Ratio and health per group (config index).
    pub facts: Vec<GroupFacts>,
    /// The listener's split and group chooser (requests no forwarding rule claims, and every
    /// TCP connection and UDP flow).
    pub plan: Plan,
    /// One plan per forwarding rule (config order), over that rule's groups only.
    pub routes: Vec<Plan>,
    /// Per group (config index): when it turned healthy, while it is taking its share back
    /// over the listener's `failback_ramp` ([`super::failback`]); all `None` otherwise.
    pub recovered: Vec<Option<Instant>>,
}

impl ListenerPlan {
    /// The plans of `listener` for `ranking` and `facts`, choosing groups with `affinity` (the
    /// listener's own, or source-ip when `sim --client` asks where one client goes).
    pub fn build(
        listener: &Listener,
        ranking: Ranking,
        facts: Vec<GroupFacts>,
        affinity: Affinity,
    ) -> ListenerPlan {
        let none = vec![None; facts.len()];
        ListenerPlan::build_ramped(listener, ranking, facts, affinity, none)
    }

    /// [`Self::build`] with the groups of `recovered` (config index → when it turned healthy)
    /// taking their share back over the listener's `failback_ramp`, in every plan.
    pub fn build_ramped(
        listener: &Listener,
        ranking: Ranking,
        facts: Vec<GroupFacts>,
        affinity: Affinity,
        recovered: Vec<Option<Instant>>,
    ) -> ListenerPlan {
        let plan =
            Plan::for_listener_ramped(listener, &ranking.order, &facts, affinity, &recovered);
        let routes = listener
            .routes
            .iter()
            .map(|r| {
                let only: Vec<GroupFacts> = listener
                    .groups
                    .iter()
                    .zip(&facts)
                    .map(|(g, f)| GroupFacts {
                        ratio: if r.groups.contains(&g.name) {
                            f.ratio
                        } else {
                            0.0
                        },
                        ..*f
                    })
                    .collect();
                Plan::for_listener_ramped(listener, &ranking.order, &only, affinity, &recovered)
            })
            .collect();
        ListenerPlan {
            ranking,
            facts,
            plan,
            routes,
            recovered,
        }
    }

    /// Each plan goes on with `was`'s rotation where its split is the same ([`Plan::continue_from`]):
    /// for a listener rebuilt without a change to its split.
    pub fn continue_from(&self, was: &ListenerPlan) {
        self.plan.continue_from(&was.plan);
        if self.routes.len() == was.routes.len() {
            for (now, then) in self.routes.iter().zip(&was.routes) {
                now.continue_from(then);
            }
        }
    }

    /// When the last failback ramp of any of its plans is over (`None`: none is recovering).
    pub fn ramp_ends(&self) -> Option<Instant> {
        std::iter::once(&self.plan)
            .chain(&self.routes)
            .filter_map(Plan::ramp_ends)
            .max()
    }

    /// Forwarding rule `route`'s split as `sim` and `/status` show it: each of the rule's groups
    /// (config index) in priority order with its share, percent.
    pub fn rule_split(&self, listener: &Listener, route: usize) -> Vec<(usize, f64)> {
        let rule = &listener.routes[route];
        let plan = &self.routes[route];
        plan.order
            .iter()
            .filter(|&&gi| rule.groups.contains(&listener.groups[gi].name))
            .map(|&gi| (gi, plan.shares[gi].total))
            .collect()
    }

    /// [`Self::rule_split`] at `now`, while groups take their share back.
    pub fn rule_split_at(
        &self,
        listener: &Listener,
        route: usize,
        now: Instant,
    ) -> Vec<(usize, f64)> {
        let shares = self.routes[route].shares_at(now);
        self.rule_split(listener, route)
            .into_iter()
            .map(|(gi, _)| (gi, shares[gi].total))
            .collect()
    }

    /// The plan decisions follow for forwarding rule `route` (config index), or the
    /// listener's own for `None`.
    pub fn for_route(&self, route: Option<usize>) -> &Plan {
        match route {
            Some(r) => &self.routes[r],
            None => &self.plan,
        }
    }
}

/// `sticky = { cookie }`: the cookie's value for each endpoint and what a value names.
///
/// A value is 16 hex digits: a fixed, unkeyed hash (FNV-1a with the splitmix finaliser, as every
/// placement hash in gtd) of `listener NUL group NUL address`. It tells a client nothing about
/// the endpoints and stays the same across restarts, reloads and nodes.
#[derive(Debug, Clone)]
pub struct StickyTable {
    /// The cookie's name.
    pub cookie: String,
    /// (hash, group, endpoint), sorted by hash.
    table: Vec<(u64, usize, usize)>,
    /// The value per group and endpoint (config order).
    values: Vec<Vec<String>>,
}

/// The sticky cookie value of one endpoint.
pub fn sticky_value(listener: &str, group: &str, address: &str) -> String {
    let mut bytes = Vec::with_capacity(listener.len() + group.len() + address.len() + 2);
    bytes.extend_from_slice(listener.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(group.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(address.as_bytes());
    format!("{:016x}", crate::hash::mix(crate::hash::fnv1a(&bytes)))
}

impl StickyTable {
    /// The table of `listener`, when it sets `sticky`.
    pub fn of(listener: &Listener) -> Option<StickyTable> {
        let cookie = &listener.sticky.as_ref()?.cookie;
        let mut table = Vec::new();
        let mut values = Vec::with_capacity(listener.groups.len());
        for (gi, g) in listener.groups.iter().enumerate() {
            let mut group = Vec::with_capacity(g.endpoints.len());
            for (ei, e) in g.endpoints.iter().enumerate() {
                let value = sticky_value(&listener.name, &g.name, &e.address.id());
                table.push((u64::from_str_radix(&value, 16).expect("hex"), gi, ei));
                group.push(value);
            }
            values.push(group);
        }
        table.sort_unstable();
        Some(StickyTable {
            cookie: cookie.clone(),
            table,
            values,
        })
    }

    /// The (group, endpoint) a cookie value names.
    pub fn target(&self, value: &str) -> Option<(usize, usize)> {
        if value.len() != 16 {
            return None;
        }
        let h = u64::from_str_radix(value, 16).ok()?;
        let i = self.table.binary_search_by_key(&h, |e| e.0).ok()?;
        Some((self.table[i].1, self.table[i].2))
    }

    /// The cookie value of endpoint `endpoint` of group `group` (config indices).
    pub fn value(&self, group: usize, endpoint: usize) -> &str {
        &self.values[group][endpoint]
    }

    /// The values per group and endpoint (config order).
    pub fn values(&self) -> &[Vec<String>] {
        &self.values
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use crate::split::{self, Mode};
    use std::path::Path;

    fn listener(text: &str) -> (config::Config, Ranking) {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        let catalog = config::load_catalog(&root.join("regions/catalog.toml")).unwrap();
        let cfg = config::parse(text, Path::new("config.toml"), &catalog).unwrap();
        let ranking = split::rank(&cfg.listeners[0], &cfg.catalog, "cn-beijing", |_| None);
        (cfg, ranking)
    }

    const ROUTED: &str = r#"
[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]
sticky = { cookie = "gtd" }
  [[listener.route]]
  path_prefix = ["/sh/"]
  groups = ["shanghai"]
  [[listener.route]]
  path_prefix = ["/both/"]
  groups = ["shanghai", "beijing"]
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 50
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = 50
    [[listener.group.endpoint]]
    address = "10.0.0.2:80"
    [[listener.group.endpoint]]
    address = "10.0.0.3:80"
"#;

    #[test]
    fn each_route_plans_over_its_own_groups_only() {
        let (cfg, ranking) = listener(ROUTED);
        let l = &cfg.listeners[0];
        let healthy = |b: bool| GroupFacts::new(50.0, b);
        let p = ListenerPlan::build(
            l,
            ranking.clone(),
            vec![healthy(true), healthy(true)],
            l.affinity,
        );
        let totals = |plan: &Plan| plan.shares.iter().map(|s| s.total).collect::<Vec<_>>();
        assert_eq!(totals(&p.plan), [62.5, 37.5]);
        // Only Shanghai: it takes everything, Beijing is not even a retry target.
        assert_eq!(totals(p.for_route(Some(0))), [0.0, 100.0]);
        assert_eq!(p.routes[0].eligible, [false, true]);
        // Both: the listener's own cascade.
        assert_eq!(totals(p.for_route(Some(1))), [62.5, 37.5]);
        assert_eq!(totals(p.for_route(None)), [62.5, 37.5]);
        // As shown: only the rule's groups, in priority order.
        assert_eq!(p.rule_split(l, 0), [(1, 100.0)]);
        assert_eq!(p.rule_split(l, 1), [(0, 62.5), (1, 37.5)]);
        // Shanghai down: its route has no route, the others fail over to Beijing.
        let p = ListenerPlan::build(l, ranking, vec![healthy(true), healthy(false)], l.affinity);
        assert_eq!(p.routes[0].mode, Mode::NoRoute);
        assert_eq!(totals(&p.routes[1]), [100.0, 0.0]);
    }

    #[test]
    fn a_recovered_group_takes_its_share_back_over_the_ramp() {
        use std::net::{IpAddr, Ipv4Addr};
        use std::time::Duration;
        for affinity in ["", "affinity = \"source-ip\"\n"] {
            let text = ROUTED.replace(
                "sticky = { cookie = \"gtd\" }\n",
                &format!("failback_ramp = \"60s\"\n{affinity}"),
            );
            let (cfg, ranking) = listener(&text);
            let l = &cfg.listeners[0];
            assert_eq!(l.failback_ramp, Duration::from_secs(60));
            let t0 = Instant::now();
            let facts = vec![GroupFacts::new(50.0, true), GroupFacts::new(50.0, true)];
            let p = ListenerPlan::build_ramped(
                l,
                ranking.clone(),
                facts.clone(),
                l.affinity,
                vec![None, Some(t0)],
            );
            // Once over: the cascade's 62.5 / 37.5; at the start: Beijing alone.
            assert_eq!(p.plan.shares[1].total, 37.5);
            assert_eq!(p.plan.shares_at(t0)[1].total, 0.0);
            assert_eq!(p.plan.recovering(), [(1, t0)]);
            assert_eq!(p.ramp_ends(), Some(t0 + Duration::from_secs(60)));
            let t15 = t0 + Duration::from_secs(15);
            let at = p.plan.shares_at(t15);
            assert_eq!(at[1].total, 37.5 / 4.0);
            assert_eq!(at[0].total + at[1].total, 100.0);
            assert_eq!(p.plan.ramp_fraction(1, t15), 0.25);
            assert_eq!(p.plan.ramp_fraction(0, t15), 1.0);
            // Decisions follow the share at the moment, within a point over 20,000.
            let n = 20_000;
            let to_shanghai = (0..n)
                .filter(|&i| {
                    let c = IpAddr::V4(Ipv4Addr::from(0x0a00_0000_u32 + i * 7919));
                    p.plan.choose_at(c, t15) == Some(1)
                })
                .count();
            let seen = to_shanghai as f64 * 100.0 / n as f64;
            assert!((seen - 37.5 / 4.0).abs() < 1.0, "{affinity}: {seen}");
            // The route over Shanghai alone has nothing to spare it from: no ramp there.
            assert!(p.routes[0].recovering().is_empty());
            assert_eq!(p.routes[0].shares_at(t15)[1].total, 100.0);
            assert_eq!(
                p.rule_split_at(l, 1, t15),
                [(0, 100.0 - 37.5 / 4.0), (1, 37.5 / 4.0)]
            );
            // After the ramp: the whole share.
            assert_eq!(
                p.plan.shares_at(t0 + Duration::from_secs(61))[1].total,
                37.5
            );
        }
        // A zero ramp (the default) is the snap.
        let (cfg, ranking) = listener(ROUTED);
        let l = &cfg.listeners[0];
        assert_eq!(l.failback_ramp, Duration::ZERO);
        let now = Instant::now();
        let facts = vec![GroupFacts::new(50.0, true), GroupFacts::new(50.0, true)];
        let p = ListenerPlan::build_ramped(l, ranking, facts, l.affinity, vec![None, Some(now)]);
        assert!(p.plan.recovering().is_empty());
        assert_eq!(p.plan.shares_at(now)[1].total, 37.5);
    }

    #[test]
    fn two_recovering_groups_mix_three_splits() {
        use std::time::Duration;
        let text = ROUTED.replace(
            "sticky = { cookie = \"gtd\" }\n",
            "failback_ramp = \"100s\"\n",
        );
        let text = text.replace(
            "  [[listener.group]]\n  name = \"shanghai\"",
            "  [[listener.group]]\n  name = \"hangzhou\"\n  region = \"cn-hangzhou\"\n  ratio = 50\n    [[listener.group.endpoint]]\n    address = \"10.0.0.9:80\"\n  [[listener.group]]\n  name = \"shanghai\"",
        );
        let (cfg, ranking) = listener(&text);
        let l = &cfg.listeners[0];
        let t0 = Instant::now();
        let up = GroupFacts::new(50.0, true);
        let p = ListenerPlan::build_ramped(
            l,
            ranking,
            vec![up, up, up],
            l.affinity,
            vec![Some(t0), None, Some(t0 + Duration::from_secs(50))],
        );
        // Beijing first: all three healthy 62.5 / ... ; the top group itself recovering ramps
        // from the failover split.
        let at = p.plan.shares_at(t0 + Duration::from_secs(75));
        let total: f64 = at.iter().map(|s| s.total).sum();
        assert!((total - 100.0).abs() < 1e-9);
        let full = &p.plan.shares;
        // Shanghai (recovered last) is a quarter of the way: exactly a quarter of its share.
        assert!((at[2].total - full[2].total * 0.25).abs() < 1e-9, "{at:?}");
        assert!(at.iter().all(|s| s.total >= 0.0));
    }

    #[test]
    fn facts_follow_endpoint_health_and_the_given_ratios() {
        let (cfg, _) = listener(ROUTED);
        let l = &cfg.listeners[0];
        let now = Instant::now();
        let balancers: Vec<GroupBalancer> = l
            .groups
            .iter()
            .map(|g| GroupBalancer::new(g, l.protocol, now))
            .collect();
        let f = facts(l, |i| [70.0, 30.0][i], &balancers, now);
        assert_eq!(
            f,
            [GroupFacts::new(70.0, true), GroupFacts::new(30.0, true)]
        );
        for e in balancers[1].endpoints() {
            e.set_active_healthy(false, now);
        }
        let f = facts(l, |i| l.groups[i].ratio, &balancers, now);
        assert!(f[0].healthy && !f[1].healthy);
        assert_eq!(f[1].ratio, 50.0);
    }

    #[test]
    fn sticky_values_are_stable_opaque_and_found_again() {
        let v = sticky_value("web", "beijing", "10.0.0.1:80");
        assert_eq!(v.len(), 16);
        assert_eq!(v, sticky_value("web", "beijing", "10.0.0.1:80"));
        assert_ne!(v, sticky_value("web", "beijing", "10.0.0.2:80"));
        assert!(!v.contains("10.0.0.1"));
        let (cfg, _) = listener(ROUTED);
        let t = StickyTable::of(&cfg.listeners[0]).expect("sticky is set");
        assert_eq!(t.cookie, "gtd");
        for (gi, group) in t.values().iter().enumerate() {
            for (ei, value) in group.iter().enumerate() {
                assert_eq!(t.target(value), Some((gi, ei)));
                assert_eq!(t.value(gi, ei), value);
            }
        }
        assert_eq!(t.target("0123"), None);
        assert_eq!(t.target("zzzzzzzzzzzzzzzz"), None);
    }
}
