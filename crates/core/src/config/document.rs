//! A small reader over toml's spanned document tree.
//!
//! serde's derive stops at the first error; gtd must report every error in one run, each at the
//! position of the offending key or value. So the document is parsed with
//! [`toml::de::DeTable::parse`] (every value carries its byte span) and read by hand through
//! [`Table`]: typed getters that record an error in the [`Ctx`] and return `None` when a value is
//! missing or wrong, and an unknown-key check that suggests the closest known key.

use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::error::{ConfigError, position};

/// A value of the document with its byte span.
pub(crate) type Value<'i> = Spanned<DeValue<'i>>;

/// A value and the byte offset where it starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At<T> {
    /// The value.
    pub(crate) v: T,
    /// Byte offset of its first character in the file.
    pub(crate) at: usize,
}

/// Collects the errors found in one file.
pub(crate) struct Ctx<'s> {
    text: &'s str,
    file: PathBuf,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
}

impl<'s> Ctx<'s> {
    /// A context for `text`, read from `file` (as the user named it).
    pub(crate) fn new(text: &'s str, file: &Path) -> Self {
        Ctx {
            text,
            file: file.to_path_buf(),
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// The file's text.
    pub(crate) fn text(&self) -> &'s str {
        self.text
    }

    /// The file, as the user named it.
    pub(crate) fn file(&self) -> &Path {
        &self.file
    }

    /// Records an error at byte offset `at`, under the path of names `path`.
    pub(crate) fn error(&mut self, at: usize, path: &str, message: impl Into<String>) {
        let e = self.at(at, path, message.into());
        self.errors.push(e);
    }

    /// Records a warning: the file is valid, but something in it has no effect.
    pub(crate) fn warn(&mut self, at: usize, path: &str, message: impl Into<String>) {
        let w = self.at(at, path, message.into());
        self.warnings.push(w);
    }

    fn at(&self, at: usize, path: &str, message: String) -> ConfigError {
        let (line, column) = position(self.text, at);
        ConfigError {
            file: self.file.clone(),
            line,
            column,
            path: path.to_owned(),
            message,
        }
    }

    /// The warnings, sorted by position.
    pub(crate) fn take_warnings(&mut self) -> Vec<ConfigError> {
        let mut w = std::mem::take(&mut self.warnings);
        w.sort_by_key(|e| (e.line, e.column));
        w
    }

    /// True once any error was recorded.
    pub(crate) fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// The errors, sorted by position (stable: errors at one position keep their order).
    pub(crate) fn into_errors(mut self) -> Vec<ConfigError> {
        self.errors.sort_by_key(|e| (e.line, e.column));
        self.errors
    }

    /// Parses the document. A TOML syntax error is recorded and ends the check: only the
    /// earliest one in the file is reported, because the parser's later ones are mostly echoes
    /// of it (an unclosed string makes every following line look wrong).
    pub(crate) fn parse(&mut self) -> Option<Spanned<DeTable<'s>>> {
        let (doc, errors) = DeTable::parse_recoverable(self.text);
        let Some(first) = errors
            .iter()
            .min_by_key(|e| e.span().map_or(usize::MAX, |s| s.start))
        else {
            return Some(doc);
        };
        let span = first.span().unwrap_or(0..0);
        let mut message = format!("invalid TOML: {}", first.message());
        // toml says only "duplicate key"; name it.
        if first.message() == "duplicate key"
            && let Some(key) = self.text.get(span.clone()).filter(|k| !k.is_empty())
        {
            message = format!("invalid TOML: duplicate key {}", quote(key.trim()));
        }
        self.error(span.start, "", message);
        None
    }
}

/// A table of the document being read, with the path of names used in its errors.
pub(crate) struct Table<'t, 'i> {
    map: &'t DeTable<'i>,
    /// Where the table starts (its `[header]`, `{`, or the file's start for the root).
    pub(crate) at: usize,
    /// Path of names for errors inside it (`listener "web" group "beijing"`).
    pub(crate) path: String,
}

impl<'t, 'i> Table<'t, 'i> {
    /// The document's root table.
    pub(crate) fn root(doc: &'t Spanned<DeTable<'i>>) -> Self {
        Table {
            map: doc.get_ref(),
            at: 0,
            path: String::new(),
        }
    }

