//! The shipped config: §3.2's worked examples from both regions, first pass and leftover,
//! golden files, deterministic output, the recipes' commands and check results replayed.

use crate::*;

#[test]
fn worked_examples_from_both_regions() {
    /// (scenario, shares from cn-beijing, shares from cn-shanghai)
    type Case<'a> = (&'a str, &'a [(&'a str, f64)], &'a [(&'a str, f64)]);
    let cases: &[Case] = &[
        (
            "spec-100-100",
            &[("beijing", 100.0), ("shanghai", 0.0)],
            &[("shanghai", 100.0), ("beijing", 0.0)],
        ),
        (
            "spec-50-100",
            &[("beijing", 50.0), ("shanghai", 50.0)],
            &[("shanghai", 100.0), ("beijing", 0.0)],
        ),
        (
            "spec-30-100",
            &[("beijing", 30.0), ("shanghai", 70.0)],
            &[("shanghai", 100.0), ("beijing", 0.0)],
        ),
        (
            "spec-50-50",
            &[("beijing", 62.5), ("shanghai", 37.5)],
            &[("shanghai", 62.5), ("beijing", 37.5)],
        ),
        (
            "rollout-1-percent",
            &[("beijing", 100.0), ("shanghai", 0.0)],
            &[("shanghai", 1.0), ("beijing", 99.0)],
        ),
        (
            "rollout-100-percent",
            &[("beijing", 100.0), ("shanghai", 0.0)],
            &[("shanghai", 100.0), ("beijing", 0.0)],
        ),
        (
            "decommission-1-percent",
            &[("beijing", 100.0), ("shanghai", 0.0)],
            &[("shanghai", 1.0), ("beijing", 99.0)],
        ),
        (
            "decommission-0-percent",
            &[("beijing", 100.0), ("shanghai", 0.0)],
            &[("shanghai", 0.0), ("beijing", 100.0)],
        ),
        (
            "rollout-1-percent-beijing-50",
            &[("beijing", 74.75), ("shanghai", 25.25)],
            &[("shanghai", 25.75), ("beijing", 74.25)],
        ),
    ];
    for (name, beijing, shanghai) in cases {
        let doc = scenario(name);
        assert_eq!(
            shares(&doc, "web", "cn-beijing"),
            ("cascade".into(), s(beijing)),
            "{name} from cn-beijing"
        );
        assert_eq!(
            shares(&doc, "web", "cn-shanghai"),
            ("cascade".into(), s(shanghai)),
            "{name} from cn-shanghai"
        );
    }
}

#[test]
fn health_failover_scenario_sends_everything_to_shanghai() {
    let doc = scenario("health-failover");
    assert_eq!(
        shares(&doc, "web", "cn-beijing"),
        (
            "failover".into(),
            s(&[("beijing", 0.0), ("shanghai", 100.0)])
        )
    );
    // From Shanghai the top group is shanghai itself, healthy: a plain cascade over the one
    // eligible group (50 + leftover 50), not a failover.
    assert_eq!(
        shares(&doc, "web", "cn-shanghai"),
        (
            "cascade".into(),
            s(&[("shanghai", 100.0), ("beijing", 0.0)])
        )
    );
}

#[test]
fn first_pass_and_leftover_are_reported() {
    let doc = json(&[]);
    let g = &doc["listeners"][0]["regions"][0]["groups"][0];
    assert_eq!(g["name"], "beijing");
    assert_eq!(
        (
            g["first_pass"].as_f64(),
            g["leftover"].as_f64(),
            g["share"].as_f64()
        ),
        (Some(50.0), Some(12.5), Some(62.5))
    );
    assert_eq!(g["priority"], 1);
    assert_eq!(g["healthy"], true);
    // Endpoint shares by weight: 2:1 of 62.5.
    let e = g["endpoints"].as_array().unwrap();
    assert_eq!(e[0]["share"].as_f64().unwrap(), 62.5 * 2.0 / 3.0);
    assert_eq!(e[1]["share"].as_f64().unwrap(), 62.5 / 3.0);
}

