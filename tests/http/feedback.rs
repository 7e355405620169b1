//! The feedback header steers the split between groups.

use crate::common::*;
use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedback_header_steers_the_group() {
    let low = Backend::start_with("low", 200, vec![("x-capacity", "1")], None).await;
    let high = Backend::start_with("high", 200, vec![("x-capacity", "9")], None).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &group(
                "g",
                "cn-beijing",
                100.0,
                "balance = \"feedback\"\nfeedback_header = \"X-Capacity\"",
                &[(low.addr, ""), (high.addr, "")],
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    // Let both report at least once, then count.
    for _ in 0..50 {
        get(&c, &format!("http://{addr}/"), &[]).await;
    }
    let (low0, high0) = (low.hits(), high.hits());
    assert!(low0 > 0 && high0 > 0);
    for _ in 0..1000 {
        get(&c, &format!("http://{addr}/"), &[]).await;
    }
    let high_share = (high.hits() - high0) as f64 / 1000.0;
    // Expected 90% (9 against 1); the picks are random, so allow a wide margin.
    assert!(high_share > 0.8, "high got {high_share}");
    node.shutdown().await;
}
