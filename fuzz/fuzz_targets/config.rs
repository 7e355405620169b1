//! The config reader and validator, and the region catalogue reader, on arbitrary bytes.
//!
//! The input is read as `gtd check` reads a file (bytes → UTF-8 text, or the position of the
//! first byte that is not), then validated twice: as a config (against the shipped catalogue)
//! and as a catalogue. Neither may panic. Every error must point inside the text; a config that
//! validates must also summarise, answer `--region`, and plan (ranking, balancers, splits and
//! the sticky table, as a node does at start) without panicking; a catalogue that validates
//! must hold what its reader promises.

#![no_main]

use std::path::Path;
use std::sync::LazyLock;
use std::time::Instant;

use gtd::balance::GroupBalancer;
use gtd::config::{self, Config, ConfigErrors};
use gtd::regions::Catalog;
use gtd::split::plan::{ListenerPlan, StickyTable, facts};
use gtd::split::ranker::Ranker;
use libfuzzer_sys::fuzz_target;

/// The shipped catalogue: configs name its regions.
static CATALOG: LazyLock<Catalog> = LazyLock::new(|| {
    let text = include_str!("../../regions/catalog.toml");
    config::parse_catalog(text, Path::new("regions/catalog.toml"))
        .expect("the shipped catalogue is valid")
});

/// Where the config is read from: relative certificate and key paths resolve into `fuzz/tls/`,
/// which holds a throwaway certificate, its key and another key (`cert.pem`, `key.pem`,
/// `other-key.pem`), so the PEM checks run on real files; other paths are looked up, read-only,
/// as `gtd check` would.
const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tls/config.toml");

fuzz_target!(|data: &[u8]| {
    let text = match gtd::fuzzing::config_text(data.to_vec()) {
        Ok(text) => text,
        Err((line, column)) => {
            // The position of the first byte that is not UTF-8: after the valid prefix.
            let valid = std::str::from_utf8(data)
                .map_err(|e| e.valid_up_to())
                .unwrap_err();
            let prefix = std::str::from_utf8(&data[..valid]).expect("valid prefix");
            assert_eq!(line, prefix.matches('\n').count() + 1);
            let last = prefix.rsplit('\n').next().unwrap_or("");
            assert_eq!(column, last.chars().count() + 1);
            // Validated anyway, as the lossy text: the validator sees every kind of input.
            String::from_utf8_lossy(data).into_owned()
        }
    };

    match config::parse(&text, Path::new(FILE), &CATALOG) {
        Ok(cfg) => valid_config(&cfg),
        Err(errors) => check_errors(&text, &errors),
    }

    match config::parse_catalog(&text, Path::new("catalog.toml")) {
        Ok(catalog) => valid_catalog(&catalog),
        Err(errors) => check_errors(&text, &errors),
    }
});

/// Every error names a position inside the text (one past its last line at most) and prints.
fn check_errors(text: &str, errors: &ConfigErrors) {
    assert!(!errors.0.is_empty(), "an Err holds at least one error");
    let lines = text.split('\n').count();
    for e in &errors.0 {
        assert!(e.line >= 1 && e.column >= 1, "{e}");
        assert!(e.line <= lines, "{e}: line past the end ({lines} lines)");
        assert!(!e.message.is_empty(), "{e}: no message");
    }
    let shown = errors.to_string();
    assert!(shown.lines().count() >= errors.0.len());
}

/// What `gtd check` and a starting node do with a valid config.
fn valid_config(cfg: &Config) {
    let summary = cfg.summary();
    assert!(summary.contains(": ok"));
    for region in &CATALOG.regions {
        let served = cfg.serves(&region.id);
        let listed = cfg.listeners.iter().any(|l| l.regions.contains(&region.id));
        assert_eq!(served.is_ok(), listed, "{}", region.id);
    }
    assert!(cfg.serves("no-such-region").is_err());

    let now = Instant::now();
    for l in &cfg.listeners {
        assert!(!l.groups.is_empty(), "listener {} has no group", l.name);
        let balancers: Vec<GroupBalancer> = l
            .groups
            .iter()
            .map(|g| GroupBalancer::new(g, l.protocol, now))
            .collect();
        for region in &l.regions {
            let ranker = Ranker::new(l, &cfg.catalog, region);
            let ranking = ranker.ranking().clone();
            assert_eq!(ranking.order.len(), l.groups.len());
            let facts = facts(l, |i| l.groups[i].ratio, &balancers, now);
            let plan = ListenerPlan::build(l, ranking, facts, l.affinity);
            assert_eq!(plan.routes.len(), l.routes.len());
            for (i, _) in l.routes.iter().enumerate() {
                for (_, share) in plan.rule_split(l, i) {
                    assert!(share.is_finite() && (0.0..=100.0 + 1e-9).contains(&share));
                }
            }
            for share in &plan.plan.shares {
                assert!(share.total.is_finite(), "{share:?}");
            }
        }
        if let Some(table) = StickyTable::of(l) {
            for (gi, g) in l.groups.iter().enumerate() {
                for ei in 0..g.endpoints.len() {
                    let value = table.value(gi, ei);
                    assert_eq!(table.target(value), Some((gi, ei)), "{value}");
                }
            }
        }
    }
}

/// What the catalogue reader promises of a catalogue it accepts.
fn valid_catalog(catalog: &Catalog) {
    assert!(!catalog.regions.is_empty());
    assert!(catalog.route_factor.is_finite() && catalog.route_factor > 0.0);
    for (i, r) in catalog.regions.iter().enumerate() {
        assert!((-90.0..=90.0).contains(&r.lat), "{}", r.id);
        assert!((-180.0..=180.0).contains(&r.lon), "{}", r.id);
        assert!(!r.name.is_empty());
        assert!(
            catalog.regions[..i].iter().all(|o| o.id != r.id),
            "duplicate {}",
            r.id
        );
    }
    for ((a, b), ms) in &catalog.rtt {
        assert!(a != b && ms.is_finite() && *ms > 0.0, "{a}/{b} = {ms}");
        assert!(catalog.get(a).is_some() && catalog.get(b).is_some());
    }
}
