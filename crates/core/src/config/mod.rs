//! Configuration: `config.toml` → spanned TOML tree → validated, typed [`Config`].
//!
//! `document.rs` walks the TOML document keeping every value's position; `syntax.rs` parses the
//! string values that have a syntax of their own (addresses, key templates, status ranges);
//! `validate/` turns the document into the types of `model/` and `catalog.rs` does the same
//! for the region catalogue. Both collect every error (never stopping at the first) as a
//! [`ConfigError`] that names file, line, column and the path of names.
//!
//! Entry points: [`load`] and [`load_catalog`] read files; [`parse`] and [`parse_catalog`]
//! validate text already in memory (tests, reloads with a known catalogue).

mod catalog;
mod document;
mod error;
mod model;
mod summary;
mod syntax;
mod validate;
mod wire;

pub use document::format_duration;
pub use document::{DurationError, parse_duration};
pub use error::{ConfigError, ConfigErrors, position};
pub use model::*;
pub use summary::RegionError;
pub use syntax::split_route_host as split_host;

use std::path::Path;

use crate::files;
use crate::regions::Catalog;

/// Reads, parses and validates a config file. `regions` overrides the file's `catalog = ...`
/// (which is otherwise resolved against the config file's directory, default
/// `regions/catalog.toml`). Every error found is returned, sorted by position; errors in the
/// catalogue file come first.
pub fn load(path: &Path, regions: Option<&Path>) -> Result<Config, ConfigErrors> {
    let text = read(path)?;
    validate::config(&text, path, validate::CatalogFrom::Load(regions))
}

/// Validates config text as if read from `file` (which names it in errors; relative paths in it,
/// such as certificate files, are resolved against `file`'s directory) with an already loaded
/// catalogue. The text's own `catalog = ...` is type-checked but not read.
pub fn parse(text: &str, file: &Path, catalog: &Catalog) -> Result<Config, ConfigErrors> {
    validate::config(text, file, validate::CatalogFrom::Given(catalog))
}

/// Reads and validates a region catalogue file.
pub fn load_catalog(path: &Path) -> Result<Catalog, ConfigErrors> {
    let text = read(path)?;
    catalog::parse(&text, path)
}

/// Validates catalogue text as if read from `file`.
pub fn parse_catalog(text: &str, file: &Path) -> Result<Catalog, ConfigErrors> {
    catalog::parse(text, file)
}

/// Reads a file (a regular one, at most [`files::MAX_CONFIG_BYTES`]) as UTF-8 text, turning a
/// failure into a one-error [`ConfigErrors`]: at 1:1, or at the first byte that is not UTF-8.
pub fn read(path: &Path) -> Result<String, ConfigErrors> {
    let error = |line, column, message| {
        ConfigErrors(vec![ConfigError {
            file: path.to_path_buf(),
            line,
            column,
            path: String::new(),
            message,
        }])
    };
    let bytes = files::read(path, files::MAX_CONFIG_BYTES)
        .map_err(|e| error(1, 1, format!("cannot read file: {e}")))?;
    text(bytes).map_err(|(line, column)| error(line, column, "not UTF-8 text".to_owned()))
}

/// `bytes` as text, or the line and column (1-based, in characters) of the first byte that is
/// not UTF-8.
pub fn text(bytes: Vec<u8>) -> Result<String, (usize, usize)> {
    String::from_utf8(bytes).map_err(|e| {
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let good = std::str::from_utf8(good).expect("valid up to here");
        let line = good.matches('\n').count() + 1;
        let column = good.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, column)
    })
}
