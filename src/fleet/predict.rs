//! What `gtd push --dry-run` and `gtd fleet diff` predict per node: the shares a registered
//! node would give the new config, from the simulator run with that node's own inputs (its
//! registry entry: its groups in its measured order, and which it sees unhealthy) instead of
//! the catalogue's. The catalogue's order assumes every group healthy and ranked by the
//! catalogue's RTTs; a node that measured otherwise splits otherwise (docs/operations.md).

use std::collections::BTreeSet;

use super::Revision;
use super::push::shares;
use super::registry::Entry;
use crate::config::{self, Config};
use crate::sim;

/// The shares `new` would make, with those of `old` before: per registered node from its entry
/// ([`per_node`]), then the catalogue's for every region, as `sim --compare` prints them.
pub(super) fn predicted(
    new: Config,
    new_name: String,
    old: &Revision,
    nodes: &[Entry],
) -> Result<String, sim::Error> {
    if nodes.is_empty() {
        return Ok(format!(
            "catalogue: no node has a registry entry; the shares are the catalogue's\n\n{}",
            shares(new, new_name, old)?
        ));
    }
    let file = old.config_file();
    let before = config::parse(&old.config, &file, &new.catalog).map_err(|errors| {
        sim::Error::Compare(Box::new(sim::Error::Config(errors.report(&file))))
    })?;
    let mut out = per_node(&new, &new_name, &before, &file.display().to_string(), nodes)?;
    out.push_str(&shares(new, new_name, old)?);
    Ok(out)
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
        super::report::utc(node.updated_at_ms)
    );
    (request, inputs)
}
