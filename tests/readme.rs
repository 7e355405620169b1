//! The README documents what the code does: its metrics table lists exactly the metrics the
//! node exports (names, kinds and labels from `gtd::node::telemetry::ALL`), and every scenario
//! file it mentions exists.

use std::path::PathBuf;

use gtd::node::telemetry::{ALL, Kind};

fn readme() -> String {
    std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md")
}

#[test]
fn metrics_table_matches_the_code() {
    let text = readme();
    let rows: Vec<Vec<String>> = text
        .lines()
        .filter(|l| l.starts_with("| `gtd_"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), ALL.len(), "one README row per metric");
    for def in ALL {
        let row = rows
            .iter()
            .find(|r| r[0] == format!("`{}`", def.name))
            .unwrap_or_else(|| panic!("{} is missing from the README's metrics table", def.name));
        let kind = match def.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        assert_eq!(row[1], kind, "{}", def.name);
        let labels = if def.labels.is_empty() {
            "—".to_owned()
        } else {
            def.labels.join(", ")
        };
        assert_eq!(row[2], labels, "{}", def.name);
    }
}

#[test]
fn scenario_files_named_in_the_readme_exist() {
    let text = readme();
    for word in text.split(|c: char| c.is_whitespace() || c == '`') {
        if let Some(path) = word
            .strip_prefix("sim/scenarios/")
            .filter(|p| p.ends_with(".toml"))
        {
            let full = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("sim/scenarios")
                .join(path);
            assert!(
                full.exists(),
                "README names {} which does not exist",
                full.display()
            );
        }
    }
}
