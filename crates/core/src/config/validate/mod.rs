//! Builds the typed [`Config`] from the spanned document: applies the defaults of docs/design.md §2–5 and
//! checks every constraint, recording each problem in the [`Ctx`] and carrying on, so that one
//! run reports every error. A value that fails a check is replaced by a placeholder so the walk
//! can continue; the result is only returned when no error was recorded.
//!
//! This module holds the entry point, the catalogue, `[node]` and `[admin]`; each section of the
//! file has a module of its own, in the order the walk reaches them: [`log`], [`dns`], [`geoip`],
//! [`listener`], [`tls`],
//! [`route`], [`group`], [`balance`], [`health_check`], [`endpoint`]. [`fields`] holds the checks
//! they share.

mod balance;
mod dns;
mod endpoint;
mod fields;
mod geoip;
mod group;
mod health_check;
mod listener;
mod log;
mod route;
mod tls;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use super::document::{At, Ctx, Table, as_str, did_you_mean, quote};
use super::error::{ConfigError, ConfigErrors};
use super::model::*;
use crate::regions::Catalog;
use listener::listeners;

/// Where the region catalogue comes from.
pub(crate) enum CatalogFrom<'a> {
    /// Already loaded (tests, reloads): the file's `catalog = ...` is checked but not read.
    Given(&'a Catalog),
    /// Read it: from this path (`--regions`) or else from the config's `catalog` key.
    Load(Option<&'a Path>),
}

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
    root.check_keys(
        &mut ctx,
        &[
            "catalog", "node", "admin", "log", "dns", "geoip", "listener",
        ],
    );
    let base = base_dir(file);

    // Errors in the catalogue file itself (another file) come first: they explain the rest.
    let mut catalog_errors = Vec::new();
    let catalog_key = root.nonempty_str(&mut ctx, "catalog");
    let (catalog, catalog_file) = match from {
        CatalogFrom::Given(c) => (Some(c.clone()), None),
        CatalogFrom::Load(over) => {
            let key_ok = catalog_key.is_some() || !root.has("catalog");
            if over.is_some() || key_ok {
                let path = catalog_path(base, over, catalog_key);
                let read = read_catalog(&mut ctx, &mut catalog_errors, &path, over, catalog_key);
                (read, Some(path))
            } else {
                (None, None)
            }
        }
    };

    let mut env = Env {
        catalog: catalog.as_ref(),
        base,
        geoip: false,
    };
    let node = node(&mut ctx, &root);
    let admin = admin(&mut ctx, &root);
    let dns = dns::dns(&mut ctx, &root);
    let geoip = geoip::geoip(&mut ctx, &env, &root);
    // A listener asking for client locations needs the table (a bad database file is its own
    // error, not this one too).
    env.geoip = root.has("geoip");
    let log = log::log(&mut ctx, &env, &root);
    let listeners = listeners(&mut ctx, &env, &root);
    match catalog {
        Some(catalog) if catalog_errors.is_empty() && !ctx.has_errors() => Ok(Config {
            source: file.to_path_buf(),
            catalog,
            catalog_file,
            node,
            admin,
            dns,
            geoip,
            log,
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

/// The catalogue file: `--regions`, else the `catalog` key, else the default, beside the config.
fn catalog_path(base: &Path, over: Option<&Path>, key: Option<At<&str>>) -> PathBuf {
    match (over, key) {
        (Some(p), _) => p.to_path_buf(),
        (None, Some(k)) => base.join(k.v),
        (None, None) => base.join(DEFAULT_CATALOG),
    }
}

/// Reads the catalogue at `path` (named by `--regions`, the `catalog` key, or the default).
fn read_catalog(
    ctx: &mut Ctx<'_>,
    outer: &mut Vec<ConfigError>,
    path: &Path,
    over: Option<&Path>,
    key: Option<At<&str>>,
) -> Option<Catalog> {
    let path = path.to_path_buf();
    let read = crate::files::read(&path, crate::files::MAX_CONFIG_BYTES)
        .map_err(|e| e.to_string())
        .and_then(|bytes| {
            crate::config::text(bytes)
                .map_err(|(line, column)| format!("not UTF-8 text (line {line}, column {column})"))
        });
    let text = match read {
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
    /// The config has a `[geoip]` table.
    geoip: bool,
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
        let looked = if path.as_os_str() == s.v {
            String::new()
        } else {
            format!(" (looked for {})", path.display())
        };
        let problem = match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("not found".to_owned()),
            Err(e) => Some(format!("cannot be read: {e}")),
            Ok(m) if !m.is_file() => {
                // The same words as the reader's, which is what would refuse it later.
                crate::files::read(&path, 0)
                    .err()
                    .map(|e| format!("is {e}"))
            }
            Ok(_) => None,
        };
        if let Some(problem) = problem {
            ctx.error(
                s.at,
                &t.path,
                format!("{key} file {} {problem}{looked}", quote(s.v)),
            );
            return None;
        }
        Some(path)
    }
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
    t.check_keys(ctx, &["bind", "token", "allow_without_token", "hosts"]);
    let mut bind_at = None;
    if let Some(s) = t.str(ctx, "bind") {
        match s.v.parse::<SocketAddr>() {
            Ok(addr) => {
                admin.bind = addr;
                bind_at = Some(s.at);
            }
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
    admin.open = t.bool(ctx, "allow_without_token").unwrap_or(false);
    admin.hosts = admin_hosts(ctx, &t);
    if let Some(at) = bind_at
        && admin.exposed(admin.bind)
    {
        ctx.error(
            at,
            &t.path,
            format!(
                "the admin server on {} is reachable beyond this host, and without a token \
                 anyone who reaches it can reload the config or disable endpoints: set \
                 token = \"...\", bind to 127.0.0.1, or set allow_without_token = true",
                admin.bind
            ),
        );
    }
    admin
}

/// `hosts`: the names the admin server answers to besides its address and `localhost` (the
/// Host a browser sends; docs/design.md §7), without a port.
fn admin_hosts(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> Vec<String> {
    let mut out = Vec::new();
    for item in t.array(ctx, "hosts").unwrap_or_default() {
        let Some(name) = as_str(ctx, item, &t.path, "each entry of \"hosts\"") else {
            continue;
        };
        let at = item.span().start;
        let (host, port) = super::syntax::split_route_host(name);
        if port.is_some() {
            let msg = format!(
                "host {} has a port: list the name alone (any port the server is reached on \
                 is answered)",
                quote(name)
            );
            ctx.error(at, &t.path, msg);
        } else if super::syntax::is_host_name(host) || host.parse::<IpAddr>().is_ok() {
            out.push(host.to_ascii_lowercase());
        } else {
            let msg = format!(
                "host {} is not a host name, like \"gtd-1.example.com\"",
                quote(name)
            );
            ctx.error(at, &t.path, msg);
        }
    }
    out
}
