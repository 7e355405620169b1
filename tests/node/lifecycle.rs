//! Reload and lifecycle: reloads under load and bad reloads, metric series ending with what a
//! reload removed, the admin API and its token, SIGTERM draining open connections.

use crate::common::*;
use crate::harness::*;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gtd::node::Node;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A tcp listener "t" on `port`: group beijing (`a`, at `ratio_a`) and then shanghai (`b`).
fn tcp_two_groups(port: u16, a: SocketAddr, b: SocketAddr, ratio_a: f64) -> String {
    tcp_listener(
        port,
        "",
        &[
            group("beijing", "cn-beijing", ratio_a, "", &[(a, 1)]),
            group("shanghai", "cn-shanghai", 100.0, "", &[(b, 1)]),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_load_drops_nothing_and_bad_reload_keeps_config() {
    let (a, h1) = tcp_backend("bj").await;
    let (b, h2) = tcp_backend("sh").await;
    let _b = Backends(vec![h1, h2]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(dir.path(), &tcp_two_groups(port, a, b, 100.0));
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;

    // A long-lived connection opened before the reloads must survive them.
    let mut long = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut line = [0_u8; 3];
    long.read_exact(&mut line).await.unwrap();
    assert_eq!(&line, b"bj\n");

    // Continuous load from two clients while the config changes underneath.
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let mut load = Vec::new();
    for _ in 0..2 {
        let (stop, failures, done) = (stop.clone(), failures.clone(), done.clone());
        load.push(tokio::spawn(async move {
            // Bounded: stops when told, and never runs past 20 000 connections.
            for _ in 0..20_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                match tcp_name(addr).await {
                    Ok(_) => done.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failures.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    let cfg_text = std::fs::read_to_string(&cfg).unwrap();
    for ratio in [50.0, 0.0, 100.0, 30.0] {
        let before = done.load(Ordering::Relaxed);
        until("some traffic", || {
            done.load(Ordering::Relaxed) > before + 50
        })
        .await;
        std::fs::write(
            &cfg,
            cfg_text.replacen("ratio = 100\n", &format!("ratio = {ratio}\n"), 1),
        )
        .unwrap();
        let (status, body) = admin(&node, "POST", "/reload", None);
        assert_eq!(status, 200, "{body}");
    }
    // A broken config: rejected with file:line:col, the running one stays.
    std::fs::write(&cfg, cfg_text.replacen("ratio = 100\n", "ratio = 150\n", 1)).unwrap();
    let (status, body) = admin(&node, "POST", "/reload", None);
    assert_eq!(status, 422);
    assert!(body.contains("ratio 150 is out of range 0..=100"), "{body}");
    assert!(body.contains("config.toml:"), "{body}");
    let before = done.load(Ordering::Relaxed);
    until("traffic after the bad reload", || {
        done.load(Ordering::Relaxed) > before + 50
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "connections failed during reloads"
    );
    assert_eq!(
        metric(&node, "gtd_config_reloads_total", &["result=\"ok\""]),
        4.0
    );
    assert_eq!(
        metric(&node, "gtd_config_reloads_total", &["result=\"error\""]),
        1.0
    );
    // The last good config (beijing at 30) is what runs: from cn-beijing 30 / 70.
    let share = |node: &Node| {
        let doc = crate::common::status(node);
        (doc.listeners[0].groups[0].share, doc)
    };
    assert_eq!(share(&node).0, 30.0);
    // An endpoint disabled through the admin API stays disabled across a reload: shanghai's only
    // endpoint off makes shanghai unhealthy, so beijing takes everything, before and after.
    let (status, _) = admin(
        &node,
        "POST",
        &format!("/endpoints/t/shanghai/{b}/disable"),
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(share(&node).0, 100.0);
    std::fs::write(&cfg, cfg_text.replacen("ratio = 100\n", "ratio = 30\n", 1)).unwrap();
    assert_eq!(admin(&node, "POST", "/reload", None).0, 200);
    let (after, doc) = share(&node);
    assert_eq!(after, 100.0);
    assert!(!doc.listeners[0].groups[1].endpoints[0].enabled);
    admin(
        &node,
        "POST",
        &format!("/endpoints/t/shanghai/{b}/enable"),
        None,
    );
    assert_eq!(share(&node).0, 30.0);

    // The long-lived connection still relays.
    long.write_all(b"still here").await.unwrap();
    let mut echo = [0_u8; 10];
    long.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"still here");
    drop(long);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_ends_the_metric_series_of_removed_listeners_groups_and_endpoints() {
    let (a, h1) = tcp_backend("a").await;
    let (b, h2) = tcp_backend("b").await;
    let (c, h3) = tcp_backend("c").await;
    let _b = Backends(vec![h1, h2, h3]);
    let dir = tempfile::tempdir().unwrap();
    let (port, other_port) = (free_port(false), free_port(false));
    let other = format!(
        "[[listener]]\nname = \"u\"\nprotocol = \"tcp\"\nport = {other_port}\nregions = [\"cn-beijing\"]\n{}",
        group("solo", "cn-beijing", 100.0, "", &[(c, 1)])
    );
    let before = format!(
        "{}{other}",
        tcp_listener(
            port,
            "",
            &[
                group("beijing", "cn-beijing", 50.0, "", &[(a, 1), (b, 1)]),
                group("extra", "cn-shanghai", 100.0, "", &[(c, 1)]),
            ],
        )
    );
    let cfg = write_config(dir.path(), &before);
    let head = std::fs::read_to_string(&cfg).unwrap().replace(&before, "");
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    let share = |node: &Node, g: &str| {
        metric(
            node,
            "gtd_group_share",
            &["listener=\"t\"", &format!("group=\"{g}\"")],
        )
    };
    assert_eq!(
        (share(&node, "beijing"), share(&node, "extra")),
        (50.0, 50.0)
    );
    let on_a = format!("endpoint=\"{a}\"");
    let on_b = format!("endpoint=\"{b}\"");
    assert_eq!(
        metric_lines(&node, &["gtd_endpoint_healthy", &on_b]).len(),
        1
    );
    // Traffic until endpoint a has counted connections, to see that its counters stay.
    for _ in 0..100 {
        if metric(&node, "gtd_connections_total", &[&on_a]) >= 1.0 {
            break;
        }
        tcp_name(addr).await.unwrap();
    }
    let connections_a = metric(&node, "gtd_connections_total", &[&on_a]);
    assert!(connections_a >= 1.0);

    // A rejected reload (a new listener's port is taken) leaves no series of what it built,
    // and the running config's gauges as they were, though it changed a ratio.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let rejected = format!(
        "{}[[listener]]\nname = \"v\"\nprotocol = \"tcp\"\nport = {}\nregions = [\"cn-beijing\"]\n{}",
        before.replace("ratio = 50", "ratio = 80"),
        taken.local_addr().unwrap().port(),
        group("late", "cn-beijing", 100.0, "", &[(c, 1)])
    );
    assert_ne!(rejected.matches("ratio = 80").count(), 0);
    std::fs::write(&cfg, format!("{head}{rejected}")).unwrap();
    let (status, body) = admin(&node, "POST", "/reload", None);
    assert_ne!(status, 200, "{body}");
    assert!(metric_lines(&node, &["listener=\"v\""]).is_empty());
    assert_eq!(
        (share(&node, "beijing"), share(&node, "extra")),
        (50.0, 50.0),
        "the running config's series stay as they were"
    );
    drop(taken);

    // Group "extra", endpoint b and listener "u" go.
    let after = tcp_listener(
        port,
        "",
        &[group("beijing", "cn-beijing", 50.0, "", &[(a, 1)])],
    );
    std::fs::write(&cfg, format!("{head}{after}")).unwrap();
    let (status, body) = admin(&node, "POST", "/reload", None);
    assert_eq!(status, 200, "{body}");
    for gone in ["group=\"extra\"", &on_b, "listener=\"u\""] {
        let lines = metric_lines(&node, &[gone]);
        assert!(
            lines.is_empty(),
            "{gone} still exported:\n{}",
            lines.join("\n")
        );
    }
    // What stays keeps (or updates) its values: beijing alone takes everything.
    assert_eq!(metric(&node, "gtd_group_share", &["listener=\"t\""]), 100.0);
    assert_eq!(
        metric(&node, "gtd_group_healthy", &["group=\"beijing\""]),
        1.0
    );
    assert_eq!(metric(&node, "gtd_endpoint_healthy", &[&on_a]), 1.0);
    assert_eq!(
        metric(&node, "gtd_connections_total", &[&on_a]),
        connections_a
    );
    assert_eq!(
        metric_lines(&node, &["gtd_connect_seconds_count", "group=\"beijing\""]).len(),
        1
    );
    assert_eq!(
        metric(&node, "gtd_config_reloads_total", &["result=\"ok\""]),
        1.0
    );
    assert_eq!(
        metric(&node, "gtd_config_reloads_total", &["result=\"error\""]),
        1.0
    );
    assert_eq!(tcp_name(addr).await.unwrap(), "a");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_status_metrics_and_token() {
    let (a, h) = tcp_backend("x").await;
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(dir.path(), &tcp_two_groups(port, a, a, 50.0));
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("[admin]\n", "[admin]\ntoken = \"s3cret\"\n");
    std::fs::write(&cfg, text).unwrap();
    let node = start(&cfg).await;
    let (status, body) = admin(&node, "GET", "/healthz", None);
    assert_eq!((status, body.trim()), (200, "ok"));
    // The document reads as the typed view (docs/status.md): every key it requires is there.
    let doc = crate::common::status(&node);
    assert_eq!(doc.node.region, "cn-beijing");
    let l = &doc.listeners[0];
    assert_eq!(
        (l.name.as_str(), l.protocol.as_str(), l.mode.as_str()),
        ("t", "tcp", "cascade")
    );
    let g = &l.groups[0];
    assert_eq!((g.name.as_str(), g.priority), ("beijing", 1));
    assert!(g.rtt_ms.is_some() && g.rank.is_some() && g.healthy, "{g:?}");
    // beijing 50 first, shanghai 100 takes the rest: 50 / 50.
    assert_eq!(
        (g.ratio, g.share, g.rtt_source.as_str()),
        (50.0, 50.0, "estimated")
    );
    assert_eq!(g.endpoints.len(), 1);
    // POSTs need the token.
    let (status, _) = admin(&node, "POST", "/reload", None);
    assert_eq!(status, 401);
    let (status, _) = admin(&node, "POST", "/reload", Some("wrong"));
    assert_eq!(status, 401);
    let (status, _) = admin(&node, "POST", "/reload", Some("s3cret"));
    assert_eq!(status, 200);
    // The scheme in any case, as HTTP has it.
    let mut s = StdTcpStream::connect(node.admin_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(
        b"POST /reload HTTP/1.0\r\nAuthorization: bearer s3cret\r\nContent-Length: 0\r\n\r\n",
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.split(' ').nth(1) == Some("200"), "{text}");
    let (status, _) = admin(
        &node,
        "POST",
        "/endpoints/t/nosuch/1.2.3.4:5/disable",
        Some("s3cret"),
    );
    assert_eq!(status, 404);
    // Every metric of the code's table is exposed, with its description.
    let (_, body) = admin(&node, "GET", "/metrics", None);
    for name in [
        "gtd_group_share",
        "gtd_group_healthy",
        "gtd_endpoint_healthy",
        "gtd_config_reloads_total",
        "gtd_connections_active",
    ] {
        assert!(
            body.contains(&format!("# HELP {name} ")),
            "{name} in\n{body}"
        );
    }
    node.shutdown().await;
}

/// A node whose stderr is a pipe nobody reads (a stuck log shipper) keeps serving. Its access
/// log goes to stderr: 1,500 relayed connections write more than a pipe holds, and the
/// access log's thread waits on the full pipe. Then its endpoint stops: the health checks and
/// the failed connects log warnings from the runtime's threads, which used to wait on stderr
/// too, and the node stopped relaying, answering its admin API and checking. It still answers
/// `/healthz`, and SIGTERM ends it.
#[test]
fn a_node_whose_stderr_nobody_reads_keeps_serving() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (a, h) = rt.block_on(tcp_backend("x"));
    let _b = rt.enter();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let check = "[listener.group.health_check]\nprotocol = \"tcp\"\ninterval = \"1s\"\n";
    let listeners = tcp_listener(
        port,
        "",
        &[group("g", "cn-beijing", 100.0, check, &[(a, 1)])],
    );
    let cfg = write_config(
        dir.path(),
        &format!("[log]\naccess = \"stderr\"\n{listeners}"),
    );
    // stderr piped, and the pipe never read.
    let mut child = run_child(&cfg, Stdio::piped());
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while StdTcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "gtd did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    for i in 0..1500 {
        let mut conn = StdTcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut name = [0_u8; 2];
        conn.read_exact(&mut name)
            .unwrap_or_else(|e| panic!("connection {i} not relayed: {e}"));
        assert_eq!(&name, b"x\n");
    }
    // The endpoint stops: warnings from the checks (every second) and from these connects.
    h.abort();
    for _ in 0..20 {
        if let Ok(mut conn) = StdTcpStream::connect(addr) {
            conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let _ = conn.read(&mut [0_u8; 2]);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let admin = admin_in(&cfg);
    // admin_at fails the test when no answer comes within 30 s.
    let (status, _) = admin_at(admin, "GET", "/healthz", None);
    assert!(status == 200 || status == 503, "{status}");
    sigterm(&child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "SIGTERM did not end the node");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_drains_open_connections() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (a, h) = rt.block_on(tcp_backend("x"));
    let _b = rt.enter();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port(false);
    let cfg = write_config(
        dir.path(),
        &tcp_listener(
            port,
            "drain_timeout = \"60s\"",
            &[group("g", "cn-beijing", 100.0, "", &[(a, 1)])],
        ),
    );
    let mut child = run_child(&cfg, Stdio::piped());
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut conn = loop {
        match StdTcpStream::connect(addr) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("gtd did not start: {e}"),
        }
    };
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut name = [0_u8; 2];
    conn.read_exact(&mut name).unwrap();
    assert_eq!(&name, b"x\n");

    sigterm(&child);
    // New connections are refused once the listener closes…
    let deadline = Instant::now() + Duration::from_secs(30);
    while StdTcpStream::connect(addr).is_ok() {
        assert!(
            Instant::now() < deadline,
            "listener still accepting after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // …the admin server stays up for the drain, /healthz telling load balancers to go…
    let admin = admin_in(&cfg);
    assert_eq!(
        admin_at(admin, "GET", "/healthz", None),
        (503, "draining\n".to_owned())
    );
    let (status, metrics) = admin_at(admin, "GET", "/metrics", None);
    assert_eq!(status, 200);
    // A reload now would open the closed ports again with nothing accepting: refused.
    let (status, body) = admin_at(admin, "POST", "/reload", None);
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("draining"), "{body}");
    assert!(
        StdTcpStream::connect(addr).is_err(),
        "the port opened again"
    );
    assert!(
        metrics.contains("gtd_connections_active{listener=\"t\"} 1"),
        "{metrics}"
    );
    // …while the open connection keeps working and the process waits for it.
    conn.write_all(b"ping").unwrap();
    let mut echo = [0_u8; 4];
    conn.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"ping");
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "exited before the connection closed"
    );
    drop(conn);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "gtd did not exit after the last connection closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status}");
    h.abort();
}

/// A reload whose catalogue is a named pipe is refused at once, naming the file, while the node
/// keeps answering (it used to read the pipe on a runtime thread and stop serving until someone
/// wrote to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_from_a_named_pipe_is_refused_and_the_node_keeps_serving() {
    let (_b, dir, cfg) = one_backend_config(free_port(false), "").await;
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    let fifo = dir.path().join("cat.fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text = text.replacen("catalog = ", "catalog = \"cat.fifo\"\n# was: catalog = ", 1);
    assert!(text.contains("catalog = \"cat.fifo\""), "{text}");
    std::fs::write(&cfg, text).unwrap();
    let node = Arc::new(node);
    let n2 = node.clone();
    let (status, body) = tokio::task::spawn_blocking(move || admin(&n2, "POST", "/reload", None))
        .await
        .unwrap();
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("not a regular file (a named pipe)"), "{body}");
    let n2 = node.clone();
    let (status, _) = tokio::task::spawn_blocking(move || admin(&n2, "GET", "/healthz", None))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(tcp_name(addr).await.unwrap(), "a");
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}

/// `--admin` beyond loopback without a token is refused at start, as `[admin] bind` is by the
/// config check, before any port opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_override_beyond_loopback_without_a_token_is_refused() {
    let (_b, _dir, cfg) = one_backend_config(free_port(false), "").await;
    let mut opts = options(&cfg);
    opts.admin_bind = Some("0.0.0.0:0".parse().unwrap());
    let err = match Node::start(opts).await {
        Ok(_) => panic!("an open admin server started"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("reachable beyond this host"), "{err}");
}

/// A reload that would take the token away from an admin server reachable beyond loopback is
/// refused (the admin server is not bound again on reload, so the check at start would not
/// see it), and the token keeps guarding it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_drops_the_token_of_an_exposed_admin_server_is_refused() {
    let (_b, _dir, cfg) = one_backend_config(free_port(false), "").await;
    let text = std::fs::read_to_string(&cfg).unwrap();
    let with_token = text.replace("[admin]\n", "[admin]\ntoken = \"s3cret\"\n");
    assert_ne!(with_token, text);
    std::fs::write(&cfg, &with_token).unwrap();
    let mut opts = options(&cfg);
    opts.admin_bind = Some("0.0.0.0:0".parse().unwrap());
    let node = Arc::new(Node::start(opts).await.expect("a node with a token starts"));
    let at = SocketAddr::from(([127, 0, 0, 1], node.admin_addr().port()));

    std::fs::write(&cfg, &text).unwrap();
    let err = node
        .reload()
        .await
        .expect_err("the token's removal is refused")
        .to_string();
    assert!(err.contains("has no token"), "{err}");
    let (status, _) = tokio::task::spawn_blocking(move || admin_at(at, "POST", "/reload", None))
        .await
        .unwrap();
    assert_eq!(
        status, 401,
        "the running config's token still guards the admin server"
    );
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}

/// A `source_ip` this machine does not have (192.0.2.77, TEST-NET-1) would fail every
/// connection to an endpoint, each as this node's own failure: refused at start, naming the
/// file and the field, and on a reload, the running config kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_ip_that_is_not_this_machines_is_refused() {
    // With non-local binds allowed, every address binds: nothing to tell apart.
    if std::fs::read_to_string("/proc/sys/net/ipv4/ip_nonlocal_bind").is_ok_and(|v| v.trim() == "1")
    {
        println!(
            "net.ipv4.ip_nonlocal_bind = 1 on this host: a foreign source_ip binds; not tested"
        );
        return;
    }
    let (_b, _dir, cfg) = one_backend_config(free_port(false), "").await;
    let text = std::fs::read_to_string(&cfg).unwrap();
    let foreign = text.replace("[admin]\n", "[node]\nsource_ip = \"192.0.2.77\"\n[admin]\n");
    assert_ne!(foreign, text);
    std::fs::write(&cfg, &foreign).unwrap();
    let err = Node::start(options(&cfg))
        .await
        .err()
        .expect("a foreign source_ip is refused at start")
        .to_string();
    assert!(
        err.contains("config.toml: [node] source_ip = 192.0.2.77: not an address of this machine"),
        "{err}"
    );
    let mut opts = options(&cfg);
    opts.source_ip = Some("192.0.2.78".parse().unwrap());
    let err = Node::start(opts)
        .await
        .err()
        .expect("and from the command line")
        .to_string();
    assert!(
        err.contains("--source-ip 192.0.2.78: not an address"),
        "{err}"
    );

    std::fs::write(
        &cfg,
        text.replace("[admin]\n", "[node]\nsource_ip = \"127.0.0.1\"\n[admin]\n"),
    )
    .unwrap();
    let node = Node::start(options(&cfg))
        .await
        .expect("a local source_ip starts");
    std::fs::write(&cfg, &foreign).unwrap();
    let err = node
        .reload()
        .await
        .expect_err("a reload to a foreign one is refused")
        .to_string();
    assert!(err.contains("not an address of this machine"), "{err}");
    node.shutdown().await;
}

/// The listen queue `ss` reports for the TCP socket listening on `port` (its Send-Q column).
fn listen_queue(port: u16) -> u32 {
    let out = Command::new("ss")
        .args(["-ltnH", &format!("sport = :{port}")])
        .output()
        .expect("ss (iproute2) runs");
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .next()
        .unwrap_or_else(|| panic!("nothing listens on {port}"));
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// `backlog` sets the listen queue of the port, and a reload changes it on the bound socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backlog_sets_the_listen_queue_and_a_reload_changes_it() {
    let port = free_port(false);
    let (_b, _dir, cfg) = one_backend_config(port, "backlog = 77").await;
    let node = start(&cfg).await;
    assert_eq!(listen_queue(port), 77);
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("backlog = 77", "backlog = 99")).unwrap();
    let node = Arc::new(node);
    let n2 = node.clone();
    let (status, body) = tokio::task::spawn_blocking(move || admin(&n2, "POST", "/reload", None))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(listen_queue(port), 99);
    let addr = listener_addr(&node, "t").await;
    assert_eq!(tcp_name(addr).await.unwrap(), "a");
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}

/// A TCP listener "t" on `port` with `extra` keys, one group over one backend answering "a":
/// the backend (stopped when dropped), the config's directory and its path.
async fn one_backend_config(
    port: u16,
    extra: &str,
) -> (Backends, tempfile::TempDir, std::path::PathBuf) {
    let (a, h) = tcp_backend("a").await;
    let dir = tempfile::tempdir().unwrap();
    let groups = [group("g", "cn-beijing", 100.0, "", &[(a, 1)])];
    let cfg = write_config(dir.path(), &tcp_listener(port, extra, &groups));
    (Backends(vec![h]), dir, cfg)
}

/// Each listener drains for its own `drain_timeout`, not the longest one in the config: a TCP
/// connection and an HTTP request still waiting on its endpoint, on listeners of 1 s, are cut
/// while a TCP connection on a listener of 60 s carries on; closing that one ends the drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_listener_drains_for_its_own_drain_timeout() {
    let (a, h) = tcp_backend("x").await;
    // An HTTP endpoint that takes requests and never answers.
    let stall = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stall_addr = stall.local_addr().unwrap();
    let asked = Arc::new(AtomicU64::new(0));
    let stalling = tokio::spawn({
        let asked = Arc::clone(&asked);
        async move {
            let mut held = Vec::new();
            while let Ok((mut s, _)) = stall.accept().await {
                let mut buf = [0_u8; 1024];
                let _ = s.read(&mut buf).await;
                asked.fetch_add(1, Ordering::Relaxed);
                held.push(s);
            }
        }
    });
    let _b = Backends(vec![h, stalling]);
    let (short, long, web) = (free_port(false), free_port(false), free_port(false));
    let tcp = |port, name, drain| {
        listener_on(
            port,
            name,
            "tcp",
            &["cn-beijing"],
            &format!("drain_timeout = \"{drain}\""),
            &group("g", "cn-beijing", 100.0, "", &[(a, 1)]),
        )
    };
    let http = listener_on(
        web,
        "web",
        "http",
        &["cn-beijing"],
        "drain_timeout = \"1s\"\nupstream_timeout = \"5m\"",
        &group("g", "cn-beijing", 100.0, "", &[(stall_addr, 1)]),
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &[tcp(short, "short", "1s"), tcp(long, "long", "60s"), http].join("\n"),
    );
    let node = start(&cfg).await;
    let on = |port: u16| async move {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let mut name = [0_u8; 2];
        s.read_exact(&mut name).await.unwrap();
        assert_eq!(&name, b"x\n");
        s
    };
    let mut on_short = on(short).await;
    let mut on_long = on(long).await;
    let mut on_web = tokio::net::TcpStream::connect(("127.0.0.1", web))
        .await
        .unwrap();
    on_web
        .write_all(b"GET /slow HTTP/1.1\r\nHost: example\r\n\r\n")
        .await
        .unwrap();
    until("the HTTP request at its endpoint", || {
        asked.load(Ordering::Relaxed) == 1
    })
    .await;

    let stopping = tokio::spawn(node.shutdown());
    for (what, s) in [("tcp", &mut on_short), ("http", &mut on_web)] {
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut rest))
            .await
            .unwrap_or_else(|_| {
                panic!("the {what} listener's 1 s drain did not cut its connection")
            })
            .ok();
    }
    on_long.write_all(b"ping").await.unwrap();
    let mut echo = [0_u8; 4];
    tokio::time::timeout(Duration::from_secs(10), on_long.read_exact(&mut echo))
        .await
        .expect("the 60 s listener's connection still relays")
        .unwrap();
    assert_eq!(&echo, b"ping");
    assert!(!stopping.is_finished());
    drop(on_long);
    tokio::time::timeout(Duration::from_secs(30), stopping)
        .await
        .expect("the drain ended with the last connection")
        .unwrap();
}

/// A reload that leaves a listener's split as it was continues its rotation rather than
/// starting it again. Each rebuild (a reload, a fleet revision, any DNS name's new addresses)
/// made the first pick the largest share again: at 90/10 with five connections between
/// reloads, shanghai got none of its 10 %.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_keeps_the_split_continues_its_rotation() {
    let (a, ha) = tcp_backend("beijing").await;
    let (b, hb) = tcp_backend("shanghai").await;
    let _b = Backends(vec![ha, hb]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &tcp_two_groups(free_port(false), a, b, 90.0));
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    let mut shanghai = 0;
    for _ in 0..12 {
        for _ in 0..5 {
            if tcp_name(addr).await.unwrap() == "shanghai" {
                shanghai += 1;
            }
        }
        node.reload().await.unwrap();
    }
    // 10 % of 60 is 6; the rotation keeps every group within a decision or two of its share.
    assert!(
        (4..=8).contains(&shanghai),
        "shanghai took {shanghai} of 60 connections at 10 %"
    );
    node.shutdown().await;
}
