//! Endpoints named by DNS, served by an authoritative server on loopback that the tests change
//! as they run: every address of a name is a target, TTLs drive re-resolution (addresses added
//! and removed, the state of those that stay kept, open connections untouched), a server gone
//! silent keeps the last good set, NXDOMAIN takes the name out, and a name that never resolved
//! leaves its endpoint unusable with the reason.

use crate::common::*;
use crate::harness::*;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use gtd::view::{DnsView, EndpointView};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

/// TCP backends named by their address, one on each of `ips`, all on one port.
async fn same_port_backends(ips: &[&str]) -> (u16, Vec<JoinHandle<()>>) {
    'port: loop {
        let port = free_port(false);
        let mut handles = Vec::new();
        for ip in ips {
            let addr: SocketAddr = format!("{ip}:{port}").parse().unwrap();
            if std::net::TcpListener::bind(addr).is_err() {
                handles.iter().for_each(JoinHandle::abort);
                continue 'port;
            }
            handles.push(tcp_backend_on(addr, ip).await.1);
        }
        return (port, handles);
    }
}

/// A config whose TCP listener "t" has one group with the endpoint `NAME:port`, resolved by
/// `dns` (TTLs of at least `min_ttl`).
fn named_config(
    dir: &std::path::Path,
    dns: SocketAddr,
    name: &str,
    port: u16,
    extra: &str,
) -> std::path::PathBuf {
    let listener_port = free_port(false);
    let text = format!(
        "[dns]\nnameservers = [\"{dns}\"]\ntimeout = \"500ms\"\nattempts = 1\nmin_ttl = \"1s\"\n\n{}",
        tcp_listener(
            listener_port,
            "",
            &[format!(
                "[[listener.group]]\nname = \"g\"\nregion = \"cn-beijing\"\n{extra}\n\
                 [[listener.group.endpoint]]\naddress = \"{name}:{port}\"\n"
            )]
        )
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, config_text(free_port(false), &text)).unwrap();
    path
}

/// The name's entry in `/status`'s `dns`.
fn name_state(node: &gtd::node::Node, name: &str) -> DnsView {
    status(node)
        .dns
        .remove(name)
        .unwrap_or_else(|| panic!("no {name} in /status"))
}

fn addresses(v: &DnsView) -> Vec<String> {
    v.addresses.clone()
}

/// The endpoints of the first group of the first listener.
fn endpoints(node: &gtd::node::Node) -> Vec<EndpointView> {
    status(node).listeners.remove(0).groups.remove(0).endpoints
}

