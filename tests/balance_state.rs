//! Endpoint state through the public API: backups, `max_conns`, passive marking with
//! `max_fails`/`fail_timeout`, failure penalties, slow start, admin and health flags, and
//! reloads. Time is injected: instants are built from a base, nothing sleeps.

mod balance_common;

use std::time::{Duration, Instant};

use balance_common::*;
use gtd::balance::{Admit, GroupBalancer, Pick};
use gtd::config::{Balance, Endpoint, Protocol};
use proptest::prelude::*;

fn rr(eps: Vec<Endpoint>, t0: Instant) -> GroupBalancer {
    GroupBalancer::new(&group(Balance::RoundRobin, eps), Protocol::Http, t0)
}

fn picks(b: &GroupBalancer, n: usize, now: Instant) -> Vec<u32> {
    let mut c = vec![0u32; b.endpoints().len()];
    for _ in 0..n {
        c[b.pick(&anyone(), now).expect("pick").index()] += 1;
    }
    c
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
}

#[test]
fn backups_serve_only_when_no_primary_can_and_primaries_return_at_once() {
    let t0 = Instant::now();
    let mut eps = weighted(&[1, 1, 1]);
    eps[2].backup = true;
    let b = rr(eps, t0);
    assert!(close(&b.expected_shares(t0).unwrap(), &[0.5, 0.5, 0.0]));
    assert!(picks(&b, 10, t0)[2] == 0);

    b.endpoints()[0].set_enabled(false, t0);
    b.endpoints()[1].set_active_healthy(false, t0);
    let p = b.pick(&anyone(), t0).unwrap();
    assert_eq!((p.index(), p.is_backup()), (2, true));
    assert!(close(&b.expected_shares(t0).unwrap(), &[0.0, 0.0, 1.0]));
    assert_eq!(b.usable_count(t0), 1, "backups count towards group health");

    b.endpoints()[1].set_active_healthy(true, t0);
    let p = b.pick(&anyone(), t0).unwrap();
    assert_eq!(
        (p.index(), p.is_backup()),
        (1, false),
        "the next pick is back on a primary"
    );
}

#[test]
fn max_conns_overflows_to_backups_then_fails_without_touching_health() {
    let t0 = Instant::now();
    let mut eps = weighted(&[1, 1]);
    eps[0].max_conns = Some(2);
    eps[1].backup = true;
    eps[1].max_conns = Some(1);
    for balance in [Balance::RoundRobin, Balance::LeastConn] {
        let b = GroupBalancer::new(&group(balance.clone(), eps.clone()), Protocol::Tcp, t0);
        let held: Vec<Pick> = (0..3).map(|_| b.pick(&anyone(), t0).unwrap()).collect();
        let got: Vec<(usize, bool)> = held.iter().map(|p| (p.index(), p.is_backup())).collect();
        assert_eq!(got, vec![(0, false), (0, false), (1, true)], "{balance:?}");
        assert!(
            b.pick(&anyone(), t0).is_none(),
            "everything at max_conns: no pick"
        );
        assert_eq!(b.usable_count(t0), 2, "being full is not being unhealthy");
        drop(held);
        assert_eq!(b.pick(&anyone(), t0).unwrap().index(), 0);
    }
}

#[test]
fn max_fails_within_fail_timeout_marks_then_one_probe_decides() {
    let t0 = Instant::now();
    let mut eps = weighted(&[1, 1]);
    eps[0].max_fails = 2;
    let b = rr(eps, t0);
    let only_a = |now| b.pick_excluding(&anyone(), &[1], now);

    only_a(at(t0, 1.0)).unwrap().failure(at(t0, 1.0));
    assert_eq!(b.usable_count(at(t0, 1.0)), 2, "one failure of two allowed");
    only_a(at(t0, 2.0)).unwrap().failure(at(t0, 2.0));
    assert_eq!(b.usable_count(at(t0, 2.0)), 1, "max_fails reached: marked");
    assert!(b.endpoints()[0].is_passively_down(at(t0, 11.9)));
    assert!(only_a(at(t0, 11.9)).is_none());
    assert_eq!(
        picks(&b, 20, at(t0, 5.0)),
        vec![0, 20],
        "everything goes to the other endpoint"
    );

    // fail_timeout after the last failure: one pick probes, the others keep waiting.
    let probe = only_a(at(t0, 12.5)).expect("the probe");
    assert!(only_a(at(t0, 12.6)).is_none(), "one probe at a time");
    assert_eq!(b.usable_count(at(t0, 12.6)), 1);
    probe.failure(at(t0, 13.0));
    drop(probe);
    assert!(
        only_a(at(t0, 22.9)).is_none(),
        "failed probe: marked for another fail_timeout"
    );

    let probe = only_a(at(t0, 23.5)).expect("the next probe");
    probe.success(at(t0, 24.0));
    drop(probe);
    assert_eq!(
        b.usable_count(at(t0, 24.0)),
        2,
        "a successful probe ends the marking"
    );
    assert_eq!(b.endpoints()[0].fails(), 0);
    assert!(only_a(at(t0, 24.1)).is_some());
}

