//! Builds the typed [`Config`] from the spanned document: applies the defaults of SPEC 2–5 and
//! checks every constraint, recording each problem in the [`Ctx`] and carrying on, so that one
//! run reports every error. A value that fails a check is replaced by a placeholder so the walk
//! can continue; the result is only returned when no error was recorded.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::document::{
    At, Ctx, Table, Value, as_int, as_str, describe, did_you_mean, format_duration, is_name,
    one_of, quote,
};
use super::error::{ConfigError, ConfigErrors, position};
use super::model::*;
use super::syntax;
use crate::regions::Catalog;

/// Where the region catalogue comes from.
pub(crate) enum CatalogFrom<'a> {
    /// Already loaded (tests, reloads): the file's `catalog = ...` is checked but not read.
    Given(&'a Catalog),
    /// Read it: from this path (`--regions`) or else from the config's `catalog` key.
    Load(Option<&'a Path>),
}

/// The catalogue path when the config does not name one, relative to the config's directory.
pub(crate) const DEFAULT_CATALOG: &str = "regions/catalog.toml";

/// Validates a whole config file.
pub(crate) fn config(
    text: &str,
    file: &Path,
    from: CatalogFrom<'_>,
) -> Result<Config, ConfigErrors> {
    let mut ctx = Ctx::new(text, file);
    let Some(doc) = ctx.parse() else {
        return Err(ConfigErrors(ctx.into_errors()));
    };
    let root = Table::root(&doc);
    root.check_keys(&mut ctx, &["catalog", "node", "admin", "listener"]);
    let base = base_dir(file);

    // Errors in the catalogue file itself (another file) come first: they explain the rest.
    let mut catalog_errors = Vec::new();
    let catalog_key = root.nonempty_str(&mut ctx, "catalog");
    let catalog = match from {
        CatalogFrom::Given(c) => Some(c.clone()),
        CatalogFrom::Load(over) => {
            let key_ok = catalog_key.is_some() || !root.has("catalog");
            if over.is_some() || key_ok {
                read_catalog(&mut ctx, &mut catalog_errors, base, over, catalog_key)
            } else {
                None
            }
        }
    };

    let env = Env {
        catalog: catalog.as_ref(),
        base,
        unrun_checks: Default::default(),
    };
    let node = node(&mut ctx, &root);
    let admin = admin(&mut ctx, &root);
    let listeners = listeners(&mut ctx, &env, &root);
    // Said once, plainly, rather than left for an operator to discover under failure.
    let unrun = env.unrun_checks.take();
    if let Some(&first) = unrun.first() {
        let lines: Vec<String> = unrun
            .iter()
            .map(|&at| crate::config::position(text, at).0.to_string())
            .collect();
        let msg = format!(
            "active health checks are not run by this version: the health_check {} (line{} {}) \
             {} checked but {} no effect; passive checks (max_fails, fail_timeout) and the admin \
             API decide which endpoints serve",
            if unrun.len() == 1 { "table" } else { "tables" },
            if unrun.len() == 1 { "" } else { "s" },
            lines.join(", "),
            if unrun.len() == 1 { "is" } else { "are" },
            if unrun.len() == 1 { "has" } else { "have" },
        );
        ctx.warn(first, "", msg);
    }

    match catalog {
        Some(catalog) if catalog_errors.is_empty() && !ctx.has_errors() => Ok(Config {
            source: file.to_path_buf(),
            catalog,
            node,
            admin,
            listeners,
            warnings: ctx.take_warnings(),
        }),
        _ => {
            catalog_errors.extend(ctx.into_errors());
            Err(ConfigErrors(catalog_errors))
        }
    }
}

/// The directory relative paths in a file are resolved against.
pub(crate) fn base_dir(file: &Path) -> &Path {
    file.parent().unwrap_or(Path::new(""))
}

/// Reads the catalogue named by `--regions`, the `catalog` key, or the default.
fn read_catalog(
    ctx: &mut Ctx<'_>,
    outer: &mut Vec<ConfigError>,
    base: &Path,
    over: Option<&Path>,
    key: Option<At<&str>>,
) -> Option<Catalog> {
    let path = match (over, key) {
        (Some(p), _) => p.to_path_buf(),
        (None, Some(k)) => base.join(k.v),
        (None, None) => base.join(DEFAULT_CATALOG),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            let shown = path.display();
            match (over, key) {
                (Some(_), _) => outer.push(ConfigError {
                    file: path.clone(),
                    line: 1,
                    column: 1,
                    path: String::new(),
                    message: format!("cannot read region catalogue: {e}"),
                }),
                (None, Some(k)) => ctx.error(k.at, "", format!("cannot read region catalogue {shown}: {e}")),
                (None, None) => ctx.error(
                    0,
                    "",
                    format!(
                        "cannot read region catalogue {shown} (the default; set catalog = \"...\" or pass --regions): {e}"
                    ),
                ),
            }
            return None;
        }
    };
    match super::catalog::parse(&text, &path) {
        Ok(c) => Some(c),
        Err(errs) => {
            outer.extend(errs.0);
            None
        }
    }
}

/// What every part of the walk needs to know about its surroundings.
struct Env<'a> {
    /// The catalogue, when it could be read (region checks are skipped otherwise).
    catalog: Option<&'a Catalog>,
    /// Directory of the config file.
    base: &'a Path,
    /// Where the `health_check` tables are: checked, but not run by this version.
    unrun_checks: std::cell::RefCell<Vec<usize>>,
}

impl Env<'_> {
    /// Checks that `id` is in the catalogue; records `unknown region "x"; did you mean "y"?`.
    fn region(&self, ctx: &mut Ctx<'_>, id: At<&str>, path: &str) -> bool {
        let Some(catalog) = self.catalog else {
            return true;
        };
        if catalog.get(id.v).is_some() {
            return true;
        }
        let hint = did_you_mean(id.v, catalog.regions.iter().map(|r| r.id.as_str()));
        ctx.error(
            id.at,
            path,
            format!(
                "unknown region {} (not in the region catalogue){hint}",
                quote(id.v)
            ),
        );
        false
    }

    /// Resolves a file path against the config's directory and checks the file exists.
    fn file(&self, ctx: &mut Ctx<'_>, t: &Table<'_, '_>, key: &str) -> Option<PathBuf> {
        let s = t.nonempty_str(ctx, key)?;
        let path = self.base.join(s.v);
        if !path.is_file() {
            let looked = if path.as_os_str() == s.v {
                String::new()
            } else {
                format!(" (looked for {})", path.display())
            };
            ctx.error(
                s.at,
                &t.path,
                format!("{key} file {} not found{looked}", quote(s.v)),
            );
            return None;
        }
        Some(path)
    }
}

/// Reads the raw string at `key` of the table `v` without recording anything (for names in paths).
fn peek_str<'t>(v: &'t Value<'_>, key: &str) -> Option<&'t str> {
    v.get_ref().as_table()?.get(key)?.get_ref().as_str()
}

/// The name to show for an element of an array of tables: `kind "name"`, or `kind N`.
fn item_path(parent: &str, kind: &str, name: Option<&str>, index: usize) -> String {
    let own = match name {
        Some(n) => format!("{kind} {}", quote(n)),
        None => format!("{kind} {index}"),
    };
    if parent.is_empty() {
        own
    } else {
        format!("{parent} {own}")
    }
}

