//! Keys of L4 checks that talk (`send`, `expect`, `protocol = "udp"`), `first_byte_timeout`,
//! and the ranking's `rtt_from`, `rank_margin` and `rank_dwell`: what they read as, and every
//! mistake with its position.

use super::*;

use std::time::Duration;

use gtd::config::{Listener, RankMargin, RttFrom};

/// The head (lines 1-5) of a udp listener "voice" on 5300 served from cn-beijing.
const VOICE: &str = r#"[[listener]]
name = "voice"
protocol = "udp"
port = 5300
regions = ["cn-beijing"]"#;

fn check(lines: &str) -> String {
    format!("    [listener.group.health_check]\n{lines}")
}

#[test]
fn send_and_expect_decode_escapes_after_toml() {
    let c = valid(&one_group(
        GAME,
        &check(
            "    send = 'PING\\r\\n\\x00'\n    expect = \"+PONG\\r\\n\"\n    read_timeout = \"2s\"\n    connect_timeout = \"1s\"\n",
        ),
        "",
    ));
    let hc = c.listeners[0].groups[0].health_check.clone().unwrap();
    assert_eq!(hc.protocol, CheckProtocol::Tcp);
    assert_eq!(hc.send.as_deref(), Some(&b"PING\r\n\0"[..]));
    assert_eq!(hc.expect.as_deref(), Some(&b"+PONG\r\n"[..]));
    assert_eq!(
        (hc.connect_timeout, hc.read_timeout, hc.timeout),
        (
            Duration::from_secs(1),
            Duration::from_secs(2),
            Duration::from_secs(3)
        )
    );
    assert!(hc.talks());
    // A banner protocol: expect alone.
    let c = valid(&one_group(GAME, &check("    expect = \"SSH-\"\n"), ""));
    let hc = c.listeners[0].groups[0].health_check.clone().unwrap();
    assert_eq!((hc.send, hc.expect.as_deref()), (None, Some(&b"SSH-"[..])));
}

#[test]
fn a_udp_check_on_a_udp_listener() {
    let c = valid(&one_group(
        VOICE,
        &check(
            "    protocol = \"udp\"\n    send = 'ping'\n    expect = 'pong'\n    timeout = \"2s\"\n",
        ),
        "",
    ));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let hc = c.listeners[0].groups[0].health_check.clone().unwrap();
    assert_eq!(hc.protocol, CheckProtocol::Udp);
    assert_eq!(hc.port, None, "the endpoint's own port");
    assert_eq!(hc.timeout, Duration::from_secs(2));
}

#[test]
fn ranking_keys_and_first_byte_timeout() {
    let c = valid(&one_group(GAME, "", ""));
    let l = &c.listeners[0];
    assert_eq!(l.rtt_from, RttFrom::Connect);
    assert_eq!(l.rank_margin, RankMargin::DEFAULT);
    assert_eq!(l.rank_dwell, Listener::DEFAULT_RANK_DWELL);
    assert_eq!(l.first_byte_timeout, None);
    let head = format!(
        "{GAME}\nrtt_from = \"check\"\nrank_margin = [\"10ms\", \"30%\"]\nrank_dwell = \"0s\"\nfirst_byte_timeout = \"500ms\""
    );
    let c = valid(&one_group(&head, "", ""));
    let l = &c.listeners[0];
    assert_eq!(l.rtt_from, RttFrom::Check);
    assert_eq!(
        l.rank_margin,
        RankMargin {
            floor_ms: 10.0,
            fraction: 0.3
        }
    );
    assert_eq!(l.rank_margin.ms(100.0), 30.0);
    assert_eq!(l.rank_dwell, Duration::ZERO);
    assert_eq!(l.first_byte_timeout, Some(Duration::from_millis(500)));
    let c = valid(&one_group(
        &format!("{GAME}\nrank_margin = \"15%\""),
        "",
        "",
    ));
    assert_eq!(c.listeners[0].rank_margin.floor_ms, 0.0);
    assert_eq!(c.listeners[0].rank_margin.fraction, 0.15);
}

