//! `fail_open = true` with every group down (docs/design.md §3.3): requests still reach the
//! endpoints that passive checks marked, as if they were healthy — a sticky cookie keeps
//! pinning too — but never disabled ones; without `fail_open` the answer is 503.
//!
//! The endpoints are live backends that answer 502 on `/fail`: with `unhealthy_status = [502]`
//! and `max_fails = 1` one such answer marks each, and `fail_timeout = "300s"` keeps it marked
//! for the whole test.

use crate::common::*;
use crate::harness::*;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use gtd::node::Node;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::task::JoinHandle;

/// A backend task, aborted on drop.
struct Task(JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A live backend: `/fail` answers 502; anything else 200 with body NAME, counted in `served`.
async fn backend(name: &'static str, served: Arc<AtomicU64>) -> (SocketAddr, Task) {
    let (addr, task) = socket_backend(move |stream| {
        let served = served.clone();
        async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let served = served.clone();
                async move {
                    let status = if req.uri().path() == "/fail" {
                        502
                    } else {
                        served.fetch_add(1, Ordering::Relaxed);
                        200
                    };
                    Ok::<_, Infallible>(
                        Response::builder().status(status).body(full(name)).unwrap(),
                    )
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        }
    })
    .await;
    (addr, Task(task))
}

/// The listener's mode in `/status`, and how many of its endpoints count as healthy there.
fn mode(node: &Node) -> (String, usize) {
    let doc = status(node);
    let l = &doc.listeners[0];
    let healthy = l.groups[0].endpoints.iter().filter(|e| e.healthy).count();
    (l.mode.clone(), healthy)
}

async fn http_with_every_endpoint_marked(fail_open: bool) {
    let served = Arc::new(AtomicU64::new(0));
    let (a, _ta) = backend("a", served.clone()).await;
    let (b, _tb) = backend("b", served.clone()).await;
    let marks_long = "max_fails = 1\nfail_timeout = \"300s\"";
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "unhealthy_status = [502]\nsticky = {{ cookie = \"gtd_route\" }}\n{}",
        if fail_open { "fail_open = true" } else { "" }
    );
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            &extra,
            &group(
                "g",
                "cn-beijing",
                100.0,
                "",
                &[(a, marks_long), (b, marks_long)],
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    let c = client();
    let want = if fail_open { "fail-open" } else { "no-route" };
    // Each /fail marks the endpoint it reaches, and is retried on the other one.
    let mut tries = 0;
    while mode(&node) != (want.to_owned(), 0) {
        tries += 1;
        assert!(tries <= 60, "both endpoints marked: {:?}", mode(&node));
        let (status, _, _) = get(&c, &format!("http://{addr}/fail"), &[]).await;
        assert!(status == 502 || status == 503, "{status}");
    }
    let url = format!("http://{addr}/");
    if !fail_open {
        let (status, _, _) = get(&c, &url, &[]).await;
        assert_eq!(status, 503, "no route");
        assert_eq!(
            served.load(Ordering::Relaxed),
            0,
            "no request reached a backend"
        );
        node.shutdown().await;
        return;
    }

    let (status, headers, first) = get(&c, &url, &[]).await;
    assert_eq!(status, 200, "fail-open reaches a marked endpoint");
    let cookie = headers
        .get("set-cookie")
        .and_then(|v| v.to_str().unwrap().split_once(';'))
        .map(|(pair, _)| pair.to_owned())
        .expect("the first response sets the cookie");
    for _ in 0..5 {
        let (status, _, body) = get(&c, &url, &[("cookie", &cookie)]).await;
        assert_eq!((status, body.as_str()), (200, first.as_str()), "pinned");
    }
    assert!(
        metric(&node, "gtd_sticky_hits_total", &[]) >= 5.0,
        "the cookie's endpoint served, marked as it is"
    );
    let mut bodies = std::collections::BTreeSet::new();
    for _ in 0..10 {
        let (status, _, body) = get(&c, &url, &[]).await;
        assert_eq!(status, 200);
        bodies.insert(body);
    }
    assert_eq!(
        bodies.into_iter().collect::<Vec<_>>(),
        ["a", "b"],
        "both marked endpoints serve"
    );
    assert_eq!(
        mode(&node),
        ("fail-open".to_owned(), 0),
        "still marked: fail-open ignored the marks, it did not clear them"
    );

    // Disabled stays out, cookie or not.
    for e in [a, b] {
        admin(
            &node,
            "POST",
            &format!("/endpoints/web/g/{e}/disable"),
            None,
        );
    }
    let before = served.load(Ordering::Relaxed);
    let (status, _, _) = get(&c, &url, &[("cookie", &cookie)]).await;
    assert_eq!(status, 503, "no admissible endpoint");
    let (status, _, _) = get(&c, &url, &[]).await;
    assert_eq!(status, 503);
    assert_eq!(served.load(Ordering::Relaxed), before);
    drop(c);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_fail_open_reaches_marked_endpoints() {
    http_with_every_endpoint_marked(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_without_fail_open_answers_503_when_every_endpoint_is_marked() {
    http_with_every_endpoint_marked(false).await;
}
