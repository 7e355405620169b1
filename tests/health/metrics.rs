//! The metrics deploy/prometheus/alerts.yml watches move when their event happens, on a node in
//! this process: a passive mark (`gtd_passive_marks_total`) and the failover it causes
//! (`gtd_listener_mode`), an outlier ejection (`gtd_outlier_ejections_total`), a new priority
//! order (`gtd_rank_changes_total`). Each is read at 0 first, as the series exists from the
//! start. Draining, the revision served and the etcd connection move on a fleet node in
//! tests/deploy/prometheus.rs.

use crate::common::*;
use crate::harness::*;

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `gtd_listener_mode{listener="NAME",mode="MODE"}`.
fn mode(node: &gtd::node::Node, listener: &str, mode: &str) -> f64 {
    let labels = format!("listener=\"{listener}\",mode=\"{mode}\"");
    metric(node, "gtd_listener_mode", &[&labels])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passive_mark_is_counted_and_its_failover_is_the_mode() {
    let down = Refusing::new();
    let (up, h) = socket_backend(|mut s| async move {
        let _ = s.write_all(b"up\n").await;
    })
    .await;
    let _up = Backends(vec![h]);
    let groups = [
        group("beijing", "cn-beijing", 100.0, "", &[(down.0, 1)]),
        group("shanghai", "cn-shanghai", 100.0, "", &[(up, 1)]),
    ]
    .concat();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &listener("tcp", "tcp", "", &groups));
    let node = start(&cfg).await;
    let marks = |node: &gtd::node::Node| {
        let endpoint = format!("endpoint=\"{}\"", down.0);
        metric(node, "gtd_passive_marks_total", &[&endpoint])
    };
    assert_eq!(marks(&node), 0.0);
    assert_eq!(metric_lines(&node, &["gtd_passive_marks_total"]).len(), 2);
    assert_eq!(
        (
            mode(&node, "tcp", "cascade"),
            mode(&node, "tcp", "failover")
        ),
        (1.0, 0.0)
    );

    // The connection's first attempt is refused by Beijing's only endpoint (max_fails = 1):
    // marked, and the retry reaches Shanghai.
    let mut s = TcpStream::connect(listener_addr(&node, "tcp").await)
        .await
        .unwrap();
    let mut hello = [0_u8; 3];
    tokio::time::timeout(Duration::from_secs(30), s.read_exact(&mut hello))
        .await
        .expect("an answer through the retry")
        .unwrap();
    assert_eq!(&hello, b"up\n");
    assert_eq!(marks(&node), 1.0);
    until("the failover shown as the mode", || {
        mode(&node, "tcp", "failover") == 1.0
    })
    .await;
    assert_eq!(mode(&node, "tcp", "cascade"), 0.0);
    assert_eq!(mode(&node, "tcp", "no-route"), 0.0);
    drop(s);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outlier_ejection_is_counted() {
    // `/health` passes everywhere; every request to the liar is answered 503.
    let good = Scripted::start("good", |_| Reply::ok()).await;
    let liar = hyper_backend(503).await;
    let _liar = Backends(vec![liar.1]);
    let g = group(
        "g",
        "cn-beijing",
        100.0,
        &http_check(""),
        &[(good.addr, 1), (liar.0, 1)],
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &listener("web", "http", "", &g));
    let node = start(&cfg).await;
    let ejections = |node: &gtd::node::Node| {
        let endpoint = format!("endpoint=\"{}\"", liar.0);
        metric(node, "gtd_outlier_ejections_total", &[&endpoint])
    };
    assert_eq!(ejections(&node), 0.0);
    let url = format!("http://{}/page", listener_addr(&node, "web").await);
    let client = client();
    // consecutive_5xx = 5 by default: the liar gets half of the requests until ejected.
    for _ in 0..200 {
        if ejections(&node) > 0.0 {
            break;
        }
        get(&client, &url).await;
    }
    assert_eq!(ejections(&node), 1.0);
    let doc = status(&node);
    assert!(endpoint_of(&doc, "web", "g", &liar.0.to_string()).ejected);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_priority_order_is_counted() {
    // Beijing, first by the catalogue from Beijing, answers its checks 50 ms late; Shanghai at
    // once: measured, Shanghai passes it (as in ranking.rs).
    let slow = Scripted::start("slow", |_| Reply::late(Duration::from_millis(50))).await;
    let fast = Scripted::start("fast", |_| Reply::ok()).await;
    let check = http_check("");
    let groups = [
        group("beijing", "cn-beijing", 100.0, &check, &[(slow.addr, "")]),
        group("shanghai", "cn-shanghai", 100.0, &check, &[(fast.addr, "")]),
    ]
    .concat();
    let dir = tempfile::tempdir().unwrap();
    let keys = "rtt_from = \"check\"\nrank_dwell = \"0s\"";
    let cfg = write_config(dir.path(), &listener("web", "http", keys, &groups));
    let node = start(&cfg).await;
    let changes =
        |node: &gtd::node::Node| metric(node, "gtd_rank_changes_total", &["listener=\"web\""]);
    assert_eq!(order(&status(&node), "web"), ["beijing", "shanghai"]);
    assert_eq!(changes(&node), 0.0);
    until("shanghai ranked first", || {
        order(&status(&node), "web") == ["shanghai", "beijing"]
    })
    .await;
    assert_eq!(changes(&node), 1.0);
    node.shutdown().await;
}

/// An HTTP/1.1 backend answering every request `status`, `/health` 200.
async fn hyper_backend(status: u16) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http::{Request, Response};
    use http_body_util::Full;
    use hyper::body::Incoming;
    use hyper_util::rt::TokioIo;

    socket_backend(move |stream| async move {
        let service = hyper::service::service_fn(move |req: Request<Incoming>| async move {
            let code = if req.uri().path().starts_with("/health") {
                200
            } else {
                status
            };
            Ok::<_, Infallible>(
                Response::builder()
                    .status(code)
                    .body(Full::new(Bytes::from_static(b"x")))
                    .unwrap(),
            )
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .await;
    })
    .await
}
