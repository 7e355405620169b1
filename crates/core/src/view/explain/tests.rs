//! The builder as a table: configs and facts in, the words and numbers out; and the document
//! against docs/explain.md.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use super::*;
use crate::balance::GroupBalancer;
use crate::config;
use crate::split::{self, ListenerPlan};

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Two groups, Beijing and Shanghai (a Beijing node ranks Beijing first), with `extra` keys
/// on the listener and each group's ratio, balance and endpoints.
fn config(listener: &str, bj: &str, sh: &str) -> String {
    format!(
        r#"
[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]
{listener}
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  {bj}
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
    weight = 2
    [[listener.group.endpoint]]
    address = "10.0.0.2:80"
  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  {sh}
    [[listener.group.endpoint]]
    address = "10.0.1.1:80"
    [[listener.group.endpoint]]
    address = "10.0.1.2:80"
"#
    )
}

/// The explanation for `client` (and a path) on a fresh Beijing node where the groups named
/// in `down` have every endpoint failing.
fn explain(text: &str, down: &[&str], client: &str, path: Option<&str>) -> Explain {
    let fail = |g: &config::Group, b: &GroupBalancer, now| {
        if down.contains(&g.name.as_str()) {
            b.endpoints()
                .iter()
                .for_each(|e| e.set_active_healthy(false, now));
        }
    };
    explain_with(text, fail, client, path)
}

/// [`explain`], with `prepare` setting each group's endpoint states first.
fn explain_with(
    text: &str,
    prepare: impl Fn(&config::Group, &GroupBalancer, Instant),
    client: &str,
    path: Option<&str>,
) -> Explain {
    let catalog = config::load_catalog(&root().join("regions/catalog.toml")).unwrap();
    let cfg = config::parse(text, Path::new("config.toml"), &catalog).unwrap();
    let l = &cfg.listeners[0];
    let now = Instant::now();
    let ranking = split::rank(l, &cfg.catalog, "cn-beijing", |_| None);
    let balancers: Vec<GroupBalancer> = l
        .groups
        .iter()
        .map(|g| {
            let b = GroupBalancer::new(g, l.protocol, now);
            prepare(g, &b, now);
            b
        })
        .collect();
    let facts = split::plan::facts(l, |i| l.groups[i].ratio, &balancers, now);
    let plan = ListenerPlan::build(l, ranking.clone(), facts, l.affinity);
    let facts = ExplainFacts {
        listener: l,
        region: "cn-beijing",
        planned: &plan,
        ranked: &ranking,
        balancers: balancers.iter().collect(),
        by_location: false,
    };
    let ask = Ask {
        client: client.parse().unwrap(),
        host: None,
        path,
        key: None,
        headers: &[],
    };
    Explain::build(&facts, &ask, now)
}

/// What a case expects: the mode, each group's (name, step, share) in priority order, the
/// chosen group (source-ip) or the number of chances (rotation), and how the pick decides.
struct Want {
    mode: &'static str,
    groups: &'static [(&'static str, &'static str, f64)],
    chosen: Option<&'static str>,
    chances: Option<usize>,
    pick_by: Option<&'static str>,
}

/// One row: what it shows, the config, the groups down, the request's path, what it expects.
type Case = (
    &'static str,
    String,
    &'static [&'static str],
    Option<&'static str>,
    Want,
);

