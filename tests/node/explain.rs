//! `GET /explain` on a live node against `sim --client` for the same facts (the node's
//! measured RTTs given as latencies, the same groups down): the same document, field for
//! field — groups, ranks, shares and their reasons, the chosen group or the chances, and the
//! balancer's pick. Rotation and source-ip affinity, a failover, a forwarding rule, hash
//! picks, static priorities; bad queries; and `gtd explain` as a user runs it.

use crate::common::*;
use crate::harness::*;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use gtd::node::Node;
use gtd::sim::{Format, Request, Source};
use gtd::view::Explain;

/// Three listeners over two groups each (a Beijing node ranks Beijing first, by estimate and
/// on loopback alike; a rank margin of 10 s keeps that order however a noisy machine delays a
/// probe, on the node as in sim): `web` (HTTP, rotation, ip_hash in Beijing, a rule for /sh/
/// with a consistent hash on the URI in Shanghai), `game` (TCP, source-ip, a hash of the client address in Beijing),
/// `pinned` (TCP, static priorities putting Shanghai first) — and their backends.
fn listeners(a: &[SocketAddr]) -> String {
    let bj = |extra: &str| {
        group(
            "beijing",
            "cn-beijing",
            50.0,
            extra,
            &[(a[0], 2), (a[1], 1)],
        )
    };
    let sh = |ratio: f64, extra: &str| {
        group(
            "shanghai",
            "cn-shanghai",
            ratio,
            extra,
            &[(a[2], 1), (a[3], 1)],
        )
    };
    [
        listener(
            "web",
            "http",
            "rank_margin = \"10s\"\n[[listener.route]]\npath_prefix = [\"/sh/\"]\ngroups = [\"shanghai\"]",
            &[
                bj("balance = \"ip_hash\""),
                sh(
                    50.0,
                    "balance = \"hash\"\nhash_key = \"$request_uri\"\nconsistent = true",
                ),
            ]
            .concat(),
        ),
        listener(
            "game",
            "tcp",
            "affinity = \"source-ip\"\nrank_margin = \"10s\"",
            &[
                bj("balance = \"hash\"\nhash_key = \"$remote_addr\""),
                sh(50.0, ""),
            ]
            .concat(),
        ),
        listener(
            "pinned",
            "tcp",
            "",
            &[
                group("beijing", "cn-beijing", 100.0, "priority = 2", &[(a[0], 1)]),
                group(
                    "shanghai",
                    "cn-shanghai",
                    100.0,
                    "priority = 1",
                    &[(a[2], 1)],
                ),
            ]
            .concat(),
        ),
    ]
    .join("\n")
}

/// `GET /explain` with `query`: (status, body).
fn ask(node: &Node, query: &str) -> (u16, String) {
    admin(node, "GET", &format!("/explain?{query}"), None)
}

/// The node's explanation for `query`.
fn node_explains(node: &Node, query: &str) -> Explain {
    let (code, body) = ask(node, query);
    assert_eq!(code, 200, "{query}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{query}: {e}\n{body}"))
}

/// `sim --client` for the facts `node` showed in `x`: its measured (and static-ranked) RTTs
/// as latencies, `down` failing, the same host and path; the `explain` of `x`'s listener.
fn sim_explains(cfg: &Path, x: &Explain, down: &[&str], path: Option<&str>) -> Explain {
    sim_explains_with(cfg, x, down, path, &[])
}

