//! Outlier detection (docs/design.md §5), end to end with default settings: an endpoint whose
//! `/health` says 200 while every real request gets 503 passes every check, yet after the first
//! few requests it is ejected and gets almost none; `/status` and the metrics say so.

use crate::common::*;
use crate::harness::*;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// An HTTP backend: `/health` answers 200; any other request gets `status` and is counted.
async fn backend(status: u16) -> (SocketAddr, Arc<AtomicU64>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(AtomicU64::new(0));
    let counter = served.clone();
    let handle = tokio::spawn(async move {
        let mut open = JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let counter = counter.clone();
            open.spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let counter = counter.clone();
                    async move {
                        let code = if req.uri().path().starts_with("/health") {
                            200
                        } else {
                            counter.fetch_add(1, Ordering::SeqCst);
                            status
                        };
                        Ok::<_, Infallible>(
                            Response::builder()
                                .status(code)
                                .body(Full::new(Bytes::from_static(b"x")))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, served, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_lies_to_its_checks_is_ejected_with_default_settings() {
    let (a, _, ha) = backend(200).await;
    let (b, _, hb) = backend(200).await;
    let (liar, lies, hl) = backend(503).await;
    let _backends = Backends(vec![ha, hb, hl]);
    let g = group(
        "g",
        "cn-beijing",
        100.0,
        &http_check(""),
        &[(a, 1), (b, 1), (liar, 1)],
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &listener("web", "http", "", &g));
    let node = start(&cfg).await;
    let to = listener_addr(&node, "web").await;
    let client = client();
    let url = format!("http://{to}/page");
    let answers = |n: usize| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let mut bad = 0;
            for _ in 0..n {
                if get(&client, &url).await.0 != 200 {
                    bad += 1;
                }
            }
            bad
        }
    };
    // Warm-up: the first few seconds (here, a few dozen requests) find the liar out.
    let warm = Instant::now();
    answers(60).await;
    assert!(warm.elapsed() < Duration::from_secs(20));
    let doc = status(&node);
    let e = endpoint_of(&doc, "web", "g", &liar.to_string());
    assert!(e.ejected, "{e:?}");
    assert!(
        e.check.as_ref().unwrap().healthy,
        "its checks still pass: {e:?}"
    );
    assert!(e.ejected_for_s.unwrap() > 0.0, "{e:?}");
    assert_eq!(
        metric(
            &node,
            "gtd_outlier_ejections_total",
            &[&format!("endpoint=\"{liar}\"")]
        ),
        1.0
    );
    // Its 503s are its errors of the last minute, and the ejection is on the timeline.
    assert!(
        e.errors.status_5xx >= 1 && e.errors.total == e.errors.status_5xx,
        "{e:?}"
    );
    let (_, body) = admin(&node, "GET", "/events", None);
    let events: gtd::view::Events = serde_json::from_str(&body).unwrap();
    let liar_id = liar.to_string();
    let ejected = events
        .events
        .iter()
        .find(|ev| ev.kind == "ejection")
        .unwrap_or_else(|| panic!("no ejection on the timeline: {events:#?}"));
    assert_eq!(
        (
            ejected.listener.as_deref(),
            ejected.group.as_deref(),
            ejected.endpoint.as_deref()
        ),
        (Some("web"), Some("g"), Some(liar_id.as_str()))
    );
    assert!(
        ejected
            .message
            .starts_with("ejected by outlier detection for 30 s (1st ejection)"),
        "{ejected:?}"
    );
    // The window: every request after the warm-up.
    let before = lies.load(Ordering::SeqCst);
    const WINDOW: usize = 500;
    let bad = answers(WINDOW).await;
    let to_liar = lies.load(Ordering::SeqCst) - before;
    eprintln!("the liar got {to_liar} of {WINDOW} requests after the warm-up; {bad} not 200");
    assert!(
        to_liar * 100 <= 2 * WINDOW as u64,
        "the liar got {to_liar} of {WINDOW} requests after the warm-up"
    );
    assert!(
        bad * 100 <= 2 * WINDOW,
        "{bad} of {WINDOW} answers were not 200"
    );
    node.shutdown().await;
}
