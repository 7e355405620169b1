//! Every change of an endpoint's or a group's state is on the node's timeline (`/events`),
//! both ways and with its cause, and a planned drain reads as a drain, not as a failure: in
//! `/status`, in the metrics the shipped alerts read, and in the events.

use crate::common::*;
use crate::harness::*;

use serde_json::Value;

/// The node's events whose kind is `kind`, about `endpoint` (any endpoint: `None`), as
/// (group, endpoint, message), newest first.
fn events(node: &gtd::node::Node, kind: &str) -> Vec<(String, String, String)> {
    let (code, body) = admin(node, "GET", "/events", None);
    assert_eq!(code, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    doc["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == kind)
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (s("group"), s("endpoint"), s("message"))
        })
        .collect()
}

/// Whether an event of `kind` about `group` (and `endpoint`, `""` for the group's own) says
/// `words`.
fn said(node: &gtd::node::Node, kind: &str, group: &str, endpoint: &str, words: &str) -> bool {
    events(node, kind)
        .iter()
        .any(|(g, e, m)| g == group && e == endpoint && m.contains(words))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removals_and_recoveries_are_events_and_a_drain_is_not_a_failure() {
    // Group "top" (this node's region): one endpoint, refusing at first. Group "next": one that
    // accepts. Checks every second, one result turns the verdict.
    let (up, h) = socket_backend(|_| async {}).await;
    let mut backends = Backends(vec![h]);
    let refusing = Refusing::new();
    let flaky = refusing.0;
    let check = "[listener.group.health_check]\nprotocol = \"tcp\"\ninterval = \"1s\"\n\
                 unhealthy_threshold = 1\nhealthy_threshold = 1\n";
    let groups = [
        group("top", "cn-beijing", 100.0, check, &[(flaky, "")]),
        group("next", "cn-shanghai", 100.0, check, &[(up, "")]),
    ]
    .concat();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &listener("t", "tcp", "", &groups));
    let node = start(&cfg).await;
    let flaky_s = flaky.to_string();
    let on_flaky = format!("endpoint=\"{flaky_s}\"");

    // Out by its checks: an event with the cause, the group's too, and the gauges.
    until("the checks' removal on the timeline", || {
        said(
            &node,
            "check",
            "top",
            &flaky_s,
            "out of rotation: its health checks fail",
        )
    })
    .await;
    let (_, _, message) = events(&node, "check").remove(0);
    assert!(message.contains("connection refused"), "{message}");
    until("the group's", || {
        said(&node, "group", "top", "", "unhealthy: 0 of 1")
    })
    .await;
    assert_eq!(
        metric(&node, "gtd_endpoint_checks_healthy", &[&on_flaky]),
        0.0
    );
    assert_eq!(metric(&node, "gtd_endpoint_healthy", &[&on_flaky]), 0.0);
    assert_eq!(metric(&node, "gtd_endpoint_drained", &[&on_flaky]), 0.0);
    assert_eq!(metric(&node, "gtd_group_drained", &["group=\"top\""]), 0.0);
    let doc = status(&node);
    assert_eq!(listener_of(&doc, "t").mode, "failover");
    assert!(!group_of(&doc, "t", "top").drained);

    // Back: it accepts now. The recovery is an event too, and the group's.
    drop(refusing);
    let (_, h) = socket_backend_on(flaky, |_| async {}).await;
    backends.0.push(h);
    until("the checks' recovery on the timeline", || {
        said(
            &node,
            "check",
            "top",
            &flaky_s,
            "back in rotation (was out: its health checks fail)",
        )
    })
    .await;
    until("the group's", || {
        said(&node, "group", "top", "", "healthy again")
    })
    .await;
    assert_eq!(
        metric(&node, "gtd_endpoint_checks_healthy", &[&on_flaky]),
        1.0
    );
    assert_eq!(listener_of(&status(&node), "t").mode, "cascade");

    // Drained (through the admin API here; a fleet drain is the same state): planned, not a
    // failure. The endpoint is healthy and drained; its group is drained, not failed.
    let (code, body) = admin(
        &node,
        "POST",
        &format!("/endpoints/t/top/{flaky_s}/drain"),
        None,
    );
    assert_eq!(code, 200, "{body}");
    until("the drain on the timeline", || {
        said(&node, "drain", "top", &flaky_s, "out of rotation: drained")
    })
    .await;
    until("the group's", || {
        said(&node, "group", "top", "", "drained, not failed")
    })
    .await;
    assert_eq!(metric(&node, "gtd_endpoint_healthy", &[&on_flaky]), 1.0);
    assert_eq!(metric(&node, "gtd_endpoint_drained", &[&on_flaky]), 1.0);
    assert_eq!(metric(&node, "gtd_group_drained", &["group=\"top\""]), 1.0);
    assert_eq!(metric(&node, "gtd_group_healthy", &["group=\"top\""]), 0.0);
    let doc = status(&node);
    assert_eq!(listener_of(&doc, "t").mode, "failover");
    let top = group_of(&doc, "t", "top");
    assert!(!top.healthy && top.drained, "{top:?}");

    // Undrained: back, both ways on the record.
    let (code, body) = admin(
        &node,
        "POST",
        &format!("/endpoints/t/top/{flaky_s}/undrain"),
        None,
    );
    assert_eq!(code, 200, "{body}");
    until("the undrain on the timeline", || {
        said(
            &node,
            "drain",
            "top",
            &flaky_s,
            "back in rotation (was out: drained",
        )
    })
    .await;
    assert_eq!(metric(&node, "gtd_group_drained", &["group=\"top\""]), 0.0);
    assert_eq!(metric(&node, "gtd_endpoint_drained", &[&on_flaky]), 0.0);
    node.shutdown().await;
    drop(backends);
}
