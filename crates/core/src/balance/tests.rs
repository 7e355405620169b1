//! Unit tests of the group balancer's internals: the switch between the rotation's table and
//! nginx's arithmetic on atomics, checked against a plain model of nginx.

use std::time::{Duration, Instant};

use super::testutil::{group, weighted};
use super::*;
use crate::config::Balance;

/// nginx's `ngx_http_upstream_get_peer`, sequential and verbatim in spirit: (weight, effective
/// weight, current weight) per peer.
struct NginxModel {
    peers: Vec<(i64, i64, i64)>,
}

impl NginxModel {
    fn pick(&mut self) -> usize {
        let mut best: Option<usize> = None;
        let mut total = 0;
        for i in 0..self.peers.len() {
            let (w, ew, cw) = &mut self.peers[i];
            *cw += *ew;
            total += *ew;
            if *ew < *w {
                *ew += 1;
            }
            let current = *cw;
            if best.is_none_or(|b| current > self.peers[b].2) {
                best = Some(i);
            }
        }
        let b = best.unwrap();
        self.peers[b].2 -= total;
        b
    }
}

fn pick_index(b: &GroupBalancer, now: Instant) -> usize {
    b.pick(&StaticRequest::from_ip([192, 0, 2, 1].into()), now)
        .unwrap()
        .index()
}

#[test]
fn steady_state_uses_the_table_and_a_penalty_switches_to_nginx_arithmetic() {
    let t0 = Instant::now();
    let mut eps = weighted(&[10, 3, 2]);
    eps[0].max_fails = 2;
    let b = GroupBalancer::new(&group(Balance::RoundRobin, eps), Protocol::Http, t0);
    assert!(b.full.known_full(), "a fresh group is at full weight");
    assert_eq!(b.rotation_table_len(), 15);

    // A failure on endpoint 0 costs weight/max_fails = 5 units.
    let p = b
        .pick_excluding(&StaticRequest::from_ip([192, 0, 2, 1].into()), &[1, 2], t0)
        .unwrap();
    p.failure(t0);
    drop(p);
    assert!(!b.full.known_full());
    assert_eq!(b.endpoints()[0].effective_weight(t0), 5.0);

    // While the penalty is restored pick by pick the picks are exactly nginx's (whose current
    // weights start where ours are: the table path never touches them).
    let mut model = NginxModel {
        peers: vec![(10, 5, 0), (3, 3, 0), (2, 2, 0)],
    };
    for n in 0..5 {
        assert_eq!(
            pick_index(&b, t0),
            model.pick(),
            "pick {n} while recovering"
        );
    }
    assert_eq!(b.endpoints()[0].effective_weight(t0), 10.0);
    // The next pick notices that every weight is full and goes back to the table.
    pick_index(&b, t0);
    assert!(
        b.full.known_full(),
        "back to the table once every weight is full"
    );
}

#[test]
fn slow_start_keeps_the_exact_path_until_the_ramp_ends() {
    let t0 = Instant::now();
    let mut eps = weighted(&[1, 1]);
    eps[1].slow_start = Some(Duration::from_secs(100));
    let b = GroupBalancer::new(&group(Balance::RoundRobin, eps), Protocol::Http, t0);
    b.endpoints()[1].set_active_healthy(false, t0);
    b.endpoints()[1].set_active_healthy(true, t0 + Duration::from_secs(1));
    let mid = t0 + Duration::from_secs(51);
    pick_index(&b, mid);
    assert!(!b.full.known_full(), "ramp in progress");
    let after = t0 + Duration::from_secs(101);
    pick_index(&b, after);
    assert!(b.full.known_full(), "the ramp ended");
}

#[test]
fn least_conn_returns_to_the_table_after_a_penalty() {
    let t0 = Instant::now();
    let mut eps = weighted(&[4, 4]);
    eps[0].max_fails = 2;
    let b = GroupBalancer::new(&group(Balance::LeastConn, eps), Protocol::Http, t0);
    let req = StaticRequest::from_ip([192, 0, 2, 1].into());
    b.pick_excluding(&req, &[1], t0).unwrap().failure(t0);
    assert!(!b.full.known_full());
    for _ in 0..3 {
        pick_index(&b, t0);
    }
    pick_index(&b, t0);
    assert!(b.full.known_full(), "least_conn ties use the table again");
}

