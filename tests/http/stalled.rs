//! Endpoints that stall mid-body are cut off; slow ones are not.

use crate::common::*;
use crate::harness::*;

use std::net::SocketAddr;
use std::time::Duration;

use http::Request;
use http_body_util::BodyExt;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;

/// A backend that answers every request with `content-length: 100`, then sends the body as
/// ten 10-byte chunks `gap` apart, or (no gap) only the first chunk and then nothing while the
/// connection stays open.
async fn dripping_backend(gap: Option<Duration>) -> (SocketAddr, JoinHandle<()>) {
    socket_backend(move |mut s| async move {
        read_head(&mut s).await;
        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")
            .await
            .unwrap();
        let Some(gap) = gap else {
            // Stalled: the connection stays open, silent, until the test ends.
            std::future::pending::<()>().await;
            return;
        };
        for _ in 1..10 {
            tokio::time::sleep(gap).await;
            if s.write_all(b"0123456789").await.is_err() {
                return;
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_silent_mid_body_is_cut_off_a_slow_one_is_not() {
    let (stalled, stalled_task) = dripping_backend(None).await;
    let (slow, slow_task) = dripping_backend(Some(Duration::from_millis(200))).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &format!(
            "{}\n{}",
            listener(
                "stalled",
                "http",
                "upstream_timeout = \"1s\"",
                &group("g", "cn-beijing", 100.0, "", &[(stalled, "")]),
            ),
            listener(
                "slow",
                "http",
                "upstream_timeout = \"2s\"",
                &group("g", "cn-beijing", 100.0, "", &[(slow, "")]),
            ),
        ),
    );
    let node = start(&cfg).await;
    let c = client();

    // Headers and the first bytes arrive; then the endpoint goes silent and gtd cuts the body
    // (the client sees an error, not a hang).
    let addr = listener_addr(&node, "stalled").await;
    let response = c
        .request(
            Request::get(format!("http://{addr}/"))
                .body(empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = tokio::time::timeout(Duration::from_secs(60), response.into_body().collect())
        .await
        .expect("the stalled body ends");
    assert!(body.is_err(), "a cut body is an error for the client");

    // An endpoint that keeps sending, slowly, is never cut: 100 bytes over ~2 s with a 2 s
    // timeout, because no gap reaches it.
    let addr = listener_addr(&node, "slow").await;
    let (status, _, body) = get(&c, &format!("http://{addr}/"), &[]).await;
    assert_eq!(status, 200);
    assert_eq!(body.len(), 100);

    node.shutdown().await;
    stalled_task.abort();
    slow_task.abort();
}
