//! Client locations from a GeoIP2 / GeoLite2 / DB-IP `.mmdb` database (`[geoip]`,
//! docs/design.md §3.1 and §7): the continent, country and, for a City database, the latitude
//! and longitude of a client address.
//!
//! The database is read whole into memory (at most [`MAX_DATABASE_BYTES`], through
//! [`crate::files::read`]) when the config is loaded, so a reload re-reads it and a file replaced
//! on disk never changes under a running reader. A lookup decodes only the four fields gtd
//! uses, borrowing the codes from the database's bytes: it takes no lock and allocates nothing
//! (tests/geoip.rs counts the allocations; docs/performance.md has its cost).
//!
//! Metrics labels have bounded cardinality ([`Labels`]): the continent always (the seven
//! GeoIP2 codes, or `unknown`), the country only when the config lists it, `other` otherwise,
//! and `unknown` for both when the address is not in the database.

use std::fmt;
use std::net::IpAddr;
use std::path::Path;

use serde::Deserialize;

/// Most bytes of a GeoIP database: a City database (GeoLite2-City, DB-IP City Lite) is about
/// 60–130 MB today, a Country one a few MB; 512 MiB leaves room for growth while refusing
/// `/dev/zero`-like mistakes.
pub const MAX_DATABASE_BYTES: u64 = 512 * 1024 * 1024;

/// Most countries `[geoip] countries` may list (each adds a label value per continent).
pub const MAX_COUNTRIES: usize = 64;

/// Addresses looked up when a database is opened, to find a damaged one then.
const PROBES: [&str; 8] = [
    "1.1.1.1",
    "8.8.8.8",
    "81.2.69.142",
    "114.114.114.114",
    "127.1.0.1",
    "200.160.2.3",
    "2001:4860:4860::8888",
    "2400:3200::1",
];

/// A continent code as GeoIP2 databases spell it, or `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Continent {
    /// Africa.
    Af,
    /// Antarctica.
    An,
    /// Asia.
    As,
    /// Europe.
    Eu,
    /// North America.
    Na,
    /// Oceania.
    Oc,
    /// South America.
    Sa,
    /// Not in the database, or the record names no (known) continent.
    Unknown,
}

impl Continent {
    /// Every value, in label order.
    pub const ALL: [Continent; 8] = [
        Continent::Af,
        Continent::An,
        Continent::As,
        Continent::Eu,
        Continent::Na,
        Continent::Oc,
        Continent::Sa,
        Continent::Unknown,
    ];

    /// The label value: the GeoIP2 code (`AS`, `EU`, ...) or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Continent::Af => "AF",
            Continent::An => "AN",
            Continent::As => "AS",
            Continent::Eu => "EU",
            Continent::Na => "NA",
            Continent::Oc => "OC",
            Continent::Sa => "SA",
            Continent::Unknown => "unknown",
        }
    }

    fn from_code(code: &str) -> Continent {
        match code {
            "AF" => Continent::Af,
            "AN" => Continent::An,
            "AS" => Continent::As,
            "EU" => Continent::Eu,
            "NA" => Continent::Na,
            "OC" => Continent::Oc,
            "SA" => Continent::Sa,
            _ => Continent::Unknown,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Where the database places one address.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Place {
    /// Its continent (`Unknown` when the record names none).
    pub continent: Continent,
    /// Its ISO 3166-1 country code, upper case (`country`, else `registered_country`).
    pub country: Option<[u8; 2]>,
    /// Latitude and longitude, degrees: City databases only.
    pub location: Option<(f64, f64)>,
}

impl Place {
    /// The country code as text.
    pub fn country_str(&self) -> Option<&str> {
        self.country
            .as_ref()
            .and_then(|c| std::str::from_utf8(c).ok())
    }
}

/// An ISO country code as two upper-case ASCII letters.
pub fn country_code(s: &str) -> Option<[u8; 2]> {
    let b = s.as_bytes();
    (b.len() == 2 && b.iter().all(u8::is_ascii_alphabetic))
        .then(|| [b[0].to_ascii_uppercase(), b[1].to_ascii_uppercase()])
}

/// An open database.
pub struct Database {
    reader: maxminddb::Reader<Vec<u8>>,
    bytes: usize,
}

impl fmt::Debug for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Database")
            .field("type", &self.kind())
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

/// The fields of a GeoIP2 City/Country record gtd reads; everything else is skipped.
#[derive(Deserialize)]
struct Record<'a> {
    #[serde(borrow)]
    continent: Option<ContinentRecord<'a>>,
    #[serde(borrow)]
    country: Option<CountryRecord<'a>>,
    #[serde(borrow)]
    registered_country: Option<CountryRecord<'a>>,
    location: Option<LocationRecord>,
}

#[derive(Deserialize)]
struct ContinentRecord<'a> {
    code: Option<&'a str>,
}

