//! `--client`: where one client goes, with and without affinity, and forwarding rules, each
//! compared with the decisions the node's own plan makes.

use crate::what_if::{custom, group};
use crate::*;

#[test]
fn client_route() {
    let doc = json(&["--client", "203.0.113.9"]);
    let listener = |name: &str| {
        doc["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["listener"] == name)
            .unwrap()
            .clone()
    };
    for l in doc["listeners"].as_array().unwrap() {
        for r in l["regions"].as_array().unwrap() {
            let route = &r["route"];
            // Every group the client can land in, with its chance: they add up to 100.
            let total: f64 = route["groups"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g["percent"].as_f64().unwrap())
                .sum();
            assert!((total - 100.0).abs() < 1e-9, "{r}");
        }
    }
    // web (affinity none): no fixed group; each group's chance is its share.
    let web = listener("web");
    let route = &web["regions"][0]["route"];
    assert_eq!(route["chosen_by"], "rotation");
    assert!(route["group"].is_null(), "{route}");
    let chances: Vec<(String, f64)> = route["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            assert_eq!(g["endpoint_by"], "method", "{g}");
            (
                g["name"].as_str().unwrap().to_owned(),
                g["percent"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(chances, s(&[("beijing", 62.5), ("shanghai", 37.5)]));
    // Round robin spreads them by weight: 2:1 in Beijing.
    let e = &route["groups"][0]["endpoints"];
    assert_eq!(e[0]["percent"].as_f64().unwrap(), 62.5 * 2.0 / 3.0);
    assert_eq!(e[1]["percent"].as_f64().unwrap(), 62.5 / 3.0);
    // game (source-ip): one group named by the hash, as before; least_conn is load-dependent.
    let game = listener("game");
    let route = &game["regions"][0]["route"];
    assert_eq!(route["chosen_by"], "source-ip");
    assert!(route["group"].is_string(), "{route}");
    assert_eq!(route["endpoint_by"], "rotation");
    assert_eq!(route["groups"][0]["name"], route["group"]);
    assert_eq!(route["groups"][0]["percent"], 100.0);
    assert!(route["groups"][0]["endpoints"][0]["percent"].is_null());
    // voice (affinity none, ratio 100 at home): the local group has the whole share, and the
    // hash of $remote_addr names the endpoint.
    let voice = listener("voice");
    let route = &voice["regions"][0]["route"];
    assert_eq!(route["chosen_by"], "rotation");
    assert_eq!(route["group"], "beijing");
    assert_eq!(route["endpoint_by"], "client");
    assert_eq!(route["groups"][0]["endpoint"], route["endpoint"]);
    assert_eq!(json(&["--client", "203.0.113.9"]), doc);
    // The table says the same.
    let table = sim(&["--client", "203.0.113.9", "--region", "cn-beijing"]);
    for line in [
        "client 203.0.113.9 → no fixed group (affinity none): the node's rotation over the shares picks the group of each request",
        "    beijing    62.50 %  round_robin spreads them: 127.0.0.1:9001 41.67 %, 127.0.0.1:9002 20.83 %",
        "    shanghai   37.50 %  round_robin spreads them: 127.0.0.1:9101 18.75 %, 127.0.0.1:9102 18.75 %",
        "(source-ip: the hash of its address picks it), endpoint 127.0.0.1:901",
        "client 203.0.113.9 → group beijing (affinity none, but the only group with a share: the rotation gives it every flow), endpoint 127.0.0.1:902",
    ] {
        assert!(table.contains(line), "{line:?} not in\n{table}");
    }
}

/// An HTTP listener seen from A with three groups whose methods differ in what a client
/// decides: ip_hash (its address), hash on `$request_uri` (the request's key) and least_conn
/// (nothing: load-dependent).
fn three_methods(dir: &Path, affinity: &str) -> PathBuf {
    let path = custom(dir, "", "");
    let group = |name: &str, region: &str, balance: &str, port: u16| {
        format!(
            "[[listener.group]]\nname = \"{name}\"\nregion = \"{region}\"\nratio = 50\n{balance}\n\
             [[listener.group.endpoint]]\naddress = \"127.0.0.1:{port}\"\n\
             [[listener.group.endpoint]]\naddress = \"127.0.0.1:{}\"\nweight = 3\n",
            port + 1
        )
    };
    let groups = [
        group("a", "r-a", "balance = \"ip_hash\"", 9001),
        group(
            "b",
            "r-b",
            "balance = \"hash\"\nhash_key = \"$request_uri\"",
            9003,
        ),
        group("c", "r-c", "balance = \"least_conn\"", 9005),
    ]
    .concat();
    std::fs::write(
        &path,
        format!(
            "catalog = \"catalog.toml\"\n[[listener]]\nname = \"web\"\nprotocol = \"http\"\nport = 8080\nregions = [\"r-a\"]\naffinity = \"{affinity}\"\n{groups}"
        ),
    )
    .unwrap();
    path
}

/// The decisions the library's own plan makes for one client, `n` times on a fresh node in
/// r-a: how many went to each group (config order).
fn node_decisions(config: &Path, client: std::net::IpAddr, n: usize) -> Vec<usize> {
    use gtd::balance::GroupBalancer;
    use gtd::split::{self, ListenerPlan};
    let cfg = gtd::config::load(config, None).expect("config loads");
    let l = &cfg.listeners[0];
    let now = std::time::Instant::now();
    let balancers: Vec<GroupBalancer> = l
        .groups
        .iter()
        .map(|g| GroupBalancer::new(g, l.protocol, now))
        .collect();
    let facts = split::plan::facts(l, |i| l.groups[i].ratio, &balancers, now);
    let ranking = split::rank(l, &cfg.catalog, "r-a", |_| None);
    let plan = ListenerPlan::build(l, ranking, facts, l.affinity);
    let mut hits = vec![0; l.groups.len()];
    for _ in 0..n {
        hits[plan.plan.choose(client).expect("a route")] += 1;
    }
    hits
}

#[test]
fn a_client_without_affinity_is_spread_as_the_node_spreads_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = three_methods(dir.path(), "none");
    let config = config.to_str().unwrap();
    let ip = "198.51.100.20";
    let doc = json(&["--config", config, "--client", ip]);
    let region = &doc["listeners"][0]["regions"][0];
    let route = &region["route"];
    assert_eq!(route["chosen_by"], "rotation");
    assert!(
        route["group"].is_null() && route["endpoint"].is_null(),
        "{route}"
    );
    let groups = route["groups"].as_array().unwrap();
    // The chance of each group is its share in the node's split, priority order.
    let (_, split) = shares(&doc, "web", "r-a");
    let chances: Vec<(String, f64)> = groups
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap().to_owned(),
                g["percent"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(chances, split);
    let third = 12.5 / 3.0;
    assert_eq!(
        chances,
        s(&[
            ("a", 50.0 + third),
            ("b", 25.0 + third),
            ("c", 12.5 + third)
        ])
    );
    // The node's own plan, asked 6000 times for this one client, spreads it the same way
    // (the rotation keeps every group within one decision of its quota).
    let hits = node_decisions(Path::new(config), ip.parse().unwrap(), 6000);
    for (g, (name, percent)) in groups.iter().zip(&chances) {
        let gi = (name.as_bytes()[0] - b'a') as usize;
        let want = 6000.0 * percent / 100.0;
        assert!(
            (hits[gi] as f64 - want).abs() <= 1.0,
            "{name}: {} decisions, sim says {want}",
            hits[gi]
        );
        let endpoints = g["endpoints"].as_array().unwrap();
        let sum: f64 = endpoints.iter().filter_map(|e| e["percent"].as_f64()).sum();
        match name.as_str() {
            // ip_hash: the client's address names the endpoint, which takes the whole chance.
            "a" => {
                assert_eq!(g["endpoint_by"], "client");
                let e = g["endpoint"].as_str().expect("an endpoint");
                let hit: Vec<&Value> = endpoints.iter().filter(|x| x["address"] == e).collect();
                assert_eq!(hit[0]["percent"].as_f64(), Some(*percent));
                assert!((sum - percent).abs() < 1e-9);
            }
            // hash on $request_uri: no key given, so only the shares of the key space (1:3).
            "b" => {
                assert_eq!(g["endpoint_by"], "request-key");
                assert!(g["endpoint"].is_null());
                assert!((endpoints[1]["percent"].as_f64().unwrap() - percent * 0.75).abs() < 1e-9);
                assert!((sum - percent).abs() < 1e-9);
            }
            // least_conn: load-dependent.
            _ => {
                assert_eq!(g["endpoint_by"], "method");
                assert!(g["endpoint"].is_null());
                assert!(endpoints.iter().all(|e| e["percent"].is_null()));
            }
        }
    }
    // With the request's key, the hash names b's endpoint too.
    let doc = json(&["--config", config, "--client", ip, "--key", "/index.html"]);
    let b = &doc["listeners"][0]["regions"][0]["route"]["groups"][1];
    assert_eq!(
        (b["name"].as_str(), b["endpoint_by"].as_str()),
        (Some("b"), Some("client"))
    );
    assert!(b["endpoint"].is_string());
    // The table: one line per group with its chance and what decides the endpoint.
    let table = sim(&["--config", config, "--client", ip]);
    for line in [
        "no fixed group (affinity none): the node's rotation over the shares picks the group of each request; this client's requests go",
        "    a   54.17 %  endpoint 127.0.0.1:900",
        "(ip_hash: the same for every request of this client)",
        "    b   29.17 %  hash of the request's key (give --key to name the endpoint): 127.0.0.1:9003 7.29 %, 127.0.0.1:9004 21.88 %",
        "    c   16.67 %  least_conn spreads them by load (load-dependent)",
    ] {
        assert!(table.contains(line), "{line:?} not in\n{table}");
    }
}

#[test]
fn a_client_with_source_ip_affinity_keeps_one_group() {
    let dir = tempfile::tempdir().unwrap();
    let config = three_methods(dir.path(), "source-ip");
    let config = config.to_str().unwrap();
    for ip in ["198.51.100.20", "198.51.100.21", "2001:db8::7"] {
        let doc = json(&["--config", config, "--client", ip]);
        let route = &doc["listeners"][0]["regions"][0]["route"];
        assert_eq!(route["chosen_by"], "source-ip");
        let group = route["group"].as_str().expect("one group");
        let groups = route["groups"].as_array().unwrap();
        assert_eq!(groups.len(), 1, "{route}");
        assert_eq!(
            (groups[0]["name"].as_str(), groups[0]["percent"].as_f64()),
            (Some(group), Some(100.0))
        );
        // The node's plan sends every decision of this client there.
        let hits = node_decisions(Path::new(config), ip.parse().unwrap(), 50);
        let gi = (group.as_bytes()[0] - b'a') as usize;
        assert_eq!(hits[gi], 50, "{ip}: {hits:?}, sim says {group}");
        let table = sim(&["--config", config, "--client", ip]);
        assert!(
            table.contains(&format!(
                "client {ip} → group {group} (source-ip: the hash of its address picks it)"
            )),
            "{table}"
        );
    }
}

/// An HTTP listener with two forwarding rules over groups in A, B and C, seen from A.
fn routed(dir: &Path) -> PathBuf {
    let path = custom(dir, "", "");
    let groups: String = [("a", "r-a"), ("b", "r-b"), ("c", "r-c")]
        .iter()
        .enumerate()
        .map(|(i, (name, region))| group(name, region, "50", 9001 + i as u16))
        .collect();
    std::fs::write(
        &path,
        format!(
            r#"catalog = "catalog.toml"
[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["r-a"]
  [[listener.route]]
  host = "api.example.com"
  path_prefix = ["/v2/"]
  groups = ["c", "b"]
  [[listener.route]]
  path_prefix = ["/static/"]
  header = {{ name = "x-tier", value = "gold" }}
  groups = ["b"]
{groups}"#
        ),
    )
    .unwrap();
    path
}

#[test]
fn each_forwarding_rule_has_its_split() {
    let dir = tempfile::tempdir().unwrap();
    let config = routed(dir.path());
    let config = config.to_str().unwrap();
    let doc = json(&["--config", config]);
    let region = &doc["listeners"][0]["regions"][0];
    // The listener's own cascade over a, b, c (A's node ranks them in that order): 50, 25 and
    // 12.5 on the first pass, the 12.5 left split three ways.
    let (_, listener) = shares(&doc, "web", "r-a");
    let third = 12.5 / 3.0;
    assert_eq!(
        listener,
        s(&[
            ("a", 50.0 + third),
            ("b", 25.0 + third),
            ("c", 12.5 + third)
        ])
    );
    let routes = region["routes"].as_array().expect("a routes section");
    assert_eq!(routes.len(), 2);
    // Rule 1 runs the cascade over b and c only: b ranks first from A.
    assert_eq!(routes[0]["rule"], 1);
    assert_eq!(routes[0]["matches"], "host api.example.com, path /v2/");
    assert_eq!(routes[0]["mode"], "cascade");
    let split: Vec<(String, f64)> = routes[0]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap().to_owned(),
                g["share"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(split, s(&[("b", 62.5), ("c", 37.5)]));
    assert_eq!(routes[1]["groups"][0]["share"], 100.0);
    // Down, its rule has no route while the listener fails over.
    let doc = json(&["--config", config, "--down", "b"]);
    let routes = &doc["listeners"][0]["regions"][0]["routes"];
    assert_eq!(routes[1]["mode"], "no-route");
    assert_eq!(routes[0]["groups"][1]["share"], 100.0);
    // The table has the section too; a listener without rules has none (shipped config).
    let table = sim(&["--config", config]);
    assert!(table.contains("forwarding rules"), "{table}");
    assert!(table.contains("host api.example.com, path /v2/"), "{table}");
    assert!(!sim(&[]).contains("forwarding rules"));
}

#[test]
fn a_request_finds_its_rule_and_group() {
    let dir = tempfile::tempdir().unwrap();
    let config = routed(dir.path());
    let config = config.to_str().unwrap();
    let ask = |extra: &[&str]| {
        let mut args = vec!["--config", config, "--client", "203.0.113.9"];
        args.extend(extra);
        json(&args)["listeners"][0]["regions"][0]["route"].clone()
    };
    let r = ask(&["--host", "api.example.com", "--path", "/v2/users"]);
    assert_eq!(r["rule"], 1);
    // Affinity none: the rule's own rotation spreads the request over its two groups.
    let chances: Vec<(String, f64)> = r["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["name"].as_str().unwrap().to_owned(),
                g["percent"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(chances, s(&[("b", 62.5), ("c", 37.5)]), "{r}");
    // The header rule takes only requests carrying it.
    let r = ask(&["--path", "/static/x.css", "--header", "X-Tier: gold"]);
    assert_eq!(
        (r["rule"].clone(), r["group"].clone()),
        (2.into(), "b".into())
    );
    let r = ask(&["--path", "/static/x.css"]);
    assert_eq!(r["rule"], "default");
    // A host a rule claims, on a path none covers: 404.
    let r = ask(&["--host", "api.example.com", "--path", "/v1/"]);
    assert_eq!(r["rule"], "not-found");
    assert!(r["group"].is_null());
    let table = sim(&[
        "--config",
        config,
        "--client",
        "203.0.113.9",
        "--host",
        "api.example.com",
        "--path",
        "/v1/",
    ]);
    assert!(table.contains("→ 404"), "{table}");
    // What a request line could not carry is refused (tests/sim/cli.rs: naming the flag).
    for (value, says) in [
        ("v1/users", "a path starts with /"),
        ("http://api.example.com/v2/", "give the host with --host"),
    ] {
        let err = gtd::sim::parse_path(value).unwrap_err();
        assert!(err.contains(says), "{value}: {err}");
    }
    for (value, says) in [
        ("x tier:gold", "not a header name"),
        ("x-tier", "expected NAME:VALUE"),
    ] {
        let err = gtd::sim::parse_header(value).unwrap_err();
        assert!(err.contains(says), "{value}: {err}");
    }
    // A query is not part of the path rules match.
    let r = ask(&["--host", "api.example.com", "--path", "/v2/?q=1"]);
    assert_eq!(r["rule"], 1);
    // On listeners without rules the request flags change nothing, and the table says so.
    let table = sim(&["--client", "203.0.113.9", "--path", "/v2/"]);
    assert!(table.contains("changed nothing"), "{table}");
}

/// `--client` adds each region's `explain` (a node's `GET /explain` for the same facts) and
/// changes nothing else: the `route` keys stay, and the explanation agrees with them.
#[test]
fn client_explain_beside_the_route() {
    let doc = json(&["--client", "203.0.113.9"]);
    for l in doc["listeners"].as_array().unwrap() {
        for r in l["regions"].as_array().unwrap() {
            let x: gtd::view::Explain =
                serde_json::from_value(r["explain"].clone()).expect("an explanation per region");
            assert_eq!(x.listener, l["listener"].as_str().unwrap());
            assert_eq!(x.region, r["region"].as_str().unwrap());
            assert_eq!(x.mode, r["mode"].as_str().unwrap());
            let route = &r["route"];
            // The same groups, with the same chances (rotation) or the same chosen group.
            let by_route: Vec<(String, f64)> = route["groups"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| {
                    (
                        g["name"].as_str().unwrap().to_owned(),
                        g["percent"].as_f64().unwrap(),
                    )
                })
                .collect();
            match (&x.chosen, &x.chances) {
                (Some(c), None) => assert_eq!(by_route, [(c.group.clone(), 100.0)]),
                (None, Some(c)) => assert_eq!(
                    by_route,
                    c.iter()
                        .map(|c| (c.group.clone(), c.percent))
                        .collect::<Vec<_>>()
                ),
                other => panic!("{other:?}"),
            }
            // Where the client names the endpoint, both name the same one.
            if route["endpoint_by"] == "client" {
                let pick = x.pick.as_ref().expect("one group");
                assert_eq!(pick.endpoint.as_deref(), route["endpoint"].as_str(), "{r}");
            }
            // The groups, in the same order with the same shares as the region's rows.
            let rows: Vec<(String, f64)> = r["groups"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| {
                    (
                        g["name"].as_str().unwrap().to_owned(),
                        g["share"].as_f64().unwrap(),
                    )
                })
                .collect();
            let explained: Vec<(String, f64)> =
                x.groups.iter().map(|g| (g.name.clone(), g.share)).collect();
            assert_eq!(rows, explained);
        }
    }
    // Without --client there is none.
    let plain = json(&[]);
    assert!(plain["listeners"][0]["regions"][0].get("explain").is_none());
}
