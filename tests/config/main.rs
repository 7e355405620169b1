//! The config loader and validator from the outside: exact messages and positions for the
//! mistakes operators make, every error in one run, a complete valid config parsed into the
//! model with its defaults, the shipped catalogue, and `gtd check` end to end.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use gtd::config::{
    self, Affinity, Balance, CheckMethod, CheckProtocol, Config, FailoverMode, Host, KeyPart,
    Measure, Priority, Protocol, ProxyProtocol, StatusSet, TlsVersion,
};
use gtd::regions::Catalog;

#[path = "../common/mod.rs"]
mod common;

fn catalog_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("regions/catalog.toml")
}

fn catalog() -> Catalog {
    config::load_catalog(&catalog_path()).expect("the shipped catalogue is valid")
}

/// Validates `text` as `config.toml` against the shipped catalogue.
fn parse(text: &str) -> Result<Config, Vec<String>> {
    config::parse(text, Path::new("config.toml"), &catalog())
        .map_err(|e| e.0.iter().map(ToString::to_string).collect())
}

/// The errors of an invalid config, in the order reported.
fn errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(_) => panic!("expected errors, the config is valid:\n{text}"),
        Err(e) => e,
    }
}

/// The single error of an invalid config.
fn error(text: &str) -> String {
    let e = errors(text);
    assert_eq!(e.len(), 1, "expected one error, got {e:#?}");
    e.into_iter().next().unwrap()
}

fn valid(text: &str) -> Config {
    parse(text).unwrap_or_else(|e| panic!("expected a valid config, got:\n{}", e.join("\n")))
}

// ---------------------------------------------------------------------------------------------
// A dozen realistic mistakes, each with its exact message, line and column.

#[test]
fn ratio_out_of_range() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 150

    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
"#;
    assert_eq!(
        error(text),
        r#"config.toml:10:11: listener "web" group "beijing": ratio 150 is out of range 0..=100"#
    );
    let text = text.replace("ratio = 150", "ratio = -0.5");
    assert_eq!(
        error(&text),
        r#"config.toml:10:11: listener "web" group "beijing": ratio -0.5 is out of range 0..=100"#
    );
}

#[test]
fn unknown_key_with_a_hint() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratoi = 50

    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
    wieght = 2
    colour = "blue"
"#;
    assert_eq!(
        errors(text),
        [
            r#"config.toml:10:3: listener "web" group "beijing": unknown key "ratoi"; did you mean "ratio"?"#,
            r#"config.toml:14:5: listener "web" group "beijing" endpoint "10.0.0.1:80": unknown key "wieght"; did you mean "weight"?"#,
            r#"config.toml:15:5: listener "web" group "beijing" endpoint "10.0.0.1:80": unknown key "colour""#,
        ]
    );
}

#[test]
fn duplicate_group_name() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"

  [[listener.group]]
  name = "beijing"
  region = "cn-shanghai"
    [[listener.group.endpoint]]
    address = "10.0.0.2:80"
"#;
    assert_eq!(
        error(text),
        r#"config.toml:14:10: listener "web" group "beijing": duplicate group name "beijing" (first defined at line 8)"#
    );
}

#[test]
fn unknown_group_region_with_a_hint() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-bejing"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
"#;
    assert_eq!(
        error(text),
        r#"config.toml:9:12: listener "web" group "beijing": unknown region "cn-bejing" (not in the region catalogue); did you mean "cn-beijing"?"#
    );
}

#[test]
fn listener_region_missing_from_the_catalogue() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing", "mars-olympus-1"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
"#;
    assert_eq!(
        error(text),
        r#"config.toml:5:26: listener "web": unknown region "mars-olympus-1" (not in the region catalogue)"#
    );
}

#[test]
fn method_given_a_parameter_it_does_not_support() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  balance = "hash"
  hash_key = "$request_uri"
  two = true
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
    backup = true
    slow_start = "30s"

  [[listener.group]]
  name = "timed"
  region = "cn-beijing"
  balance = "least_time"
  consistent = true
    [[listener.group.endpoint]]
    address = "10.0.0.2:80"
    weight = 5
"#;
    assert_eq!(
        errors(text),
        [
            r#"config.toml:12:3: listener "web" group "beijing": balancing method "hash" does not support parameter "two""#,
            r#"config.toml:15:5: listener "web" group "beijing" endpoint "10.0.0.1:80": balancing method "hash" does not support parameter "backup""#,
            r#"config.toml:16:5: listener "web" group "beijing" endpoint "10.0.0.1:80": balancing method "hash" does not support parameter "slow_start""#,
            r#"config.toml:22:3: listener "web" group "timed": balancing method "least_time" does not support parameter "consistent""#,
            r#"config.toml:25:5: listener "web" group "timed" endpoint "10.0.0.2:80": balancing method "least_time" does not support parameter "weight""#,
        ]
    );
}

#[test]
fn round_robin_by_default_takes_no_method_parameters() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  hash_key = "$remote_addr"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
"#;
    assert_eq!(
        error(text),
        r#"config.toml:10:3: listener "web" group "beijing": balancing method "round_robin" does not support parameter "hash_key""#
    );
}

#[test]
fn bad_durations_show_the_value() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]
connect_timeout = "1.5s"
idle_timeout = "5"
drain_timeout = 30
header_timeout = "-1s"

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [listener.group.health_check]
    interval = "5 s"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
"#;
    assert_eq!(
        errors(text),
        [
            r#"config.toml:6:19: listener "web": invalid duration "1.5s" for "connect_timeout": fractions are not allowed; use a smaller unit, like "1500ms""#,
            r#"config.toml:7:16: listener "web": invalid duration "5" for "idle_timeout": it has no unit; use an integer followed by ms, s, m or h, like "250ms" or "5s""#,
            r#"config.toml:8:17: listener "web": invalid duration 30 for "drain_timeout": write it as a string with a unit, like "5s" or "250ms""#,
            r#"config.toml:9:18: listener "web": invalid duration "-1s" for "header_timeout": durations cannot be negative"#,
            r#"config.toml:15:16: listener "web" group "beijing" health_check: invalid duration "5 s" for "interval": unknown unit " s"; use an integer followed by ms, s, m or h, like "250ms" or "5s""#,
        ]
    );
}

#[test]
fn bad_endpoint_addresses() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "10.0.0.1"
    [[listener.group.endpoint]]
    address = "10.0.0.256:80"
    [[listener.group.endpoint]]
    address = "backend_1!.example:80"
    [[listener.group.endpoint]]
    address = "10.0.0.9:99999"
"#;
    assert_eq!(
        errors(text),
        [
            r#"config.toml:11:15: listener "web" group "beijing" endpoint "10.0.0.1": invalid address "10.0.0.1": it has no port; write host:port, like "10.0.0.1:80", "[2001:db8::1]:80" or "api.example.com:443""#,
            r#"config.toml:13:15: listener "web" group "beijing" endpoint "10.0.0.256:80": invalid address "10.0.0.256:80": "10.0.0.256" is not a valid IPv4 address"#,
            r#"config.toml:15:15: listener "web" group "beijing" endpoint "backend_1!.example:80": invalid address "backend_1!.example:80": "backend_1!.example" is not a valid host name (letters, digits and "-" in dot-separated labels of up to 63 characters)"#,
            r#"config.toml:17:15: listener "web" group "beijing" endpoint "10.0.0.9:99999": invalid address "10.0.0.9:99999": port 99999 is out of range 1..=65535"#,
        ]
    );
}

#[test]
fn ipv6_endpoint_without_brackets() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "2001:db8::10:8080"
"#;
    assert_eq!(
        error(text),
        r#"config.toml:11:15: listener "web" group "beijing" endpoint "2001:db8::10:8080": invalid address "2001:db8::10:8080": IPv6 addresses must be in brackets: write "[2001:db8::10]:8080""#
    );
}