#[derive(Deserialize)]
struct CountryRecord<'a> {
    iso_code: Option<&'a str>,
}

#[derive(Deserialize)]
struct LocationRecord {
    latitude: Option<f64>,
    longitude: Option<f64>,
}

/// Why a GeoIP database cannot be used (see [`Database::open`]).
#[derive(Debug, thiserror::Error)]
pub enum GeoIpError {
    /// Unreadable, not a regular file, or too large.
    #[error("{0}")]
    Read(crate::files::FileError),
    /// No MaxMind DB metadata (a truncated file loses it: it is at the end).
    #[error("not a MaxMind DB (.mmdb) file: {0}")]
    NotADatabase(maxminddb::MaxMindDbError),
    /// A damaged search tree.
    #[error("corrupt MaxMind DB file: looking up {ip}: {error}")]
    CorruptTree {
        /// The address looked up.
        ip: IpAddr,
        /// What the reader said.
        error: maxminddb::MaxMindDbError,
    },
    /// A damaged data section.
    #[error("corrupt MaxMind DB file: the record of {ip}: {error}")]
    CorruptRecord {
        /// The address whose record was decoded.
        ip: IpAddr,
        /// What the reader said.
        error: maxminddb::MaxMindDbError,
    },
    /// An ASN, ISP... database: no country or continent.
    #[error(
        "database type {0:?} is neither a City nor a Country database (GeoIP2, GeoLite2 or \
         DB-IP): it has no client countries"
    )]
    NoCountries(String),
}

impl Database {
    /// Reads and opens the database at `path`. The message says what is wrong: unreadable,
    /// too large, not a MaxMind DB (a truncated file loses its metadata, which is at the end),
    /// corrupt (a few addresses across the space are looked up and decoded here, so that a
    /// damaged search tree or data section fails the load rather than lookups later), or a
    /// kind of database that has no country or continent (ASN, ISP, ...).
    pub fn open(path: &Path) -> Result<Database, GeoIpError> {
        let bytes = crate::files::read(path, MAX_DATABASE_BYTES).map_err(GeoIpError::Read)?;
        Database::from_bytes(bytes)
    }

    /// Opens a database already in memory (see [`Database::open`]).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Database, GeoIpError> {
        let len = bytes.len();
        let reader = maxminddb::Reader::from_source(bytes).map_err(GeoIpError::NotADatabase)?;
        // Some addresses across the space, through the search tree and into the data section:
        // a file damaged there fails here. (`Reader::verify` walks the whole file, which takes
        // seconds on a City database, and refuses databases every reader accepts, such as one
        // without a description.)
        for probe in PROBES {
            let ip: IpAddr = probe.parse().expect("probe address");
            if reader.metadata().ip_version == 4 && ip.is_ipv6() {
                continue;
            }
            let found = reader
                .lookup(ip)
                .map_err(|error| GeoIpError::CorruptTree { ip, error })?;
            found
                .decode::<Record<'_>>()
                .map_err(|error| GeoIpError::CorruptRecord { ip, error })?;
        }
        let kind = reader.metadata().database_type.to_ascii_lowercase();
        if !(kind.contains("city") || kind.contains("country")) {
            return Err(GeoIpError::NoCountries(
                reader.metadata().database_type.clone(),
            ));
        }
        Ok(Database { reader, bytes: len })
    }

    /// The database's type as its metadata names it (`GeoLite2-City`, `DBIP-City-Lite`, ...).
    pub fn kind(&self) -> &str {
        &self.reader.metadata().database_type
    }

    /// Where the database places `ip`; `None` when it is not in the database (or its record
    /// cannot be decoded). Lock- and allocation-free.
    pub fn lookup(&self, ip: IpAddr) -> Option<Place> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let found = self.reader.lookup(ip).ok()?;
        let record: Record<'_> = found.decode().ok()??;
        let continent = record
            .continent
            .and_then(|c| c.code)
            .map_or(Continent::Unknown, Continent::from_code);
        let country = record
            .country
            .and_then(|c| c.iso_code)
            .or_else(|| record.registered_country.and_then(|c| c.iso_code))
            .and_then(country_code);
        let location = record.location.and_then(|l| {
            let (lat, lon) = (l.latitude?, l.longitude?);
            let valid = (-90.0..=90.0).contains(&lat) && (-180.0..=180.0).contains(&lon);
            valid.then_some((lat, lon))
        });
        Some(Place {
            continent,
            country,
            location,
        })
    }
}

