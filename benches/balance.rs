//! Pick latency of every balancing method for groups of 4, 64 and 1024 endpoints: one
//! `GroupBalancer::pick` plus dropping its guard (what a listener pays per connection or
//! request), single-threaded. `docs/balance-bench.md` records a run.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use gtd::balance::{GroupBalancer, StaticRequest};
use gtd::config::{
    Address, Balance, Endpoint, Group, Host, KeyPart, KeyTemplate, Measure, Protocol,
};

const SIZES: [usize; 3] = [4, 64, 1024];

fn endpoints(n: usize) -> Vec<Endpoint> {
    (0..n)
        .map(|i| {
            let ip = Ipv4Addr::new(10, (i / 250) as u8, (i % 250) as u8, 1);
            Endpoint {
                address: Address {
                    text: format!("{ip}:8080"),
                    host: Host::Ip(IpAddr::V4(ip)),
                    port: 8080,
                },
                // Mixed weights 1..=5, so tables and rings are not trivial.
                weight: 1 + (i as u32 * 7) % 5,
                max_conns: None,
                backup: false,
                down: false,
                drain: false,
                enabled: Endpoint::DEFAULT_ENABLED,
                slow_start: None,
                max_fails: Endpoint::DEFAULT_MAX_FAILS,
                fail_timeout: Endpoint::DEFAULT_FAIL_TIMEOUT,
                capacity: None,
            }
        })
        .collect()
}

fn group(balance: Balance, endpoints: Vec<Endpoint>) -> Group {
    Group {
        name: "bench".into(),
        region: "cn-beijing".into(),
        ratio: Group::DEFAULT_RATIO,
        priority: None,
        balance,
        min_healthy: Group::DEFAULT_MIN_HEALTHY,
        capacity: None,
        health_check: None,
        path_prefix: None,
        keepalive: Group::DEFAULT_KEEPALIVE,
        reuse: Default::default(),
        tls: None,
        outlier: None,
        endpoints,
    }
}

fn uri_key() -> KeyTemplate {
    KeyTemplate {
        text: "$request_uri".into(),
        parts: vec![KeyPart::RequestUri],
    }
}

fn methods() -> Vec<(&'static str, Balance)> {
    vec![
        ("round_robin", Balance::RoundRobin),
        (
            "hash",
            Balance::Hash {
                key: uri_key(),
                consistent: false,
            },
        ),
        (
            "hash_consistent",
            Balance::Hash {
                key: uri_key(),
                consistent: true,
            },
        ),
        ("ip_hash", Balance::IpHash),
        ("least_conn", Balance::LeastConn),
        ("random", Balance::Random { two: false }),
        ("random_two", Balance::Random { two: true }),
        (
            "least_time",
            Balance::LeastTime {
                measure: Measure::Header,
                factor: Balance::DEFAULT_FACTOR,
            },
        ),
        (
            "feedback",
            Balance::Feedback {
                header: "x-capacity".into(),
                inverse: false,
                factor: Balance::DEFAULT_FACTOR,
            },
        ),
    ]
}

/// Varied requests: different client /24s and URIs, cycled through.
fn requests() -> Vec<StaticRequest> {
    (0..1024u32)
        .map(|i| {
            let ip = IpAddr::V4(Ipv4Addr::new(100, (i >> 8) as u8, i as u8, 7));
            StaticRequest::from_ip(ip).with_uri(format!("/static/{i}/image-{}.png", i * 31))
        })
        .collect()
}

fn bench_picks(c: &mut Criterion) {
    let t0 = Instant::now();
    let reqs = requests();
    for (name, balance) in methods() {
        let mut g = c.benchmark_group(format!("pick/{name}"));
        for n in SIZES {
            let b = GroupBalancer::new(&group(balance.clone(), endpoints(n)), Protocol::Http, t0);
            b.set_seed(42);
            // Give the measuring methods something to measure.
            for (i, e) in (0..n).zip(0..) {
                let others: Vec<usize> = (0..n).filter(|&j| j != i).collect();
                if let Some(p) = b.pick_excluding(&reqs[0], &others, t0) {
                    p.record_timing(Measure::Header, Duration::from_micros(200 + e % 300));
                    p.record_feedback((1 + e % 9) as f64);
                }
            }
            let mut k = 0usize;
            g.bench_with_input(BenchmarkId::from_parameter(n), &n, |bench, _| {
                bench.iter(|| {
                    k = (k + 1) & 1023;
                    let p = b.pick(black_box(&reqs[k]), t0);
                    black_box(p.map(|p| p.index()))
                })
            });
        }
        g.finish();
    }

    // The rotation while a slow-start ramp runs (the clock stands still mid-ramp): nginx's
    // arithmetic on the atomic current weights, O(n), instead of the table.
    let mut g = c.benchmark_group("pick/round_robin_ramping");
    for n in SIZES {
        let mut eps = endpoints(n);
        eps[0].slow_start = Some(Duration::from_secs(3600));
        let b = GroupBalancer::new(&group(Balance::RoundRobin, eps), Protocol::Http, t0);
        b.endpoints()[0].set_active_healthy(false, t0);
        b.endpoints()[0].set_active_healthy(true, t0);
        let mid_ramp = t0 + Duration::from_secs(600);
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |bench, _| {
            bench.iter(|| black_box(b.pick(&reqs[0], mid_ramp).map(|p| p.index())))
        });
    }
    g.finish();
}

criterion_group!(benches, bench_picks);
criterion_main!(benches);
