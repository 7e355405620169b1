//! What one endpoint's checks decide: thresholds counted check by check, `explicit`,
//! `essential`, every way an HTTP answer can be wrong, TCP and HTTPS checks, the request a
//! check sends (from `source_ip`), a UDP endpoint checked on the TCP port it exposes, and the
//! verdict kept across a reload.

use crate::common::*;
use crate::harness::*;

use std::sync::Arc;
use std::time::Duration;

use gtd::view::Status;

/// Polls `/status` until `done` says so, recording (checks, healthy) of endpoint `address`
/// each time: the pairs are read under one lock in the node, so each is consistent.
async fn watch_checks(
    node: &gtd::node::Node,
    listener: &str,
    g: &str,
    address: &str,
    mut done: impl FnMut(u64, bool, &Status) -> bool,
) -> Vec<(u64, bool)> {
    let mut seen = Vec::new();
    until("the checks the test waits for", || {
        let doc = status(node);
        let c = check_of(&doc, listener, g, address);
        let (checks, healthy) = (c.checks, c.healthy);
        seen.push((checks, healthy));
        done(checks, healthy, &doc)
    })
    .await;
    seen
}

fn http_listener(groups: &str) -> String {
    listener("web", "http", "", groups)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thresholds_are_counted_check_by_check() {
    // Checks 1-3 fail, 4 on pass: unhealthy from the 3rd (unhealthy_threshold 3), healthy again
    // from the 5th (healthy_threshold 2: checks 4 and 5).
    let b = Scripted::start("b", |n| {
        if n <= 3 {
            Reply::status(500)
        } else {
            Reply::ok()
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let check = http_check("unhealthy_threshold = 3\nhealthy_threshold = 2");
    let cfg = write_config(
        dir.path(),
        &http_listener(&group("g", "cn-beijing", 100.0, &check, &[(b.addr, "")])),
    );
    let node = start(&cfg).await;
    let addr = b.addr.to_string();
    let mut modes = Vec::new();
    let seen = watch_checks(&node, "web", "g", &addr, |checks, _, doc| {
        modes.push((checks, doc.listeners[0].mode.clone()));
        checks >= 6
    })
    .await;
    for &(n, healthy) in &seen {
        assert_eq!(healthy, !(3..5).contains(&n), "after check {n}: {seen:?}");
    }
    assert!(seen.iter().any(|&(_, h)| !h), "saw the unhealthy phase");
    // While its only endpoint was out, the listener had no route.
    assert!(
        modes
            .iter()
            .filter(|(n, _)| (3..5).contains(n))
            .all(|(_, m)| m == "no-route"),
        "{modes:?}"
    );
    let doc = status(&node);
    let c = check_of(&doc, "web", "g", &addr);
    assert_eq!(c.result.as_deref(), Some("passed"));
    assert_eq!(c.reason.as_deref(), Some("status 200"));
    assert!(c.at_unix_ms.unwrap() > 1_700_000_000_000);
    assert_eq!(
        metric(
            &node,
            "gtd_health_checks_total",
            &[&format!("endpoint=\"{addr}\""), "result=\"unexpected\""]
        ),
        3.0
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_acts_on_one_answer() {
    // With explicit, the one 500 (check 1) marks at once, and the next 200 brings it back,
    // although both thresholds are 3.
    let b = Scripted::start("b", |n| {
        if n == 1 {
            Reply::status(500)
        } else {
            Reply::ok()
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let check = http_check("unhealthy_threshold = 3\nhealthy_threshold = 3\nexplicit = true");
    let cfg = write_config(
        dir.path(),
        &http_listener(&group("g", "cn-beijing", 100.0, &check, &[(b.addr, "")])),
    );
    let node = start(&cfg).await;
    let seen = watch_checks(&node, "web", "g", &b.addr.to_string(), |n, _, _| n >= 3).await;
    for &(n, healthy) in &seen {
        assert_eq!(healthy, n != 1, "after check {n}: {seen:?}");
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_essential_endpoint_serves_only_once_it_passed() {
    // Check 1 fails, 2 and 3 pass: out from the start, in from check 3.
    let b = Scripted::start("b", |n| {
        if n == 1 {
            Reply::status(503)
        } else {
            Reply::ok()
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let check = http_check("essential = true\nhealthy_threshold = 2");
    let cfg = write_config(
        dir.path(),
        &http_listener(&group("g", "cn-beijing", 100.0, &check, &[(b.addr, "")])),
    );
    let node = start(&cfg).await;
    let url = format!("http://{}/", listener_addr(&node, "web").await);
    let c = client();
    let (code, _) = get(&c, &url).await;
    if b.checks() < 3 {
        assert_eq!(code, 503, "no traffic before the endpoint passed");
        assert_eq!(b.traffic(), 0);
    }
    let seen = watch_checks(&node, "web", "g", &b.addr.to_string(), |n, _, _| n >= 3).await;
    for &(n, healthy) in &seen {
        assert_eq!(healthy, n >= 3, "after check {n}: {seen:?}");
    }
    assert_eq!(get(&c, &url).await, (200, "b".to_owned()));
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_an_answer_can_be_wrong_has_its_reason() {
    let ready = |status: u16, header: Option<&'static str>, body: &'static str| Reply {
        status,
        headers: header.map(|v| vec![("x-ready", v)]).unwrap_or_default(),
        body,
        delay: Duration::ZERO,
        hang: false,
    };
    let good = Scripted::start("good", move |_| ready(201, Some("yes"), "all ready")).await;
    let bad_status = Scripted::start("status", move |_| ready(503, Some("yes"), "ready")).await;
    let missing = Scripted::start("missing", move |_| ready(200, None, "ready")).await;
    let wrong = Scripted::start("wrong", move |_| ready(200, Some("no"), "ready")).await;
    let body = Scripted::start("body", move |_| ready(200, Some("yes"), "starting")).await;
    let hung = Scripted::start("hung", |_| Reply::hang()).await;
    let refusing = Refusing::new();
    let refused: std::net::SocketAddr = refusing.0;
    let check = http_check(
        "unhealthy_threshold = 1\ntimeout = \"1s\"\nexpect_status = [200, \"201-299\"]\n\
         expect_headers = { x-ready = \"yes\" }\nexpect_body = \"ready\"",
    );
    let all = [
        good.addr,
        bad_status.addr,
        missing.addr,
        wrong.addr,
        body.addr,
        hung.addr,
        refused,
    ];
    let endpoints: Vec<_> = all.iter().map(|a| (*a, "max_fails = 0")).collect();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &http_listener(&group("g", "cn-beijing", 100.0, &check, &endpoints)),
    );
    let node = start(&cfg).await;
    until("every endpoint checked", || {
        let doc = status(&node);
        all.iter()
            .all(|a| checks_of(&doc, "web", "g", &a.to_string()) >= 1)
    })
    .await;
    let doc = status(&node);
    let check = |a: std::net::SocketAddr| check_of(&doc, "web", "g", &a.to_string()).clone();
    let good_check = check(good.addr);
    assert!(good_check.healthy, "{good_check:?}");
    assert_eq!(good_check.reason.as_deref(), Some("status 201"));
    let expect = [
        (
            bad_status.addr,
            "unexpected",
            "status 503, expected 200, 201-299",
        ),
        (missing.addr, "unexpected", "no x-ready header"),
        (
            wrong.addr,
            "unexpected",
            "x-ready: \"no\", expected \"yes\"",
        ),
        (
            body.addr,
            "unexpected",
            "status 200, but the body does not contain \"ready\"",
        ),
        (hung.addr, "timeout", "connected, but no answer within"),
        (refused, "refused", "connection refused"),
    ];
    for (addr, result, reason) in expect {
        let c = check(addr);
        assert!(!c.healthy, "{addr}: {c:?}");
        assert_eq!(c.result.as_deref(), Some(result), "{addr}: {c:?}");
        assert!(
            c.reason.as_deref().unwrap().starts_with(reason),
            "{addr}: {c:?}"
        );
    }
    // The group stays healthy on its one good endpoint, which takes all the traffic.
    let url = format!("http://{}/", listener_addr(&node, "web").await);
    let c = client();
    for _ in 0..5 {
        assert_eq!(get(&c, &url).await, (200, "good".to_owned()));
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_sends_what_the_table_says_from_source_ip() {
    let b = Scripted::start("b", |_| Reply::ok()).await;
    let check = "[listener.group.health_check]\nprotocol = \"http\"\ninterval = \"1s\"\n\
                 method = \"POST\"\npath = \"/health/deep?x=1\"\nhost = \"svc.internal\"\n\
                 headers = { x-probe = \"gtd\" }\nbody = \"ping\"\nid_header = true\n";
    let port = free_port(false);
    let listeners = listener_on(
        port,
        "web",
        "http",
        &["cn-beijing"],
        "",
        &group("g", "cn-beijing", 100.0, check, &[(b.addr, "")]),
    );
    let text = config_text(free_port(false), &listeners)
        .replace("[admin]", "[node]\nsource_ip = \"127.0.0.2\"\n[admin]");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, text).unwrap();
    let node = start(&cfg).await;
    until("a check", || !b.seen().is_empty()).await;
    let seen = b.seen()[0].clone();
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.path, "/health/deep?x=1");
    assert_eq!(seen.body, "ping");
    assert_eq!(seen.peer.ip().to_string(), "127.0.0.2");
    let h = |n: &str| seen.headers.get(n).unwrap().to_str().unwrap().to_owned();
    assert_eq!(h("host"), "svc.internal");
    assert_eq!(h("x-probe"), "gtd");
    assert!(h("user-agent").starts_with("gtd-health/"));
    // LISTENER/REGION/NODE_UUID/UNIX_MS
    let id = h("x-gtd-healthcheck-id");
    let parts: Vec<&str> = id.split('/').collect();
    assert_eq!(parts.len(), 4, "{id}");
    assert_eq!(&parts[..2], ["web", "cn-beijing"]);
    assert_eq!(parts[2].len(), 36, "{id}");
    assert_eq!(parts[2].matches('-').count(), 4, "{id}");
    assert!(parts[3].parse::<u64>().unwrap() > 1_700_000_000_000, "{id}");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_checks_and_a_udp_endpoint_checked_on_its_tcp_port() {
    // TCP: an endpoint that accepts passes (and is an RTT sample), one that refuses fails.
    let (up, h) = socket_backend(|_| async {}).await;
    let _up = Backends(vec![h]);
    let refusing = Refusing::new();
    let down: std::net::SocketAddr = refusing.0;
    let check = "[listener.group.health_check]\nprotocol = \"tcp\"\ninterval = \"1s\"\nunhealthy_threshold = 1\n";
    // UDP: its endpoint is checked on a TCP port it exposes (here: `up`, then a closed one).
    let udp_endpoint = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_addr = udp_endpoint.local_addr().unwrap();
    let udp_check = format!("{check}port = {}\n", up.port());
    let listeners = [
        listener(
            "t",
            "tcp",
            "",
            &group("g", "cn-beijing", 100.0, check, &[(up, ""), (down, "")]),
        ),
        listener(
            "u",
            "udp",
            "",
            &group("g", "cn-beijing", 100.0, &udp_check, &[(udp_addr, "")]),
        ),
    ]
    .concat();
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &listeners);
    let node = start(&cfg).await;
    until("both tcp endpoints and the udp one checked", || {
        let doc = status(&node);
        // The planner reads the RTTs every 250 ms.
        group_of(&doc, "t", "g").rtt_source == "measured"
            && [("t", up), ("t", down), ("u", udp_addr)]
                .iter()
                .all(|(l, a)| checks_of(&doc, l, "g", &a.to_string()) >= 1)
    })
    .await;
    let doc = status(&node);
    let up_e = endpoint_of(&doc, "t", "g", &up.to_string());
    let up_c = up_e.check.as_ref().unwrap();
    assert!(up_c.healthy);
    assert_eq!(up_c.reason.as_deref(), Some("connected"));
    assert!(up_e.rtt_ms.is_some(), "{up_e:?}");
    let down_e = endpoint_of(&doc, "t", "g", &down.to_string());
    let down_c = down_e.check.as_ref().unwrap();
    assert!(!down_c.healthy);
    assert_eq!(down_c.reason.as_deref(), Some("connection refused"));
    assert!(!down_e.healthy);
    let udp_c = check_of(&doc, "u", "g", &udp_addr.to_string());
    assert!(udp_c.healthy, "{udp_c:?}");
    // The group's RTT is its best usable endpoint's.
    assert_eq!(group_of(&doc, "t", "g").rtt_ms, up_e.rtt_ms);
    node.shutdown().await;

    // A UDP listener's check without a port is a config error naming it.
    let bad = listener(
        "u",
        "udp",
        "",
        &group("g", "cn-beijing", 100.0, check, &[(udp_addr, "")]),
    );
    let bad_cfg = write_config(dir.path(), &bad);
    let err = match gtd::node::Node::start(options(&bad_cfg)).await {
        Ok(_) => panic!("a udp check without a port was accepted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("set port = N in this health_check"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_checks_use_the_group_tls() {
    let pki = Pki::new();
    let (cert, key) = pki.issue(&["backend.test"], false);
    let tls = server_tls(&cert, &key);
    let good = Scripted::start_on(
        "127.0.0.1:0".parse().unwrap(),
        "good",
        Arc::new(|_| Reply::ok()),
        Some(tls.clone()),
    )
    .await;
    let other = Scripted::start_on(
        "127.0.0.1:0".parse().unwrap(),
        "other",
        Arc::new(|_| Reply::ok()),
        Some(tls),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), pki.ca_pem()).unwrap();
    let check = "[listener.group.health_check]\nprotocol = \"https\"\npath = \"/health\"\n\
                 interval = \"1s\"\nunhealthy_threshold = 1\n";
    // One group trusts the test CA; the other names a server the certificate is not for.
    let trusted = format!("{check}[listener.group.tls]\nca = \"ca.pem\"\nsni = \"backend.test\"\n");
    let wrong_name =
        format!("{check}[listener.group.tls]\nca = \"ca.pem\"\nsni = \"elsewhere.test\"\n");
    let listeners = [
        listener(
            "a",
            "http",
            "",
            &group("g", "cn-beijing", 100.0, &trusted, &[(good.addr, "")]),
        ),
        listener(
            "b",
            "http",
            "",
            &group("g", "cn-beijing", 100.0, &wrong_name, &[(other.addr, "")]),
        ),
    ]
    .concat();
    let cfg = write_config(dir.path(), &listeners);
    let node = start(&cfg).await;
    until("both checked", || {
        let doc = status(&node);
        checks_of(&doc, "a", "g", &good.addr.to_string()) >= 1
            && checks_of(&doc, "b", "g", &other.addr.to_string()) >= 1
    })
    .await;
    let doc = status(&node);
    let a = check_of(&doc, "a", "g", &good.addr.to_string());
    assert_eq!(
        (a.healthy, a.reason.as_deref()),
        (true, Some("status 200")),
        "{a:?}"
    );
    let b = check_of(&doc, "b", "g", &other.addr.to_string());
    assert!(!b.healthy, "{b:?}");
    assert_eq!(b.result.as_deref(), Some("error"), "{b:?}");
    assert!(
        b.reason.as_deref().unwrap().starts_with("TLS handshake:"),
        "{b:?}"
    );
    assert_eq!(
        other.checks(),
        0,
        "no request went over the unverified connection"
    );
    node.shutdown().await;
}

/// A TLS server config for `cert` and `key` (PEM).
fn server_tls(cert: &str, key: &str) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_verdict_of_endpoints_that_stay() {
    let good = Scripted::start("good", |_| Reply::ok()).await;
    let refusing = Refusing::new();
    let refused: std::net::SocketAddr = refusing.0;
    let check = http_check("unhealthy_threshold = 2");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let admin_port = free_port(false);
    let write = |endpoints: &[(std::net::SocketAddr, &str)]| {
        let l = listener_on(
            port,
            "web",
            "http",
            &["cn-beijing"],
            "",
            &group("g", "cn-beijing", 100.0, &check, endpoints),
        );
        std::fs::write(dir.path().join("config.toml"), config_text(admin_port, &l)).unwrap();
    };
    write(&[(good.addr, ""), (refused, "")]);
    let cfg = dir.path().join("config.toml");
    let node = start(&cfg).await;
    let addr = refused.to_string();
    watch_checks(&node, "web", "g", &addr, |_, healthy, _| !healthy).await;
    let before = checks_of(&status(&node), "web", "g", &addr);
    // A new endpoint joins; the two that stay keep their verdicts and counts.
    let newcomer = Scripted::start("new", |_| Reply::ok()).await;
    write(&[(good.addr, ""), (refused, ""), (newcomer.addr, "")]);
    node.reload().await.unwrap();
    let doc = status(&node);
    let kept = endpoint_of(&doc, "web", "g", &addr);
    let kept_check = kept.check.as_ref().unwrap();
    assert!(!kept_check.healthy, "{kept:?}");
    assert!(!kept.healthy, "{kept:?}");
    assert!(kept_check.checks >= before, "{kept:?}");
    assert!(check_of(&doc, "web", "g", &good.addr.to_string()).healthy);
    // Not essential: the newcomer serves from the start.
    assert!(endpoint_of(&doc, "web", "g", &newcomer.addr.to_string()).healthy);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_stop_with_a_reload_that_removes_the_endpoint_and_at_shutdown() {
    let gone = Scripted::start("gone", |_| Reply::ok()).await;
    let kept = Scripted::start("kept", |_| Reply::ok()).await;
    let check = http_check("");
    let dir = tempfile::tempdir().unwrap();
    let (port, admin_port) = (free_port(false), free_port(false));
    let write = |endpoints: &[(std::net::SocketAddr, &str)]| {
        let l = listener_on(
            port,
            "web",
            "http",
            &["cn-beijing"],
            "",
            &group("g", "cn-beijing", 100.0, &check, endpoints),
        );
        std::fs::write(dir.path().join("config.toml"), config_text(admin_port, &l)).unwrap();
    };
    write(&[(gone.addr, ""), (kept.addr, "")]);
    let node = start(&dir.path().join("config.toml")).await;
    until("both checked", || gone.checks() >= 1 && kept.checks() >= 1).await;
    write(&[(kept.addr, "")]);
    node.reload().await.unwrap();
    // Absence can only be watched for a while: three intervals.
    // (Noise can only hide a stray check here, never invent one.)
    let after_reload = gone.checks();
    let kept_before = kept.checks();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        gone.checks(),
        after_reload,
        "no check of a removed endpoint"
    );
    until("the kept endpoint still checked", || {
        kept.checks() > kept_before
    })
    .await;
    node.shutdown().await;
    let at_shutdown = kept.checks();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(kept.checks(), at_shutdown, "no check after shutdown");
}