/// A string that must be one of `options`; aliases may map several names to one value.
fn choice<T: Copy>(
    ctx: &mut Ctx<'_>,
    t: &Table<'_, '_>,
    key: &str,
    options: &[(&str, T)],
) -> Option<At<T>> {
    let v = t.value(key)?;
    let at = v.span().start;
    let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
    let Some(s) = v.get_ref().as_str() else {
        let msg = format!(
            "{} must be a string ({}), found {}",
            quote(key),
            one_of(&names),
            describe(v.get_ref())
        );
        ctx.error(at, &t.path, msg);
        return None;
    };
    // Exact first, then in any case (`"get"`, `"HTTP"`): the names are distinct either way.
    let found = options.iter().find(|(n, _)| *n == s);
    if let Some((_, value)) =
        found.or_else(|| options.iter().find(|(n, _)| n.eq_ignore_ascii_case(s)))
    {
        return Some(At { v: *value, at });
    }
    let hint = did_you_mean(s, names.iter().copied());
    let label = key.replace('_', " ");
    ctx.error(
        at,
        &t.path,
        format!(
            "unknown {label} {} (expected {}){hint}",
            quote(s),
            one_of(&names)
        ),
    );
    None
}

/// Warns `"key" is only for WHO; ignored` when `key` is present but not `allowed` (HAProxy warns
/// the same way about a keyword of another mode); true when it may be read.
fn only_for(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, key: &str, allowed: bool, who: &str) -> bool {
    match t.key_at(key) {
        Some(at) if !allowed => {
            let msg = format!("{} is only for {who}; ignored", quote(key));
            ctx.warn(at, &t.path, msg);
            false
        }
        _ => true,
    }
}

/// A list of status codes and ranges (`[200, "300-399"]`).
fn status_set(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, key: &str) -> Option<StatusSet> {
    let items = t.array(ctx, key)?;
    let mut set = Vec::new();
    for item in items {
        let at = item.span().start;
        let parsed = match item.get_ref() {
            toml::de::DeValue::Integer(_) => match as_int(ctx, item, &t.path, "a status") {
                Some(n) => syntax::status_code(n).map(|c| c..=c),
                None => continue,
            },
            toml::de::DeValue::String(s) => syntax::parse_status_range(s),
            other => Err(format!(
                "each entry of {} must be a status code or a \"low-high\" range, found {}",
                quote(key),
                describe(other)
            )),
        };
        match parsed {
            Ok(r) => set.push(r),
            Err(msg) => ctx.error(at, &t.path, msg),
        }
    }
    Some(StatusSet(set))
}

/// `"/..."` paths: records an error when `s` does not start with `/`.
fn slash_path(ctx: &mut Ctx<'_>, s: At<&str>, path: &str, what: &str) -> bool {
    if s.v.starts_with('/') {
        return true;
    }
    ctx.error(
        s.at,
        path,
        format!("{what} {} must start with \"/\"", quote(s.v)),
    );
    false
}

/// Records that a name is not `[A-Za-z0-9_-]+`.
fn check_name(ctx: &mut Ctx<'_>, name: At<&str>, path: &str, what: &str) -> bool {
    if is_name(name.v) {
        return true;
    }
    let msg = format!(
        "{what} name {} may only contain letters, digits, \"_\" and \"-\"",
        quote(name.v)
    );
    ctx.error(name.at, path, msg);
    false
}

// ---------------------------------------------------------------------------------------------
// [node], [admin]

fn node(ctx: &mut Ctx<'_>, root: &Table<'_, '_>) -> Node {
    let Some(t) = root.table(ctx, "node", "node".to_owned()) else {
        return Node::default();
    };
    t.check_keys(ctx, &["source_ip"]);
    let source_ip = t
        .str(ctx, "source_ip")
        .and_then(|s| match s.v.parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                ctx.error(
                    s.at,
                    &t.path,
                    format!("invalid IP address {} for \"source_ip\"", quote(s.v)),
                );
                None
            }
        });
    Node { source_ip }
}

fn admin(ctx: &mut Ctx<'_>, root: &Table<'_, '_>) -> Admin {
    let mut admin = Admin::default();
    let Some(t) = root.table(ctx, "admin", "admin".to_owned()) else {
        return admin;
    };
    t.check_keys(ctx, &["bind", "token"]);
    if let Some(s) = t.str(ctx, "bind") {
        match s.v.parse::<SocketAddr>() {
            Ok(addr) => admin.bind = addr,
            Err(_) => ctx.error(
                s.at,
                &t.path,
                format!(
                    "invalid address {} for \"bind\": expected IP:PORT, like \"127.0.0.1:9100\" or \"[::1]:9100\"",
                    quote(s.v)
                ),
            ),
        }
    }
    admin.token = t.nonempty_str(ctx, "token").map(|s| s.v.to_owned());
    admin
}

// ---------------------------------------------------------------------------------------------
// [[listener]]

const LISTENER_KEYS: &[&str] = &[
    "name",
    "protocol",
    "port",
    "regions",
    "failover",
    "fail_open",
    "affinity",
    "connect_timeout",
    "idle_timeout",
    "drain_timeout",
    "max_connections",
    "proxy_protocol",
    "header_timeout",
    "upstream_timeout",
    "retry",
    "tries",
    "retry_timeout",
    "retry_non_idempotent",
    "unhealthy_status",
    "sticky",
    "udp_max_flows",
    "tls",
    "route",
    "group",
];

const HTTP: &str = "http/https listeners";

fn listeners(ctx: &mut Ctx<'_>, env: &Env<'_>, root: &Table<'_, '_>) -> Vec<Listener> {
    let mut out = Vec::new();
    // Name → position of the first listener with it; (transport, port) → first listener there.
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut ports: HashMap<(bool, u16), (String, Protocol)> = HashMap::new();
    for (i, v) in root.tables(ctx, "listener").into_iter().enumerate() {
        let path = item_path("", "listener", peek_str(v, "name"), i + 1);
        let Some(t) = Table::of(ctx, v, "listener", "", path) else {
            continue;
        };
        let Some(l) = listener(ctx, env, &t) else {
            continue;
        };
        if let Some(at) = t.value_at("name") {
            if let Some(first) = names.get(&l.name) {
                let line = position(ctx.text(), *first).0;
                ctx.error(
                    at,
                    &t.path,
                    format!(
                        "duplicate listener name {} (first defined at line {line})",
                        quote(&l.name)
                    ),
                );
            } else {
                names.insert(l.name.clone(), at);
            }
        }
        if let Some(at) = t.value_at("port") {
            let tcp = l.protocol != Protocol::Udp;
            if let Some((other, proto)) = ports.get(&(tcp, l.port)) {
                let msg = if tcp {
                    format!(
                        "port {} is already used by listener {} ({proto}); tcp, http and https listeners share TCP ports",
                        l.port,
                        quote(other)
                    )
                } else {
                    format!(
                        "port {} is already used by udp listener {}",
                        l.port,
                        quote(other)
                    )
                };
                ctx.error(at, &t.path, msg);
            } else {
                ports.insert((tcp, l.port), (l.name.clone(), l.protocol));
            }
        }
        out.push(l);
    }
    out
}