    /// `v` as a table, or an error naming `what` when it is something else.
    pub(crate) fn of(
        ctx: &mut Ctx<'_>,
        v: &'t Value<'i>,
        what: &str,
        path: &str,
        new_path: String,
    ) -> Option<Self> {
        match v.get_ref() {
            DeValue::Table(map) => Some(Table {
                map,
                at: v.span().start,
                path: new_path,
            }),
            other => {
                ctx.error(
                    v.span().start,
                    path,
                    format!("{what} must be a table, found {}", describe(other)),
                );
                None
            }
        }
    }

    /// Records `unknown key "x"; did you mean "y"?` for every key not in `known`.
    pub(crate) fn check_keys(&self, ctx: &mut Ctx<'_>, known: &[&str]) {
        for (key, _) in self.map.iter() {
            let name: &str = key.get_ref();
            if !known.contains(&name) {
                let hint = did_you_mean(name, known.iter().copied());
                ctx.error(
                    key.span().start,
                    &self.path,
                    format!("unknown key {}{hint}", quote(name)),
                );
            }
        }
    }

    /// The keys of the table with their positions (sorted by name).
    pub(crate) fn entries(&self) -> impl Iterator<Item = (At<&'t str>, &'t Value<'i>)> {
        self.map.iter().map(|(k, v)| {
            (
                At {
                    v: k.get_ref().as_ref(),
                    at: k.span().start,
                },
                v,
            )
        })
    }

    /// The raw value of `key`.
    pub(crate) fn value(&self, key: &str) -> Option<&'t Value<'i>> {
        self.map.get(key)
    }

    /// True when `key` is present.
    pub(crate) fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// Where `key` is written, when present.
    pub(crate) fn key_at(&self, key: &str) -> Option<usize> {
        self.map.get_key_value(key).map(|(k, _)| k.span().start)
    }

    /// Where `key`'s value starts, when present.
    pub(crate) fn value_at(&self, key: &str) -> Option<usize> {
        self.value(key).map(|v| v.span().start)
    }

    /// Records `missing required key "key"` at the table's start.
    pub(crate) fn missing(&self, ctx: &mut Ctx<'_>, key: &str) {
        ctx.error(
            self.at,
            &self.path,
            format!("missing required key {}", quote(key)),
        );
    }

