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

/// Listener `name`'s table in `cfg`.
fn listener_mut<'a>(cfg: &'a mut Cfg, name: &str) -> &'a mut toml::Table {
    cfg.0
        .get_mut("listener")
        .and_then(toml::Value::as_array_mut)
        .unwrap()
        .iter_mut()
        .filter_map(toml::Value::as_table_mut)
        .find(|l| l["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no listener {name}"))
}

/// `listener`'s groups in the order of the table rows in `text` (`sim`'s table, one region).
fn ranked(text: &str, listener: &str) -> Vec<String> {
    let mut on = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("listener ") {
            on = rest.split(' ').next() == Some(listener);
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if on && words.len() > 2 && words[0].parse::<usize>().is_ok() {
            out.push(words[1].to_owned());
        }
    }
    out
}

/// web's groups on `node`, in its order: (name, rtt_source).
fn web_order(node: &NodeProc) -> Vec<(String, String)> {
    let status = node.status();
    let web = status.listeners.iter().find(|l| l.name == "web").unwrap();
    web.groups
        .iter()
        .map(|g| (g.name.clone(), g.rtt_source.clone()))
        .collect()
}

/// The case issue 31 was filed for: every group up, one node ranking by what it measured
/// against the catalogue's order; its entry gives that order, the catalogue does not.
#[test]
fn a_node_that_measured_another_order_than_the_catalogues_is_predicted_by_its_entry() {
    let cluster = Cluster::start();
    // The shipped config ranked by RTT (no pinned priorities); web ranks by the whole check's
    // time, a new order adopted after 3 rounds of 1 s.
    let text = std::fs::read_to_string(crate::common::root().join("config.toml")).unwrap();
    let mut cfg = Cfg::unpinned(&text);
    cfg.set_interval("1s");
    let web = listener_mut(&mut cfg, "web");
    for (k, v) in [
        ("rtt_from", "check"),
        ("rank_dwell", "0s"),
        ("rank_margin", "5ms"),
    ] {
        web.insert(k.into(), toml::Value::String(v.into()));
    }
    // The backends answer as if web/beijing were in Frankfurt: from the Beijing node its
    // checks take about 118 ms, web/shanghai's 17 ms, so that node measures Shanghai first
    // where the catalogue ranks Beijing first. (The Shanghai node keeps the catalogue's
    // order: its own group answers in 1 ms.)
    let mut backends = cfg.clone();
    for g in listener_mut(&mut backends, "web")["group"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .filter_map(toml::Value::as_table_mut)
    {
        if g["name"].as_str() == Some("beijing") {
            g.insert("region".into(), toml::Value::String("eu-central-1".into()));
        }
    }
    let mut fleet = start_fleet(&cluster, &cfg, std::slice::from_ref(&backends));
    let beijing = fleet.node("cn-beijing");
    wait(
        "the Beijing node ranking web/shanghai first, measured",
        || {
            beijing.assert_running();
            let order = web_order(beijing);
            order[0].0 == "shanghai" && order.iter().all(|g| g.1 == "measured")
        },
    );

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
    // The node's entry is rewritten when its order changes: wait until the dry run has it.
    let mut dry = String::new();
    wait("the Beijing entry's order in the dry run", || {
        dry = dry_run();
        ranked(node_block(&dry, "cn-beijing").1, "web")[0] == "shanghai"
    });
    let (inputs, table) = node_block(&dry, "cn-beijing");
    assert!(inputs.contains("measured order from node "), "{inputs}");
    let from_entry = shares(table);
    let from_catalogue = catalogue_for(&dry, "cn-beijing");

    push(&cluster, &fleet.config);
    wait_applied(&fleet, 2);
    let beijing = fleet.node("cn-beijing");
    let status = beijing.status();
    let web = status.listeners.iter().find(|l| l.name == "web").unwrap();
    let (mut entry_err, mut catalogue_err) = (0.0_f64, 0.0_f64);
    for g in &web.groups {
        let key = ("web".to_owned(), g.name.clone());
        let p = from_entry[&key];
        assert!(
            (p - g.share).abs() < 0.01,
            "{} predicted {p} from the entry, the node splits {}\n{dry}",
            g.name,
            g.share
        );
        entry_err = entry_err.max((p - g.share).abs());
        catalogue_err = catalogue_err.max((from_catalogue[&key] - g.share).abs());
    }
    // The figure in docs/operations.md.
    eprintln!(
        "cn-beijing: web's largest error, catalogue {catalogue_err:.2} points, entry {entry_err:.2}"
    );
    assert!(
        catalogue_err > 10.0,
        "the catalogue's prediction was wrong here\n{dry}"
    );
}
