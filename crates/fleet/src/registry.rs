//! The node registry: what each node says about itself under `PREFIX/nodes/ID`, and where the
//! nodes' views of group health disagree. Pure: the node writes [`Entry`] values (its listeners
//! are [`gtd_core::view`]'s), `gtd fleet` and `GET /fleet` read them.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use gtd_core::view::ListenerView;
pub use gtd_core::view::Refusal;

/// A node's registry entry, rewritten when what it says changes (a revision applied or
/// refused, a group's health or share).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The node's id (`--node-id`, default `REGION@HOST:ADMIN_PORT`).
    pub id: String,
    /// Its acceleration region.
    pub region: String,
    /// Its admin server's address.
    pub admin: String,
    /// The address its listeners bind to.
    pub bind: String,
    /// gtd's version.
    pub version: String,
    /// The revision it serves (`None`: it serves a config file, not a revision).
    pub applied: Option<u64>,
    /// Where the served revision came from: `etcd`, or `cache` (the node started while etcd
    /// was unreachable).
    pub source: String,
    /// The latest revision it refused, and why (cleared when it applies a newer one).
    pub refused: Option<Refusal>,
    /// Seconds since it started, when the entry was written.
    pub uptime_s: u64,
    /// When it started, ms since the Unix epoch (0 in an entry of a version before it was
    /// written: then `uptime_s` is all there is).
    #[serde(default)]
    pub started_at_ms: u64,
    /// When this entry was written, ms since the Unix epoch: the entry is rewritten when what
    /// it says changes, not on a clock (the lease says the node is alive).
    pub updated_at_ms: u64,
    /// What each of its listeners does now ([`ListenerView::for_registry`]: no RTTs, counters
    /// or endpoints, which change without anything happening).
    #[serde(deserialize_with = "listeners_any_version")]
    pub listeners: Vec<ListenerView>,
    /// Its endpoints with errors in the last minute, coarsely ([`ErrorSummary`]): rewritten
    /// at most once every [`ERRORS_EVERY`], and only when the summary changed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<EndpointErrors>,
    /// Endpoints set apart on this node alone through its admin API (`POST
    /// /endpoints/.../enable|disable` against the config's `enabled`, `.../drain`); a toggle is
    /// a change of the entry, so one write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub toggles: Vec<Toggle>,
    /// Its endpoints out of rotation for a failure ([`out_of_rotation`]: checks, passive
    /// marks, outlier ejections), with the cause; drains and admin toggles are not failures and
    /// are said elsewhere. A change of the entry, so one write each way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unhealthy: Vec<Unhealthy>,
}

/// An endpoint a node took out of rotation for a failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unhealthy {
    /// The listener.
    pub listener: String,
    /// The group.
    pub group: String,
    /// The endpoint's address, as `/status` writes it.
    pub endpoint: String,
    /// Why: `checks` (its active health checks fail), `ejected` (outlier detection) or
    /// `passive` (`max_fails` failures within `fail_timeout`).
    pub cause: String,
}

/// The endpoints of a node's listeners (their `/status` views) out of rotation for a failure,
/// in listener, group and config order: failing their checks, ejected, or passively marked.
pub fn out_of_rotation(listeners: &[ListenerView]) -> Vec<Unhealthy> {
    let mut out = Vec::new();
    for l in listeners {
        for g in &l.groups {
            for e in &g.endpoints {
                let cause = if e.check.as_ref().is_some_and(|c| !c.healthy) {
                    "checks"
                } else if e.ejected {
                    "ejected"
                } else if e.passive_down {
                    "passive"
                } else {
                    continue;
                };
                out.push(Unhealthy {
                    listener: l.name.clone(),
                    group: g.name.clone(),
                    endpoint: e.address.clone(),
                    cause: cause.to_owned(),
                });
            }
        }
    }
    out
}