#[test]
fn max_fails_zero_disables_passive_marking() {
    let t0 = Instant::now();
    let mut eps = weighted(&[1, 1]);
    eps[0].max_fails = 0;
    let b = rr(eps, t0);
    for s in 0..50 {
        let now = at(t0, f64::from(s) / 10.0);
        b.pick_excluding(&anyone(), &[1], now).unwrap().failure(now);
    }
    assert_eq!(b.usable_count(at(t0, 5.0)), 2);
    assert!(close(&b.expected_shares(at(t0, 5.0)).unwrap(), &[0.5, 0.5]));
}

#[test]
fn failures_below_max_fails_lower_the_weight_and_picks_restore_it() {
    let t0 = Instant::now();
    let mut eps = weighted(&[10, 10]);
    eps[0].max_fails = 5;
    let b = rr(eps, t0);
    // Three attempts in flight on endpoint 0 fail. (Picks between failures would each give a
    // unit back, as in nginx.)
    let attempts: Vec<Pick> = (0..3)
        .map(|_| b.pick_excluding(&anyone(), &[1], t0).unwrap())
        .collect();
    for a in attempts {
        a.failure(t0);
    }
    // Each failure costs weight/max_fails = 2 units: 10 -> 4.
    assert_eq!(b.endpoints()[0].effective_weight(t0), 4.0);
    assert!(close(
        &b.expected_shares(t0).unwrap(),
        &[4.0 / 14.0, 10.0 / 14.0]
    ));
    assert_eq!(b.usable_count(t0), 2);
    // Every pick that considers it gives one unit back.
    picks(&b, 3, t0);
    assert_eq!(b.endpoints()[0].effective_weight(t0), 7.0);
    picks(&b, 3, t0);
    assert_eq!(b.endpoints()[0].effective_weight(t0), 10.0);
    assert_eq!(picks(&b, 200, t0), vec![100, 100], "full share again");
}

#[test]
fn slow_start_ramps_linearly_and_failures_step_back() {
    let t0 = Instant::now();
    let mut eps = weighted(&[1, 1]);
    eps[1].slow_start = Some(Duration::from_secs(100));
    eps[1].max_fails = 4;
    let b = rr(eps, t0);
    assert!(
        close(&b.expected_shares(t0).unwrap(), &[0.5, 0.5]),
        "no ramp at start-up"
    );
    b.endpoints()[1].set_active_healthy(false, t0);
    b.endpoints()[1].set_active_healthy(true, at(t0, 10.0));

    let share_at = |secs: f64| {
        let now = at(t0, secs);
        let expected = b.expected_shares(now).unwrap()[1];
        let seen = f64::from(picks(&b, 2_000, now)[1]) / 2_000.0;
        assert!(
            (seen - expected).abs() < 0.005,
            "t={secs}: expected {expected} saw {seen}"
        );
        expected
    };
    assert!(
        (share_at(10.0) - 0.01 / 1.01).abs() < 1e-9,
        "starts near zero (1%)"
    );
    assert!((share_at(35.0) - 0.25 / 1.25).abs() < 1e-9);
    assert!((share_at(60.0) - 0.5 / 1.5).abs() < 1e-9);
    // A failure at 50% steps back a quarter (1/max_fails) of the ramp.
    b.pick_excluding(&anyone(), &[0], at(t0, 60.0))
        .unwrap()
        .failure(at(t0, 60.0));
    assert!((share_at(60.0) - 0.25 / 1.25).abs() < 1e-9);
    assert!((share_at(85.0) - 0.5 / 1.5).abs() < 1e-9);
    assert!(
        (share_at(135.0) - 0.5).abs() < 1e-9,
        "full weight after the ramp"
    );
}

