//! 1 GB each way through gtd with bounded memory.

use crate::common::*;
use crate::harness::*;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::Request;
use http_body_util::BodyExt;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gigabyte_each_way_streams_with_bounded_memory() {
    let sink = Backend::start("sink", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "upstream_timeout = \"300s\"",
            &group("g", "cn-beijing", 100.0, "", &[(sink.addr, "")]),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    const GB: u64 = 1 << 30;
    let c = client();
    let before = rss_bytes();
    // The highest resident size seen while streaming (sampled), not only the size after.
    let peak = Arc::new(AtomicU64::new(before));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_bytes(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    let upload = async {
        let req = Request::post(format!("http://{addr}/sink"))
            .body(Pattern::new(GB).boxed())
            .unwrap();
        let resp = c.request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        resp.into_body().collect().await.unwrap().to_bytes()
    };
    let answer = tokio::time::timeout(Duration::from_secs(600), upload)
        .await
        .expect("upload finishes");
    assert_eq!(answer, format!("sink {GB}"));

    let download = async {
        let resp = c
            .request(
                Request::get(format!("http://{addr}/big/{GB}"))
                    .body(empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let mut n = 0_u64;
        while let Some(frame) = body.frame().await {
            n += frame.unwrap().data_ref().map_or(0, |d| d.len() as u64);
        }
        n
    };
    let received = tokio::time::timeout(Duration::from_secs(600), download)
        .await
        .expect("download finishes");
    assert_eq!(received, GB);
    sampler.abort();
    let grown = peak
        .load(Ordering::Relaxed)
        .max(rss_bytes())
        .saturating_sub(before);
    eprintln!("resident memory grew by {} MB at most", grown >> 20);
    assert!(
        grown < 200 << 20,
        "resident memory grew by {} MB while streaming 2 GB",
        grown >> 20
    );
    node.shutdown().await;
}
