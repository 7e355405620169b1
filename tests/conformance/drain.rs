//! A fleet-wide drain (`gtd drain`, docs/operations.md): published through etcd, every node
//! applies it as the config's own `drain` (no new traffic, an open connection finishes), shows
//! who drained it in `/status`, applies it at once when restarted, keeps it through a new
//! revision, and `gtd undrain` ends it; `gtd fleet` lists it, and an admin toggle made on one
//! node too.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use gtd::view::EndpointView;

use crate::etcd::*;
use crate::fleet::*;

/// What a node logs when the drains it holds change.
const APPLYING: &str = "fleet: the drains changed";

/// Endpoint `address` of `listener`/`group` in `node`'s `/status`.
fn endpoint(node: &NodeProc, listener: &str, group: &str, address: &str) -> EndpointView {
    let status = node.status();
    let l = status
        .listeners
        .iter()
        .find(|l| l.name == listener)
        .unwrap();
    let g = l.groups.iter().find(|g| g.name == group).unwrap();
    g.endpoints
        .iter()
        .find(|e| e.address == address)
        .unwrap_or_else(|| panic!("no endpoint {address} in {listener}/{group}"))
        .clone()
}

/// The first endpoint of `listener`/`group` in `cfg`.
fn first_endpoint(cfg: &Cfg, listener: &str, group: &str) -> String {
    let owners = &cfg.owners()[listener];
    owners
        .iter()
        .find(|(_, g)| *g == group)
        .map(|(a, _)| a.clone())
        .unwrap()
}

