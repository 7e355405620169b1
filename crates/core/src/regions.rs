//! The region catalogue (`regions/catalog.toml`) and the great-circle RTT estimate.
//!
//! Estimated RTT between regions a and b (docs/design.md §2):
//! `1.0 + route_factor * 2 * great_circle_km(a, b) / 200.0` ms — light in fibre covers about
//! 200 km per ms, and real routes are longer than the great circle by `route_factor` (1.5 unless
//! the catalogue says otherwise). Measured pairs in `[rtt]` override the estimate.

use std::collections::HashMap;

/// Mean Earth radius used by the haversine distance, km.
pub const EARTH_RADIUS_KM: f64 = 6371.0;
/// Default ratio of route length to great-circle distance.
pub const DEFAULT_ROUTE_FACTOR: f64 = 1.5;

/// One `[[region]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Region {
    /// Identifier used in configs (`cn-beijing`).
    pub id: String,
    /// Human name (`China (Beijing)`).
    pub name: String,
    /// Latitude, degrees.
    pub lat: f64,
    /// Longitude, degrees.
    pub lon: f64,
}

/// The whole catalogue.
#[derive(Debug, Clone, PartialEq)]
pub struct Catalog {
    /// Regions in file order.
    pub regions: Vec<Region>,
    /// Route length over great-circle distance.
    pub route_factor: f64,
    /// Measured RTTs in ms, keyed by the pair in sorted order.
    pub rtt: HashMap<(String, String), f64>,
}

impl Catalog {
    /// The region with this id.
    pub fn get(&self, id: &str) -> Option<&Region> {
        self.regions.iter().find(|r| r.id == id)
    }

    /// Round-trip time between two regions in ms: the `[rtt]` override when present, else the
    /// estimate. `None` when either id is unknown.
    pub fn rtt_ms(&self, a: &str, b: &str) -> Option<f64> {
        if let Some(ms) = self.rtt_override(a, b) {
            return Some(ms);
        }
        let (ra, rb) = (self.get(a)?, self.get(b)?);
        Some(estimate_rtt_ms(ra, rb, self.route_factor))
    }

    /// The `[rtt]` entry for the pair (either order), ms; `None` when the catalogue does not
    /// list the pair and [`Catalog::rtt_ms`] falls back to the estimate.
    pub fn rtt_override(&self, a: &str, b: &str) -> Option<f64> {
        self.rtt.get(&pair_key(a, b)).copied()
    }
}

/// The `[rtt]` key of a pair: the two ids in sorted order (the table is symmetric).
pub fn pair_key(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_owned(), b.to_owned())
    } else {
        (b.to_owned(), a.to_owned())
    }
}

/// Haversine distance between two points on a sphere of radius [`EARTH_RADIUS_KM`].
pub fn great_circle_km(lat1: f64, lon1: f64, lat2: f64, lon2: f64) -> f64 {
    let (p1, p2) = (lat1.to_radians(), lat2.to_radians());
    let dp = (lat2 - lat1).to_radians();
    let dl = (lon2 - lon1).to_radians();
    let h = (dp / 2.0).sin().powi(2) + p1.cos() * p2.cos() * (dl / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_KM * h.sqrt().min(1.0).asin()
}

/// The docs/design.md §2 estimate between two regions.
pub fn estimate_rtt_ms(a: &Region, b: &Region, route_factor: f64) -> f64 {
    1.0 + route_factor * 2.0 * great_circle_km(a.lat, a.lon, b.lat, b.lon) / 200.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(id: &str, lat: f64, lon: f64) -> Region {
        Region {
            id: id.into(),
            name: id.into(),
            lat,
            lon,
        }
    }

    #[test]
    fn same_place_is_one_millisecond() {
        let a = region("a", 39.9, 116.4);
        assert_eq!(estimate_rtt_ms(&a, &a, 1.5), 1.0);
    }

    #[test]
    fn beijing_shanghai_estimate() {
        // ~1067 km great circle → 1 + 1.5 * 2 * 1067 / 200 ≈ 17 ms.
        let bj = region("cn-beijing", 39.9042, 116.4074);
        let sh = region("cn-shanghai", 31.2304, 121.4737);
        let km = great_circle_km(bj.lat, bj.lon, sh.lat, sh.lon);
        assert!((km - 1067.0).abs() < 10.0, "{km}");
        let ms = estimate_rtt_ms(&bj, &sh, 1.5);
        assert!((ms - (1.0 + 3.0 * km / 200.0)).abs() < 1e-9);
    }

    #[test]
    fn overrides_are_symmetric() {
        let mut rtt = HashMap::new();
        rtt.insert(pair_key("b", "a"), 42.0);
        let cat = Catalog {
            regions: vec![region("a", 0.0, 0.0), region("b", 0.0, 1.0)],
            route_factor: 1.5,
            rtt,
        };
        assert_eq!(cat.rtt_ms("a", "b"), Some(42.0));
        assert_eq!(cat.rtt_ms("b", "a"), Some(42.0));
        assert_eq!(cat.rtt_ms("a", "zz"), None);
        assert_eq!(cat.rtt_override("b", "a"), Some(42.0));
        // Not listed: the estimate, and no override.
        assert_eq!(cat.rtt_override("a", "a"), None);
        assert_eq!(cat.rtt_ms("a", "a"), Some(1.0));
    }
}