    /// A string value.
    pub(crate) fn str(&self, ctx: &mut Ctx<'_>, key: &str) -> Option<At<&'t str>> {
        let v = self.value(key)?;
        as_str(ctx, v, &self.path, &quote(key)).map(|s| At {
            v: s,
            at: v.span().start,
        })
    }

    /// A string value that must be present.
    pub(crate) fn req_str(&self, ctx: &mut Ctx<'_>, key: &str) -> Option<At<&'t str>> {
        if !self.has(key) {
            self.missing(ctx, key);
        }
        self.str(ctx, key)
    }

    /// A non-empty string value.
    pub(crate) fn nonempty_str(&self, ctx: &mut Ctx<'_>, key: &str) -> Option<At<&'t str>> {
        let s = self.str(ctx, key)?;
        if s.v.is_empty() {
            ctx.error(
                s.at,
                &self.path,
                format!("{} must not be empty", quote(key)),
            );
            return None;
        }
        Some(s)
    }

    /// A boolean value.
    pub(crate) fn bool(&self, ctx: &mut Ctx<'_>, key: &str) -> Option<bool> {
        let v = self.value(key)?;
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                let msg = format!(
                    "{} must be true or false, found {}",
                    quote(key),
                    describe(other)
                );
                ctx.error(v.span().start, &self.path, msg);
                None
            }
        }
    }

    /// An integer in `min..=max` (`max` None: no upper bound).
    pub(crate) fn int(
        &self,
        ctx: &mut Ctx<'_>,
        key: &str,
        min: i64,
        max: Option<i64>,
    ) -> Option<At<i64>> {
        let v = self.value(key)?;
        let n = as_int(ctx, v, &self.path, &quote(key))?;
        let at = v.span().start;
        let ok = n >= min && max.is_none_or(|m| n <= m);
        if !ok {
            let msg = match max {
                Some(max) => format!("{key} {n} is out of range {min}..={max}"),
                None => format!("{key} {n} is out of range: it must be at least {min}"),
            };
            ctx.error(at, &self.path, msg);
            return None;
        }
        Some(At { v: n, at })
    }

    /// An integer in `min..=max` (`max` None: up to `u32::MAX`) as a `u32`.
    pub(crate) fn u32(
        &self,
        ctx: &mut Ctx<'_>,
        key: &str,
        min: u32,
        max: Option<u32>,
    ) -> Option<At<u32>> {
        let n = self.int(ctx, key, i64::from(min), max.map(i64::from))?;
        match u32::try_from(n.v) {
            Ok(v) => Some(At { v, at: n.at }),
            Err(_) => {
                ctx.error(n.at, &self.path, format!("{key} {} is too large", n.v));
                None
            }
        }
    }

    /// A port number, 1..=65535.
    pub(crate) fn port(&self, ctx: &mut Ctx<'_>, key: &str) -> Option<At<u16>> {
        let n = self.int(ctx, key, 1, Some(65535))?;
        Some(At {
            v: u16::try_from(n.v).ok()?,
            at: n.at,
        })
    }

    /// An integer or float; returns the number and its text as written (for messages).
    pub(crate) fn number(&self, ctx: &mut Ctx<'_>, key: &str) -> Option<At<(f64, String)>> {
        let v = self.value(key)?;
        let at = v.span().start;
        match v.get_ref() {
            DeValue::Integer(_) => {
                let n = as_int(ctx, v, &self.path, &quote(key))?;
                Some(At {
                    v: (n as f64, n.to_string()),
                    at,
                })
            }
            DeValue::Float(f) => {
                let text = f.as_str().to_owned();
                let x = match text.as_str() {
                    "inf" | "+inf" => f64::INFINITY,
                    "-inf" => f64::NEG_INFINITY,
                    "nan" | "+nan" | "-nan" => f64::NAN,
                    s => s.parse::<f64>().unwrap_or(f64::NAN),
                };
                Some(At { v: (x, text), at })
            }
            other => {
                let msg = format!("{} must be a number, found {}", quote(key), describe(other));
                ctx.error(at, &self.path, msg);
                None
            }
        }
    }

    /// A duration string (`"250ms"`, `"5s"`, `"2m"`, `"1h"`).
    pub(crate) fn duration(&self, ctx: &mut Ctx<'_>, key: &str) -> Option<At<Duration>> {
        let v = self.value(key)?;
        let at = v.span().start;
        let name = quote(key);
        match v.get_ref() {
            DeValue::String(s) => match parse_duration(s) {
                Ok(d) => Some(At { v: d, at }),
                Err(why) => {
                    ctx.error(
                        at,
                        &self.path,
                        format!("invalid duration {} for {name}: {why}", quote(s)),
                    );
                    None
                }
            },
            DeValue::Integer(_) | DeValue::Float(_) => {
                let written = &ctx.text()[v.span()];
                let msg = format!(
                    "invalid duration {written} for {name}: write it as a string with a unit, like \"5s\" or \"250ms\""
                );
                ctx.error(at, &self.path, msg);
                None
            }
            other => {
                let msg = format!(
                    "{name} must be a duration like \"5s\", found {}",
                    describe(other)
                );
                ctx.error(at, &self.path, msg);
                None
            }
        }
    }

    /// A duration that must be greater than zero.
    pub(crate) fn positive_duration(&self, ctx: &mut Ctx<'_>, key: &str) -> Option<At<Duration>> {
        let d = self.duration(ctx, key)?;
        if d.v.is_zero() {
            ctx.error(
                d.at,
                &self.path,
                format!("{} must be greater than 0", quote(key)),
            );
            return None;
        }
        Some(d)
    }

    /// An array value.
    pub(crate) fn array(&self, ctx: &mut Ctx<'_>, key: &str) -> Option<&'t [Value<'i>]> {
        let v = self.value(key)?;
        match v.get_ref() {
            DeValue::Array(a) => Some(a.as_ref()),
            other => {
                let msg = format!("{} must be an array, found {}", quote(key), describe(other));
                ctx.error(v.span().start, &self.path, msg);
                None
            }
        }
    }

    /// A sub-table, reported under `new_path`.
    pub(crate) fn table(
        &self,
        ctx: &mut Ctx<'_>,
        key: &str,
        new_path: String,
    ) -> Option<Table<'t, 'i>> {
        let v = self.value(key)?;
        Table::of(ctx, v, &quote(key), &self.path, new_path)
    }

    /// The tables of an array of tables (`[[key]]`, or an inline array of inline tables), with
    /// each one's value; a non-table element is reported and skipped.
    pub(crate) fn tables(&self, ctx: &mut Ctx<'_>, key: &str) -> Vec<&'t Value<'i>> {
        let Some(v) = self.value(key) else {
            return Vec::new();
        };
        let DeValue::Array(items) = v.get_ref() else {
            let msg = format!(
                "{} must be an array of tables ([[...]] sections), found {}",
                quote(key),
                describe(v.get_ref())
            );
            ctx.error(v.span().start, &self.path, msg);
            return Vec::new();
        };
        let mut out = Vec::new();
        for item in items.iter() {
            if item.get_ref().is_table() {
                out.push(item);
            } else {
                let msg = format!(
                    "each entry of {} must be a table, found {}",
                    quote(key),
                    describe(item.get_ref())
                );
                ctx.error(item.span().start, &self.path, msg);
            }
        }
        out
    }

    /// A table of strings (`headers = { X-A = "1" }`), in key order.
    pub(crate) fn string_map(
        &self,
        ctx: &mut Ctx<'_>,
        key: &str,
    ) -> Option<Vec<(At<&'t str>, At<&'t str>)>> {
        let v = self.value(key)?;
        let t = Table::of(ctx, v, &quote(key), &self.path, self.path.clone())?;
        let mut out = Vec::new();
        for (k, v) in t.entries() {
            let what = format!("{} entry {}", quote(key), quote(k.v));
            if let Some(s) = as_str(ctx, v, &self.path, &what) {
                out.push((
                    k,
                    At {
                        v: s,
                        at: v.span().start,
                    },
                ));
            }
        }
        Some(out)
    }
}

/// `v` as a string, or an error naming `what` (already quoted, e.g. `"name"`).
pub(crate) fn as_str<'t>(
    ctx: &mut Ctx<'_>,
    v: &'t Value<'_>,
    path: &str,
    what: &str,
) -> Option<&'t str> {
    match v.get_ref() {
        DeValue::String(s) => Some(s.as_ref()),
        other => {
            ctx.error(
                v.span().start,
                path,
                format!("{what} must be a string, found {}", describe(other)),
            );
            None
        }
    }
}

