//! Configuration: `config.toml` → spanned TOML tree → validated, typed [`Config`].
//!
//! `raw.rs` walks the TOML document keeping every value's position; `validate.rs` turns it into
//! the types of `model.rs`, collecting every error (never stopping at the first) as a
//! [`ConfigError`] that names file, line, column and the path of names.

mod error;
mod model;

pub use error::{ConfigError, ConfigErrors, position};
pub use model::*;

use std::path::Path;

use crate::regions::Catalog;

/// Reads, parses and validates a config file. `regions` overrides the file's `catalog = ...`.
pub fn load(path: &Path, regions: Option<&Path>) -> Result<Config, ConfigErrors> {
    let _ = (path, regions);
    unimplemented!("config loader: being written")
}

/// Reads and validates a region catalogue file.
pub fn load_catalog(path: &Path) -> Result<Catalog, ConfigErrors> {
    let _ = path;
    unimplemented!("catalogue loader: being written")
}
