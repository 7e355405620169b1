//! `gtd fleet`: the live nodes, the revision each serves, and where their views of group health
//! disagree; the nodes missing (registered once, gone now); read from one member's own store,
//! marked stale, when etcd has no quorum (a table, or JSON: the document `GET /fleet` serves);
//! `gtd fleet diff A B`.

use super::{Class, Classified};
use serde::Serialize;

use super::compare::{text_diff, validated};
use super::drain::Drain;
use super::expected::{Missing, missing};
use super::predict::predicted;
use super::ramp::record::View;
use super::registry::{Disagreement, EndpointErrors, Entry, Toggle, disagreements};
use super::stale::Stale;
use super::words::{plural, utc};
use super::{Access, Revision, Store};

/// Why `gtd fleet diff` could not compare two revisions.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// etcd, as the fleet's store reports it (its class is what [`super::retrying`]
    /// reads, its chain what [`super::describe`] tells).
    #[error(transparent)]
    Store(#[from] super::Error),
    /// A revision asked for is not kept.
    #[error("revision {revision} is not kept under {prefix}")]
    NotKept {
        /// The revision asked for.
        revision: u64,
        /// The key prefix.
        prefix: String,
    },
    /// The simulator, asked for the shares before and after.
    #[error("sim: {0}")]
    Sim(#[from] gtd_sim::Error),
}

impl Classified for Error {
    fn class(&self) -> Option<Class> {
        match self {
            Error::Store(e) => e.class(),
            _ => None,
        }
    }
}

/// As a `dyn Error`, for [`super::describe`].
impl AsRef<dyn std::error::Error + Send + Sync + 'static> for Error {
    fn as_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }
}

/// The fleet as read now: the latest revision and every registered node.
pub struct Fleet {
    /// Key prefix.
    pub prefix: String,
    /// The current revision (`None` before the first push).
    pub latest: Option<Revision>,
    /// Live nodes, by region and id.
    pub nodes: Vec<Entry>,
    /// Nodes that registered once and have no entry now, by region and id.
    pub missing: Vec<Missing>,
    /// Where the answer came from when etcd had no quorum (none: a linearizable read).
    pub stale: Option<Stale>,
    /// The fleet-wide drains (`gtd drain`), in key order.
    pub drains: Vec<Drain>,
    /// The fleet's ramp (`gtd push --ramp`), running or the last one stored.
    pub ramp: Option<View>,
}

/// The fleet as JSON (`gtd fleet --json`, `GET /fleet`; docs/operations.md), fields in the
/// order they are written.
#[derive(Debug, Serialize)]
pub struct Document<'a> {
    /// Key prefix.
    pub prefix: &'a str,
    /// The current revision (`null` before the first push).
    pub latest: Option<Latest<'a>>,
    /// Every node serves the latest revision.
    pub all_latest: bool,
    /// Live nodes: their registry entries.
    pub nodes: &'a [Entry],
    /// Where the nodes' views of a group's health differ.
    pub disagreements: Vec<Disagreement>,
    /// No expected node is missing.
    pub all_present: bool,
    /// Expected nodes without an entry now.
    pub missing: &'a [Missing],
    /// The answer is one member's own store, not a quorum read.
    pub stale: bool,
    /// That member and how far it had come (`null` for a quorum read).
    pub stale_from: Option<&'a Stale>,
    /// The fleet-wide drains.
    pub drains: &'a [Drain],
    /// The fleet's ramp, running or the last one stored (`null`: none was ever stored).
    pub ramp: Option<&'a View>,
}

/// The latest revision in [`Document`]: which, when and by whom.
#[derive(Debug, Serialize)]
pub struct Latest<'a> {
    /// Its number.
    pub revision: u64,
    /// When it was pushed, ms since the epoch.
    pub pushed_at_ms: u64,
    /// Who pushed it.
    pub pushed_by: &'a str,
    /// The revision it republished (`gtd push --rollback`).
    pub rollback_of: Option<u64>,
}