/// One listener; `None` when its protocol or port is unusable (other checks still ran).
fn listener(ctx: &mut Ctx<'_>, env: &Env<'_>, t: &Table<'_, '_>) -> Option<Listener> {
    t.check_keys(ctx, LISTENER_KEYS);
    let name = t.req_str(ctx, "name");
    if let Some(n) = name {
        check_name(ctx, n, &t.path, "listener");
    }
    if !t.has("protocol") {
        t.missing(ctx, "protocol");
    }
    let protocol = choice(
        ctx,
        t,
        "protocol",
        &[
            ("tcp", Protocol::Tcp),
            ("udp", Protocol::Udp),
            ("http", Protocol::Http),
            ("https", Protocol::Https),
        ],
    )
    .map(|p| p.v);
    if !t.has("port") {
        t.missing(ctx, "port");
    }
    let port = t.port(ctx, "port").map(|p| p.v);
    let regions = listener_regions(ctx, env, t);

    let failover = choice(
        ctx,
        t,
        "failover",
        &[
            ("next-priority", FailoverMode::NextPriority),
            ("recompute", FailoverMode::Recompute),
        ],
    )
    .map_or(FailoverMode::default(), |f| f.v);
    let fail_open = t.bool(ctx, "fail_open").unwrap_or(false);
    let affinity = choice(
        ctx,
        t,
        "affinity",
        &[("none", Affinity::None), ("source-ip", Affinity::SourceIp)],
    )
    .map_or(Affinity::default(), |a| a.v);
    let connect_timeout = t
        .positive_duration(ctx, "connect_timeout")
        .map_or(Duration::from_secs(5), |d| d.v);
    let default_idle = match protocol {
        Some(Protocol::Tcp) | None => 300,
        Some(Protocol::Udp) => 30,
        Some(Protocol::Http | Protocol::Https) => 60,
    };
    let idle_timeout = t
        .positive_duration(ctx, "idle_timeout")
        .map_or(Duration::from_secs(default_idle), |d| d.v);
    let drain_timeout = t
        .duration(ctx, "drain_timeout")
        .map_or(Duration::from_secs(30), |d| d.v);
    let max_connections = t
        .u32(ctx, "max_connections", 1, None)
        .map_or(100_000, |n| n.v);

    // Keys that belong to some protocols only. Without a valid protocol they are not judged.
    let is = |f: fn(Protocol) -> bool| protocol.is_none_or(f);
    let http = is(Protocol::is_http);
    let mut proxy_protocol = None;
    if only_for(
        ctx,
        t,
        "proxy_protocol",
        is(|p| p == Protocol::Tcp),
        "tcp listeners",
    ) && let Some(s) = t.str(ctx, "proxy_protocol")
    {
        if s.v == "v2" {
            proxy_protocol = Some(ProxyProtocol::V2);
        } else {
            let msg = format!(
                "proxy_protocol {} is not supported; the only version is \"v2\"",
                quote(s.v)
            );
            ctx.error(s.at, &t.path, msg);
        }
    }
    let mut header_timeout = Duration::from_secs(10);
    if only_for(ctx, t, "header_timeout", http, HTTP) {
        header_timeout = t
            .positive_duration(ctx, "header_timeout")
            .map_or(header_timeout, |d| d.v);
    }
    let mut upstream_timeout = Duration::from_secs(60);
    if only_for(ctx, t, "upstream_timeout", http, HTTP) {
        upstream_timeout = t
            .positive_duration(ctx, "upstream_timeout")
            .map_or(upstream_timeout, |d| d.v);
    }
    let not_udp = is(|p| p != Protocol::Udp);
    let (mut retry, mut tries, mut retry_timeout) = (true, 3, Duration::from_secs(10));
    if only_for(ctx, t, "retry", not_udp, "tcp/http/https listeners") {
        retry = t.bool(ctx, "retry").unwrap_or(retry);
    }
    if only_for(ctx, t, "tries", not_udp, "tcp/http/https listeners") {
        tries = t.u32(ctx, "tries", 1, Some(10)).map_or(tries, |n| n.v);
    }
    if only_for(ctx, t, "retry_timeout", not_udp, "tcp/http/https listeners") {
        retry_timeout = t
            .positive_duration(ctx, "retry_timeout")
            .map_or(retry_timeout, |d| d.v);
    }
    let mut retry_non_idempotent = false;
    if only_for(ctx, t, "retry_non_idempotent", http, HTTP) {
        retry_non_idempotent = t.bool(ctx, "retry_non_idempotent").unwrap_or(false);
    }
    let mut unhealthy_status = StatusSet::default();
    if only_for(ctx, t, "unhealthy_status", http, HTTP) {
        unhealthy_status = status_set(ctx, t, "unhealthy_status").unwrap_or_default();
    }
    let mut sticky = None;
    if only_for(ctx, t, "sticky", http, HTTP) {
        sticky = sticky_cookie(ctx, t);
    }
    let mut udp_max_flows = 65_536;
    if only_for(
        ctx,
        t,
        "udp_max_flows",
        is(|p| p == Protocol::Udp),
        "udp listeners",
    ) {
        udp_max_flows = t
            .int(ctx, "udp_max_flows", 1, None)
            .map_or(udp_max_flows, |n| n.v as usize);
    }
    let mut tls = None;
    if only_for(
        ctx,
        t,
        "tls",
        is(|p| p == Protocol::Https),
        "https listeners",
    ) {
        tls = server_tls(ctx, env, t);
        if protocol == Some(Protocol::Https) && !t.has("tls") {
            let msg = "https listeners need tls = { certs = [{ cert = \"site.pem\", key = \"site.key\" }] }";
            ctx.error(t.at, &t.path, msg);
        }
    }

    let groups = groups(ctx, env, t, protocol, &regions);
    if groups.len() > crate::split::MAX_GROUPS {
        let msg = format!(
            "{} groups; a listener holds at most {}",
            groups.len(),
            crate::split::MAX_GROUPS
        );
        ctx.error(t.at, &t.path, &msg);
    }
    let mut routes = Vec::new();
    if only_for(ctx, t, "route", http, HTTP) {
        routes = self::routes(ctx, t, &groups);
    }

    Some(Listener {
        name: name.map(|n| n.v.to_owned()).unwrap_or_default(),
        protocol: protocol?,
        port: port?,
        regions: regions.iter().map(|r| r.v.to_owned()).collect(),
        failover,
        fail_open,
        affinity,
        connect_timeout,
        idle_timeout,
        drain_timeout,
        max_connections,
        proxy_protocol,
        header_timeout,
        upstream_timeout,
        retry,
        tries,
        retry_timeout,
        retry_non_idempotent,
        unhealthy_status,
        sticky,
        udp_max_flows,
        tls,
        routes,
        groups: groups.into_iter().map(|g| g.group).collect(),
    })
}

