//! The pick path allocates nothing: every method, steady state and transient paths, picks,
//! retries, fail-open picks, outcome recording and guard drops, counted by a counting global
//! allocator.

mod balance_common;

use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use balance_common::*;
use gtd::balance::{Admit, GroupBalancer, Pick, SplitMix64, StaticRequest};
use gtd::config::{Balance, KeyPart, Measure, Protocol};

fn methods() -> Vec<Balance> {
    let addr_and_uri = key(vec![
        KeyPart::Literal("k:".into()),
        KeyPart::RemoteAddr,
        KeyPart::RequestUri,
        KeyPart::Header("x-user".into()),
        KeyPart::Cookie("sid".into()),
    ]);
    vec![
        Balance::RoundRobin,
        Balance::Hash {
            key: addr_and_uri.clone(),
            consistent: false,
        },
        Balance::Hash {
            key: addr_and_uri,
            consistent: true,
        },
        Balance::IpHash,
        Balance::LeastConn,
        Balance::Random { two: false },
        Balance::Random { two: true },
        Balance::LeastTime {
            measure: Measure::Header,
            factor: Balance::DEFAULT_FACTOR,
        },
        Balance::Feedback {
            header: "x-capacity".into(),
            inverse: true,
            factor: Balance::DEFAULT_FACTOR,
        },
    ]
}

fn request() -> StaticRequest {
    StaticRequest::from_ip(IpAddr::V6(Ipv6Addr::new(
        0x2001, 0xdb8, 0, 0, 0, 0, 0x1234, 0x5678,
    )))
    .with_uri("/some/path?q=1")
    .with_header("x-user", "ann")
    .with_cookie("sid", "abc")
}

#[test]
fn picks_and_outcomes_allocate_nothing() {
    let seen = allocation_counter::measure(|| {
        std::hint::black_box(vec![0u8; 16]);
    });
    assert_eq!(
        seen.count_total, 1,
        "the counting allocator is active in this binary"
    );
    let t0 = Instant::now();
    for balance in methods() {
        let name = format!("{balance:?}");
        let mut eps = weighted(&[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3]);
        for e in &mut eps {
            // Failures below come often: let markings expire within the simulated 2 s.
            e.max_fails = 2;
            e.fail_timeout = Duration::from_millis(50);
        }
        eps[5].down = true;
        eps[6].slow_start = Some(Duration::from_secs(30));
        eps[15].backup = !matches!(
            balance,
            Balance::Hash { .. } | Balance::IpHash | Balance::Random { .. }
        );
        let b = GroupBalancer::new(&group(balance, eps), Protocol::Http, t0);
        let req = request();
        let mut rng = SplitMix64::new(1);
        let mut held: Vec<Pick> = Vec::with_capacity(64);
        let exclude = [1usize, 2];
        let mut picked = 0u32;

        let info = allocation_counter::measure(|| {
            for n in 0..2_000u32 {
                let now = t0 + Duration::from_millis(u64::from(n));
                let Some(p) = b.pick(&req, now) else { continue };
                picked += 1;
                p.record_timing(
                    Measure::Header,
                    Duration::from_micros(u64::from(100 + n % 7)),
                );
                p.record_feedback(f64::from(n % 5));
                if n % 97 == 0 {
                    // A failure penalty sends the rotation to its transient O(n) path.
                    p.failure(now);
                } else {
                    p.success(now);
                }
                if n % 3 == 0 && held.len() < held.capacity() {
                    held.push(p);
                }
                if let Some(r) = b.pick_excluding(&req, &exclude, now) {
                    assert!(!exclude.contains(&r.index()));
                }
                let _ = b.pick_with(&req, &[], now, &mut rng);
                // Fail-open picks take the same path with health ignored.
                let _ = b.pick_admitting(&req, &exclude, Admit::IgnoringHealth, now);
                if n % 50 == 0 {
                    held.clear();
                }
                if n == 1_000 {
                    // Admin and health changes, and a slow-start ramp, on the way.
                    b.endpoints()[6].set_active_healthy(false, now);
                    b.endpoints()[6].set_active_healthy(true, now);
                    b.endpoints()[3].set_enabled(false, now);
                }
            }
            held.clear();
            let _ = b.usable_count(t0);
        });
        assert_eq!(info.count_total, 0, "{name}: {info:?}");
        assert!(picked > 1_900, "{name}: only {picked} picks succeeded");
    }
}

/// A decision while groups take their share back over `failback_ramp` (rotation and source-ip
/// affinity) allocates nothing either: the mixture is picked from precomputed plans.
#[test]
fn decisions_during_a_failback_ramp_allocate_nothing() {
    use gtd::split::{GroupFacts, Plan};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let catalog = gtd::config::load_catalog(&root.join("regions/catalog.toml")).unwrap();
    for affinity in ["none", "source-ip"] {
        let text = format!(
            "[[listener]]\nname = \"l\"\nprotocol = \"tcp\"\nport = 7000\nregions = [\"cn-beijing\"]\n\
             failback_ramp = \"60s\"\naffinity = \"{affinity}\"\n\
             [[listener.group]]\nname = \"a\"\nregion = \"cn-beijing\"\nratio = 50\n\
             [[listener.group.endpoint]]\naddress = \"127.0.0.1:9001\"\n\
             [[listener.group]]\nname = \"b\"\nregion = \"cn-shanghai\"\nratio = 50\n\
             [[listener.group.endpoint]]\naddress = \"127.0.0.1:9002\"\n\
             [[listener.group]]\nname = \"c\"\nregion = \"cn-hangzhou\"\nratio = 50\n\
             [[listener.group.endpoint]]\naddress = \"127.0.0.1:9003\"\n"
        );
        let cfg = gtd::config::parse(&text, std::path::Path::new("c.toml"), &catalog).unwrap();
        let l = &cfg.listeners[0];
        let t0 = Instant::now();
        let facts = [GroupFacts::new(50.0, true); 3];
        let recovered = [None, Some(t0), Some(t0 + Duration::from_secs(10))];
        let plan = Plan::for_listener_ramped(l, &[0, 1, 2], &facts, l.affinity, &recovered);
        assert_eq!(plan.recovering().len(), 2);
        let at = t0 + Duration::from_secs(20);
        let info = allocation_counter::measure(|| {
            for i in 0..10_000_u32 {
                let client = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i as u16));
                std::hint::black_box(plan.choose_at(client, at));
            }
        });
        assert_eq!(info.count_total, 0, "{affinity}: {info:?}");
    }
}
