//! Errors on the page: each endpoint's 5xx answers, timeouts and connect failures of the last
//! minute in `/status` (real backends answering 503, hanging, refusing), and the node's event
//! timeline at `GET /events` (a passive mark with its cause, the failover it causes, a reload).
//! That the counts leave the window after the minute is the window's own unit test
//! (`balance::errors`, time as an argument); here the node is tested for the counts.

use crate::common::*;
use crate::harness::*;

use std::sync::Arc;

use gtd::view::{ErrorsView, Events};
use tokio::io::AsyncReadExt;

/// One attempt a request, outlier detection and passive marking off: each request is one
/// attempt on the one endpoint, whatever it comes to.
const ONE_ATTEMPT: &str = "tries = 1\nupstream_timeout = \"1s\"";
const NO_OUTLIERS: &str = "consecutive_5xx = 0\nconsecutive_gateway_failures = 0";

/// The errors `/status` shows for the one endpoint of listener `name`.
fn errors_of(node: &gtd::node::Node, name: &str) -> ErrorsView {
    let s = status(node);
    s.listener(name).unwrap().groups[0].endpoints[0].errors
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_counts_each_endpoints_5xx_timeouts_and_connect_failures() {
    let good = Backend::start("good", 200).await;
    let failing = Backend::start("failing", 503).await;
    // Reads the request and never answers (until the test ends).
    let (hanging, hang) = socket_backend(|mut s| async move {
        let mut sink = [0_u8; 1024];
        while s.read(&mut sink).await.is_ok_and(|n| n > 0) {}
    })
    .await;
    let refusing = Refusing::new();
    let one = |name: &str, addr| {
        listener(
            name,
            "http",
            ONE_ATTEMPT,
            &group(
                "g",
                "cn-beijing",
                100.0,
                NO_OUTLIERS,
                &[(addr, "max_fails = 0")],
            ),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &[
            one("good", good.addr),
            one("failing", failing.addr),
            one("hanging", hanging),
            one("refused", refusing.0),
        ]
        .concat(),
    );
    let node = start(&cfg).await;
    let c = client();
    for (name, n, code) in [
        ("good", 5, 200),
        ("failing", 4, 503),
        ("hanging", 2, 504),
        ("refused", 3, 502),
    ] {
        let addr = listener_addr(&node, name).await;
        for _ in 0..n {
            let (status, _, _) = get(&c, &format!("http://{addr}/"), &[]).await;
            assert_eq!(status, code, "{name}");
        }
    }
    let node = Arc::new(node);
    let n = node.clone();
    let seen = tokio::task::spawn_blocking(move || {
        ["good", "failing", "hanging", "refused"].map(|name| errors_of(&n, name))
    })
    .await
    .unwrap();
    let e = |status_5xx, timeouts, connect| ErrorsView {
        status_5xx,
        timeouts,
        connect,
        total: status_5xx + timeouts + connect,
    };
    assert_eq!(
        seen,
        [e(0, 0, 0), e(4, 0, 0), e(0, 2, 0), e(0, 0, 3)],
        "good, failing, hanging, refused"
    );
    hang.abort();
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeline_shows_a_mark_with_its_cause_the_failover_and_a_reload() {
    let good = Backend::start("good", 200).await;
    let refusing = Refusing::new();
    let dir = tempfile::tempdir().unwrap();
    // Static priorities: "first" (whose one endpoint refuses) above "second". The default
    // max_fails = 1 marks the refusing endpoint at its first failure, and its group fails over.
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &[
                group(
                    "first",
                    "cn-beijing",
                    50.0,
                    "priority = 1",
                    // Marked for the whole test: no failback meanwhile.
                    &[(refusing.0, "fail_timeout = \"300s\"")],
                ),
                group(
                    "second",
                    "cn-shanghai",
                    50.0,
                    "priority = 2",
                    &[(good.addr, "")],
                ),
            ]
            .concat(),
        ),
    );
    let node = Arc::new(start(&cfg).await);
    let addr = listener_addr(&node, "web").await;
    let c = client();
    // Until the refusing endpoint has been tried (the cascade sends some requests to the
    // second group first); every request is answered by the good one.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (code, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
        assert_eq!((code, body.as_str()), (200, "good"));
        let n = node.clone();
        let mode = tokio::task::spawn_blocking(move || status(&n).listeners[0].mode.clone())
            .await
            .unwrap();
        if mode == "failover" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never failed over");
    }
    let n = node.clone();
    let events = tokio::task::spawn_blocking(move || {
        assert_eq!(admin(&n, "POST", "/reload", None).0, 200);
        let (code, body) = admin(&n, "GET", "/events", None);
        assert_eq!(code, 200, "{body}");
        serde_json::from_str::<Events>(&body).unwrap()
    })
    .await
    .unwrap();
    let kinds: Vec<&str> = events.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(events.capacity, 100);
    // Newest first: the reload, the group's state change, the failover, the mark that caused
    // both.
    assert_eq!(
        kinds,
        ["reload", "group", "failover", "passive"],
        "{events:#?}"
    );
    let [reload, group, failover, passive] = &events.events[..] else {
        unreachable!()
    };
    assert!(
        group.message.starts_with("unhealthy")
            && group.message.contains("marked by passive failures"),
        "{group:?}"
    );
    assert!(
        reload.message.ends_with("config.toml applied"),
        "{reload:?}"
    );
    assert_eq!(
        (
            failover.listener.as_deref(),
            failover.group.as_deref(),
            failover.endpoint.as_deref()
        ),
        (Some("web"), Some("first"), None)
    );
    assert!(
        failover.message.contains("first unhealthy")
            && failover.message.ends_with("to second 100 %"),
        "{failover:?}"
    );
    let refused = refusing.0.to_string();
    assert_eq!(
        (
            passive.listener.as_deref(),
            passive.group.as_deref(),
            passive.endpoint.as_deref()
        ),
        (Some("web"), Some("first"), Some(refused.as_str()))
    );
    assert!(
        passive
            .message
            .contains("no connection: connection refused"),
        "the cause: {passive:?}"
    );
    assert!(
        events
            .events
            .windows(2)
            .all(|w| w[0].at_unix_ms >= w[1].at_unix_ms)
    );
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}
