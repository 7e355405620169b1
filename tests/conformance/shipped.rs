//! The shipped config (ports replaced) and a three-region config of the suite's own: every
//! listener (HTTP, TCP, UDP) from every region, observed against `sim`.

use crate::fleet::*;

/// Three acceleration regions (Beijing, Shanghai, Tokyo), four backend regions, three
/// listeners of three protocols: HTTP with the cascade leaving a leftover, TCP under
/// `failover = "recompute"` with four groups, UDP with source-ip affinity served from two of
/// the regions only. Ports are placeholders ([`Cfg::from_text`] replaces them); checks every
/// second.
///
/// Every group is ranked as `sim` ranks it (see `Cfg::pin_priorities`).
pub(crate) const THREE_REGIONS: &str = r#"
catalog = "regions/catalog.toml"
[admin]
bind = "127.0.0.1:1"

[[listener]]
name = "api"
protocol = "http"
port = 1001
regions = ["cn-beijing", "cn-shanghai", "ap-northeast-1"]

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
    weight = 2
    [[listener.group.endpoint]]
    address = "127.0.0.1:2002"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = 30
    [listener.group.health_check]
    protocol = "http"
    path = "/health"
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:2101"

  [[listener.group]]
  name = "tokyo"
  region = "ap-northeast-1"
  ratio = 60
    [listener.group.health_check]
    protocol = "http"
    path = "/health"
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:2201"
    [[listener.group.endpoint]]
    address = "127.0.0.1:2202"

[[listener]]
name = "stream"
protocol = "tcp"
port = 1002
regions = ["cn-beijing", "cn-shanghai", "ap-northeast-1"]
failover = "recompute"

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 40
    [listener.group.health_check]
    protocol = "tcp"
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:3001"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = 60
    [listener.group.health_check]
    protocol = "tcp"
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:3101"
    [[listener.group.endpoint]]
    address = "127.0.0.1:3102"

  [[listener.group]]
  name = "tokyo"
  region = "ap-northeast-1"
  ratio = 20
    [listener.group.health_check]
    protocol = "tcp"
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:3201"

  [[listener.group]]
  name = "singapore"
  region = "ap-southeast-1"
  ratio = 25
    [listener.group.health_check]
    protocol = "tcp"
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:3301"

[[listener]]
name = "rtc"
protocol = "udp"
port = 1003
regions = ["cn-shanghai", "ap-northeast-1"]
affinity = "source-ip"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = 70
  balance = "hash"
  hash_key = "$remote_addr"
    [listener.group.health_check]
    protocol = "tcp"
    port = 4100
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:4101"
    [[listener.group.endpoint]]
    address = "127.0.0.1:4102"

  [[listener.group]]
  name = "tokyo"
  region = "ap-northeast-1"
  ratio = 50
    [listener.group.health_check]
    protocol = "tcp"
    port = 4200
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:4201"

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 100
    [listener.group.health_check]
    protocol = "tcp"
    port = 4000
    interval = "1s"
    [[listener.group.endpoint]]
    address = "127.0.0.1:4001"
"#;

/// The clients checked one by one against `sim --client`.
pub(crate) const SAMPLE: [usize; 8] = [3, 17, 101, 250, 333, 389, 500, 777];

#[test]
fn the_shipped_config_splits_as_sim_predicts_on_both_nodes() {
    let cfg = Cfg::shipped();
    let fleet = Fleet::start(&cfg, std::slice::from_ref(&cfg));
    // Every endpoint is up from the start (checks begin healthy) and stays so.
    fleet.wait_health(&[]);
    let sim = fleet.sim(&[]);
    // web (http, rotation), game (tcp, source-ip), voice (udp, rotation), from both regions.
    fleet.conforms(&sim);
    for region in ["cn-beijing", "cn-shanghai"] {
        fleet.clients_agree("game", region, &SAMPLE);
    }
    // The guide's numbers, as a reminder of what was compared.
    assert_eq!(shares(&sim, "web", "cn-beijing")["beijing"], 62.5);
    assert_eq!(shares(&sim, "game", "cn-beijing")["beijing"], 80.0);
}

#[test]
fn three_regions_and_four_groups_split_as_sim_predicts_on_every_node() {
    let cfg = Cfg::from_text(THREE_REGIONS);
    let fleet = Fleet::start(&cfg, std::slice::from_ref(&cfg));
    fleet.wait_health(&[]);
    let sim = fleet.sim(&[]);
    fleet.conforms(&sim);
    for region in ["cn-shanghai", "ap-northeast-1"] {
        fleet.clients_agree("rtc", region, &SAMPLE);
    }
    // A leftover split three ways from Beijing: 50; 30 % of 50 = 15; 60 % of 35 = 21; the
    // leftover 14 split 4.67 each.
    let api = shares(&sim, "api", "cn-beijing");
    assert!(
        (api["beijing"] - (50.0 + 14.0 / 3.0)).abs() < 1e-9,
        "{api:?}"
    );
}
