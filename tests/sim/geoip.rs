//! `sim` with a `[geoip]` database written by the test: `--client` placed through it and, under
//! `priority_by = "client-location"`, routed by the client's distance to the groups (the node's
//! ranking for a client without coordinates); `[demand]` entries naming addresses and prefixes
//! added to the acceleration region nearest to them.

use std::path::{Path, PathBuf};

use crate::{json, root, sim, sim_err};

#[path = "../common/geoip.rs"]
#[allow(dead_code)]
mod db;

use db::*;

/// A config with `[geoip]` (the test database) and a TCP listener served from Beijing and
/// Virginia with a group in each, both at ratio 100.
fn config(dir: &Path, kind: &str, located: bool) -> PathBuf {
    let nets: Vec<Net> = places()
        .into_iter()
        .map(|n| if located { n } else { Net { at: None, ..n } })
        .collect();
    write_mmdb(dir, "geo.mmdb", kind, &nets);
    let text = format!(
        r#"catalog = {:?}
[geoip]
database = "geo.mmdb"
countries = ["CN"]

[[listener]]
name = "t"
protocol = "tcp"
port = 7000
regions = ["cn-beijing", "us-east-1"]
priority_by = "client-location"
[[listener.group]]
name = "beijing"
region = "cn-beijing"
ratio = 100
[[listener.group.endpoint]]
address = "127.0.0.1:9999"
[[listener.group]]
name = "virginia"
region = "us-east-1"
ratio = 100
[[listener.group.endpoint]]
address = "127.0.0.1:9998"
"#,
        root().join("regions/catalog.toml").display().to_string()
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The route `--client ip` gets from each region: (region, priority_by, group).
fn routes(cfg: &Path, ip: &str) -> Vec<(String, String, String)> {
    let doc = json(&["--config", cfg.to_str().unwrap(), "--client", ip]);
    doc["listeners"][0]["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            // The explanation follows the same plan as the route.
            let explain = &r["explain"];
            assert_eq!(explain["priority_by"], r["route"]["priority_by"], "{r:#}");
            let top = explain["groups"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["rank"] == 1)
                .unwrap();
            if r["route"]["priority_by"] == "client-location" {
                assert_eq!(top["name"], r["route"]["groups"][0]["name"], "{r:#}");
            }
            (
                r["region"].as_str().unwrap().to_owned(),
                r["route"]["priority_by"].as_str().unwrap().to_owned(),
                r["route"]["groups"][0]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn client_is_routed_by_its_location_from_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "GeoLite2-City", true);
    let r = |region: &str, by: &str, group: &str| (region.into(), by.into(), group.into());
    // Virginia's client goes to Virginia whichever node it enters.
    assert_eq!(
        routes(&cfg, "127.2.0.9"),
        [
            r("cn-beijing", "client-location", "virginia"),
            r("us-east-1", "client-location", "virginia")
        ]
    );
    assert_eq!(
        routes(&cfg, "127.1.0.9"),
        [
            r("cn-beijing", "client-location", "beijing"),
            r("us-east-1", "client-location", "beijing")
        ]
    );
    // No coordinates (127.3) or not in the database: each node's own ranking (its local group).
    for ip in ["127.3.0.9", "10.1.2.3"] {
        assert_eq!(
            routes(&cfg, ip),
            [
                r("cn-beijing", "node", "beijing"),
                r("us-east-1", "node", "virginia")
            ]
        );
    }
    let doc = json(&["--config", cfg.to_str().unwrap(), "--client", "127.2.0.9"]);
    let place = &doc["listeners"][0]["regions"][0]["route"]["client_location"];
    assert_eq!(place["continent"], "NA");
    assert_eq!(place["country"], "US");
    assert_eq!(place["lat"], VIRGINIA.0);
    let doc = json(&["--config", cfg.to_str().unwrap(), "--client", "10.1.2.3"]);
    assert!(doc["listeners"][0]["regions"][0]["route"]["client_location"].is_null());
    // The table says where the client is and what ranked its groups.
    let table = sim(&["--config", cfg.to_str().unwrap(), "--client", "127.2.0.9"]);
    assert!(
        table.contains("client 127.2.0.9 in US (NA) at 38.9500, -77.4500 · groups ranked by distance from the client"),
        "{table}"
    );
}

#[test]
fn a_country_database_routes_by_the_nodes_ranking() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "GeoLite2-Country", false);
    let got = routes(&cfg, "127.2.0.9");
    assert_eq!(
        got[0],
        ("cn-beijing".into(), "node".into(), "beijing".into())
    );
    let table = sim(&["--config", cfg.to_str().unwrap(), "--client", "127.2.0.9"]);
    assert!(
        table.contains("in US (NA), no coordinates · no coordinates: the node's own ranking"),
        "{table}"
    );
}

#[test]
fn demand_by_address_and_prefix_goes_to_the_nearest_region() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "GeoLite2-City", true);
    let scenario = dir.path().join("demand.toml");
    std::fs::write(
        &scenario,
        "[demand]\ncn-beijing = 1\n\"127.1.0.1\" = 5\n\"127.2.0.0/16\" = 10\n\"127.2.200.0/24\" = 2\n",
    )
    .unwrap();
    let args = [
        "--config",
        cfg.to_str().unwrap(),
        "--scenario",
        scenario.to_str().unwrap(),
    ];
    let doc = json(&args);
    let mapped: Vec<(String, String, f64)> = doc["demand_clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["clients"].as_str().unwrap().to_owned(),
                d["region"].as_str().unwrap().to_owned(),
                d["amount"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        mapped,
        [
            ("127.1.0.1".into(), "cn-beijing".into(), 5.0),
            ("127.2.0.0/16".into(), "us-east-1".into(), 10.0),
            ("127.2.200.0/24".into(), "us-east-1".into(), 2.0),
        ]
    );
    // Each node sends its local group 100 %: Beijing's group carries 1 + 5, Virginia's 12.
    let load = |group: &str| {
        doc["totals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["group"] == group && t["endpoint"].is_null())
            .unwrap()["load"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(load("beijing"), 6.0);
    assert_eq!(load("virginia"), 12.0);
    let table = sim(&args);
    assert!(table.contains("placed by the [geoip] database"), "{table}");

    // An address the database does not place is an error that says so.
    std::fs::write(&scenario, "[demand]\n\"127.3.0.1\" = 5\n").unwrap();
    let e = sim_err(&[
        "--config",
        cfg.to_str().unwrap(),
        "--scenario",
        scenario.to_str().unwrap(),
    ]);
    assert!(
        e.contains("demand 127.3.0.1") && e.contains("no latitude/longitude"),
        "{e}"
    );
    std::fs::write(&scenario, "[demand]\n\"10.0.0.0/8\" = 5\n").unwrap();
    let e = sim_err(&[
        "--config",
        cfg.to_str().unwrap(),
        "--scenario",
        scenario.to_str().unwrap(),
    ]);
    assert!(e.contains("10.0.0.0 is not in the [geoip] database"), "{e}");
}
