//! The dashboard (`GET /` on the admin server, docs/design.md §7) in a real browser: headless
//! Chromium, started by the test and driven over its DevTools protocol ([`cdp`]), loads the
//! page of a node running in this process, with real backends and client connections on
//! loopback. The DOM must show what `/status` says (groups in order, shares, health, mode,
//! endpoints); a click on an endpoint's toggle, the admin token typed into the form the page
//! shows, must disable it and the page must show the failover, then the failback; the observed
//! shares must follow the traffic. A screenshot goes to `target/dashboard.png`.
//!
//! Without Chromium the browser tests print why and pass, except under `CI`, where they fail
//! (`.ci/run` installs Debian's `chromium`). Waits are for events, with generous bounds; every
//! process and task a test starts is stopped by its handle.

mod cdp;
#[path = "../common/mod.rs"]
mod common;
mod errors;
mod web_page;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use cdp::{Browser, Page, chromium_or_skip};
use common::*;
use gtd::node::dashboard::{Asset, CONTENT_SECURITY_POLICY};
use gtd::view::Status;

const TOKEN: &str = "s3cret-token";

/// Tasks aborted on drop.
struct Aborted(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Aborted {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

/// A TCP backend that writes its name and closes.
async fn named_backend(name: &'static str) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    socket_backend(move |mut s| async move {
        let _ = s.write_all(format!("{name}\n").as_bytes()).await;
    })
    .await
}

