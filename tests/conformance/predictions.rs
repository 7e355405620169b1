//! `gtd push --dry-run` predicts each registered node's shares from its registry entry (its
//! measured order, the groups it sees down), and says so; a node's prediction is then what its
//! own `/status` shows once the revision is applied, where the catalogue's is not.

use std::collections::BTreeMap;

use crate::etcd::*;
use crate::fleet::*;

/// (listener, group) → share % of the table rows in `text` (`sim`'s table, one region).
fn shares(text: &str) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    let mut listener = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("listener ") {
            listener = rest.split(' ').next().unwrap().to_owned();
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() > 2
            && words[0].parse::<usize>().is_ok()
            && let Some(eq) = words.iter().position(|w| *w == "=")
        {
            let share: f64 = words[eq + 1].parse().unwrap();
            out.insert((listener.clone(), words[1].to_owned()), share);
        }
    }
    out
}

/// The dry run's block for the node in `region`: its inputs line, and its table.
fn node_block<'a>(dry: &'a str, region: &str) -> (&'a str, &'a str) {
    let marker = format!("({region}): ");
    let start = dry
        .lines()
        .find(|l| l.starts_with("node ") && l.contains(&marker))
        .unwrap_or_else(|| panic!("no block for {region}:\n{dry}"));
    let at = dry.find(start).unwrap();
    let rest = &dry[at + start.len()..];
    let end = ["\nnode ", "\ncatalogue:", "\nshares from the catalogue"]
        .iter()
        .filter_map(|m| rest.find(m))
        .min()
        .unwrap();
    (start, &rest[..end])
}

/// The catalogue's table for `region` (the last part of the dry run, every region).
fn catalogue_for(dry: &str, region: &str) -> BTreeMap<(String, String), f64> {
    let all = &dry[dry
        .find("shares from the catalogue, every region:")
        .unwrap()..];
    // Keep the rows under "node REGION" headers only.
    let mut kept = String::new();
    let mut on = false;
    for line in all.lines() {
        if line.starts_with("listener ") {
            kept.push_str(line);
            kept.push('\n');
        } else if let Some(r) = line.trim_start().strip_prefix("node ") {
            on = r.starts_with(region);
        } else if on {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    shares(&kept)
}

#[test]
fn a_dry_run_predicts_each_node_from_its_entry_and_the_node_then_splits_so() {
    let cluster = Cluster::start();
    let mut cfg = Cfg::shipped();
    // web/shanghai's endpoints have nothing behind them: every node sees the group down, which
    // the catalogue does not know.
    let backends = cfg.serving(&["web/shanghai"], false);
    let mut fleet = start_fleet(&cluster, &cfg, std::slice::from_ref(&backends));
    fleet.wait_health(&["web/shanghai"]);

    cfg.set_ratio("web/beijing", 30.0);
    fleet.rewrite(&cfg);
    let config = fleet.config.display().to_string();
    let dry_run = || {
        let out = gtd_as(
            &cluster,
            As::Pusher,
            &["push", "--dry-run", "--config", &config],
        );
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    // Each node's entry says web/shanghai is down once the node has seen it so.
    let mut dry = String::new();
    wait("every entry saying web/shanghai is down", || {
        dry = dry_run();
        fleet
            .nodes
            .iter()
            .all(|n| node_block(&dry, &n.region).0.contains("down web/shanghai"))
    });

    let mut predicted = BTreeMap::new();
    for n in &fleet.nodes {
        let (inputs, table) = node_block(&dry, &n.region);
        assert!(inputs.contains("measured order from node "), "{inputs}");
        predicted.insert(
            n.region.clone(),
            (shares(table), catalogue_for(&dry, &n.region)),
        );
    }

    push(&cluster, &fleet.config);
    wait_applied(&fleet, 2);
    for n in &fleet.nodes {
        let (from_entry, from_catalogue) = &predicted[&n.region];
        let status = n.status();
        let web = status.listeners.iter().find(|l| l.name == "web").unwrap();
        let (mut entry_err, mut catalogue_err) = (0.0_f64, 0.0_f64);
        for g in &web.groups {
            let key = ("web".to_owned(), g.name.clone());
            let p = from_entry[&key];
            assert!(
                (p - g.share).abs() < 0.01,
                "{}: {} predicted {p} from the entry, the node splits {}\n{dry}",
                n.region,
                g.name,
                g.share
            );
            entry_err = entry_err.max((p - g.share).abs());
            catalogue_err = catalogue_err.max((from_catalogue[&key] - g.share).abs());
        }
        // The figure in docs/operations.md.
        eprintln!(
            "{}: web's largest error, catalogue {catalogue_err:.2} points, entry {entry_err:.2}",
            n.region
        );
        assert!(
            catalogue_err > 10.0,
            "the catalogue's prediction was wrong here"
        );
    }
}