/// An endpoint toggled on one node through its admin API, away from what the config says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Toggle {
    /// The listener.
    pub listener: String,
    /// The group.
    pub group: String,
    /// The endpoint (a name's address: `NAME:PORT@IP`).
    pub endpoint: String,
    /// Enabled now (the config says the other, unless `drained`).
    pub enabled: bool,
    /// Drained through the admin API.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drained: bool,
}

impl Toggle {
    /// What was done to it, in words: `disabled`, `drained`, `enabled, drained`…
    pub fn what(&self) -> String {
        let mut what = Vec::new();
        if !self.drained || !self.enabled {
            what.push(if self.enabled { "enabled" } else { "disabled" });
        }
        if self.drained {
            what.push("drained");
        }
        what.join(", ")
    }
}

/// An endpoint with errors in the last minute (5xx answers, timeouts, connect failures), as a
/// node's registry entry says it: the count rounded down to a power of ten, so that the entry
/// changes when the order of magnitude does, not with every error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointErrors {
    /// The listener.
    pub listener: String,
    /// The group.
    pub group: String,
    /// The endpoint's address, as `/status` writes it.
    pub endpoint: String,
    /// At least this many errors in the last minute: 1, 10, 100, 1000, ...
    pub at_least: u64,
}

/// The least often a node rewrites its entry for its errors alone.
pub const ERRORS_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The coarse errors summary of a node's listeners (their `/status` views): each endpoint
/// with errors in the last minute, its count bucketed, in listener, group and config order.
pub fn error_summary(listeners: &[ListenerView]) -> Vec<EndpointErrors> {
    let mut out = Vec::new();
    for l in listeners {
        for g in &l.groups {
            for e in g.endpoints.iter().filter(|e| e.errors.total > 0) {
                out.push(EndpointErrors {
                    listener: l.name.clone(),
                    group: g.name.clone(),
                    endpoint: e.address.clone(),
                    at_least: 10_u64.pow(e.errors.total.ilog10()),
                });
            }
        }
    }
    out
}

/// What the entry says of the errors, paced: a new summary is taken when it differs from the
/// one taken last and that was at least [`ERRORS_EVERY`] ago (the first at once); meanwhile
/// the entry keeps the last one, so errors alone write etcd at most once every
/// [`ERRORS_EVERY`], and never while nothing changes. Pure: the time is an argument.
#[derive(Debug, Default)]
pub struct ErrorSummary {
    taken: Vec<EndpointErrors>,
    at: Option<std::time::Instant>,
}

impl ErrorSummary {
    /// The summary the entry carries at `now`, given the `fresh` one.
    pub fn offer(
        &mut self,
        fresh: Vec<EndpointErrors>,
        now: std::time::Instant,
    ) -> &[EndpointErrors] {
        let due = self
            .at
            .is_none_or(|at| now.saturating_duration_since(at) >= ERRORS_EVERY);
        if fresh != self.taken && due {
            self.taken = fresh;
            self.at = Some(now);
        }
        &self.taken
    }
}

impl Entry {
    /// Seconds the node has been up: from when it started, for an entry that says it (the
    /// entry is not rewritten as time passes), else as the entry was written.
    pub fn uptime_s(&self) -> u64 {
        if self.started_at_ms == 0 {
            return self.uptime_s;
        }
        crate::now_ms().saturating_sub(self.started_at_ms) / 1000
    }
}

/// Nodes that see one group differently: some healthy, some not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disagreement {
    /// The listener.
    pub listener: String,
    /// The group.
    pub group: String,
    /// The ids of the nodes that see it healthy.
    pub healthy: Vec<String>,
    /// The ids of the nodes that see it unhealthy.
    pub unhealthy: Vec<String>,
}

