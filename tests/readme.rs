//! The documentation says what the code does: the metrics table of `docs/design.md` §7 lists
//! exactly the metrics the node exports (names, kinds and labels from
//! `gtd::node::telemetry::ALL`), every scenario file the README or `docs/` mentions exists, and
//! every design section the code cites (`docs/design.md §3.3`) is a
//! heading of `docs/design.md`.

use std::path::{Path, PathBuf};

use gtd::node::telemetry::{ALL, Kind};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// README.md and every Markdown file under docs/, as (name, text).
fn documents() -> Vec<(String, String)> {
    let mut docs = vec![("README.md".to_owned(), read("README.md"))];
    let mut names: Vec<_> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| {
            e.expect("docs/ entry")
                .file_name()
                .into_string()
                .expect("name")
        })
        .filter(|n| n.ends_with(".md"))
        .collect();
    names.sort();
    for n in names {
        let rel = format!("docs/{n}");
        let text = read(&rel);
        docs.push((rel, text));
    }
    docs
}

#[test]
fn metrics_table_matches_the_code() {
    let text = read("docs/design.md");
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
    assert_eq!(rows.len(), ALL.len(), "one docs/design.md row per metric");
    // In the code's order, which is the order /metrics exports them in.
    let names: Vec<String> = rows.iter().map(|r| r[0].clone()).collect();
    let code: Vec<String> = ALL.iter().map(|d| format!("`{}`", d.name)).collect();
    assert_eq!(
        names, code,
        "docs/design.md's metrics table is not in the code's order"
    );
    for def in ALL {
        let row = rows
            .iter()
            .find(|r| r[0] == format!("`{}`", def.name))
            .unwrap_or_else(|| {
                panic!(
                    "{} is missing from docs/design.md's metrics table",
                    def.name
                )
            });
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
fn scenario_files_named_in_the_docs_exist() {
    for (doc, text) in documents() {
        for word in text.split(|c: char| c.is_whitespace() || c == '`' || c == '(' || c == ')') {
            if let Some(path) = word
                .strip_prefix("sim/scenarios/")
                .filter(|p| p.ends_with(".toml"))
            {
                let full = root().join("sim/scenarios").join(path);
                assert!(
                    full.exists(),
                    "{doc} names {} which does not exist",
                    full.display()
                );
            }
        }
    }
}

/// The section numbers of `docs/design.md`'s headings (`## §3 ...`, `### §3.1 ...`).
fn design_sections() -> Vec<String> {
    read("docs/design.md")
        .lines()
        .filter(|l| l.starts_with('#'))
        .filter_map(|l| l.trim_start_matches('#').trim().strip_prefix('§'))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Section numbers cited in `text` after `marker` ("design.md §" for the design), like "3.3"
/// or "2–5" (a range: both ends).
fn citations_after(text: &str, marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    {
        for (at, _) in text.match_indices(marker) {
            let rest = &text[at + marker.len()..];
            let span: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '–' || *c == '-')
                .collect();
            for part in span.split(['–', '-']) {
                let n = part.trim_end_matches('.');
                if !n.is_empty() {
                    out.push(n.to_owned());
                }
            }
        }
    }
    out
}

/// Sections of `docs/design.md` cited in `text`.
fn citations(text: &str) -> Vec<String> {
    citations_after(text, "design.md §")
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let path = e.expect("dir entry").path();
        if path.is_dir() {
            walk(&path, out);
        } else if path
            .extension()
            .is_some_and(|x| x == "rs" || x == "toml" || x == "txt" || x == "sh" || x == "md")
        {
            out.push(path);
        }
    }
}

#[test]
fn every_cited_design_section_exists() {
    let sections = design_sections();
    for n in 1..=10 {
        assert!(
            sections.contains(&n.to_string()),
            "docs/design.md has no §{n}"
        );
    }
    let mut files = Vec::new();
    for dir in ["src", "crates", "sim", "tests", "benches", "docs"] {
        walk(&root().join(dir), &mut files);
    }
    files.push(root().join("README.md"));
    let mut cited = 0;
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        // The rules were first written in a specification outside the repository; nothing
        // may cite it any more.
        let outside = citations_after(&text, concat!("SP", "EC "));
        assert!(
            outside.is_empty(),
            "{} cites a specification outside the repository (sections {outside:?}): cite docs/design.md",
            f.display()
        );
        for n in citations(&text) {
            cited += 1;
            assert!(
                sections.contains(&n),
                "{} cites section {n}, which docs/design.md does not have (it has {sections:?})",
                f.display()
            );
        }
    }
    assert!(cited > 0, "no citations found: is the scan broken?");
}

#[test]
fn citations_are_parsed() {
    assert_eq!(citations("(docs/design.md §3.2–3.3):"), ["3.2", "3.3"]);
    assert_eq!(citations("docs/design.md §2–5 and"), ["2", "5"]);
    assert_eq!(citations("docs/design.md §4."), ["4"]);
    assert_eq!(citations("see docs/design.md §3.5, then"), ["3.5"]);
    assert!(citations("the design's schema").is_empty());
}
