//! `failback_ramp` on a live node (docs/design.md §3.3): a group disabled through the admin
//! API and enabled again takes its share back over the ramp — `/status` and `/explain` show
//! the share at the moment, the node's decisions follow it, the timeline says so, and once the
//! ramp is over the group has its whole share.
//!
//! No timing is asserted: the decisions are compared with the shares `/status` reported just
//! before and just after them (the share only grows meanwhile), with a generous tolerance.

use crate::common::*;
use crate::harness::*;

use gtd::node::Node;
use gtd::view::GroupView;

/// Shanghai's row of listener `name` in `/status`.
fn shanghai(node: &Node, name: &str) -> GroupView {
    let doc = status(node);
    status_listener(&doc, name)
        .groups
        .iter()
        .find(|g| g.name == "shanghai")
        .expect("shanghai")
        .clone()
}

async fn toggle(node: &Node, listener: &str, addr: std::net::SocketAddr, what: &str) {
    let (code, body) = admin(
        node,
        "POST",
        &format!("/endpoints/{listener}/shanghai/{addr}/{what}"),
        None,
    );
    assert_eq!(code, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_enabled_again_takes_its_share_back_over_the_ramp() {
    let (bj, h1) = tcp_backend("beijing").await;
    let (sh, h2) = tcp_backend("shanghai").await;
    let _b = Backends(vec![h1, h2]);
    let dir = tempfile::tempdir().unwrap();
    let groups = |_: ()| {
        [
            group("beijing", "cn-beijing", 50.0, "", &[(bj, 1)]),
            group("shanghai", "cn-shanghai", 50.0, "", &[(sh, 1)]),
        ]
        .concat()
    };
    // "slow": a ramp far longer than the test; "fast": one it waits out.
    let listeners = [
        listener_on(
            free_port(false),
            "slow",
            "tcp",
            &["cn-beijing"],
            "failback_ramp = \"1h\"",
            &groups(()),
        ),
        listener_on(
            free_port(false),
            "fast",
            "tcp",
            &["cn-beijing"],
            "failback_ramp = \"2s\"",
            &groups(()),
        ),
    ]
    .join("\n");
    let cfg = write_config(dir.path(), &listeners);
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "slow").await;
    assert_eq!(shanghai(&node, "slow").share, 37.5);
    assert!(shanghai(&node, "slow").recovering.is_none());

    // Shanghai fails (every endpoint disabled): Beijing takes it all.
    toggle(&node, "slow", sh, "disable").await;
    let g = shanghai(&node, "slow");
    assert!(!g.healthy);
    assert_eq!(g.share, 0.0);
    for _ in 0..10 {
        assert_eq!(tcp_name(addr).await.unwrap(), "beijing");
    }

    // Healthy again: it starts from nothing and climbs over the hour.
    toggle(&node, "slow", sh, "enable").await;
    let before = shanghai(&node, "slow");
    assert!(before.healthy);
    let r = before.recovering.expect("recovering");
    assert_eq!(r.ramp_s, 3600.0);
    assert_eq!(r.full_share, 37.5);
    assert!(r.fraction < 0.05, "{r:?}");
    assert!(
        (before.share - r.fraction * 37.5).abs() < 1e-6,
        "{before:?}"
    );
    let n = 400;
    let mut to_shanghai = 0;
    for _ in 0..n {
        if tcp_name(addr).await.unwrap() == "shanghai" {
            to_shanghai += 1;
        }
    }
    let after = shanghai(&node, "slow");
    assert!(after.share >= before.share);
    let seen = to_shanghai as f64 * 100.0 / n as f64;
    assert!(
        seen >= before.share - 3.0 && seen <= after.share + 3.0,
        "{seen} % went to shanghai; /status said {} then {}",
        before.share,
        after.share
    );
    // A snap would have sent 37.5 %.
    assert!(seen < 20.0, "{seen}");

    // /explain shows the same moment: the chance of shanghai is its share now, and says why.
    let (code, body) = admin(&node, "GET", "/explain?listener=slow&client=10.1.2.3", None);
    assert_eq!(code, 200, "{body}");
    let x: gtd::view::Explain = serde_json::from_str(&body).unwrap();
    let g = x.groups.iter().find(|g| g.name == "shanghai").unwrap();
    assert!(g.share < 37.5 * 0.05, "{g:?}");
    assert!(
        g.share_reason.contains("failback_ramp"),
        "{}",
        g.share_reason
    );

    // The timeline says the ramp started.
    let (_, events) = admin(&node, "GET", "/events", None);
    assert!(
        events.contains(
            "shanghai healthy again: takes its share back linearly over failback_ramp 3600 s"
        ),
        "{events}"
    );

    // The short ramp runs out: the whole share, nothing recovering.
    toggle(&node, "fast", sh, "disable").await;
    toggle(&node, "fast", sh, "enable").await;
    until("fast's ramp to end", || {
        let g = shanghai(&node, "fast");
        g.recovering.is_none() && g.share == 37.5
    })
    .await;
    until("the share gauge to follow", || {
        metric(
            &node,
            "gtd_group_share",
            &["listener=\"fast\"", "group=\"shanghai\""],
        ) == 37.5
    })
    .await;
    node.shutdown().await;
}