/// Every (listener, group) that at least one node sees healthy and another unhealthy, in
/// listener and group name order. A group only some nodes serve is compared among those.
pub fn disagreements(entries: &[Entry]) -> Vec<Disagreement> {
    // (listener, group) -> (ids seeing it healthy, ids seeing it unhealthy).
    type Views = (Vec<String>, Vec<String>);
    let mut seen: BTreeMap<(&str, &str), Views> = BTreeMap::new();
    for e in entries {
        for l in &e.listeners {
            for g in &l.groups {
                let (healthy, unhealthy) = seen.entry((&l.name, &g.name)).or_default();
                if g.healthy {
                    healthy.push(e.id.clone());
                } else {
                    unhealthy.push(e.id.clone());
                }
            }
        }
    }
    seen.into_iter()
        .filter(|(_, (h, u))| !h.is_empty() && !u.is_empty())
        .map(|((listener, group), (healthy, unhealthy))| Disagreement {
            listener: listener.to_owned(),
            group: group.to_owned(),
            healthy,
            unhealthy,
        })
        .collect()
}

/// An entry's listeners, from this version's entries and from older ones, whose groups said
/// `"health": "healthy"` or `"unhealthy"` where [`gtd_core::view::GroupView`] says `"healthy": true|false`.
fn listeners_any_version<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ListenerView>, D::Error> {
    let mut listeners = Vec::<serde_json::Value>::deserialize(d)?;
    for l in &mut listeners {
        let Some(groups) = l.get_mut("groups").and_then(|g| g.as_array_mut()) else {
            continue;
        };
        for g in groups.iter_mut().filter_map(|g| g.as_object_mut()) {
            if !g.contains_key("healthy")
                && let Some(health) = g.remove("health")
            {
                g.insert("healthy".to_owned(), (health == "healthy").into());
            }
        }
    }
    listeners
        .into_iter()
        .map(|l| serde_json::from_value(l).map_err(serde::de::Error::custom))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gtd_core::view::GroupView;

    fn entry(id: &str, groups: &[(&str, bool)]) -> Entry {
        Entry {
            id: id.to_owned(),
            region: "r".to_owned(),
            admin: String::new(),
            bind: String::new(),
            version: String::new(),
            applied: Some(1),
            source: "etcd".to_owned(),
            refused: None,
            uptime_s: 0,
            started_at_ms: 0,
            updated_at_ms: 0,
            errors: Vec::new(),
            toggles: Vec::new(),
            unhealthy: Vec::new(),
            listeners: vec![ListenerView {
                name: "web".to_owned(),
                mode: "cascade".to_owned(),
                groups: groups
                    .iter()
                    .map(|&(name, ok)| GroupView {
                        name: name.to_owned(),
                        share: 50.0,
                        healthy: ok,
                        ..GroupView::default()
                    })
                    .collect(),
                ..ListenerView::default()
            }],
        }
    }

    #[test]
    fn a_group_seen_healthy_by_one_node_and_unhealthy_by_another_is_a_disagreement() {
        let entries = [
            entry("a", &[("beijing", true), ("shanghai", true)]),
            entry("b", &[("beijing", false), ("shanghai", true)]),
            entry("c", &[("beijing", false)]),
        ];
        assert_eq!(
            disagreements(&entries),
            vec![Disagreement {
                listener: "web".to_owned(),
                group: "beijing".to_owned(),
                healthy: vec!["a".to_owned()],
                unhealthy: vec!["b".to_owned(), "c".to_owned()],
            }]
        );
    }

    #[test]
    fn nodes_that_agree_have_no_disagreement_even_when_the_group_is_down() {
        let entries = [
            entry("a", &[("beijing", false)]),
            entry("b", &[("beijing", false)]),
        ];
        assert!(disagreements(&entries).is_empty());
    }

    #[test]
    fn an_entry_written_by_the_previous_version_still_reads() {
        let old = r#"{"id":"cn-beijing@h:9100","region":"cn-beijing","admin":"127.0.0.1:9100",
            "bind":"127.0.0.1","version":"0.1.0","applied":3,"source":"etcd",
            "refused":{"revision":4,"reason":"gtd.toml:3:1: bad"},"uptime_s":12,
            "updated_at_ms":1796188898705,"listeners":[{"name":"web","mode":"cascade",
            "groups":[{"name":"beijing","share":62.5,"health":"healthy"},
                      {"name":"shanghai","share":37.5,"health":"unhealthy"}]}]}"#;
        let e: Entry = serde_json::from_str(old).unwrap();
        assert_eq!(e.applied, Some(3));
        assert_eq!(e.refused.as_ref().map(|r| r.revision), Some(4));
        let l = &e.listeners[0];
        assert_eq!((l.name.as_str(), l.mode.as_str()), ("web", "cascade"));
        let seen: Vec<(&str, f64, bool)> = l
            .groups
            .iter()
            .map(|g| (g.name.as_str(), g.share, g.healthy))
            .collect();
        assert_eq!(seen, [("beijing", 62.5, true), ("shanghai", 37.5, false)]);
    }

    #[test]
    fn the_errors_summary_buckets_counts_and_changes_at_most_every_ten_seconds() {
        use gtd_core::view::{EndpointView, ErrorsView};
        let with = |totals: &[u64]| {
            vec![ListenerView {
                name: "web".to_owned(),
                groups: vec![GroupView {
                    name: "beijing".to_owned(),
                    endpoints: totals
                        .iter()
                        .enumerate()
                        .map(|(i, &total)| EndpointView {
                            address: format!("127.0.0.1:{}", 9001 + i),
                            errors: ErrorsView {
                                connect: total,
                                total,
                                ..ErrorsView::default()
                            },
                            ..EndpointView::default()
                        })
                        .collect(),
                    ..GroupView::default()
                }],
                ..ListenerView::default()
            }]
        };
        let at_least = |s: &[EndpointErrors]| {
            s.iter()
                .map(|e| (e.endpoint.clone(), e.at_least))
                .collect::<Vec<_>>()
        };
        let summary = error_summary(&with(&[0, 1, 9, 10, 99, 100, 4321]));
        let ep = |port: u16, n: u64| (format!("127.0.0.1:{port}"), n);
        assert_eq!(
            at_least(&summary),
            [
                ep(9002, 1),
                ep(9003, 1),
                ep(9004, 10),
                ep(9005, 10),
                ep(9006, 100),
                ep(9007, 1000)
            ]
        );
        assert_eq!(summary[0].listener, "web");
        assert_eq!(summary[0].group, "beijing");

        let t0 = std::time::Instant::now();
        let s = |secs: u64| t0 + std::time::Duration::from_secs(secs);
        let mut paced = ErrorSummary::default();
        assert!(
            paced.offer(error_summary(&with(&[0])), s(0)).is_empty(),
            "quiet"
        );
        // The first errors are taken at once, a change 3 s later waits for the 10 s.
        assert_eq!(
            at_least(paced.offer(error_summary(&with(&[2])), s(1))),
            [ep(9001, 1)]
        );
        assert_eq!(
            at_least(paced.offer(error_summary(&with(&[40])), s(4))),
            [ep(9001, 1)]
        );
        assert_eq!(
            at_least(paced.offer(error_summary(&with(&[40])), s(11))),
            [ep(9001, 10)]
        );
        // Counts that stay in their bucket change nothing, however long.
        assert_eq!(
            at_least(paced.offer(error_summary(&with(&[75])), s(60))),
            [ep(9001, 10)]
        );
        // Quiet again: taken once, then nothing changes.
        assert!(paced.offer(error_summary(&with(&[0])), s(70)).is_empty());
        assert!(paced.offer(error_summary(&with(&[0])), s(75)).is_empty());
    }

    #[test]
    fn an_entry_reads_back_as_written() {
        let e = entry("a", &[("beijing", true), ("shanghai", false)]);
        let text = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<Entry>(&text).unwrap(), e);
    }
}