/// Which backend answers each of `n` new connections through the node.
async fn who_answers(addr: SocketAddr, n: usize) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for _ in 0..n {
        if let Ok(name) = tcp_name(addr).await {
            *seen.entry(name).or_insert(0) += 1;
        }
    }
    seen
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_names_addresses_are_targets_that_follow_its_records_as_their_ttl_runs_out() {
    let dns = DnsServer::start().await;
    let (port, _backends) = same_port_backends(&["127.0.0.1", "127.0.0.2", "127.0.0.3"]).await;
    dns.set("api.test", &ips(&["127.0.0.1", "127.0.0.2"]), 1);
    let dir = tempfile::tempdir().unwrap();
    let cfg = named_config(dir.path(), dns.addr, "api.test", port, "");
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    // Resolved before the first connection: both addresses serve.
    let seen = who_answers(addr, 40).await;
    assert_eq!(
        seen.keys().collect::<Vec<_>>(),
        ["127.0.0.1", "127.0.0.2"],
        "{seen:?}"
    );
    let s = name_state(&node, "api.test");
    assert_eq!(s.state, "resolved", "{s:?}");
    assert_eq!(addresses(&s), ["127.0.0.1", "127.0.0.2"]);
    assert!(metric(&node, "gtd_dns_lookups_total", &["result=\"ok\""]) >= 1.0);
    // Each address is an endpoint of its own in /status and the metrics.
    let id = |ip: &str| format!("api.test:{port}@{ip}");
    let eps = endpoints(&node);
    let ids: Vec<&str> = eps.iter().map(|e| e.id.as_deref().unwrap()).collect();
    assert_eq!(ids, [id("127.0.0.1"), id("127.0.0.2")]);
    assert!(
        metric(
            &node,
            "gtd_connections_total",
            &[&format!("endpoint=\"{}\"", id("127.0.0.2"))]
        ) > 0.0
    );

    // An open connection, and an address disabled by the operator: both outlive the change.
    let mut held = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut name = [0_u8; 10];
    held.read_exact(&mut name).await.unwrap();
    let path = format!("/endpoints/t/g/{}/disable", id("127.0.0.2"));
    assert_eq!(admin(&node, "POST", &path, None).0, 200);

    // The records change: .1 goes, .3 comes, .2 stays.
    dns.set("api.test", &ips(&["127.0.0.2", "127.0.0.3"]), 1);
    // The name's table, then the snapshot built from it: the endpoints traffic goes to.
    until("the new addresses in /status", || {
        let mut ids: Vec<String> = endpoints(&node).into_iter().filter_map(|e| e.id).collect();
        ids.sort();
        addresses(&name_state(&node, "api.test")) == ["127.0.0.2", "127.0.0.3"]
            && ids == [id("127.0.0.2"), id("127.0.0.3")]
    })
    .await;
    // .2 is still disabled (its state was kept), so .3 alone serves.
    let seen = who_answers(addr, 20).await;
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["127.0.0.3"], "{seen:?}");
    let two = endpoints(&node)
        .into_iter()
        .find(|e| e.id == Some(id("127.0.0.2")))
        .unwrap();
    assert!(!two.enabled, "{two:?}");
    // The connection opened before the change still reaches its backend.
    held.write_all(b"still").await.unwrap();
    let mut echo = [0_u8; 5];
    held.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"still");
    // The series of the address that went are gone.
    assert!(metric_lines(&node, &[&id("127.0.0.1")]).is_empty());
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_keeps_the_last_good_addresses_and_nxdomain_takes_the_name_out() {
    let dns = DnsServer::start().await;
    let (port, _backends) = same_port_backends(&["127.0.0.1"]).await;
    dns.set("api.test", &ips(&["127.0.0.1"]), 1);
    let dir = tempfile::tempdir().unwrap();
    let cfg = named_config(dir.path(), dns.addr, "api.test", port, "");
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    assert_eq!(tcp_name(addr).await.unwrap(), "127.0.0.1");

    dns.silence(true);
    until("a timed-out lookup", || {
        metric(&node, "gtd_dns_lookups_total", &["result=\"timeout\""]) >= 1.0
    })
    .await;
    let s = name_state(&node, "api.test");
    assert_eq!(s.state, "stale", "{s:?}");
    assert!(s.error.as_deref().unwrap().contains("timed out"), "{s:?}");
    assert_eq!(addresses(&s), ["127.0.0.1"]);
    // Still served from the last good answer.
    assert_eq!(tcp_name(addr).await.unwrap(), "127.0.0.1");

    dns.silence(false);
    dns.nxdomain("api.test");
    until("NXDOMAIN taking the name out", || {
        name_state(&node, "api.test").state == "unresolved"
    })
    .await;
    let s = name_state(&node, "api.test");
    assert!(s.error.as_deref().unwrap().contains("NXDOMAIN"), "{s:?}");
    // No address, no endpoint: the connection is closed without reaching anything.
    assert!(tcp_name(addr).await.is_err());
    let ep = endpoints(&node).remove(0);
    assert_eq!(ep.resolved, Some(None), "{ep:?}");
    assert!(
        ep.dns_error.as_deref().unwrap().contains("NXDOMAIN"),
        "{ep:?}"
    );
    assert!(metric(&node, "gtd_dns_lookups_total", &["result=\"nxdomain\""]) >= 1.0);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_never_resolved_is_unusable_with_its_reason_until_it_does() {
    let dns = DnsServer::start().await;
    let (port, _backends) = same_port_backends(&["127.0.0.2"]).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = named_config(dir.path(), dns.addr, "late.test", port, "");
    // The node starts: a name that does not resolve is not a config error.
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    let s = name_state(&node, "late.test");
    assert_eq!(s.state, "unresolved", "{s:?}");
    let group = status(&node).listeners.remove(0).groups.remove(0);
    assert!(!group.healthy, "{group:?}");
    assert!(
        group.endpoints[0]
            .dns_error
            .as_deref()
            .unwrap()
            .contains("NXDOMAIN"),
        "{group:?}"
    );
    assert!(tcp_name(addr).await.is_err());

    dns.set("late.test", &ips(&["127.0.0.2"]), 1);
    until("the name resolving", || {
        name_state(&node, "late.test").state == "resolved"
    })
    .await;
    until("a connection served", || {
        std::net::TcpStream::connect(addr)
            .and_then(|mut s| {
                use std::io::Read;
                s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
                let mut b = [0_u8; 9];
                s.read_exact(&mut b).map(|()| b)
            })
            .is_ok_and(|b| &b == b"127.0.0.2")
    })
    .await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_resolves_a_new_name_before_serving_it_and_a_rejected_one_changes_nothing() {
    let dns = DnsServer::start().await;
    let (port, _backends) = same_port_backends(&["127.0.0.1", "127.0.0.2", "127.0.0.3"]).await;
    dns.set("one.test", &ips(&["127.0.0.1"]), 1);
    dns.set("two.test", &ips(&["127.0.0.2"]), 1);
    let dir = tempfile::tempdir().unwrap();
    let cfg = named_config(dir.path(), dns.addr, "one.test", port, "");
    let node = start(&cfg).await;
    let addr = listener_addr(&node, "t").await;
    assert_eq!(tcp_name(addr).await.unwrap(), "127.0.0.1");
    let text = std::fs::read_to_string(&cfg).unwrap();

    // A config naming another host that fails once its names are looked up (its new port is
    // taken): refused, and the running name is still followed.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bad = text.replace("one.test", "two.test").replace(
        &format!("port = {}", addr.port()),
        &format!("port = {}", taken.local_addr().unwrap().port()),
    );
    std::fs::write(&cfg, bad).unwrap();
    let refused = node.reload().await.unwrap_err().to_string();
    assert!(refused.contains("binding tcp"), "{refused}");
    dns.set("one.test", &ips(&["127.0.0.3"]), 1);
    // The name's table, then the snapshot built from it (the endpoints traffic goes to): the
    // table alone can show the new address a moment before the rebuild puts it in service.
    let id = format!("one.test:{port}@127.0.0.3");
    until("one.test followed after a rejected reload", || {
        addresses(&name_state(&node, "one.test")) == ["127.0.0.3"]
            && endpoints(&node)
                .iter()
                .any(|e| e.id.as_deref() == Some(&id))
    })
    .await;
    assert_eq!(tcp_name(addr).await.unwrap(), "127.0.0.3");

    // A good one: the new name answers from the first connection after the reload, and the
    // name no listener uses any more is forgotten.
    std::fs::write(&cfg, text.replace("one.test", "two.test")).unwrap();
    node.reload().await.unwrap();
    assert_eq!(tcp_name(addr).await.unwrap(), "127.0.0.2");
    let names = status(&node).dns;
    assert_eq!(names.keys().collect::<Vec<_>>(), ["two.test"], "{names:?}");
    node.shutdown().await;
}

/// A name disabled or drained through the admin API stays so when its addresses change: a new
/// address takes the name's toggles, as do the same addresses back after an NXDOMAIN emptied
/// the set. Before, each new address came in enabled and took traffic the operator had
/// turned away from the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_disabled_or_drained_by_the_operator_stays_so_as_its_addresses_change() {
    let dns = DnsServer::start().await;
    let (port, _backends) = same_port_backends(&["127.0.0.1", "127.0.0.2", "127.0.0.3"]).await;
    dns.set("api.test", &ips(&["127.0.0.1"]), 1);
    let dir = tempfile::tempdir().unwrap();
    let cfg = named_config(dir.path(), dns.addr, "api.test", port, "");
    let node = start(&cfg).await;
    let id = |ip: &str| format!("api.test:{port}@{ip}");
    let name = format!("api.test:{port}");
    let toggle = |action: &str| {
        let path = format!("/endpoints/t/g/{name}/{action}");
        assert_eq!(admin(&node, "POST", &path, None).0, 200, "{action}");
    };
    let shown = |ids: &[String]| {
        let mut now: Vec<String> = endpoints(&node).into_iter().filter_map(|e| e.id).collect();
        now.sort();
        now == ids
    };
    toggle("disable");
    toggle("drain");
    // A new address, then the old one back beside it.
    for set in [
        vec!["127.0.0.2"],
        vec!["127.0.0.1", "127.0.0.2", "127.0.0.3"],
    ] {
        dns.set("api.test", &ips(&set), 1);
        let want: Vec<String> = set.iter().map(|ip| id(ip)).collect();
        until("the new addresses in /status", || shown(&want)).await;
        for e in endpoints(&node) {
            assert!(!e.enabled && e.drained_by.is_some(), "{set:?}: {e:?}");
        }
    }
    // An NXDOMAIN empties the set (one endpoint without an address), then the addresses
    // come back: still disabled and drained.
    dns.nxdomain("api.test");
    until("NXDOMAIN taking the name out", || {
        endpoints(&node)
            .first()
            .is_some_and(|e| e.resolved == Some(None))
    })
    .await;
    dns.set("api.test", &ips(&["127.0.0.1", "127.0.0.2"]), 1);
    until("the addresses back in /status", || {
        shown(&[id("127.0.0.1"), id("127.0.0.2")])
    })
    .await;
    for e in endpoints(&node) {
        assert!(
            !e.enabled && e.drained_by.is_some(),
            "after NXDOMAIN: {e:?}"
        );
    }
    // Undone by name, every address serves again.
    toggle("enable");
    toggle("undrain");
    for e in endpoints(&node) {
        assert!(e.enabled && e.drained_by.is_none(), "{e:?}");
    }
    // Each address disabled on its own: a new address is a backend nobody turned away.
    for ip in ["127.0.0.1", "127.0.0.2"] {
        let path = format!("/endpoints/t/g/{}/disable", id(ip));
        assert_eq!(admin(&node, "POST", &path, None).0, 200, "{path}");
    }
    dns.set("api.test", &ips(&["127.0.0.3"]), 1);
    until("the new address in /status", || shown(&[id("127.0.0.3")])).await;
    let three = endpoints(&node).remove(0);
    assert!(three.enabled, "{three:?}");
    node.shutdown().await;
}
