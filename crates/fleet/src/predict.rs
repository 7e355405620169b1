//! What `gtd push --dry-run` and `gtd fleet diff` predict per node: the shares a registered
//! node would give the new config, from the simulator run with that node's own inputs (its
//! registry entry: its groups in its measured order, and which it sees unhealthy) instead of
//! the catalogue's. The catalogue's order assumes every group healthy and ranked by the
//! catalogue's RTTs; a node that measured otherwise splits otherwise (docs/operations.md).

use std::collections::BTreeSet;

use super::Revision;
use super::compare::shares;
use super::drain::{self, Drain};
use super::registry::Entry;
use gtd_core::config::{self, Config};
use gtd_sim as sim;

/// The shares `new` would make, with those of `old` before: per registered node from its entry
/// ([`per_node`]), then the catalogue's for every region, as `sim --compare` prints them. The
/// fleet-wide `drains` hold before and after (they outlive revisions), so both configs get
/// them as every node applies them ([`drain::apply`]).
pub(super) fn predicted(
    new: Config,
    new_name: String,
    old: &Revision,
    nodes: &[Entry],
    drains: &[Drain],
) -> Result<String, sim::Error> {
    let drained = drained_line(drains);
    if nodes.is_empty() {
        return Ok(format!(
            "catalogue: no node has a registry entry; the shares are the catalogue's{drained}\n\n{}",
            shares(new, new_name, old, drains)?
        ));
    }
    let file = old.config_file();
    let mut before = config::parse(&old.config, &file, &new.catalog).map_err(|errors| {
        sim::Error::Compare(Box::new(sim::Error::Config(errors.report(&file))))
    })?;
    drain::apply(&mut before, drains);
    let mut now = new.clone();
    drain::apply(&mut now, drains);
    let mut out = per_node(&now, &new_name, &before, &file.display().to_string(), nodes)?;
    out.push_str(&drained);
    if !drained.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(&shares(new, new_name, old, drains)?);
    Ok(out)
}

/// The words for the fleet-wide drains the predictions apply (none: empty).
fn drained_line(drains: &[Drain]) -> String {
    if drains.is_empty() {
        return String::new();
    }
    let each: Vec<String> = drains.iter().map(|d| d.target().to_string()).collect();
    format!(
        "; fleet-wide drains applied (no new traffic): {}",
        each.join(", ")
    )
}

/// One node's prediction: a line saying which inputs were used, then `sim --region`'s table of
/// the node's region (with the shares before, under `old`), run with those inputs. Regions
/// the new config serves that no registered node is in are named: their shares are the
/// catalogue's (the table that follows these).
pub(super) fn per_node(
    new: &Config,
    new_name: &str,
    old: &Config,
    old_name: &str,
    nodes: &[Entry],
) -> Result<String, sim::Error> {
    let served: BTreeSet<&str> = new
        .listeners
        .iter()
        .flat_map(|l| l.regions.iter().map(String::as_str))
        .collect();
    let mut out = String::from(
        "shares per node, from the simulator with each node's registry entry as its input (its \
         measured order of groups, the groups it sees down):\n\n",
    );
    for node in nodes {
        if !served.contains(node.region.as_str()) {
            out.push_str(&format!(
                "node {} ({}): its region is served by no listener of the new config\n\n",
                node.id, node.region
            ));
            continue;
        }
        let (request, inputs) = request(new, new_name, old, old_name, node);
        out.push_str(&format!("node {} ({}): {inputs}\n", node.id, node.region));
        out.push_str(&sim::run(&request, &mut Vec::new())?.text);
        out.push('\n');
    }
    let registered: BTreeSet<&str> = nodes.iter().map(|n| n.region.as_str()).collect();
    let missing: Vec<&str> = served.difference(&registered).copied().collect();
    if !missing.is_empty() {
        out.push_str(&format!(
            "catalogue: no entry for {}: the shares below are the catalogue's\n\n",
            missing.join(", ")
        ));
    }
    out.push_str("shares from the catalogue, every region:\n\n");
    Ok(out)
}