#[test]
fn every_step_and_pick_in_words_and_numbers() {
    let hash = "balance = \"hash\"\n  hash_key = \"$remote_addr\"";
    let cases: Vec<Case> = vec![
        (
            "50/50: both take a first pass and half the leftover",
            config("", "ratio = 50", "ratio = 50"),
            &[],
            None,
            Want {
                mode: "cascade",
                groups: &[
                    ("beijing", "first-pass+leftover", 62.5),
                    ("shanghai", "first-pass+leftover", 37.5),
                ],
                chosen: None,
                chances: Some(2),
                pick_by: None,
            },
        ),
        (
            "50/100: Shanghai takes the whole remainder",
            config("", "ratio = 50", "ratio = 100"),
            &[],
            None,
            Want {
                mode: "cascade",
                groups: &[
                    ("beijing", "first-pass", 50.0),
                    ("shanghai", "first-pass", 50.0),
                ],
                chosen: None,
                chances: Some(2),
                pick_by: None,
            },
        ),
        (
            "100/100: Beijing takes all; the one group's pick is the answer",
            config("", "ratio = 100", "ratio = 100"),
            &[],
            None,
            Want {
                mode: "cascade",
                groups: &[
                    ("beijing", "first-pass", 100.0),
                    ("shanghai", "nothing", 0.0),
                ],
                chosen: None,
                chances: Some(1),
                pick_by: Some("rotation"),
            },
        ),
        (
            "ratio 0: nothing, not even leftover",
            config("", "ratio = 50", "ratio = 0"),
            &[],
            None,
            Want {
                mode: "cascade",
                groups: &[
                    ("beijing", "first-pass+leftover", 100.0),
                    ("shanghai", "nothing", 0.0),
                ],
                chosen: None,
                chances: Some(1),
                pick_by: Some("rotation"),
            },
        ),
        (
            "Beijing down, next-priority: Shanghai takes over, ratios ignored",
            config("", "ratio = 50", "ratio = 50"),
            &["beijing"],
            None,
            Want {
                mode: "failover",
                groups: &[("beijing", "nothing", 0.0), ("shanghai", "failover", 100.0)],
                chosen: None,
                chances: Some(1),
                pick_by: Some("rotation"),
            },
        ),
        (
            "Beijing down, recompute: the cascade over the rest",
            config("failover = \"recompute\"", "ratio = 50", "ratio = 50"),
            &["beijing"],
            None,
            Want {
                mode: "failover",
                groups: &[
                    ("beijing", "nothing", 0.0),
                    ("shanghai", "first-pass+leftover", 100.0),
                ],
                chosen: None,
                chances: Some(1),
                pick_by: Some("rotation"),
            },
        ),
        (
            "both down: no route",
            config("", "ratio = 50", "ratio = 50"),
            &["beijing", "shanghai"],
            None,
            Want {
                mode: "no-route",
                groups: &[("beijing", "nothing", 0.0), ("shanghai", "nothing", 0.0)],
                chosen: None,
                chances: Some(0),
                pick_by: None,
            },
        ),
        (
            "source-ip: the rendezvous hash names one group",
            config("affinity = \"source-ip\"", "ratio = 50", "ratio = 50"),
            &[],
            None,
            Want {
                mode: "cascade",
                groups: &[
                    ("beijing", "first-pass+leftover", 62.5),
                    ("shanghai", "first-pass+leftover", 37.5),
                ],
                chosen: Some("beijing"),
                chances: None,
                pick_by: Some("rotation"),
            },
        ),
        (
            "a rule: only its groups",
            config(
                "  [[listener.route]]\n  path_prefix = [\"/sh/\"]\n  groups = [\"shanghai\"]",
                "ratio = 50",
                "ratio = 50",
            ),
            &[],
            Some("/sh/x"),
            Want {
                mode: "cascade",
                groups: &[
                    ("beijing", "nothing", 0.0),
                    ("shanghai", "first-pass+leftover", 100.0),
                ],
                chosen: None,
                chances: Some(1),
                pick_by: Some("rotation"),
            },
        ),
        (
            "hash of the client address names the endpoint",
            config("", &format!("ratio = 100\n  {hash}"), "ratio = 100"),
            &[],
            None,
            Want {
                mode: "cascade",
                groups: &[
                    ("beijing", "first-pass", 100.0),
                    ("shanghai", "nothing", 0.0),
                ],
                chosen: None,
                chances: Some(1),
                pick_by: Some("hash"),
            },
        ),
        (
            "consistent hash: a ring point",
            config(
                "",
                &format!("ratio = 100\n  {hash}\n  consistent = true"),
                "ratio = 100",
            ),
            &[],
            None,
            Want {
                mode: "cascade",
                groups: &[
                    ("beijing", "first-pass", 100.0),
                    ("shanghai", "nothing", 0.0),
                ],
                chosen: None,
                chances: Some(1),
                pick_by: Some("hash consistent"),
            },
        ),
        (
            "ip_hash",
            config("", "ratio = 100\n  balance = \"ip_hash\"", "ratio = 100"),
            &[],
            None,
            Want {
                mode: "cascade",
                groups: &[
                    ("beijing", "first-pass", 100.0),
                    ("shanghai", "nothing", 0.0),
                ],
                chosen: None,
                chances: Some(1),
                pick_by: Some("ip_hash"),
            },
        ),
        (
            "least_conn: load-dependent",
            config("", "ratio = 100\n  balance = \"least_conn\"", "ratio = 100"),
            &[],
            None,
            Want {
                mode: "cascade",
                groups: &[
                    ("beijing", "first-pass", 100.0),
                    ("shanghai", "nothing", 0.0),
                ],
                chosen: None,
                chances: Some(1),
                pick_by: Some("load"),
            },
        ),
    ];
    for (what, text, down, path, want) in cases {
        let x = explain(&text, down, "203.0.113.9", path);
        assert_eq!(x.mode, want.mode, "{what}");
        let got: Vec<(&str, &str, f64)> = x
            .groups
            .iter()
            .map(|g| (g.name.as_str(), g.step.as_str(), g.share))
            .collect();
        assert_eq!(got, want.groups, "{what}");
        assert_eq!(
            x.chosen.as_ref().map(|c| c.group.as_str()),
            want.chosen,
            "{what}"
        );
        assert_eq!(x.chances.as_ref().map(Vec::len), want.chances, "{what}");
        assert_eq!(
            x.pick.as_ref().map(|p| p.by.as_str()),
            want.pick_by,
            "{what}"
        );
        // Every group says why, and the summary names the client.
        assert!(
            x.groups
                .iter()
                .all(|g| !g.share_reason.is_empty() && !g.rank_reason.is_empty())
        );
        assert!(
            x.summary.starts_with("203.0.113.9"),
            "{what}: {}",
            x.summary
        );
        // The document reads back as written.
        let text = serde_json::to_string(&x).unwrap();
        assert_eq!(serde_json::from_str::<Explain>(&text).unwrap(), x, "{what}");
    }
}

