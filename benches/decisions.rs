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
        .map(|i| GroupFacts::new(50.0 + i as f64, i != 1))
        .collect()
}

fn bench_split(c: &mut Criterion) {
    let mut group = c.benchmark_group("split");
    for n in [2, 5, 16] {
        let f = facts(n);
        let mut out = vec![Share::default(); n];
        let policy = Policy {
            failover: FailoverMode::Recompute,
            ..Policy::default()
        };
        group.bench_function(format!("cascade/{n}-groups"), |b| {
            b.iter(|| split_into(black_box(&f), policy, black_box(&mut out)))
        });
        // failover = "graceful" with every other group at 60 % of its weight: the cascade,
        // then one more walk (done when a plan is built, never per decision).
        let graded: Vec<GroupFacts> = f
            .iter()
            .enumerate()
            .map(|(i, g)| GroupFacts {
                fraction: if g.healthy && i % 2 == 0 {
                    0.6
                } else {
                    g.fraction
                },
                ..*g
            })
            .collect();
        let graceful = Policy {
            failover: FailoverMode::Graceful,
            ..Policy::default()
        };
        group.bench_function(format!("graceful/{n}-groups"), |b| {
            b.iter(|| split_into(black_box(&graded), graceful, black_box(&mut out)))
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

/// A client's place in a City database (the per-connection lookup of `[geoip]`) and its order
/// of groups by distance (per decision under `priority_by = "client-location"`). The database
/// is small (written here with mmdb-writer), so the tree walk is shallower than a real one's
/// ~20–32 levels: see docs/performance.md.
fn bench_geoip(c: &mut Criterion) {
    use mmdb_writer::ipnet::IpNet;
    #[derive(serde::Serialize)]
    struct Code {
        code: &'static str,
    }
    #[derive(serde::Serialize)]
    struct Iso {
        iso_code: &'static str,
    }
    #[derive(serde::Serialize)]
    struct Loc {
        latitude: f64,
        longitude: f64,
    }
    #[derive(serde::Serialize)]
    struct Rec {
        continent: Code,
        country: Iso,
        location: Loc,
    }
    let mut w = mmdb_writer::Writer::new("GeoLite2-City");
    // 4096 networks (/20s of 10.0.0.0/8), a handful of distinct records.
    for i in 0..4096_u32 {
        let net = IpNet::new(IpAddr::V4(Ipv4Addr::from((10 << 24) | (i << 12))), 20).unwrap();
        let (continent, country, lat, lon) = match i % 3 {
            0 => ("AS", "CN", 39.9, 116.4),
            1 => ("NA", "US", 38.9, -77.4),
            _ => ("EU", "DE", 50.1, 8.7),
        };
        let rec = Rec {
            continent: Code { code: continent },
            country: Iso { iso_code: country },
            location: Loc {
                latitude: lat,
                longitude: lon,
            },
        };
        w.insert(net, &rec).unwrap();
    }
    let db = gtd::geoip::Database::from_bytes(w.to_bytes().unwrap()).unwrap();
    let labels = gtd::geoip::Labels::new(&["CN".into(), "US".into()]);
    let ip = IpAddr::V4(Ipv4Addr::new(10, 77, 1, 2));
    let mut group = c.benchmark_group("geoip");
    group.bench_function("lookup+slot", |b| {
        b.iter(|| {
            let p = db.lookup(black_box(ip));
            labels.slot(p.as_ref())
        })
    });
    for n in [2, 5, 16] {
        let coords: Vec<(f64, f64)> = (0..n)
            .map(|i| (i as f64 * 7.0 - 40.0, i as f64 * 20.0 - 160.0))
            .collect();
        group.bench_function(format!("order-by-distance/{n}-groups"), |b| {
            b.iter(|| gtd::split::location::by_distance(black_box((38.9, -77.4)), &coords))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_split, bench_choose, bench_geoip);
criterion_main!(benches);
