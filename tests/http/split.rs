//! The split across groups and endpoints, compared with `sim`, and nginx's round-robin sequence.

use crate::common::*;
use crate::harness::*;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use gtd::sync::lock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_split_across_groups_and_endpoints_matches_sim() {
    let b1 = Backend::start("bj-1", 200).await;
    let b2 = Backend::start("bj-2", 200).await;
    let b3 = Backend::start("sh-1", 200).await;
    let b4 = Backend::start("sh-2", 200).await;
    let names: BTreeMap<SocketAddr, &str> = [
        (b1.addr, "bj-1"),
        (b2.addr, "bj-2"),
        (b3.addr, "sh-1"),
        (b4.addr, "sh-2"),
    ]
    .into();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "",
            &format!(
                "{}{}",
                group(
                    "beijing",
                    "cn-beijing",
                    50.0,
                    "",
                    &[(b1.addr, "weight = 3"), (b2.addr, "")]
                ),
                group(
                    "shanghai",
                    "cn-shanghai",
                    50.0,
                    "",
                    &[(b3.addr, ""), (b4.addr, "")]
                ),
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let (want_groups, want_endpoints) = sim_expectation(&cfg, "web");
    assert_eq!(want_groups["beijing"], 62.5);

    const N: u64 = 5000;
    let counts = Arc::new(std::sync::Mutex::new(BTreeMap::<String, u64>::new()));
    let next = Arc::new(AtomicU64::new(0));
    let c = client();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (counts, next, c) = (counts.clone(), next.clone(), c.clone());
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < N {
                let (status, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
                assert_eq!(status, 200);
                *lock(&counts).entry(body).or_default() += 1;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let counts = lock(&counts).clone();
    assert_eq!(counts.values().sum::<u64>(), N);
    // Stated tolerance: group rotation and round robin are deterministic, so each observed share
    // is within 0.5 points of sim's expectation (concurrency only reorders decisions).
    for (a, name) in &names {
        let observed = *counts.get(*name).unwrap_or(&0) as f64 * 100.0 / N as f64;
        let expected = want_endpoints[&a.to_string()];
        assert!(
            (observed - expected).abs() < 0.5,
            "{name}: observed {observed:.2}% expected {expected:.2}%"
        );
    }
    // Every answer was counted under its endpoint, none as gtd's own.
    let node = Arc::new(node);
    let n2 = node.clone();
    let (two_xx, own, opened, timed, body) = tokio::task::spawn_blocking(move || {
        (
            metric(&n2, "gtd_requests_total", &["code_class=\"2xx\""]),
            metric(&n2, "gtd_requests_total", &["group=\"\""]),
            metric(&n2, "gtd_connections_total", &[]),
            metric(&n2, "gtd_connect_seconds_count", &[]),
            admin(&n2, "GET", "/metrics", None).1,
        )
    })
    .await
    .unwrap();
    assert_eq!((two_xx, own), (N as f64, 0.0));
    // The connections gtd opened to the endpoints were counted and timed, and an HTTP listener
    // has no UDP flow series.
    assert!(opened >= names.len() as f64, "{opened} connections opened");
    assert_eq!(opened, timed);
    assert!(!body.contains("gtd_udp_flows"), "{body}");
    // `/status` says what each endpoint served: on HTTP, each response it gave.
    let n2 = node.clone();
    let (_, endpoints) = tokio::task::spawn_blocking(move || served_in_status(&n2, "web"))
        .await
        .unwrap();
    for (a, name) in &names {
        assert_eq!(endpoints[&a.to_string()], counts[*name], "{name}");
    }
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_5_1_1_gives_nginx_sequence() {
    let a = Backend::start("a", 200).await;
    let b = Backend::start("b", 200).await;
    let cc = Backend::start("c", 200).await;
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
                "",
                &[(a.addr, "weight = 5"), (b.addr, ""), (cc.addr, "")],
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    let mut seq = String::new();
    for _ in 0..70 {
        let (status, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
        assert_eq!(status, 200);
        seq.push_str(&body);
    }
    assert_eq!(seq, "aabacaa".repeat(10));
    node.shutdown().await;
}
