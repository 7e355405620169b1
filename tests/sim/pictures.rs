//! `sim --format svg`: golden files for the shipped config and the roll-in recipe, the SVG
//! parsed as XML (roxmltree), and every bar segment's number read back and compared with
//! `sim --format json` for the same arguments — first pass, leftover, observed under
//! `--verify`, the old config's under `--compare` — and its width with the number.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{cli, json, root, sim};

/// (listener, region, view, group, part) → value, from the SVG's bar segments.
type Segments = BTreeMap<(String, String, String, String, String), f64>;

/// Pixels per percent along a bar (crates/sim/src/svg.rs draws 100 % as 520 px).
const PX_PER_PERCENT: f64 = 5.2;

/// Parses `svg` (panicking when it is not well-formed XML or not SVG) and collects its bar
/// segments, checking each one's width against its value.
fn segments(svg: &str) -> Segments {
    let doc = roxmltree::Document::parse(svg).expect("well-formed XML");
    let top = doc.root_element();
    assert_eq!(top.tag_name().name(), "svg");
    assert_eq!(
        top.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    let mut out = Segments::new();
    for n in doc.descendants().filter(|n| n.has_attribute("data-part")) {
        let attr = |a: &str| n.attribute(a).unwrap().to_owned();
        let value: f64 = attr("data-value").parse().unwrap();
        let width: f64 = attr("width").parse().unwrap();
        assert!(
            (width - value * PX_PER_PERCENT).abs() < 0.001,
            "{:?}: width {width} for {value} %",
            n.attributes().collect::<Vec<_>>()
        );
        let key = (
            attr("data-listener"),
            attr("data-region"),
            attr("data-view"),
            attr("data-group"),
            attr("data-part"),
        );
        assert!(out.insert(key.clone(), value).is_none(), "twice: {key:?}");
    }
    out
}

/// The same segments as `sim --format json` gives them for `view`: `first-pass` and
/// `leftover` of every group, and `observed` where the JSON has it.
fn from_json(doc: &Value, view: &str) -> Segments {
    let mut out = Segments::new();
    for l in doc["listeners"].as_array().unwrap() {
        for r in l["regions"].as_array().unwrap() {
            for g in r["groups"].as_array().unwrap() {
                let key = |part: &str| {
                    (
                        l["listener"].as_str().unwrap().to_owned(),
                        r["region"].as_str().unwrap().to_owned(),
                        view.to_owned(),
                        g["name"].as_str().unwrap().to_owned(),
                        part.to_owned(),
                    )
                };
                for (part, field) in [
                    ("first-pass", "first_pass"),
                    ("leftover", "leftover"),
                    ("observed", "observed"),
                ] {
                    if let Some(v) = g[field].as_f64() {
                        out.insert(key(part), v);
                    }
                }
            }
        }
    }
    out
}

/// Every segment of `want` is in `got` with the same value (6 decimals, as the SVG writes).
fn assert_same(got: &Segments, want: &Segments) {
    let keys = |s: &Segments| s.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(got), keys(want));
    for (k, v) in want {
        assert!((got[k] - v).abs() < 5e-7, "{k:?}: svg {} json {v}", got[k]);
    }
}

fn svg(args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend(["--format", "svg"]);
    sim(&all)
}

#[test]
fn shipped_split_as_svg_matches_json() {
    let got = segments(&svg(&[]));
    assert_same(&got, &from_json(&json(&[]), "after"));
    // The worked example 50/50: Beijing's node gives Beijing 50 + 12.5.
    let k = |part: &str| {
        (
            "web".to_owned(),
            "cn-beijing".to_owned(),
            "after".to_owned(),
            "beijing".to_owned(),
            part.to_owned(),
        )
    };
    assert_eq!((got[&k("first-pass")], got[&k("leftover")]), (50.0, 12.5));
}

#[test]
fn verify_overlays_the_observed_shares_of_json() {
    let args = ["--verify", "2000", "--region", "cn-shanghai"];
    let got = segments(&svg(&args));
    let want = from_json(&json(&args), "after");
    assert!(want.keys().any(|k| k.4 == "observed"));
    assert_same(&got, &want);
}