#[test]
fn ip_hash_on_a_tcp_listener_suggests_hash_on_remote_addr() {
    let text = r#"[[listener]]
name = "game"
protocol = "tcp"
port = 7000
regions = ["cn-beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  balance = "ip_hash"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
"#;
    assert_eq!(
        error(text),
        r#"config.toml:10:13: listener "game" group "beijing": balancing method "ip_hash" is only for http/https listeners; on tcp/udp use balance = "hash" with hash_key = "$remote_addr""#
    );
}

#[test]
fn http_only_key_variable_on_a_tcp_listener() {
    let text = r#"[[listener]]
name = "game"
protocol = "tcp"
port = 7000
regions = ["cn-beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  balance = "hash"
  hash_key = "$remote_addr:$cookie_session"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"

  [[listener.group]]
  name = "typo"
  region = "cn-beijing"
  balance = "hash"
  hash_key = "$remote_adr"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
"#;
    assert_eq!(
        errors(text),
        [
            r#"config.toml:11:14: listener "game" group "beijing": hash_key variable "$cookie_session" is only available on http/https listeners; tcp/udp listeners can use $remote_addr"#,
            r#"config.toml:19:14: listener "game" group "typo": invalid hash_key "$remote_adr": unknown variable "$remote_adr" (known: $remote_addr, $request_uri, $http_NAME, $cookie_NAME); did you mean "$remote_addr"?"#,
        ]
    );
}

#[test]
fn priority_set_on_only_some_groups() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing", "cn-shanghai"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  priority = 1
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
    [[listener.group.endpoint]]
    address = "10.0.0.2:80"
"#;
    assert_eq!(
        error(text),
        r#"config.toml:14:3: listener "web" group "shanghai": priority is set on group "beijing" but not on this one; set it on every group of the listener or on none"#
    );
}

#[test]
fn duplicate_priority_values() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing", "cn-shanghai"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  priority = 1
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  priority = 1
    [[listener.group.endpoint]]
    address = "10.0.0.2:80"

  [[listener.group]]
  name = "hangzhou"
  region = "cn-hangzhou"
  priority = { cn-beijing = 3, cn-shanghai = 2 }
    [[listener.group.endpoint]]
    address = "10.0.0.3:80"
"#;
    assert_eq!(
        errors(text),
        [
            r#"config.toml:17:14: listener "web" group "shanghai": priority 1 is also used by group "beijing""#,
        ]
    );
    // Per-region tables are compared region by region.
    let text = text.replace("cn-shanghai = 2", "cn-shanghai = 1");
    assert_eq!(
        errors(&text),
        [
            r#"config.toml:17:14: listener "web" group "shanghai": priority 1 is also used by group "beijing""#,
            r#"config.toml:24:46: listener "web" group "hangzhou": priority 1 for region "cn-shanghai" is also used by group "beijing""#,
        ]
    );
}

#[test]
fn priority_tables_must_cover_the_listener_regions() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing", "cn-shanghai"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  priority = { cn-hangzou = 2, cn-shanghai = 0 }
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
"#;
    assert_eq!(
        errors(text),
        [
            r#"config.toml:10:14: listener "web" group "beijing": priority has no rank for region "cn-beijing"; a priority table must rank every region of the listener"#,
            r#"config.toml:10:16: listener "web" group "beijing": priority ranks region "cn-hangzou", which is not a region of this listener (cn-beijing, cn-shanghai)"#,
            r#"config.toml:10:46: listener "web" group "beijing": priority 0 for "cn-shanghai" must be at least 1"#,
        ]
    );
    // A region of the catalogue that does not serve this listener (SPEC's example table copied
    // onto a listener served from Beijing only): its rank is never used, so it is a warning.
    let one = text
        .replace(r#"["cn-beijing", "cn-shanghai"]"#, r#"["cn-beijing"]"#)
        .replace(
            "cn-hangzou = 2, cn-shanghai = 0",
            "cn-beijing = 1, cn-shanghai = 2",
        );
    let c = valid(&one);
    let warnings: Vec<String> = c.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            r#"config.toml:10:32: listener "web" group "beijing": priority ranks region "cn-shanghai", which does not serve this listener (cn-beijing); ignored"#
        ]
    );
}

#[test]
fn two_listeners_on_one_port() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"

[[listener]]
name = "game"
protocol = "tcp"
port = 8080
regions = ["cn-beijing"]
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "10.0.0.1:81"

[[listener]]
name = "voice"
protocol = "udp"
port = 8080
regions = ["cn-beijing"]
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "10.0.0.1:82"

[[listener]]
name = "voice"
protocol = "udp"
port = 8080
regions = ["cn-beijing"]
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "10.0.0.1:82"
"#;
    // tcp and http share TCP ports; udp has its own (one udp listener on 8080 is fine).
    assert_eq!(
        errors(text),
        [
            r#"config.toml:15:8: listener "game": port 8080 is already used by listener "web" (http); tcp, http and https listeners share TCP ports"#,
            r#"config.toml:35:8: listener "voice": duplicate listener name "voice" (first defined at line 24)"#,
            r#"config.toml:37:8: listener "voice": port 8080 is already used by udp listener "voice""#,
        ]
    );
}

#[test]
fn toml_syntax_errors() {
    // Only the first syntax error is reported: the parser's later ones are mostly echoes of it.
    let text = "[[listener]]\nname = \"web\"\nport = 80 80\nregions = [\n";
    assert_eq!(
        error(text),
        "config.toml:3:8: invalid TOML: string values must be quoted, expected literal string"
    );
    let text = "[[listener]]\nname = \"web\nport = 80\n";
    assert_eq!(
        error(text),
        "config.toml:2:12: invalid TOML: invalid basic string, expected `\"`"
    );
    let text = "[[listener]\nname = \"web\"\n";
    assert_eq!(
        error(text),
        "config.toml:1:12: invalid TOML: unclosed array table, expected `]`"
    );
    let text = "[admin]\nbind = \"127.0.0.1:9100\"\nbind = \"127.0.0.1:9200\"\n";
    assert_eq!(
        error(text),
        "config.toml:3:1: invalid TOML: duplicate key \"bind\""
    );
}

#[test]
fn keys_of_another_protocol_are_ignored_with_a_warning() {
    let text = r#"[[listener]]
name = "game"
protocol = "tcp"
port = 7000
regions = ["cn-beijing"]
sticky = { cookie = "gtd" }
udp_max_flows = 10
header_timeout = "5s"
tls = { certs = [] }

  [[listener.route]]
  host = "example.com"
  groups = ["beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  path_prefix = "/v1"
  keepalive = 8
    [listener.group.health_check]
    path = "/health"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"

[[listener]]
name = "voice"
protocol = "udp"
port = 7000
regions = ["cn-beijing"]
proxy_protocol = "v2"
tries = 2
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
"#;
    // SPEC's own schema sketch lists every listener key in one listener: a key of another
    // protocol is valid, has no effect and says so (as HAProxy warns about a keyword of another
    // mode), instead of failing the whole file.
    let c = valid(text);
    let warnings: Vec<String> = c.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            r#"config.toml:6:1: listener "game": "sticky" is only for http/https listeners; ignored"#,
            r#"config.toml:7:1: listener "game": "udp_max_flows" is only for udp listeners; ignored"#,
            r#"config.toml:8:1: listener "game": "header_timeout" is only for http/https listeners; ignored"#,
            r#"config.toml:9:1: listener "game": "tls" is only for https listeners; ignored"#,
            r#"config.toml:11:14: listener "game": "route" is only for http/https listeners; ignored"#,
            r#"config.toml:18:3: listener "game" group "beijing": "path_prefix" is only for http/https listeners; ignored"#,
            r#"config.toml:19:3: listener "game" group "beijing": "keepalive" is only for http/https listeners; ignored"#,
            r#"config.toml:20:5: active health checks are not run by this version: the health_check table (line 20) is checked but has no effect; passive checks (max_fails, fail_timeout) and the admin API decide which endpoints serve"#,
            r#"config.toml:21:5: listener "game" group "beijing" health_check: "path" is only for http/https health checks; ignored"#,
            r#"config.toml:30:1: listener "voice": "proxy_protocol" is only for tcp listeners; ignored"#,
            r#"config.toml:31:1: listener "voice": "tries" is only for tcp/http/https listeners; ignored"#,
        ]
    );
    let game = &c.listeners[0];
    assert!(game.sticky.is_none() && game.routes.is_empty() && game.tls.is_none());
    assert_eq!(game.udp_max_flows, 65_536);
    assert_eq!(game.groups[0].path_prefix, None);
    let voice = &c.listeners[1];
    assert_eq!((voice.proxy_protocol, voice.tries), (None, 3));
}