#[test]
fn weight_ranges_locate_segments() {
    let eps = weighted(&[2, 3, 1]);
    let r = WeightRanges::new(&eps, &[0, 1, 2]);
    assert_eq!(r.total(), 6);
    let got: Vec<usize> = (0..6).map(|x| r.locate(x)).collect();
    assert_eq!(got, vec![0, 0, 1, 1, 1, 2]);
}

#[test]
fn pick_guard_is_static_send_sync() {
    fn assert_traits<T: Send + Sync + 'static>() {}
    assert_traits::<Pick>();
    assert_traits::<GroupBalancer>();
    assert_traits::<Arc<EndpointState>>();
}

#[test]
fn concurrent_exact_path_keeps_current_weights_summing_to_zero() {
    let t0 = Instant::now();
    let mut eps = weighted(&[7, 3, 5, 1, 2, 9]);
    for e in &mut eps {
        e.slow_start = Some(Duration::from_secs(1000));
    }
    let b = GroupBalancer::new(&group(Balance::RoundRobin, eps), Protocol::Http, t0);
    for e in b.endpoints() {
        e.set_active_healthy(false, t0);
        e.set_active_healthy(true, t0);
    }
    // Mid-ramp for the whole test: every pick takes nginx's arithmetic on the atomics.
    let mid = t0 + Duration::from_secs(300);
    std::thread::scope(|s| {
        for k in 0..4 {
            let b = &b;
            s.spawn(move || {
                let req = StaticRequest::from_ip([192, 0, 2, 1].into());
                for n in 0..20_000usize {
                    let exclude = [(n + k) % 6];
                    let p = b.pick_excluding(&req, &exclude, mid).expect("a pick");
                    assert_ne!(p.index(), exclude[0]);
                }
            });
        }
    });
    assert!(!b.full.known_full());
    let sum: i64 = b.cw.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    assert_eq!(
        sum, 0,
        "every pick adds the total once and subtracts it once"
    );
    let total: i64 = b
        .endpoints()
        .iter()
        .map(|e| e.swrr_weight(b.full.hub.nanos(mid)))
        .sum();
    for c in b.cw.iter() {
        // A runaway would grow with the 80000 picks; bounded means a small multiple of the total.
        assert!(
            c.load(Ordering::Relaxed).abs() <= 100 * total,
            "current weights stay bounded"
        );
    }
    assert!(b.endpoints().iter().all(|e| e.active() == 0));
}