/// `v` as an `i64`, or an error naming `what`.
pub(crate) fn as_int(ctx: &mut Ctx<'_>, v: &Value<'_>, path: &str, what: &str) -> Option<i64> {
    match v.get_ref() {
        DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
            Ok(n) => Some(n),
            Err(_) => {
                ctx.error(v.span().start, path, format!("{what} {i} is too large"));
                None
            }
        },
        other => {
            ctx.error(
                v.span().start,
                path,
                format!("{what} must be an integer, found {}", describe(other)),
            );
            None
        }
    }
}

/// "type value" for messages: `string "80"`, `integer 5`, `a table`.
pub(crate) fn describe(v: &DeValue<'_>) -> String {
    match v {
        DeValue::String(s) => {
            let mut shown: String = s.chars().take(40).collect();
            if shown.len() < s.len() {
                shown.push('…');
            }
            format!("string {}", quote(&shown))
        }
        DeValue::Integer(i) => format!("integer {i}"),
        DeValue::Float(f) => format!("float {f}"),
        DeValue::Boolean(b) => format!("boolean {b}"),
        DeValue::Datetime(d) => format!("datetime {d}"),
        DeValue::Array(_) => "an array".to_owned(),
        DeValue::Table(_) => "a table".to_owned(),
    }
}

/// `s` in double quotes, with quotes and control characters escaped.
pub(crate) fn quote(s: &str) -> String {
    format!("{s:?}")
}

/// How to write a duration, for the errors that say it.
const UNITS: &str = "use an integer followed by ms, s, m or h, like \"250ms\" or \"5s\"";

/// Why a duration does not parse, in words (the caller adds the value and the key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// `-1s`.
    #[error("durations cannot be negative")]
    Negative,
    /// `""`.
    #[error("it is empty; {UNITS}")]
    Empty,
    /// `s`, `five seconds`: no number first.
    #[error("{UNITS}")]
    NoNumber,
    /// `1.5s`.
    #[error("fractions are not allowed; use a smaller unit, like \"1500ms\"")]
    Fraction,
    /// `5`.
    #[error("it has no unit; {UNITS}")]
    NoUnit,
    /// `5sec`.
    #[error("unknown unit {0:?}; {UNITS}")]
    UnknownUnit(String),
    /// More milliseconds than a u64 holds.
    #[error("the number is too large")]
    TooLarge,
}