#[test]
fn spellings_operators_bring_from_other_proxies() {
    let text = r#"[[listener]]
name = "web"
protocol = "HTTP"
port = 8080
regions = ["cn-beijing"]

  [[listener.group]]
  name = "b"
  region = "cn-beijing"
    [listener.group.health_check]
    protocol = "http"
    method = "get"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
    max_conns = 0
"#;
    let c = valid(text);
    let l = &c.listeners[0];
    assert_eq!(l.protocol, Protocol::Http);
    // nginx's max_conns=0: no limit.
    assert_eq!(l.groups[0].endpoints[0].max_conns, None);
    let check = l.groups[0].health_check.as_ref().unwrap();
    assert_eq!(check.method, CheckMethod::Get);
    // A status entry that does not parse is one error, not two.
    let bad = text.replace("method = \"get\"", "expect_status = [\"2xx\"]");
    assert_eq!(errors(&bad).len(), 1, "{:?}", errors(&bad));
}

#[test]
fn route_hosts_may_carry_a_port_or_be_ipv6_literals() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.route]]
  host = "api.example.com:8080"
  groups = ["b"]

  [[listener.route]]
  host = "[2001:db8::1]"
  groups = ["b"]

  [[listener.route]]
  host = "[::1]:8080"
  groups = ["b"]

  [[listener.group]]
  name = "b"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
"#;
    let c = valid(text);
    let hosts: Vec<_> = c.listeners[0]
        .routes
        .iter()
        .map(|r| r.host.clone().unwrap())
        .collect();
    assert_eq!(hosts, ["api.example.com", "[2001:db8::1]", "[::1]"]);
    let warnings: Vec<String> = c.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            r#"config.toml:8:10: listener "web" route 1: host "api.example.com:8080": the port is ignored; routes match the host name"#,
            r#"config.toml:16:10: listener "web" route 3: host "[::1]:8080": the port is ignored; routes match the host name"#,
        ]
    );
    assert_eq!(
        error(&text.replace("[2001:db8::1]", "[2001:db8::zz]")),
        r#"config.toml:12:10: listener "web" route 2: "[2001:db8::zz]" is not a valid host pattern (a host name; "*" and "?" are wildcards)"#
    );
}

#[test]
fn a_route_an_earlier_one_shadows_gets_a_warning() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.route]]
  host = "a.example.com"
  path_prefix = ["/api/", "/v2/"]
  groups = ["b"]

  [[listener.route]]
  host = "A.example.com"
  path_prefix = ["/api/"]
  header = { name = "X-Canary", value = "1" }
  groups = ["b"]

  [[listener.route]]
  host = "a.example.com"
  path_prefix = ["/api/", "/v3/"]
  groups = ["b"]

  [[listener.group]]
  name = "b"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
"#;
    let c = valid(text);
    let warnings: Vec<String> = c.warnings.iter().map(ToString::to_string).collect();
    // Route 2 (a canary after its plain twin) can never win; route 3 still can (/v3/).
    assert_eq!(
        warnings,
        [
            r#"config.toml:12:3: listener "web" route 2: this route never matches: route 1 (line 7) comes first and takes every request it would (ties go by config order; put the narrower rule first)"#
        ]
    );
    // In the other order both rules are reachable: no warning.
    let swapped = text.replacen(
        "path_prefix = [\"/api/\", \"/v2/\"]",
        "path_prefix = [\"/v2/\"]",
        1,
    );
    assert!(valid(&swapped).warnings.is_empty());
}

#[test]
fn health_check_timeouts_never_exceed_the_interval() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.group]]
  name = "a"
  region = "cn-beijing"
    [listener.group.health_check]
    interval = "5s"
    timeout = "10s"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"

  [[listener.group]]
  name = "b"
  region = "cn-beijing"
    [listener.group.health_check]
    protocol = "http"
    interval = "500ms"
    connect_timeout = "1s"
    timeout = "1s"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"

  [[listener.group]]
  name = "c"
  region = "cn-beijing"
    [listener.group.health_check]
    protocol = "http"
    interval = "2s"
    connect_timeout = "1s"
    read_timeout = "1500ms"
    unhealthy_threshold = 0
    method = "GETT"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
"#;
    assert_eq!(
        errors(text),
        [
            r#"config.toml:12:15: listener "web" group "a" health_check: timeout 10s is above interval 5s; checks would overlap"#,
            r#"config.toml:21:16: listener "web" group "b" health_check: interval 500ms is below the minimum of 1s"#,
            r#"config.toml:22:5: listener "web" group "b" health_check: set either "timeout" or "connect_timeout" and "read_timeout", not both"#,
            r#"config.toml:34:20: listener "web" group "c" health_check: connect_timeout 1s + read_timeout 1500ms is above interval 2s; checks would overlap"#,
            r#"config.toml:35:27: listener "web" group "c" health_check: unhealthy_threshold 0 is out of range: it must be at least 1"#,
            r#"config.toml:36:14: listener "web" group "c" health_check: unknown method "GETT" (expected "GET", "PUT", "POST" or "DELETE"); did you mean "GET"?"#,
        ]
    );
}

#[test]
fn routes_are_checked_against_the_listener_groups() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.route]]
  groups = ["beijing"]

  [[listener.route]]
  host = "*.example.com"
  path_prefix = ["/v2/", "v3/"]
  header = { name = "X Canary", value = "1" }
  groups = ["bejing", "beijing", "beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
"#;
    assert_eq!(
        errors(text),
        [
            r#"config.toml:7:3: listener "web" route 1: a route needs at least one of "host", "path_prefix" or "header""#,
            r#"config.toml:12:26: listener "web" route 2: path prefix "v3/" must start with "/""#,
            r#"config.toml:13:21: listener "web" route 2: "X Canary" is not a valid header name"#,
            r#"config.toml:14:13: listener "web" route 2: no group named "bejing" in this listener; did you mean "beijing"?"#,
            r#"config.toml:14:34: listener "web" route 2: group "beijing" is listed twice"#,
        ]
    );
}

#[test]
fn wrong_types_say_what_was_expected_and_found() {
    let text = r#"[admin]
bind = 9100

[[listener]]
name = "web"
protocol = "http"
port = "8080"
regions = "cn-beijing"
retry = "yes"

  [[listener.group]]
  name = 7
  region = "cn-beijing"
  ratio = "50%"
  priority = "first"
  balance = "leastconn"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
    weight = 1.5
"#;
    assert_eq!(
        errors(text),
        [
            r#"config.toml:2:8: admin: "bind" must be a string, found integer 9100"#,
            r#"config.toml:7:8: listener "web": "port" must be an integer, found string "8080""#,
            r#"config.toml:8:11: listener "web": "regions" must be an array, found string "cn-beijing""#,
            r#"config.toml:9:9: listener "web": "retry" must be true or false, found string "yes""#,
            r#"config.toml:12:10: listener "web" group 1: "name" must be a string, found integer 7"#,
            r#"config.toml:14:11: listener "web" group 1: "ratio" must be a number, found string "50%""#,
            r#"config.toml:15:14: listener "web" group 1: "priority" must be an integer or a table of region = rank, found string "first""#,
            r#"config.toml:16:13: listener "web" group 1: unknown balancing method "leastconn" (expected "round_robin", "hash", "ip_hash", "least_conn", "random", "least_time" or "feedback"); did you mean "least_conn"?"#,
            r#"config.toml:19:14: listener "web" group 1 endpoint "10.0.0.1:80": "weight" must be an integer, found float 1.5"#,
        ]
    );
}

