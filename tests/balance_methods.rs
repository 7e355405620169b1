//! The balancing methods through the public API: sequences, key mappings, load-dependent
//! choices, and expected shares against observed picks. Deterministic: seeded random sources,
//! injected instants, no sleeping.

mod balance_common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use balance_common::*;
use gtd::balance::{GroupBalancer, Pick, Rng, SplitMix64, StaticRequest};
use gtd::config::{Balance, KeyPart, Measure, Protocol};
use proptest::prelude::*;

fn letter(p: &Pick) -> char {
    (b'a' + p.index() as u8) as char
}

fn sequence(b: &GroupBalancer, n: usize, now: Instant) -> String {
    (0..n)
        .map(|_| letter(&b.pick(&anyone(), now).expect("pick")))
        .collect()
}

#[test]
fn round_robin_five_one_one_is_smooth() {
    let t0 = Instant::now();
    let b = GroupBalancer::new(
        &group(Balance::RoundRobin, weighted(&[5, 1, 1])),
        Protocol::Http,
        t0,
    );
    assert_eq!(sequence(&b, 14, t0), "aabacaaaabacaa");
}

#[test]
fn round_robin_leaves_down_endpoints_out_of_the_sequence() {
    let t0 = Instant::now();
    let mut eps = weighted(&[5, 1, 1, 1]);
    eps[1].down = true;
    let b = GroupBalancer::new(&group(Balance::RoundRobin, eps), Protocol::Http, t0);
    // nginx's rotation over a=5, c=1, d=1.
    assert_eq!(sequence(&b, 7, t0), "aacadaa");
}

#[test]
fn least_conn_compares_active_per_weight() {
    let t0 = Instant::now();
    let b = GroupBalancer::new(
        &group(Balance::LeastConn, weighted(&[2, 1])),
        Protocol::Http,
        t0,
    );
    let req = anyone();
    // Load endpoint a (weight 2) with 15 and b (weight 1) with 10 active.
    let mut held: Vec<Pick> = (0..15)
        .map(|_| b.pick_excluding(&req, &[1], t0).unwrap())
        .collect();
    held.extend((0..10).map(|_| b.pick_excluding(&req, &[0], t0).unwrap()));
    assert_eq!(
        (b.endpoints()[0].active(), b.endpoints()[1].active()),
        (15, 10)
    );
    // 15/2 < 10/1.
    let p = b.pick(&req, t0).unwrap();
    assert_eq!(p.index(), 0);
    held.push(p);
    // 21/2 > 10/1 once a has 21.
    held.extend((0..5).map(|_| b.pick_excluding(&req, &[1], t0).unwrap()));
    assert_eq!(b.endpoints()[0].active(), 21);
    assert_eq!(b.pick(&req, t0).unwrap().index(), 1);
    drop(held);
    assert_eq!(b.endpoints()[0].active() + b.endpoints()[1].active(), 0);
}

#[test]
fn least_conn_ties_follow_the_weighted_rotation() {
    let t0 = Instant::now();
    let b = GroupBalancer::new(
        &group(Balance::LeastConn, weighted(&[5, 1, 1])),
        Protocol::Http,
        t0,
    );
    // Guards dropped at once: everyone is always tied at zero, so it is the rotation.
    assert_eq!(sequence(&b, 7, t0), "aabacaa");
    assert_eq!(b.expected_shares(t0), None, "load-dependent");
}

fn ring_servers(n: usize) -> Vec<gtd::config::Endpoint> {
    (0..n)
        .map(|i| named(&format!("10.0.0.{}:80", i + 1), 1))
        .collect()
}

fn owner(b: &GroupBalancer, req: &StaticRequest, t: Instant) -> String {
    b.pick(req, t).unwrap().address().text.clone()
}

#[test]
fn ketama_removing_a_server_remaps_only_its_keys() {
    let t0 = Instant::now();
    let all = GroupBalancer::new(&group(uri_hash(true), ring_servers(10)), Protocol::Http, t0);
    let mut fewer = ring_servers(10);
    let removed = fewer.remove(3).address.text;
    let less = GroupBalancer::new(&group(uri_hash(true), fewer), Protocol::Http, t0);
    let mut moved = 0;
    for k in 0..10_000 {
        let req = uri(&format!("/obj/{k}"));
        let (before, after) = (owner(&all, &req, t0), owner(&less, &req, t0));
        if before == removed {
            moved += 1;
        } else {
            assert_eq!(before, after, "key {k} moved although its server stayed");
        }
    }
    assert!(
        (600..1_400).contains(&moved),
        "the removed server held {moved} of 10000 keys"
    );
}

