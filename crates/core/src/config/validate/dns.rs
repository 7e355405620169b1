//! `[dns]`: the name servers, timeout and attempts of the resolver that turns endpoint host
//! names into addresses, and the bounds on how long an answer is kept. Nothing is resolved
//! here (`gtd check` works offline); names are checked by [`crate::config::syntax`].

use std::net::{IpAddr, SocketAddr};

use crate::config::document::{Ctx, Table, as_str, quote};
use crate::config::model::Dns;

pub(super) fn dns(ctx: &mut Ctx<'_>, root: &Table<'_, '_>) -> Dns {
    let mut dns = Dns::default();
    let Some(t) = root.table(ctx, "dns", "dns".to_owned()) else {
        return dns;
    };
    t.check_keys(
        ctx,
        &["nameservers", "timeout", "attempts", "min_ttl", "max_ttl"],
    );
    for item in t.array(ctx, "nameservers").unwrap_or_default() {
        let Some(s) = as_str(ctx, item, &t.path, "each entry of \"nameservers\"") else {
            continue;
        };
        let at = item.span().start;
        match nameserver(s) {
            Some(addr) if dns.nameservers.contains(&addr) => ctx.error(
                at,
                &t.path,
                format!("name server {} is listed twice", quote(s)),
            ),
            Some(addr) => dns.nameservers.push(addr),
            None => ctx.error(
                at,
                &t.path,
                format!(
                    "invalid name server {}: expected IP or IP:PORT, like \"127.0.0.1:53\" or \
                     \"[::1]:5353\"",
                    quote(s)
                ),
            ),
        }
    }
    dns.timeout = t.positive_duration(ctx, "timeout").map(|d| d.v);
    dns.attempts = t.u32(ctx, "attempts", 1, Some(10)).map(|n| n.v);
    let min = t.positive_duration(ctx, "min_ttl");
    let max = t.positive_duration(ctx, "max_ttl");
    if let Some(m) = min {
        dns.min_ttl = m.v;
    }
    if let Some(m) = max {
        dns.max_ttl = m.v;
    }
    if dns.min_ttl > dns.max_ttl {
        let at = max.or(min).map_or(t.at, |m| m.at);
        ctx.error(
            at,
            &t.path,
            format!(
                "min_ttl ({}) is above max_ttl ({})",
                crate::config::format_duration(dns.min_ttl),
                crate::config::format_duration(dns.max_ttl)
            ),
        );
    }
    dns
}

/// `IP` (port 53) or `IP:PORT` (IPv6 in brackets with a port).
fn nameserver(s: &str) -> Option<SocketAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, 53));
    }
    s.parse::<SocketAddr>().ok().filter(|a| a.port() != 0)
}
