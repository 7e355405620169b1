//! Keys that depend on the protocol (warned about and ignored on another), spellings from other
//! proxies, routes and health checks.

use super::*;

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
    // The schema sketch of docs/design.md §2 lists every listener key in one listener: a key of another
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
            concat!(
                r#"config.toml:20:21: listener "game" group "beijing" health_check: "#,
                "this health check only connects: an endpoint that accepts and never answers passes and stays in rotation. Give it send and expect (bytes the endpoint answers, and what its answer holds), or set first_byte_timeout on the listener so that such a connection is tried on another endpoint"
            ),
            r#"config.toml:21:5: listener "game" group "beijing" health_check: "path" is only for http/https health checks; ignored"#,
            r#"config.toml:30:1: listener "voice": "proxy_protocol" is only for tcp listeners; ignored"#,
        ]
    );
    let game = &c.listeners[0];
    assert!(game.sticky.is_none() && game.routes.is_empty() && game.tls.is_none());
    assert_eq!(game.udp_max_flows, 65_536);
    assert_eq!(game.groups[0].path_prefix, None);
    let voice = &c.listeners[1];
    // Retries are for every protocol: a UDP flow's set-up is retried as a TCP connect is.
    assert_eq!((voice.proxy_protocol, voice.tries), (None, 2));
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