/// The label values of client-location series: every (continent, country) pair a client can
/// be counted under, and the slot each client falls in. Continents × (listed countries +
/// `other`), plus (`unknown`, `unknown`) for addresses not in the database.
#[derive(Debug, Clone, PartialEq)]
pub struct Labels {
    countries: Vec<[u8; 2]>,
}

/// The country label of a client in the database whose country is not listed.
pub const OTHER: &str = "other";
/// Both labels of a client not in the database.
pub const UNKNOWN: &str = "unknown";

impl Labels {
    /// The labels for `[geoip] countries` (upper-case two-letter codes).
    pub fn new(countries: &[String]) -> Labels {
        Labels {
            countries: countries.iter().filter_map(|c| country_code(c)).collect(),
        }
    }

    /// How many slots there are.
    pub fn len(&self) -> usize {
        Continent::ALL.len() * (self.countries.len() + 1) + 1
    }

    /// Always false: there is at least the `unknown` slot.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The (continent, country) label values of slot `i`, `i < len()`.
    pub fn values(&self, i: usize) -> (&'static str, &str) {
        let per = self.countries.len() + 1;
        if i == self.len() - 1 {
            return (UNKNOWN, UNKNOWN);
        }
        let continent = Continent::ALL[i / per].as_str();
        let country = self
            .countries
            .get(i % per)
            .map_or(OTHER, |c| std::str::from_utf8(c).unwrap_or(OTHER));
        (continent, country)
    }

    /// The slot of a client the database placed at `place` (`None`: not in it).
    pub fn slot(&self, place: Option<&Place>) -> usize {
        let Some(p) = place else {
            return self.len() - 1;
        };
        let per = self.countries.len() + 1;
        let country = p
            .country
            .and_then(|c| self.countries.iter().position(|&x| x == c))
            .unwrap_or(self.countries.len());
        p.continent.index() * per + country
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_cover_every_pair_once() {
        let l = Labels::new(&["CN".into(), "US".into()]);
        assert_eq!(l.len(), 8 * 3 + 1);
        let mut seen = std::collections::HashSet::new();
        for i in 0..l.len() {
            assert!(seen.insert(l.values(i)), "{:?}", l.values(i));
        }
        let cn = Place {
            continent: Continent::As,
            country: Some(*b"CN"),
            location: None,
        };
        assert_eq!(l.values(l.slot(Some(&cn))), ("AS", "CN"));
        let jp = Place {
            country: Some(*b"JP"),
            ..cn
        };
        assert_eq!(l.values(l.slot(Some(&jp))), ("AS", "other"));
        let none = Place {
            continent: Continent::Unknown,
            country: None,
            location: None,
        };
        assert_eq!(l.values(l.slot(Some(&none))), ("unknown", "other"));
        assert_eq!(l.values(l.slot(None)), ("unknown", "unknown"));
    }

    #[test]
    fn country_codes_are_two_letters() {
        assert_eq!(country_code("cn"), Some(*b"CN"));
        assert_eq!(country_code("USA"), None);
        assert_eq!(country_code("1A"), None);
    }

    #[test]
    fn garbage_is_not_a_database() {
        let e = Database::from_bytes(b"not a database at all".to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("not a MaxMind DB"), "{e}");
    }
}
