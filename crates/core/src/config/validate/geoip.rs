//! `[geoip]`: the client-location database (read and opened here, so that `gtd check`, a
//! node's start and every reload fail on a missing or corrupt file at the `database` key) and
//! the countries that get a metrics label of their own.

use std::sync::Arc;

use super::Env;
use crate::config::document::{Ctx, Table, as_str, quote};
use crate::config::model::GeoIp;
use crate::geoip::{self, Database};

pub(super) fn geoip(ctx: &mut Ctx<'_>, env: &Env<'_>, root: &Table<'_, '_>) -> Option<GeoIp> {
    let t = root.table(ctx, "geoip", "geoip".to_owned())?;
    t.check_keys(ctx, &["database", "countries"]);
    let mut countries: Vec<String> = Vec::new();
    let items = t.array(ctx, "countries").unwrap_or_default();
    for item in items {
        let Some(s) = as_str(ctx, item, &t.path, "each entry of \"countries\"") else {
            continue;
        };
        let at = item.span().start;
        match geoip::country_code(s) {
            Some(c) if s.as_bytes() != c => ctx.error(
                at,
                &t.path,
                format!(
                    "country {} must be upper case, as databases write it: {:?}",
                    quote(s),
                    std::str::from_utf8(&c).unwrap_or_default()
                ),
            ),
            Some(_) if countries.iter().any(|c| c == s) => {
                ctx.error(at, &t.path, format!("country {} is listed twice", quote(s)));
            }
            Some(_) => countries.push(s.to_owned()),
            None => ctx.error(
                at,
                &t.path,
                format!(
                    "invalid country {}: expected an ISO 3166-1 code of two letters, like \"CN\"",
                    quote(s)
                ),
            ),
        }
    }
    if countries.len() > geoip::MAX_COUNTRIES {
        let at = items.first().map_or(t.at, |i| i.span().start);
        ctx.error(
            at,
            &t.path,
            format!(
                "{} countries; at most {} get a label of their own (each is a series per \
                 continent and listener)",
                countries.len(),
                geoip::MAX_COUNTRIES
            ),
        );
    }
    if !t.has("database") {
        t.missing(ctx, "database");
        return None;
    }
    let s = t.nonempty_str(ctx, "database")?;
    let path = env.base.join(s.v);
    let looked = if path.as_os_str() == s.v {
        String::new()
    } else {
        format!(" (looked for {})", path.display())
    };
    match Database::open(&path) {
        Ok(db) => Some(GeoIp {
            database: path,
            countries,
            db: Arc::new(db),
        }),
        Err(e) => {
            ctx.error(
                s.at,
                &t.path,
                format!("database file {}: {e}{looked}", quote(s.v)),
            );
            None
        }
    }
}
