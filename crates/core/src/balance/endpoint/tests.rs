//! Unit tests of an endpoint's run-time state: marks, ejections, ramps, reconfiguration.

use super::*;

/// `127.0.0.1:1` with nginx's defaults but these.
fn endpoint(weight: u32, max_fails: u32, slow_start: Option<Duration>) -> Endpoint {
    Endpoint {
        max_fails,
        slow_start,
        ..crate::balance::testutil::ep(1, weight)
    }
}

const S: u64 = 1_000_000_000;

#[test]
fn failures_within_the_window_mark_then_one_probe_then_recovery() {
    let base = Instant::now();
    let e = EndpointState::new(endpoint(1, 3, None), Hub::new(base));
    for s in [1, 2] {
        assert!(e.try_acquire(s * S, true));
        assert!(!e.record_failure(s * S), "not marked by failure {s}");
        e.release();
        assert!(e.available(s * S), "below max_fails after {s} failures");
    }
    assert!(e.try_acquire(3 * S, true));
    assert!(e.record_failure(3 * S), "the third failure marks");
    e.release();
    assert!(
        !e.available(3 * S) && !e.available(13 * S),
        "marked for fail_timeout"
    );
    // After fail_timeout one pick probes; others wait.
    assert!(e.available(13 * S + 1));
    assert!(e.try_acquire(13 * S + 1, true));
    assert!(!e.available(13 * S + 2));
    assert!(!e.try_acquire(13 * S + 2, true));
    assert!(
        e.record_success(14 * S),
        "the probe's success ends the marking"
    );
    assert!(!e.record_success(14 * S), "later successes report nothing");
    e.release();
    assert_eq!(e.fails(), 0);
    assert!(e.available(14 * S));
}

#[test]
fn failed_probe_marks_again() {
    let base = Instant::now();
    let e = EndpointState::new(endpoint(1, 1, None), Hub::new(base));
    assert!(e.record_failure(S));
    assert!(!e.available(5 * S));
    assert!(!e.record_failure(5 * S), "already out: not marked again");
    assert!(e.try_acquire(16 * S, true));
    assert!(e.record_failure(16 * S), "the failed probe marks again");
    e.release();
    assert!(!e.available(20 * S));
    assert!(e.available(26 * S + 1));
}

#[test]
fn failures_further_apart_than_the_window_do_not_add_up() {
    let base = Instant::now();
    let e = EndpointState::new(endpoint(1, 2, None), Hub::new(base));
    e.record_failure(S);
    assert!(!e.record_failure(30 * S), "the count starts again at 1");
    assert_eq!(e.fails(), 1);
    assert!(e.available(30 * S));
    assert!(e.record_failure(31 * S));
    assert!(!e.available(31 * S));
}

#[test]
fn max_fails_zero_never_marks() {
    let e = EndpointState::new(endpoint(4, 0, None), Hub::new(Instant::now()));
    for i in 0..100 {
        assert!(!e.record_failure(i * S / 10));
    }
    assert!(e.available(10 * S));
    assert_eq!(
        e.swrr_weight(10 * S),
        4 * RAMP_SCALE as i64,
        "no weight penalty either"
    );
    assert_eq!(e.fails(), 0, "nothing counted while marking is off");
}

#[test]
fn turning_marking_on_by_reload_starts_from_no_failures() {
    let e = EndpointState::new(endpoint(1, 0, None), Hub::new(Instant::now()));
    for i in 1..=6 {
        e.record_failure(i * S);
    }
    let e = e.reconfigured(endpoint(1, 1, None), Instant::now());
    assert!(e.available(7 * S), "the reload alone does not mark it");
    assert!(
        e.record_failure(8 * S),
        "the next failure marks it, and says so"
    );
    assert!(!e.available(8 * S));
}

#[test]
fn a_reload_that_changes_the_endpoint_clears_its_mark_and_ejection() {
    let base = Instant::now();
    let e = EndpointState::new(endpoint(1, 2, None), Hub::new(base));
    e.record_failure(S);
    assert!(e.record_failure(2 * S));
    assert!(e.eject(2 * S, &Outlier::default()).is_some());
    assert!(!e.available(3 * S));
    let e = e.reconfigured(endpoint(2, 2, None), base + Duration::from_secs(3));
    assert!(e.available(3 * S), "back at once");
    assert_eq!(e.fails(), 0);
    assert!(!e.record_failure(4 * S), "counting starts again");
}

