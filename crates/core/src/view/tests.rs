use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use super::*;
use crate::balance::GroupBalancer;
use crate::split::plan::{ListenerPlan, facts};
use crate::split::ranker::Ranker;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// An endpoint with every optional key written.
fn endpoint() -> EndpointView {
    EndpointView {
        address: "web.example:80".to_owned(),
        healthy: true,
        enabled: true,
        active: 2,
        weight: 3,
        fails: 1,
        passive_down: false,
        ejected: true,
        ejections: 1,
        ejected_for_s: Some(12.5),
        check: Some(CheckView {
            healthy: true,
            result: Some("passed".to_owned()),
            reason: Some("status 200".to_owned()),
            at_unix_ms: Some(1_796_188_898_705),
            passes_needed: 2,
            checks: 7,
        }),
        rtt_ms: Some(0.441),
        backup: false,
        down: false,
        drain: true,
        drained_by: Some(DrainView {
            source: "fleet".to_owned(),
            by: Some("ops@host".to_owned()),
            at_ms: Some(1_796_188_898_705),
            message: Some("kernel upgrade".to_owned()),
            target: Some("web/beijing/web.example:80".to_owned()),
        }),
        served: 16,
        errors: ErrorsView {
            status_5xx: 3,
            timeouts: 1,
            connect: 2,
            total: 6,
        },
        id: Some("web.example:80@127.0.0.1".to_owned()),
        resolved: Some(Some("127.0.0.1".to_owned())),
        dns_error: Some("not resolved yet".to_owned()),
    }
}

/// A group with every optional key written.
fn group<E>(endpoints: Vec<E>) -> GroupView<E> {
    GroupView {
        name: "beijing".to_owned(),
        priority: 1,
        rtt_ms: Some(1.5),
        rtt_source: "measured".to_owned(),
        region: "cn-beijing".to_owned(),
        ratio: 50.0,
        healthy: true,
        drained: false,
        first_pass: 50.0,
        leftover: 12.5,
        share: 62.5,
        method: "round_robin".to_owned(),
        endpoints,
        observed: Some(61.0),
        usable: Some(0.5),
        keep: Some(0.7),
        spill: Some(0.0),
        share_before: Some(60.0),
        delta: Some(2.5),
        recovering: Some(RecoveringView {
            since_s: 15.0,
            ramp_s: 60.0,
            fraction: 0.25,
            full_share: 37.5,
        }),
        parts: Some([50.0, 12.5, 0.0]),
        served: Some(16),
        rank: Some(RankView {
            position: 1,
            source: "measured".to_owned(),
            rtt_from: "connect".to_owned(),
            rtt_ms: Some(1.5),
            samples: 6,
            margin_ms: Some(5.0),
            pending: Some(PendingView {
                position: 2,
                rounds: 1,
                of: 3,
                held_s: 2.0,
                dwell_s: 30.0,
            }),
            last_change: Some(ChangeView {
                ago_s: 40.0,
                from_position: 2,
                to_position: 1,
                rtt_ms: vec![("beijing".to_owned(), Some(1.5))],
            }),
        }),
    }
}

/// A document with every optional key written.
fn status() -> Status {
    Status {
        node: NodeView {
            region: "cn-beijing".to_owned(),
            version: "0.1.0".to_owned(),
            uptime_s: 6,
            config: "gtd.toml".to_owned(),
        },
        listeners: vec![ListenerView {
            name: "web".to_owned(),
            protocol: "http".to_owned(),
            port: 8080,
            mode: "cascade".to_owned(),
            failover: "graceful".to_owned(),
            fail_open: false,
            groups: vec![group(vec![endpoint()])],
            routes: vec![RouteView {
                rule: 1,
                matches: "path /api".to_owned(),
                mode: "cascade".to_owned(),
                groups: vec![RouteShare {
                    name: "beijing".to_owned(),
                    share: 100.0,
                }],
            }],
        }],
        dns: BTreeMap::from([(
            "web.example".to_owned(),
            DnsView {
                state: "resolved".to_owned(),
                addresses: vec!["127.0.0.1".to_owned()],
                ttl_s: Some(300.0),
                error: None,
                checked_at_unix_ms: 1_796_188_903_852,
                next_lookup_in_s: 300.0,
            },
        )]),
        fleet: Some(FleetView {
            id: "cn-beijing@h:9100".to_owned(),
            prefix: "/gtd".to_owned(),
            etcd: vec!["http://127.0.0.1:2379".to_owned()],
            tls: false,
            user: None,
            applied: 3,
            source: "etcd".to_owned(),
            refused: Some(Refusal {
                revision: 4,
                reason: "gtd.toml:3:1: bad".to_owned(),
            }),
            connected: true,
            error: None,
        }),
    }
}

