//! The node registry: what each node says about itself under `PREFIX/nodes/ID`, and where the
//! nodes' views of group health disagree. Pure: the node writes [`Entry`] values, `gtd fleet`
//! and `GET /fleet` read them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
    /// What each of its listeners does now.
    pub listeners: Vec<ListenerView>,
}

impl Entry {
    /// Seconds the node has been up: from when it started, for an entry that says it (the
    /// entry is not rewritten as time passes), else as the entry was written.
    pub fn uptime_s(&self) -> u64 {
        if self.started_at_ms == 0 {
            return self.uptime_s;
        }
        crate::fleet::now_ms().saturating_sub(self.started_at_ms) / 1000
    }
}

/// A revision a node could not apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The revision's number.
    pub revision: u64,
    /// The node's reason (every error, `FILE:LINE:COL: ...` lines).
    pub reason: String,
}

/// A listener as one node runs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListenerView {
    /// Its name.
    pub name: String,
    /// `cascade`, `failover`, `fail-open` or `no-route`.
    pub mode: String,
    /// Its groups in the node's priority order.
    pub groups: Vec<GroupView>,
}

/// A group as one node sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupView {
    /// Its name.
    pub name: String,
    /// Its share of the node's decisions, in percent.
    pub share: f64,
    /// `healthy` or `unhealthy`.
    pub health: String,
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
                if g.health == "healthy" {
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

/// The listeners of a `/status` document, as a registry entry carries them.
pub fn listeners_of(status: &serde_json::Value) -> Vec<ListenerView> {
    let empty = Vec::new();
    status["listeners"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|l| ListenerView {
            name: l["name"].as_str().unwrap_or_default().to_owned(),
            mode: l["mode"].as_str().unwrap_or_default().to_owned(),
            groups: l["groups"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .map(|g| GroupView {
                    name: g["name"].as_str().unwrap_or_default().to_owned(),
                    share: g["share"].as_f64().unwrap_or(0.0),
                    health: if g["healthy"].as_bool().unwrap_or(false) {
                        "healthy"
                    } else {
                        "unhealthy"
                    }
                    .to_owned(),
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
            listeners: vec![ListenerView {
                name: "web".to_owned(),
                mode: "cascade".to_owned(),
                groups: groups
                    .iter()
                    .map(|&(name, ok)| GroupView {
                        name: name.to_owned(),
                        share: 50.0,
                        health: if ok { "healthy" } else { "unhealthy" }.to_owned(),
                    })
                    .collect(),
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
}
