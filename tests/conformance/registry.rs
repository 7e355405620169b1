//! The registry costs etcd nothing while nothing changes: a node writes its entry when what it
//! says changes (a revision, a group's health), and its lease, which adds no revision to etcd's
//! history, says it is alive.

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