#[test]
fn golden_table_and_json_for_the_shipped_config() {
    for (args, file) in [
        (&[][..], "sim-table.txt"),
        (&["--format", "json"][..], "sim.json"),
    ] {
        let got = sim(args);
        let path = root().join("tests/golden").join(file);
        if std::env::var_os("GTD_BLESS").is_some() {
            std::fs::write(&path, &got).unwrap();
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            got,
            want,
            "sim {args:?} differs from {} (GTD_BLESS=1 to accept)",
            path.display()
        );
    }
}

#[test]
fn output_is_deterministic() {
    assert_eq!(sim(&["--verify", "2000"]), sim(&["--verify", "2000"]));
    assert_eq!(sim(&["--format", "csv"]), sim(&["--format", "csv"]));
}

#[test]
fn check_results_replay_through_the_nodes_verdict() {
    // The shipped web groups check with unhealthy_threshold 3 and healthy_threshold 2.
    let web = |checks: &str| {
        shares(
            &json(&["--region", "cn-beijing", "--checks", checks]),
            "web",
            "cn-beijing",
        )
    };
    let cascade = (
        "cascade".to_owned(),
        s(&[("beijing", 62.5), ("shanghai", 37.5)]),
    );
    let failover = (
        "failover".to_owned(),
        s(&[("beijing", 0.0), ("shanghai", 100.0)]),
    );
    assert_eq!(
        web("web/beijing=fail,fail"),
        cascade,
        "two failures: still in"
    );
    assert_eq!(web("web/beijing=fail,timeout,fail"), failover, "three: out");
    assert_eq!(
        web("web/beijing=fail,fail,fail,pass"),
        failover,
        "one pass: not yet"
    );
    assert_eq!(
        web("web/beijing=fail,fail,fail,pass,pass"),
        cascade,
        "two passes: back"
    );
    // One endpoint out, the other in: the group stays healthy (min_healthy 1).
    let doc = json(&[
        "--region",
        "cn-beijing",
        "--checks",
        "web/beijing/127.0.0.1:9001=timeout,timeout,timeout",
    ]);
    assert_eq!(shares(&doc, "web", "cn-beijing").0, "cascade");
    // A scenario file says the same with [health] checks.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("checks.toml");
    std::fs::write(
        &file,
        "[health]\nchecks = { \"web/beijing\" = [\"fail\", \"fail\", \"fail\"] }\n",
    )
    .unwrap();
    let doc = json(&[
        "--region",
        "cn-beijing",
        "--scenario",
        file.to_str().unwrap(),
    ]);
    assert_eq!(shares(&doc, "web", "cn-beijing"), failover);
    // Wrong words and groups without checks are errors that say so.
    assert!(sim_err(&["--checks", "web/beijing=maybe"]).contains("expected pass, fail or timeout"));
}

#[test]
fn recipes_show_what_sim_prints() {
    // Every `sim` run pasted in docs/recipes.md, rerun: the operator recipes stay true.
    let text = std::fs::read_to_string(root().join("docs/recipes.md")).unwrap();
    let prompt = "$ cargo run --release --bin sim -- ";
    // Fenced blocks, by their lines: (the opening fence's info string, the body).
    let mut blocks: Vec<(String, String)> = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in text.lines() {
        match (line.strip_prefix("```"), open.take()) {
            (Some(info), None) => open = Some((info.to_owned(), String::new())),
            (Some(_), Some(block)) => blocks.push(block),
            (None, Some((info, mut body))) => {
                body.push_str(line);
                body.push('\n');
                open = Some((info, body));
            }
            (None, None) => {}
        }
    }
    let mut checked = 0;
    for (_, body) in &blocks {
        let Some(rest) = body.strip_prefix(prompt) else {
            continue;
        };
        let (command, pasted) = rest.split_once('\n').unwrap();
        let args: Vec<&str> = command.split_whitespace().collect();
        assert_eq!(
            sim(&args),
            pasted,
            "docs/recipes.md: the output of `sim {command}` differs from what sim prints now"
        );
        checked += 1;
    }
    assert_eq!(checked, 5, "sim runs found in docs/recipes.md");
}