/// Parses a duration: an unsigned integer followed by `ms`, `s`, `m` or `h`.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(digits_end);
    if s.starts_with('-') {
        return Err(DurationError::Negative);
    }
    if digits.is_empty() {
        return Err(if s.trim().is_empty() {
            DurationError::Empty
        } else {
            DurationError::NoNumber
        });
    }
    if unit.starts_with(['.', ',']) {
        return Err(DurationError::Fraction);
    }
    let per_unit_ms: u64 = match unit {
        "" => return Err(DurationError::NoUnit),
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        other => return Err(DurationError::UnknownUnit(other.to_owned())),
    };
    let n: u64 = digits.parse().map_err(|_| DurationError::TooLarge)?;
    let ms = n.checked_mul(per_unit_ms).ok_or(DurationError::TooLarge)?;
    Ok(Duration::from_millis(ms))
}

/// Formats a duration the way configs write it (`"5s"`, `"250ms"`, `"2m"`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0s".to_owned()
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

/// Optimal-string-alignment edit distance: insertions, deletions, substitutions and swaps of
/// two neighbouring characters each cost 1 (so `ratoi` is 1 away from `ratio`).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // d[i][j]: distance between a[..i] and b[..j].
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// The candidate closest to `word` (ignoring case), if it is close enough to be a likely typo:
/// at most one edit per three characters, and at least one allowed. Ties go to the first.
pub(crate) fn suggest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let lower = word.to_lowercase();
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        if c == word {
            continue;
        }
        let d = edit_distance(&lower, &c.to_lowercase());
        let limit = (lower.chars().count().max(c.chars().count()) / 3).max(1);
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// `; did you mean "x"?` when a candidate is close to `word`, else the empty string.
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> String {
    suggest(word, candidates)
        .map(|c| format!("; did you mean {}?", quote(c)))
        .unwrap_or_default()
}

/// True for names of listeners and groups: `[A-Za-z0-9_-]+`.
pub(crate) fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The quoted list `"a", "b" or "c"` for messages.
pub(crate) fn one_of(options: &[&str]) -> String {
    let quoted: Vec<String> = options.iter().map(|o| quote(o)).collect();
    match quoted.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_an_integer_and_a_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn durations_reject_everything_else_with_a_reason() {
        let err = |s: &str| parse_duration(s).unwrap_err().to_string();
        assert!(err("5").contains("no unit"), "{}", err("5"));
        assert!(err("1.5s").contains("fractions"));
        assert!(err("-1s").contains("negative"));
        assert!(err("5sec").contains("unknown unit \"sec\""));
        assert!(err("5 s").contains("unknown unit \" s\""));
        assert!(err("").contains("empty"));
        assert!(err("s").contains("integer followed by"));
        assert!(err("99999999999999999999h").contains("too large"));
        assert!(err("9999999999999999h").contains("too large"));
    }

    #[test]
    fn durations_format_back_in_the_largest_exact_unit() {
        for s in ["250ms", "5s", "2m", "1h", "1500ms", "90s"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
    }

    #[test]
    fn edit_distance_counts_swaps_as_one() {
        assert_eq!(edit_distance("ratio", "ratio"), 0);
        assert_eq!(edit_distance("ratoi", "ratio"), 1);
        assert_eq!(edit_distance("cn-bejing", "cn-beijing"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn suggestions_only_for_likely_typos() {
        let keys = ["ratio", "region", "priority", "balance"];
        assert_eq!(suggest("ratoi", keys), Some("ratio"));
        assert_eq!(suggest("Balance", keys), Some("balance"));
        assert_eq!(suggest("regoin", keys), Some("region"));
        assert_eq!(suggest("xyz", keys), None);
        assert_eq!(
            did_you_mean("priorty", keys),
            "; did you mean \"priority\"?"
        );
        assert_eq!(did_you_mean("weight", keys), "");
    }

    #[test]
    fn names_are_letters_digits_dash_underscore() {
        assert!(is_name("web-1_a"));
        assert!(!is_name(""));
        assert!(!is_name("we b"));
        assert!(!is_name("web.1"));
    }

    #[test]
    fn lists_read_naturally() {
        assert_eq!(one_of(&["a"]), "\"a\"");
        assert_eq!(one_of(&["a", "b", "c"]), "\"a\", \"b\" or \"c\"");
    }
}