#[test]
fn ketama_adding_a_server_takes_about_one_in_n_plus_one() {
    let t0 = Instant::now();
    let ten = GroupBalancer::new(&group(uri_hash(true), ring_servers(10)), Protocol::Http, t0);
    let eleven = GroupBalancer::new(&group(uri_hash(true), ring_servers(11)), Protocol::Http, t0);
    let mut moved = 0;
    for k in 0..20_000 {
        let req = uri(&format!("/obj/{k}"));
        let (before, after) = (owner(&ten, &req, t0), owner(&eleven, &req, t0));
        if before != after {
            assert_eq!(after, "10.0.0.11:80", "a key moved between old servers");
            moved += 1;
        }
    }
    let fraction = f64::from(moved) / 20_000.0;
    assert!(
        (0.07..0.115).contains(&fraction),
        "new server took {fraction}, expected about 1/11"
    );
}

#[test]
fn ketama_down_keeps_the_ring_and_neighbours_take_over() {
    let t0 = Instant::now();
    let mut eps = ring_servers(6);
    let up = GroupBalancer::new(&group(uri_hash(true), eps.clone()), Protocol::Http, t0);
    eps[2].down = true;
    let down = GroupBalancer::new(&group(uri_hash(true), eps), Protocol::Http, t0);
    for k in 0..3_000 {
        let req = uri(&format!("/k{k}"));
        let (a, b) = (owner(&up, &req, t0), owner(&down, &req, t0));
        assert_ne!(b, "10.0.0.3:80");
        if a != "10.0.0.3:80" {
            assert_eq!(a, b, "only the down server's keys move");
        }
    }
}

#[test]
fn ketama_endpoints_sharing_a_name_share_its_points_and_rotate() {
    let t0 = Instant::now();
    // Two endpoints carrying the same name (as the node may expand a DNS name) plus two others.
    let eps = vec![
        named("a.example:80", 1),
        named("a.example:80", 1),
        named("b.example:80", 1),
        named("c.example:80", 1),
    ];
    let b = GroupBalancer::new(&group(uri_hash(true), eps), Protocol::Http, t0);
    let shares = b.expected_shares(t0).unwrap();
    assert!(
        (shares[0] - shares[1]).abs() < 1e-12,
        "the name's space is split evenly"
    );
    // The name occupies one server's worth of points, not two.
    assert!(shares[0] + shares[1] < 0.5, "{shares:?}");
    let req = (0..)
        .map(|k| uri(&format!("/x{k}")))
        .find(|r| owner(&b, r, t0) == "a.example:80")
        .unwrap();
    let picks: Vec<usize> = (0..4).map(|_| b.pick(&req, t0).unwrap().index()).collect();
    assert!(
        picks[0] < 2 && picks[0] + picks[1] == 1,
        "one key alternates among the name's addresses: {picks:?}"
    );
    assert_eq!((picks[0], picks[1]), (picks[2], picks[3]), "{picks:?}");
}

#[test]
fn plain_hash_is_stable_and_rehashes_around_down_servers() {
    let t0 = Instant::now();
    let mut eps = weighted(&[1, 2, 3, 1]);
    let b1 = GroupBalancer::new(&group(uri_hash(false), eps.clone()), Protocol::Http, t0);
    let b2 = GroupBalancer::new(&group(uri_hash(false), eps.clone()), Protocol::Http, t0);
    eps[2].down = true;
    let b3 = GroupBalancer::new(&group(uri_hash(false), eps), Protocol::Http, t0);
    for k in 0..2_000 {
        let req = uri(&format!("/p{k}"));
        let first = b1.pick(&req, t0).unwrap().index();
        assert_eq!(
            first,
            b1.pick(&req, t0).unwrap().index(),
            "same key, same server"
        );
        assert_eq!(
            first,
            b2.pick(&req, t0).unwrap().index(),
            "no per-process seed"
        );
        let with_down = b3.pick(&req, t0).unwrap().index();
        assert_ne!(with_down, 2);
        if first != 2 {
            assert_eq!(first, with_down, "keys of other servers stay");
        }
    }
}