#[test]
fn slow_start_applies_to_least_conn_and_after_passive_recovery() {
    let t0 = Instant::now();
    let mut eps = weighted(&[1, 1]);
    eps[1].slow_start = Some(Duration::from_secs(100));
    let b = GroupBalancer::new(&group(Balance::LeastConn, eps), Protocol::Http, t0);
    // Marked by a failure (max_fails 1), probed after fail_timeout, recovered at t=20.
    b.pick_excluding(&anyone(), &[0], t0).unwrap().failure(t0);
    let probe = b.pick_excluding(&anyone(), &[0], at(t0, 11.0)).unwrap();
    probe.success(at(t0, 20.0));
    drop(probe);
    // Idle group: least_conn ties resolve by the ramped weights, 25% at t=45.
    let c = picks(&b, 2_500, at(t0, 45.0));
    assert!(
        (f64::from(c[1]) / 2_500.0 - 0.25 / 1.25).abs() < 0.005,
        "{c:?}"
    );
    let c = picks(&b, 2_000, at(t0, 130.0));
    assert_eq!(c, vec![1_000, 1_000]);
}

#[test]
fn down_drain_and_disabled_endpoints_are_not_usable() {
    let t0 = Instant::now();
    let mut eps = weighted(&[1, 1, 1, 1, 1]);
    eps[0].down = true;
    eps[1].drain = true;
    eps[2].enabled = false;
    let b = rr(eps, t0);
    assert_eq!(b.usable_count(t0), 2);
    assert_eq!(picks(&b, 10, t0), vec![0, 0, 0, 5, 5]);
    assert!(close(
        &b.expected_shares(t0).unwrap(),
        &[0.0, 0.0, 0.0, 0.5, 0.5]
    ));
    b.endpoints()[2].set_enabled(true, t0);
    assert_eq!(b.usable_count(t0), 3);
    assert!(
        !b.endpoints()[0].is_usable(t0) && b.endpoints()[0].config().down,
        "down is visible"
    );
    for e in &b.endpoints()[3..] {
        e.set_enabled(false, t0);
    }
    b.endpoints()[2].set_active_healthy(false, t0);
    assert_eq!(b.usable_count(t0), 0);
    assert!(b.pick(&anyone(), t0).is_none());
    assert!(close(&b.expected_shares(t0).unwrap(), &[0.0; 5]));
}

#[test]
fn hash_methods_fall_back_to_the_rotation() {
    let t0 = Instant::now();
    for balance in [
        uri_hash(false),
        uri_hash(true),
        Balance::IpHash,
        Balance::Random { two: true },
    ] {
        let b = GroupBalancer::new(
            &group(balance.clone(), weighted(&[1, 1, 1, 1])),
            Protocol::Http,
            t0,
        );
        for e in &b.endpoints()[..3] {
            e.set_enabled(false, t0);
        }
        for k in 0..50 {
            let p = b.pick(&uri(&format!("/{k}")).with_header("x", "y"), t0);
            assert_eq!(p.map(|p| p.index()), Some(3), "{balance:?}");
        }
    }
}

