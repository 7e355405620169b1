//! Property tests of the pure between-group decisions (docs/design.md §3.2–3.4).

use std::net::{IpAddr, Ipv4Addr};

use gtd::config::FailoverMode;
use gtd::split::rendezvous::{choose, client_key, group_key};
use gtd::split::{GroupFacts, Mode, Policy, Rotation, split};
use proptest::prelude::*;

fn ratio() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(100.0),
        (1_u32..=100).prop_map(f64::from),
        (0_u32..=10_000).prop_map(|x| f64::from(x) / 100.0),
    ]
}

/// The usable part of a group's weight: whole, gone, or anything between (as weights 1..=1000
/// of up to 10 endpoints give).
fn fraction() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(1.0),
        Just(0.0),
        (1_u32..=100).prop_map(|x| f64::from(x) / 100.0),
        (1_u32..=10, 1_u32..=10).prop_map(|(a, b)| f64::from(a.min(b)) / f64::from(a.max(b))),
    ]
}

/// One group's facts as a node builds them: healthy when usable endpoints reach min_healthy,
/// which a fraction of 0 never does (a group may be unhealthy with some weight usable).
fn group() -> impl Strategy<Value = GroupFacts> {
    (ratio(), any::<bool>(), fraction()).prop_map(|(ratio, healthy, fraction)| GroupFacts {
        ratio,
        healthy: healthy && fraction > 0.0,
        fraction,
    })
}

fn facts() -> impl Strategy<Value = Vec<GroupFacts>> {
    prop::collection::vec(group(), 1..6)
}

fn overprovisioning() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(1.4),
        Just(1.0),
        (100_u32..=400).prop_map(|x| f64::from(x) / 100.0)
    ]
}

fn policy() -> impl Strategy<Value = Policy> {
    (
        prop_oneof![
            Just(FailoverMode::NextPriority),
            Just(FailoverMode::Recompute),
            Just(FailoverMode::Graceful)
        ],
        any::<bool>(),
        overprovisioning(),
    )
        .prop_map(|(failover, fail_open, overprovisioning)| Policy {
            failover,
            fail_open,
            overprovisioning,
        })
}

fn graceful() -> impl Strategy<Value = Policy> {
    (any::<bool>(), overprovisioning()).prop_map(|(fail_open, overprovisioning)| Policy {
        failover: FailoverMode::Graceful,
        fail_open,
        overprovisioning,
    })
}