/// `gtd ARGS` against the cluster, which must succeed; its stdout.
fn gtd_ok(cluster: &Cluster, args: &[&str]) -> String {
    let out = gtd_as(cluster, As::Pusher, args);
    assert!(
        out.status.success(),
        "gtd {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `n` decisions of `listener` on `node`: the endpoints that answered, and how many failed.
fn traffic(fleet: &Fleet, node: &NodeProc, listener: &str, n: usize) -> Tally {
    let (proto, port, _) = fleet.cfg.protocol(listener);
    drive(
        &proto,
        SocketAddr::new(node.ip, port),
        n,
        "conformance.test",
        "/",
    )
}

#[test]
fn a_fleet_drain_reaches_every_node_survives_restarts_and_undrain_ends_it() {
    let mut cluster = Cluster::start();
    let mut cfg = Cfg::shipped();
    let mut fleet = start_fleet(&cluster, &cfg, std::slice::from_ref(&cfg));
    fleet.wait_health(&[]);

    // A connection held open through the Beijing node, to whichever game endpoint it reaches.
    let beijing = fleet.node("cn-beijing");
    let (_, game_port, _) = fleet.cfg.protocol("game");
    let mut held = TcpStream::connect((beijing.ip, game_port)).unwrap();
    held.set_read_timeout(Some(WAIT)).unwrap();
    let mut line = Vec::new();
    let mut byte = [0_u8; 1];
    while held.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let held_at = String::from_utf8(line).unwrap();
    let held_group = fleet.cfg.owners()["game"][&held_at].clone();
    let web = first_endpoint(&fleet.cfg, "web", "beijing");

    // A name that matches nothing is refused, naming it; nothing is written.
    let out = gtd_as(&cluster, As::Pusher, &["drain", "web/tokyo/127.0.0.1:1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no group \"tokyo\" in listener \"web\""),
        "{err}"
    );
    assert!(
        fleet_json(&cluster)["drains"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    let game_target = format!("game/{held_group}/{held_at}");
    let web_target = format!("web/beijing/{web}");
    gtd_ok(&cluster, &["drain", &game_target, "-m", "kernel upgrade"]);
    gtd_ok(&cluster, &["drain", &web_target]);

    // Every node shows both drained, by the fleet, with who and why.
    for n in &fleet.nodes {
        wait(&format!("{}: both drained", n.region), || {
            let g = endpoint(n, "game", &held_group, &held_at);
            let w = endpoint(n, "web", "beijing", &web);
            g.drain && w.drain
        });
        let g = endpoint(n, "game", &held_group, &held_at);
        let by = g.drained_by.expect("drained_by");
        assert_eq!(by.source, "fleet");
        assert_eq!(by.message.as_deref(), Some("kernel upgrade"));
        assert_eq!(by.target.as_deref(), Some(game_target.as_str()));
        assert!(by.by.is_some_and(|b| b.contains('@')));
    }

    // No new traffic reaches them, from any node; the rest answers everything.
    for n in &fleet.nodes {
        let t = traffic(&fleet, n, "web", 200);
        assert_eq!(t.failed, 0, "{}: {t:?}", n.region);
        assert!(!t.answers.contains_key(&web), "{}: {t:?}", n.region);
        let t = traffic(&fleet, n, "game", 100);
        assert_eq!(t.failed, 0, "{}: {t:?}", n.region);
        assert!(!t.answers.contains_key(&held_at), "{}: {t:?}", n.region);
    }
    // The connection opened before the drain carries on: the node still counts it on its
    // endpoint, and neither side closed it.
    assert!(endpoint(fleet.node("cn-beijing"), "game", &held_group, &held_at).active >= 1);
    held.write_all(b"still here\n").unwrap();
    held.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let e = held
        .read(&mut byte)
        .expect_err("the endpoint sends nothing more");
    assert!(
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "the held connection was closed: {e}"
    );
    drop(held);

    // A new revision keeps the drains.
    cfg.set_ratio("web/shanghai", 30.0);
    fleet.rewrite(&cfg);
    push(&cluster, &fleet.config);
    wait_applied(&fleet, 2);
    for n in &fleet.nodes {
        assert!(endpoint(n, "web", "beijing", &web).drain, "{}", n.region);
    }

    // A node restarted afterwards applies them from its start: with the revision it starts
    // with, not later when its watch begins (it would log that the drains changed).
    let changes = |n: &NodeProc| {
        std::fs::read_to_string(&n.log)
            .unwrap_or_default()
            .matches(APPLYING)
            .count()
    };
    fleet.kill_node("cn-shanghai");
    let before = changes(fleet.node("cn-shanghai"));
    fleet.restart_node("cn-shanghai");
    let shanghai = fleet.node("cn-shanghai");
    wait_fleet(shanghai, "connected again", |f| f.connected);
    let w = endpoint(shanghai, "web", "beijing", &web);
    assert!(w.drain, "restarted without the drain: {w:?}");
    assert_eq!(w.drained_by.map(|d| d.source).as_deref(), Some("fleet"));
    let t = traffic(&fleet, shanghai, "web", 200);
    assert!(!t.answers.contains_key(&web), "{t:?}");
    assert_eq!(
        changes(shanghai),
        before,
        "the restarted node applied the drains late:\n{}",
        shanghai.log_tail()
    );

    // A node restarted while etcd is down starts from its caches: the revision's and the
    // drains'.
    cluster.stop_all();
    fleet.kill_node("cn-beijing");
    fleet.restart_node("cn-beijing");
    let beijing = fleet.node("cn-beijing");
    assert_eq!(beijing.fleet().source, "cache");
    let w = endpoint(beijing, "web", "beijing", &web);
    assert!(w.drain, "restarted from the cache without the drain: {w:?}");
    let t = traffic(&fleet, beijing, "web", 200);
    assert!(!t.answers.contains_key(&web), "{t:?}");
    cluster.start_all();
    for n in &fleet.nodes {
        wait_fleet(n, "connected again", |f| f.connected && f.source == "etcd");
    }

    // `gtd fleet` lists them; and an endpoint disabled on one node through its admin API.
    let other = first_endpoint(&fleet.cfg, "web", "shanghai");
    let beijing = fleet.node("cn-beijing");
    let (code, body) = http(
        beijing.admin,
        "POST",
        &format!("/endpoints/web/shanghai/{other}/disable"),
    )
    .unwrap();
    assert_eq!(code, 200, "{body}");
    let mut doc = serde_json::Value::Null;
    wait("the admin toggle in gtd fleet", || {
        doc = fleet_json(&cluster);
        doc["nodes"].as_array().unwrap().iter().any(|n| {
            n["toggles"].as_array().is_some_and(|t| {
                t.iter()
                    .any(|t| t["endpoint"] == other.as_str() && t["enabled"] == false)
            })
        })
    });
    let drains: Vec<&str> = doc["drains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["endpoint"].as_str().unwrap())
        .collect();
    assert_eq!(drains.len(), 2, "{doc:#}");
    assert!(drains.contains(&web.as_str()) && drains.contains(&held_at.as_str()));
    let table = gtd_ok(&cluster, &["fleet"]);
    assert!(table.contains("2 fleet-wide drains"), "{table}");
    assert!(
        table.contains(&format!("{game_target}: drained by ")),
        "{table}"
    );
    assert!(table.contains("kernel upgrade"), "{table}");
    assert!(
        table.contains(&format!("web/shanghai/{other}: disabled on cn-beijing@")),
        "{table}"
    );
    // Both are on the node's event timeline, where they are.
    let events = timeline(beijing);
    let has = |kind: &str, endpoint: &str, words: &str| {
        events.events.iter().any(|e| {
            e.kind == kind && e.endpoint.as_deref() == Some(endpoint) && e.message.contains(words)
        })
    };
    assert!(
        has("drain", &web, "drained across the fleet by "),
        "{events:#?}"
    );
    assert!(
        has("admin", &other, "disabled through this node's admin API"),
        "{events:#?}"
    );

    // `gtd undrain` ends them everywhere: the endpoint takes traffic again.
    let out = gtd_ok(&cluster, &["undrain", &web_target]);
    assert!(out.contains("undrained"), "{out}");
    gtd_ok(&cluster, &["undrain", &game_target]);
    for n in &fleet.nodes {
        wait(&format!("{}: undrained", n.region), || {
            let w = endpoint(n, "web", "beijing", &web);
            !w.drain && w.drained_by.is_none() && !endpoint(n, "game", &held_group, &held_at).drain
        });
        let t = traffic(&fleet, n, "web", 200);
        assert!(t.answers.contains_key(&web), "{}: {t:?}", n.region);
    }
    assert!(
        fleet_json(&cluster)["drains"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let events = timeline(fleet.node("cn-shanghai"));
    assert!(
        events
            .events
            .iter()
            .any(|e| e.kind == "drain" && e.message.starts_with("undrained across the fleet")),
        "{events:#?}"
    );
}

/// `node`'s `GET /events`.
fn timeline(node: &NodeProc) -> gtd::view::Events {
    let (code, body) = http(node.admin, "GET", "/events").unwrap();
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}