fn keys(v: &impl Serialize) -> BTreeSet<String> {
    match serde_json::to_value(v).unwrap() {
        Value::Object(m) => m.keys().cloned().collect(),
        other => panic!("not an object: {other}"),
    }
}

/// docs/status.md's tables: type name → the keys of its rows.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(root().join("docs/status.md")).unwrap();
    let mut tables: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current = None;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("### `") {
            current = Some(name.trim_end_matches('`').to_owned());
            tables.insert(name.trim_end_matches('`').to_owned(), BTreeSet::new());
        } else if let (Some(name), Some(row)) = (&current, line.strip_prefix("| `")) {
            let key = row.split('`').next().unwrap();
            tables.get_mut(name).unwrap().insert(key.to_owned());
        }
    }
    tables
}

#[test]
fn the_documented_keys_are_the_serialized_keys() {
    let s = status();
    let l = &s.listeners[0];
    let g = &l.groups[0];
    let e = &g.endpoints[0];
    let rank = g.rank.as_ref().unwrap();
    let fleet = s.fleet.as_ref().unwrap();
    let share = EndpointShare {
        address: "127.0.0.1:9001".to_owned(),
        share: Some(50.0),
        weight: 1,
        state: "up".to_owned(),
        observed: Some(49.0),
    };
    let events = Events {
        capacity: 100,
        events: vec![EventView {
            at_unix_ms: 1_796_188_898_705,
            kind: "failover".to_owned(),
            listener: Some("web".to_owned()),
            group: Some("beijing".to_owned()),
            endpoint: None,
            message: "cascade -> failover: beijing unhealthy; traffic from beijing 62.5 %, \
                      shanghai 37.5 % to shanghai 100 %"
                .to_owned(),
        }],
    };
    let written = BTreeMap::from([
        ("Status".to_owned(), keys(&s)),
        ("NodeView".to_owned(), keys(&s.node)),
        ("ListenerView".to_owned(), keys(l)),
        ("GroupView".to_owned(), keys(g)),
        ("EndpointView".to_owned(), keys(e)),
        ("CheckView".to_owned(), keys(e.check.as_ref().unwrap())),
        ("EndpointShare".to_owned(), keys(&share)),
        ("RankView".to_owned(), keys(rank)),
        (
            "RecoveringView".to_owned(),
            keys(g.recovering.as_ref().unwrap()),
        ),
        (
            "PendingView".to_owned(),
            keys(rank.pending.as_ref().unwrap()),
        ),
        (
            "ChangeView".to_owned(),
            keys(rank.last_change.as_ref().unwrap()),
        ),
        ("RouteView".to_owned(), keys(&l.routes[0])),
        ("RouteShare".to_owned(), keys(&l.routes[0].groups[0])),
        ("DnsView".to_owned(), keys(&s.dns["web.example"])),
        ("FleetView".to_owned(), keys(fleet)),
        ("Refusal".to_owned(), keys(fleet.refused.as_ref().unwrap())),
        ("ErrorsView".to_owned(), keys(&e.errors)),
        ("Events".to_owned(), keys(&events)),
        ("EventView".to_owned(), keys(&events.events[0])),
        ("DrainView".to_owned(), keys(e.drained_by.as_ref().unwrap())),
    ]);
    assert_eq!(documented(), written);
}

#[test]
fn a_document_reads_back_as_written() {
    let s = status();
    let text = serde_json::to_string_pretty(&s).unwrap();
    assert_eq!(serde_json::from_str::<Status>(&text).unwrap(), s);
}

#[test]
fn resolved_tells_an_absent_key_from_null() {
    let ip = EndpointView {
        resolved: None,
        ..endpoint()
    };
    let unresolved = EndpointView {
        resolved: Some(None),
        ..endpoint()
    };
    let ip_json = serde_json::to_value(&ip).unwrap();
    let unresolved_json = serde_json::to_value(&unresolved).unwrap();
    assert!(ip_json.get("resolved").is_none());
    assert_eq!(unresolved_json["resolved"], Value::Null);
    for e in [ip, unresolved] {
        let text = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<EndpointView>(&text).unwrap(), e);
    }
}