proptest! {
    #[test]
    fn shares_sum_to_100_unless_no_route(groups in facts(), p in policy()) {
        let (mode, shares) = split(&groups, p);
        let sum: f64 = shares.iter().map(|s| s.total).sum();
        if mode == Mode::NoRoute {
            prop_assert_eq!(sum, 0.0);
        } else {
            prop_assert!((sum - 100.0).abs() < 1e-9, "sum {} mode {:?}", sum, mode);
        }
        for s in &shares {
            prop_assert!(s.total >= 0.0);
            if p.failover != FailoverMode::Graceful || mode == Mode::FailOpen {
                prop_assert!((s.first_pass + s.leftover - s.total).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn graceful_with_every_group_whole_is_exactly_the_cascade(
        groups in facts(), p in graceful(), other in prop_oneof![Just(FailoverMode::NextPriority), Just(FailoverMode::Recompute)]
    ) {
        // Every group healthy and whole: the cascade, to the last digit, whatever the ratios.
        let all: Vec<GroupFacts> = groups.iter().map(|g| GroupFacts { healthy: true, fraction: 1.0, ..*g }).collect();
        let (m1, a) = split(&all, p);
        let (m2, b) = split(&all, Policy { failover: other, ..p });
        prop_assert_eq!(m1, m2);
        for (x, y) in a.iter().zip(&b) {
            prop_assert_eq!(x.total, y.total);
            prop_assert_eq!((x.first_pass, x.leftover), (y.first_pass, y.leftover));
        }
    }

    #[test]
    fn graceful_is_monotone_in_health(
        groups in facts(), p in graceful(), pick in any::<prop::sample::Index>(), better in fraction()
    ) {
        // Raising one group's usable part (and so perhaps making it healthy) never lowers its
        // share and never raises another's, as long as some group takes traffic before and after.
        let i = pick.index(groups.len());
        let mut raised = groups.clone();
        raised[i].fraction = raised[i].fraction.max(better);
        raised[i].healthy = raised[i].healthy || (better > groups[i].fraction && better > 0.0);
        let (m0, before) = split(&groups, p);
        let (m1, after) = split(&raised, p);
        prop_assume!(m0 != Mode::NoRoute && m0 != Mode::FailOpen && m1 != Mode::FailOpen);
        prop_assert!(after[i].total >= before[i].total - 1e-9,
            "group {} {:?} -> {:?}: share {} -> {}", i, groups[i], raised[i], before[i].total, after[i].total);
        for j in (0..groups.len()).filter(|&j| j != i) {
            prop_assert!(after[j].total <= before[j].total + 1e-9,
                "group {} rose from {} to {} when group {} improved", j, before[j].total, after[j].total, i);
        }
    }

    #[test]
    fn graceful_never_gives_a_group_more_than_it_keeps(groups in facts(), p in graceful()) {
        // Each group's share is what it kept (its keep × what reached it), scaled only by
        // 100 / Σ kept, which is 1 unless something passed the last group.
        let (mode, shares) = split(&groups, p);
        prop_assume!(mode != Mode::NoRoute && mode != Mode::FailOpen);
        for (g, s) in groups.iter().zip(&shares) {
            let k = if g.healthy && g.ratio > 0.0 { (p.overprovisioning * g.fraction).min(1.0) } else { 0.0 };
            prop_assert!((s.keep - k).abs() < 1e-12);
            if k == 0.0 {
                prop_assert_eq!(s.total, 0.0);
            }
        }
    }

    #[test]
    fn ratio_zero_gets_zero(groups in facts(), p in policy()) {
        let (_, shares) = split(&groups, p);
        for (g, s) in groups.iter().zip(&shares) {
            if g.ratio == 0.0 {
                prop_assert_eq!(s.total, 0.0);
            }
        }
    }

    #[test]
    fn unhealthy_gets_zero_unless_fail_open(groups in facts(), p in policy()) {
        let (mode, shares) = split(&groups, p);
        if mode != Mode::FailOpen {
            for (g, s) in groups.iter().zip(&shares) {
                if !g.healthy {
                    prop_assert_eq!(s.total, 0.0);
                }
            }
        }
    }

    #[test]
    fn raising_a_ratio_never_lowers_its_own_share(
        groups in facts(), p in policy(), pick in any::<prop::sample::Index>(), raise in ratio()
    ) {
        let i = pick.index(groups.len());
        let mut raised = groups.clone();
        raised[i].ratio = raised[i].ratio.max(raise);
        let before = split(&groups, p).1[i].total;
        let after = split(&raised, p).1[i].total;
        prop_assert!(after >= before - 1e-9, "group {} ratio {} -> {}: share {} -> {}",
            i, groups[i].ratio, raised[i].ratio, before, after);
    }

    #[test]
    fn rotation_stays_within_one_of_quota_and_two_over_any_window(
        raw in prop::collection::vec(prop_oneof![Just(0.0), 0.001_f64..100.0], 1..8),
        n in 1_usize..3000,
    ) {
        let total: f64 = raw.iter().sum();
        prop_assume!(total > 0.0);
        let shares: Vec<f64> = raw.iter().map(|r| r * 100.0 / total).collect();
        let rotation = Rotation::new(&shares);
        let picks: Vec<usize> = (0..n).map(|_| rotation.next().unwrap()).collect();
        // Prefix counts per group.
        let mut prefix = vec![vec![0_i64; n + 1]; shares.len()];
        for (k, &g) in picks.iter().enumerate() {
            for (i, row) in prefix.iter_mut().enumerate() {
                row[k + 1] = row[k] + i64::from(g == i);
            }
        }
        for (i, row) in prefix.iter().enumerate() {
            let s = shares[i] / 100.0;
            for (k, &count) in row.iter().enumerate().skip(1) {
                let dev = (count as f64 - k as f64 * s).abs();
                prop_assert!(dev < 1.0 + 1e-6, "group {} after {} decisions: {} vs {}", i, k, count, k as f64 * s);
            }
            // Any window [a, b): compare against the window length × share.
            for a in (0..n).step_by(7) {
                for b in (a + 1..=n).step_by(13) {
                    let got = (row[b] - row[a]) as f64;
                    let want = (b - a) as f64 * s;
                    prop_assert!((got - want).abs() < 2.0 + 1e-6, "window {}..{} group {}: {} vs {}", a, b, i, got, want);
                }
            }
        }
    }

    #[test]
    fn rendezvous_moves_only_clients_of_the_changed_group(
        raw in prop::collection::vec(0.0_f64..100.0, 2..6),
        pick in any::<prop::sample::Index>(),
        new_share in 0.0_f64..100.0,
    ) {
        let keys: Vec<u64> = (0..raw.len()).map(|i| group_key(&format!("group-{i}"))).collect();
        let j = pick.index(raw.len());
        let mut changed = raw.clone();
        changed[j] = new_share;
        for c in 0..2000_u32 {
            let client = client_key(IpAddr::V4(Ipv4Addr::from(0xC633_6400 + c)));
            let before = choose(&raw, &keys, client);
            let after = choose(&changed, &keys, client);
            if before != after {
                prop_assert!(before == Some(j) || after == Some(j),
                    "client {} moved {:?} -> {:?} though only group {} changed", c, before, after, j);
            }
        }
    }
}
