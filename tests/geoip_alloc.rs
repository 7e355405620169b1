//! A client's lookup in the `[geoip]` database and its order of groups by distance allocate
//! nothing (counted by allocation-counter's global allocator): the work done once per
//! connection, flow or HTTP client connection, and per decision under `priority_by =
//! "client-location"`.

#[path = "common/geoip.rs"]
#[allow(dead_code)]
mod db;

use std::net::IpAddr;

use db::*;
use gtd::geoip::{Database, Labels};
use gtd::split::location::by_distance;

#[test]
fn lookup_slot_and_order_allocate_nothing() {
    let sanity = allocation_counter::measure(|| {
        std::hint::black_box(vec![0u8; 16]);
    });
    assert_eq!(sanity.count_total, 1, "the counting allocator is active");
    let dir = tempfile::tempdir().unwrap();
    let path = write_mmdb(dir.path(), "city.mmdb", "GeoLite2-City", &places());
    let db = Database::open(&path).unwrap();
    let labels = Labels::new(&["CN".into(), "US".into()]);
    let groups = [BEIJING, VIRGINIA, FRANKFURT];
    let ips: Vec<IpAddr> = ["127.1.0.1", "127.2.0.1", "127.3.0.1", "127.0.0.1", "::1"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    // Warm up (lazy statics, if any).
    for ip in &ips {
        let _ = db.lookup(*ip);
    }
    let mut seen = Vec::with_capacity(ips.len());
    let info = allocation_counter::measure(|| {
        for ip in &ips {
            let place = db.lookup(*ip);
            let slot = labels.slot(place.as_ref());
            let first = place
                .and_then(|p| p.location)
                .map(|at| by_distance(at, &groups).as_slice()[0]);
            seen.push((slot, first));
        }
    });
    assert_eq!(info.count_total, 0, "{info:?}");
    // And they found what the database says.
    assert_eq!(labels.values(seen[0].0), ("AS", "CN"));
    assert_eq!(seen[0].1, Some(0));
    assert_eq!(labels.values(seen[1].0), ("NA", "US"));
    assert_eq!(seen[1].1, Some(1));
    assert_eq!(labels.values(seen[2].0), ("EU", "other"));
    assert_eq!(seen[2].1, None);
    assert_eq!(labels.values(seen[3].0), ("unknown", "unknown"));
}