#[test]
fn mistakes_name_their_place() {
    assert_errors(&[
        (
            one_group(
                GAME,
                &check("    send = 'PING\\q'\n    expect = '\\x4'\n"),
                "",
            ),
            &[
                r#"config.toml:11:12: listener "game" group "beijing" health_check: "send": unknown escape "\\q" at byte 4; the escapes are \xHH, \r, \n, \t, \0 and \\ for a backslash"#,
                r#"config.toml:12:14: listener "game" group "beijing" health_check: "expect": \x at byte 0 needs two hex digits (\x00 to \xff)"#,
            ],
        ),
        (
            one_group(GAME, &check("    send = ''\n"), ""),
            &[
                r#"config.toml:11:12: listener "game" group "beijing" health_check: "send" is empty: remove it, or give the bytes to write"#,
            ],
        ),
        (
            one_group(VOICE, &check("    protocol = \"udp\"\n"), ""),
            &[
                r#"config.toml:10:5: listener "voice" group "beijing" health_check: a udp health check sends a datagram and waits for the reply: set send = "..." (escapes such as \x00 and \r\n are allowed)"#,
            ],
        ),
        (
            one_group(GAME, &check("    protocol = \"udp\"\n    send = 'x'\n"), ""),
            &[
                r#"config.toml:11:16: listener "game" group "beijing" health_check: a udp health check is for udp listeners; this listener's endpoints speak TCP: use protocol = "tcp" with send and expect"#,
            ],
        ),
        (
            one_group(
                &format!(
                    "{GAME}\nrank_margin = \"120%\"\nrtt_from = \"head\"\nrank_dwell = \"1 m\""
                ),
                "",
                "",
            ),
            &[
                r#"config.toml:6:15: listener "game": rank_margin "120%" is a percentage from 0% to below 100%; use a duration like "5ms", a percentage like "20%", or both: ["5ms", "20%"]"#,
                r#"config.toml:7:12: listener "game": unknown rtt from "head" (expected "connect" or "check")"#,
                r#"config.toml:8:14: listener "game": invalid duration "1 m" for "rank_dwell": unknown unit " m"; use an integer followed by ms, s, m or h, like "250ms" or "5s""#,
            ],
        ),
        (
            one_group(&format!("{GAME}\nrank_margin = [\"5ms\", \"1ms\"]"), "", ""),
            &[
                r#"config.toml:6:23: listener "game": rank_margin "1ms" repeats a kind: give at most one duration and one percentage"#,
            ],
        ),
        (
            one_group(&format!("{GAME}\nfirst_byte_timeout = \"0s\""), "", ""),
            &[r#"config.toml:6:22: listener "game": "first_byte_timeout" must be greater than 0"#],
        ),
    ]);
}

#[test]
fn keys_that_do_nothing_here_are_warned_about() {
    let warnings = |text: &str| -> Vec<String> {
        valid(text)
            .warnings
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    assert_eq!(
        warnings(&one_group(
            &format!("{WEB}\nfirst_byte_timeout = \"1s\""),
            "",
            ""
        )),
        [
            r#"config.toml:6:1: listener "web": "first_byte_timeout" is only for tcp listeners; ignored"#
        ]
    );
    assert_eq!(
        warnings(&one_group(GAME, &check("    read_timeout = \"1s\"\n"), "")),
        [
            // A check that only connects is warned of on its own (see below).
            concat!(
                r#"config.toml:10:21: listener "game" group "beijing" health_check: "#,
                "this health check only connects: an endpoint that accepts and never answers passes and stays in rotation. Give it send and expect (bytes the endpoint answers, and what its answer holds), or set first_byte_timeout on the listener so that such a connection is tried on another endpoint"
            ),
            r#"config.toml:11:5: listener "game" group "beijing" health_check: "read_timeout" is only for http/https health checks and tcp ones with send or expect (a udp check has "timeout" alone); ignored"#
        ]
    );
    assert_eq!(
        warnings(&one_group(
            WEB,
            &check("    protocol = \"http\"\n    expect = 'x'\n"),
            ""
        )),
        [
            r#"config.toml:12:5: listener "web" group "beijing" health_check: "expect" is only for tcp/udp health checks; ignored"#
        ]
    );
    assert_eq!(
        warnings(&one_group(
            &format!("{GAME}\nrank_dwell = \"1m\""),
            "  priority = 1\n",
            ""
        )),
        [
            r#"config.toml:6:1: listener "game": "rank_dwell" has no effect: the groups set a static priority, so measured round trips never reorder them"#
        ]
    );
}

#[test]
fn failback_ramp_reads_as_a_duration_up_to_an_hour() {
    let c = valid(&one_group(GAME, "", ""));
    assert_eq!(c.listeners[0].failback_ramp, Duration::ZERO);
    let c = valid(&one_group(
        &format!("{GAME}\nfailback_ramp = \"90s\""),
        "",
        "",
    ));
    assert_eq!(c.listeners[0].failback_ramp, Duration::from_secs(90));
    assert_errors(&[
        (
            one_group(&format!("{GAME}\nfailback_ramp = \"2h\""), "", ""),
            &[
                r#"config.toml:6:17: listener "game": "failback_ramp" is at most "1h" (a recovered group gets its whole share back within it); "0s" returns it at once"#,
            ],
        ),
        (
            one_group(&format!("{GAME}\nfailback_ramp = 60"), "", ""),
            &[
                r#"config.toml:6:17: listener "game": invalid duration 60 for "failback_ramp": write it as a string with a unit, like "5s" or "250ms""#,
            ],
        ),
    ]);
}

#[test]
fn checks_that_cannot_see_a_hung_endpoint_are_warned_of() {
    // (listener head, check lines, the warning's words; None: no warning.)
    let fbt = format!("{GAME}\nfirst_byte_timeout = \"2s\"");
    let cases: &[(&str, &str, Option<&str>)] = &[
        // TCP: connect-only, and another port, without first_byte_timeout.
        (GAME, "    interval = \"5s\"\n", Some("only connects")),
        (
            GAME,
            "    port = 9000\n    send = 'x'\n    expect = 'y'\n",
            Some("checks port 9000"),
        ),
        (
            GAME,
            "    protocol = \"http\"\n    port = 9000\n",
            Some("checks port 9000"),
        ),
        // Checks that talk on the served port see it; so does first_byte_timeout.
        (GAME, "    send = 'PING'\n    expect = 'PONG'\n", None),
        (GAME, "    expect = 'SSH-'\n", None),
        (GAME, "    protocol = \"http\"\n", None),
        (GAME, "    port = 80\n", Some("only connects")),
        (&fbt, "    interval = \"5s\"\n", None),
        (&fbt, "    port = 9000\n", None),
        // UDP: a tcp or http check of a side port; a udp check of another port.
        (VOICE, "    port = 9000\n", Some("over tcp on port 9000")),
        (
            VOICE,
            "    protocol = \"http\"\n    port = 9000\n",
            Some("over http on port 9000"),
        ),
        (
            VOICE,
            "    protocol = \"udp\"\n    port = 9000\n    send = 'ping'\n",
            Some("sends to port 9000"),
        ),
        (
            VOICE,
            "    protocol = \"udp\"\n    send = 'ping'\n    expect = 'pong'\n",
            None,
        ),
    ];
    for (head, lines, want) in cases {
        let c = valid(&one_group(head, &check(lines), ""));
        let warnings: Vec<String> = c.warnings.iter().map(ToString::to_string).collect();
        match want {
            None => assert!(warnings.is_empty(), "{lines}: {warnings:?}"),
            Some(words) => {
                assert_eq!(warnings.len(), 1, "{lines}: {warnings:?}");
                let w = &warnings[0];
                assert!(w.contains("group \"beijing\" health_check"), "{w}");
                assert!(w.contains(words), "{lines}: {w}");
                // It names the way out.
                assert!(w.contains("send and expect"), "{w}");
                let udp = head.contains("udp");
                assert_eq!(
                    w.contains("protocol = \"udp\""),
                    udp && !lines.contains("udp"),
                    "{w}"
                );
                assert_eq!(w.contains("first_byte_timeout"), !udp, "{w}");
            }
        }
    }
}
