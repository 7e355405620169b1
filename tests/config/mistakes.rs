//! Mistakes in any section, each with its exact message, line and column; every error of a
//! file in one run.

use super::*;

#[test]
fn mistakes_in_a_listener_of_one_group() {
    let durations = format!(
        "{WEB}\nconnect_timeout = \"1.5s\"\nidle_timeout = \"5\"\ndrain_timeout = 30\n\
         header_timeout = \"-1s\""
    );
    assert_errors(&[
        (
            one_group(WEB, "  ratio = 150\n", ""),
            &[
                r#"config.toml:10:11: listener "web" group "beijing": ratio 150 is out of range 0..=100"#,
            ],
        ),
        (
            one_group(WEB, "  ratio = -0.5\n", ""),
            &[
                r#"config.toml:10:11: listener "web" group "beijing": ratio -0.5 is out of range 0..=100"#,
            ],
        ),
        (
            one_group(
                WEB,
                "  ratoi = 50\n\n",
                "    wieght = 2\n    colour = \"blue\"\n",
            ),
            &[
                r#"config.toml:10:3: listener "web" group "beijing": unknown key "ratoi"; did you mean "ratio"?"#,
                r#"config.toml:14:5: listener "web" group "beijing" endpoint "10.0.0.1:80": unknown key "wieght"; did you mean "weight"?"#,
                r#"config.toml:15:5: listener "web" group "beijing" endpoint "10.0.0.1:80": unknown key "colour""#,
            ],
        ),
        (
            one_group(WEB, "", "").replace("  region = \"cn-beijing\"", "  region = \"cn-bejing\""),
            &[
                r#"config.toml:9:12: listener "web" group "beijing": unknown region "cn-bejing" (not in the region catalogue); did you mean "cn-beijing"?"#,
            ],
        ),
        (
            one_group(
                &WEB.replace(r#"["cn-beijing"]"#, r#"["cn-beijing", "mars-olympus-1"]"#),
                "",
                "",
            ),
            &[
                r#"config.toml:5:26: listener "web": unknown region "mars-olympus-1" (not in the region catalogue)"#,
            ],
        ),
        (
            one_group(
                &durations,
                "    [listener.group.health_check]\n    interval = \"5 s\"\n",
                "",
            ),
            &[
                r#"config.toml:6:19: listener "web": invalid duration "1.5s" for "connect_timeout": fractions are not allowed; use a smaller unit, like "1500ms""#,
                r#"config.toml:7:16: listener "web": invalid duration "5" for "idle_timeout": it has no unit; use an integer followed by ms, s, m or h, like "250ms" or "5s""#,
                r#"config.toml:8:17: listener "web": invalid duration 30 for "drain_timeout": write it as a string with a unit, like "5s" or "250ms""#,
                r#"config.toml:9:18: listener "web": invalid duration "-1s" for "header_timeout": durations cannot be negative"#,
                r#"config.toml:15:16: listener "web" group "beijing" health_check: invalid duration "5 s" for "interval": unknown unit " s"; use an integer followed by ms, s, m or h, like "250ms" or "5s""#,
            ],
        ),
        (
            one_group(WEB, "", "").replace("10.0.0.1:80", "2001:db8::10:8080"),
            &[
                r#"config.toml:11:15: listener "web" group "beijing" endpoint "2001:db8::10:8080": invalid address "2001:db8::10:8080": IPv6 addresses must be in brackets: write "[2001:db8::10]:8080""#,
            ],
        ),
    ]);
}

#[test]
fn toml_syntax_errors() {
    // Only the first syntax error is reported: the parser's later ones are mostly echoes of it.
    let cases: [(&str, &[&str]); 4] = [
        (
            "[[listener]]\nname = \"web\"\nport = 80 80\nregions = [\n",
            &[
                "config.toml:3:8: invalid TOML: string values must be quoted, expected literal string",
            ],
        ),
        (
            "[[listener]]\nname = \"web\nport = 80\n",
            &["config.toml:2:12: invalid TOML: invalid basic string, expected `\"`"],
        ),
        (
            "[[listener]\nname = \"web\"\n",
            &["config.toml:1:12: invalid TOML: unclosed array table, expected `]`"],
        ),
        (
            "[admin]\nbind = \"127.0.0.1:9100\"\nbind = \"127.0.0.1:9200\"\n",
            &["config.toml:3:1: invalid TOML: duplicate key \"bind\""],
        ),
    ];
    assert_errors(&cases.map(|(text, e)| (text.to_owned(), e)));
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

/// An admin server reachable beyond loopback needs a token, or the operator's explicit
/// `allow_without_token`: otherwise anyone who reaches it can reload and disable endpoints.
#[test]
fn an_admin_server_open_beyond_loopback_needs_a_token() {
    let listener = one_group(WEB, "", "");
    let with = |admin: &str| format!("[admin]\n{admin}\n\n{listener}");
    assert_eq!(
        error(&with("bind = \"0.0.0.0:9100\"")),
        "config.toml:2:8: admin: the admin server on 0.0.0.0:9100 is reachable beyond this \
         host, and without a token anyone who reaches it can reload the config or disable \
         endpoints: set token = \"...\", bind to 127.0.0.1, or set allow_without_token = true"
    );
    assert_eq!(errors(&with("bind = \"[::]:9100\"")).len(), 1);
    for fine in [
        "bind = \"0.0.0.0:9100\"\ntoken = \"s3cret\"",
        "bind = \"0.0.0.0:9100\"\nallow_without_token = true",
        "bind = \"127.0.0.2:9100\"",
        "bind = \"[::1]:9100\"",
    ] {
        let c = valid(&with(fine));
        assert!(!c.admin.exposed(c.admin.bind), "{fine}");
    }
}

/// `[dns]`: name servers, timeout, attempts and the TTL bounds, each checked where written;
/// names are never looked up by the config reader (`gtd check` works offline).
#[test]
fn dns_settings() {
    let listener = one_group(WEB, "", "").replace("10.0.0.1:80", "api.internal.example:80");
    let with = |dns: &str| format!("[dns]\n{dns}\n\n{listener}");
    assert_errors(&[
        (
            with("nameservers = [\"127.0.0.1:5353\", \"dns.example\", \"127.0.0.1:5353\"]"),
            &[
                r#"config.toml:2:34: dns: invalid name server "dns.example": expected IP or IP:PORT, like "127.0.0.1:53" or "[::1]:5353""#,
                r#"config.toml:2:49: dns: name server "127.0.0.1:5353" is listed twice"#,
            ],
        ),
        (
            with("timeout = \"0s\"\nattempts = 0"),
            &[
                r#"config.toml:2:11: dns: "timeout" must be greater than 0"#,
                r#"config.toml:3:12: dns: attempts 0 is out of range 1..=10"#,
            ],
        ),
        (
            with("min_ttl = \"10m\"\nmax_ttl = \"1m\"\nttl = 5"),
            &[
                r#"config.toml:3:11: dns: min_ttl (10m) is above max_ttl (1m)"#,
                r#"config.toml:4:1: dns: unknown key "ttl""#,
            ],
        ),
    ]);
    let c = valid(&with(
        "nameservers = [\"127.0.0.1\", \"[::1]:5353\"]\ntimeout = \"2s\"\nattempts = 3\nmin_ttl = \"5s\"",
    ));
    assert_eq!(
        c.dns.nameservers,
        [
            "127.0.0.1:53".parse::<std::net::SocketAddr>().unwrap(),
            "[::1]:5353".parse().unwrap()
        ]
    );
    assert_eq!(c.dns.timeout, Some(std::time::Duration::from_secs(2)));
    assert_eq!(c.dns.attempts, Some(3));
    assert_eq!(c.dns.min_ttl, std::time::Duration::from_secs(5));
    assert_eq!(c.dns.max_ttl, gtd::config::Dns::DEFAULT_MAX_TTL);
    // A name server nobody answers on: the file is still valid (nothing is resolved).
    valid(&with("nameservers = [\"127.0.0.1:9\"]"));
}

/// Outlier detection's keys (docs/design.md §5): on by default for HTTP groups, each key
/// validated where it is written, and ignored with a warning on a tcp/udp listener.
#[test]
fn outlier_keys_default_validate_and_warn_off_http() {
    use gtd::config::Outlier;
    let c = valid(&one_group(WEB, "", ""));
    assert_eq!(c.listeners[0].groups[0].outlier, Some(Outlier::default()));
    let off = valid(&one_group(
        WEB,
        "  consecutive_5xx = 0\n  consecutive_gateway_failures = 0\n",
        "",
    ));
    assert_eq!(off.listeners[0].groups[0].outlier, None, "both streaks off");
    let set = valid(&one_group(
        WEB,
        "  consecutive_5xx = 0\n  base_ejection_time = \"10s\"\n  max_ejection_percent = 100\n",
        "",
    ));
    assert_eq!(
        set.listeners[0].groups[0].outlier,
        Some(Outlier {
            consecutive_5xx: 0,
            base_ejection_time: std::time::Duration::from_secs(10),
            max_ejection_percent: 100,
            ..Outlier::default()
        })
    );
    assert_errors(&[
        (
            one_group(
                WEB,
                "  base_ejection_time = \"1m\"\n  max_ejection_time = \"30s\"\n",
                "",
            ),
            &[
                r#"config.toml:11:23: listener "web" group "beijing": max_ejection_time 30s is shorter than base_ejection_time 60s"#,
            ],
        ),
        (
            one_group(WEB, "  max_ejection_percent = 101\n", ""),
            &[
                r#"config.toml:10:26: listener "web" group "beijing": max_ejection_percent 101 is out of range 0..=100"#,
            ],
        ),
        (
            one_group(WEB, "  base_ejection_time = \"0s\"\n", ""),
            &[
                r#"config.toml:10:24: listener "web" group "beijing": "base_ejection_time" must be greater than 0"#,
            ],
        ),
    ]);
    let tcp = valid(&one_group(GAME, "  consecutive_5xx = 3\n", ""));
    assert_eq!(tcp.listeners[0].groups[0].outlier, None);
    let warnings: Vec<String> = tcp.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            r#"config.toml:10:3: listener "game" group "beijing": "consecutive_5xx" is only for http/https listeners; ignored"#
        ]
    );
}