#[test]
fn rebuild_keeps_state_of_endpoints_that_stay() {
    let t0 = Instant::now();
    let old_eps = vec![ep(1, 1), ep(2, 1), ep(3, 1)];
    let old = rr(old_eps, t0);
    let held = old.pick_excluding(&anyone(), &[0, 2], t0).unwrap();
    assert_eq!(held.address().text, "127.0.0.1:2");
    old.endpoints()[2].set_enabled(false, t0);
    old.pick_excluding(&anyone(), &[1, 2], t0)
        .unwrap()
        .failure(t0);

    // :1 removed, :2 reweighted, :3 kept, :4 added.
    let new_eps = vec![ep(3, 1), ep(2, 5), ep(4, 1)];
    let new = GroupBalancer::rebuild(
        &group(Balance::LeastConn, new_eps),
        Protocol::Http,
        &old,
        at(t0, 1.0),
    );
    let by_port = |p: u16| {
        new.endpoints()
            .iter()
            .find(|e| e.address().port == p)
            .unwrap()
    };
    assert!(by_port(2).same_runtime(&old.endpoints()[1]));
    assert_eq!(by_port(2).active(), 1, "in-flight count carried over");
    assert_eq!(by_port(2).config().weight, 5, "new parameters apply");
    assert!(
        !by_port(3).is_enabled(),
        "admin disable survives the reload"
    );
    assert_eq!(by_port(4).active(), 0);
    drop(held);
    assert_eq!(
        by_port(2).active(),
        0,
        "the old guard releases on the new state"
    );
    assert_eq!(new.method_name(), "least_conn");

    // A file change of `enabled` takes effect.
    let mut again = vec![ep(3, 1), ep(2, 5), ep(4, 1)];
    again[2].enabled = false;
    let third = GroupBalancer::rebuild(
        &group(Balance::LeastConn, again),
        Protocol::Http,
        &new,
        at(t0, 2.0),
    );
    assert!(!third.endpoints()[2].is_enabled());
    assert!(
        !third.endpoints()[0].is_enabled(),
        "untouched in the file: the admin's choice stays"
    );
}

#[test]
fn new_endpoints_with_slow_start_ramp_up_after_a_reload() {
    let t0 = Instant::now();
    let old = rr(vec![ep(1, 1)], t0);
    let mut eps = vec![ep(1, 1), ep(2, 1)];
    eps[1].slow_start = Some(Duration::from_secs(10));
    let new = GroupBalancer::rebuild(
        &group(Balance::RoundRobin, eps),
        Protocol::Http,
        &old,
        at(t0, 5.0),
    );
    assert!(new.endpoints()[1].effective_weight(at(t0, 10.0)) < 0.51);
    assert_eq!(new.endpoints()[1].effective_weight(at(t0, 15.0)), 1.0);
}

fn all_methods() -> Vec<Balance> {
    use gtd::config::Measure;
    vec![
        Balance::RoundRobin,
        uri_hash(false),
        uri_hash(true),
        Balance::IpHash,
        Balance::LeastConn,
        Balance::Random { two: false },
        Balance::Random { two: true },
        Balance::LeastTime {
            measure: Measure::Header,
            factor: Balance::DEFAULT_FACTOR,
        },
        Balance::Feedback {
            header: "x-c".into(),
            inverse: false,
            factor: Balance::DEFAULT_FACTOR,
        },
    ]
}

proptest! {
    #[test]
    fn retries_never_get_an_excluded_endpoint(
        method in 0usize..9,
        weights in prop::collection::vec(1u32..5, 1..8),
        exclude in prop::collection::vec(0usize..8, 0..8),
        key in "[a-z]{1,8}",
    ) {
        let t0 = Instant::now();
        let balance = all_methods().swap_remove(method);
        let b = GroupBalancer::new(&group(balance, weighted(&weights)), Protocol::Http, t0);
        let exclude: Vec<usize> = exclude.into_iter().filter(|&i| i < weights.len()).collect();
        for _ in 0..5 {
            match b.pick_excluding(&uri(&key), &exclude, t0) {
                Some(p) => prop_assert!(!exclude.contains(&p.index())),
                None => prop_assert!((0..weights.len()).all(|i| exclude.contains(&i)), "a usable endpoint was left"),
            }
        }
    }
}

#[test]
fn sticky_clients_keep_a_draining_endpoint_but_not_a_disabled_or_full_one() {
    let t0 = Instant::now();
    let mut eps = weighted(&[1, 1, 1]);
    eps[0].drain = true;
    eps[1].max_conns = Some(1);
    let b = rr(eps, t0);
    assert!(
        picks(&b, 10, t0)[0] == 0,
        "no new traffic to a draining endpoint"
    );
    let bound = b
        .pick_sticky(0, t0)
        .expect("a draining endpoint serves its bound clients");
    assert_eq!((bound.index(), bound.endpoint().active()), (0, 1));
    let one = b.pick_sticky(1, t0).unwrap();
    assert!(
        b.pick_sticky(1, t0).is_none(),
        "max_conns applies to sticky clients too"
    );
    drop(one);
    b.endpoints()[2].set_enabled(false, t0);
    assert!(
        b.pick_sticky(2, t0).is_none(),
        "a disabled endpoint loses its sticky clients"
    );
    assert!(b.pick_sticky(7, t0).is_none());
}

