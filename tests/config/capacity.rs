//! `failover = "graceful"` with `overprovisioning`, `headroom`, and `capacity` on groups and
//! endpoints: defaults, the group's sum, and each bad value with its position.

use super::*;

#[test]
fn graceful_capacity_and_headroom_are_read_with_their_defaults() {
    let c = valid(&one_group(WEB, "", ""));
    let l = &c.listeners[0];
    assert_eq!(l.failover, FailoverMode::NextPriority);
    assert_eq!(l.overprovisioning, 1.4);
    assert_eq!(l.headroom, 80.0);
    assert_eq!(l.groups[0].capacity, None);
    assert_eq!(l.groups[0].endpoints[0].capacity, None);

    let head = format!("{WEB}\nfailover = \"graceful\"\noverprovisioning = 1.25\nheadroom = 70");
    let c = valid(&one_group(&head, "", "    capacity = 400\n"));
    let l = &c.listeners[0];
    assert_eq!(l.failover, FailoverMode::Graceful);
    assert_eq!((l.overprovisioning, l.headroom), (1.25, 70.0));
    // The group's capacity is its endpoints' sum when every one sets one.
    assert_eq!(l.groups[0].capacity, None);
    assert_eq!(l.groups[0].capacity_when(|_| true), Some(400.0));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);

    let c = valid(&one_group(
        &format!("{WEB}\nfailover = \"graceful\""),
        "  capacity = 1000\n",
        "    capacity = 400.5\n",
    ));
    assert_eq!(c.listeners[0].groups[0].capacity, Some(1000.0));
    assert_eq!(c.listeners[0].groups[0].endpoints[0].capacity, Some(400.5));
}

#[test]
fn a_group_of_unknown_parts_has_an_unknown_capacity() {
    let text = format!(
        "{}\n    [[listener.group.endpoint]]\n    address = \"10.0.0.2:80\"\n",
        one_group(WEB, "", "    capacity = 400\n")
    );
    let g = &valid(&text).listeners[0].groups[0];
    assert_eq!(g.capacity_when(|_| true), None);
    assert!(!g.has_capacity());
}

#[test]
fn what_a_group_carries_with_endpoints_out() {
    let two = |group: &str, a: &str, b: &str| {
        format!(
            "{}    weight = 3\n{a}    [[listener.group.endpoint]]\n    address = \"10.0.0.2:80\"\n{b}",
            one_group(WEB, group, "")
        )
    };
    // Every endpoint has one: the usable ones' sum, at most the group's own.
    let g = &valid(&two("", "    capacity = 300\n", "    capacity = 100\n")).listeners[0].groups[0];
    assert_eq!(g.capacity_when(|_| true), Some(400.0));
    assert_eq!(g.capacity_when(|i| i == 1), Some(100.0));
    let g = &valid(&two(
        "  capacity = 350\n",
        "    capacity = 300\n",
        "    capacity = 100\n",
    ))
    .listeners[0]
        .groups[0];
    assert_eq!(g.capacity_when(|_| true), Some(350.0));
    assert_eq!(g.capacity_when(|i| i == 0), Some(300.0));
    // Only the group's: scaled by the usable part of the weight (3 of 4).
    let g = &valid(&two("  capacity = 1000\n", "", "")).listeners[0].groups[0];
    assert_eq!(g.capacity_when(|i| i == 0), Some(750.0));
    assert_eq!(g.capacity_when(|_| false), Some(0.0));
}

#[test]
fn bad_values_say_where_and_why() {
    assert_errors(&[
        (
            one_group(WEB, "  capacity = 0\n", ""),
            &[
                r#"config.toml:10:14: listener "web" group "beijing": capacity 0 must be a number above 0 (in the unit of sim's [demand], e.g. requests/s)"#,
            ],
        ),
        (
            one_group(WEB, "", "    capacity = -5.5\n"),
            &[
                r#"config.toml:12:16: listener "web" group "beijing" endpoint "10.0.0.1:80": capacity -5.5 must be a number above 0 (in the unit of sim's [demand], e.g. requests/s)"#,
            ],
        ),
        (
            one_group(&format!("{WEB}\nheadroom = 120"), "  capacity = 10\n", ""),
            &[
                r#"config.toml:6:12: listener "web": headroom 120 is out of range: a percent of capacity, above 0 and at most 100"#,
            ],
        ),
        (
            one_group(&format!("{WEB}\nheadroom = 0"), "  capacity = 10\n", ""),
            &[
                r#"config.toml:6:12: listener "web": headroom 0 is out of range: a percent of capacity, above 0 and at most 100"#,
            ],
        ),
        (
            one_group(
                &format!("{WEB}\nfailover = \"graceful\"\noverprovisioning = 0.9"),
                "",
                "",
            ),
            &[
                r#"config.toml:7:20: listener "web": overprovisioning 0.9 must be at least 1 (1.4: a whole group carries 1.4 × its share)"#,
            ],
        ),
        (
            one_group(&format!("{WEB}\noverprovisioning = 1.4"), "", ""),
            &[
                r#"config.toml:6:20: listener "web": overprovisioning is a parameter of failover = "graceful"; this listener's failover is "next-priority""#,
            ],
        ),
        (
            one_group(&format!("{WEB}\nfailover = \"gracefull\""), "", ""),
            &[
                r#"config.toml:6:12: listener "web": unknown failover "gracefull" (expected "next-priority", "recompute" or "graceful"); did you mean "graceful"?"#,
            ],
        ),
    ]);
}

#[test]
fn headroom_without_any_capacity_is_a_warning() {
    let c = valid(&one_group(&format!("{WEB}\nheadroom = 70"), "", ""));
    let w: Vec<String> = c.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        w,
        [
            r#"config.toml:6:1: listener "web": headroom has no effect: no group of this listener has a capacity (set capacity on its groups or on all of a group's endpoints)"#
        ]
    );
}