#[test]
fn hash_with_an_empty_key_uses_the_rotation() {
    let t0 = Instant::now();
    let balance = Balance::Hash {
        key: key(vec![KeyPart::Header("x-k".into())]),
        consistent: true,
    };
    let b = GroupBalancer::new(&group(balance, weighted(&[5, 1, 1])), Protocol::Http, t0);
    assert_eq!(sequence(&b, 7, t0), "aabacaa");
}

#[test]
fn ip_hash_keeps_a_slash_24_together_and_uses_all_of_ipv6() {
    let t0 = Instant::now();
    let b = GroupBalancer::new(
        &group(Balance::IpHash, weighted(&[1, 1, 1, 1, 1])),
        Protocol::Http,
        t0,
    );
    let first = b.pick(&from("10.1.2.0"), t0).unwrap().index();
    for host in 1..=255 {
        assert_eq!(
            b.pick(&from(&format!("10.1.2.{host}")), t0)
                .unwrap()
                .index(),
            first
        );
    }
    let mapped = b.pick(&from("::ffff:10.1.2.77"), t0).unwrap().index();
    assert_eq!(mapped, first, "an IPv4-mapped client is its IPv4 address");
    let nets: std::collections::HashSet<usize> = (0..200)
        .map(|n| {
            b.pick(&from(&format!("10.{}.{}.9", n / 16, n % 16)), t0)
                .unwrap()
                .index()
        })
        .collect();
    assert_eq!(nets.len(), 5, "different /24s spread over every server");
    let v6: std::collections::HashSet<usize> = (0..64)
        .map(|i| {
            b.pick(&from(&format!("2001:db8::{i:x}")), t0)
                .unwrap()
                .index()
        })
        .collect();
    assert!(
        v6.len() > 1,
        "IPv6 clients differing only in the last bits are spread"
    );
}

/// Load balance quality under skewed request lengths: time-averaged largest active count.
fn skewed_load_peak(two: bool) -> f64 {
    let t0 = Instant::now();
    let b = GroupBalancer::new(
        &group(Balance::Random { two }, weighted(&[1; 8])),
        Protocol::Http,
        t0,
    );
    let mut rng = SplitMix64::new(2024);
    let mut work = SplitMix64::new(7);
    let mut in_flight: Vec<(u32, Pick)> = Vec::new();
    let mut peak_sum = 0u64;
    let ticks = 4_000;
    for tick in 0..ticks {
        in_flight.retain(|(end, _)| *end > tick);
        for _ in 0..4 {
            // 95% of requests last one tick, 5% last 200: a heavy tail.
            let length = if work.below(100) < 95 { 1 } else { 200 };
            let p = b.pick_with(&anyone(), &[], t0, &mut rng).unwrap();
            in_flight.push((tick + length, p));
        }
        peak_sum += u64::from(b.endpoints().iter().map(|e| e.active()).max().unwrap());
    }
    peak_sum as f64 / f64::from(ticks)
}

#[test]
fn random_two_spreads_skewed_load_better_than_random() {
    let (one, two) = (skewed_load_peak(false), skewed_load_peak(true));
    assert!(
        two < 0.8 * one,
        "random two peak {two:.2} vs random {one:.2}"
    );
}

#[test]
fn random_follows_weights() {
    let t0 = Instant::now();
    let b = GroupBalancer::new(
        &group(Balance::Random { two: false }, weighted(&[1, 3])),
        Protocol::Http,
        t0,
    );
    let mut rng = SplitMix64::new(1);
    let hits = (0..40_000)
        .filter(|_| b.pick_with(&anyone(), &[], t0, &mut rng).unwrap().index() == 1)
        .count();
    let share = hits as f64 / 40_000.0;
    assert!((share - 0.75).abs() < 0.01, "{share}");
}

/// Drives `least_time`: every pick reports `latency(endpoint, pick number)`; returns the picks
/// per endpoint over `[from, to)`.
fn least_time_run(
    b: &GroupBalancer,
    rng: &mut SplitMix64,
    picks: std::ops::Range<u32>,
    latency: impl Fn(usize) -> Duration,
) -> Vec<u32> {
    let t0 = Instant::now();
    let mut counts = vec![0u32; b.endpoints().len()];
    for _ in picks {
        let p = b.pick_with(&anyone(), &[], t0, rng).unwrap();
        p.record_timing(Measure::Header, latency(p.index()));
        counts[p.index()] += 1;
    }
    counts
}

