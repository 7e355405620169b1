//! Forwarding rules: an HTTP listener with three `[[listener.route]]` entries on two nodes;
//! requests that match each rule (host and path), and ones that match none, split as `sim`
//! prints each rule's split (`routes` per region) and the listener's.

use crate::fleet::*;

const ROUTES: &str = r#"
catalog = "regions/catalog.toml"
[admin]
bind = "127.0.0.1:1"

[[listener]]
name = "site"
protocol = "http"
port = 1001
regions = ["cn-beijing", "cn-shanghai"]

  [[listener.route]]
  host = "api.example.com"
  path_prefix = ["/v2/"]
  groups = ["shanghai", "tokyo"]

  [[listener.route]]
  host = "*.static.test"
  groups = ["tokyo"]

  [[listener.route]]
  path_prefix = ["/img/"]
  groups = ["beijing", "tokyo"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 50
    [listener.group.health_check]
    protocol = "http"
    path = "/health"
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:2001"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = 40
    [listener.group.health_check]
    protocol = "http"
    path = "/health"
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:2101"
    [[listener.group.endpoint]]
    address = "127.0.0.1:2102"

  [[listener.group]]
  name = "tokyo"
  region = "ap-northeast-1"
  ratio = 70
    [listener.group.health_check]
    protocol = "http"
    path = "/health"
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:2201"
"#;

#[test]
fn forwarding_rules_split_as_sim_prints_them() {
    let cfg = Cfg::from_text(ROUTES);
    let fleet = Fleet::start(&cfg, std::slice::from_ref(&cfg));
    fleet.wait_health(&[]);
    let sim = fleet.sim(&[]);
    for region in ["cn-beijing", "cn-shanghai"] {
        // The node's /status lists the same rules with the same splits.
        let status = fleet.node(region).status();
        let l = &status.listeners[0];
        let r = sim["listeners"][0]["regions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["region"] == region)
            .unwrap();
        let sim_routes: Vec<gtd::view::RouteView> =
            serde_json::from_value(r["routes"].clone()).unwrap();
        assert_eq!(l.routes, sim_routes, "{region}");
        fleet.conforms_on(
            &sim,
            "site",
            region,
            Some((1, "api.example.com", "/v2/users")),
        );
        fleet.conforms_on(&sim, "site", region, Some((2, "cdn.static.test", "/a.css")));
        fleet.conforms_on(
            &sim,
            "site",
            region,
            Some((3, "other.test", "/img/logo.png")),
        );
        // A request no rule matches takes the listener's split over every group.
        fleet.conforms_on(&sim, "site", region, None);
    }
}