/// `regions = [...]`: non-empty, unique, each in the catalogue.
fn listener_regions<'t>(ctx: &mut Ctx<'_>, env: &Env<'_>, t: &Table<'t, '_>) -> Vec<At<&'t str>> {
    if !t.has("regions") {
        t.missing(ctx, "regions");
        return Vec::new();
    }
    let Some(items) = t.array(ctx, "regions") else {
        return Vec::new();
    };
    if items.is_empty() {
        let at = t.value_at("regions").unwrap_or(t.at);
        ctx.error(
            at,
            &t.path,
            "\"regions\" must name at least one acceleration region",
        );
    }
    let mut out: Vec<At<&str>> = Vec::new();
    for item in items {
        let Some(id) = as_str(ctx, item, &t.path, "each entry of \"regions\"") else {
            continue;
        };
        let id = At {
            v: id,
            at: item.span().start,
        };
        if out.iter().any(|r| r.v == id.v) {
            ctx.error(
                id.at,
                &t.path,
                format!("region {} is listed twice", quote(id.v)),
            );
            continue;
        }
        env.region(ctx, id, &t.path);
        out.push(id);
    }
    out
}

fn sticky_cookie(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> Option<Sticky> {
    let s = t.table(ctx, "sticky", t.path.clone())?;
    s.check_keys(ctx, &["cookie"]);
    let cookie = s.req_str(ctx, "cookie")?;
    if !syntax::is_cookie_name(cookie.v) {
        ctx.error(
            cookie.at,
            &s.path,
            format!("{} is not a valid cookie name", quote(cookie.v)),
        );
        return None;
    }
    Some(Sticky {
        cookie: cookie.v.to_owned(),
    })
}

fn server_tls(ctx: &mut Ctx<'_>, env: &Env<'_>, t: &Table<'_, '_>) -> Option<ServerTls> {
    let tls = t.table(ctx, "tls", t.path.clone())?;
    tls.check_keys(ctx, &["certs"]);
    if !tls.has("certs") {
        tls.missing(ctx, "certs");
        return None;
    }
    let pairs = tls.tables(ctx, "certs");
    if pairs.is_empty() && tls.array(ctx, "certs").is_some_and(|a| a.is_empty()) {
        let at = tls.value_at("certs").unwrap_or(tls.at);
        ctx.error(
            at,
            &tls.path,
            "\"certs\" must list at least one { cert, key } pair",
        );
    }
    let mut certs = Vec::new();
    for v in pairs {
        let Some(pair) = Table::of(
            ctx,
            v,
            "each entry of \"certs\"",
            &tls.path,
            tls.path.clone(),
        ) else {
            continue;
        };
        pair.check_keys(ctx, &["cert", "key"]);
        for key in ["cert", "key"] {
            if !pair.has(key) {
                pair.missing(ctx, key);
            }
        }
        let cert = env.file(ctx, &pair, "cert");
        let key = env.file(ctx, &pair, "key");
        if let (Some(cert), Some(key)) = (cert, key) {
            pem_pair(ctx, &pair, ("cert", &cert), ("key", &key));
            certs.push(CertPair { cert, key });
        }
    }
    Some(ServerTls { certs })
}

/// Reads a certificate chain and its key as the node will (`nginx -t` and `haproxy -c` load
/// them too): a file that holds something else, or a key that does not belong to its
/// certificate, is an error at the value that names it.
fn pem_pair(
    ctx: &mut Ctx<'_>,
    t: &Table<'_, '_>,
    (cert_key, cert): (&str, &Path),
    (key_key, key): (&str, &Path),
) {
    if let Err((faulty, e)) = crate::pem::certified(cert, key, &crate::pem::provider()) {
        let field = match faulty {
            crate::pem::Faulty::Cert => cert_key,
            crate::pem::Faulty::Key => key_key,
        };
        if let Some(at) = t.value_at(field) {
            ctx.error(at, &t.path, e);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// [[listener.route]]

fn routes(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, groups: &[GroupRead<'_>]) -> Vec<Route> {
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

/// True when `earlier` takes every request `later` would match (SPEC 3.5 ties go by config
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

// ---------------------------------------------------------------------------------------------
// [[listener.group]]

const GROUP_KEYS: &[&str] = &[
    "name",
    "region",
    "ratio",
    "priority",
    "balance",
    "hash_key",
    "consistent",
    "two",
    "measure",
    "factor",
    "feedback_header",
    "inverse",
    "min_healthy",
    "health_check",
    "path_prefix",
    "keepalive",
    "tls",
    "endpoint",
];

/// A group as read, with what the listener-wide checks need to point at.
struct GroupRead<'t> {
    group: Group,
    table: Table<'t, 't>,
    /// Where the name value is, when valid.
    name_at: Option<usize>,
    /// (region, rank, position) of every rank the priority gives (a fixed rank: every region).
    ranks: Vec<(String, u32, usize)>,
}

/// The `[[key]]` tables of `t`, which must have at least one: `None` (after an error at `t`)
/// when the key is missing; an error at the value when it is an empty array.
fn required_tables<'t, 'i>(
    ctx: &mut Ctx<'_>,
    t: &Table<'t, 'i>,
    key: &str,
    message: &str,
) -> Option<Vec<&'t Value<'i>>> {
    if !t.has(key) {
        ctx.error(t.at, &t.path, message);
        return None;
    }
    let tables = t.tables(ctx, key);
    if tables.is_empty() && t.array(ctx, key).is_some_and(|a| a.is_empty()) {
        let at = t.value_at(key).unwrap_or(t.at);
        ctx.error(at, &t.path, message);
    }
    Some(tables)
}

fn groups<'t>(
    ctx: &mut Ctx<'_>,
    env: &Env<'_>,
    t: &Table<'t, '_>,
    protocol: Option<Protocol>,
    regions: &[At<&str>],
) -> Vec<GroupRead<'t>> {
    let Some(tables) = required_tables(
        ctx,
        t,
        "group",
        "a listener needs at least one [[listener.group]]",
    ) else {
        return Vec::new();
    };
    let mut out: Vec<GroupRead<'t>> = Vec::new();
    for (i, v) in tables.into_iter().enumerate() {
        let path = item_path(&t.path, "group", peek_str(v, "name"), i + 1);
        let Some(g) = Table::of(ctx, v, "group", &t.path, path) else {
            continue;
        };
        let g = group(ctx, env, g, protocol, regions);
        if let Some(at) = g.name_at
            && let Some(first) = out
                .iter()
                .find(|o| o.name_at.is_some() && o.group.name == g.group.name)
        {
            let line = position(ctx.text(), first.name_at.unwrap_or(0)).0;
            let msg = format!(
                "duplicate group name {} (first defined at line {line})",
                quote(&g.group.name)
            );
            ctx.error(at, &g.table.path, msg);
        }
        out.push(g);
    }
    priorities(ctx, &out);
    out
}

/// Either every group sets `priority` or none does; no two share a rank for one region.
fn priorities(ctx: &mut Ctx<'_>, groups: &[GroupRead<'_>]) {
    if let Some(with) = groups.iter().find(|g| g.table.has("priority")) {
        for g in groups.iter().filter(|g| !g.table.has("priority")) {
            let msg = format!(
                "priority is set on group {} but not on this one; set it on every group of the listener or on none",
                quote(&with.group.name)
            );
            ctx.error(g.table.at, &g.table.path, msg);
        }
    }
    // (region, rank) → group that took it.
    let mut taken: HashMap<(&str, u32), &str> = HashMap::new();
    for g in groups {
        let mut reported: Vec<&str> = Vec::new();
        for (region, rank, at) in &g.ranks {
            match taken.get(&(region.as_str(), *rank)) {
                Some(other) if !reported.contains(other) => {
                    reported.push(other);
                    let msg = match (&g.group.priority, other_priority(groups, other)) {
                        (Some(Priority::Fixed(_)), Some(Priority::Fixed(_))) => {
                            format!("priority {rank} is also used by group {}", quote(other))
                        }
                        _ => format!(
                            "priority {rank} for region {} is also used by group {}",
                            quote(region),
                            quote(other)
                        ),
                    };
                    ctx.error(*at, &g.table.path, msg);
                }
                Some(_) => {}
                None => {
                    taken.insert((region.as_str(), *rank), g.group.name.as_str());
                }
            }
        }
    }
}

fn other_priority<'a>(groups: &'a [GroupRead<'_>], name: &str) -> Option<&'a Priority> {
    groups
        .iter()
        .find(|g| g.group.name == name)?
        .group
        .priority
        .as_ref()
}

fn group<'t>(
    ctx: &mut Ctx<'_>,
    env: &Env<'_>,
    t: Table<'t, 't>,
    protocol: Option<Protocol>,
    regions: &[At<&str>],
) -> GroupRead<'t> {
    t.check_keys(ctx, GROUP_KEYS);
    let name = t
        .req_str(ctx, "name")
        .filter(|n| check_name(ctx, *n, &t.path, "group"));
    let region = t
        .req_str(ctx, "region")
        .filter(|r| env.region(ctx, *r, &t.path));
    let ratio = ratio(ctx, &t);
    let (priority, ranks) = priority(ctx, env, &t, regions);
    let balance = balance(ctx, &t, protocol);
    let health_check = t
        .table(ctx, "health_check", format!("{} health_check", t.path))
        .and_then(|h| {
            env.unrun_checks.borrow_mut().push(h.at);
            health_check(ctx, &h)
        });
    let is = |f: fn(Protocol) -> bool| protocol.is_none_or(f);
    let mut path_prefix = None;
    if only_for(ctx, &t, "path_prefix", is(Protocol::is_http), HTTP) {
        path_prefix = t
            .str(ctx, "path_prefix")
            .filter(|p| slash_path(ctx, *p, &t.path, "path_prefix"))
            .map(|p| p.v.to_owned());
    }
    let mut keepalive = 32;
    if only_for(ctx, &t, "keepalive", is(Protocol::is_http), HTTP) {
        keepalive = t.u32(ctx, "keepalive", 0, None).map_or(keepalive, |n| n.v);
    }
    let tls = t
        .table(ctx, "tls", t.path.clone())
        .and_then(|tls| upstream_tls(ctx, env, &tls));
    let endpoints = endpoints(ctx, &t, balance.as_ref().map(|b| b.1));

    let min_healthy = match t.u32(ctx, "min_healthy", 1, None) {
        Some(n) if !endpoints.is_empty() && n.v as usize > endpoints.len() => {
            let msg = format!(
                "min_healthy {} is more than the group's {} endpoint{}",
                n.v,
                endpoints.len(),
                if endpoints.len() == 1 { "" } else { "s" }
            );
            ctx.error(n.at, &t.path, msg);
            1
        }
        Some(n) => n.v,
        None => 1,
    };

    GroupRead {
        name_at: name.map(|n| n.at),
        ranks,
        group: Group {
            name: name.map(|n| n.v.to_owned()).unwrap_or_default(),
            region: region.map(|r| r.v.to_owned()).unwrap_or_default(),
            ratio,
            priority,
            balance: balance.map_or(Balance::RoundRobin, |b| b.0),
            min_healthy,
            health_check,
            path_prefix,
            keepalive,
            tls,
            endpoints,
        },
        table: t,
    }
}

/// `ratio`: an integer or float in 0..=100, default 100.
fn ratio(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> f64 {
    let Some(n) = t.number(ctx, "ratio") else {
        return 100.0;
    };
    let (x, written) = n.v;
    if (0.0..=100.0).contains(&x) {
        x
    } else {
        ctx.error(
            n.at,
            &t.path,
            format!("ratio {written} is out of range 0..=100"),
        );
        100.0
    }
}

/// `priority`: a rank >= 1, or a table region → rank covering every region of the listener.
fn priority(
    ctx: &mut Ctx<'_>,
    env: &Env<'_>,
    t: &Table<'_, '_>,
    regions: &[At<&str>],
) -> (Option<Priority>, Vec<(String, u32, usize)>) {
    let Some(v) = t.value("priority") else {
        return (None, Vec::new());
    };
    let at = v.span().start;
    match v.get_ref() {
        toml::de::DeValue::Integer(_) => {
            let Some(rank) = t.u32(ctx, "priority", 1, None) else {
                return (None, Vec::new());
            };
            let ranks = regions
                .iter()
                .map(|r| (r.v.to_owned(), rank.v, at))
                .collect();
            (Some(Priority::Fixed(rank.v)), ranks)
        }
        toml::de::DeValue::Table(_) => {
            let Some(table) = Table::of(ctx, v, "\"priority\"", &t.path, t.path.clone()) else {
                return (None, Vec::new());
            };
            let mut map = BTreeMap::new();
            let mut ranks = Vec::new();
            let names: Vec<&str> = regions.iter().map(|r| r.v).collect();
            for (region, value) in table.entries() {
                if !names.contains(&region.v) {
                    let (region_name, served) = (quote(region.v), names.join(", "));
                    if env.catalog.is_some_and(|c| c.get(region.v).is_some()) {
                        // One table copied to listeners served from fewer regions: a rank for
                        // a region that does not serve this listener is never used.
                        let msg = format!(
                            "priority ranks region {region_name}, which does not serve this \
                             listener ({served}); ignored"
                        );
                        ctx.warn(region.at, &t.path, msg);
                    } else {
                        let hint = did_you_mean(region.v, names.iter().copied());
                        let msg = format!(
                            "priority ranks region {region_name}, which is not a region of this \
                             listener ({served}){hint}"
                        );
                        ctx.error(region.at, &t.path, msg);
                    }
                    continue;
                }
                let what = format!("priority for {}", quote(region.v));
                let Some(rank) = as_int(ctx, value, &t.path, &what) else {
                    continue;
                };
                let vat = value.span().start;
                let Some(rank) = u32::try_from(rank).ok().filter(|r| *r >= 1) else {
                    ctx.error(
                        vat,
                        &t.path,
                        format!("priority {rank} for {} must be at least 1", quote(region.v)),
                    );
                    continue;
                };
                map.insert(region.v.to_owned(), rank);
                ranks.push((region.v.to_owned(), rank, vat));
            }
            for r in regions {
                if !table.has(r.v) {
                    let msg = format!(
                        "priority has no rank for region {}; a priority table must rank every region of the listener",
                        quote(r.v)
                    );
                    ctx.error(at, &t.path, msg);
                }
            }
            (Some(Priority::PerRegion(map)), ranks)
        }
        other => {
            let msg = format!(
                "\"priority\" must be an integer or a table of region = rank, found {}",
                describe(other)
            );
            ctx.error(at, &t.path, msg);
            (None, Vec::new())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Balancing methods (SPEC 4)

/// A balancing method before its parameters are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    RoundRobin,
    Hash,
    IpHash,
    LeastConn,
    Random,
    LeastTime,
    Feedback,
}

/// Names accepted for `balance`, Apigee's aliases included.
const METHODS: &[(&str, Method)] = &[
    ("round_robin", Method::RoundRobin),
    ("hash", Method::Hash),
    ("ip_hash", Method::IpHash),
    ("least_conn", Method::LeastConn),
    ("random", Method::Random),
    ("least_time", Method::LeastTime),
    ("feedback", Method::Feedback),
    ("RoundRobin", Method::RoundRobin),
    ("Weighted", Method::RoundRobin),
    ("LeastConnections", Method::LeastConn),
];

/// The group-level keys that are parameters of some method.
const METHOD_PARAMS: &[&str] = &[
    "hash_key",
    "consistent",
    "two",
    "measure",
    "factor",
    "feedback_header",
    "inverse",
];

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::RoundRobin => "round_robin",
            Method::Hash => "hash",
            Method::IpHash => "ip_hash",
            Method::LeastConn => "least_conn",
            Method::Random => "random",
            Method::LeastTime => "least_time",
            Method::Feedback => "feedback",
        }
    }

    /// The group-level parameters the method takes.
    fn params(self) -> &'static [&'static str] {
        match self {
            Method::Hash => &["hash_key", "consistent"],
            Method::Random => &["two"],
            Method::LeastTime => &["measure", "factor"],
            Method::Feedback => &["feedback_header", "inverse", "factor"],
            Method::RoundRobin | Method::IpHash | Method::LeastConn => &[],
        }
    }

    /// Whether endpoints may set this parameter under the method (SPEC 4's table).
    fn endpoint_param(self, key: &str) -> bool {
        match key {
            "weight" => self != Method::LeastTime,
            "slow_start" | "backup" => {
                !matches!(self, Method::Hash | Method::IpHash | Method::Random)
            }
            _ => true,
        }
    }

    /// Records `balancing method "m" does not support parameter "p"` at the key.
    fn reject(self, ctx: &mut Ctx<'_>, t: &Table<'_, '_>, key: &str) {
        if let Some(at) = t.key_at(key) {
            let msg = format!(
                "balancing method {} does not support parameter {}",
                quote(self.name()),
                quote(key)
            );
            ctx.error(at, &t.path, msg);
        }
    }
}

