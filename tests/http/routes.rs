//! Forwarding rules choose groups; paths no rule claims get 404.

use crate::common::*;
use crate::harness::*;

use std::sync::Arc;

use gtd::view::RouteView;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_rules_choose_groups_and_unclaimed_paths_get_404() {
    let a = Backend::start("a", 200).await;
    let b = Backend::start("b", 200).await;
    let cc = Backend::start("c", 200).await;
    let dir = tempfile::tempdir().unwrap();
    let routes = "\
[[listener.route]]
host = \"api.example.com\"
path_prefix = [\"/v2/\"]
groups = [\"b\"]
[[listener.route]]
host = \"*.static.test\"
groups = [\"c\"]
[[listener.route]]
path_prefix = [\"/img/\"]
groups = [\"c\"]
[[listener.route]]
host = \"api.example.com\"
path_prefix = [\"/v2/beta/\"]
header = { name = \"X-Canary\", value = \"1\" }
groups = [\"c\"]
";
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            routes,
            &format!(
                "{}{}{}",
                group("a", "cn-beijing", 100.0, "", &[(a.addr, "")]),
                group("b", "cn-shanghai", 100.0, "", &[(b.addr, "")]),
                group("c", "ap-southeast-1", 100.0, "", &[(cc.addr, "")]),
            ),
        ),
    );
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "web").await;
    // The node's /status shows each rule's split exactly as sim computes it for this node.
    let doc = status(&node);
    let sim = std::process::Command::new(env!("CARGO_BIN_EXE_sim"))
        .args([
            "--config",
            cfg.to_str().unwrap(),
            "--region",
            "cn-beijing",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let sim: serde_json::Value = serde_json::from_slice(&sim.stdout).unwrap();
    let node_routes = &doc.listeners[0].routes;
    assert_eq!(node_routes.len(), 4, "{doc:?}");
    let sim_routes: Vec<RouteView> =
        serde_json::from_value(sim["listeners"][0]["regions"][0]["routes"].clone()).unwrap();
    assert_eq!(*node_routes, sim_routes);
    assert_eq!(node_routes[0].matches, "host api.example.com, path /v2/");
    let c = client();
    let url = |path: &str| format!("http://{addr}{path}");
    // (Host, path, extra headers, status, backend)
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], u16, &'a str);
    let cases: &[Case<'_>] = &[
        ("API.example.com:8080", "/v2/users", &[], 200, "b"),
        ("api.example.com", "/v2/beta/x", &[], 200, "b"),
        (
            "api.example.com",
            "/v2/beta/x",
            &[("x-canary", "1")],
            200,
            "c",
        ),
        // The host is claimed, no rule matches /v1/, no host-only rule: 404.
        ("api.example.com", "/v1/users", &[], 404, ""),
        // A path-only rule is a rule for its path, on a claimed host too.
        ("api.example.com", "/img/logo.png", &[], 200, "c"),
        ("cdn.static.test", "/anything", &[], 200, "c"),
        ("other.test", "/img/logo.png", &[], 200, "c"),
        ("other.test", "/", &[], 200, "a"),
    ];
    for (host, path, extra, status, backend) in cases {
        let mut headers = vec![("host", *host)];
        headers.extend_from_slice(extra);
        let (got, _, body) = get(&c, &url(path), &headers).await;
        assert_eq!(got, *status, "{host}{path}: {body}");
        if *status == 200 {
            assert_eq!(body, *backend, "{host}{path}");
        }
    }
    // A route whose groups are all down answers 503 while the others still route.
    let node = Arc::new(node);
    let n2 = node.clone();
    let b_addr = b.addr;
    let (status, _) = tokio::task::spawn_blocking(move || {
        admin(
            &n2,
            "POST",
            &format!("/endpoints/web/b/{b_addr}/disable"),
            None,
        )
    })
    .await
    .unwrap();
    assert_eq!(status, 200);
    let (got, _, _) = get(&c, &url("/v2/users"), &[("host", "api.example.com")]).await;
    assert_eq!(got, 503);
    let (got, _, body) = get(&c, &url("/"), &[("host", "other.test")]).await;
    assert_eq!((got, body.as_str()), (200, "a"));
    let n2 = node.clone();
    let (not_found, no_route) = tokio::task::spawn_blocking(move || {
        (
            metric(
                &n2,
                "gtd_requests_total",
                &["group=\"\"", "code_class=\"4xx\""],
            ),
            metric(&n2, "gtd_no_route_total", &[]),
        )
    })
    .await
    .unwrap();
    assert_eq!((not_found, no_route), (1.0, 1.0));
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}