#[test]
fn a_failover_names_who_took_over_from_whom() {
    let x = explain(
        &config("", "ratio = 50", "ratio = 50"),
        &["beijing"],
        "203.0.113.9",
        None,
    );
    let f = x
        .group("shanghai")
        .unwrap()
        .failover
        .as_ref()
        .expect("a takeover");
    assert_eq!((f.from.as_str(), f.to.as_str()), ("beijing", "shanghai"));
    assert_eq!(f.policy, "next-priority");
    assert!(f.reason.contains("0 of 2 endpoints usable"), "{}", f.reason);
    assert_eq!(x.group("beijing").unwrap().health, "unhealthy");
}

#[test]
fn a_hash_pick_shows_its_key_and_walk() {
    let hash = "ratio = 100\n  balance = \"hash\"\n  hash_key = \"$remote_addr\"";
    let x = explain(&config("", hash, "ratio = 100"), &[], "203.0.113.9", None);
    let p = x.pick.expect("one group");
    let h = p.hash.expect("a hash walk");
    assert_eq!(h.key, "203.0.113.9");
    assert_eq!(h.space, 3);
    assert_eq!(h.steps.len(), 1);
    assert_eq!(p.endpoint.as_deref(), Some(h.steps[0].endpoint.as_str()));
    // Shares by weight: 2:1 of the key space.
    let shares: Vec<f64> = p.endpoints.iter().map(|e| e.share.unwrap()).collect();
    assert!((shares[0] - 200.0 / 3.0).abs() < 1e-9 && (shares[1] - 100.0 / 3.0).abs() < 1e-9);
}

