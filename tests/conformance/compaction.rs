//! etcd stays small: nodes take turns compacting etcd's history (`gtd::fleet::compact`), one
//! node a round, each round compacting to the revision the round before saw, so that an
//! interval of history stays and nothing older does.

use gtd::fleet::Store;
use gtd::fleet::compact::{Outcome, Round, round};

use crate::etcd::Cluster;

fn store(cluster: &Cluster, rt: &tokio::runtime::Runtime) -> Store {
    let access = gtd::fleet::Access::plain(&[cluster.endpoints()]).unwrap();
    rt.block_on(Store::connect(&access, "/gtd")).unwrap()
}

/// Writes `key` once more through etcdctl; the store revision after it.
fn write(cluster: &Cluster, key: &str, value: &str) {
    let out = cluster.etcdctl(&["put", key, value]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether etcd still has `key` as of store revision `rev`.
fn readable_at(cluster: &Cluster, key: &str, rev: i64) -> bool {
    let out = cluster.etcdctl(&["get", key, &format!("--rev={rev}")]);
    if out.status.success() {
        return true;
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("compacted"), "{err}");
    false
}

#[test]
fn one_node_a_round_compacts_to_the_revision_the_round_before_saw() {
    let cluster = Cluster::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (a, b) = (store(&cluster, &rt), store(&cluster, &rt));
    let key = "/gtd/nodes/n1";
    write(&cluster, key, "v1");

    // Round 1: the first node to claim it wins; nothing to compact yet. The other loses and
    // takes note of the round.
    let (a1, won) = rt.block_on(round(&a, Round::default())).unwrap();
    assert_eq!(won, Outcome::Won { compacted: 0 });
    let (b1, lost) = rt.block_on(round(&b, Round::default())).unwrap();
    assert_eq!(lost, Outcome::Lost);
    assert_eq!(b1.version, a1.version);
    let first = a1.revision;
    assert!(readable_at(&cluster, key, first));

    // The registry keeps changing in between.
    for i in 2..6 {
        write(&cluster, key, &format!("v{i}"));
    }
    // Round 2: `b` claims it first, with the view it took in round 1, and compacts to the
    // revision it saw then; `a`'s view is now behind, so it does nothing.
    let (b2, won) = rt.block_on(round(&b, b1)).unwrap();
    assert_eq!(
        won,
        Outcome::Won {
            compacted: b1.revision
        }
    );
    let (_, lost) = rt.block_on(round(&a, a1)).unwrap();
    assert_eq!(lost, Outcome::Lost);
    // History before round 1's revision is gone; what round 1 saw and after stays.
    assert!(!readable_at(&cluster, key, b1.revision - 1));
    assert!(readable_at(&cluster, key, b1.revision));
    assert!(b2.revision > b1.revision);

    // A compaction etcd already went past (its own auto-compaction) is no error.
    let out = cluster.etcdctl(&["compact", &b2.revision.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, won) = rt.block_on(round(&b, b2)).unwrap();
    assert_eq!(
        won,
        Outcome::Won {
            compacted: b2.revision
        }
    );
}
