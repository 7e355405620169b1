//! Configuration errors that point at the file, line and column of the offending value.

use std::fmt;
use std::path::PathBuf;

/// One problem in a configuration (or catalogue / scenario) file.
///
/// Displayed as `FILE:LINE:COL: <path of names>: <what is wrong>`, e.g.
/// `config.toml:12:9: listener "web" group "beijing": ratio 150 is out of range 0..=100`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file as the user named it.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// The path of names leading to the value (`listener "web" group "beijing"`); may be empty.
    pub path: String,
    /// What is wrong, in words an operator can act on.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file.display(), self.line, self.column)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Every error found in one pass over a file (never empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl ConfigErrors {
    /// Every error, one per line, then their count and the file: what `gtd check`, `gtd push`,
    /// `sim`, the demo and a node's start or reload say about a bad config.
    pub fn report(&self, file: &std::path::Path) -> String {
        let n = self.0.len();
        format!(
            "{self}\n{n} {} in {}",
            if n == 1 { "error" } else { "errors" },
            file.display()
        )
    }
}

/// 1-based (line, column) of a byte offset in `text`; the column counts characters.
pub fn position(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..text.floor_char_boundary(offset)];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_and_count_characters() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(position(text, 0), (1, 1));
        assert_eq!(position(text, 6), (2, 1));
        // 'é' is two bytes but one column.
        assert_eq!(position(text, 10), (2, 4));
    }
}