#[test]
fn an_endpoint_that_cannot_take_it_says_why() {
    let text = r#"
[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
    [[listener.group.endpoint]]
    address = "10.0.0.2:80"
    [[listener.group.endpoint]]
    address = "10.0.0.3:80"
    max_conns = 1
    [[listener.group.endpoint]]
    address = "10.0.0.4:80"
    drain = true
    [[listener.group.endpoint]]
    address = "10.0.0.5:80"
"#;
    let x = explain_with(
        text,
        |_, b, now| {
            let e = b.endpoints();
            e[0].set_active_healthy(false, now);
            e[0].set_drained(true);
            e[1].set_enabled(false, now);
            let t = e[2].nanos(now);
            assert!(e[2].try_acquire(t, true), "one connection in flight");
        },
        "203.0.113.9",
        None,
    );
    let p = x.group("beijing").unwrap().pick.clone().expect("a pick");
    let why: Vec<(&str, Vec<&str>)> = p
        .endpoints
        .iter()
        .map(|e| {
            let reasons = e.why_not.iter().map(String::as_str).collect();
            (e.address.as_str(), reasons)
        })
        .collect();
    assert_eq!(
        why,
        [
            (
                "10.0.0.1:80",
                vec![
                    "checked out (its health checks fail)",
                    "drained (admin API)"
                ]
            ),
            ("10.0.0.2:80", vec!["disabled (admin API)"]),
            ("10.0.0.3:80", vec!["at max_conns (1 in flight)"]),
            (
                "10.0.0.4:80",
                vec!["drained (the config's or a fleet drain)"]
            ),
            ("10.0.0.5:80", vec![]),
        ]
    );
    let words = x.text();
    assert!(
        words.contains("10.0.0.2:80 weight 1 (cannot take it: disabled (admin API))"),
        "{words}"
    );
}

#[test]
fn graceful_grading_is_shown() {
    let x = explain(
        &config("failover = \"graceful\"", "ratio = 50", "ratio = 50"),
        &[],
        "203.0.113.9",
        None,
    );
    let g = x.group("beijing").unwrap();
    assert_eq!(g.step, "graceful");
    let graded = g.graceful.as_ref().unwrap();
    assert_eq!((graded.usable, graded.keep, graded.spill), (1.0, 1.0, 0.0));
}

#[test]
fn queries_name_the_parameter_at_fault() {
    let ok =
        Query::parse("listener=web&client=203.0.113.9&path=%2Fv1%2Fx%3Fq%3D1&host=a.b").unwrap();
    assert_eq!(ok.listener, "web");
    assert_eq!(ok.path.as_deref(), Some("/v1/x"));
    assert_eq!(ok.host.as_deref(), Some("a.b"));
    assert!(ok.headers.is_empty());
    let with = Query::parse("listener=web&client=::1&header=X-Tenant%3A+gold&header=a:b").unwrap();
    assert_eq!(
        with.headers,
        [("X-Tenant".into(), "gold".into()), ("a".into(), "b".into())]
    );
    for (query, parameter) in [
        ("listener=web&client=1.2.3.4&header=no-colon", "header"),
        ("listener=web&client=1.2.3.4&header=a+b:c", "header"),
        ("client=1.2.3.4", "listener"),
        ("listener=web", "client"),
        ("listener=web&client=", "client"),
        ("listener=web&client=nope", "client"),
        ("listener=web&client=1.2.3.4&path=v1", "path"),
    ] {
        assert_eq!(
            Query::parse(query).unwrap_err().parameter,
            parameter,
            "{query}"
        );
    }
}

fn keys(v: &impl Serialize) -> BTreeSet<String> {
    match serde_json::to_value(v).unwrap() {
        Value::Object(m) => m.keys().cloned().collect(),
        other => panic!("not an object: {other}"),
    }
}

/// docs/explain.md's tables: type name → the keys of its rows (as docs/status.md's test).
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(root().join("docs/explain.md")).unwrap();
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
    // Every optional key written: a source-ip failover under graceful with a rule and a hash.
    let mut x = explain(
        &config(
            "affinity = \"source-ip\"\nsticky = { cookie = \"gtd\" }\n  [[listener.route]]\n  path_prefix = [\"/\"]\n  groups = [\"beijing\", \"shanghai\"]",
            "ratio = 100\n  balance = \"hash\"\n  hash_key = \"$request_uri\"",
            "ratio = 100",
        ),
        &[],
        "203.0.113.9",
        Some("/x"),
    );
    x.request = Some(RequestAsked {
        host: Some("a.example".to_owned()),
        path: Some("/x".to_owned()),
        key: Some("k".to_owned()),
    });
    let g = x.groups[0].clone();
    let pick = g.pick.clone().expect("chosen group's pick");
    let mut e = pick.endpoints[0].clone();
    e.latency_ms = Some(1.0);
    e.feedback = Some(2.0);
    e.why_not = vec!["at max_conns (1 in flight)".to_owned()];
    x.chances = Some(vec![Chance {
        group: "beijing".to_owned(),
        percent: 100.0,
    }]);
    let takeover = Takeover {
        from: "a".to_owned(),
        to: "b".to_owned(),
        policy: "next-priority".to_owned(),
        reason: String::new(),
    };
    let graceful = Graceful {
        usable: 1.0,
        keep: 1.0,
        spill: 0.0,
        overprovisioning: 1.4,
    };
    let mut group = g.clone();
    group.failover = Some(takeover.clone());
    group.graceful = Some(graceful.clone());
    let chosen = x.chosen.clone().expect("source-ip");
    let hash = pick.hash.clone().expect("a hash walk");
    let written = BTreeMap::from([
        ("Explain".to_owned(), keys(&x)),
        ("RequestAsked".to_owned(), keys(x.request.as_ref().unwrap())),
        ("RuleMatch".to_owned(), keys(x.rule.as_ref().unwrap())),
        ("GroupExplain".to_owned(), keys(&group)),
        ("Takeover".to_owned(), keys(&takeover)),
        ("Graceful".to_owned(), keys(&graceful)),
        ("Chosen".to_owned(), keys(&chosen)),
        ("Score".to_owned(), keys(&chosen.scores[0])),
        ("Chance".to_owned(), keys(&x.chances.as_ref().unwrap()[0])),
        ("PickExplain".to_owned(), keys(&pick)),
        ("HashExplain".to_owned(), keys(&hash)),
        ("HashStepExplain".to_owned(), keys(&hash.steps[0])),
        ("PickEndpoint".to_owned(), keys(&e)),
    ]);
    assert_eq!(documented(), written);
}
