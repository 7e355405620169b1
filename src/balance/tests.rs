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
fn bound_picks_serve_draining_endpoints_but_not_failed_or_full_ones() {
    let t0 = Instant::now();
    let mut eps = weighted(&[1, 1, 1]);
    eps[0].drain = true;
    eps[1].max_conns = Some(1);
    eps[2].down = true;
    let b = GroupBalancer::new(&group(Balance::RoundRobin, eps), Protocol::Http, t0);
    // Draining: no new picks, but a bound request is served and counted.
    let p = b
        .pick_bound(0, t0)
        .expect("draining endpoint serves bound requests");
    assert_eq!((p.index(), b.endpoints()[0].active()), (0, 1));
    drop(p);
    assert_eq!(b.endpoints()[0].active(), 0);
    // At max_conns: refused while full.
    let held = b.pick_bound(1, t0).unwrap();
    assert!(b.pick_bound(1, t0).is_none());
    drop(held);
    assert!(b.pick_bound(1, t0).is_some());
    // Down, disabled, passively failed or out of range: refused.
    assert!(b.pick_bound(2, t0).is_none());
    assert!(b.pick_bound(3, t0).is_none());
    b.endpoints()[1].set_enabled(false, t0);
    assert!(b.pick_bound(1, t0).is_none());
    b.endpoints()[1].set_enabled(true, t0);
    b.pick_bound(1, t0).unwrap().failure(t0);
    assert!(b.pick_bound(1, t0 + Duration::from_secs(1)).is_none());
}
