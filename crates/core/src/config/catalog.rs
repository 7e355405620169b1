//! Reads and validates the region catalogue (`regions/catalog.toml`, docs/design.md §2).
//!
//! `[[region]]` tables with `id`, `name`, `lat`, `lon`; an optional top-level `route_factor`
//! (> 0, default 1.5); an optional `[rtt]` table of measured round-trip times keyed `"a/b"`
//! (both ids known, value > 0 ms, one entry per pair since the table is symmetric).

use std::collections::HashMap;
use std::path::Path;

use super::document::{At, Ctx, Table, did_you_mean, is_name, quote};
use super::error::{ConfigErrors, position};
use crate::regions::{Catalog, DEFAULT_ROUTE_FACTOR, Region, pair_key};

/// Validates a catalogue given as text; `file` names it in errors.
pub(crate) fn parse(text: &str, file: &Path) -> Result<Catalog, ConfigErrors> {
    let mut ctx = Ctx::new(text, file);
    let Some(doc) = ctx.parse() else {
        return Err(ConfigErrors(ctx.into_errors()));
    };
    let root = Table::root(&doc);
    root.check_keys(&mut ctx, &["region", "route_factor", "rtt"]);

    let route_factor = route_factor(&mut ctx, &root);
    let (regions, first_at) = regions(&mut ctx, &root);
    let rtt = rtt(&mut ctx, &root, &first_at);

    if ctx.has_errors() {
        return Err(ConfigErrors(ctx.into_errors()));
    }
    Ok(Catalog {
        regions,
        route_factor,
        rtt,
    })
}

/// `route_factor`: a number above 0.
fn route_factor(ctx: &mut Ctx<'_>, root: &Table<'_, '_>) -> f64 {
    match root.number(ctx, "route_factor") {
        Some(n) if n.v.0.is_finite() && n.v.0 > 0.0 => n.v.0,
        Some(n) => {
            ctx.error(
                n.at,
                "",
                format!("route_factor {} must be a number greater than 0", n.v.1),
            );
            DEFAULT_ROUTE_FACTOR
        }
        None => DEFAULT_ROUTE_FACTOR,
    }
}

/// The `[[region]]` tables: the regions complete enough to use, and where each id (valid,
/// once) is first written, for the `[rtt]` keys and the duplicates.
fn regions(ctx: &mut Ctx<'_>, root: &Table<'_, '_>) -> (Vec<Region>, HashMap<String, usize>) {
    let mut regions: Vec<Region> = Vec::new();
    let mut first_at: HashMap<String, usize> = HashMap::new();
    let tables = root.tables(ctx, "region");
    if tables.is_empty() && !ctx.has_errors() {
        ctx.error(
            0,
            "",
            "the catalogue has no regions; add [[region]] tables with id, name, lat and lon",
        );
    }
    for (i, v) in tables.into_iter().enumerate() {
        let name = v
            .get_ref()
            .as_table()
            .and_then(|t| t.get("id"))
            .and_then(|id| id.get_ref().as_str());
        let path = match name {
            Some(id) => format!("region {}", quote(id)),
            None => format!("region {}", i + 1),
        };
        let Some(t) = Table::of(ctx, v, "region", "", path) else {
            continue;
        };
        t.check_keys(ctx, &["id", "name", "lat", "lon"]);
        let id = t.req_str(ctx, "id").filter(|id| {
            let ok = is_name(id.v);
            if !ok {
                let msg = format!(
                    "region id {} may only contain letters, digits, \"_\" and \"-\"",
                    quote(id.v)
                );
                ctx.error(id.at, &t.path, msg);
            }
            ok
        });
        if !t.has("name") {
            t.missing(ctx, "name");
        }
        let human = t.nonempty_str(ctx, "name");
        let lat = degrees(ctx, &t, "lat", 90.0);
        let lon = degrees(ctx, &t, "lon", 180.0);
        let Some(id) = id else { continue };
        if let Some(first) = first_at.get(id.v) {
            let line = position(ctx.text(), *first).0;
            ctx.error(
                id.at,
                &t.path,
                format!(
                    "duplicate region id {} (first defined at line {line})",
                    quote(id.v)
                ),
            );
            continue;
        }
        first_at.insert(id.v.to_owned(), id.at);
        if let (Some(name), Some(lat), Some(lon)) = (human, lat, lon) {
            regions.push(Region {
                id: id.v.to_owned(),
                name: name.v.to_owned(),
                lat,
                lon,
            });
        }
    }

    (regions, first_at)
}

/// The `[rtt]` table: measured round trips by pair of known regions, one entry per pair.
fn rtt(
    ctx: &mut Ctx<'_>,
    root: &Table<'_, '_>,
    first_at: &HashMap<String, usize>,
) -> HashMap<(String, String), f64> {
    let mut rtt = HashMap::new();
    if let Some(t) = root.table(ctx, "rtt", "rtt".to_owned()) {
        // Pair → the key that first gave it, to catch "b/a" after "a/b".
        let mut given: HashMap<(String, String), String> = HashMap::new();
        // In file order, so a repeated pair is reported at the later key.
        let mut entries: Vec<_> = t.entries().collect();
        entries.sort_by_key(|(key, _)| key.at);
        for (key, _) in entries {
            let Some((a, b)) = key.v.split_once('/') else {
                let msg = format!("rtt key {} must name two regions as \"a/b\"", quote(key.v));
                ctx.error(key.at, &t.path, msg);
                continue;
            };
            let mut known = true;
            for id in [a, b] {
                if !first_at.contains_key(id) {
                    known = false;
                    let hint = did_you_mean(id, first_at.keys().map(String::as_str));
                    let msg = format!(
                        "rtt key {} names unknown region {}{hint}",
                        quote(key.v),
                        quote(id)
                    );
                    ctx.error(key.at, &t.path, msg);
                }
            }
            if a == b {
                ctx.error(
                    key.at,
                    &t.path,
                    format!("rtt key {} names the same region twice", quote(key.v)),
                );
                continue;
            }
            let Some(ms) = t.number(ctx, key.v) else {
                continue;
            };
            let (x, written) = ms.v;
            if !(x.is_finite() && x > 0.0) {
                ctx.error(
                    ms.at,
                    &t.path,
                    format!("rtt {} = {written} must be greater than 0 ms", quote(key.v)),
                );
                continue;
            }
            let pair = pair_key(a, b);
            if let Some(first) = given.get(&pair) {
                let msg = format!(
                    "rtt key {} repeats {} (the table is symmetric)",
                    quote(key.v),
                    quote(first)
                );
                ctx.error(key.at, &t.path, msg);
                continue;
            }
            given.insert(pair.clone(), key.v.to_owned());
            if known {
                rtt.insert(pair, x);
            }
        }
    }

    rtt
}

/// `lat` / `lon`: a required number in `-limit..=limit`.
fn degrees(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, key: &str, limit: f64) -> Option<f64> {
    if !t.has(key) {
        t.missing(ctx, key);
        return None;
    }
    let At {
        v: (x, written),
        at,
    } = t.number(ctx, key)?;
    if !(-limit..=limit).contains(&x) {
        ctx.error(
            at,
            &t.path,
            format!("{key} {written} is out of range {}..={limit}", -limit),
        );
        return None;
    }
    Some(x)
}