fn least_time_group(n: usize) -> GroupBalancer {
    let balance = Balance::LeastTime {
        measure: Measure::Header,
        factor: Balance::DEFAULT_FACTOR,
    };
    GroupBalancer::new(
        &group(balance, weighted(&vec![1; n])),
        Protocol::Http,
        Instant::now(),
    )
}

#[test]
fn least_time_shares_inversely_to_response_time() {
    let b = least_time_group(2);
    let mut rng = SplitMix64::new(11);
    let ms = |m: u64| Duration::from_millis(m);
    least_time_run(&b, &mut rng, 0..2_000, |i| {
        if i == 0 { ms(10) } else { ms(100) }
    });
    let c = least_time_run(&b, &mut rng, 0..40_000, |i| {
        if i == 0 { ms(10) } else { ms(100) }
    });
    let ratio = f64::from(c[0]) / f64::from(c[1]);
    assert!(
        (8.5..11.7).contains(&ratio),
        "10x slower got 1/{ratio:.2} of the fast one's picks"
    );
    assert_eq!(b.expected_shares(Instant::now()), None);
    assert_eq!(b.measure(), Some(Measure::Header));
}

#[test]
fn least_time_keeps_a_floor_for_slow_and_hung_servers_and_they_recover() {
    let b = least_time_group(3);
    let mut rng = SplitMix64::new(5);
    let ms = |m: u64| Duration::from_millis(m);
    // Endpoint 0 answers in 1 ms, 1 is 1000x slower, 2 hangs until a 60 s timeout.
    let slow = |i: usize| [ms(1), ms(1_000), ms(60_000)][i];
    least_time_run(&b, &mut rng, 0..5_000, slow);
    let c = least_time_run(&b, &mut rng, 0..200_000, slow);
    // Each keeps about 1/(100*3) of the picks (renormalised: 1/300 / (1 + 2/300)).
    let floor = 1.0 / 300.0 / (1.0 + 2.0 / 300.0);
    for &slow_one in &c[1..] {
        let share = f64::from(slow_one) / 200_000.0;
        assert!(
            (share - floor).abs() < 0.2 * floor,
            "share {share:.5}, floor {floor:.5}"
        );
    }
    // Both speed up to 1 ms: the floor's probes pull their averages down and they regain share.
    least_time_run(&b, &mut rng, 0..30_000, |_| ms(1));
    let c = least_time_run(&b, &mut rng, 0..30_000, |_| ms(1));
    for &n in &c {
        let share = f64::from(n) / 30_000.0;
        assert!((share - 1.0 / 3.0).abs() < 0.05, "after recovery {c:?}");
    }
}

#[test]
fn least_time_unmeasured_server_counts_as_the_fastest() {
    let b = least_time_group(2);
    let mut rng = SplitMix64::new(3);
    let t0 = Instant::now();
    // Only endpoint 0 has been measured (20 ms); 1 is new and counts as 20 ms too.
    b.pick_excluding(&anyone(), &[1], t0)
        .unwrap()
        .record_timing(Measure::Header, Duration::from_millis(20));
    let hits = (0..20_000)
        .filter(|_| b.pick_with(&anyone(), &[], t0, &mut rng).unwrap().index() == 1)
        .count();
    assert!((hits as f64 / 20_000.0 - 0.5).abs() < 0.02, "{hits}");
    // Timings of another measure do not count.
    let p = b.pick(&anyone(), t0).unwrap();
    p.record_timing(Measure::LastByte, Duration::from_secs(5));
    assert!(
        p.endpoint()
            .latency()
            .is_none_or(|l| l < Duration::from_secs(1))
    );
}