/// The simulator's request for `node`, and the words for its inputs.
fn request(
    new: &Config,
    new_name: &str,
    old: &Config,
    old_name: &str,
    node: &Entry,
) -> (sim::Request, String) {
    let mut request = sim::Request::new(sim::Source::Loaded {
        config: Box::new(new.clone()),
        name: new_name.to_owned(),
    });
    request.compare = Some(sim::Source::Loaded {
        config: Box::new(old.clone()),
        name: old_name.to_owned(),
    });
    request.region = Some(node.region.clone());
    let has = |c: &Config, l: &str, g: &str| {
        c.listeners
            .iter()
            .any(|cl| cl.name == l && cl.groups.iter().any(|cg| cg.name == g))
    };
    let mut down = Vec::new();
    for l in &node.listeners {
        request.order.push((
            l.name.clone(),
            l.groups.iter().map(|g| g.name.clone()).collect(),
        ));
        for g in l.groups.iter().filter(|g| !g.healthy) {
            // A group the new or the old config does not have is passed over (the simulator
            // would refuse its name).
            if has(new, &l.name, &g.name) && has(old, &l.name, &g.name) {
                request.down.push(format!("{}/{}", l.name, g.name));
            }
            down.push(format!("{}/{}", l.name, g.name));
        }
    }
    let health = if down.is_empty() {
        "every group healthy".to_owned()
    } else {
        format!("down {}", down.join(", "))
    };
    let inputs = format!(
        "measured order from node {}'s entry of {}; health: {health}",
        node.id,
        super::words::utc(node.updated_at_ms)
    );
    (request, inputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gtd_core::view::{GroupView, ListenerView};

    fn shipped() -> (Revision, Config) {
        let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
        let old = Revision {
            revision: 1,
            pushed_at_ms: 0,
            pushed_by: "ops@vm".to_owned(),
            config_name: "config.toml".to_owned(),
            config: read("config.toml"),
            catalog_name: "catalog.toml".to_owned(),
            catalog: read("regions/catalog.toml"),
            rollback_of: None,
            message: String::new(),
        };
        let new = old.validate().unwrap();
        (old, new)
    }

    fn node() -> Entry {
        Entry {
            id: "cn-beijing@vm:9100".to_owned(),
            region: "cn-beijing".to_owned(),
            admin: String::new(),
            bind: String::new(),
            version: String::new(),
            applied: Some(1),
            source: "etcd".to_owned(),
            refused: None,
            uptime_s: 0,
            started_at_ms: 0,
            updated_at_ms: 0,
            errors: Vec::new(),
            toggles: Vec::new(),
            unhealthy: Vec::new(),
            listeners: vec![ListenerView {
                name: "web".to_owned(),
                mode: "cascade".to_owned(),
                groups: ["beijing", "shanghai"]
                    .map(|name| GroupView {
                        name: name.to_owned(),
                        healthy: true,
                        ..GroupView::default()
                    })
                    .to_vec(),
                ..ListenerView::default()
            }],
        }
    }

    /// The share `sim`'s table gives `endpoint` in the node's block of `text`.
    fn endpoint_share(text: &str, endpoint: &str) -> String {
        let block = &text[text.find("node cn-beijing@vm:9100").unwrap()..];
        let line = block.lines().find(|l| l.trim_start().starts_with(endpoint));
        line.unwrap().split_whitespace().last().unwrap().to_owned()
    }

    #[test]
    fn a_fleet_drain_is_an_input_of_every_prediction() {
        let (old, new) = shipped();
        let before = predicted(new.clone(), "config.toml".into(), &old, &[node()], &[]).unwrap();
        assert_eq!(
            endpoint_share(&before, "127.0.0.1:9001"),
            "41.67",
            "{before}"
        );
        let drain = Drain {
            listener: "web".to_owned(),
            group: "beijing".to_owned(),
            endpoint: Some("127.0.0.1:9001".to_owned()),
            by: "ops@vm".to_owned(),
            at_ms: 0,
            message: None,
        };
        let after = predicted(new, "config.toml".into(), &old, &[node()], &[drain]).unwrap();
        // Drained: no new traffic; its group's share goes to the other endpoint.
        assert_eq!(endpoint_share(&after, "127.0.0.1:9001"), "0.00", "{after}");
        assert_eq!(endpoint_share(&after, "127.0.0.1:9002"), "62.50", "{after}");
        assert!(
            after
                .contains("fleet-wide drains applied (no new traffic): web/beijing/127.0.0.1:9001"),
            "{after}"
        );
        // The catalogue's table, every region, has it too.
        let catalogue = &after[after.find("shares from the catalogue").unwrap()..];
        assert!(!catalogue.contains("41.67"), "{catalogue}");
    }
}