impl Fleet {
    /// Reads the current revision and the registry (an error is the store's, as it gives it).
    pub async fn read(store: &mut Store) -> Result<Fleet, super::Error> {
        let seen = store.current().await?;
        let latest = store.named(seen.number).await?;
        // The expected records before the entries: a node registers both in one transaction,
        // so read the other way round one registering between the two reads would show as
        // missing (and `gtd fleet` exit 3) though it had just arrived.
        let expected = store.expected().await?;
        let nodes = store.nodes().await?;
        let (drains, _) = store.drains().await?;
        // A record this version cannot read (a newer gtd's) hides the ramp, not the fleet.
        let ramp = match super::ramp::record::read(store).await {
            Ok(r) => r.map(|(r, _)| r.view()),
            Err(super::Error::NotARevision { .. }) => None,
            Err(e) => return Err(e),
        };
        Ok(Fleet {
            prefix: store.prefix().to_owned(),
            latest,
            missing: missing(&expected, &nodes),
            nodes,
            stale: None,
            drains,
            ramp,
        })
    }

    /// [`Fleet::read`] through a connection to a member that knows a leader; when that fails
    /// as an outage does (no quorum, an election, members gone), read from the first member
    /// that answers at all, from its own store, and marked [`Fleet::stale`]. The error is the
    /// linearizable read's when no member answers.
    pub async fn read_or_stale(access: &Access, prefix: &str) -> Result<Fleet, super::Error> {
        let fresh = async {
            let mut store = Store::connect(access, prefix).await?;
            Fleet::read(&mut store).await
        };
        match fresh.await {
            Err(e) if super::transient(&e) => {
                let Ok((mut store, stale)) =
                    Store::connect_stale(access, prefix, super::describe(&e)).await
                else {
                    return Err(e);
                };
                let mut fleet = Fleet::read(&mut store).await?;
                fleet.stale = Some(stale);
                Ok(fleet)
            }
            read => read,
        }
    }

    /// Whether every node serves the latest revision.
    pub fn all_latest(&self) -> bool {
        let latest = self.latest.as_ref().map(|r| r.revision);
        self.nodes.iter().all(|n| n.applied == latest)
    }