#[test]
fn compare_draws_the_old_config_beside_the_new() {
    let new = "docs/recipes/web-shanghai-1.toml";
    let old = "docs/recipes/web-beijing-only.toml";
    let got = segments(&svg(&["--config", new, "--compare", old]));
    let mut want = from_json(&json(&["--config", new]), "after");
    want.extend(from_json(&json(&["--config", old]), "before"));
    assert_same(&got, &want);
    // Rolling Shanghai in at 1 %: Shanghai's clients go 1 % Shanghai, before 0.
    let shanghai = |view: &str| {
        got.get(&(
            "web".to_owned(),
            "cn-shanghai".to_owned(),
            view.to_owned(),
            "shanghai".to_owned(),
            "first-pass".to_owned(),
        ))
        .copied()
    };
    assert_eq!((shanghai("before"), shanghai("after")), (None, Some(1.0)));
}

#[test]
fn svg_goes_to_out_file_and_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("split.svg");
    let (code, printed, _) = cli(&["--format", "svg", "--out", out.to_str().unwrap()]);
    assert_eq!((code, printed.as_str()), (Some(0), ""));
    let written = std::fs::read_to_string(&out).unwrap();
    assert_eq!(written, svg(&[]));
    assert_eq!(svg(&["--verify", "500"]), svg(&["--verify", "500"]));
}

/// The pictures docs/ shows are what `sim` draws now (GTD_BLESS=1 rewrites them, and the
/// golden file of the shipped config).
#[test]
fn golden_svgs_and_the_pictures_in_docs() {
    for (args, file) in [
        (&[][..], "tests/golden/sim.svg"),
        (&[][..], "docs/pictures/shipped.svg"),
        (
            &[
                "--config",
                "docs/recipes/web-shanghai-1.toml",
                "--compare",
                "docs/recipes/web-beijing-only.toml",
            ][..],
            "docs/pictures/roll-in-1-percent.svg",
        ),
        (
            &[
                "--config",
                "docs/recipes/web-shanghai-100.toml",
                "--compare",
                "docs/recipes/web-shanghai-1.toml",
            ][..],
            "docs/pictures/roll-in-100-percent.svg",
        ),
    ] {
        let got = svg(args);
        let path = root().join(file);
        if std::env::var_os("GTD_BLESS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &got).unwrap();
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            got, want,
            "sim {args:?} --format svg differs from {file} (GTD_BLESS=1 to accept)"
        );
    }
}

/// Under `failover = "graceful"` each group's segments (first pass, leftover and spill, each
/// at what the group keeps of it) add up to its share in `--format json`, so the bar is the
/// split: the shipped config's web listener graceful, with Beijing's weight-2 endpoint down.
#[test]
fn graceful_segments_add_up_to_the_share() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("config.toml"))
        .unwrap()
        .replacen(
            "unhealthy_status = [502, 503, 504]",
            "unhealthy_status = [502, 503, 504]\nfailover = \"graceful\"",
            1,
        )
        .replace(
            "catalog = \"regions/catalog.toml\"",
            &format!(
                "catalog = {:?}",
                root().join("regions/catalog.toml").display().to_string()
            ),
        );
    let config = dir.path().join("graceful.toml");
    std::fs::write(&config, text).unwrap();
    let args = [
        "--config",
        config.to_str().unwrap(),
        "--down",
        "web/beijing/127.0.0.1:9001",
    ];
    let got = segments(&svg(&args));
    let doc = json(&args);
    let web = doc["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["listener"] == "web")
        .unwrap();
    let mut checked = 0;
    for r in web["regions"].as_array().unwrap() {
        let region = r["region"].as_str().unwrap();
        for g in r["groups"].as_array().unwrap() {
            let group = g["name"].as_str().unwrap();
            let part = |p: &str| {
                got[&(
                    "web".to_owned(),
                    region.to_owned(),
                    "after".to_owned(),
                    group.to_owned(),
                    p.to_owned(),
                )]
            };
            let sum = part("first-pass") + part("leftover") + part("spill");
            let share = g["share"].as_f64().unwrap();
            assert!(
                (sum - share).abs() < 1e-5,
                "{region}/{group}: {sum} against {share}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 4);
    // From Beijing: Beijing keeps 1.4 × 1/3 of its 62.5, Shanghai takes the rest.
    let beijing = |p: &str| {
        got[&(
            "web".to_owned(),
            "cn-beijing".to_owned(),
            "after".to_owned(),
            "beijing".to_owned(),
            p.to_owned(),
        )]
    };
    assert!((beijing("first-pass") + beijing("leftover") - 62.5 * 1.4 / 3.0).abs() < 1e-5);
}
