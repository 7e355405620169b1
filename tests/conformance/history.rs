//! The fleet's memory on a real three-member etcd cluster: `gtd fleet history` lists each
//! revision with who pushed it, its message and what changed; a node gone from the registry is
//! shown missing until `gtd fleet forget`; and `gtd fleet`, `gtd fleet history` and a node's
//! `GET /fleet` answer without a quorum, from one member's own store, marked stale.

use serde_json::Value;

use crate::etcd::*;
use crate::fleet::*;

/// `gtd push` of `config` as the pusher, with `args` after it; its stdout (it must succeed).
fn push_with(cluster: &Cluster, config: &std::path::Path, args: &[&str]) -> String {
    let mut all = vec!["push", "--config"];
    let path = config.display().to_string();
    all.push(&path);
    all.extend(args);
    let out = gtd_as(cluster, As::Pusher, &all);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    said
}

/// `gtd fleet ACCESS ARGS` as the pusher (a subcommand comes after `gtd fleet`'s flags).
fn gtd_fleet(cluster: &Cluster, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_gtd"))
        .arg("fleet")
        .args(cluster.access(As::Pusher))
        .args(args)
        .output()
        .unwrap()
}

/// The lines of `changes.items` of a history item, as `kind name change detail`.
fn items(revision: &Value) -> Vec<String> {
    revision["changes"]["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no changes: {revision:#}"))
        .iter()
        .map(|i| {
            format!(
                "{} {} {} {}",
                i["kind"], i["name"], i["change"], i["detail"]
            )
            .replace('"', "")
            .trim()
            .to_owned()
        })
        .collect()
}