/// The `balance` value: a method name or one of Apigee's aliases.
fn method(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> Option<At<Method>> {
    let v = t.value("balance")?;
    let at = v.span().start;
    let canonical: Vec<&str> = METHODS.iter().take(7).map(|(n, _)| *n).collect();
    let s = as_str(ctx, v, &t.path, "\"balance\"")?;
    if let Some((_, m)) = METHODS.iter().find(|(n, _)| *n == s) {
        return Some(At { v: *m, at });
    }
    let hint = did_you_mean(s, METHODS.iter().map(|(n, _)| *n));
    let msg = format!(
        "unknown balancing method {} (expected {}){hint}",
        quote(s),
        one_of(&canonical)
    );
    ctx.error(at, &t.path, msg);
    None
}

/// `balance` and its parameters; `None` when the method is unknown.
fn balance(
    ctx: &mut Ctx<'_>,
    t: &Table<'_, '_>,
    protocol: Option<Protocol>,
) -> Option<(Balance, Method)> {
    let (method, at) = if t.has("balance") {
        let m = method(ctx, t)?;
        (m.v, m.at)
    } else {
        (Method::RoundRobin, t.at)
    };
    for key in METHOD_PARAMS {
        if !method.params().contains(key) {
            method.reject(ctx, t, key);
        }
    }
    let http = protocol.is_none_or(Protocol::is_http);
    let balance = match method {
        Method::RoundRobin => Balance::RoundRobin,
        Method::LeastConn => Balance::LeastConn,
        Method::IpHash => {
            if !http {
                let msg = "balancing method \"ip_hash\" is only for http/https listeners; on tcp/udp use \
                           balance = \"hash\" with hash_key = \"$remote_addr\"";
                ctx.error(at, &t.path, msg);
            }
            Balance::IpHash
        }
        Method::Hash => {
            let key = match t.str(ctx, "hash_key") {
                Some(s) => hash_key(ctx, t, s, http),
                None => {
                    if !t.has("hash_key") {
                        let msg = "balancing method \"hash\" needs a hash_key, like hash_key = \"$remote_addr\"";
                        ctx.error(at, &t.path, msg);
                    }
                    None
                }
            };
            let consistent = t.bool(ctx, "consistent").unwrap_or(false);
            Balance::Hash {
                key: key.unwrap_or(KeyTemplate {
                    text: String::new(),
                    parts: Vec::new(),
                }),
                consistent,
            }
        }
        Method::Random => Balance::Random {
            two: t.bool(ctx, "two").unwrap_or(false),
        },
        Method::LeastTime => {
            let measure = measure(ctx, t, protocol);
            Balance::LeastTime {
                measure,
                factor: factor(ctx, t),
            }
        }
        Method::Feedback => {
            let header = match t.nonempty_str(ctx, "feedback_header") {
                Some(h) if syntax::is_header_name(h.v) => h.v.to_owned(),
                Some(h) => {
                    ctx.error(
                        h.at,
                        &t.path,
                        format!("{} is not a valid header name", quote(h.v)),
                    );
                    String::new()
                }
                None => {
                    if !t.has("feedback_header") {
                        let msg = "balancing method \"feedback\" needs feedback_header, the response header \
                                   carrying each endpoint's value";
                        ctx.error(at, &t.path, msg);
                    }
                    String::new()
                }
            };
            let inverse = t.bool(ctx, "inverse").unwrap_or(false);
            Balance::Feedback {
                header,
                inverse,
                factor: factor(ctx, t),
            }
        }
    };
    Some((balance, method))
}

/// `hash_key`: a template whose variables exist for the listener's protocol.
fn hash_key(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, s: At<&str>, http: bool) -> Option<KeyTemplate> {
    match syntax::parse_key_template(s.v) {
        Ok(key) => {
            if !http && let Some(part) = key.parts.iter().find(|p| p.http_only()) {
                let var = match part {
                    KeyPart::RequestUri => "$request_uri".to_owned(),
                    KeyPart::Header(h) => format!("$http_{}", h.replace('-', "_")),
                    KeyPart::Cookie(c) => format!("$cookie_{c}"),
                    KeyPart::RemoteAddr | KeyPart::Literal(_) => String::new(),
                };
                let msg = format!(
                    "hash_key variable {} is only available on http/https listeners; tcp/udp listeners can use $remote_addr",
                    quote(&var)
                );
                ctx.error(s.at, &t.path, msg);
                return None;
            }
            Some(key)
        }
        Err(why) => {
            ctx.error(
                s.at,
                &t.path,
                format!("invalid hash_key {}: {why}", quote(s.v)),
            );
            None
        }
    }
}

/// `measure` of least_time, checked against the listener's protocol.
fn measure(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, protocol: Option<Protocol>) -> Measure {
    const ALL: &[(&str, Measure)] = &[
        ("header", Measure::Header),
        ("last_byte", Measure::LastByte),
        ("connect", Measure::Connect),
        ("first_byte", Measure::FirstByte),
    ];
    let http = protocol.is_none_or(Protocol::is_http);
    let default = if http {
        Measure::Header
    } else {
        Measure::Connect
    };
    let Some(m) = choice(ctx, t, "measure", ALL) else {
        return default;
    };
    let Some(protocol) = protocol else { return m.v };
    let ok = match m.v {
        Measure::Header => protocol.is_http(),
        Measure::Connect | Measure::FirstByte => !protocol.is_http(),
        Measure::LastByte => true,
    };
    if !ok {
        let name = ALL.iter().find(|(_, v)| *v == m.v).map_or("", |(n, _)| n);
        let msg = if protocol.is_http() {
            format!(
                "measure {} is only for tcp/udp listeners; http/https listeners measure \"header\" or \"last_byte\"",
                quote(name)
            )
        } else {
            format!(
                "measure {} is only for http/https listeners; tcp/udp listeners measure \"connect\", \"first_byte\" or \"last_byte\"",
                quote(name)
            )
        };
        ctx.error(m.at, &t.path, msg);
    }
    m.v
}

/// `factor`: the weight the history keeps per sample, in [0, 1), default 0.9.
fn factor(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> f64 {
    let Some(n) = t.number(ctx, "factor") else {
        return 0.9;
    };
    let (x, written) = n.v;
    if (0.0..1.0).contains(&x) {
        x
    } else {
        ctx.error(
            n.at,
            &t.path,
            format!("factor {written} is out of range 0..1 (at least 0, below 1)"),
        );
        0.9
    }
}

// ---------------------------------------------------------------------------------------------
// [listener.group.health_check] (SPEC 5)

const CHECK_KEYS: &[&str] = &[
    "protocol",
    "port",
    "interval",
    "timeout",
    "connect_timeout",
    "read_timeout",
    "healthy_threshold",
    "unhealthy_threshold",
    "method",
    "path",
    "host",
    "headers",
    "body",
    "expect_status",
    "expect_headers",
    "expect_body",
    "id_header",
    "essential",
    "explicit",
];

/// Keys that only mean something when the check sends an HTTP request.
const CHECK_HTTP_KEYS: &[&str] = &[
    "read_timeout",
    "method",
    "path",
    "host",
    "headers",
    "body",
    "expect_status",
    "expect_headers",
    "expect_body",
    "id_header",
    "explicit",
];

fn health_check(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> Option<HealthCheck> {
    t.check_keys(ctx, CHECK_KEYS);
    let protocol = choice(
        ctx,
        t,
        "protocol",
        &[
            ("tcp", CheckProtocol::Tcp),
            ("http", CheckProtocol::Http),
            ("https", CheckProtocol::Https),
        ],
    );
    // No protocol means tcp; an invalid one (already reported) leaves HTTP keys unjudged.
    let http = match protocol {
        Some(p) => p.v != CheckProtocol::Tcp,
        None => t.has("protocol"),
    };
    // With a tcp check, HTTP keys are reported and then not read.
    let mut http_ok = |key: &str| only_for(ctx, t, key, http, "http/https health checks");
    let allowed: Vec<&str> = CHECK_HTTP_KEYS
        .iter()
        .copied()
        .filter(|k| http_ok(k))
        .collect();
    let read = |key: &str| allowed.contains(&key);

    let port = t.port(ctx, "port").map(|p| p.v);
    let interval = match t.positive_duration(ctx, "interval") {
        Some(d) if d.v < Duration::from_secs(1) => {
            let msg = format!(
                "interval {} is below the minimum of 1s",
                format_duration(d.v)
            );
            ctx.error(d.at, &t.path, msg);
            Duration::from_secs(5)
        }
        Some(d) => d.v,
        None => Duration::from_secs(5),
    };
    let (connect_timeout, read_timeout, timeout) =
        check_timeouts(ctx, t, interval, http && read("read_timeout"));
    let healthy_threshold = t.u32(ctx, "healthy_threshold", 1, None).map_or(2, |n| n.v);
    let unhealthy_threshold = t
        .u32(ctx, "unhealthy_threshold", 1, None)
        .map_or(3, |n| n.v);

    let mut method = CheckMethod::Get;
    if read("method") {
        let methods = [
            ("GET", CheckMethod::Get),
            ("PUT", CheckMethod::Put),
            ("POST", CheckMethod::Post),
            ("DELETE", CheckMethod::Delete),
        ];
        method = choice(ctx, t, "method", &methods).map_or(method, |m| m.v);
    }
    let mut path = "/".to_owned();
    if read("path")
        && let Some(p) = t
            .str(ctx, "path")
            .filter(|p| slash_path(ctx, *p, &t.path, "path"))
    {
        path = p.v.to_owned();
    }
    let host = if read("host") {
        t.nonempty_str(ctx, "host").map(|h| h.v.to_owned())
    } else {
        None
    };
    let headers = if read("headers") {
        header_map(ctx, t, "headers")
    } else {
        BTreeMap::new()
    };
    let body = if read("body") {
        t.str(ctx, "body").map(|b| b.v.to_owned())
    } else {
        None
    };
    let mut expect_status = StatusSet(vec![200..=200]);
    if read("expect_status")
        && let Some(set) = status_set(ctx, t, "expect_status")
    {
        // Entries that did not parse were reported already; only a list written empty is.
        let written_empty = t
            .value("expect_status")
            .and_then(|v| v.get_ref().as_array())
            .is_some_and(|a| a.is_empty());
        if written_empty {
            let at = t.value_at("expect_status").unwrap_or(t.at);
            ctx.error(
                at,
                &t.path,
                "\"expect_status\" must list at least one status, like [200]",
            );
        } else if !set.is_empty() {
            expect_status = set;
        }
    }
    let expect_headers = if read("expect_headers") {
        header_map(ctx, t, "expect_headers")
    } else {
        BTreeMap::new()
    };
    let expect_body = if read("expect_body") {
        t.str(ctx, "expect_body").map(|b| b.v.to_owned())
    } else {
        None
    };
    let id_header = read("id_header") && t.bool(ctx, "id_header").unwrap_or(false);
    let essential = t.bool(ctx, "essential").unwrap_or(false);
    let explicit = read("explicit") && t.bool(ctx, "explicit").unwrap_or(false);

    Some(HealthCheck {
        protocol: protocol.map_or(CheckProtocol::Tcp, |p| p.v),
        port,
        interval,
        timeout,
        connect_timeout,
        read_timeout,
        healthy_threshold,
        unhealthy_threshold,
        method,
        path,
        host,
        headers,
        body,
        expect_status,
        expect_headers,
        expect_body,
        id_header,
        essential,
        explicit,
    })
}

/// One health-check timeout `key`, which may not exceed `interval` (checks would overlap);
/// `default` when unset or wrong.
fn single_timeout(
    ctx: &mut Ctx<'_>,
    t: &Table<'_, '_>,
    key: &str,
    interval: Duration,
    default: Duration,
) -> Duration {
    match t.positive_duration(ctx, key) {
        Some(d) if d.v > interval => {
            let msg = format!(
                "{key} {} is above interval {}; checks would overlap",
                format_duration(d.v),
                format_duration(interval)
            );
            ctx.error(d.at, &t.path, msg);
            default
        }
        Some(d) => d.v,
        None => default,
    }
}

/// `timeout`, or `connect_timeout` + `read_timeout`; never above `interval`.
/// Returns (connect, read, whole check).
fn check_timeouts(
    ctx: &mut Ctx<'_>,
    t: &Table<'_, '_>,
    interval: Duration,
    http: bool,
) -> (Duration, Duration, Duration) {
    let default = interval.min(Duration::from_secs(30));
    let split = t.has("connect_timeout") || (http && t.has("read_timeout"));
    if t.has("timeout") && split {
        for key in ["connect_timeout", "read_timeout"] {
            if let Some(at) = t.key_at(key) {
                let msg =
                    "set either \"timeout\" or \"connect_timeout\" and \"read_timeout\", not both";
                ctx.error(at, &t.path, msg);
            }
        }
        return (default, default, default);
    }
    if !split {
        let d = single_timeout(ctx, t, "timeout", interval, default);
        return (d, d, d);
    }
    if !http {
        // A tcp check only connects; read_timeout mirrors connect_timeout and is unused.
        let d = single_timeout(ctx, t, "connect_timeout", interval, default);
        return (d, d, d);
    }
    let connect = t.positive_duration(ctx, "connect_timeout");
    let read = t.positive_duration(ctx, "read_timeout");
    for (key, other) in [
        ("connect_timeout", "read_timeout"),
        ("read_timeout", "connect_timeout"),
    ] {
        if let (Some(at), false) = (t.key_at(key), t.has(other)) {
            let msg = format!(
                "{} needs {} too (or use \"timeout\" alone)",
                quote(key),
                quote(other)
            );
            ctx.error(at, &t.path, msg);
        }
    }
    match (connect, read) {
        (Some(c), Some(r)) if c.v + r.v > interval => {
            let msg = format!(
                "connect_timeout {} + read_timeout {} is above interval {}; checks would overlap",
                format_duration(c.v),
                format_duration(r.v),
                format_duration(interval)
            );
            ctx.error(c.at.max(r.at), &t.path, msg);
            (default, default, default)
        }
        (Some(c), Some(r)) => (c.v, r.v, c.v + r.v),
        _ => (default, default, default),
    }
}

/// A table of header name → value with valid names.
fn header_map(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, key: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, value) in t.string_map(ctx, key).unwrap_or_default() {
        if syntax::is_header_name(name.v) {
            out.insert(name.v.to_owned(), value.v.to_owned());
        } else {
            ctx.error(
                name.at,
                &t.path,
                format!("{} is not a valid header name", quote(name.v)),
            );
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Group tls (towards endpoints)

fn upstream_tls(ctx: &mut Ctx<'_>, env: &Env<'_>, t: &Table<'_, '_>) -> Option<UpstreamTls> {
    t.check_keys(
        ctx,
        &[
            "enabled",
            "sni",
            "ca",
            "client_cert",
            "client_key",
            "insecure_skip_verify",
            "min_version",
        ],
    );
    let enabled = t.bool(ctx, "enabled").unwrap_or(true);
    let sni = t.nonempty_str(ctx, "sni").and_then(|s| {
        if syntax::is_host_name(s.v) {
            Some(s.v.to_owned())
        } else {
            ctx.error(
                s.at,
                &t.path,
                format!("sni {} is not a valid host name", quote(s.v)),
            );
            None
        }
    });
    let ca = t.has("ca").then(|| env.file(ctx, t, "ca")).flatten();
    if let (Some(ca), Some(at)) = (&ca, t.value_at("ca"))
        && let Err(e) = crate::pem::roots(ca)
    {
        ctx.error(at, &t.path, e);
    }
    let client_cert = t
        .has("client_cert")
        .then(|| env.file(ctx, t, "client_cert"))
        .flatten();
    let client_key = t
        .has("client_key")
        .then(|| env.file(ctx, t, "client_key"))
        .flatten();
    if let (Some(cert), Some(key)) = (&client_cert, &client_key) {
        pem_pair(ctx, t, ("client_cert", cert), ("client_key", key));
    }
    for (key, other) in [("client_cert", "client_key"), ("client_key", "client_cert")] {
        if let (Some(at), false) = (t.key_at(key), t.has(other)) {
            ctx.error(
                at,
                &t.path,
                format!("{} needs {} too", quote(key), quote(other)),
            );
        }
    }
    let insecure_skip_verify = t.bool(ctx, "insecure_skip_verify").unwrap_or(false);
    let min_version = tls_version(ctx, t).unwrap_or(TlsVersion::V1_2);
    // Valid but without effect: a warning, as for other such keys.
    let (idle, why): (Vec<&str>, _) = if enabled {
        let ca = ["ca"]
            .into_iter()
            .filter(|k| insecure_skip_verify && t.has(k));
        (ca.collect(), "insecure_skip_verify = true verifies nothing")
    } else {
        let keys = ["sni", "ca", "client_cert", "client_key"];
        let keys = keys
            .into_iter()
            .chain(["insecure_skip_verify", "min_version"]);
        (keys.filter(|k| t.has(k)).collect(), "enabled = false")
    };
    if let Some(at) = idle.first().and_then(|k| t.key_at(k)) {
        let keys = idle.iter().map(|k| quote(k)).collect::<Vec<_>>().join(", ");
        let verb = if idle.len() == 1 { "has" } else { "have" };
        ctx.warn(at, &t.path, format!("{keys} {verb} no effect: {why}"));
    }
    Some(UpstreamTls {
        enabled,
        sni,
        ca,
        client_cert,
        client_key,
        insecure_skip_verify,
        min_version,
    })
}

/// `min_version`: "1.2" or "1.3", also as written elsewhere ("TLSv1.2", "TLS1.3", any case)
/// or as the number 1.2.
fn tls_version(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> Option<TlsVersion> {
    let v = t.value("min_version")?;
    let at = v.span().start;
    let text = match v.get_ref() {
        toml::de::DeValue::Float(f) => f.as_str().to_owned(),
        toml::de::DeValue::String(s) => s.to_string(),
        other => {
            let msg = format!(
                "\"min_version\" must be \"1.2\" or \"1.3\", found {}",
                describe(other)
            );
            ctx.error(at, &t.path, msg);
            return None;
        }
    };
    let lower = text.to_ascii_lowercase();
    let bare = lower.strip_prefix("tls").unwrap_or(&lower);
    let bare = bare.strip_prefix('v').unwrap_or(bare).replace('_', ".");
    match bare.trim() {
        "1.2" => Some(TlsVersion::V1_2),
        "1.3" => Some(TlsVersion::V1_3),
        "1.0" | "1" | "1.1" => {
            let msg = format!(
                "min_version {} is not supported: gtd speaks TLS 1.2 and 1.3 (rustls)",
                quote(&text)
            );
            ctx.error(at, &t.path, msg);
            None
        }
        _ => {
            let msg = format!(
                "unknown min version {} (expected \"1.2\" or \"1.3\")",
                quote(&text)
            );
            ctx.error(at, &t.path, msg);
            None
        }
    }
}

// ---------------------------------------------------------------------------------------------
// [[listener.group.endpoint]]

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
];

fn endpoints(ctx: &mut Ctx<'_>, g: &Table<'_, '_>, method: Option<Method>) -> Vec<Endpoint> {
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
        t.u32(ctx, "weight", 1, Some(1000)).map_or(1, |n| n.v)
    } else {
        1
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
    let enabled = t.bool(ctx, "enabled").unwrap_or(true);
    let max_fails = t.u32(ctx, "max_fails", 0, None).map_or(1, |n| n.v);
    let fail_timeout = t
        .positive_duration(ctx, "fail_timeout")
        .map_or(Duration::from_secs(10), |d| d.v);
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
    })
}
