//! The short, aligned summary `gtd check` prints for a valid config.

use std::fmt::Write as _;

use super::model::{AccessLog, Config};

/// Why a node of a region would serve nothing under a config (`--region`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegionError {
    /// Not a region of the catalogue.
    #[error("--region {0}: not in the region catalogue")]
    Unknown(String),
    /// No listener lists it.
    #[error(
        "--region {region}: no listener lists this region (listeners are served from: {served})"
    )]
    Unserved {
        /// The region.
        region: String,
        /// The regions listeners list, comma separated.
        served: String,
    },
}

impl Config {
    /// Whether a node in `region` would serve anything: the region is in the catalogue and at
    /// least one listener lists it (`gtd run --region` and `gtd check --region` ask the same).
    pub fn serves(&self, region: &str) -> Result<(), RegionError> {
        if self.catalog.get(region).is_none() {
            return Err(RegionError::Unknown(region.to_owned()));
        }
        if self
            .listeners
            .iter()
            .any(|l| l.regions.iter().any(|r| r == region))
        {
            return Ok(());
        }
        let served: std::collections::BTreeSet<&str> = self
            .listeners
            .iter()
            .flat_map(|l| l.regions.iter().map(String::as_str))
            .collect();
        Err(RegionError::Unserved {
            region: region.to_owned(),
            served: served.into_iter().collect::<Vec<_>>().join(", "),
        })
    }

    /// A few lines an operator can read at a glance: per listener its protocol, port, regions,
    /// groups, endpoints and forwarding rules; then endpoints per group region.
    pub fn summary(&self) -> String {
        let groups: usize = self.listeners.iter().map(|l| l.groups.len()).sum();
        let endpoints: usize = self
            .listeners
            .iter()
            .flat_map(|l| &l.groups)
            .map(|g| g.endpoints.len())
            .sum();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}: ok — {} {}, {} {}, {} {}; {} regions in the catalogue",
            self.source.display(),
            self.listeners.len(),
            plural(self.listeners.len(), "listener", "listeners"),
            groups,
            plural(groups, "group", "groups"),
            endpoints,
            plural(endpoints, "endpoint", "endpoints"),
            self.catalog.regions.len(),
        );
        match &self.log.access {
            AccessLog::Off => {}
            AccessLog::Stderr => out.push_str("access log: stderr\n"),
            AccessLog::Stdout => out.push_str("access log: stdout\n"),
            AccessLog::File(f) => {
                let _ = writeln!(out, "access log: {}", f.path.display());
            }
        }
        if self.listeners.is_empty() {
            return out;
        }

        let mut rows = vec![row([
            "listener",
            "protocol",
            "port",
            "regions",
            "groups",
            "endpoints",
            "routes",
        ])];
        for l in &self.listeners {
            let endpoints: usize = l.groups.iter().map(|g| g.endpoints.len()).sum();
            rows.push(vec![
                l.name.clone(),
                l.protocol.to_string(),
                l.port.to_string(),
                l.regions.join(","),
                l.groups.len().to_string(),
                endpoints.to_string(),
                l.routes.len().to_string(),
            ]);
        }
        out.push('\n');
        out.push_str(&table(&rows));

        // Group regions in order of first appearance.
        let mut by_region: Vec<(&str, usize, usize)> = Vec::new();
        for g in self.listeners.iter().flat_map(|l| &l.groups) {
            match by_region.iter_mut().find(|(r, _, _)| *r == g.region) {
                Some((_, n, e)) => {
                    *n += 1;
                    *e += g.endpoints.len();
                }
                None => by_region.push((g.region.as_str(), 1, g.endpoints.len())),
            }
        }
        let mut rows = vec![row(["region", "name", "groups", "endpoints"])];
        for (region, n, e) in by_region {
            let name = self.catalog.get(region).map_or("", |r| r.name.as_str());
            rows.push(vec![
                region.to_owned(),
                name.to_owned(),
                n.to_string(),
                e.to_string(),
            ]);
        }
        out.push('\n');
        out.push_str(&table(&rows));
        out
    }
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

fn row<const N: usize>(cells: [&str; N]) -> Vec<String> {
    cells.iter().map(|c| (*c).to_owned()).collect()
}

/// Left-aligned columns two spaces apart, no trailing spaces.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        // Padded by hand: a format width is at most 65 535, and a cell may be longer.
        for (cell, width) in r.iter().zip(&widths) {
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', width - cell.chars().count() + 2));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::table;

    #[test]
    fn columns_line_up() {
        let rows = vec![
            vec!["a".to_owned(), "bb".to_owned()],
            vec!["ccc".to_owned(), "d".to_owned()],
        ];
        assert_eq!(table(&rows), "a    bb\nccc  d\n");
    }
}
