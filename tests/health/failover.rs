//! Group health live: a group whose endpoints all die hands its traffic to the next group while
//! GETs keep succeeding, and gets it back when they return; `next-priority` against
//! `recompute` on the same failure, checked against `sim` and with real connections.

use crate::common::*;
use crate::harness::*;
use gtd::sync::lock;
use gtd::view::{EndpointShare, GroupView};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_group_fails_over_and_back_without_a_failed_get() {
    let script = || Arc::new(|_| Reply::ok()) as Arc<dyn Fn(u64) -> Reply + Send + Sync>;
    let b1 = Scripted::start("bj-1", |_| Reply::ok()).await;
    let b2 = Scripted::start("bj-2", |_| Reply::ok()).await;
    let s1 = Scripted::start("sh-1", |_| Reply::ok()).await;
    let (a1, a2) = (b1.addr, b2.addr);
    let check = http_check("unhealthy_threshold = 2\nhealthy_threshold = 1");
    let groups = [
        group(
            "beijing",
            "cn-beijing",
            100.0,
            &check,
            &[(a1, ""), (a2, "")],
        ),
        group("shanghai", "cn-shanghai", 100.0, &check, &[(s1.addr, "")]),
    ]
    .concat();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &listener("web", "http", "", &groups));
    let node = start(&cfg).await;
    let url = format!("http://{}/", listener_addr(&node, "web").await);

    // GETs all along, from four clients, each answer tallied by backend.
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let served = Arc::new(std::sync::Mutex::new(BTreeMap::<String, u64>::new()));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (stop, failed, served, url) =
            (stop.clone(), failed.clone(), served.clone(), url.clone());
        clients.push(tokio::spawn(async move {
            let c = client();
            // Bounded: the test stops it, and it gives up by itself after 20 000 requests.
            for _ in 0..20_000 {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let (code, body) = get(&c, &url).await;
                if code == 200 {
                    *lock(&served).entry(body).or_default() += 1;
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }));
    }
    let count = |name: &str| lock(&served).get(name).copied().unwrap_or(0);
    until("beijing serving", || count("bj-1") > 0 && count("bj-2") > 0).await;
    assert_eq!(
        count("sh-1"),
        0,
        "shanghai takes nothing while beijing is healthy"
    );

    // Both Beijing backends die.
    drop(b1);
    drop(b2);
    until("beijing failed over", || {
        let doc = status(&node);
        doc.listeners[0].mode == "failover"
            && !group_of(&doc, "web", "beijing").healthy
            && group_of(&doc, "web", "shanghai").share == 100.0
    })
    .await;
    let before = count("sh-1");
    until("shanghai serving", || count("sh-1") > before + 50).await;

    // They come back where they were: the next check passes, and traffic returns at once.
    let b1 = Scripted::start_on(a1, "bj-1", script(), None).await;
    let b2 = Scripted::start_on(a2, "bj-2", script(), None).await;
    until("beijing back", || {
        let doc = status(&node);
        doc.listeners[0].mode == "cascade" && group_of(&doc, "web", "beijing").share == 100.0
    })
    .await;
    until("traffic on beijing again", || {
        b1.traffic() > 0 && b2.traffic() > 0
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "every GET answered 200 through the failover and back: {:?}",
        lock(&served)
    );
    assert!(metric(&node, "gtd_failovers_total", &["listener=\"web\""]) >= 1.0);
    assert_eq!(
        metric(&node, "gtd_group_healthy", &["group=\"beijing\""]),
        1.0
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_priority_and_recompute_split_a_failure_differently() {
    use crate::common::socket_backend;
    use tokio::io::AsyncWriteExt;
    // Group A (first, ratio 50) is dead; B (ratio 50) and C (ratio 100) are alive.
    let named = |name: &'static str| {
        socket_backend(move |mut s| async move {
            let _ = s.write_all(name.as_bytes()).await;
        })
    };
    let (b, hb) = named("B").await;
    let (c, hc) = named("C").await;
    let _backends = Backends(vec![hb, hc]);
    let refusing = Refusing::new();
    let dead = refusing.0;
    let check = "[listener.group.health_check]\nprotocol = \"tcp\"\ninterval = \"1s\"\nunhealthy_threshold = 1\n";
    let groups = [
        group("a", "cn-beijing", 50.0, check, &[(dead, "")]),
        group("b", "cn-shanghai", 50.0, check, &[(b, "")]),
        group("c", "eu-central-1", 100.0, check, &[(c, "")]),
    ]
    .concat();
    let listeners = [
        listener("np", "tcp", "failover = \"next-priority\"", &groups),
        listener("rc", "tcp", "failover = \"recompute\"", &groups),
    ]
    .concat();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &listeners);
    let node = start(&cfg).await;
    until("group a down on both listeners", || {
        let doc = status(&node);
        ["np", "rc"].iter().all(|l| !group_of(&doc, l, "a").healthy)
    })
    .await;
    let doc = status(&node);
    let shares = |l: &str| ["a", "b", "c"].map(|g| group_of(&doc, l, g).share);
    // next-priority: all to the highest healthy group, ratios ignored.
    assert_eq!(shares("np"), [0.0, 100.0, 0.0]);
    // recompute: the cascade over B and C: B takes 50, C the remaining 50.
    assert_eq!(shares("rc"), [0.0, 50.0, 50.0]);
    for l in ["np", "rc"] {
        assert_eq!(listener_of(&doc, l).mode, "failover");
    }
    // sim, told that group a is down, says the same.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sim"))
        .args([
            "--config",
            cfg.to_str().unwrap(),
            "--region",
            "cn-beijing",
            "--format",
            "json",
            "--down",
            "a",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sim: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for (l, want) in [("np", [0.0, 100.0, 0.0]), ("rc", [0.0, 50.0, 50.0])] {
        let region = &sim["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["listener"] == l)
            .unwrap()["regions"][0];
        let groups: Vec<GroupView<EndpointShare>> =
            serde_json::from_value(region["groups"].clone()).unwrap();
        let got = ["a", "b", "c"].map(|g| groups.iter().find(|x| x.name == g).unwrap().share);
        assert_eq!(got, want, "sim, listener {l}");
    }
    // And the connections follow: 200 on recompute go 100 / 100 (the rotation is exact).
    let addr = listener_addr(&node, "rc").await;
    let mut tally = BTreeMap::<String, u32>::new();
    for _ in 0..200 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut name = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut s, &mut name)
            .await
            .unwrap();
        *tally.entry(name).or_default() += 1;
    }
    let (nb, nc) = (
        tally.get("B").copied().unwrap_or(0),
        tally.get("C").copied().unwrap_or(0),
    );
    assert_eq!(nb + nc, 200, "{tally:?}");
    assert!(nb.abs_diff(nc) <= 2, "{tally:?}");
    node.shutdown().await;
}
