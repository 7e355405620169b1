//! `priority_by = "client-location"` (docs/design.md §3.1), pure: the order of a listener's
//! groups by great-circle distance from the client's location (latitude and longitude from the
//! `[geoip]` database) to each group's region in the catalogue, nearest first, ties in config
//! order. That order then goes through the same plan — cascade, failover, fail-open, rotation
//! or rendezvous — as the node's own ranking ([`super::ListenerPlan::build`]).
//!
//! [`Order`] lives on the stack (a listener has at most [`MAX_GROUPS`] groups), so computing
//! it per decision allocates nothing; the node keeps one plan per distinct order.

use crate::config::{Listener, MAX_GROUPS};
use crate::regions::{Catalog, great_circle_km};

use super::Ranking;

/// A priority order (config indices of the groups, first = highest), held inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Order {
    len: u8,
    idx: [u8; MAX_GROUPS],
}

impl Order {
    /// The config indices, highest priority first.
    pub fn as_slice(&self) -> &[u8] {
        &self.idx[..usize::from(self.len)]
    }

    /// As the `Vec<usize>` a [`Ranking`] holds.
    pub fn to_vec(&self) -> Vec<usize> {
        self.as_slice().iter().map(|&i| usize::from(i)).collect()
    }
}

/// Each group's (lat, lon): its region's in the catalogue (config order). A region missing
/// from the catalogue (validation rules it out) sorts last.
pub fn group_coords(listener: &Listener, catalog: &Catalog) -> Vec<(f64, f64)> {
    listener
        .groups
        .iter()
        .map(|g| {
            catalog
                .get(&g.region)
                .map_or((f64::NAN, f64::NAN), |r| (r.lat, r.lon))
        })
        .collect()
}

/// The groups at `coords` ordered by great-circle distance from `from` (lat, lon), nearest
/// first, ties (and unknown places) in config order. Allocation-free.
///
/// # Panics
/// With more than [`MAX_GROUPS`] groups (validation rules it out).
pub fn by_distance(from: (f64, f64), coords: &[(f64, f64)]) -> Order {
    assert!(coords.len() <= MAX_GROUPS, "at most {MAX_GROUPS} groups");
    let mut km = [0.0_f64; MAX_GROUPS];
    let mut order = Order {
        len: coords.len() as u8,
        idx: [0; MAX_GROUPS],
    };
    for (i, &(lat, lon)) in coords.iter().enumerate() {
        let d = great_circle_km(from.0, from.1, lat, lon);
        km[i] = if d.is_nan() { f64::INFINITY } else { d };
    }
    // Insertion sort: stable (ties keep config order), in place, n ≤ 32.
    for i in 0..coords.len() {
        order.idx[i] = i as u8;
        let mut j = i;
        while j > 0 && km[usize::from(order.idx[j - 1])] > km[i] {
            order.idx[j] = order.idx[j - 1];
            j -= 1;
        }
        order.idx[j] = i as u8;
    }
    order
}

/// The node's `ranking` with its order replaced by the client's (the RTTs and their sources
/// stay the node's: they are what `/status` shows).
pub fn ranking(node: &Ranking, order: &Order) -> Ranking {
    Ranking {
        order: order.to_vec(),
        rtt_ms: node.rtt_ms.clone(),
        source: node.source.clone(),
    }
}

/// The region of `regions` (catalogue ids) nearest to `from` (lat, lon) by great-circle
/// distance, first in the list on a tie; `None` when none is in the catalogue.
pub fn nearest_region<'a>(
    from: (f64, f64),
    regions: impl IntoIterator<Item = &'a str>,
    catalog: &Catalog,
) -> Option<&'a str> {
    let mut best: Option<(&str, f64)> = None;
    for id in regions {
        let Some(r) = catalog.get(id) else { continue };
        let d = great_circle_km(from.0, from.1, r.lat, r.lon);
        if best.is_none_or(|(_, b)| d < b) {
            best = Some((id, d));
        }
    }
    best.map(|(id, _)| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Beijing, Shanghai, Frankfurt, Virginia.
    const GROUPS: [(f64, f64); 4] = [
        (39.9042, 116.4074),
        (31.2304, 121.4737),
        (50.1109, 8.6821),
        (38.9, -77.0),
    ];

    #[test]
    fn nearest_group_first() {
        // A client in Hangzhou: Shanghai, Beijing, Frankfurt, Virginia.
        assert_eq!(
            by_distance((30.27, 120.15), &GROUPS).as_slice(),
            [1, 0, 2, 3]
        );
        // Paris: Frankfurt, Virginia (6200 km) before Beijing (8200 km).
        assert_eq!(by_distance((48.85, 2.35), &GROUPS).as_slice(), [2, 3, 0, 1]);
        // New York.
        assert_eq!(by_distance((40.7, -74.0), &GROUPS).as_slice()[0], 3);
    }

    #[test]
    fn ties_and_unknown_places_keep_config_order() {
        let same = [
            (10.0, 10.0),
            (10.0, 10.0),
            (f64::NAN, f64::NAN),
            (10.0, 10.0),
        ];
        assert_eq!(by_distance((0.0, 0.0), &same).as_slice(), [0, 1, 3, 2]);
        assert_eq!(by_distance((0.0, 0.0), &[]).as_slice(), [] as [u8; 0]);
    }
}
