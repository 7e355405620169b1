//! Retries (and what is never retried), failover to the next group, 502 and 503.

use crate::common::*;
use crate::harness::*;

use std::net::SocketAddr;
use std::sync::Arc;

/// Outlier detection off: with `max_fails = 0` too, failing endpoints stay in rotation, so
/// every cycle meets them.
const NO_OUTLIERS: &str = "consecutive_5xx = 0\nconsecutive_gateway_failures = 0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_is_retried_on_502_and_on_a_refused_endpoint() {
    let bad = Backend::start("bad", 502).await;
    let good = Backend::start("good", 200).await;
    let refusing = Refusing::new();
    let refused: SocketAddr = refusing.0;
    let dir = tempfile::tempdir().unwrap();
    // max_fails = 0 keeps the failing endpoints in rotation, so every cycle meets them.
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "unhealthy_status = [502]\ntries = 3",
            &group(
                "g",
                "cn-beijing",
                100.0,
                NO_OUTLIERS,
                &[
                    (bad.addr, "max_fails = 0"),
                    (refused, "max_fails = 0"),
                    (good.addr, "max_fails = 0"),
                ],
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    for _ in 0..60 {
        let (status, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
        assert_eq!((status, body.as_str()), (200, "good"), "no client error");
    }
    // A POST with a body refused at connect time was not sent: it is retried, body and all.
    for _ in 0..30 {
        let (status, _, body) = send(
            &c,
            "POST",
            &format!("http://{addr}/sink"),
            &[],
            full(vec![7_u8; 100_000]),
        )
        .await;
        // The 502 endpoint's answer comes back as is (a POST whose bytes were sent).
        let (status, body) = (status, body.as_str());
        assert!(
            (status, body) == (200, "good 100000") || (status, body) == (502, "bad 100000"),
            "{status} {body}"
        );
    }
    assert!(
        bad.hits() >= 20,
        "the 502 endpoint was tried: {}",
        bad.hits()
    );
    let node = Arc::new(node);
    let n2 = node.clone();
    let (retries, connect_failures) = tokio::task::spawn_blocking(move || {
        (
            metric(&n2, "gtd_retries_total", &[]),
            metric(
                &n2,
                "gtd_connect_failures_total",
                &[&format!("endpoint=\"{refused}\"")],
            ),
        )
    })
    .await
    .unwrap();
    assert!(retries >= 40.0, "{retries} retries");
    assert!(
        connect_failures >= 20.0,
        "{connect_failures} connect failures"
    );
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_with_a_body_is_not_retried_after_a_502() {
    let bad = Backend::start("bad", 502).await;
    let good = Backend::start("good", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "unhealthy_status = [502]",
            &group(
                "g",
                "cn-beijing",
                100.0,
                NO_OUTLIERS,
                &[(bad.addr, "max_fails = 0"), (good.addr, "max_fails = 0")],
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    let (mut ok, mut bad_gateway) = (0, 0);
    for _ in 0..20 {
        let (status, _, _) = send(
            &c,
            "POST",
            &format!("http://{addr}/"),
            &[],
            full(&b"payload"[..]),
        )
        .await;
        match status {
            200 => ok += 1,
            502 => bad_gateway += 1,
            s => panic!("unexpected status {s}"),
        }
    }
    // Round robin alternates: half the POSTs met the 502 and got it back as is (its bytes were
    // sent and it is not idempotent); no POST reached both backends.
    assert_eq!((ok, bad_gateway), (10, 10));
    assert_eq!((good.hits(), bad.hits()), (10, 10));
    // The same GETs are retried.
    for _ in 0..10 {
        let (status, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
        assert_eq!((status, body.as_str()), (200, "good"));
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_body_is_sent_again_on_retry_a_large_one_is_not() {
    let bad = Backend::start("bad", 502).await;
    let good = Backend::start("good", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "unhealthy_status = [502]\nretry_non_idempotent = true",
            &group(
                "g",
                "cn-beijing",
                100.0,
                NO_OUTLIERS,
                &[(bad.addr, "max_fails = 0"), (good.addr, "max_fails = 0")],
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let url = format!("http://{addr}/sink");
    let c = client();
    // 16 KiB and less, with a Content-Length: read whole, and sent again after the 502.
    for size in [7, 16 * 1024] {
        for method in ["POST", "PUT"] {
            for _ in 0..4 {
                let body = full(vec![b'x'; size]);
                let (status, _, text) = send(&c, method, &url, &[], body).await;
                assert_eq!((status, text), (200, format!("good {size}")), "{method}");
            }
        }
    }
    assert!(
        bad.hits() >= 4,
        "the 502 endpoint took its turns: {}",
        bad.hits()
    );
    let retried = metric(&node, "gtd_retries_total", &[]);
    assert_eq!(retried, bad.hits() as f64);
    // Larger: streamed as it comes, never replayed; the 502 goes back as is.
    let (mut ok, mut bad_gateway) = (0, 0);
    for _ in 0..4 {
        let (status, _, text) = send(&c, "PUT", &url, &[], full(vec![b'x'; 16 * 1024 + 1])).await;
        match status {
            200 => {
                assert_eq!(text, format!("good {}", 16 * 1024 + 1));
                ok += 1;
            }
            502 => bad_gateway += 1,
            s => panic!("unexpected status {s}"),
        }
    }
    assert_eq!((ok, bad_gateway), (2, 2));
    assert_eq!(metric(&node, "gtd_retries_total", &[]), retried);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_crosses_to_the_next_group_when_the_whole_group_fails() {
    let bj1 = Backend::start("bj-1", 503).await;
    let bj2 = Backend::start("bj-2", 503).await;
    let sh = Backend::start("sh", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "unhealthy_status = [\"500-599\"]\ntries = 3",
            &format!(
                "{}{}",
                group(
                    "beijing",
                    "cn-beijing",
                    100.0,
                    NO_OUTLIERS,
                    &[(bj1.addr, "max_fails = 0"), (bj2.addr, "max_fails = 0")]
                ),
                group("shanghai", "cn-shanghai", 100.0, "", &[(sh.addr, "")]),
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    for _ in 0..10 {
        let (status, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
        assert_eq!((status, body.as_str()), (200, "sh"));
    }
    // Each request tried both Beijing endpoints first (beijing ranks first from cn-beijing).
    assert_eq!((bj1.hits(), bj2.hits(), sh.hits()), (10, 10, 10));

    // With tries = 2 the last attempt's unhealthy answer goes back as is.
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("tries = 3", "tries = 2");
    std::fs::write(&cfg, text).unwrap();
    node.reload().await.unwrap();
    let (status, headers, _) = get(&c, &format!("http://{addr}/"), &[]).await;
    assert_eq!(status, 503);
    assert!(
        h(&headers, "x-backend").starts_with("bj-"),
        "the endpoint's own answer"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_gives_502_and_no_route_503() {
    let refusing = Refusing::new();
    let refused: SocketAddr = refusing.0;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &group("g", "cn-beijing", 100.0, "", &[(refused, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    let (status, _, _) = get(&c, &format!("http://{addr}/"), &[]).await;
    assert_eq!(status, 502, "the only endpoint refused");
    // max_fails = 1: it is now marked, the group fails and the listener has no route.
    let (status, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
    assert_eq!(status, 503, "{body}");
    let node = Arc::new(node);
    let n2 = node.clone();
    let (no_route, own_5xx) = tokio::task::spawn_blocking(move || {
        (
            metric(&n2, "gtd_no_route_total", &[]),
            metric(
                &n2,
                "gtd_requests_total",
                &["group=\"\"", "code_class=\"5xx\""],
            ),
        )
    })
    .await
    .unwrap();
    assert_eq!((no_route, own_5xx), (1.0, 2.0));
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}