/// `sim`'s per-group rows and rule splits are these types, byte for byte: every group and
/// route of the golden JSON, and of `sim --format json` runs with graceful failover, forwarding
/// rules, `--verify`, `--compare` and `--client` (testdata/sim-rows.json, one document each),
/// reads into them and writes back to the same text.
#[test]
fn sims_groups_and_routes_are_these_types_byte_for_byte() {
    let golden = std::fs::read_to_string(root().join("tests/golden/sim.json")).unwrap();
    let runs = std::fs::read_to_string(root().join("crates/core/src/view/testdata/sim-rows.json"))
        .unwrap();
    let mut docs: Vec<Value> = serde_json::from_str(&runs).unwrap();
    docs.push(serde_json::from_str(&golden).unwrap());
    let mut seen = BTreeSet::new();
    for doc in &docs {
        for l in doc["listeners"].as_array().unwrap() {
            for r in l["regions"].as_array().unwrap() {
                for g in r["groups"].as_array().unwrap() {
                    let typed: GroupView<EndpointShare> =
                        serde_json::from_value(g.clone()).unwrap();
                    assert_eq!(
                        serde_json::to_string_pretty(&typed).unwrap(),
                        serde_json::to_string_pretty(g).unwrap()
                    );
                    seen.extend(g.as_object().unwrap().keys().cloned());
                }
                for route in r["routes"].as_array().into_iter().flatten() {
                    let typed: RouteView = serde_json::from_value(route.clone()).unwrap();
                    assert_eq!(
                        serde_json::to_string_pretty(&typed).unwrap(),
                        serde_json::to_string_pretty(route).unwrap()
                    );
                    seen.insert("(route)".to_owned());
                }
            }
        }
    }
    // Every optional key of a row occurs in some document.
    for key in [
        "observed",
        "usable",
        "keep",
        "spill",
        "share_before",
        "delta",
        "(route)",
    ] {
        assert!(seen.contains(key), "no {key} in the documents");
    }
}

#[test]
fn the_registry_part_leaves_out_what_changes_with_nothing_happening() {
    let l = status().listeners.remove(0);
    let r = l.for_registry();
    let g = &r.groups[0];
    assert_eq!((g.rtt_ms, g.parts, g.served), (None, None, None));
    assert!(g.rank.is_none() && g.endpoints.is_empty());
    assert_eq!((g.share, g.healthy, g.priority), (62.5, true, 1));
    assert_eq!(r.routes, l.routes);
}

/// The builder reads the plan and the facts it is given, nothing else: a listener of two
/// groups, one endpoint disabled.
#[test]
fn a_listener_is_built_from_its_plan_and_facts() {
    let catalog = crate::config::load_catalog(&root().join("regions/catalog.toml")).unwrap();
    let text = r#"
[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]
failover = "graceful"

  [[listener.route]]
  path_prefix = "/api"
  groups = ["shanghai"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 50

    [[listener.group.endpoint]]
    address = "127.0.0.1:9001"
    weight = 2

    [[listener.group.endpoint]]
    address = "127.0.0.1:9002"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = 100

    [[listener.group.endpoint]]
    address = "127.0.0.1:9003"
"#;
    let config = crate::config::parse(text, Path::new("gtd.toml"), &catalog).unwrap();
    let l = &config.listeners[0];
    let now = Instant::now();
    let balancers: Vec<GroupBalancer> = l
        .groups
        .iter()
        .map(|g| GroupBalancer::new(g, l.protocol, now))
        .collect();
    balancers[0].endpoints()[1].set_enabled(false, now);
    let ranker = Ranker::new(l, &catalog, "cn-beijing");
    let planned = ListenerPlan::build(
        l,
        ranker.ranking().clone(),
        facts(l, |i| l.groups[i].ratio, &balancers, now),
        l.affinity,
    );
    let groups = l
        .groups
        .iter()
        .zip(&balancers)
        .enumerate()
        .map(|(gi, (g, b))| GroupLive {
            rank: ranker.why(gi, now),
            endpoints: g
                .endpoints
                .iter()
                .zip(b.endpoints())
                .map(|(e, state)| EndpointFacts {
                    config: e,
                    state,
                    check: None,
                    rtt_ms: Some(0.4414),
                    served: 5,
                    dns_error: None,
                })
                .collect(),
        })
        .collect();
    let view = ListenerView::build(
        &ListenerFacts {
            config: l,
            planned: &planned,
            ranked: ranker.ranking(),
            groups,
        },
        now,
    );
    assert_eq!(
        (view.name.as_str(), view.failover.as_str(), view.port),
        ("web", "graceful", 8080)
    );
    let bj = view.group("beijing").unwrap();
    assert_eq!(bj.priority, 1);
    // Graceful: one of three weight units gone; the group keeps min(1, 1.4 × 2/3).
    assert_eq!(bj.usable, Some(2.0 / 3.0));
    assert_eq!(bj.served, Some(10));
    let off = bj.endpoint("127.0.0.1:9002").unwrap();
    assert!(!off.enabled && !off.healthy);
    assert_eq!(off.rtt_ms, Some(0.441));
    assert_eq!(off.resolved, None);
    let total: f64 = view.groups.iter().map(|g| g.share).sum();
    assert!((total - 100.0).abs() < 1e-9, "{total}");
    assert_eq!(view.routes.len(), 1);
    assert_eq!(view.routes[0].groups[0].name, "shanghai");
    assert_eq!(view.routes[0].groups[0].share, 100.0);
}