#[test]
fn feedback_shares_by_reported_value_and_weight() {
    for inverse in [false, true] {
        let t0 = Instant::now();
        let balance = Balance::Feedback {
            header: "x-capacity".into(),
            inverse,
            factor: 0.5,
        };
        let b = GroupBalancer::new(&group(balance, weighted(&[1, 1, 2])), Protocol::Http, t0);
        // Capacity 3 : 1 : 1 (weight 2 doubles the last), or loads 1 : 3 : 3 with inverse.
        let values = if inverse {
            [1.0, 3.0, 3.0]
        } else {
            [3.0, 1.0, 1.0]
        };
        for (i, v) in values.iter().enumerate() {
            let others: Vec<usize> = (0..3).filter(|&j| j != i).collect();
            b.pick_excluding(&anyone(), &others, t0)
                .unwrap()
                .record_feedback(*v);
        }
        let mut rng = SplitMix64::new(9);
        let mut c = [0u32; 3];
        for _ in 0..60_000 {
            c[b.pick_with(&anyone(), &[], t0, &mut rng).unwrap().index()] += 1;
        }
        let share = |n: u32| f64::from(n) / 60_000.0;
        // 3 : 1 : 2 -> 1/2, 1/6, 1/3.
        assert!((share(c[0]) - 0.5).abs() < 0.015, "inverse={inverse} {c:?}");
        assert!(
            (share(c[1]) - 1.0 / 6.0).abs() < 0.015,
            "inverse={inverse} {c:?}"
        );
        assert!(
            (share(c[2]) - 1.0 / 3.0).abs() < 0.015,
            "inverse={inverse} {c:?}"
        );
        assert_eq!(b.expected_shares(t0), None);
        assert_eq!(b.feedback_header(), Some("x-capacity"));
    }
}

/// Observed shares over `n` picks with fresh requests from `make`.
fn observed(b: &GroupBalancer, n: u32, mut make: impl FnMut(u32) -> StaticRequest) -> Vec<f64> {
    let t0 = Instant::now();
    let mut rng = SplitMix64::new(77);
    let mut c = vec![0u32; b.endpoints().len()];
    for k in 0..n {
        c[b.pick_with(&make(k), &[], t0, &mut rng).unwrap().index()] += 1;
    }
    c.into_iter().map(|x| f64::from(x) / f64::from(n)).collect()
}

/// Compares `expected_shares` with picks over these endpoints for the weight-knowable methods.
/// `hash_tolerance` is for plain `hash`: its rehash rounds around an unusable server are
/// CRC-correlated with the first round (nginx's arithmetic), so the keys of a down server do
/// not spread exactly by weight.
fn check_expected_against_observed(eps: Vec<gtd::config::Endpoint>, hash_tolerance: f64) {
    let t0 = Instant::now();
    let mut addrs = SplitMix64::new(4);
    let mut random_ip = move |_| {
        let v = addrs.next_u64();
        from(&format!(
            "{}.{}.{}.{}",
            1 + v % 223,
            (v >> 8) % 256,
            (v >> 16) % 256,
            (v >> 24) % 256
        ))
    };
    type MakeReq<'a> = Box<dyn FnMut(u32) -> StaticRequest + 'a>;
    let cases: Vec<(Balance, MakeReq<'_>, f64)> = vec![
        (Balance::RoundRobin, Box::new(|_| anyone()), 1e-9),
        (Balance::Random { two: false }, Box::new(|_| anyone()), 0.01),
        (Balance::IpHash, Box::new(&mut random_ip), 0.015),
        (
            uri_hash(false),
            Box::new(|k| uri(&format!("/h/{k}"))),
            hash_tolerance,
        ),
        (uri_hash(true), Box::new(|k| uri(&format!("/c/{k}"))), 0.015),
    ];
    for (balance, make, tolerance) in cases {
        let name = balance.name();
        let b = GroupBalancer::new(&group(balance, eps.clone()), Protocol::Http, t0);
        let expected = b.expected_shares(t0).unwrap();
        assert!((expected.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        let seen = observed(&b, 50_000, make);
        for (i, (e, o)) in expected.iter().zip(&seen).enumerate() {
            if eps[i].down {
                assert_eq!((*e, *o), (0.0, 0.0), "{name}: down gets nothing");
            }
            assert!(
                (e - o).abs() <= tolerance + 1e-12,
                "{name} endpoint {i}: expected {e:.4} observed {o:.4}"
            );
        }
    }
}

#[test]
fn expected_shares_match_observed_picks() {
    check_expected_against_observed(weighted(&[1, 2, 3, 4]), 0.015);
}

#[test]
fn expected_shares_match_observed_picks_with_a_down_server() {
    let mut eps = weighted(&[1, 2, 3, 4, 2]);
    eps[4].down = true;
    check_expected_against_observed(eps, 0.03);
}

#[test]
fn concurrent_round_robin_keeps_exact_proportions() {
    let t0 = Instant::now();
    let b = GroupBalancer::new(
        &group(Balance::RoundRobin, weighted(&[5, 1, 1])),
        Protocol::Http,
        t0,
    );
    let counts: Vec<[u32; 3]> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut c = [0u32; 3];
                    for _ in 0..7_000 {
                        c[b.pick(&anyone(), t0).unwrap().index()] += 1;
                    }
                    c
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total = counts
        .iter()
        .fold([0u32; 3], |a, c| [a[0] + c[0], a[1] + c[1], a[2] + c[2]]);
    // Every counter value is one pick: 28000 picks are exactly 4000 periods.
    assert_eq!(total, [20_000, 4_000, 4_000]);
}

#[test]
fn concurrent_least_conn_respects_max_conns() {
    let t0 = Instant::now();
    let mut eps = weighted(&[1, 2, 1, 3]);
    for e in &mut eps {
        e.max_conns = Some(3);
    }
    let b = GroupBalancer::new(&group(Balance::LeastConn, eps), Protocol::Http, t0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut held = Vec::new();
                for n in 0..5_000 {
                    if let Some(p) = b.pick(&anyone(), t0) {
                        assert!(p.endpoint().active() <= 3);
                        held.push(p);
                    }
                    if n % 3 == 0 {
                        held.clear();
                    }
                }
            });
        }
    });
    assert!(b.endpoints().iter().all(|e| e.active() == 0));
}

