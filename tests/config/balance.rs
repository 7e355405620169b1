//! Balancing methods and their parameters, and group priorities.

use super::*;

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
fn methods_on_a_listener_of_one_group() {
    assert_errors(&[
        // round_robin, the default, takes no parameters.
        (
            one_group(WEB, "  hash_key = \"$remote_addr\"\n", ""),
            &[
                r#"config.toml:10:3: listener "web" group "beijing": balancing method "round_robin" does not support parameter "hash_key""#,
            ],
        ),
        // ip_hash on tcp: suggests hash on $remote_addr.
        (
            one_group(GAME, "  balance = \"ip_hash\"\n", ""),
            &[
                r#"config.toml:10:13: listener "game" group "beijing": balancing method "ip_hash" is only for http/https listeners; on tcp/udp use balance = "hash" with hash_key = "$remote_addr""#,
            ],
        ),
    ]);
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
    // A region of the catalogue that does not serve this listener (docs/design.md §3.1's example table copied
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