    /// The JSON document (`gtd fleet --json`, `GET /fleet`): a [`Document`] over this read.
    pub fn json(&self) -> Document<'_> {
        Document {
            prefix: &self.prefix,
            latest: self.latest.as_ref().map(|r| Latest {
                revision: r.revision,
                pushed_at_ms: r.pushed_at_ms,
                pushed_by: &r.pushed_by,
                rollback_of: r.rollback_of,
            }),
            all_latest: self.all_latest(),
            nodes: &self.nodes,
            disagreements: disagreements(&self.nodes),
            all_present: self.missing.is_empty(),
            missing: &self.missing,
            stale: self.stale.is_some(),
            stale_from: self.stale.as_ref(),
            drains: &self.drains,
            ramp: self.ramp.as_ref(),
        }
    }

    /// The table an operator reads.
    pub fn table(&self) -> String {
        let mut out = String::new();
        if let Some(s) = &self.stale {
            out.push_str(&s.banner("later pushes and registry changes"));
        }
        let latest = self.heading(&mut out);
        if self.nodes.is_empty() {
            self.missing_table(&mut out);
            return out;
        }
        let id_w = self
            .nodes
            .iter()
            .map(|n| n.id.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let region_w = self
            .nodes
            .iter()
            .map(|n| n.region.len())
            .max()
            .unwrap_or(6)
            .max(6);
        out.push_str(&format!(
            "\n{:<id_w$}  {:<region_w$}  {:>8}  {:>8}  listeners (mode: group share %, unhealthy marked !, drained as such)\n",
            "node", "region", "revision", "uptime"
        ));
        for n in &self.nodes {
            let rev = match n.applied {
                Some(a) if Some(a) == latest => a.to_string(),
                Some(a) => format!("{a} (old)"),
                None => "file".to_owned(),
            };
            let rev = if n.source == "cache" {
                format!("{rev} cached")
            } else {
                rev
            };
            let listeners: Vec<String> = n
                .listeners
                .iter()
                .map(|l| {
                    let groups: Vec<String> = l
                        .groups
                        .iter()
                        .map(|g| {
                            let bad = match (g.healthy, g.drained) {
                                (true, _) => "",
                                (false, true) => " (drained)",
                                (false, false) => "!",
                            };
                            format!("{}{bad} {}", g.name, trim(g.share))
                        })
                        .collect();
                    format!("{} {}: {}", l.name, l.mode, groups.join(", "))
                })
                .collect();
            out.push_str(&format!(
                "{:<id_w$}  {:<region_w$}  {:>8}  {:>8}  {}\n",
                n.id,
                n.region,
                rev,
                duration(n.uptime_s()),
                listeners.join(" · ")
            ));
            if !n.errors.is_empty() {
                out.push_str(&format!("{:<id_w$}  {}\n", "", errors_line(&n.errors)));
            }
            if !n.unhealthy.is_empty() {
                let each: Vec<String> = n
                    .unhealthy
                    .iter()
                    .map(|u| format!("{}/{}/{} ({})", u.listener, u.group, u.endpoint, u.cause))
                    .collect();
                out.push_str(&format!(
                    "{:<id_w$}  endpoints out: {}\n",
                    "",
                    each.join(", ")
                ));
            }
            if let Some(r) = &n.refused {
                let first = r.reason.lines().next().unwrap_or_default();
                let more = r.reason.lines().count().saturating_sub(1);
                out.push_str(&format!(
                    "{:<id_w$}  refused revision {}: {first}{}\n",
                    "",
                    r.revision,
                    if more > 0 {
                        format!(" (+{more} more)")
                    } else {
                        String::new()
                    }
                ));
            }
        }
        self.missing_table(&mut out);
        out.push_str(&self.set_apart());
        let disagree = disagreements(&self.nodes);
        if disagree.is_empty() {
            out.push_str("\nthe nodes agree on every group's health\n");
        } else {
            out.push_str("\nthe nodes disagree on group health:\n");
            for d in &disagree {
                out.push_str(&format!(
                    "  {}/{}: healthy on {}; unhealthy on {}\n",
                    d.listener,
                    d.group,
                    d.healthy.join(", "),
                    d.unhealthy.join(", ")
                ));
            }
        }
        out
    }

    /// The table's first lines: the latest revision, how many nodes serve it, and a ramp
    /// that is not over. Returns the latest revision.
    fn heading(&self, out: &mut String) -> Option<u64> {
        match &self.latest {
            Some(r) => out.push_str(&format!(
                "fleet {} · latest revision {} (pushed {} by {}{})\n",
                self.prefix,
                r.revision,
                utc(r.pushed_at_ms),
                r.pushed_by,
                r.rollback_of.map_or(String::new(), |n| format!(
                    ", rollback to revision {n}'s config"
                ))
            )),
            None => out.push_str(&format!("fleet {} · nothing published yet\n", self.prefix)),
        }
        let latest = self.latest.as_ref().map(|r| r.revision);
        let behind = self.nodes.iter().filter(|n| n.applied != latest).count();
        out.push_str(&match (self.nodes.len(), behind) {
            (0, _) => "no node is registered".to_owned(),
            (n, 0) => format!("{n} node{} · all serve the latest revision", plural(n)),
            (n, b) => format!("{n} node{} · {b} not on the latest revision", plural(n)),
        });
        if !self.missing.is_empty() {
            out.push_str(&format!(" · {} missing", self.missing.len()));
        }
        out.push('\n');
        if let Some(r) = self.ramp.as_ref().filter(|r| !r.state.done()) {
            out.push_str(&format!(
                "ramp {} · {} · step {}/{} · driven by {}{} (gtd ramp status)\n",
                r.id,
                if r.held {
                    "held"
                } else if r.drained {
                    "waiting on a drain"
                } else if r.going_back {
                    "going back"
                } else {
                    r.state.word()
                },
                r.at,
                r.steps.len(),
                r.owner.as_deref().unwrap_or("no node yet"),
                r.why.as_ref().map_or(String::new(), |w| format!(" · {w}"))
            ));
        }
        latest
    }

    /// The missing nodes' lines, when there are any.
    fn missing_table(&self, out: &mut String) {
        if self.missing.is_empty() {
            return;
        }
        out.push_str(
            "\nmissing (registered once, no entry now; `gtd fleet forget ID` once it is gone for good):\n",
        );
        for m in &self.missing {
            let since = match m.since_ms {
                Some(ms) => format!("missing since {}", utc(ms)),
                None => format!(
                    "missing (not seen leaving; registered {})",
                    utc(m.registered_at_ms)
                ),
            };
            let last = m
                .last_applied
                .map_or(String::new(), |r| format!(", last served revision {r}"));
            let at = m
                .etcd_revision
                .map_or(String::new(), |r| format!(", left at etcd revision {r}"));
            out.push_str(&format!("  {}  {}  {since}{last}{at}\n", m.id, m.region));
        }
    }
}

