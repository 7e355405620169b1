//! The fleet on a real three-member etcd cluster: revisions pushed with `gtd push` reach every
//! `gtd run --etcd` node, whose `/status` split is then `sim`'s for the revision's file; a bad
//! config is never published; a revision one node cannot apply is refused there and reported;
//! the nodes ride out a member's death and the whole cluster's, and a killed node leaves the
//! registry with its lease.

use crate::etcd::*;
use crate::fleet::*;

/// Every listener's split on every node equals `sim`'s for `config`, from `/status` alone.
fn splits_are_sims(fleet: &Fleet, sim: &serde_json::Value) {
    for l in fleet.cfg.listener_names() {
        for r in fleet.cfg.listener_regions(&l) {
            let node = fleet.node(&r);
            let expected = sim_split(sim, &l, &r, None);
            assert_same(
                &status_split(&node.status(), &l, None),
                &expected,
                &l,
                &r,
                node,
            );
        }
    }
}

#[test]
fn a_pushed_ratio_change_reaches_every_node_and_their_splits_are_sims() {
    let cluster = Cluster::start();
    let mut cfg = Cfg::shipped();
    let original = cfg.clone();
    let mut fleet = start_fleet(&cluster, &cfg, std::slice::from_ref(&cfg));
    fleet.wait_health(&[]);
    splits_are_sims(&fleet, &fleet.sim(&[]));

    cfg.set_ratio("web/shanghai", 10.0);
    cfg.set_ratio("game/beijing", 60.0);
    fleet.rewrite(&cfg);
    let out = push(&cluster, &fleet.config);
    assert!(out.starts_with("published revision 2 under /gtd"), "{out}");
    wait_applied(&fleet, 2);
    let new = fleet.sim(&[]);
    // Shanghai's web clients: 10, then half of 90, leftover 45 split: 32.5 / 67.5.
    assert_eq!(shares(&new, "web", "cn-shanghai")["shanghai"], 32.5);
    splits_are_sims(&fleet, &new);
    // And the traffic follows: the web listener measured on both nodes.
    for r in fleet.cfg.listener_regions("web") {
        fleet.conforms_on(&new, "web", &r, None);
    }

    // The registry agrees: both nodes, both on the latest revision, with the new shares.
    let report = fleet_json(&cluster);
    assert_eq!(report["latest"]["revision"], 2, "{report:#}");
    assert_eq!(report["all_latest"], true, "{report:#}");
    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{report:#}");
    let shanghai = nodes.iter().find(|n| n["region"] == "cn-shanghai").unwrap();
    let web = shanghai["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "web")
        .unwrap();
    let own = web["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "shanghai")
        .unwrap();
    assert_eq!(own["share"], 32.5, "{report:#}");
    assert_eq!(report["disagreements"], serde_json::json!([]), "{report:#}");
    // What an operator reads.
    let table = gtd(&["fleet", "--etcd", &cluster.endpoints()]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("2 nodes · all serve the latest revision"),
        "{table}"
    );
    assert!(
        table.contains("web cascade: shanghai 32.5, beijing 67.5"),
        "{table}"
    );

    // Rolled back: revision 3 carries revision 1's text, and the nodes serve its split.
    let back = gtd(&["push", "--etcd", &cluster.endpoints(), "--rollback"]);
    let said = String::from_utf8_lossy(&back.stdout);
    assert!(
        back.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&back.stderr)
    );
    assert!(
        said.starts_with("published revision 3 under /gtd: revision 1's config"),
        "{said}"
    );
    wait_applied(&fleet, 3);
    fleet.rewrite(&original);
    splits_are_sims(&fleet, &fleet.sim(&[]));

    // The difference between two revisions, and its effect on shares.
    let diff = gtd(&["fleet", "--etcd", &cluster.endpoints(), "diff", "1", "2"]);
    let diff = String::from_utf8_lossy(&diff.stdout);
    let changed = |sign: char, ratio: &str| {
        diff.lines()
            .any(|l| l.starts_with(sign) && l.trim_start_matches(sign).trim() == ratio)
    };
    assert!(
        changed('-', "ratio = 50") && changed('+', "ratio = 10"),
        "{diff}"
    );
    assert!(diff.contains("before  delta"), "{diff}");
}

#[test]
fn a_config_that_fails_validation_is_never_published() {
    let cluster = Cluster::start();
    let cfg = Cfg::shipped();
    let mut fleet = start_fleet(&cluster, &cfg, &[]);

    // A ratio out of range, then a certificate that does not exist: each refused by `gtd push`
    // with gtd check's FILE:LINE:COL, and etcd still names revision 1.
    let mut bad = cfg.clone();
    bad.set_ratio("web/beijing", 150.0);
    fleet.rewrite(&bad);
    let err = push_refused(&cluster, &fleet.config);
    assert!(
        err.contains("config.toml:") && err.contains("ratio 150 is out of range"),
        "{err}"
    );

    let text = std::fs::read_to_string(&fleet.config).unwrap().replace(
        "ratio = 150",
        "ratio = 50\n  [listener.group.tls]\n  ca = \"/nonexistent/ca.pem\"",
    );
    std::fs::write(&fleet.config, text).unwrap();
    let err = push_refused(&cluster, &fleet.config);
    assert!(err.contains("/nonexistent/ca.pem"), "{err}");

    let report = fleet_json(&cluster);
    assert_eq!(report["latest"]["revision"], 1, "{report:#}");
    for n in &fleet.nodes {
        let f = n.fleet();
        assert_eq!((f.applied, f.refused), (1, None));
    }
}

#[test]
fn a_revision_one_node_cannot_apply_is_refused_there_and_the_others_apply_it() {
    let cluster = Cluster::start();
    let mut cfg = Cfg::shipped();
    let mut fleet = start_fleet(&cluster, &cfg, std::slice::from_ref(&cfg));
    fleet.wait_health(&[]);

    // The game listener moves to a port that something else holds on Shanghai's address
    // only: Beijing applies the revision, Shanghai refuses it and keeps serving revision 1.
    let shanghai_ip = fleet.node("cn-shanghai").ip;
    let (_, old_port, _) = cfg.protocol("game");
    let (squatter, port) = port_taken_on(&mut cfg, "game", shanghai_ip);
    fleet.rewrite(&cfg);
    push(&cluster, &fleet.config);

    let beijing = fleet.node("cn-beijing");
    wait_fleet(beijing, "serving revision 2", |f| f.applied == 2);
    let shanghai = fleet.node("cn-shanghai");
    wait_fleet(shanghai, "refusing revision 2", |f| {
        f.refused.as_ref().is_some_and(|r| r.revision == 2)
    });
    let f = shanghai.fleet();
    assert_eq!(f.applied, 1);
    let reason = &f.refused.as_ref().unwrap().reason;
    assert!(reason.contains(&port.to_string()), "{reason}");
    // Still serving revision 1's port.
    assert!(std::net::TcpStream::connect((shanghai_ip, old_port)).is_ok());
    // Each node's timeline says what it did with revision 2.
    let revision_events = |n: &NodeProc| -> Vec<String> {
        let (code, body) = http(n.admin, "GET", "/events").unwrap();
        assert_eq!(code, 200, "{body}");
        let events: gtd::view::Events = serde_json::from_str(&body).unwrap();
        events
            .events
            .into_iter()
            .filter(|e| e.kind == "revision")
            .map(|e| e.message)
            .collect()
    };
    assert_eq!(revision_events(beijing), ["revision 2 applied"]);
    let refused = revision_events(shanghai);
    assert!(
        refused.len() == 1
            && refused[0].starts_with("revision 2 rejected, the running config stays: ")
            && refused[0].contains(&port.to_string()),
        "{refused:?}"
    );

    // Reported in the registry: the refusal and its reason, and who is behind.
    wait("the refusal in the registry", || {
        let report = fleet_json(&cluster);
        report["all_latest"] == false
            && report["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["region"] == "cn-shanghai" && n["refused"]["revision"] == 2)
    });
    let table = gtd(&["fleet", "--etcd", &cluster.endpoints()]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("1 not on the latest revision"), "{table}");
    assert!(table.contains("refused revision 2:"), "{table}");

    // Once the port is free, the next revision is applied everywhere.
    drop(squatter);
    cfg.set_ratio("web/shanghai", 20.0);
    fleet.rewrite(&cfg);
    push(&cluster, &fleet.config);
    wait_applied(&fleet, 3);
    assert_eq!(fleet.node("cn-shanghai").fleet().refused, None);
    fleet.wait_health(&[]);
    splits_are_sims(&fleet, &fleet.sim(&[]));
}

#[test]
fn with_a_member_killed_the_cluster_keeps_serving_pushes_to_the_nodes() {
    let mut cluster = Cluster::start();
    let mut cfg = Cfg::shipped();
    let mut fleet = start_fleet(&cluster, &cfg, &[]);

    cluster.kill(0);
    cfg.set_ratio("web/shanghai", 30.0);
    fleet.rewrite(&cfg);
    // A push during the election that may follow is told "no leader": an operator pushes
    // again, and so does this test, until the two members left have one.
    let endpoints = cluster.endpoints();
    let config = fleet.config.display().to_string();
    wait("a push with one member down", || {
        gtd(&["push", "--etcd", &endpoints, "--config", &config])
            .status
            .success()
    });
    wait_applied(&fleet, 2);
    splits_are_sims(&fleet, &fleet.sim(&[]));

    cluster.restart(0);
    cluster.wait_healthy();
    cfg.set_ratio("web/shanghai", 40.0);
    fleet.rewrite(&cfg);
    push(&cluster, &fleet.config);
    wait_applied(&fleet, 3);
}

#[test]
fn with_the_whole_cluster_stopped_nodes_keep_serving_and_pick_up_the_next_revision() {
    let mut cluster = Cluster::start();
    let mut cfg = Cfg::shipped();
    let mut fleet = start_fleet(&cluster, &cfg, std::slice::from_ref(&cfg));
    fleet.wait_health(&[]);
    // Each node's start line names the revision it loaded and where from.
    let started = |n: &NodeProc| {
        let log = std::fs::read_to_string(&n.log).unwrap_or_default();
        let line = log.lines().rfind(|l| l.contains("node started"));
        line.unwrap_or_default().to_owned()
    };
    for n in &fleet.nodes {
        let line = started(n);
        assert!(line.contains("config=revision 1 (etcd)"), "{line:?}");
    }

    cluster.stop_all();
    for n in &fleet.nodes {
        wait(&format!("{} seeing etcd gone", n.region), || {
            !n.fleet().connected
        });
    }
    // Still serving revision 1's split, traffic included.
    splits_are_sims(&fleet, &fleet.sim(&[]));
    fleet.conforms_on(&fleet.sim(&[]), "web", "cn-beijing", None);
    // A node restarted while etcd is down starts from its cache.
    fleet.kill_node("cn-shanghai");
    fleet.restart_node("cn-shanghai");
    let f = fleet.node("cn-shanghai").fleet();
    assert_eq!(f.applied, 1, "{f:?}");
    assert_eq!(f.source, "cache", "{f:?}");
    let line = started(fleet.node("cn-shanghai"));
    assert!(line.contains("config=revision 1 (cache)"), "{line:?}");
    fleet.wait_health(&[]);
    splits_are_sims(&fleet, &fleet.sim(&[]));

    cluster.start_all();
    cfg.set_ratio("web/shanghai", 10.0);
    fleet.rewrite(&cfg);
    push(&cluster, &fleet.config);
    wait_applied(&fleet, 2);
    splits_are_sims(&fleet, &fleet.sim(&[]));
}

#[test]
fn a_killed_node_leaves_the_registry_with_its_lease_and_a_stopped_one_at_once() {
    let cluster = Cluster::start();
    let cfg = Cfg::shipped();
    let count = |c: &Cluster| fleet_json(c)["nodes"].as_array().unwrap().len();
    {
        let mut fleet = start_fleet(&cluster, &cfg, &[]);
        wait("both nodes registered", || count(&cluster) == 2);
        // SIGKILL: nothing revokes its lease; it runs out (2 s) and the entry goes with it.
        fleet.kill_node("cn-shanghai");
        wait("the killed node gone from the registry", || {
            count(&cluster) == 1
        });
        let report = fleet_json(&cluster);
        assert_eq!(report["nodes"][0]["region"], "cn-beijing", "{report:#}");
    }
    wait("the first fleet gone", || count(&cluster) == 0);

    // SIGTERM: a node revokes its lease as its drain begins. Leases of 300 s here, so an
    // entry gone within the wait's bound (60 s) was revoked, not expired.
    let fleet = start_fleet_leased(&cluster, &cfg, &[], "300s");
    wait("both nodes registered again", || count(&cluster) == 2);
    for n in &fleet.nodes {
        let pid = n.child.0.id().to_string();
        let term = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(term.success());
    }
    wait("the stopped nodes gone from the registry", || {
        count(&cluster) == 0
    });
}

/// `gtd push --dry-run`, its `--rollback` form and `gtd fleet diff` ask the library's
/// simulator: run by a `gtd` with no `sim` program beside it or on `PATH`, from an empty,
/// read-only working directory, each prints what `sim --config NEW` (nothing published yet)
/// or the text diff and `sim --config NEW --compare OLD` print, and the directory stays empty.
#[test]
fn dry_runs_and_diffs_run_no_program_and_write_no_file() {
    use std::os::unix::fs::PermissionsExt as _;

    let cluster = Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Cfg::shipped();
    let first = dir.path().join("first.toml");
    cfg.write(&first);
    cfg.set_ratio("web/shanghai", 10.0);
    let second = dir.path().join("config.toml");
    cfg.write(&second);

    // `gtd` alone in a directory, no `PATH`: a `sim` program cannot be found.
    let bin = tempfile::tempdir().unwrap();
    let alone = bin.path().join("gtd");
    std::fs::copy(env!("CARGO_BIN_EXE_gtd"), &alone).unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::set_permissions(cwd.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    // `gtd COMMAND --etcd ... ARGS`.
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&alone)
            .arg(args[0])
            .args(cluster.access(As::Pusher))
            .args(&args[1..])
            .current_dir(cwd.path())
            .env("PATH", "")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "gtd {args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    // What `sim` prints for the shares before and after.
    let catalog = crate::common::root().join("regions/catalog.toml");
    let sim = |new: &std::path::Path, old: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sim"))
            .arg("--config")
            .arg(new)
            .arg("--compare")
            .arg(old)
            .arg("--regions")
            .arg(&catalog)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let changed = |text: &str| {
        text.lines().any(|l| l == "-ratio = 50") && text.lines().any(|l| l == "+ratio = 10")
    };

    // Before anything is published: the shares the config would make.
    let first_arg = first.display().to_string();
    let dry = run(&["push", "--dry-run", "--config", &first_arg]);
    let plain = std::process::Command::new(env!("CARGO_BIN_EXE_sim"))
        .arg("--config")
        .arg(&first)
        .output()
        .unwrap();
    assert_eq!(
        dry,
        format!(
            "dry run: nothing is published under /gtd yet; {first_arg} would be revision 1\n\n{}",
            String::from_utf8(plain.stdout).unwrap()
        )
    );

    push(&cluster, &first);
    let second_arg = second.display().to_string();
    let dry = run(&["push", "--dry-run", "--config", &second_arg]);
    let header = format!("dry run: revision 1 (running) -> {second_arg}; nothing published\n\n");
    assert!(dry.starts_with(&header), "{dry}");
    assert!(changed(&dry), "{dry}");
    assert!(
        dry.ends_with(&format!("\n\n{}", sim(&second, &first))),
        "{dry}"
    );

    push(&cluster, &second);
    let diff = run(&["fleet", "diff", "1", "2"]);
    assert!(changed(&diff), "{diff}");
    assert!(
        diff.ends_with(&format!("\n\n{}", sim(&second, &first))),
        "{diff}"
    );

    let back = run(&["push", "--rollback", "--dry-run"]);
    assert!(
        back.starts_with("dry run: revision 2 (running) -> revision 1's config"),
        "{back}"
    );
    assert!(
        back.ends_with(&format!("\n\n{}", sim(&first, &second))),
        "{back}"
    );

    let left: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().collect();
    assert!(left.is_empty(), "the working directory holds {left:?}");
    std::fs::set_permissions(cwd.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
}