#[test]
fn https_needs_certificates_that_exist() {
    let text = r#"[[listener]]
name = "site"
protocol = "https"
port = 8443
regions = ["cn-beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  tls = { ca = "no-such-ca.pem", client_cert = "no-such.pem" }
    [[listener.group.endpoint]]
    address = "10.0.0.1:443"

[[listener]]
name = "site2"
protocol = "https"
port = 9443
regions = ["cn-beijing"]
tls = { certs = [{ cert = "missing.pem" }] }

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "10.0.0.1:443"
"#;
    assert_eq!(
        errors(text),
        [
            r#"config.toml:1:1: listener "site": https listeners need tls = { certs = [{ cert = "site.pem", key = "site.key" }] }"#,
            r#"config.toml:10:16: listener "site" group "beijing": ca file "no-such-ca.pem" not found"#,
            r#"config.toml:10:34: listener "site" group "beijing": "client_cert" needs "client_key" too"#,
            r#"config.toml:10:48: listener "site" group "beijing": client_cert file "no-such.pem" not found"#,
            r#"config.toml:19:18: listener "site2": missing required key "key""#,
            r#"config.toml:19:27: listener "site2": cert file "missing.pem" not found"#,
        ]
    );
}

#[test]
fn upstream_tls_without_a_ca_uses_the_system_bundle_and_versions_read_as_written() {
    let text = r#"[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  tls = { sni = "api.example.com" }
    [[listener.group.endpoint]]
    address = "10.0.0.1:443"
"#;
    let tls = |text: &str| valid(text).listeners[0].groups[0].tls.clone().unwrap();
    let t = tls(text);
    assert!(t.enabled && t.ca.is_none() && !t.insecure_skip_verify);
    assert_eq!(t.min_version, TlsVersion::V1_2);
    for (written, version) in [
        ("\"1.3\"", TlsVersion::V1_3),
        ("\"TLSv1.3\"", TlsVersion::V1_3),
        ("\"tls1.2\"", TlsVersion::V1_2),
        ("\"TLSv1_3\"", TlsVersion::V1_3),
        ("1.2", TlsVersion::V1_2),
        ("1.3", TlsVersion::V1_3),
    ] {
        let t = tls(&text.replace("sni = ", &format!("min_version = {written}, sni = ")));
        assert_eq!(t.min_version, version, "{written}");
    }
    assert_eq!(
        error(&text.replace("sni = ", "min_version = \"TLSv1.1\", sni = ")),
        r#"config.toml:10:25: listener "web" group "beijing": min_version "TLSv1.1" is not supported: gtd speaks TLS 1.2 and 1.3 (rustls)"#
    );
    assert_eq!(
        error(&text.replace("sni = ", "min_version = \"1.4\", sni = ")),
        r#"config.toml:10:25: listener "web" group "beijing": unknown min version "1.4" (expected "1.2" or "1.3")"#
    );
    // Keys that do nothing are said to.
    let warnings = |text: &str| -> Vec<String> {
        valid(text)
            .warnings
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    assert!(warnings(text).is_empty());
    assert_eq!(
        warnings(&text.replace("sni = ", "enabled = false, min_version = \"1.3\", sni = ")),
        [
            r#"config.toml:10:49: listener "web" group "beijing": "sni", "min_version" have no effect: enabled = false"#
        ]
    );
    assert_eq!(
        warnings(&text.replace("sni = ", "insecure_skip_verify = true, sni = ")),
        Vec::<String>::new()
    );
}

#[test]
fn structural_requirements() {
    let text = r#"[node]
source_ip = "10.0.0.300"

[[listener]]
name = "web one"
protocol = "http"
port = 0

[[listener]]
name = "api"
protocol = "http"
port = 8081
regions = []
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  min_healthy = 3
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
    [[listener.group.endpoint]]
    address = "10.0.0.1:80"
  [[listener.group]]
  name = "empty"
  region = "cn-beijing"
"#;
    assert_eq!(
        errors(text),
        [
            r#"config.toml:2:13: node: invalid IP address "10.0.0.300" for "source_ip""#,
            r#"config.toml:4:1: listener "web one": missing required key "regions""#,
            r#"config.toml:4:1: listener "web one": a listener needs at least one [[listener.group]]"#,
            r#"config.toml:5:8: listener "web one": listener name "web one" may only contain letters, digits, "_" and "-""#,
            r#"config.toml:7:8: listener "web one": port 0 is out of range 1..=65535"#,
            r#"config.toml:13:11: listener "api": "regions" must name at least one acceleration region"#,
            r#"config.toml:17:17: listener "api" group "beijing": min_healthy 3 is more than the group's 1 endpoint"#,
            r#"config.toml:21:15: listener "api" group "beijing" endpoint "10.0.0.1:80": duplicate endpoint "10.0.0.1:80" in this group (first at line 19)"#,
            r#"config.toml:22:3: listener "api" group "empty": a group needs at least one [[listener.group.endpoint]]"#,
        ]
    );
}

#[test]
fn every_error_of_a_file_in_one_run_sorted_by_position() {
    let text = r#"catalg = "regions/catalog.toml"

[admin]
bind = "127.0.0.1:9100"
token = ""

[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing", "cn-shanghai"]
tries = 20

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 150
  balance = "hash"
    [[listener.group.endpoint]]
    address = "::1:9001"
    backup = true

  [[listener.group]]
  name = "shanghai"
  region = "cn-shangai"
    [[listener.group.endpoint]]
    address = "127.0.0.1:9101"
    weight = 1001
"#;
    let e = errors(text);
    assert_eq!(
        e,
        [
            r#"config.toml:1:1: unknown key "catalg"; did you mean "catalog"?"#,
            r#"config.toml:5:9: admin: "token" must not be empty"#,
            r#"config.toml:12:9: listener "web": tries 20 is out of range 1..=10"#,
            r#"config.toml:17:11: listener "web" group "beijing": ratio 150 is out of range 0..=100"#,
            r#"config.toml:18:13: listener "web" group "beijing": balancing method "hash" needs a hash_key, like hash_key = "$remote_addr""#,
            r#"config.toml:20:15: listener "web" group "beijing" endpoint "::1:9001": invalid address "::1:9001": IPv6 addresses must be in brackets: write "[::1]:9001""#,
            r#"config.toml:21:5: listener "web" group "beijing" endpoint "::1:9001": balancing method "hash" does not support parameter "backup""#,
            r#"config.toml:25:12: listener "web" group "shanghai": unknown region "cn-shangai" (not in the region catalogue); did you mean "cn-shanghai"?"#,
            r#"config.toml:28:14: listener "web" group "shanghai" endpoint "127.0.0.1:9101": weight 1001 is out of range 1..=1000"#,
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Valid configs.

/// The shipped example's shape: two acceleration regions, an http listener at 50/50, a tcp
/// and a udp listener.
const EXAMPLE: &str = r#"catalog = "regions/catalog.toml"

[admin]
bind = "127.0.0.1:9100"

[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing", "cn-shanghai"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 50

    [[listener.group.endpoint]]
    address = "127.0.0.1:9001"
    weight = 1

    [[listener.group.endpoint]]
    address = "127.0.0.1:9002"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = 50

    [[listener.group.endpoint]]
    address = "127.0.0.1:9101"

    [[listener.group.endpoint]]
    address = "127.0.0.1:9102"

[[listener]]
name = "game"
protocol = "tcp"
port = 7000
regions = ["cn-beijing", "cn-shanghai"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
    [[listener.group.endpoint]]
    address = "127.0.0.1:9011"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
    [[listener.group.endpoint]]
    address = "127.0.0.1:9111"

[[listener]]
name = "voice"
protocol = "udp"
port = 7000
regions = ["cn-beijing", "cn-shanghai"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  balance = "hash"
  hash_key = "$remote_addr"
    [listener.group.health_check]
    port = 9020
    [[listener.group.endpoint]]
    address = "127.0.0.1:9021"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  balance = "hash"
  hash_key = "$remote_addr"
    [[listener.group.endpoint]]
    address = "127.0.0.1:9121"
"#;

#[test]
fn the_example_config_validates_with_defaults_applied() {
    let c = valid(EXAMPLE);
    assert_eq!(c.source, Path::new("config.toml"));
    assert_eq!(
        c.admin.bind,
        "127.0.0.1:9100".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(c.admin.token, None);
    assert_eq!(c.node.source_ip, None);
    let names: Vec<_> = c
        .listeners
        .iter()
        .map(|l| (l.name.as_str(), l.protocol, l.port))
        .collect();
    assert_eq!(
        names,
        [
            ("web", Protocol::Http, 8080),
            ("game", Protocol::Tcp, 7000),
            ("voice", Protocol::Udp, 7000)
        ]
    );

    let web = &c.listeners[0];
    assert_eq!(web.regions, ["cn-beijing", "cn-shanghai"]);
    assert_eq!(web.failover, FailoverMode::NextPriority);
    assert!(!web.fail_open);
    assert_eq!(web.affinity, Affinity::None);
    assert_eq!(web.connect_timeout, Duration::from_secs(5));
    assert_eq!(web.idle_timeout, Duration::from_secs(60));
    assert_eq!(web.drain_timeout, Duration::from_secs(30));
    assert_eq!(web.max_connections, 100_000);
    assert_eq!(web.proxy_protocol, None);
    assert_eq!(web.header_timeout, Duration::from_secs(10));
    assert_eq!(web.upstream_timeout, Duration::from_secs(60));
    assert!(web.retry);
    assert_eq!(web.tries, 3);
    assert_eq!(web.retry_timeout, Duration::from_secs(10));
    assert!(!web.retry_non_idempotent);
    assert!(web.unhealthy_status.is_empty());
    assert_eq!(web.sticky, None);
    assert_eq!(web.udp_max_flows, 65_536);
    assert_eq!(web.tls, None);
    assert!(web.routes.is_empty());

    let bj = &web.groups[0];
    assert_eq!(
        (bj.name.as_str(), bj.region.as_str(), bj.ratio),
        ("beijing", "cn-beijing", 50.0)
    );
    assert_eq!(bj.priority, None);
    assert_eq!(bj.balance, Balance::RoundRobin);
    assert_eq!(bj.min_healthy, 1);
    assert_eq!(bj.health_check, None);
    assert_eq!(bj.path_prefix, None);
    assert_eq!(bj.keepalive, 32);
    assert_eq!(bj.tls, None);
    let eps: Vec<_> = bj
        .endpoints
        .iter()
        .map(|e| (e.address.text.as_str(), e.weight))
        .collect();
    assert_eq!(eps, [("127.0.0.1:9001", 1), ("127.0.0.1:9002", 1)]);
    let e = &bj.endpoints[1];
    assert_eq!(e.address.host, Host::Ip("127.0.0.1".parse().unwrap()));
    assert_eq!(e.address.port, 9002);
    assert_eq!(e.max_conns, None);
    assert!(!e.backup && !e.down && !e.drain && e.enabled);
    assert_eq!(e.slow_start, None);
    assert_eq!(e.max_fails, 1);
    assert_eq!(e.fail_timeout, Duration::from_secs(10));
    assert_eq!(web.groups[1].ratio, 50.0);

    let game = &c.listeners[1];
    assert_eq!(game.idle_timeout, Duration::from_secs(300));
    assert_eq!(game.groups[0].ratio, 100.0);

    let voice = &c.listeners[2];
    assert_eq!(voice.idle_timeout, Duration::from_secs(30));
    let Balance::Hash { key, consistent } = &voice.groups[0].balance else {
        panic!()
    };
    assert_eq!(key.parts, [KeyPart::RemoteAddr]);
    assert!(!consistent);
    let hc = voice.groups[0].health_check.as_ref().unwrap();
    assert_eq!(hc.protocol, CheckProtocol::Tcp);
    assert_eq!(hc.port, Some(9020));
    assert_eq!(hc.interval, Duration::from_secs(5));
    assert_eq!(hc.timeout, Duration::from_secs(5));
    assert_eq!(hc.connect_timeout, Duration::from_secs(5));
    assert_eq!((hc.healthy_threshold, hc.unhealthy_threshold), (2, 3));
    assert_eq!(hc.method, CheckMethod::Get);
    assert_eq!(hc.path, "/");
    assert_eq!(hc.expect_status, StatusSet(vec![200..=200]));
    assert!(!hc.id_header && !hc.essential && !hc.explicit);
}

#[test]
fn a_config_using_every_field() {
    let dir = tempfile::tempdir().unwrap();
    write_pki(&dir.path().join("certs"));
    let text = format!(
        r#"catalog = "{catalog}"

[node]
source_ip = "127.0.0.2"

[admin]
bind = "[::1]:9200"
token = "s3cret"

[[listener]]
name = "site"
protocol = "https"
port = 8443
regions = ["cn-beijing", "cn-shanghai"]
failover = "recompute"
fail_open = true
affinity = "source-ip"
connect_timeout = "2s"
idle_timeout = "90s"
drain_timeout = "0s"
max_connections = 5000
header_timeout = "5s"
upstream_timeout = "2m"
retry = false
tries = 5
retry_timeout = "15s"
retry_non_idempotent = true
unhealthy_status = [500, "502-504"]
sticky = {{ cookie = "gtd_route" }}
tls = {{ certs = [{{ cert = "certs/site.pem", key = "certs/site.key" }}, {{ cert = "certs/other.pem", key = "certs/other.key" }}] }}

  [[listener.route]]
  host = "*.example.com"
  path_prefix = ["/v2/", "/api/"]
  header = {{ name = "X-Canary", value = "1" }}
  groups = ["beijing"]

  [[listener.route]]
  path_prefix = "/static/"
  groups = ["shanghai", "beijing"]

  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = 62.5
  priority = {{ cn-beijing = 1, cn-shanghai = 2 }}
  balance = "hash"
  hash_key = "${{http_X_User}}:$cookie_sid:$request_uri"
  consistent = true
  min_healthy = 2
  path_prefix = "/test"
  keepalive = 0
  tls = {{ enabled = true, sni = "api.example.com", ca = "certs/ca.pem", client_cert = "certs/client.pem", client_key = "certs/client.key", insecure_skip_verify = false, min_version = "1.3" }}

    [listener.group.health_check]
    protocol = "https"
    port = 8081
    interval = "10s"
    connect_timeout = "2s"
    read_timeout = "3s"
    healthy_threshold = 1
    unhealthy_threshold = 5
    method = "POST"
    path = "/health"
    host = "health.example.com"
    headers = {{ X-Check = "1", Accept = "text/plain" }}
    body = "ping"
    expect_status = [200, "204-299"]
    expect_headers = {{ X-Ok = "yes" }}
    expect_body = "pong"
    id_header = true
    essential = true
    explicit = true

    [[listener.group.endpoint]]
    address = "10.0.0.1:443"
    weight = 7
    max_conns = 100
    down = true
    drain = true
    enabled = false
    max_fails = 0
    fail_timeout = "30s"

    [[listener.group.endpoint]]
    address = "[2001:db8::1]:443"

    [[listener.group.endpoint]]
    address = "api.internal:443"

  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = 0
  priority = {{ cn-beijing = 2, cn-shanghai = 1 }}
  balance = "least_time"
  measure = "last_byte"
  factor = 0.5
    [listener.group.health_check]
    protocol = "http"
    interval = "3s"
    [[listener.group.endpoint]]
    address = "10.0.1.1:443"
    backup = true
    slow_start = "1m"

  [[listener.group]]
  name = "hangzhou"
  region = "cn-hangzhou"
  priority = {{ cn-beijing = 3, cn-shanghai = 3 }}
  balance = "feedback"
  feedback_header = "X-Capacity"
  inverse = true
    [[listener.group.endpoint]]
    address = "10.0.2.1:443"
    weight = 1000
    slow_start = "250ms"

[[listener]]
name = "game"
protocol = "tcp"
port = 7000
regions = ["cn-beijing"]
proxy_protocol = "v2"

  [[listener.group]]
  name = "rr"
  region = "cn-beijing"
  balance = "Weighted"
  priority = 2
    [listener.group.health_check]
    timeout = "1s"
    [[listener.group.endpoint]]
    address = "10.0.3.1:7000"

  [[listener.group]]
  name = "lc"
  region = "cn-beijing"
  balance = "LeastConnections"
  priority = 1
    [listener.group.health_check]
    interval = "2m"
    [[listener.group.endpoint]]
    address = "10.0.3.2:7000"

  [[listener.group]]
  name = "rand"
  region = "cn-beijing"
  balance = "random"
  two = true
  priority = 3
    [[listener.group.endpoint]]
    address = "10.0.3.3:7000"

  [[listener.group]]
  name = "lt"
  region = "cn-beijing"
  balance = "least_time"
  priority = 4
    [[listener.group.endpoint]]
    address = "10.0.3.4:7000"

[[listener]]
name = "voice"
protocol = "udp"
port = 7000
regions = ["cn-beijing"]
udp_max_flows = 1024

  [[listener.group]]
  name = "ip"
  region = "cn-beijing"
  balance = "RoundRobin"
    [[listener.group.endpoint]]
    address = "10.0.4.1:5000"

[[listener]]
name = "plain"
protocol = "http"
port = 8080
regions = ["cn-beijing"]

  [[listener.group]]
  name = "iphash"
  region = "cn-beijing"
  balance = "ip_hash"
    [[listener.group.endpoint]]
    address = "10.0.5.1:80"
"#,
        catalog = catalog_path().display()
    );
    let file = dir.path().join("gtd.toml");
    std::fs::write(&file, &text).unwrap();
    let c = config::load(&file, None).unwrap_or_else(|e| panic!("{e}"));
    let certs = dir.path().join("certs");

    assert_eq!(
        c.node.source_ip,
        Some("127.0.0.2".parse::<IpAddr>().unwrap())
    );
    assert_eq!(c.admin.bind, "[::1]:9200".parse::<SocketAddr>().unwrap());
    assert_eq!(c.admin.token.as_deref(), Some("s3cret"));
    assert_eq!(c.catalog, catalog());

    let site = &c.listeners[0];
    assert_eq!((site.protocol, site.port), (Protocol::Https, 8443));
    assert_eq!(site.failover, FailoverMode::Recompute);
    assert!(site.fail_open);
    assert_eq!(site.affinity, Affinity::SourceIp);
    assert_eq!(site.connect_timeout, Duration::from_secs(2));
    assert_eq!(site.idle_timeout, Duration::from_secs(90));
    assert_eq!(site.drain_timeout, Duration::ZERO);
    assert_eq!(site.max_connections, 5000);
    assert_eq!(site.header_timeout, Duration::from_secs(5));
    assert_eq!(site.upstream_timeout, Duration::from_secs(120));
    assert!(!site.retry);
    assert_eq!(site.tries, 5);
    assert_eq!(site.retry_timeout, Duration::from_secs(15));
    assert!(site.retry_non_idempotent);
    assert_eq!(site.unhealthy_status, StatusSet(vec![500..=500, 502..=504]));
    assert!(site.unhealthy_status.contains(503) && !site.unhealthy_status.contains(501));
    assert_eq!(site.sticky.as_ref().unwrap().cookie, "gtd_route");
    let tls = site.tls.as_ref().unwrap();
    assert_eq!(tls.certs.len(), 2);
    assert_eq!(tls.certs[0].cert, certs.join("site.pem"));
    assert_eq!(tls.certs[1].key, certs.join("other.key"));

    assert_eq!(site.routes.len(), 2);
    let r = &site.routes[0];
    assert_eq!(r.host.as_deref(), Some("*.example.com"));
    assert_eq!(r.path_prefix, ["/v2/", "/api/"]);
    let h = r.header.as_ref().unwrap();
    assert_eq!((h.name.as_str(), h.value.as_str()), ("X-Canary", "1"));
    assert_eq!(r.groups, ["beijing"]);
    assert_eq!(site.routes[1].host, None);
    assert_eq!(site.routes[1].path_prefix, ["/static/"]);
    assert_eq!(site.routes[1].groups, ["shanghai", "beijing"]);

    let bj = &site.groups[0];
    assert_eq!(bj.ratio, 62.5);
    let per_region = BTreeMap::from([("cn-beijing".to_owned(), 1), ("cn-shanghai".to_owned(), 2)]);
    assert_eq!(bj.priority, Some(Priority::PerRegion(per_region)));
    assert_eq!(
        bj.priority.as_ref().unwrap().for_region("cn-shanghai"),
        Some(2)
    );
    let Balance::Hash { key, consistent } = &bj.balance else {
        panic!("{:?}", bj.balance)
    };
    assert!(consistent);
    assert_eq!(key.text, "${http_X_User}:$cookie_sid:$request_uri");
    assert_eq!(
        key.parts,
        [
            KeyPart::Header("x-user".into()),
            KeyPart::Literal(":".into()),
            KeyPart::Cookie("sid".into()),
            KeyPart::Literal(":".into()),
            KeyPart::RequestUri,
        ]
    );
    assert_eq!(bj.min_healthy, 2);
    assert_eq!(bj.path_prefix.as_deref(), Some("/test"));
    assert_eq!(bj.keepalive, 0);
    let up = bj.tls.as_ref().unwrap();
    assert!(up.enabled && !up.insecure_skip_verify);
    assert_eq!(up.sni.as_deref(), Some("api.example.com"));
    assert_eq!(up.ca.as_deref(), Some(certs.join("ca.pem").as_path()));
    assert_eq!(
        up.client_cert.as_deref(),
        Some(certs.join("client.pem").as_path())
    );
    assert_eq!(
        up.client_key.as_deref(),
        Some(certs.join("client.key").as_path())
    );
    assert_eq!(up.min_version, TlsVersion::V1_3);

    let hc = bj.health_check.as_ref().unwrap();
    assert_eq!(hc.protocol, CheckProtocol::Https);
    assert_eq!(hc.port, Some(8081));
    assert_eq!(hc.interval, Duration::from_secs(10));
    assert_eq!(hc.connect_timeout, Duration::from_secs(2));
    assert_eq!(hc.read_timeout, Duration::from_secs(3));
    assert_eq!(hc.timeout, Duration::from_secs(5));
    assert_eq!((hc.healthy_threshold, hc.unhealthy_threshold), (1, 5));
    assert_eq!(hc.method, CheckMethod::Post);
    assert_eq!(hc.path, "/health");
    assert_eq!(hc.host.as_deref(), Some("health.example.com"));
    let headers: Vec<_> = hc
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(headers, [("Accept", "text/plain"), ("X-Check", "1")]);
    assert_eq!(hc.body.as_deref(), Some("ping"));
    assert_eq!(hc.expect_status, StatusSet(vec![200..=200, 204..=299]));
    assert_eq!(
        hc.expect_headers.get("X-Ok").map(String::as_str),
        Some("yes")
    );
    assert_eq!(hc.expect_body.as_deref(), Some("pong"));
    assert!(hc.id_header && hc.essential && hc.explicit);

    let e = &bj.endpoints[0];
    assert_eq!(e.weight, 7);
    assert_eq!(e.max_conns, Some(100));
    assert!(e.down && e.drain && !e.enabled && !e.backup);
    assert_eq!(e.max_fails, 0);
    assert_eq!(e.fail_timeout, Duration::from_secs(30));
    assert_eq!(
        bj.endpoints[1].address.host,
        Host::Ip("2001:db8::1".parse().unwrap())
    );
    assert_eq!(bj.endpoints[1].address.text, "[2001:db8::1]:443");
    assert_eq!(
        bj.endpoints[2].address.host,
        Host::Name("api.internal".into())
    );

    let sh = &site.groups[1];
    assert_eq!(sh.ratio, 0.0);
    assert_eq!(
        sh.balance,
        Balance::LeastTime {
            measure: Measure::LastByte,
            factor: 0.5
        }
    );
    let hc = sh.health_check.as_ref().unwrap();
    assert_eq!(
        (hc.interval, hc.timeout),
        (Duration::from_secs(3), Duration::from_secs(3))
    );
    assert!(sh.endpoints[0].backup);
    assert_eq!(sh.endpoints[0].slow_start, Some(Duration::from_secs(60)));

    let hz = &site.groups[2];
    assert_eq!(hz.ratio, 100.0);
    assert_eq!(
        hz.balance,
        Balance::Feedback {
            header: "X-Capacity".into(),
            inverse: true,
            factor: 0.9
        }
    );
    assert_eq!(hz.endpoints[0].weight, 1000);
    assert_eq!(hz.endpoints[0].slow_start, Some(Duration::from_millis(250)));

    let game = &c.listeners[1];
    assert_eq!(game.proxy_protocol, Some(ProxyProtocol::V2));
    let methods: Vec<_> = game.groups.iter().map(|g| g.balance.clone()).collect();
    assert_eq!(
        methods,
        [
            Balance::RoundRobin,
            Balance::LeastConn,
            Balance::Random { two: true },
            Balance::LeastTime {
                measure: Measure::Connect,
                factor: 0.9
            },
        ]
    );
    let ranks: Vec<_> = game.groups.iter().map(|g| g.priority.clone()).collect();
    assert_eq!(
        ranks,
        [
            Some(Priority::Fixed(2)),
            Some(Priority::Fixed(1)),
            Some(Priority::Fixed(3)),
            Some(Priority::Fixed(4))
        ]
    );
    let hc = game.groups[0].health_check.as_ref().unwrap();
    assert_eq!(
        (hc.timeout, hc.connect_timeout),
        (Duration::from_secs(1), Duration::from_secs(1))
    );
    // The default timeout is min(interval, 30s).
    let hc = game.groups[1].health_check.as_ref().unwrap();
    assert_eq!(
        (hc.interval, hc.timeout),
        (Duration::from_secs(120), Duration::from_secs(30))
    );

    let voice = &c.listeners[2];
    assert_eq!(voice.udp_max_flows, 1024);
    assert_eq!(voice.groups[0].balance, Balance::RoundRobin);
    assert_eq!(c.listeners[3].groups[0].balance, Balance::IpHash);
}

// ---------------------------------------------------------------------------------------------
// The catalogue.

#[test]
fn the_shipped_catalogue_has_the_required_regions() {
    let c = catalog();
    let required = [
        ("cn-beijing", "China (Beijing)"),
        ("cn-shanghai", "China (Shanghai)"),
        ("cn-hangzhou", "China (Hangzhou)"),
        ("cn-shenzhen", "China (Shenzhen)"),
        ("cn-hongkong", "China (Hong Kong)"),
        ("ap-southeast-1", "Singapore"),
        ("ap-northeast-1", "Japan (Tokyo)"),
        ("ap-northeast-2", "South Korea (Seoul)"),
        ("ap-south-1", "India (Mumbai)"),
        ("ap-southeast-2", "Australia (Sydney)"),
        ("ap-southeast-3", "Malaysia (Kuala Lumpur)"),
        ("ap-southeast-5", "Indonesia (Jakarta)"),
        ("us-east-1", "US (Virginia)"),
        ("us-west-1", "US (Silicon Valley)"),
        ("us-west-2", "US (Oregon)"),
        ("ca-central-1", "Canada (Montreal)"),
        ("eu-central-1", "Germany (Frankfurt)"),
        ("eu-west-1", "UK (London)"),
        ("eu-west-3", "France (Paris)"),
        ("eu-north-1", "Sweden (Stockholm)"),
        ("me-east-1", "UAE (Dubai)"),
        ("me-central-1", "Saudi Arabia (Riyadh)"),
        ("sa-east-1", "Brazil (São Paulo)"),
        ("af-south-1", "South Africa (Cape Town)"),
    ];
    for (id, name) in required {
        let r = c.get(id).unwrap_or_else(|| panic!("{id} missing"));
        assert_eq!(r.name, name);
    }
    assert!(c.regions.len() >= 24);
    assert_eq!(c.route_factor, 1.5);
    // No override for Beijing/Shanghai: the shipped example uses the estimate (about 17 ms).
    assert!(c.rtt.is_empty());
    let ms = c.rtt_ms("cn-beijing", "cn-shanghai").unwrap();
    assert!((ms - 17.0).abs() < 0.5, "{ms}");
    // Southern hemisphere and western longitudes are signed.
    assert!(c.get("sa-east-1").unwrap().lat < 0.0 && c.get("sa-east-1").unwrap().lon < 0.0);
    assert!(c.get("ap-southeast-2").unwrap().lat < 0.0);
}

#[test]
fn catalogue_rtt_overrides_and_route_factor() {
    let text = r#"route_factor = 2
[[region]]
id = "a"
name = "A"
lat = 0
lon = 0
[[region]]
id = "b"
name = "B"
lat = 0.0
lon = 1.0
[rtt]
"b/a" = 42.5
"#;
    let c = config::parse_catalog(text, Path::new("cat.toml")).unwrap();
    assert_eq!(c.route_factor, 2.0);
    assert_eq!(c.rtt_ms("a", "b"), Some(42.5));
    assert_eq!(c.rtt_ms("b", "a"), Some(42.5));
    assert_eq!(c.rtt.get(&gtd::regions::pair_key("a", "b")), Some(&42.5));
}

#[test]
fn catalogue_mistakes() {
    let text = r#"route_factor = 0
[[region]]
id = "cn-beijing"
name = "China (Beijing)"
lat = 39.9
lon = 116.4
[[region]]
id = "cn-beijing"
name = "Beijing again"
lat = 95
lon = 200
[[region]]
id = "cn-shanghai"
nmae = "China (Shanghai)"
lat = 31.2
lon = 121.5
[rtt]
"cn-beijing/cn-shanghai" = 20
"cn-shanghai/cn-beijing" = 21
"cn-beijing/cn-shangai" = 20
"cn-beijing" = 5
"cn-beijing/cn-beijing" = 1
"#;
    let e: Vec<String> = config::parse_catalog(text, Path::new("cat.toml"))
        .unwrap_err()
        .0
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        e,
        [
            "cat.toml:1:16: route_factor 0 must be a number greater than 0",
            r#"cat.toml:8:6: region "cn-beijing": duplicate region id "cn-beijing" (first defined at line 3)"#,
            r#"cat.toml:10:7: region "cn-beijing": lat 95 is out of range -90..=90"#,
            r#"cat.toml:11:7: region "cn-beijing": lon 200 is out of range -180..=180"#,
            r#"cat.toml:12:1: region "cn-shanghai": missing required key "name""#,
            r#"cat.toml:14:1: region "cn-shanghai": unknown key "nmae"; did you mean "name"?"#,
            r#"cat.toml:19:1: rtt: rtt key "cn-shanghai/cn-beijing" repeats "cn-beijing/cn-shanghai" (the table is symmetric)"#,
            r#"cat.toml:20:1: rtt: rtt key "cn-beijing/cn-shangai" names unknown region "cn-shangai"; did you mean "cn-shanghai"?"#,
            r#"cat.toml:21:1: rtt: rtt key "cn-beijing" must name two regions as "a/b""#,
            r#"cat.toml:22:1: rtt: rtt key "cn-beijing/cn-beijing" names the same region twice"#,
        ]
    );
}

#[test]
fn the_catalogue_is_found_next_to_the_config_by_default() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("regions")).unwrap();
    std::fs::copy(catalog_path(), dir.path().join("regions/catalog.toml")).unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(
        &file,
        EXAMPLE.replace("catalog = \"regions/catalog.toml\"\n", ""),
    )
    .unwrap();
    let c = config::load(&file, None).unwrap();
    assert_eq!(c.catalog, catalog());

    // A catalog key that names a missing file is reported at its value.
    std::fs::write(
        &file,
        EXAMPLE.replace("regions/catalog.toml", "nowhere.toml"),
    )
    .unwrap();
    let e = config::load(&file, None).unwrap_err();
    assert_eq!(e.0.len(), 1, "{e}");
    assert_eq!((e.0[0].line, e.0[0].column), (1, 11));
    assert!(
        e.0[0].message.starts_with("cannot read region catalogue "),
        "{e}"
    );

    // --regions overrides the key; errors inside the catalogue name the catalogue file.
    let bad = dir.path().join("bad-catalog.toml");
    std::fs::write(
        &bad,
        "[[region]]\nid = \"x\"\nname = \"X\"\nlat = 0\nlon = 0\n[rtt]\n\"x/y\" = 1\n",
    )
    .unwrap();
    let e = config::load(&file, Some(&bad)).unwrap_err();
    assert_eq!(e.0[0].file, bad);
    assert_eq!((e.0[0].line, e.0[0].column), (7, 1));
}

// ---------------------------------------------------------------------------------------------
// `gtd check`

/// The warning a config with one health_check table gets (on the table's line).
fn health_checks_not_run(line: usize) -> String {
    format!(
        "active health checks are not run by this version: the health_check table (line {line}) \
         is checked but has no effect; passive checks (max_fails, fail_timeout) and the admin API \
         decide which endpoints serve"
    )
}

fn gtd_check(config: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gtd"))
        .arg("check")
        .arg("--config")
        .arg(config)
        .arg("--regions")
        .arg(catalog_path())
        .output()
        .unwrap()
}

#[test]
fn gtd_check_prints_every_error_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let text = EXAMPLE.replace(
        "ratio = 50\n\n    [[listener.group.endpoint]]\n    address = \"127.0.0.1:9001\"",
        "ratio = 150\n\n    [[listener.group.endpoint]]\n    address = \"127.0.0.1\"",
    );
    std::fs::write(&file, text).unwrap();
    let out = gtd_check(&file);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let f = file.display();
    assert_eq!(
        stderr,
        format!(
            "{f}:15:11: listener \"web\" group \"beijing\": ratio 150 is out of range 0..=100\n\
             {f}:18:15: listener \"web\" group \"beijing\" endpoint \"127.0.0.1\": invalid address \"127.0.0.1\": it has no port; write host:port, like \"10.0.0.1:80\", \"[2001:db8::1]:80\" or \"api.example.com:443\"\n\
             2 errors in {f}\n"
        )
    );
}

#[test]
fn gtd_check_prints_a_summary_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, EXAMPLE).unwrap();
    let out = gtd_check(&file);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The only warning: the example's health check is not run yet.
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "warning: {}:64:5: {}\n",
            file.display(),
            health_checks_not_run(64)
        )
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let expected = format!(
        "{}: ok — 3 listeners, 6 groups, 8 endpoints; {} regions in the catalogue

listener  protocol  port  regions                 groups  endpoints  routes
web       http      8080  cn-beijing,cn-shanghai  2       4          0
game      tcp       7000  cn-beijing,cn-shanghai  2       2          0
voice     udp       7000  cn-beijing,cn-shanghai  2       2          0

region       name              groups  endpoints
cn-beijing   China (Beijing)   3       4
cn-shanghai  China (Shanghai)  3       4
",
        file.display(),
        catalog().regions.len()
    );
    assert_eq!(stdout, expected);
}

#[test]
fn gtd_check_prints_warnings_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let text = EXAMPLE.replacen("port = 8080\n", "port = 8080\nproxy_protocol = \"v2\"\n", 1);
    std::fs::write(&file, text).unwrap();
    let out = gtd_check(&file);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!(
            "warning: {f}:10:1: listener \"web\": \"proxy_protocol\" is only for tcp listeners; ignored\n\
             warning: {f}:65:5: {}\n",
            health_checks_not_run(65),
            f = file.display()
        )
    );
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains(": ok — 3 listeners")
    );
}

