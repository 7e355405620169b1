//! `[[listener.group.endpoint]]`: addresses unique in the group, weights and the per-endpoint
//! parameters the group's method allows.

use std::collections::HashMap;

use super::balance::Method;
use super::fields::{capacity, item_path, peek_str, required_tables};
use crate::config::document::{Ctx, Table, quote};
use crate::config::error::position;
use crate::config::model::*;
use crate::config::syntax;

const ENDPOINT_KEYS: &[&str] = &[
    "address",
    "weight",
    "max_conns",
    "backup",
    "down",
    "drain",
    "enabled",
    "slow_start",
    "max_fails",
    "fail_timeout",
    "capacity",
];

pub(super) fn endpoints(
    ctx: &mut Ctx<'_>,
    g: &Table<'_, '_>,
    method: Option<Method>,
) -> Vec<Endpoint> {
    let Some(tables) = required_tables(
        ctx,
        g,
        "endpoint",
        "a group needs at least one [[listener.group.endpoint]]",
    ) else {
        return Vec::new();
    };
    let mut out: Vec<Endpoint> = Vec::new();
    // (host, port) → position of the first endpoint with it.
    let mut seen: HashMap<(Host, u16), usize> = HashMap::new();
    for (i, v) in tables.into_iter().enumerate() {
        let path = item_path(&g.path, "endpoint", peek_str(v, "address"), i + 1);
        let Some(t) = Table::of(ctx, v, "endpoint", &g.path, path) else {
            continue;
        };
        let Some(e) = endpoint(ctx, &t, method) else {
            continue;
        };
        let at = t.value_at("address").unwrap_or(t.at);
        let key = (e.address.host.clone(), e.address.port);
        if let Some(first) = seen.get(&key) {
            let line = position(ctx.text(), *first).0;
            let msg = format!(
                "duplicate endpoint {} in this group (first at line {line})",
                quote(&e.address.text)
            );
            ctx.error(at, &t.path, msg);
            continue;
        }
        seen.insert(key, at);
        out.push(e);
    }
    out
}

fn endpoint(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, method: Option<Method>) -> Option<Endpoint> {
    t.check_keys(ctx, ENDPOINT_KEYS);
    let address = t
        .req_str(ctx, "address")
        .and_then(|a| match syntax::parse_address(a.v) {
            Ok(addr) => Some(addr),
            Err(why) => {
                ctx.error(
                    a.at,
                    &t.path,
                    format!("invalid address {}: {why}", quote(a.v)),
                );
                None
            }
        });
    // Parameters the group's method does not take are reported, not read.
    let mut supported = |key: &str| match method {
        Some(m) if !m.endpoint_param(key) => {
            m.reject(ctx, t, key);
            false
        }
        _ => true,
    };
    let (weight_ok, slow_ok, backup_ok) = (
        supported("weight"),
        supported("slow_start"),
        supported("backup"),
    );
    let weight = if weight_ok {
        t.u32(ctx, "weight", 1, Some(1000))
            .map_or(Endpoint::DEFAULT_WEIGHT, |n| n.v)
    } else {
        Endpoint::DEFAULT_WEIGHT
    };
    let slow_start = if slow_ok {
        t.duration(ctx, "slow_start").map(|d| d.v)
    } else {
        None
    };
    let backup = backup_ok && t.bool(ctx, "backup").unwrap_or(false);
    // 0 is "no limit", as in nginx.
    let max_conns = t
        .u32(ctx, "max_conns", 0, None)
        .map(|n| n.v)
        .filter(|&n| n > 0);
    let down = t.bool(ctx, "down").unwrap_or(false);
    let drain = t.bool(ctx, "drain").unwrap_or(false);
    let enabled = t.bool(ctx, "enabled").unwrap_or(Endpoint::DEFAULT_ENABLED);
    let max_fails = t
        .u32(ctx, "max_fails", 0, None)
        .map_or(Endpoint::DEFAULT_MAX_FAILS, |n| n.v);
    let fail_timeout = t
        .positive_duration(ctx, "fail_timeout")
        .map_or(Endpoint::DEFAULT_FAIL_TIMEOUT, |d| d.v);
    let capacity = capacity(ctx, t);
    Some(Endpoint {
        address: address?,
        weight,
        max_conns,
        backup,
        down,
        drain,
        enabled,
        slow_start,
        max_fails,
        fail_timeout,
        capacity,
    })
}