/// A request that varies with `n` in every input a method may hash (address, URI).
fn nth(n: u32) -> gtd::balance::StaticRequest {
    from(&format!("10.{}.{}.1", n / 256, n % 256)).with_uri(format!("/k/{n}"))
}

/// Endpoints 0..=4: passively marked, active-unhealthy, `down`, draining, disabled.
fn out_five(balance: Balance, t0: Instant) -> GroupBalancer {
    let mut eps = weighted(&[1, 1, 1, 1, 1]);
    eps[2].down = true;
    eps[3].drain = true;
    eps[4].enabled = false;
    let b = GroupBalancer::new(&group(balance, eps), Protocol::Http, t0);
    // max_fails = 1 (the default): one failure marks endpoint 0 for fail_timeout (10 s).
    let p = b.pick_excluding(&anyone(), &[1, 2, 3, 4], t0).unwrap();
    assert_eq!(p.index(), 0);
    assert!(p.failure(t0), "marked");
    drop(p);
    b.endpoints()[1].set_active_healthy(false, t0);
    b
}

#[test]
fn ignoring_health_picks_marked_and_unhealthy_endpoints_never_down_drain_or_disabled() {
    let t0 = Instant::now();
    let now = at(t0, 1.0);
    for balance in all_methods() {
        let name = format!("{balance:?}");
        let b = out_five(balance, t0);
        assert_eq!(b.usable_count(now), 0, "{name}");
        assert!(b.pick(&nth(0), now).is_none(), "{name}: nothing usable");
        let mut seen = [0u32; 5];
        for n in 0..400 {
            let p = b
                .pick_admitting(&nth(n), &[], Admit::IgnoringHealth, now)
                .unwrap_or_else(|| panic!("{name}: fail-open finds an endpoint"));
            assert!(!p.is_backup(), "{name}");
            seen[p.index()] += 1;
        }
        assert_eq!(
            &seen[2..],
            &[0, 0, 0],
            "{name}: never down, draining or disabled"
        );
        assert!(
            seen[0] > 0 && seen[1] > 0,
            "{name}: both the marked and the unhealthy one serve: {seen:?}"
        );
        // Ignoring health is no excuse to repeat an endpoint a retry already tried.
        let p = b
            .pick_admitting(&nth(1), &[0], Admit::IgnoringHealth, now)
            .unwrap();
        assert_eq!(p.index(), 1, "{name}");
        assert!(
            b.pick_admitting(&nth(1), &[0, 1], Admit::IgnoringHealth, now)
                .is_none(),
            "{name}: nothing admissible is left"
        );
        // Picks under fail-open change no verdict: still marked, still unhealthy.
        assert_eq!(b.usable_count(now), 0, "{name}");
        assert!(b.endpoints()[0].is_passively_down(now), "{name}");
    }
}