impl Fleet {
    /// The fleet-wide drains and the admin toggles of single nodes, as the table's lines.
    fn set_apart(&self) -> String {
        let mut out = String::new();
        if !self.drains.is_empty() {
            out.push_str(&format!(
                "\n{} fleet-wide drain{} (gtd undrain to end):\n",
                self.drains.len(),
                plural(self.drains.len())
            ));
            for d in &self.drains {
                let whole = if d.endpoint.is_none() {
                    " (every endpoint of the group)"
                } else {
                    ""
                };
                out.push_str(&format!(
                    "  {}{whole}: drained by {} at {}{}\n",
                    d.target(),
                    d.by,
                    utc(d.at_ms),
                    d.message
                        .as_deref()
                        .map_or(String::new(), |m| format!(": {m}"))
                ));
            }
        }
        let toggles: Vec<(&str, &Toggle)> = self
            .nodes
            .iter()
            .flat_map(|n| n.toggles.iter().map(move |t| (n.id.as_str(), t)))
            .collect();
        if !toggles.is_empty() {
            out.push_str("\nset apart on one node through its admin API:\n");
            for (id, t) in toggles {
                out.push_str(&format!(
                    "  {}/{}/{}: {} on {id}\n",
                    t.listener,
                    t.group,
                    t.endpoint,
                    t.what()
                ));
            }
        }
        out
    }
}

/// `gtd fleet diff A B`: the text difference of two kept revisions and its effect on shares,
/// per registered node from its entry, then the catalogue's.
pub async fn diff(store: &mut Store, a: u64, b: u64) -> Result<String, Error> {
    let mut get = async |n: u64| {
        store
            .revision(n)
            .await
            .map_err(Error::Store)?
            .ok_or_else(|| Error::NotKept {
                revision: n,
                prefix: store.prefix().to_owned(),
            })
    };
    let old = get(a).await?;
    let new = get(b).await?;
    let mut out = text_diff(&old, &new, &format!("revision {b} {}", new.config_name));
    out.push('\n');
    let name = new.config_file().display().to_string();
    let nodes = store.nodes().await.map_err(Error::Store)?;
    let (drains, _) = store.drains().await.map_err(Error::Store)?;
    out.push_str(&predicted(validated(&new)?, name, &old, &nodes, &drains)?);
    Ok(out)
}

/// A node's endpoints with errors in the last minute, as its entry says them (bucketed).
fn errors_line(errors: &[EndpointErrors]) -> String {
    let each: Vec<String> = errors
        .iter()
        .map(|e| format!("{}/{}/{} {}+", e.listener, e.group, e.endpoint, e.at_least))
        .collect();
    format!(
        "errors in the last minute (5xx, timeouts, connect failures) on {} endpoint{}: {}",
        errors.len(),
        plural(errors.len()),
        each.join(", ")
    )
}