#[test]
fn exactly_one_of_many_racing_picks_gets_the_probe() {
    let t0 = Instant::now();
    let b = GroupBalancer::new(
        &group(Balance::RoundRobin, weighted(&[1, 1])),
        Protocol::Http,
        t0,
    );
    let req = StaticRequest::from_ip([192, 0, 2, 1].into());
    b.pick_excluding(&req, &[1], t0).unwrap().failure(t0);
    let after = t0 + Duration::from_secs(11);
    let winners: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (b, req) = (&b, &req);
                s.spawn(move || {
                    // Hold what we get so a finished probe cannot hand the turn to another.
                    let got: Vec<Pick> = (0..100)
                        .filter_map(|_| b.pick_excluding(req, &[1], after))
                        .collect();
                    got.len()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(winners, 1);
}

/// Outlier detection through the balancer (docs/design.md §5): a streak ejects, picks skip the
/// ejected endpoint until its time is over, and never more than `max_ejection_percent` of the
/// group is out at once.
#[test]
fn outlier_ejection_skips_the_endpoint_for_its_time_within_the_group_cap() {
    use crate::config::Outlier;
    use crate::health::outlier::Answer;
    let t0 = Instant::now();
    let mut g = group(Balance::RoundRobin, weighted(&[1, 1, 1, 1]));
    g.outlier = Some(Outlier::default());
    let b = GroupBalancer::new(&g, Protocol::Http, t0);
    let request = StaticRequest::from_ip([192, 0, 2, 1].into());
    // Endpoint 0 answers 503 five times in a row: ejected for the base time.
    let p0 = b.pick_sticky(0, t0).unwrap();
    for _ in 0..4 {
        assert_eq!(b.observe_answer(&p0, Answer::GatewayFailure, t0), None);
    }
    assert_eq!(
        b.observe_answer(&p0, Answer::GatewayFailure, t0),
        Some(Duration::from_secs(30))
    );
    drop(p0);
    let during = t0 + Duration::from_secs(10);
    for _ in 0..30 {
        assert_ne!(b.pick(&request, during).unwrap().index(), 0);
    }
    assert_eq!(b.usable_count(during), 3);
    // A second one may go (2 of 4 is 50 %), a third may not.
    for i in [1, 2] {
        let p = b.pick_sticky(i, t0).unwrap();
        let mut last = None;
        for _ in 0..5 {
            last = b.observe_answer(&p, Answer::ServerError, t0);
        }
        assert_eq!(last.is_some(), i == 1, "endpoint {i}");
    }
    assert_eq!(b.usable_count(during), 2);
    // Time over: back in rotation.
    let after = t0 + Duration::from_secs(31);
    assert_eq!(b.usable_count(after), 4);
    assert!((0..8).any(|_| b.pick(&request, after).unwrap().index() == 0));
}

/// Outlier rules are for HTTP: a TCP group's answers are never counted.
#[test]
fn outlier_detection_is_off_outside_http() {
    use crate::config::Outlier;
    use crate::health::outlier::Answer;
    let t0 = Instant::now();
    let mut g = group(Balance::RoundRobin, weighted(&[1, 1]));
    g.outlier = Some(Outlier::default());
    let b = GroupBalancer::new(&g, Protocol::Tcp, t0);
    let p = b.pick_sticky(0, t0).unwrap();
    for _ in 0..20 {
        assert_eq!(b.observe_answer(&p, Answer::GatewayFailure, t0), None);
    }
}

#[test]
fn a_drain_or_undrain_by_reload_keeps_a_mark_and_an_ejection_where_another_change_ends_them() {
    let t0 = Instant::now();
    let eps = weighted(&[1, 1]);
    let old = GroupBalancer::new(&group(Balance::RoundRobin, eps.clone()), Protocol::Http, t0);
    let req = StaticRequest::from_ip([192, 0, 2, 1].into());
    let p = old.pick_excluding(&req, &[1], t0).unwrap();
    assert_eq!(p.index(), 0);
    p.failure(t0);
    drop(p);
    assert!(
        old.endpoints()[0].is_passively_down(t0),
        "one failure marks it"
    );
    let t = old.endpoints()[0].nanos(t0);
    assert!(old.endpoints()[0].eject(t, &Default::default()).is_some());

    let rebuilt = |from: &GroupBalancer, change: &dyn Fn(&mut Endpoint)| {
        let mut eps = eps.clone();
        change(&mut eps[0]);
        GroupBalancer::rebuild(&group(Balance::RoundRobin, eps), Protocol::Http, from, t0)
    };
    let drained = rebuilt(&old, &|e| e.drain = true);
    let e = &drained.endpoints()[0];
    assert!(e.same_runtime(&old.endpoints()[0]) && e.config().drain);
    assert!(e.is_passively_down(t0), "a drain leaves the mark");
    assert!(e.is_ejected(t0), "and the ejection");
    assert!(!e.is_serving(t0), "so its bound clients stay away");
    let undrained = rebuilt(&drained, &|_| {});
    assert!(
        undrained.endpoints()[0].is_passively_down(t0),
        "so does an undrain"
    );
    let planned = rebuilt(&undrained, &|e| e.capacity = Some(10.0));
    assert!(
        planned.endpoints()[0].is_passively_down(t0),
        "and a capacity"
    );

    let reweighted = rebuilt(&planned, &|e| e.weight = 2);
    let e = &reweighted.endpoints()[0];
    assert!(
        !e.is_passively_down(t0) && !e.is_ejected(t0),
        "another change ends both"
    );
    assert!(e.is_serving(t0));
}