#[test]
fn ignoring_health_keeps_primaries_first_then_backups_and_max_conns() {
    let t0 = Instant::now();
    let now = at(t0, 1.0);
    let mut eps = weighted(&[1, 1, 1]);
    eps[0].max_conns = Some(1);
    eps[2].backup = true;
    for balance in [
        Balance::RoundRobin,
        Balance::LeastConn,
        Balance::LeastTime {
            measure: gtd::config::Measure::Header,
            factor: Balance::DEFAULT_FACTOR,
        },
    ] {
        let name = format!("{balance:?}");
        let b = GroupBalancer::new(&group(balance, eps.clone()), Protocol::Http, t0);
        for e in b.endpoints() {
            e.set_active_healthy(false, t0);
        }
        assert!(b.pick(&anyone(), now).is_none(), "{name}");
        // Primaries only (least_time's choice between them is random: hold on to endpoint 0
        // once it comes up, so that it is at max_conns).
        let mut held = None;
        for _ in 0..200 {
            let p = b
                .pick_admitting(&anyone(), &[], Admit::IgnoringHealth, now)
                .unwrap();
            assert!(
                !p.is_backup() && p.index() < 2,
                "{name}: primaries before the backup"
            );
            if p.index() == 0 {
                held = Some(p);
                break;
            }
        }
        let held = held.unwrap_or_else(|| panic!("{name}: endpoint 0 never picked"));
        // Endpoint 0 is at max_conns: the next primary pick is endpoint 1 every time.
        for _ in 0..5 {
            let p = b
                .pick_admitting(&anyone(), &[], Admit::IgnoringHealth, now)
                .unwrap();
            assert_eq!(p.index(), 1, "{name}: max_conns still applies");
        }
        drop(held);
        // No primary admissible: the backup, health ignored too.
        b.endpoints()[1].set_enabled(false, now);
        b.endpoints()[0].set_enabled(false, now);
        let p = b
            .pick_admitting(&anyone(), &[], Admit::IgnoringHealth, now)
            .unwrap();
        assert_eq!((p.index(), p.is_backup()), (2, true), "{name}");
    }
}

#[test]
fn ignoring_health_needs_no_probe_and_a_fail_open_probe_can_end_a_marking() {
    let t0 = Instant::now();
    let b = rr(weighted(&[1]), t0);
    let p = b.pick(&anyone(), t0).unwrap();
    assert!(p.failure(t0));
    drop(p);
    // Within fail_timeout: every fail-open pick is served, concurrently, no probe claimed.
    let held: Vec<Pick> = (0..3)
        .map(|_| {
            b.pick_admitting(&anyone(), &[], Admit::IgnoringHealth, at(t0, 2.0))
                .expect("a marked endpoint under fail-open")
        })
        .collect();
    for p in &held {
        assert!(
            !p.success(at(t0, 2.0)),
            "a success inside the window ends nothing"
        );
    }
    drop(held);
    assert!(b.endpoints()[0].is_passively_down(at(t0, 2.0)));
    // After fail_timeout the first pick, fail-open or not, is the probe; its success ends the
    // marking, and the next pick is an ordinary one.
    let probe = b
        .pick_admitting(&anyone(), &[], Admit::IgnoringHealth, at(t0, 11.0))
        .unwrap();
    assert!(
        b.pick_admitting(&anyone(), &[], Admit::IgnoringHealth, at(t0, 11.0))
            .is_some(),
        "fail-open does not wait for the probe's outcome"
    );
    assert!(
        probe.success(at(t0, 11.5)),
        "the probe's success ends the marking"
    );
    assert!(b.endpoints()[0].is_usable(at(t0, 11.5)));
    assert!(b.pick(&anyone(), at(t0, 11.5)).is_some());
}

#[test]
fn sticky_clients_under_fail_open_keep_a_marked_endpoint_but_not_a_disabled_one() {
    let t0 = Instant::now();
    let now = at(t0, 1.0);
    let mut eps = weighted(&[1, 1, 1, 1]);
    eps[2].down = true;
    eps[3].drain = true;
    let b = rr(eps, t0);
    b.endpoints()[0].set_active_healthy(false, t0);
    b.endpoints()[3].set_active_healthy(false, t0);
    let p = b.pick_excluding(&anyone(), &[0, 2, 3], t0).unwrap();
    assert!(p.failure(t0));
    drop(p);
    for i in 0..4 {
        assert!(
            b.pick_sticky(i, now).is_none(),
            "{i}: unusable, honouring health"
        );
    }
    let ignoring = |i| b.pick_sticky_admitting(i, Admit::IgnoringHealth, now);
    assert_eq!(ignoring(0).map(|p| p.index()), Some(0), "active-unhealthy");
    assert_eq!(ignoring(1).map(|p| p.index()), Some(1), "passively marked");
    assert!(ignoring(2).is_none(), "down never serves");
    assert_eq!(
        ignoring(3).map(|p| p.index()),
        Some(3),
        "a draining endpoint still finishes what is bound to it"
    );
    b.endpoints()[1].set_enabled(false, now);
    assert!(ignoring(1).is_none(), "disabled never serves");
}
