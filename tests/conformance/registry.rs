//! The registry costs etcd nothing while nothing changes: a node writes its entry when what it
//! says changes (a revision, a group's health), and its lease, which adds no revision to etcd's
//! history, says it is alive.

use std::net::SocketAddr;

use serde_json::Value;

use crate::etcd::*;
use crate::fleet::*;

/// etcd's store revision now (one more per write to any key).
pub(crate) fn store_revision(cluster: &Cluster) -> i64 {
    let out = cluster.etcdctl(&["get", "/gtd/revision", "-w", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["header"]["revision"].as_i64().unwrap()
}

fn groups_healthy(cluster: &Cluster, region: &str, group: &str) -> Option<bool> {
    fleet_json(cluster)["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["region"] == region)?["listeners"]
        .as_array()?
        .iter()
        .flat_map(|l| l["groups"].as_array().into_iter().flatten())
        .find(|g| g["name"] == group)
        .map(|g| g["healthy"] == true)
}

#[test]
fn a_node_writes_its_registry_entry_only_when_it_changes() {
    let cluster = Cluster::start();
    let cfg = Cfg::shipped();
    let mut fleet = start_fleet(&cluster, &cfg, std::slice::from_ref(&cfg));
    fleet.wait_health(&[]);
    wait("every group healthy in the registry", || {
        groups_healthy(&cluster, "cn-beijing", "shanghai") == Some(true)
            && groups_healthy(&cluster, "cn-shanghai", "beijing") == Some(true)
    });
    // Settled: three times the old rewrite period (2 s) and more than one lease renewal later
    // (leases of 2 s here), not one write reached etcd.
    let before = store_revision(&cluster);
    std::thread::sleep(std::time::Duration::from_secs(7));
    assert_eq!(store_revision(&cluster), before, "etcd was written to");
    for n in &fleet.nodes {
        n.assert_running();
    }
    assert_eq!(
        fleet_json(&cluster)["nodes"].as_array().unwrap().len(),
        2,
        "an entry left the registry: its lease was not renewed"
    );

    // A change is written: every backend stopped, the groups go unhealthy in the entries.
    fleet.stop_backends(0);
    wait(
        "Shanghai's view of the shanghai group in the registry",
        || groups_healthy(&cluster, "cn-shanghai", "shanghai") == Some(false),
    );
}

/// The ramp reads each node's counters at the admin address its registry entry names. Two
/// nodes on two hosts with the default admin bind (`127.0.0.1:9100`) register the same
/// address, and the driving node would read its own counters as the other's, judging a step
/// on one node's traffic counted twice and never on the other's errors. A reading is taken
/// only from the node the entry belongs to: asked at one node's admin server for the other,
/// it is refused, naming both.
#[test]
fn a_ramp_reads_a_node_only_where_that_node_answers() {
    let cluster = Cluster::start();
    let cfg = Cfg::shipped();
    let fleet = start_fleet(&cluster, &cfg, std::slice::from_ref(&cfg));
    let ids: Vec<String> = fleet
        .nodes
        .iter()
        .map(|n| {
            n.status()
                .fleet
                .expect("a fleet node's status names its registry id")
                .id
        })
        .collect();
    let (a, b) = (&fleet.nodes[0], &fleet.nodes[1]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let read = |admin: SocketAddr, id: &str| {
        rt.block_on(gtd::fleet::ramp::read::reading(&admin.to_string(), id))
    };
    let (counts, _) = read(a.admin, &ids[0]).expect("a node is read at its own admin");
    assert!(!counts.is_empty(), "{counts:?}");
    let err = read(a.admin, &ids[1]).expect_err("another node's admin is not this node's");
    let text = err.to_string();
    assert!(
        text.contains(&format!("answers as {}, not as {}", ids[0], ids[1])),
        "{text}"
    );
    assert!(read(b.admin, &ids[1]).is_ok());
}
