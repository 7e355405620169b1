//! Values gtd writes onto the wire (a check's path, Host and headers, a group's `path_prefix`):
//! `gtd check` refuses what the node could not send, or would send as something else, at the
//! value's position (issue 28 item 5).

use super::*;

/// An http check with `line` on line 12, or a group line `line` on line 10.
fn check(line: &str) -> String {
    one_group(
        WEB,
        &format!("    [listener.group.health_check]\n    protocol = \"http\"\n    {line}\n"),
        "",
    )
}

fn group(line: &str) -> String {
    one_group(WEB, &format!("  {line}\n"), "")
}

#[test]
fn wire_values_that_cannot_be_sent_are_errors_at_their_position() {
    let g = r#"listener "web" group "beijing""#;
    let c = r#"listener "web" group "beijing" health_check"#;
    let cases: Vec<(String, String)> = vec![
        (
            check(r#"path = "/a b""#),
            format!(
                r#"config.toml:12:12: {c}: path "/a b" cannot be sent in a request line: a space at character 3; write it percent-encoded, %20"#
            ),
        ),
        (
            check(r#"path = "/<script>""#),
            format!(
                r#"config.toml:12:12: {c}: path "/<script>" cannot be sent in a request line: "<" at character 2; write it percent-encoded, %3C"#
            ),
        ),
        (
            check(r#"path = "/health\r\nX-Injected: 1""#),
            format!(
                r#"config.toml:12:12: {c}: path "/health\r\nX-Injected: 1" cannot be sent in a request line: a carriage return (CR) at character 8; write it percent-encoded, %0D"#
            ),
        ),
        (
            check(r#"path = "/santé""#),
            format!(
                r#"config.toml:12:12: {c}: path "/santé" cannot be sent in a request line: the non-ASCII character "é" at character 6; write it percent-encoded, %C3%A9"#
            ),
        ),
        (
            check(r#"path = "/a\u0001""#),
            format!(
                r#"config.toml:12:12: {c}: path "/a\u{{1}}" cannot be sent in a request line: the control character U+0001 at character 3; write it percent-encoded, %01"#
            ),
        ),
        (
            check(r#"path = "/status#top""#),
            format!(
                r##"config.toml:12:12: {c}: path "/status#top" cannot be sent in a request line: "#" (a fragment, which is never sent) at character 8; write it percent-encoded, %23"##
            ),
        ),
        (
            check(r#"path = """#),
            format!(r#"config.toml:12:12: {c}: path "" must start with "/""#),
        ),
        (
            check(r#"host = "health.example.com\r\nX-Injected: 1""#),
            format!(
                r#"config.toml:12:12: {c}: host "health.example.com\r\nX-Injected: 1" is not a host name or IP address with an optional port, like "api.example.com" or "api.example.com:8443""#
            ),
        ),
        (
            check(r#"host = "a b""#),
            format!(
                r#"config.toml:12:12: {c}: host "a b" is not a host name or IP address with an optional port, like "api.example.com" or "api.example.com:8443""#
            ),
        ),
        (
            check(r#"headers = { "X-Check" = "a\r\nX-Injected: 1" }"#),
            format!(
                r#"config.toml:12:29: {c}: header "X-Check": value "a\r\nX-Injected: 1" cannot be sent in a header: a carriage return (CR) at character 2"#
            ),
        ),
        (
            check(r#"headers = { "X-Check" = "a\u0000" }"#),
            format!(
                r#"config.toml:12:29: {c}: header "X-Check": value "a\0" cannot be sent in a header: the control character U+0000 at character 2"#
            ),
        ),
        (
            check(r#"headers = { "X Check" = "1" }"#),
            format!(r#"config.toml:12:17: {c}: "X Check" is not a valid header name"#),
        ),
        (
            group(r#"path_prefix = "/v1 HTTP/1.1\r\nX-Injected: 1\r\nX: ""#),
            format!(
                r#"config.toml:10:17: {g}: path_prefix "/v1 HTTP/1.1\r\nX-Injected: 1\r\nX: " cannot be sent in a request line: a space at character 4; write it percent-encoded, %20"#
            ),
        ),
        (
            group(r#"path_prefix = "/v1?x=1""#),
            format!(
                r#"config.toml:10:17: {g}: path_prefix "/v1?x=1" holds a query ("?"): a prefix is a path; write "%3F" for a "?" in it"#
            ),
        ),
        (
            group(r#"path_prefix = "/v1#x""#),
            format!(
                r##"config.toml:10:17: {g}: path_prefix "/v1#x" cannot be sent in a request line: "#" (a fragment, which is never sent) at character 4; write it percent-encoded, %23"##
            ),
        ),
        (
            group(r#"path_prefix = "v1""#),
            format!(r#"config.toml:10:17: {g}: path_prefix "v1" must start with "/""#),
        ),
    ];
    for (text, expected) in &cases {
        assert_eq!(&error(text), expected, "config:\n{text}");
    }
}

#[test]
fn wire_values_that_can_be_sent_pass() {
    for line in [
        r#"path = "/health?full=1&x=%20""#,
        r#"host = "health.example.com:8443""#,
        r#"host = "[2001:db8::1]""#,
        r#"headers = { "X-Check" = "gtd	tab, and obs-text é" }"#,
        // Only compared, never sent.
        r#"expect_headers = { "X-Ok" = "a\r\nb" }"#,
    ] {
        valid(&check(line));
    }
    valid(&group(r#"path_prefix = "/v1/a%20b/""#));
}

/// `[admin] hosts`: the names the admin server answers to in `Host` (docs/design.md §7).
#[test]
fn admin_hosts_are_names_without_a_port() {
    let admin = |hosts: &str| format!("[admin]\nhosts = {hosts}\n\n{}", one_group(WEB, "", ""));
    let cases: Vec<(String, &str)> = vec![
        (
            admin(r#"["gtd-1.internal:9100"]"#),
            r#"config.toml:2:10: admin: host "gtd-1.internal:9100" has a port: list the name alone (any port the server is reached on is answered)"#,
        ),
        (
            admin(r#"["rebind attacker"]"#),
            r#"config.toml:2:10: admin: host "rebind attacker" is not a host name, like "gtd-1.example.com""#,
        ),
        (
            admin(r#"["ok.example", 7]"#),
            r#"config.toml:2:24: admin: each entry of "hosts" must be a string, found integer 7"#,
        ),
        (
            admin(r#""gtd-1.internal""#),
            r#"config.toml:2:9: admin: "hosts" must be an array, found string "gtd-1.internal""#,
        ),
    ];
    for (text, expected) in &cases {
        assert_eq!(&error(text), expected, "config:\n{text}");
    }
    let config = valid(&admin(r#"["GTD-1.internal", "10.0.0.5", "ok.example."]"#));
    assert_eq!(
        config.admin.hosts,
        ["gtd-1.internal", "10.0.0.5", "ok.example."]
    );
}