#[test]
fn the_checks_turning_healthy_and_an_admin_enable_clear_a_mark_and_an_ejection() {
    let base = Instant::now();
    let at = |s: u64| base + Duration::from_secs(s);
    let e = EndpointState::new(endpoint(1, 1, None), Hub::new(base));
    assert!(e.record_failure(S));
    assert!(e.eject(S, &Outlier::default()).is_some());
    e.set_active_healthy(true, at(2));
    assert!(
        !e.available(2 * S) && e.is_ejected(at(2)),
        "checks passing all along: still marked and ejected"
    );
    e.set_active_healthy(false, at(2));
    e.set_active_healthy(true, at(3));
    assert!(e.available(3 * S), "the checks saw it go and come back");

    assert!(e.record_failure(4 * S));
    assert!(e.eject(4 * S, &Outlier::default()).is_some());
    e.set_enabled(true, at(5));
    assert!(e.available(5 * S), "an admin enable ends both");
}

#[test]
fn a_success_ends_a_mark_only_as_the_probe_after_fail_timeout() {
    let base = Instant::now();
    let e = EndpointState::new(endpoint(1, 1, None), Hub::new(base));
    assert!(e.record_failure(S));
    assert!(e.success_pending());
    assert!(
        !e.record_success(2 * S),
        "a connection from before the failure"
    );
    assert!(e.try_acquire(12 * S, true), "the probe");
    assert!(e.record_success(12 * S), "connected: back");
    e.release();
    assert!(!e.success_pending());
}

#[test]
fn failure_lowers_weight_by_weight_over_max_fails_and_picks_restore_it() {
    let e = EndpointState::new(endpoint(10, 3, None), Hub::new(Instant::now()));
    e.record_failure(S);
    assert_eq!(e.swrr_weight(S), 7 * RAMP_SCALE as i64);
    e.record_failure(S);
    assert_eq!(e.swrr_weight(S), 4 * RAMP_SCALE as i64);
    for expect in 5..=10 {
        e.restore_one();
        assert_eq!(e.swrr_weight(S), expect * RAMP_SCALE as i64);
    }
    e.restore_one();
    assert!(e.at_full_weight(S));
}

#[test]
fn slow_start_ramps_linearly_and_a_failure_steps_back() {
    let base = Instant::now();
    let e = EndpointState::new(
        endpoint(1, 4, Some(Duration::from_secs(100))),
        Hub::new(base),
    );
    assert_eq!(e.ramp_milli(0), RAMP_SCALE, "no ramp at start-up");
    e.set_active_healthy(false, base);
    e.set_active_healthy(true, base + Duration::from_secs(10));
    assert_eq!(e.ramp_milli(10 * S), RAMP_FLOOR);
    assert_eq!(e.ramp_milli(35 * S), 250);
    assert_eq!(e.ramp_milli(60 * S), 500);
    assert!(!e.at_full_weight(60 * S));
    // A failure at 50% steps back a quarter (1/max_fails) of the ramp.
    e.record_failure(60 * S);
    assert_eq!(e.ramp_milli(60 * S), 250);
    assert_eq!(e.ramp_milli(85 * S), 500);
    assert_eq!(e.ramp_milli(135 * S), RAMP_SCALE);
    assert!(e.at_full_weight(135 * S));
}

#[test]
fn ewma_keeps_factor_of_history() {
    let e = EndpointState::new(endpoint(1, 1, None), Hub::new(Instant::now()));
    assert_eq!(e.latency(), None);
    e.record_latency(100.0, 0.9);
    e.record_latency(200.0, 0.9);
    assert!((e.latency_ns().unwrap() - 110.0).abs() < 1e-9);
    e.record_feedback(5.0, 0.5);
    e.record_feedback(1.0, 0.5);
    assert_eq!(e.feedback(), Some(3.0));
}

#[test]
fn max_conns_limits_acquire() {
    let mut cfg = endpoint(1, 1, None);
    cfg.max_conns = Some(2);
    let e = EndpointState::new(cfg, Hub::new(Instant::now()));
    assert!(e.try_acquire(S, true) && e.try_acquire(S, true));
    assert!(!e.has_room() && !e.try_acquire(S, true));
    e.release();
    assert!(e.has_room() && e.try_acquire(S, true));
    assert_eq!(e.active(), 2);
}