/// A share without trailing zeros: 62.5, 100, 33.33.
fn trim(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

fn duration(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_796_149_202_000), "2026-12-01 18:20:02 UTC");
    }

    #[test]
    fn errors_read_as_one_line_per_node() {
        let e = |endpoint: &str, at_least| EndpointErrors {
            listener: "web".to_owned(),
            group: "beijing".to_owned(),
            endpoint: endpoint.to_owned(),
            at_least,
        };
        assert_eq!(
            errors_line(&[e("127.0.0.1:9001", 10), e("127.0.0.1:9002", 1)]),
            "errors in the last minute (5xx, timeouts, connect failures) on 2 endpoints: \
             web/beijing/127.0.0.1:9001 10+, web/beijing/127.0.0.1:9002 1+"
        );
    }

    #[test]
    fn drains_and_admin_toggles_are_listed_under_the_nodes() {
        let node: Entry = serde_json::from_value(serde_json::json!({
            "id": "cn-beijing@h:9100", "region": "cn-beijing", "admin": "127.0.0.1:9100",
            "bind": "127.0.0.1", "version": "0.1.0", "applied": 1, "source": "etcd",
            "refused": null, "uptime_s": 1, "updated_at_ms": 0, "listeners": [],
            "toggles": [{"listener": "web", "group": "shanghai",
                         "endpoint": "127.0.0.1:9101", "enabled": false},
                        {"listener": "web", "group": "shanghai",
                         "endpoint": "127.0.0.1:9102", "enabled": true, "drained": true}],
        }))
        .unwrap();
        let drain = |endpoint: Option<&str>, message: Option<&str>| Drain {
            listener: "web".to_owned(),
            group: "beijing".to_owned(),
            endpoint: endpoint.map(str::to_owned),
            by: "ops@vm".to_owned(),
            at_ms: 1_796_149_202_000,
            message: message.map(str::to_owned),
        };
        let mut f = Fleet {
            prefix: "/gtd".to_owned(),
            latest: None,
            nodes: vec![node],
            missing: Vec::new(),
            stale: None,
            drains: vec![
                drain(None, None),
                drain(Some("127.0.0.1:9001"), Some("disk")),
            ],
            ramp: None,
        };
        assert_eq!(
            f.set_apart(),
            "\n2 fleet-wide drains (gtd undrain to end):\n\
             \x20 web/beijing (every endpoint of the group): drained by ops@vm at 2026-12-01 18:20:02 UTC\n\
             \x20 web/beijing/127.0.0.1:9001: drained by ops@vm at 2026-12-01 18:20:02 UTC: disk\n\
             \nset apart on one node through its admin API:\n\
             \x20 web/shanghai/127.0.0.1:9101: disabled on cn-beijing@h:9100\n\
             \x20 web/shanghai/127.0.0.1:9102: drained on cn-beijing@h:9100\n"
        );
        assert!(f.table().contains("2 fleet-wide drains"));
        assert_eq!(
            serde_json::to_value(f.json()).unwrap()["drains"][1]["message"],
            "disk"
        );
        f.drains.clear();
        f.nodes[0].toggles.clear();
        assert_eq!(f.set_apart(), "");
    }

    /// A group drained across the fleet reads as a drain, not as a failure; an endpoint its
    /// checks took out is listed under its node, with the cause.
    #[test]
    fn a_drained_group_reads_as_drained_and_unhealthy_endpoints_are_listed() {
        let node: Entry = serde_json::from_value(serde_json::json!({
            "id": "cn-beijing@h:9100", "region": "cn-beijing", "admin": "127.0.0.1:9100",
            "bind": "127.0.0.1", "version": "0.1.0", "applied": 1, "source": "etcd",
            "refused": null, "uptime_s": 1, "updated_at_ms": 0,
            "listeners": [{"name": "web", "protocol": "http", "port": 80, "mode": "failover",
                           "failover": "next-priority", "fail_open": false,
                           "groups": [{"name": "a", "healthy": false, "drained": true, "share": 0.0},
                                      {"name": "b", "healthy": false, "share": 0.0},
                                      {"name": "c", "healthy": true, "share": 100.0}]}],
            "unhealthy": [{"listener": "web", "group": "b", "endpoint": "127.0.0.1:9002",
                           "cause": "checks"}],
        }))
        .unwrap();
        let f = Fleet {
            prefix: "/gtd".to_owned(),
            latest: None,
            nodes: vec![node],
            missing: Vec::new(),
            stale: None,
            drains: Vec::new(),
            ramp: None,
        };
        let table = f.table();
        assert!(
            table.contains("web failover: a (drained) 0, b! 0, c 100"),
            "{table}"
        );
        assert!(
            table.contains("endpoints out: web/b/127.0.0.1:9002 (checks)"),
            "{table}"
        );
        let doc = serde_json::to_value(f.json()).unwrap();
        assert_eq!(doc["nodes"][0]["unhealthy"][0]["cause"], "checks");
    }

    #[test]
    fn the_document_is_the_one_written_by_hand_before() {
        // `gtd fleet --json` and `GET /fleet` were a `json!` value; the typed document writes
        // the same bytes (fields in the same order, `null` for what is absent).
        let node = |id: &str, applied: u64| -> Entry {
            serde_json::from_value(serde_json::json!({
                "id": id, "region": "cn-beijing", "admin": "127.0.0.1:9100",
                "bind": "127.0.0.1", "version": "0.1.0", "applied": applied, "source": "etcd",
                "refused": null, "uptime_s": 1, "updated_at_ms": 0, "listeners": [],
                "toggles": [{"listener": "web", "group": "shanghai",
                             "endpoint": "127.0.0.1:9101", "enabled": false}],
            }))
            .unwrap()
        };
        let latest: Revision = serde_json::from_value(serde_json::json!({
            "revision": 3, "pushed_at_ms": 1_796_149_202_000_u64, "pushed_by": "ops@vm",
            "config_name": "config.toml", "config": "", "catalog_name": "catalog.toml",
            "catalog": "", "rollback_of": 1,
        }))
        .unwrap();
        let fleets = [
            Fleet {
                prefix: "/gtd".to_owned(),
                latest: Some(latest),
                nodes: vec![node("a", 3), node("b", 2)],
                missing: vec![Missing {
                    id: "c".to_owned(),
                    region: "cn-shanghai".to_owned(),
                    admin: "127.0.0.1:9101".to_owned(),
                    registered_at_ms: 5,
                    since_ms: Some(7),
                    last_applied: Some(2),
                    etcd_revision: Some(42),
                }],
                stale: Some(Stale {
                    member: "http://127.0.0.1:2379".to_owned(),
                    raft_index: 9,
                    revision: 8,
                    leader: false,
                    why: "no leader".to_owned(),
                }),
                drains: vec![Drain {
                    listener: "web".to_owned(),
                    group: "beijing".to_owned(),
                    endpoint: None,
                    by: "ops@vm".to_owned(),
                    at_ms: 1,
                    message: Some("disk".to_owned()),
                }],
                ramp: None,
            },
            Fleet {
                prefix: "/gtd".to_owned(),
                latest: None,
                nodes: Vec::new(),
                missing: Vec::new(),
                stale: None,
                drains: Vec::new(),
                ramp: None,
            },
        ];
        for f in &fleets {
            let by_hand = serde_json::json!({
                "prefix": f.prefix,
                "latest": f.latest.as_ref().map(|r| serde_json::json!({
                    "revision": r.revision, "pushed_at_ms": r.pushed_at_ms, "pushed_by": r.pushed_by,
                    "rollback_of": r.rollback_of,
                })),
                "all_latest": f.all_latest(),
                "nodes": f.nodes,
                "disagreements": disagreements(&f.nodes),
                "all_present": f.missing.is_empty(),
                "missing": f.missing,
                "stale": f.stale.is_some(),
                "stale_from": f.stale,
                "drains": f.drains,
                "ramp": f.ramp,
            });
            assert_eq!(
                serde_json::to_string_pretty(&f.json()).unwrap(),
                serde_json::to_string_pretty(&by_hand).unwrap()
            );
        }
    }

    #[test]
    fn shares_and_durations_read_short() {
        assert_eq!(trim(62.5), "62.5");
        assert_eq!(trim(100.0), "100");
        assert_eq!(trim(33.333), "33.33");
        assert_eq!(duration(59), "59s");
        assert_eq!(duration(130), "2m10s");
        assert_eq!(duration(7300), "2h01m");
    }
}
