//! `[[listener.route]]`: the custom forwarding rules of http/https listeners (host, path
//! prefixes, header, the groups they run over) and routes an earlier one shadows.

use super::fields::slash_path;
use super::group::GroupRead;
use crate::config::document::{At, Ctx, Table, Value, as_str, describe, did_you_mean, quote};
use crate::config::model::*;
use crate::config::syntax;

pub(super) fn routes(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, groups: &[GroupRead<'_>]) -> Vec<Route> {
    let mut out = Vec::new();
    let mut at = Vec::new();
    for (i, v) in t.tables(ctx, "route").into_iter().enumerate() {
        let path = format!("{} route {}", t.path, i + 1);
        let Some(r) = Table::of(ctx, v, "route", &t.path, path) else {
            continue;
        };
        r.check_keys(ctx, &["host", "path_prefix", "header", "groups"]);
        if !(r.has("host") || r.has("path_prefix") || r.has("header")) {
            ctx.error(
                r.at,
                &r.path,
                "a route needs at least one of \"host\", \"path_prefix\" or \"header\"",
            );
        }
        let host = r.nonempty_str(ctx, "host").and_then(|h| {
            // Requests match by host name, so a port written here is dropped (and said so).
            let (name, port) = syntax::split_route_host(h.v);
            if port.is_some() {
                let msg = format!(
                    "host {}: the port is ignored; routes match the host name",
                    quote(h.v)
                );
                ctx.warn(h.at, &r.path, msg);
            }
            if syntax::is_host_pattern(name) || syntax::is_ipv6_literal(name) {
                Some(name.to_owned())
            } else {
                let msg = format!(
                    "{} is not a valid host pattern (a host name; \"*\" and \"?\" are wildcards)",
                    quote(h.v)
                );
                ctx.error(h.at, &r.path, msg);
                None
            }
        });
        let path_prefix = route_prefixes(ctx, &r);
        let header = r.table(ctx, "header", r.path.clone()).and_then(|h| {
            h.check_keys(ctx, &["name", "value"]);
            let name = h.req_str(ctx, "name");
            let value = h.req_str(ctx, "value");
            let name = name.filter(|n| {
                let ok = syntax::is_header_name(n.v);
                if !ok {
                    ctx.error(
                        n.at,
                        &h.path,
                        format!("{} is not a valid header name", quote(n.v)),
                    );
                }
                ok
            })?;
            Some(HeaderMatch {
                name: name.v.to_owned(),
                value: value?.v.to_owned(),
            })
        });
        let names = route_groups(ctx, &r, groups);
        out.push(Route {
            host,
            path_prefix,
            header,
            groups: names,
        });
        at.push((r.at, r.path));
    }
    for (j, later) in out.iter().enumerate() {
        if let Some(i) = out[..j].iter().position(|earlier| shadows(earlier, later)) {
            let (line, _) = crate::config::position(ctx.text(), at[i].0);
            let msg = format!(
                "this route never matches: route {} (line {line}) comes first and takes every \
                 request it would (ties go by config order; put the narrower rule first)",
                i + 1
            );
            ctx.warn(at[j].0, &at[j].1, msg);
        }
    }
    out
}

/// True when `earlier` takes every request `later` would match (docs/design.md §3.5 ties go by config
/// order): the same level and host, every prefix of `later` among its own, and no header
/// condition or the same one.
fn shadows(earlier: &Route, later: &Route) -> bool {
    let same_host = match (&earlier.host, &later.host) {
        (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
        (None, None) => true,
        _ => false,
    };
    same_host
        && earlier.path_prefix.is_empty() == later.path_prefix.is_empty()
        && later
            .path_prefix
            .iter()
            .all(|p| earlier.path_prefix.contains(p))
        && earlier.header.as_ref().is_none_or(|h| {
            later
                .header
                .as_ref()
                .is_some_and(|l| l.name.eq_ignore_ascii_case(&h.name) && l.value == h.value)
        })
}

/// `path_prefix`: a list of paths (a single string is taken as a list of one).
fn route_prefixes(ctx: &mut Ctx<'_>, r: &Table<'_, '_>) -> Vec<String> {
    let Some(v) = r.value("path_prefix") else {
        return Vec::new();
    };
    let items: Vec<&Value<'_>> = match v.get_ref() {
        toml::de::DeValue::String(_) => vec![v],
        toml::de::DeValue::Array(a) => {
            if a.is_empty() {
                ctx.error(
                    v.span().start,
                    &r.path,
                    "\"path_prefix\" must list at least one path, like [\"/api/\"]",
                );
            }
            a.iter().collect()
        }
        other => {
            let msg = format!(
                "\"path_prefix\" must be an array of paths, found {}",
                describe(other)
            );
            ctx.error(v.span().start, &r.path, msg);
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for item in items {
        if let Some(s) = as_str(ctx, item, &r.path, "each entry of \"path_prefix\"")
            && slash_path(
                ctx,
                At {
                    v: s,
                    at: item.span().start,
                },
                &r.path,
                "path prefix",
            )
        {
            out.push(s.to_owned());
        }
    }
    out
}

/// `groups = [...]` of a route: non-empty, unique, each a group of this listener.
fn route_groups(ctx: &mut Ctx<'_>, r: &Table<'_, '_>, groups: &[GroupRead<'_>]) -> Vec<String> {
    if !r.has("groups") {
        r.missing(ctx, "groups");
        return Vec::new();
    }
    let Some(items) = r.array(ctx, "groups") else {
        return Vec::new();
    };
    if items.is_empty() {
        let at = r.value_at("groups").unwrap_or(r.at);
        ctx.error(
            at,
            &r.path,
            "\"groups\" must name at least one group of this listener",
        );
    }
    let mut out: Vec<String> = Vec::new();
    for item in items {
        let Some(name) = as_str(ctx, item, &r.path, "each entry of \"groups\"") else {
            continue;
        };
        let at = item.span().start;
        if out.iter().any(|n| n == name) {
            ctx.error(
                at,
                &r.path,
                format!("group {} is listed twice", quote(name)),
            );
            continue;
        }
        if !groups.iter().any(|g| g.group.name == name) {
            let hint = did_you_mean(name, groups.iter().map(|g| g.group.name.as_str()));
            ctx.error(
                at,
                &r.path,
                format!("no group named {} in this listener{hint}", quote(name)),
            );
        }
        out.push(name.to_owned());
    }
    out
}
