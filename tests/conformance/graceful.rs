//! `failover = "graceful"` against real nodes: Beijing's endpoints taken down one by one (the
//! admin API disables each on every node, as an operator would), and after each step every
//! node's split and traffic are `sim --down LISTENER/GROUP/ADDRESS…`'s within the suite's
//! tolerance; then every endpoint enabled again gives the plain cascade back.
//!
//! - `api` (tcp): Beijing four endpoints, Shanghai two, both ratio 50: from Beijing 62.5 /
//!   37.5; with 3, 2, 1, 0 of Beijing's four up it keeps 1, 0.7, 0.35, 0 of its 62.5;
//! - `web` (http, source-ip affinity): Beijing three endpoints with `min_healthy = 2`, ratio
//!   50, Shanghai 100: with 2 of 3 up Beijing keeps 0.933 of its share; with 1 it is below
//!   `min_healthy`, unhealthy, and its whole share goes to Shanghai (mode failover).

use gtd::view::{EndpointShare, GroupView};
use serde_json::Value;

use crate::fleet::*;

const GRACEFUL: &str = r#"
catalog = "regions/catalog.toml"
[admin]
bind = "127.0.0.1:1"

[[listener]]
name = "api"
protocol = "tcp"
port = 1001
regions = ["cn-beijing", "cn-shanghai"]
failover = "graceful"

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 50
    [listener.group.health_check]
    protocol = "tcp"
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:2001"
    [[listener.group.endpoint]]
    address = "127.0.0.1:2002"
    [[listener.group.endpoint]]
    address = "127.0.0.1:2003"
    [[listener.group.endpoint]]
    address = "127.0.0.1:2004"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = 50
    [listener.group.health_check]
    protocol = "tcp"
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:2101"
    [[listener.group.endpoint]]
    address = "127.0.0.1:2102"

[[listener]]
name = "web"
protocol = "http"
port = 1002
regions = ["cn-beijing", "cn-shanghai"]
failover = "graceful"
affinity = "source-ip"

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 50
  min_healthy = 2
    [listener.group.health_check]
    protocol = "http"
    path = "/health"
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:3001"
    [[listener.group.endpoint]]
    address = "127.0.0.1:3002"
    [[listener.group.endpoint]]
    address = "127.0.0.1:3003"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = 100
    [listener.group.health_check]
    protocol = "http"
    path = "/health"
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:3101"
"#;

/// The addresses of `listener`'s group `group`, config order (ports as the nodes run them).
fn endpoints(cfg: &Cfg, listener: &str, group: &str) -> Vec<String> {
    let l = cfg
        .listeners()
        .into_iter()
        .find(|l| l["name"].as_str() == Some(listener))
        .unwrap();
    let g = l["group"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"].as_str() == Some(group))
        .unwrap();
    g["endpoint"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["address"].as_str().unwrap().to_owned())
        .collect()
}

/// Listener `api`'s group `beijing` in `sim`'s JSON (`listeners[].regions[].groups`, the
/// region `region` picks).
fn beijing_group(listeners: &Value, region: impl Fn(&Value) -> bool) -> GroupView<EndpointShare> {
    let l = listeners
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["listener"] == "api")
        .unwrap();
    let r = l["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| region(r))
        .unwrap();
    let groups: Vec<GroupView<EndpointShare>> =
        serde_json::from_value(r["groups"].clone()).unwrap();
    groups.into_iter().find(|g| g.name == "beijing").unwrap()
}

/// Disables or enables an endpoint on every node through the admin API.
fn toggle(fleet: &Fleet, listener: &str, group: &str, address: &str, on: bool) {
    let verb = if on { "enable" } else { "disable" };
    for n in &fleet.nodes {
        let path = format!("/endpoints/{listener}/{group}/{address}/{verb}");
        let (code, body) = http(n.admin, "POST", &path).unwrap();
        assert_eq!(code, 200, "{path} on {}: {body}", n.region);
    }
}

#[test]
fn graceful_splits_follow_endpoints_taken_down_one_by_one() {
    let cfg = Cfg::from_text(GRACEFUL);
    let fleet = Fleet::start(&cfg, std::slice::from_ref(&cfg));
    fleet.wait_health(&[]);
    let whole = fleet.sim(&[]);
    assert_eq!(shares(&whole, "api", "cn-beijing")["beijing"], 62.5);
    fleet.conforms(&whole);

    let api = endpoints(&cfg, "api", "beijing");
    let web = endpoints(&cfg, "web", "beijing");
    let mut down: Vec<String> = Vec::new();
    for step in 0..api.len() {
        toggle(&fleet, "api", "beijing", &api[step], false);
        down.push(format!("api/beijing/{}", api[step]));
        if let Some(address) = web.get(step) {
            toggle(&fleet, "web", "beijing", address, false);
            down.push(format!("web/beijing/{address}"));
        }
        let args: Vec<&str> = down.iter().flat_map(|d| ["--down", d.as_str()]).collect();
        let expected = fleet.sim(&args);
        // The hand-checked points (docs/design.md §3.3): two of four up keep 0.7 of 62.5.
        let bj = shares(&expected, "api", "cn-beijing")["beijing"];
        let want = [62.5, 62.5 * 0.7, 62.5 * 0.35, 0.0][step];
        assert!(
            (bj - want).abs() < 1e-9,
            "step {step}: api beijing {bj} vs {want}"
        );
        fleet.conforms(&expected);
        // /status says what the share was graded by, as sim does.
        let status = fleet.node("cn-beijing").status();
        let node = status.listener("api").unwrap().group("beijing").unwrap();
        let sim = beijing_group(&expected["listeners"], |r| r["region"] == "cn-beijing");
        assert_eq!(
            (node.usable, node.keep, node.spill),
            (sim.usable, sim.keep, sim.spill),
            "step {step}: /status {node:?} vs sim {sim:?}"
        );
    }
    // web with one of three up is below min_healthy: failover, Shanghai takes all.
    let last = fleet.sim(
        &down
            .iter()
            .flat_map(|d| ["--down", d.as_str()])
            .collect::<Vec<_>>(),
    );
    assert_eq!(sim_split(&last, "web", "cn-beijing", None).0, "failover");

    for address in &api {
        toggle(&fleet, "api", "beijing", address, true);
    }
    for address in &web {
        toggle(&fleet, "web", "beijing", address, true);
    }
    fleet.conforms(&whole);
}
