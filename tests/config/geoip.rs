//! `[geoip]` and `priority_by`: a missing, corrupt or wrong-kind database is an error at the
//! `database` key (in `gtd check` too), countries are checked, and `priority_by =
//! "client-location"` needs `[geoip]` and no static priority.

use std::path::Path;
use std::process::Command;

use crate::common::*;

const LISTENER: &str = r#"
[[listener]]
name = "t"
protocol = "tcp"
port = 7000
regions = ["cn-beijing"]
EXTRA
[[listener.group]]
name = "bj"
region = "cn-beijing"
GROUP
[[listener.group.endpoint]]
address = "127.0.0.1:9999"
"#;

fn config(dir: &Path, geoip: &str, extra: &str, group: &str) -> std::path::PathBuf {
    let text = format!(
        "catalog = {:?}\n{geoip}{}",
        root().join("regions/catalog.toml").display().to_string(),
        LISTENER.replace("EXTRA", extra).replace("GROUP", group)
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn check(config: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gtd"))
        .arg("check")
        .arg("--config")
        .arg(config)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout),
    )
}

#[test]
fn a_good_database_loads_and_places_clients() {
    let dir = tempfile::tempdir().unwrap();
    write_mmdb(dir.path(), "city.mmdb", "GeoLite2-City", &places());
    let cfg = config(
        dir.path(),
        "[geoip]\ndatabase = \"city.mmdb\"\ncountries = [\"CN\", \"US\"]\n",
        "priority_by = \"client-location\"",
        "",
    );
    let (code, out) = check(&cfg);
    assert_eq!(code, Some(0), "{out}");
    let c = gtd::config::load(&cfg, None).unwrap();
    let g = c.geoip.as_ref().unwrap();
    assert_eq!(g.countries, ["CN", "US"]);
    assert_eq!(g.database, dir.path().join("city.mmdb"));
    let p = g.db.lookup("127.2.0.1".parse().unwrap()).unwrap();
    assert_eq!((p.continent.as_str(), p.country_str()), ("NA", Some("US")));
    assert_eq!(p.location, Some(VIRGINIA));
    // IPv4-mapped IPv6 is the IPv4 address.
    assert_eq!(g.db.lookup("::ffff:127.2.0.1".parse().unwrap()), Some(p));
    assert_eq!(g.db.lookup("127.0.0.1".parse().unwrap()), None);
    assert_eq!(
        c.listeners[0].priority_by,
        gtd::config::PriorityBy::ClientLocation
    );
}

#[test]
fn missing_corrupt_and_wrong_databases_are_errors_at_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let good = write_mmdb(dir.path(), "city.mmdb", "GeoLite2-City", &places());
    let bytes = std::fs::read(&good).unwrap();
    std::fs::write(dir.path().join("half.mmdb"), &bytes[..bytes.len() / 2]).unwrap();
    // The data section's first bytes scribbled over: the metadata still reads.
    let mut scribbled = bytes.clone();
    let tree_end = scribbled.len() / 3;
    for b in &mut scribbled[..tree_end] {
        *b = 0xff;
    }
    std::fs::write(dir.path().join("scribbled.mmdb"), &scribbled).unwrap();
    write_mmdb(dir.path(), "asn.mmdb", "GeoLite2-ASN", &places());
    let cases = [
        ("missing.mmdb", "No such file or directory"),
        ("half.mmdb", "not a MaxMind DB (.mmdb) file"),
        ("scribbled.mmdb", "corrupt MaxMind DB file"),
        ("asn.mmdb", "is neither a City nor a Country database"),
        (".", "not a regular file (a directory)"),
    ];
    for (file, why) in cases {
        let cfg = config(
            dir.path(),
            &format!("[geoip]\ndatabase = {file:?}\n"),
            "",
            "",
        );
        let (code, out) = check(&cfg);
        assert_eq!(code, Some(1), "{file}: {out}");
        let at = format!("{}:3:12: geoip: database file {file:?}: ", cfg.display());
        assert!(out.contains(&at), "{file}: {out}");
        assert!(out.contains(why), "{file}: {out}");
    }
}

#[test]
fn countries_and_priority_by_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    write_mmdb(dir.path(), "city.mmdb", "GeoLite2-City", &places());
    let errors = |geoip: &str, extra: &str, group: &str| {
        let cfg = config(dir.path(), geoip, extra, group);
        match gtd::config::load(&cfg, None) {
            Ok(_) => Vec::new(),
            Err(e) => {
                e.0.iter()
                    .map(|e| format!("{}:{}: {}", e.line, e.column, e.message))
                    .collect()
            }
        }
    };
    let db = "[geoip]\ndatabase = \"city.mmdb\"\n";
    assert_eq!(
        errors(
            &format!("{db}countries = [\"cn\", \"USA\", \"US\", \"US\"]\n"),
            "",
            ""
        ),
        [
            "4:14: country \"cn\" must be upper case, as databases write it: \"CN\"",
            "4:20: invalid country \"USA\": expected an ISO 3166-1 code of two letters, like \"CN\"",
            "4:33: country \"US\" is listed twice",
        ]
    );
    assert_eq!(
        errors("", "priority_by = \"client-location\"", ""),
        [
            "8:15: priority_by = \"client-location\" needs a client-location database: add [geoip] database = \"GeoLite2-City.mmdb\""
        ]
    );
    assert_eq!(
        errors(db, "priority_by = \"client-location\"", "priority = 1"),
        [
            "10:15: priority_by = \"client-location\" ranks the groups by the client's distance to them, but the groups set a static priority: remove one or the other"
        ]
    );
    assert_eq!(
        errors(db, "priority_by = \"node\"", "priority = 1"),
        Vec::<String>::new()
    );
    assert_eq!(errors("[geoip]\ncountries = []\n", "", "").len(), 1);
}
