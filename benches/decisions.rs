//! Criterion benchmarks of the between-group decisions: computing a split (done whenever a fact
//! changes) and one group choice (done per connection, flow or request).
//!
//! `cargo bench --bench decisions`

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use criterion::{Criterion, criterion_group, criterion_main};
use gtd::config::{Affinity, FailoverMode};
use gtd::split::{GroupFacts, Plan, Policy, Share, split_into};

fn facts(n: usize) -> Vec<GroupFacts> {
    (0..n)
        .map(|i| GroupFacts {
            ratio: 50.0 + i as f64,
            healthy: i != 1,
        })
        .collect()
}

fn bench_split(c: &mut Criterion) {
    let mut group = c.benchmark_group("split");
    for n in [2, 5, 16] {
        let f = facts(n);
        let mut out = vec![Share::default(); n];
        let policy = Policy {
            failover: FailoverMode::Recompute,
            fail_open: false,
        };
        group.bench_function(format!("cascade/{n}-groups"), |b| {
            b.iter(|| split_into(black_box(&f), policy, black_box(&mut out)))
        });
    }
    group.finish();
}

fn bench_choose(c: &mut Criterion) {
    let mut group = c.benchmark_group("choose");
    for n in [2, 5, 16] {
        let f = facts(n);
        let order: Vec<usize> = (0..n).collect();
        let names: Vec<String> = (0..n).map(|i| format!("group-{i}")).collect();
        let policy = Policy::default();
        for (label, affinity) in [
            ("rotation", Affinity::None),
            ("rendezvous", Affinity::SourceIp),
        ] {
            let plan = Plan::new(
                &order,
                &f,
                policy,
                affinity,
                names.iter().map(String::as_str),
            );
            let mut ip = 0x0a00_0000_u32;
            group.bench_function(format!("{label}/{n}-groups"), |b| {
                b.iter(|| {
                    ip = ip.wrapping_add(1);
                    plan.choose(black_box(IpAddr::V4(Ipv4Addr::from(ip))))
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_split, bench_choose);
criterion_main!(benches);