#[test]
fn history_lists_who_pushed_each_revision_its_message_and_what_changed() {
    let cluster = Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let mut cfg = Cfg::shipped();
    cfg.write(&config);
    push_with(&cluster, &config, &["-m", "the first fleet"]);
    cfg.set_ratio("web/shanghai", 10.0);
    cfg.write(&config);
    push_with(&cluster, &config, &["--message", "less to shanghai"]);
    // Without a message: the game listener moves.
    let (_, old_port, _) = cfg.protocol("game");
    let port = free_port(false);
    std::fs::write(
        &config,
        std::fs::read_to_string(&config)
            .unwrap()
            .replace(&format!("port = {old_port}"), &format!("port = {port}")),
    )
    .unwrap();
    push_with(&cluster, &config, &[]);
    let back = gtd_as(
        &cluster,
        As::Pusher,
        &["push", "--rollback", "2", "-m", "game back"],
    );
    assert!(back.status.success(), "{back:?}");

    let h = json_of(gtd_fleet(&cluster, &["history", "--json"]));
    let revs = h["revisions"].as_array().unwrap();
    let numbers: Vec<u64> = revs
        .iter()
        .map(|r| r["revision"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, [4, 3, 2, 1], "{h:#}");
    let messages: Vec<&str> = revs
        .iter()
        .map(|r| r["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        messages,
        ["game back", "", "less to shanghai", "the first fleet"],
        "{h:#}"
    );
    // Who: this user at this host, as `gtd push` records it (no etcd users here).
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for r in revs {
        let by = r["pushed_by"].as_str().unwrap();
        assert!(by.ends_with(&format!("@{}", host.trim())), "{h:#}");
        assert_eq!(r["etcd_user"], Value::Null, "{h:#}");
        assert!(r["pushed_at_ms"].as_u64().unwrap() > 0, "{h:#}");
    }
    assert_eq!(
        items(&revs[2]),
        ["ratio web/shanghai changed 50 -> 10"],
        "{h:#}"
    );
    assert_eq!(revs[2]["changes"]["lines_added"], 1, "{h:#}");
    assert_eq!(revs[2]["changes"]["lines_removed"], 1, "{h:#}");
    assert_eq!(
        items(&revs[1]),
        [format!("listener game changed port {old_port} -> {port}")],
        "{h:#}"
    );
    assert_eq!(revs[0]["rollback_of"], 2, "{h:#}");
    assert_eq!(revs[0]["changes"]["against"], 3, "{h:#}");
    assert_eq!(
        items(&revs[0]),
        [format!("listener game changed port {port} -> {old_port}")],
        "{h:#}"
    );
    assert_eq!(revs[3]["changes"], Value::Null, "{h:#}");

    // What an operator reads, and --limit.
    let table = gtd_fleet(&cluster, &["history", "--limit", "3"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("3 kept revisions, newest first"), "{table}");
    assert!(table.contains("\"less to shanghai\""), "{table}");
    assert!(table.contains("    web/shanghai ratio 50 -> 10"), "{table}");
    assert!(
        table.contains("(rollback to revision 2's config)"),
        "{table}"
    );
    assert!(!table.contains("revision 1 "), "{table}");
}

#[test]
fn a_node_gone_from_the_registry_is_missing_until_forgotten() {
    let cluster = Cluster::start();
    let cfg = Cfg::shipped();
    let mut fleet = start_fleet(&cluster, &cfg, &[]);
    let id_of = |region: &str| {
        let mut id = None;
        wait(&format!("{region} registered"), || {
            id = fleet_json(&cluster)["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|n| n["region"] == region)
                .map(|n| n["id"].as_str().unwrap().to_owned());
            id.is_some()
        });
        id.unwrap()
    };
    let shanghai = id_of("cn-shanghai");
    id_of("cn-beijing");
    assert_eq!(fleet_json(&cluster)["missing"], serde_json::json!([]));

    // SIGKILL: its lease (2 s) runs out and its entry goes; Beijing sees it go.
    fleet.kill_node("cn-shanghai");
    let mut report = Value::Null;
    wait("Shanghai missing, with since when", || {
        report = fleet_json(&cluster);
        report["missing"][0]["since_ms"].is_u64()
    });
    let missing = report["missing"].as_array().unwrap();
    assert_eq!(missing.len(), 1, "{report:#}");
    assert_eq!(missing[0]["id"], shanghai.as_str(), "{report:#}");
    assert_eq!(missing[0]["region"], "cn-shanghai", "{report:#}");
    assert_eq!(missing[0]["last_applied"], 1, "{report:#}");
    assert!(
        missing[0]["etcd_revision"].as_i64().unwrap() > 0,
        "{report:#}"
    );
    assert_eq!(report["nodes"].as_array().unwrap().len(), 1, "{report:#}");
    let table = gtd_as(&cluster, As::Pusher, &["fleet"]);
    assert_eq!(table.status.code(), Some(3), "{table:?}");
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("1 node · all serve the latest revision · 1 missing"),
        "{table}"
    );
    assert!(
        table.contains(&format!("  {shanghai}  cn-shanghai  missing since ")),
        "{table}"
    );
    assert!(table.contains("last served revision 1"), "{table}");

    // Still missing later: nothing but `forget` removes it.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(fleet_json(&cluster)["missing"][0]["id"], shanghai.as_str());
    let forget = gtd_fleet(&cluster, &["forget", &shanghai]);
    assert!(forget.status.success(), "{forget:?}");
    assert!(
        String::from_utf8_lossy(&forget.stdout).contains(&format!("forgot node {shanghai}")),
        "{forget:?}"
    );
    let report = fleet_json(&cluster);
    assert_eq!(report["missing"], serde_json::json!([]), "{report:#}");
    assert_eq!(report["all_present"], true, "{report:#}");
    let ok = gtd_as(&cluster, As::Pusher, &["fleet"]);
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");

    // A node that is not expected: an error naming it.
    let again = gtd_fleet(&cluster, &["forget", &shanghai]);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains(&format!("node {shanghai:?} is not expected")),
        "{err}"
    );

    // Back: registered, and expected again.
    fleet.restart_node("cn-shanghai");
    id_of("cn-shanghai");
    let records = cluster.etcdctl(&["get", "--prefix", "/gtd/expected/", "--keys-only"]);
    let keys = String::from_utf8_lossy(&records.stdout);
    assert!(
        keys.contains(&format!("/gtd/expected/{shanghai}")),
        "{keys}"
    );
}

#[test]
fn without_a_quorum_gtd_fleet_answers_from_one_member_marked_stale() {
    let mut cluster = Cluster::start();
    let cfg = Cfg::shipped();
    let fleet = start_fleet(&cluster, &cfg, &[]);
    wait("both nodes registered", || {
        fleet_json(&cluster)["nodes"].as_array().unwrap().len() == 2
    });
    let fresh = fleet_json(&cluster);
    assert_eq!(fresh["stale"], false, "{fresh:#}");
    assert_eq!(fresh["stale_from"], Value::Null, "{fresh:#}");

    cluster.kill(0);
    cluster.kill(1);
    let out = gtd_as(&cluster, As::Pusher, &["fleet", "--json"]);
    let report = json_of(out);
    assert_eq!(report["stale"], true, "{report:#}");
    let from = &report["stale_from"];
    assert_eq!(from["member"], cluster.endpoints_of(&[2]), "{report:#}");
    assert!(from["raft_index"].as_u64().unwrap() > 0, "{report:#}");
    assert!(from["revision"].as_i64().unwrap() > 0, "{report:#}");
    assert_eq!(report["latest"]["revision"], 1, "{report:#}");
    assert_eq!(report["nodes"].as_array().unwrap().len(), 2, "{report:#}");

    let table = gtd_as(&cluster, As::Pusher, &["fleet"]);
    assert!(table.status.success(), "{table:?}");
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.starts_with(&format!(
            "STALE: read from {}'s own store (raft index ",
            cluster.endpoints_of(&[2])
        )),
        "{table}"
    );
    assert!(
        table.contains("2 nodes · all serve the latest revision"),
        "{table}"
    );

    // The same rule for the history: from that member's store, marked stale (it used to fail
    // once the retries of an election ran out).
    let history = json_of(gtd_fleet(&cluster, &["history", "--json"]));
    assert_eq!(history["stale"], true, "{history:#}");
    assert_eq!(
        history["stale_from"]["member"],
        cluster.endpoints_of(&[2]),
        "{history:#}"
    );
    assert_eq!(history["revisions"][0]["revision"], 1, "{history:#}");
    let table = gtd_fleet(&cluster, &["history"]);
    assert!(table.status.success(), "{table:?}");
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.starts_with("STALE: read from "), "{table}");
    assert!(table.contains("\nrevision 1  "), "{table}");

    // And for a node's GET /fleet (it used to answer 503).
    for n in &fleet.nodes {
        let (code, body) = http(n.admin, "GET", "/fleet").expect("the node answers");
        assert_eq!(code, 200, "{}: {body}", n.region);
        let doc: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(doc["stale"], true, "{doc:#}");
        assert_eq!(doc["latest"]["revision"], 1, "{doc:#}");
        assert_eq!(doc["nodes"].as_array().unwrap().len(), 2, "{doc:#}");
    }
}

/// A node role granted before `PREFIX/expected/` existed (the roles of an older gtd): the node
/// still keeps its registry entry, and says once what it lacks.
#[test]
fn a_node_that_may_not_write_its_expected_record_still_registers() {
    let mut cluster = Cluster::start_secure();
    cluster.enable_users();
    let out = cluster.etcdctl(&[
        "role",
        "revoke-permission",
        "gtd-node",
        "--prefix=true",
        "/gtd/expected/",
    ]);
    assert!(out.status.success(), "{out:?}");
    let cfg = Cfg::shipped();
    let fleet = start_fleet(&cluster, &cfg, &[]);
    wait("both nodes registered", || {
        fleet_json(&cluster)["nodes"].as_array().unwrap().len() == 2
    });
    for n in &fleet.nodes {
        wait(
            &format!("{} saying it writes its entry alone", n.region),
            || {
                std::fs::read_to_string(&n.log)
                    .unwrap_or_default()
                    .contains("may not write its expected record")
            },
        );
    }
    let records = cluster.etcdctl(&["get", "--prefix", "/gtd/expected/", "--keys-only"]);
    assert!(records.status.success(), "{records:?}");
    assert_eq!(String::from_utf8_lossy(&records.stdout).trim(), "");
}