#[test]
fn gtd_check_reports_a_missing_file() {
    let out = gtd_check(Path::new("/nonexistent/gtd.toml"));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with("/nonexistent/gtd.toml:1:1: cannot read file: "),
        "{stderr}"
    );
    assert!(
        stderr.ends_with("1 error in /nonexistent/gtd.toml\n"),
        "{stderr}"
    );
}

/// Real certificates and keys in `dir`: site.pem/.key, other.pem/.key (server), client.pem/.key
/// (client) and the CA that signed them, ca.pem.
fn write_pki(dir: &Path) {
    let pki = common::Pki::new();
    std::fs::create_dir_all(dir).unwrap();
    for (name, names, client) in [
        ("site", &["site.example.com"][..], false),
        ("other", &["*.other.example.com"][..], false),
        ("client", &[][..], true),
    ] {
        let (cert, key) = pki.issue(names, client);
        std::fs::write(dir.join(format!("{name}.pem")), cert).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key).unwrap();
    }
    std::fs::write(dir.join("ca.pem"), pki.ca_pem()).unwrap();
}

/// Certificates and keys are read by the check, as `nginx -t` and `haproxy -c` read them: a
/// file holding something else, or a key that is not its certificate's, is an error at the
/// value naming it, not a node that then refuses to start.
#[test]
fn certificate_and_key_contents_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    write_pki(&dir.path().join("certs"));
    let config = |site_cert: &str, site_key: &str, ca: &str, client_key: &str| {
        format!(
            r#"catalog = "{catalog}"
[[listener]]
name = "site"
protocol = "https"
port = 8443
regions = ["cn-beijing"]
tls = {{ certs = [{{ cert = "{site_cert}", key = "{site_key}" }}] }}
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  tls = {{ enabled = true, ca = "{ca}", client_cert = "certs/client.pem", client_key = "{client_key}" }}
    [[listener.group.endpoint]]
    address = "10.0.0.1:443"
"#,
            catalog = catalog_path().display()
        )
    };
    let check = |text: String| {
        let file = dir.path().join("gtd.toml");
        std::fs::write(&file, text).unwrap();
        match config::load(&file, None) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(ToString::to_string).collect::<Vec<_>>(),
        }
    };
    let good = (
        "certs/site.pem",
        "certs/site.key",
        "certs/ca.pem",
        "certs/client.key",
    );
    assert_eq!(
        check(config(good.0, good.1, good.2, good.3)),
        Vec::<String>::new()
    );

    let certs = dir.path().join("certs");
    let shown = |f: &str| certs.join(f).display().to_string();
    let errors = check(config(
        "certs/site.key",
        "certs/other.key",
        "certs/client.key",
        "certs/client.pem",
    ));
    let file = dir.path().join("gtd.toml").display().to_string();
    assert_eq!(
        errors,
        [
            format!(
                "{file}:7:27: listener \"site\": {}: no certificate found (expected PEM \"BEGIN CERTIFICATE\" blocks)",
                shown("site.key")
            ),
            format!(
                "{file}:11:32: listener \"site\" group \"beijing\": {}: no certificate found (expected PEM \"BEGIN CERTIFICATE\" blocks)",
                shown("client.key")
            ),
            format!(
                "{file}:11:99: listener \"site\" group \"beijing\": {}: no private key found (expected a PEM \"BEGIN PRIVATE KEY\", \"BEGIN RSA PRIVATE KEY\" or \"BEGIN EC PRIVATE KEY\" block)",
                shown("client.pem")
            ),
        ]
    );
    let errors = check(config("certs/site.pem", "certs/other.key", good.2, good.3));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(&format!(
            "{file}:7:51: listener \"site\": {}: the key does not belong to the certificate {}",
            shown("other.key"),
            shown("site.pem")
        )),
        "{errors:?}"
    );
}