/// Client connections to `addr`, one every few milliseconds, from a thread, until dropped
/// (bounded: 60 000 connections or 10 minutes).
struct Load {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Load {
    fn start(addr: SocketAddr) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(600);
            for _ in 0..60_000 {
                if flag.load(Ordering::Relaxed) || Instant::now() > until {
                    return;
                }
                if let Ok(mut s) = TcpStream::connect(addr) {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                    let _ = s.read_to_end(&mut Vec::new());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Load {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A TCP listener `t` with Beijing (ratio 50) above Shanghai (ratio 50), one endpoint each,
/// static priorities (a busy machine's RTT samples cannot reorder them), the admin token set.
fn config(dir: &Path, bj: SocketAddr, sh: SocketAddr) -> std::path::PathBuf {
    let port = free_port(false);
    let text = format!(
        "catalog = {catalog:?}\n[admin]\nbind = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n\n{}",
        listener_on(
            port,
            "t",
            "tcp",
            &["cn-beijing"],
            "",
            &[
                group("beijing", "cn-beijing", 50.0, "priority = 1", &[(bj, 1)]),
                group("shanghai", "cn-shanghai", 50.0, "priority = 2", &[(sh, 1)]),
            ]
            .concat()
        ),
        catalog = root().join("regions/catalog.toml").display().to_string(),
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// What the page shows of every listener, read from its DOM.
const DOM: &str = r#"JSON.stringify([...document.querySelectorAll('[data-listener]')].map(l => ({
  name: l.dataset.listener, mode: l.dataset.mode,
  shown_mode: l.querySelector('.mode').textContent,
  groups: [...l.querySelectorAll('.group')].map(g => ({
    name: g.dataset.group, share: g.dataset.share, healthy: g.dataset.healthy,
    shown: g.querySelector('.num.expected').textContent,
    health: g.querySelector('.ghead .badge').textContent,
    endpoints: [...g.querySelectorAll('.endpoint')].map(e => ({
      address: e.dataset.endpoint, healthy: e.dataset.healthy, enabled: e.dataset.enabled,
      state: e.querySelector('.badge').textContent,
      toggle: e.querySelector('.toggle').textContent,
    })),
  })),
})))"#;

/// The same, as the page should draw it from a `/status` document.
fn expected(status: &Status) -> Value {
    let listeners: Vec<Value> = status
        .listeners
        .iter()
        .map(|l| {
            let groups: Vec<Value> = l
                .groups
                .iter()
                .map(|g| {
                    let (share, healthy) = (g.share, g.healthy);
                    let endpoints: Vec<Value> = g
                        .endpoints
                        .iter()
                        .map(|e| {
                            let (enabled, up) = (e.enabled, e.healthy);
                            json!({
                                "address": e.address, "healthy": up.to_string(),
                                "enabled": enabled.to_string(),
                                "state": if !enabled { "disabled" } else if e.drain { "draining" } else if up { "up" } else { "failing" },
                                "toggle": if enabled { "disable" } else { "enable" },
                            })
                        })
                        .collect();
                    json!({
                        "name": g.name, "share": format!("{share:.6}"),
                        "healthy": healthy.to_string(), "shown": format!("{share:.2} %"),
                        "health": if healthy { "healthy" } else if g.drained { "drained" } else { "unhealthy" },
                        "endpoints": endpoints,
                    })
                })
                .collect();
            json!({"name": l.name, "mode": l.mode, "shown_mode": l.mode, "groups": groups})
        })
        .collect();
    Value::Array(listeners)
}

/// Waits (bounded: 90 s) until the page shows what `/status` says and `check` holds of that
/// document; returns it.
fn page_shows_status(
    page: &mut Page,
    admin: SocketAddr,
    what: &str,
    check: impl Fn(&Status) -> bool,
) -> Status {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let doc = status_at(admin);
        let dom: Value = page
            .eval(DOM)
            .as_str()
            .map_or(Value::Null, |s| serde_json::from_str(s).unwrap());
        if check(&doc) && dom == expected(&doc) {
            return doc;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for the page to show {what}\npage:   {dom}\nstatus: {}",
            expected(&doc)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn share(doc: &Status, group: &str) -> f64 {
    doc.listeners[0].group(group).unwrap().share
}

/// A group's observed share as the page computed it (empty before it can).
fn observed(page: &mut Page, group: &str) -> String {
    page.eval(&format!(
        "document.querySelector('[data-group=\"{group}\"]').dataset.observed"
    ))
    .as_str()
    .unwrap_or("")
    .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_status_and_toggles_an_endpoint_by_click() {
    let Some(exe) = chromium_or_skip("dashboard_shows_status_and_toggles_an_endpoint_by_click")
    else {
        return;
    };
    let (bj, h1) = named_backend("bj-1").await;
    let (sh, h2) = named_backend("sh-1").await;
    let _backends = Aborted(vec![h1, h2]);
    let dir = tempfile::tempdir().unwrap();
    let node = Arc::new(start(&config(dir.path(), bj, sh)).await);
    let load = Load::start(listener_addr(&node, "t").await);
    let admin = node.admin_addr();

    tokio::task::spawn_blocking(move || browse(&exe, admin, bj))
        .await
        .expect("the browser part passed");
    drop(load);
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}

fn browse(exe: &Path, admin: SocketAddr, bj: SocketAddr) {
    let browser = Browser::start(exe);
    let mut page = browser.page();
    page.navigate(&format!("http://{admin}/"));

    // What /status says, in priority order: the worked example 50/50 → 62.5/37.5.
    let doc = page_shows_status(&mut page, admin, "the cascade", |d| {
        d.listeners[0].mode == "cascade"
    });
    assert_eq!(
        (share(&doc, "beijing"), share(&doc, "shanghai")),
        (62.5, 37.5)
    );

    // The observed shares come from the served counters, so traffic shows on both groups.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (b, s) = (
            observed(&mut page, "beijing"),
            observed(&mut page, "shanghai"),
        );
        let parse = |x: &str| x.parse::<f64>().unwrap_or(0.0);
        if parse(&b) > 0.0 && parse(&s) > 0.0 {
            assert!((parse(&b) + parse(&s) - 100.0).abs() < 1e-6, "{b} + {s}");
            break;
        }
        assert!(Instant::now() < deadline, "observed shares: {b:?} {s:?}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Disable Beijing's endpoint by clicking its toggle: the node wants the token, the page
    // asks for it, and the click goes through once it is typed in.
    let toggle = format!("[data-group=\"beijing\"] [data-endpoint=\"{bj}\"] .toggle");
    page.click(&toggle);
    page.wait_for(
        "the token form",
        "!document.getElementById('token-form').hidden",
    );
    page.click("#token");
    page.type_text(TOKEN);
    page.click("#token-ok");
    let doc = page_shows_status(&mut page, admin, "the failover", |d| {
        d.listeners[0].mode == "failover"
    });
    assert_eq!(
        (share(&doc, "beijing"), share(&doc, "shanghai")),
        (0.0, 100.0)
    );
    page.wait_for(
        "the reason of the failover",
        "document.querySelector('.reason').textContent.includes('beijing is unhealthy; shanghai takes all traffic')",
    );
    // New connections all go to Shanghai now, and the observed share follows within its
    // window.
    let deadline = Instant::now() + Duration::from_secs(90);
    while (
        observed(&mut page, "beijing"),
        observed(&mut page, "shanghai"),
    ) != ("0.000000".to_owned(), "100.000000".to_owned())
    {
        assert!(Instant::now() < deadline, "observed never followed");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The token lives in the tab's session storage only.
    assert_eq!(
        page.eval(
            "[sessionStorage.getItem('gtd-admin-token'), localStorage.length, document.cookie]"
        ),
        json!([TOKEN, 0, ""])
    );
    screenshot(&mut page, "dashboard.png");

    // Enable it again: the tab remembers the token, so one click fails back.
    page.click(&toggle);
    let doc = page_shows_status(&mut page, admin, "the failback", |d| {
        d.listeners[0].mode == "cascade"
    });
    assert_eq!(share(&doc, "beijing"), 62.5);
    page.wait_for(
        "the token form to stay closed",
        "document.getElementById('token-form').hidden",
    );

    // Drain it on this node: its group has nothing to take new traffic, so Shanghai takes
    // all; the button then offers the undrain, which fails back.
    let drainer = format!("[data-group=\"beijing\"] [data-endpoint=\"{bj}\"] .drainer");
    assert_eq!(
        page.eval(&format!("document.querySelector('{drainer}').textContent")),
        "drain"
    );
    page.click(&drainer);
    let doc = page_shows_status(&mut page, admin, "the drain", |d| {
        d.listeners[0].mode == "failover"
    });
    let e = &doc.listeners[0]
        .groups
        .iter()
        .find(|g| g.name == "beijing")
        .unwrap()
        .endpoints[0];
    assert!(e.drain && e.enabled, "{e:?}");
    assert_eq!(e.drained_by.as_ref().unwrap().source, "admin");
    page.wait_for(
        "the undrain button and the badge",
        &format!(
            "document.querySelector('{drainer}').textContent === 'undrain' && \
             document.querySelector('[data-group=\"beijing\"] [data-endpoint=\"{bj}\"] .badge').title.startsWith(\"drained through this node's admin API\")"
        ),
    );
    page.click(&drainer);
    page_shows_status(&mut page, admin, "the undrain", |d| {
        d.listeners[0].mode == "cascade"
    });

    // This node runs without etcd: /fleet is 404, and once the page has asked for it the
    // fleet tab stays hidden.
    assert_eq!(admin_at(admin, "GET", "/fleet", None).0, 404);
    page.wait_for(
        "the page to ask for /fleet",
        "performance.getEntriesByType('resource').some(e => e.name.endsWith('/fleet'))",
    );
    assert_eq!(
        page.eval(
            "[document.getElementById('tabs').hidden, document.getElementById('fleet').hidden]"
        ),
        json!([true, true])
    );
    assert!(page.problems.is_empty(), "{:#?}", page.problems);
}

/// Writes the page as `target/NAME`, for people to look at.
fn screenshot(page: &mut Page, name: &str) {
    let png = page.screenshot();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join(name);
    std::fs::write(&path, png).unwrap();
    println!("screenshot: {}", path.display());
}

/// A server of the dashboard's own files and an older node's `/status` (fewer keys: no
/// served counts, RTTs, checks or failover), and `/fleet` when given one, until dropped.
/// Test-only: the node itself has no `/fleet` on this branch.
struct OldNode {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl OldNode {
    fn start(fleet: Option<String>) -> OldNode {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let status = json!({
                "node": {"region": "cn-beijing"},
                "listeners": [{"name": "old", "mode": "cascade", "groups": [
                    {"name": "g1", "share": 100.0, "healthy": true,
                     "endpoints": [{"address": "127.0.0.1:1", "healthy": true, "enabled": true}]},
                    {"name": "g2"},
                ]}],
            })
            .to_string();
            for conn in listener.incoming() {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(mut s) = conn else { continue };
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut head = Vec::new();
                let mut byte = [0_u8; 1];
                while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                let line = String::from_utf8_lossy(&head);
                let path = line.split(' ').nth(1).unwrap_or("");
                let (code, ctype, body) = match path {
                    "/status" => ("200 OK", "application/json", status.as_str()),
                    "/fleet" if fleet.is_some() => {
                        ("200 OK", "application/json", fleet.as_deref().unwrap())
                    }
                    "/" => ("200 OK", Asset::Page.content_type(), Asset::Page.body()),
                    "/dashboard.js" => {
                        ("200 OK", Asset::Script.content_type(), Asset::Script.body())
                    }
                    "/dashboard.css" => {
                        ("200 OK", Asset::Style.content_type(), Asset::Style.body())
                    }
                    _ => (
                        "404 Not Found",
                        "application/json",
                        r#"{"error":"not found"}"#,
                    ),
                };
                let _ = write!(
                    s,
                    "HTTP/1.1 {code}\r\ncontent-type: {ctype}\r\ncontent-security-policy: {CONTENT_SECURITY_POLICY}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        OldNode {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for OldNode {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn page_draws_an_older_status_without_its_missing_keys() {
    let Some(exe) = chromium_or_skip("page_draws_an_older_status_without_its_missing_keys") else {
        return;
    };
    let old = OldNode::start(None);
    let browser = Browser::start(&exe);
    let mut page = browser.page();
    page.navigate(&format!("http://{}/", old.addr));
    page.wait_for(
        "both groups drawn",
        "document.querySelectorAll('[data-listener=\"old\"] .group').length === 2",
    );
    page.wait_for(
        "the note that no served counts come",
        "document.querySelector('.reason').textContent.includes('reports no served counts')",
    );
    let shown = page.eval(
        "[...document.querySelectorAll('.group')].map(g => [g.dataset.group, g.querySelector('.num.expected').textContent, g.querySelector('.num.observed').textContent])",
    );
    assert_eq!(shown, json!([["g1", "100.00 %", "—"], ["g2", "—", "—"]]));
    assert!(page.problems.is_empty(), "{:#?}", page.problems);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assets_are_served_with_their_types_and_policy() {
    let dir = tempfile::tempdir().unwrap();
    let (bj, h1) = named_backend("bj-1").await;
    let _backends = Aborted(vec![h1]);
    let node = start(&config(dir.path(), bj, bj)).await;
    let admin_addr = node.admin_addr();
    let raw = tokio::task::spawn_blocking(move || {
        ["/", "/dashboard.js", "/dashboard.css"].map(|path| {
            let mut s = TcpStream::connect(admin_addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            write!(s, "GET {path} HTTP/1.0\r\nHost: {admin_addr}\r\n\r\n").unwrap();
            let mut text = String::new();
            s.read_to_string(&mut text).unwrap();
            text
        })
    })
    .await
    .unwrap();
    for (text, (asset, ctype)) in raw.iter().zip([
        (Asset::Page, "text/html; charset=utf-8"),
        (Asset::Script, "text/javascript; charset=utf-8"),
        (Asset::Style, "text/css; charset=utf-8"),
    ]) {
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let head = head.to_ascii_lowercase();
        assert!(head.starts_with("http/1.0 200"), "{head}");
        assert!(
            head.contains(&format!("content-type: {ctype}\r\n")),
            "{head}"
        );
        assert!(
            head.contains(&format!(
                "content-security-policy: {}\r\n",
                CONTENT_SECURITY_POLICY.to_ascii_lowercase()
            )),
            "{head}"
        );
        assert!(head.contains("x-content-type-options: nosniff"), "{head}");
        assert_eq!(body, asset.body());
    }
    // What was there before stays: other methods on `/` are 404, POSTs still need the token,
    // /status is JSON.
    let node = Arc::new(node);
    let n = node.clone();
    let (post_root, post_reload, status) = tokio::task::spawn_blocking(move || {
        (
            admin(&n, "POST", "/", Some(TOKEN)).0,
            admin(&n, "POST", "/reload", None).0,
            admin(&n, "GET", "/status", None),
        )
    })
    .await
    .unwrap();
    assert_eq!((post_root, post_reload, status.0), (404, 401, 200));
    assert!(serde_json::from_str::<Value>(&status.1).is_ok());
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}

/// The fleet tab against the document `GET /fleet` serves (a stub serves it: the real one
/// needs etcd): it appears, and shows the nodes, who is behind the latest revision, a refusal
/// with its reason, the disagreement, a missing node, a stale read, a fleet drain and an admin
/// drain on one node.
#[test]
fn fleet_tab_draws_the_fleet_document() {
    let Some(exe) = chromium_or_skip("fleet_tab_draws_the_fleet_document") else {
        return;
    };
    let node = |id: &str, applied: u64, refused: Value| {
        json!({"id": id, "region": "cn-beijing", "admin": "127.0.0.2:9100", "version": "0.1.0",
               "applied": applied, "refused": refused, "uptime_s": 120, "updated_at_ms": 1764612000000_u64,
               "listeners": [{"name": "web", "mode": "cascade", "reason": null, "groups": [
                   {"name": "beijing", "share": 62.5, "healthy": true},
                   {"name": "shanghai", "share": 37.5, "healthy": true}]}]})
    };
    // Shanghai's entry says one endpoint had 10 or more errors in the last minute.
    let mut shanghai = node(
        "cn-shanghai@127.0.0.3:9100",
        7,
        json!({"revision": 8, "reason": "ratio 150 is out of range"}),
    );
    shanghai["errors"] = json!([{"listener": "web", "group": "beijing",
                                 "endpoint": "127.0.0.1:9001", "at_least": 10}]);
    // And that its admin API drained one endpoint; the fleet drains another everywhere, a
    // third node is missing, and the answer came from one member without quorum. Those parts
    // are the real types, serialized as `GET /fleet` serializes them.
    shanghai["toggles"] = serde_json::to_value([gtd::fleet::registry::Toggle {
        listener: "web".into(),
        group: "shanghai".into(),
        endpoint: "127.0.0.1:9102".into(),
        enabled: true,
        drained: true,
    }])
    .unwrap();
    let drains = serde_json::to_value([gtd::fleet::drain::Drain {
        listener: "web".into(),
        group: "beijing".into(),
        endpoint: Some("127.0.0.1:9001".into()),
        by: "ops@vm".into(),
        at_ms: 1764612000000,
        message: Some("kernel upgrade".into()),
    }])
    .unwrap();
    let missing = serde_json::to_value([gtd::fleet::expected::Missing {
        id: "cn-hangzhou@127.0.0.4:9100".into(),
        region: "cn-hangzhou".into(),
        admin: "127.0.0.4:9100".into(),
        registered_at_ms: 1764610000000,
        since_ms: Some(1764611000000),
        last_applied: Some(6),
        etcd_revision: Some(40),
    }])
    .unwrap();
    let stale = serde_json::to_value(gtd::fleet::stale::Stale {
        member: "http://127.0.0.9:12379".into(),
        raft_index: 77,
        revision: 41,
        leader: false,
        why: "etcdserver: no leader".into(),
    })
    .unwrap();
    let fleet = json!({
        "prefix": "/gtd", "latest": {"revision": 8, "pushed_at_ms": 1764612000000_u64},
        "all_latest": false,
        "nodes": [
            node("cn-beijing@127.0.0.2:9100", 8, Value::Null),
            shanghai,
        ],
        "disagreements": [{"listener": "web", "group": "beijing",
                           "healthy": ["cn-beijing@127.0.0.2:9100"], "unhealthy": ["cn-shanghai@127.0.0.3:9100"]}],
        "all_present": false, "missing": missing, "stale": true, "stale_from": stale, "drains": drains,
    });
    let old = OldNode::start(Some(fleet.to_string()));
    let browser = Browser::start(&exe);
    let mut page = browser.page();
    page.navigate(&format!("http://{}/", old.addr));
    page.wait_for("the fleet tab", "!document.getElementById('tabs').hidden");
    page.click("#tab-fleet");
    page.wait_for("the fleet", "!document.getElementById('fleet').hidden");
    let rows = page.eval(
        "[...document.querySelectorAll('#fleet tr[data-node]')].map(r => [...r.children].map(c => c.textContent))",
    );
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0][2], "8");
    assert_eq!(rows[1][2], "7 (latest 8)");
    assert_eq!(rows[1][3], "refused revision 8: ratio 150 is out of range");
    assert_eq!(
        (rows[0][6].as_str(), rows[1][6].as_str()),
        (Some(""), Some("web/beijing/127.0.0.1:9001 10+"))
    );
    assert!(
        rows[0][5].as_str().unwrap().contains("beijing 62.50 %"),
        "{rows:?}"
    );
    let missing = page
        .eval("[...document.querySelectorAll('#fleet tr[data-missing]')].map(r => r.textContent)");
    let missing = missing[0].as_str().unwrap();
    assert!(
        missing.starts_with("cn-hangzhou@127.0.0.4:9100cn-hangzhou · 127.0.0.4:9100missing since ")
            && missing.contains(", last served revision 6 (gtd fleet forget cn-hangzhou@"),
        "{missing}"
    );
    let apart = page.eval(
        "[...document.querySelectorAll('#fleet tr[data-drain], #fleet tr[data-toggle]')].map(r => [...r.children].map(c => c.textContent))",
    );
    let apart = apart.as_array().unwrap();
    assert_eq!(apart.len(), 2, "{apart:?}");
    assert_eq!(apart[0][0], "web/beijing/127.0.0.1:9001");
    assert_eq!(apart[0][1], "fleet-wide");
    assert!(
        apart[0][2].as_str().unwrap().starts_with("ops@vm, "),
        "{apart:?}"
    );
    assert_eq!(apart[0][3], "kernel upgrade");
    assert_eq!(apart[1][0], "web/shanghai/127.0.0.1:9102");
    assert_eq!(apart[1][1], "drained");
    assert_eq!(apart[1][2], "on cn-shanghai@127.0.0.3:9100 (its admin API)");
    let text = page.eval("document.getElementById('fleet').textContent");
    let text = text.as_str().unwrap();
    assert!(
        text.contains("STALE: read from http://127.0.0.9:12379's own store (raft index 77, etcd revision 41, no leader)"),
        "{text}"
    );
    assert!(text.contains("not every node runs it"), "{text}");
    assert!(
        text.contains("web/beijingcn-beijing@127.0.0.2:9100cn-shanghai@127.0.0.3:9100"),
        "{text}"
    );
    screenshot(&mut page, "dashboard-fleet.png");
    page.click("#tab-listeners");
    page.wait_for(
        "the listeners again",
        "document.getElementById('fleet').hidden",
    );
    assert!(page.problems.is_empty(), "{:#?}", page.problems);
}

/// Under `failover = "graceful"` the expected bar is the split: a group's parts (first pass,
/// leftover, and the spill from above, each at what the group keeps of it) add up to its
/// share in `/status`. Beijing with one of its three endpoints enabled keeps 1.4 × 1/3 of its
/// 62.5 %; Shanghai takes the rest, its bar with a spill part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_bars_add_up_to_the_share() {
    let Some(exe) = chromium_or_skip("graceful_bars_add_up_to_the_share") else {
        return;
    };
    let (b1, h1) = named_backend("bj-1").await;
    let (b2, h2) = named_backend("bj-2").await;
    let (b3, h3) = named_backend("bj-3").await;
    let (sh, h4) = named_backend("sh-1").await;
    let _backends = Aborted(vec![h1, h2, h3, h4]);
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "catalog = {catalog:?}\n[admin]\nbind = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n\n{}",
        listener_on(
            free_port(false),
            "t",
            "tcp",
            &["cn-beijing"],
            "failover = \"graceful\"",
            &[
                group(
                    "beijing",
                    "cn-beijing",
                    50.0,
                    "priority = 1",
                    &[(b1, 1), (b2, 1), (b3, 1)]
                ),
                group("shanghai", "cn-shanghai", 50.0, "priority = 2", &[(sh, 1)]),
            ]
            .concat()
        ),
        catalog = root().join("regions/catalog.toml").display().to_string(),
    );
    let path = dir.path().join("config.toml");
    std::fs::write(&path, text).unwrap();
    let node = Arc::new(start(&path).await);
    let admin = node.admin_addr();
    tokio::task::spawn_blocking(move || {
        for b in [b2, b3] {
            let (code, body) = admin_at(
                admin,
                "POST",
                &format!("/endpoints/t/beijing/{b}/disable"),
                Some(TOKEN),
            );
            assert_eq!(code, 200, "{body}");
        }
        let browser = Browser::start(&exe);
        let mut page = browser.page();
        page.navigate(&format!("http://{admin}/"));
        let bars = |page: &mut Page, group: &str| -> Vec<(String, f64)> {
            let v = page.eval(&format!(
                "[...(document.querySelector('[data-group=\"{group}\"] .track') || {{children: []}}).children]\
                 .map(s => [s.className, +s.dataset.w])"
            ));
            v.as_array()
                .unwrap()
                .iter()
                .map(|p| (p[0].as_str().unwrap().to_owned(), p[1].as_f64().unwrap()))
                .collect()
        };
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let doc = status_at(admin);
            let (bj, sh) = (share(&doc, "beijing"), share(&doc, "shanghai"));
            let (bjb, shb) = (bars(&mut page, "beijing"), bars(&mut page, "shanghai"));
            let sum = |b: &[(String, f64)]| b.iter().map(|p| p.1).sum::<f64>();
            let graded = (bj - 62.5 * 1.4 / 3.0).abs() < 1e-6;
            if graded
                && (sum(&bjb) - bj).abs() < 1e-3
                && (sum(&shb) - sh).abs() < 1e-3
                && shb.iter().any(|p| p.0 == "seg spill" && p.1 > 30.0)
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the bars never added up: beijing {bj} {bjb:?}, shanghai {sh} {shb:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(page.problems.is_empty(), "{:#?}", page.problems);
    })
    .await
    .expect("the browser part passed");
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}
