//! Small GeoIP2-shaped databases written by the tests (mmdb-writer): networks → continent,
//! country and, for a City database, latitude/longitude. Nothing is downloaded.

use std::path::{Path, PathBuf};

use mmdb_writer::Writer;
use mmdb_writer::ipnet::IpNet;
use serde::Serialize;

/// One network of a test database.
pub(crate) struct Net {
    pub(crate) net: &'static str,
    pub(crate) continent: &'static str,
    pub(crate) country: &'static str,
    /// `None`: no `location` in the record (as in a Country database).
    pub(crate) at: Option<(f64, f64)>,
}

#[derive(Serialize)]
struct Code {
    code: String,
    geoname_id: u32,
}

#[derive(Serialize)]
struct Iso {
    iso_code: String,
    geoname_id: u32,
}

#[derive(Serialize)]
struct Location {
    latitude: f64,
    longitude: f64,
    accuracy_radius: u16,
}

#[derive(Serialize)]
struct Record {
    continent: Code,
    country: Iso,
    registered_country: Iso,
    #[serde(skip_serializing_if = "Option::is_none")]
    location: Option<Location>,
}

/// Writes `dir/name` as a database of type `kind` (`GeoLite2-City`, `GeoLite2-Country`, ...).
pub(crate) fn write_mmdb(dir: &Path, name: &str, kind: &str, nets: &[Net]) -> PathBuf {
    let mut w = Writer::new(kind);
    for n in nets {
        let record = Record {
            continent: Code {
                code: n.continent.to_owned(),
                geoname_id: 1,
            },
            country: Iso {
                iso_code: n.country.to_owned(),
                geoname_id: 2,
            },
            registered_country: Iso {
                iso_code: n.country.to_owned(),
                geoname_id: 2,
            },
            location: n.at.map(|(latitude, longitude)| Location {
                latitude,
                longitude,
                accuracy_radius: 50,
            }),
        };
        w.insert(n.net.parse::<IpNet>().unwrap(), &record).unwrap();
    }
    let path = dir.join(name);
    std::fs::write(&path, w.to_bytes().unwrap()).unwrap();
    path
}

/// Beijing, Virginia (near us-east-1) and Frankfurt, in degrees.
pub(crate) const BEIJING: (f64, f64) = (39.9042, 116.4074);
pub(crate) const VIRGINIA: (f64, f64) = (38.95, -77.45);
pub(crate) const FRANKFURT: (f64, f64) = (50.11, 8.68);

/// The loopback "places" most tests use: 127.1/16 in Beijing (CN, AS), 127.2/16 in Virginia
/// (US, NA), 127.3/16 in Germany without coordinates (DE, EU); 127.0/16 (127.0.0.1) and the
/// rest of 127/8 are not in the database.
pub(crate) fn places() -> Vec<Net> {
    vec![
        Net {
            net: "127.1.0.0/16",
            continent: "AS",
            country: "CN",
            at: Some(BEIJING),
        },
        Net {
            net: "127.2.0.0/16",
            continent: "NA",
            country: "US",
            at: Some(VIRGINIA),
        },
        Net {
            net: "127.3.0.0/16",
            continent: "EU",
            country: "DE",
            at: None,
        },
    ]
}
