//! etcd's leader lost under a fleet: a node whose member stays keeps its session (its watch,
//! its lease, its registry entry) through the election, and applies a revision pushed during
//! it as soon as the new leader commits it; only a node whose own member died reconnects.

use crate::etcd::{Cluster, gtd, wait_applied};
use crate::fleet::{Cfg, Fleet, wait};

/// What a node logs when its session with etcd ends.
const LOST: &str = "etcd: not following";

#[test]
fn nodes_on_the_members_left_keep_their_session_through_an_election() {
    let mut cluster = Cluster::start();
    let leader = cluster.leader();
    let stay: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    // The nodes know only the members that stay: any session they lose, they lose to the
    // election, not to their member's death.
    let endpoints = cluster.endpoints_of(&stay);
    let mut cfg = Cfg::shipped();
    let mut fleet = Fleet::start_with(
        &cfg,
        &[],
        |config| {
            crate::etcd::push(&cluster, config);
        },
        |_, dir, region| {
            [
                "--etcd",
                &endpoints,
                "--cache",
                &dir.join(format!("cache-{region}.json"))
                    .display()
                    .to_string(),
                "--lease-ttl",
                "10s",
            ]
            .map(str::to_owned)
            .to_vec()
        },
    );
    wait_applied(&fleet, 1);

    cluster.kill(leader);
    cfg.set_ratio("web/shanghai", 30.0);
    fleet.rewrite(&cfg);
    let config = fleet.config.display().to_string();
    // A push during the election is told "no leader" or times out: pushed again until it lands.
    wait("a push during the election", || {
        gtd(&["push", "--etcd", &endpoints, "--config", &config])
            .status
            .success()
    });
    wait_applied(&fleet, 2);
    for n in &fleet.nodes {
        let log = std::fs::read_to_string(&n.log).unwrap_or_default();
        assert!(
            !log.contains(LOST),
            "{} lost its session in the election:\n{}",
            n.region,
            n.log_tail()
        );
        let f = n.fleet();
        assert!(f.connected, "{f:?}");
    }
}

/// A node started while etcd elects a leader (a fleet and its etcd started together, or a
/// node restarted as the leader dies) waits for the new leader instead of exiting on etcd's
/// "leader changed" or "no leader": the node has no cached revision to start from.
#[test]
fn a_node_started_during_an_election_waits_for_the_new_leader() {
    let mut cluster = Cluster::start();
    let leader = cluster.leader();
    let stay: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let endpoints = cluster.endpoints_of(&stay);
    let cfg = Cfg::shipped();
    let fleet = Fleet::start_with(
        &cfg,
        &[],
        |config| {
            crate::etcd::push(&cluster, config);
            cluster.kill(leader);
        },
        |_, dir, region| {
            [
                "--etcd",
                &endpoints,
                "--cache",
                &dir.join(format!("cache-{region}.json"))
                    .display()
                    .to_string(),
            ]
            .map(str::to_owned)
            .to_vec()
        },
    );
    wait_applied(&fleet, 1);
    // Applying the revision comes first; the watch that follows etcd from there may be set
    // up a moment later (CI saw it not yet there on a loaded machine).
    for n in &fleet.nodes {
        wait(&format!("{} following etcd", n.region), || {
            n.fleet().connected
        });
    }
}