fn hashed_keys() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec("[a-z0-9/]{0,12}", 1..40)
}

proptest! {
    #[test]
    fn rotation_gives_each_endpoint_its_weight_per_period(
        weights in prop::collection::vec(1u32..8, 1..7),
        down in prop::collection::vec(any::<bool>(), 7),
    ) {
        let t0 = Instant::now();
        let mut eps = weighted(&weights);
        for (e, d) in eps.iter_mut().zip(&down) {
            e.down = *d;
        }
        let up: Vec<usize> = (0..eps.len()).filter(|&i| !eps[i].down).collect();
        prop_assume!(!up.is_empty());
        let b = GroupBalancer::new(&group(Balance::RoundRobin, eps), Protocol::Tcp, t0);
        let period: u32 = up.iter().map(|&i| weights[i]).sum();
        let mut c: HashMap<usize, u32> = HashMap::new();
        for _ in 0..2 * period {
            *c.entry(b.pick(&anyone(), t0).unwrap().index()).or_default() += 1;
        }
        for &i in &up {
            prop_assert_eq!(c.get(&i).copied().unwrap_or(0), 2 * weights[i]);
        }
        prop_assert_eq!(c.len(), up.len());
    }

    #[test]
    fn hashes_never_pick_down_and_do_not_depend_on_the_instance(
        keys in hashed_keys(),
        weights in prop::collection::vec(1u32..5, 2..6),
        down_at in 0usize..6,
        consistent in any::<bool>(),
    ) {
        let t0 = Instant::now();
        let mut eps = weighted(&weights);
        let n = eps.len();
        eps[down_at % n].down = true;
        let g = group(uri_hash(consistent), eps);
        let (b1, b2) = (GroupBalancer::new(&g, Protocol::Http, t0), GroupBalancer::new(&g, Protocol::Http, t0));
        for k in &keys {
            let req = uri(k);
            let i = b1.pick(&req, t0).unwrap().index();
            prop_assert_ne!(i, down_at % n);
            if !k.is_empty() {
                prop_assert_eq!(i, b2.pick(&req, t0).unwrap().index());
            }
        }
    }

    #[test]
    fn ketama_removal_moves_only_the_removed_servers_keys(
        keys in hashed_keys(),
        n in 3usize..9,
        gone in 0usize..9,
    ) {
        let t0 = Instant::now();
        let gone = gone % n;
        let mut eps = ring_servers(n);
        let all = GroupBalancer::new(&group(uri_hash(true), eps.clone()), Protocol::Http, t0);
        let removed = eps.remove(gone).address.text;
        let less = GroupBalancer::new(&group(uri_hash(true), eps), Protocol::Http, t0);
        for k in keys.iter().filter(|k| !k.is_empty()) {
            let req = uri(k);
            let before = owner(&all, &req, t0);
            if before != removed {
                prop_assert_eq!(before, owner(&less, &req, t0));
            }
        }
    }
}