/// [`sim_explains`] with request headers (`sim --header`).
fn sim_explains_with(
    cfg: &Path,
    x: &Explain,
    down: &[&str],
    path: Option<&str>,
    headers: &[(&str, &str)],
) -> Explain {
    let mut r = Request::new(Source::File(cfg.to_owned()));
    r.region = Some("cn-beijing".to_owned());
    r.format = Format::Json;
    r.client = Some(x.client.parse().unwrap());
    r.path = path.map(str::to_owned);
    r.headers = headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    r.down = down.iter().map(|d| d.to_string()).collect();
    for g in &x.groups {
        if let ("measured" | "static", Some(ms)) = (g.rtt_source.as_str(), g.rtt_ms) {
            r.latency
                .push((format!("cn-beijing/{}/{}", x.listener, g.name), ms));
        }
    }
    let out = gtd::sim::run(&r, &mut Vec::new()).expect("sim runs");
    let doc: serde_json::Value = serde_json::from_str(&out.text).unwrap();
    let l = doc["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["listener"] == x.listener.as_str())
        .expect("the listener in sim");
    serde_json::from_value(l["regions"][0]["explain"].clone()).expect("sim's explain")
}

/// The node's answer for `query` is sim's for the same facts, field for field.
fn same_as_sim(node: &Node, cfg: &Path, query: &str, down: &[&str], path: Option<&str>) -> Explain {
    let x = node_explains(node, query);
    let s = sim_explains(cfg, &x, down, path);
    assert_eq!(x, s, "{query}: the node and sim disagree");
    x
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_explains_as_sim_does() {
    let mut addrs = Vec::new();
    let mut handles = Vec::new();
    for name in ["bj-1", "bj-2", "sh-1", "sh-2"] {
        let (a, h) = tcp_backend(name).await;
        addrs.push(a);
        handles.push(h);
    }
    let _b = Backends(handles);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path(), &listeners(&addrs));
    let node = start(&cfg).await;
    let client = "203.0.113.9";
    // The node's probes measure every group (inside rank_margin, so the catalogue's order
    // holds on the node and in sim alike); sim is given those times.
    until("measured round trips", || {
        ["web", "game"].iter().all(|l| {
            node_explains(&node, &format!("listener={l}&client={client}"))
                .groups
                .iter()
                .all(|g| g.rtt_source == "measured")
        })
    })
    .await;

    // Rotation: each group's chance is its share; no single group, so no single pick.
    let x = same_as_sim(
        &node,
        &cfg,
        &format!("listener=web&client={client}"),
        &[],
        None,
    );
    assert_eq!(x.mode, "cascade");
    let chances: Vec<(&str, f64)> = x
        .chances
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.group.as_str(), c.percent))
        .collect();
    assert_eq!(chances, [("beijing", 62.5), ("shanghai", 37.5)]);
    assert!(x.chosen.is_none() && x.pick.is_none());
    let bj = x.group("beijing").unwrap();
    assert_eq!((bj.rank, bj.step.as_str()), (1, "first-pass+leftover"));
    // Beijing's ip_hash: the first three octets name the endpoint (a slot of weight 3).
    let pick = bj.pick.as_ref().unwrap();
    assert_eq!(pick.by, "ip_hash");
    let hash = pick.hash.as_ref().unwrap();
    assert_eq!((hash.key.as_str(), hash.space), ("203.0.113", 3));
    assert!(pick.endpoint.is_some());
    assert_eq!(
        x.group("shanghai").unwrap().pick.as_ref().unwrap().by,
        "rotation"
    );
    assert_eq!(x.rule.as_ref().unwrap().outcome, "default");

    // A forwarding rule: /sh/ takes Shanghai only, whose consistent hash of the URI names the
    // endpoint: a ring point.
    let x = same_as_sim(
        &node,
        &cfg,
        &format!("listener=web&client={client}&path=/sh/cart"),
        &[],
        Some("/sh/cart"),
    );
    let rule = x.rule.as_ref().unwrap();
    assert_eq!((rule.outcome.as_str(), rule.rule), ("route", Some(1)));
    assert_eq!(x.group("beijing").unwrap().step, "nothing");
    let pick = x.pick.as_ref().expect("one group takes it");
    assert_eq!(pick.by, "hash consistent");
    assert_eq!(pick.hash.as_ref().unwrap().key, "/sh/cart");
    let named = pick.endpoint.clone().expect("the key names the endpoint");
    assert!([addrs[2], addrs[3]].iter().any(|a| a.to_string() == named));

    // Source-ip affinity: the rendezvous hash names the group, the hash of the address the
    // endpoint when that group is Beijing.
    for n in 1..=6 {
        let q = format!("listener=game&client=198.51.100.{n}");
        let x = same_as_sim(&node, &cfg, &q, &[], None);
        let chosen = x.chosen.as_ref().expect("source-ip chooses");
        assert!(x.chances.is_none());
        let pick = x.pick.as_ref().unwrap();
        assert_eq!(pick.group, chosen.group);
        let winner = chosen
            .scores
            .iter()
            .max_by(|a, b| a.score.total_cmp(&b.score))
            .unwrap();
        assert_eq!(winner.group, chosen.group);
        if chosen.group == "beijing" {
            assert_eq!(pick.by, "hash");
            assert_eq!(pick.hash.as_ref().unwrap().key, format!("198.51.100.{n}"));
        }
    }

    // Static priorities: Shanghai first whatever the round trips, and it takes everything.
    let x = same_as_sim(
        &node,
        &cfg,
        &format!("listener=pinned&client={client}"),
        &[],
        None,
    );
    assert_eq!(x.groups[0].name, "shanghai");
    assert_eq!(x.groups[0].rtt_source, "static");
    assert!(x.groups[0].rank_reason.starts_with("static priority 1"));
    assert_eq!(x.pick.as_ref().unwrap().group, "shanghai");

    // A failover: every Beijing endpoint of web disabled through the admin API; sim given
    // the same group down says the same, and Shanghai says whom it took over from.
    for a in &addrs[..2] {
        let (code, body) = admin(
            &node,
            "POST",
            &format!("/endpoints/web/beijing/{a}/disable"),
            None,
        );
        assert_eq!(code, 200, "{body}");
    }
    until("web fails over", || {
        node_explains(&node, &format!("listener=web&client={client}")).mode == "failover"
    })
    .await;
    let x = same_as_sim(
        &node,
        &cfg,
        &format!("listener=web&client={client}"),
        &["web/beijing"],
        None,
    );
    let sh = x.group("shanghai").unwrap();
    assert_eq!((sh.step.as_str(), sh.share), ("failover", 100.0));
    let takeover = sh.failover.as_ref().expect("a takeover");
    assert_eq!(takeover.from, "beijing");
    assert_eq!(x.group("beijing").unwrap().health, "unhealthy");

    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_questions_get_400_naming_the_parameter() {
    let (a, h) = tcp_backend("one").await;
    let _b = Backends(vec![h]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "t",
            "tcp",
            "",
            &group("g", "cn-beijing", 100.0, "", &[(a, 1)]),
        ),
    );
    let node = start(&cfg).await;
    for (query, parameter) in [
        ("client=203.0.113.9", "listener"),
        ("listener=nope&client=203.0.113.9", "listener"),
        ("listener=t", "client"),
        ("listener=t&client=not-an-ip", "client"),
        ("listener=t&client=203.0.113.9&path=/x", "path"),
        ("listener=t&client=203.0.113.9&host=a.example", "host"),
        (
            "listener=t&client=203.0.113.9&header=x-tenant:gold",
            "header",
        ),
    ] {
        let (code, body) = ask(&node, query);
        assert_eq!(code, 400, "{query}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["parameter"], parameter, "{query}: {body}");
        assert!(
            v["error"].as_str().unwrap().starts_with(parameter),
            "{body}"
        );
    }
    // Other methods: 405, as every admin path.
    let (code, _) = admin(&node, "POST", "/explain?listener=t&client=1.2.3.4", None);
    assert_eq!(code, 405);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gtd_explain_asks_a_live_node() {
    let (a1, h1) = tcp_backend("bj").await;
    let (a2, h2) = tcp_backend("sh").await;
    let _b = Backends(vec![h1, h2]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "t",
            "tcp",
            "",
            &[
                group("beijing", "cn-beijing", 50.0, "", &[(a1, 1)]),
                group("shanghai", "cn-shanghai", 50.0, "", &[(a2, 1)]),
            ]
            .concat(),
        ),
    );
    let node = start(&cfg).await;
    let admin_addr = node.admin_addr().to_string();
    let gtd = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gtd"))
            .arg("explain")
            .args(args)
            .args(["--admin", &admin_addr])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = tokio::task::block_in_place(|| gtd(&["t", "203.0.113.9"]));
    assert_eq!(code, Some(0), "{err}");
    for line in [
        "203.0.113.9 → the rotation over the shares picks each decision's group: beijing 62.50 %, shanghai 37.50 %",
        "  1. beijing (cn-beijing)",
        "     share (first-pass+leftover): took 50.00 % of the remaining 100.00 % (ratio 50), then 12.50 % of the leftover, split equally among 2 eligible groups",
        "chances (rotation): beijing 62.50 % shanghai 37.50 %",
    ] {
        assert!(out.contains(line), "missing {line:?} in\n{out}");
    }
    // --json: the node's document itself.
    let (code, out, err) = tokio::task::block_in_place(|| gtd(&["t", "203.0.113.9", "--json"]));
    assert_eq!(code, Some(0), "{err}");
    let printed: Explain = serde_json::from_str(&out).unwrap();
    let (_, body) = ask(&node, "listener=t&client=203.0.113.9");
    assert_eq!(printed, serde_json::from_str::<Explain>(&body).unwrap());
    // A question the node refuses: exit 1, its error on stderr.
    let (code, out, err) = tokio::task::block_in_place(|| gtd(&["nope", "203.0.113.9"]));
    assert_eq!(code, Some(1), "{out}");
    assert!(
        err.starts_with("gtd explain: 400 Bad Request: listener: \"nope\": no such listener"),
        "{err}"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_on_a_header_is_explained_as_sim_explains_it() {
    let (a1, h1) = tcp_backend("bj").await;
    let (a2, h2) = tcp_backend("sh").await;
    let _b = Backends(vec![h1, h2]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        &listener(
            "web",
            "http",
            "rank_margin = \"10s\"\n[[listener.route]]\nheader = { name = \"x-tenant\", value = \"gold\" }\ngroups = [\"shanghai\"]",
            &[
                group("beijing", "cn-beijing", 50.0, "", &[(a1, 1)]),
                group("shanghai", "cn-shanghai", 50.0, "", &[(a2, 1)]),
            ]
            .concat(),
        ),
    );
    let node = start(&cfg).await;
    let q = "listener=web&client=203.0.113.9";
    let plain = node_explains(&node, q);
    assert_eq!(plain.rule.as_ref().unwrap().outcome, "default", "{plain:?}");
    assert_eq!(plain, sim_explains(&cfg, &plain, &[], None));

    let gold = node_explains(&node, &format!("{q}&header=X-Tenant%3Agold"));
    let rule = gold.rule.as_ref().unwrap();
    assert_eq!(
        (rule.outcome.as_str(), rule.rule),
        ("route", Some(1)),
        "{gold:?}"
    );
    assert_eq!(gold.group("beijing").unwrap().step, "nothing");
    assert_eq!(gold.pick.as_ref().unwrap().group, "shanghai");
    let sim = sim_explains_with(&cfg, &gold, &[], None, &[("X-Tenant", "gold")]);
    assert_eq!(gold, sim, "the node and sim disagree on the header's rule");

    // Another value is not the rule's.
    let silver = node_explains(&node, &format!("{q}&header=x-tenant:silver"));
    assert_eq!(silver.rule.as_ref().unwrap().outcome, "default");

    // gtd explain --header asks the same.
    let admin_addr = node.admin_addr().to_string();
    let out = tokio::task::block_in_place(|| {
        Command::new(env!("CARGO_BIN_EXE_gtd"))
            .args(["explain", "web", "203.0.113.9", "--json"])
            .args(["--header", "X-Tenant: gold", "--admin", &admin_addr])
            .output()
            .unwrap()
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Explain = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, gold);
    node.shutdown().await;
}
