//! Sticky cookies: pinned, kept while draining, moved when disabled.

use crate::common::*;
use crate::harness::*;

use std::net::SocketAddr;
use std::sync::Arc;

use http::HeaderMap;

fn cookie_value(headers: &HeaderMap) -> Option<String> {
    let set = headers.get("set-cookie")?.to_str().unwrap();
    let (pair, _) = set.split_once(';')?;
    Some(pair.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_cookie_pins_draining_keeps_disabling_moves() {
    let backends = [
        Backend::start("s0", 200).await,
        Backend::start("s1", 200).await,
        Backend::start("s2", 200).await,
    ];
    let dir = tempfile::tempdir().unwrap();
    let endpoints: Vec<(SocketAddr, &str)> = backends.iter().map(|b| (b.addr, "")).collect();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "sticky = { cookie = \"gtd_route\" }",
            &group("g", "cn-beijing", 100.0, "", &endpoints),
        ),
    );
    let node = Arc::new(start(&cfg).await);
    let addr = listener_addr(&node, "web").await;
    let c = client();
    let url = format!("http://{addr}/");
    let (_, headers, first) = get(&c, &url, &[]).await;
    let cookie = cookie_value(&headers).expect("the first response sets the cookie");
    assert!(cookie.starts_with("gtd_route="), "{cookie}");
    let cookie_header = format!("{cookie}; other=1");
    for _ in 0..10 {
        let (_, headers, body) = get(&c, &url, &[("cookie", &cookie_header)]).await;
        assert_eq!(body, first, "pinned");
        assert!(
            headers.get("set-cookie").is_none(),
            "valid cookie: not set again"
        );
    }
    // Without the cookie the rotation goes on.
    let (_, _, other) = get(&c, &url, &[]).await;
    assert_ne!(other, first);

    // Draining the endpoint (reload) keeps sticky clients on it.
    let index: usize = first[1..].parse().unwrap();
    let pinned = backends[index].addr;
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        &format!("address = \"{pinned}\"\n"),
        &format!("address = \"{pinned}\"\ndrain = true\n"),
    );
    std::fs::write(&cfg, text).unwrap();
    node.reload().await.unwrap();
    for _ in 0..5 {
        let (_, _, body) = get(&c, &url, &[("cookie", &cookie_header)]).await;
        assert_eq!(body, first, "a draining endpoint serves sticky requests");
    }
    for _ in 0..6 {
        let (_, _, body) = get(&c, &url, &[]).await;
        assert_ne!(body, first, "no new traffic to a draining endpoint");
    }
    // Disabled: re-decided elsewhere, and the cookie replaced.
    let n2 = node.clone();
    tokio::task::spawn_blocking(move || {
        admin(
            &n2,
            "POST",
            &format!("/endpoints/web/g/{pinned}/disable"),
            None,
        )
    })
    .await
    .unwrap();
    let (_, headers, moved) = get(&c, &url, &[("cookie", &cookie_header)]).await;
    assert_ne!(moved, first);
    let replaced = cookie_value(&headers).expect("cookie replaced");
    assert_ne!(replaced, cookie);
    let (_, _, again) = get(&c, &url, &[("cookie", &replaced)]).await;
    assert_eq!(again, moved);
    // A forged or stale cookie is simply re-decided.
    let (status, headers, _) = get(&c, &url, &[("cookie", "gtd_route=0123456789abcdef")]).await;
    assert_eq!(status, 200);
    assert!(headers.get("set-cookie").is_some());
    let n2 = node.clone();
    let hits = tokio::task::spawn_blocking(move || metric(&n2, "gtd_sticky_hits_total", &[]))
        .await
        .unwrap();
    assert_eq!(hits, 16.0);
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}
