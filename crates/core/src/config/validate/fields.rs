//! Field checks shared by every section: names in error paths, one-of choices, keys that belong
//! to some protocols only, status sets, `/` paths, names, and arrays of tables that must not be
//! empty.

use crate::config::document::{
    At, Ctx, Table, Value, as_int, describe, did_you_mean, is_name, one_of, quote,
};
use crate::config::model::*;
use crate::config::syntax;

/// Reads the raw string at `key` of the table `v` without recording anything (for names in paths).
/// Who `only_for` names for keys of HTTP and HTTPS listeners.
pub(super) const HTTP: &str = "http/https listeners";

pub(super) fn peek_str<'t>(v: &'t Value<'_>, key: &str) -> Option<&'t str> {
    v.get_ref().as_table()?.get(key)?.get_ref().as_str()
}

/// The name to show for an element of an array of tables: `kind "name"`, or `kind N`.
pub(super) fn item_path(parent: &str, kind: &str, name: Option<&str>, index: usize) -> String {
    // A name too long to be one (an error of its own) is not repeated in every message.
    let own = match name {
        Some(n) if n.chars().count() <= MAX_NAME => format!("{kind} {}", quote(n)),
        _ => format!("{kind} {index}"),
    };
    if parent.is_empty() {
        own
    } else {
        format!("{parent} {own}")
    }
}

/// A string that must be one of `options`; aliases may map several names to one value.
pub(super) fn choice<T: Copy>(
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
pub(super) fn only_for(
    ctx: &mut Ctx<'_>,
    t: &Table<'_, '_>,
    key: &str,
    allowed: bool,
    who: &str,
) -> bool {
    match t.key_at(key) {
        Some(at) if !allowed => {
            let msg = format!("{} is only for {who}; ignored", quote(key));
            ctx.warn(at, &t.path, msg);
            false
        }
        _ => true,
    }
}

/// `capacity`: a number above 0 (requests/s, connections: the unit of `sim`'s `[demand]`).
pub(super) fn capacity(ctx: &mut Ctx<'_>, t: &Table<'_, '_>) -> Option<f64> {
    let n = t.number(ctx, "capacity")?;
    let (x, written) = n.v;
    if x.is_finite() && x > 0.0 {
        Some(x)
    } else {
        let msg = format!(
            "capacity {written} must be a number above 0 (in the unit of sim's [demand], e.g. requests/s)"
        );
        ctx.error(n.at, &t.path, msg);
        None
    }
}

/// A list of status codes and ranges (`[200, "300-399"]`).
pub(super) fn status_set(ctx: &mut Ctx<'_>, t: &Table<'_, '_>, key: &str) -> Option<StatusSet> {
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
pub(super) fn slash_path(ctx: &mut Ctx<'_>, s: At<&str>, path: &str, what: &str) -> bool {
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
pub(super) fn check_name(ctx: &mut Ctx<'_>, name: At<&str>, path: &str, what: &str) -> bool {
    let length = name.v.chars().count();
    if length > MAX_NAME {
        let start: String = name.v.chars().take(16).collect();
        let msg = format!("{what} name {start:?}… is {length} characters long; at most {MAX_NAME}");
        ctx.error(name.at, path, msg);
        return false;
    }
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

/// The `[[key]]` tables of `t`, which must have at least one: `None` (after an error at `t`)
/// when the key is missing; an error at the value when it is an empty array.
pub(super) fn required_tables<'t, 'i>(
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
