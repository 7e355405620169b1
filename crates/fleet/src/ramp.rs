//! `gtd push --ramp`: the move from the running revision to a new config, planned as steps of
//! *moved traffic* — the share of the fleet's decisions that go to another group than under
//! the running revision — with the capacity check of every step and of every way back, and the
//! refusals that keep a ramp from starting (issue 38, items 1–2).
//!
//! The cascade is not linear in ratio points, so a step is not a fraction of the ratio change:
//! each step is the new config with every ratio interpolated, `old + t × (new − old)`, at the
//! `t` whose predicted moved share is the step's part of the whole move, found by bisection on
//! `t` over the simulator's prediction (the code every node runs). The prediction is per
//! registered node, from its registry entry (its measured order of groups and the groups it
//! sees down), as `gtd push --dry-run` predicts; with no entry, per acceleration region from
//! the catalogue.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use gtd_core::config::Config;
use gtd_sim as sim;
use serde_json::Value;

use super::registry::Entry;

pub mod drive;
pub mod gates;
pub mod read;
pub mod record;
mod text;

/// The default steps, percent of the whole move.
pub const DEFAULT_STEPS: [f64; 5] = [1.0, 5.0, 20.0, 50.0, 100.0];

/// The exit status of a refused ramp (nothing published).
pub use super::outcome::REFUSED;
pub use record::Shares;

/// One node the prediction is for: a registered node (its entry's order and health) or, with
/// none registered, an acceleration region as the catalogue ranks it.
#[derive(Debug, Clone)]
pub struct Node {
    /// How the output names it (`cn-beijing@host:9100`, or `catalogue cn-beijing`).
    pub label: String,
    /// Its acceleration region.
    pub region: String,
    /// Per listener, its groups in the node's order.
    pub order: Vec<(String, Vec<String>)>,
    /// `LISTENER/GROUP` it sees unhealthy.
    pub down: Vec<String>,
}

impl Node {
    /// The node of a registry entry.
    pub fn of(e: &Entry) -> Node {
        Node {
            label: e.id.clone(),
            region: e.region.clone(),
            order: e
                .listeners
                .iter()
                .map(|l| {
                    (
                        l.name.clone(),
                        l.groups.iter().map(|g| g.name.clone()).collect(),
                    )
                })
                .collect(),
            down: e
                .listeners
                .iter()
                .flat_map(|l| {
                    l.groups
                        .iter()
                        .filter(|g| !g.healthy)
                        .map(move |g| format!("{}/{}", l.name, g.name))
                })
                .collect(),
        }
    }

    /// Every acceleration region `config` serves, as the catalogue ranks its groups.
    pub fn catalogue(config: &Config) -> Vec<Node> {
        let mut regions: Vec<&str> = config
            .listeners
            .iter()
            .flat_map(|l| l.regions.iter().map(String::as_str))
            .collect();
        regions.sort_unstable();
        regions.dedup();
        regions
            .into_iter()
            .map(|r| Node {
                label: format!("catalogue {r}"),
                region: r.to_owned(),
                order: Vec::new(),
                down: Vec::new(),
            })
            .collect()
    }
}

/// A config with ratio overrides, as the simulator takes it.
struct Picture<'a> {
    config: &'a Config,
    set: Vec<(String, f64)>,
}

/// The shares `picture` gives on `node` (listeners the node's region does not serve: none).
fn predict(picture: &Picture<'_>, node: &Node) -> Result<Shares, sim::Error> {
    let mut request = sim::Request::new(sim::Source::Loaded {
        config: Box::new(picture.config.clone()),
        name: "ramp".to_owned(),
    });
    request.format = sim::Format::Json;
    request.region = Some(node.region.clone());
    request.set = picture.set.clone();
    let has = |name: &str| {
        let (l, g) = name.split_once('/').unwrap_or(("", name));
        picture
            .config
            .listeners
            .iter()
            .any(|cl| cl.name == l && cl.groups.iter().any(|cg| cg.name == g))
    };
    request.down = node.down.iter().filter(|d| has(d)).cloned().collect();
    request.order = node.order.clone();
    let out = sim::run(&request, &mut Vec::new())?;
    let doc: Value = serde_json::from_str(&out.text).expect("sim writes JSON");
    let mut shares = Vec::new();
    for l in doc["listeners"].as_array().into_iter().flatten() {
        let Some(r) = l["regions"].as_array().and_then(|r| r.first()) else {
            continue;
        };
        let groups = r["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|g| {
                (
                    g["name"].as_str().unwrap_or_default().to_owned(),
                    g["share"].as_f64().unwrap_or(0.0),
                )
            })
            .collect();
        shares.push((
            l["listener"].as_str().unwrap_or_default().to_owned(),
            groups,
        ));
    }
    Ok(shares)
}

fn share_of(shares: &Shares, listener: &str, group: &str) -> f64 {
    shares
        .iter()
        .find(|(l, _)| l == listener)
        .and_then(|(_, gs)| gs.iter().find(|(g, _)| g == group))
        .map_or(0.0, |(_, s)| *s)
}

/// The part of the decisions that go to another group under `to` than under `from`, percent:
/// per listener the total variation `Σ max(0, to − from)`, averaged over the node's listeners
/// that `to` serves there.
fn moved(from: &Shares, to: &Shares) -> f64 {
    let per: Vec<f64> = to
        .iter()
        .map(|(l, gs)| {
            gs.iter()
                .map(|(g, s)| (s - share_of(from, l, g)).max(0.0))
                .sum::<f64>()
        })
        .collect();
    if per.is_empty() {
        0.0
    } else {
        per.iter().sum::<f64>() / per.len() as f64
    }
}

/// A ratio that changes: `LISTENER/GROUP`, from (the running revision's, 0 for a new group),
/// to (the new config's).
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// `LISTENER/GROUP`.
    pub name: String,
    /// The running revision's ratio (0 when the group is new).
    pub from: f64,
    /// The new config's.
    pub to: f64,
}

impl Change {
    fn at(&self, t: f64) -> f64 {
        if t >= 1.0 {
            self.to
        } else {
            self.from + t * (self.to - self.from)
        }
    }
}

/// One capacity finding: a group (or endpoint) over its capacity.
#[derive(Debug, Clone, PartialEq)]
pub struct Overflow {
    /// `LISTENER/GROUP` or `LISTENER/GROUP/ENDPOINT`.
    pub name: String,
    /// The load `[demand]` puts on it.
    pub load: f64,
    /// Its capacity.
    pub capacity: f64,
}

/// The capacity check of one config: `None` without `[demand]`, else what is over.
type Capacity = Option<Vec<Overflow>>;

/// One step of the plan.
#[derive(Debug, Clone)]
pub struct Step {
    /// 1-based.
    pub number: usize,
    /// The step, percent of the whole move.
    pub target: f64,
    /// The interpolation parameter found, 0..=1.
    pub t: f64,
    /// The predicted moved share of the fleet's decisions, percent.
    pub moved: f64,
    /// The ratios at this step.
    pub ratios: Vec<(String, f64)>,
    /// Per node (the plan's `nodes` order), the predicted shares.
    pub shares: Vec<Shares>,
    /// Capacity at this step.
    pub capacity: Capacity,
}

/// The plan of a ramp.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The nodes the predictions are for.
    pub nodes: Vec<Node>,
    /// The ratios that change.
    pub changes: Vec<Change>,
    /// Per node, the shares under the running revision.
    pub start: Vec<Shares>,
    /// The capacity of the running revision: where every way back ends.
    pub start_capacity: Capacity,
    /// The whole move: the moved share of the new config, percent.
    pub total: f64,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Why the ramp may not start (empty: it may).
    pub refusals: Vec<String>,
    /// The groups the move sends traffic to, `LISTENER/GROUP`.
    pub receiving: Vec<String>,
}

/// What the planner needs beyond the two configs.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// Steps, percent of the whole move, increasing, the last 100.
    pub steps: Vec<f64>,
    /// A scenario with `[demand]` for the capacity check.
    pub scenario: Option<PathBuf>,
    /// How the stored ramp waits and judges.
    pub settings: Option<record::Settings>,
    /// Print each step's gates until the ramp ends (`--follow`).
    pub follow: bool,
}

/// The ratio changes from `old` to `new`; an error names a group the new config removes (a
/// ramp moves ratios: set its ratio to 0 in one ramp, remove it in the next push).
pub fn changes(old: &Config, new: &Config) -> Result<Vec<Change>, String> {
    for l in &old.listeners {
        let Some(nl) = new.listeners.iter().find(|n| n.name == l.name) else {
            return Err(format!(
                "listener {:?} is not in the new config: a ramp moves ratios between groups; \
                 remove a listener with a plain push",
                l.name
            ));
        };
        for g in &l.groups {
            if !nl.groups.iter().any(|n| n.name == g.name) && g.ratio > 0.0 {
                return Err(format!(
                    "group {}/{} is not in the new config: a ramp moves ratios; ramp its ratio \
                     to 0 first, then remove it with a plain push",
                    l.name, g.name
                ));
            }
        }
    }
    let mut out = Vec::new();
    for l in &new.listeners {
        let ol = old.listeners.iter().find(|o| o.name == l.name);
        for g in &l.groups {
            let from = ol
                .and_then(|ol| ol.groups.iter().find(|o| o.name == g.name))
                .map_or(0.0, |o| o.ratio);
            out.push(Change {
                name: format!("{}/{}", l.name, g.name),
                from,
                to: g.ratio,
            });
        }
    }
    Ok(out)
}

/// The capacity check of `picture` under the scenario's `[demand]` (the rules `sim` and
/// `sim --each-down` apply: demand by acceleration region, each group's and endpoint's load
/// against its `capacity`): what is over 100 %.
fn capacity(picture: &Picture<'_>, scenario: Option<&PathBuf>) -> Result<Capacity, sim::Error> {
    let Some(scenario) = scenario else {
        return Ok(None);
    };
    let mut request = sim::Request::new(sim::Source::Loaded {
        config: Box::new(picture.config.clone()),
        name: "ramp".to_owned(),
    });
    request.format = sim::Format::Json;
    request.scenario = Some(scenario.clone());
    request.set = picture.set.clone();
    let out = sim::run(&request, &mut Vec::new())?;
    let doc: Value = serde_json::from_str(&out.text).expect("sim writes JSON");
    let over = doc["totals"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["status"] == "over")
        .map(|t| {
            let mut name = format!(
                "{}/{}",
                t["listener"].as_str().unwrap_or_default(),
                t["group"].as_str().unwrap_or_default()
            );
            if let Some(e) = t["endpoint"].as_str() {
                name.push('/');
                name.push_str(e);
            }
            Overflow {
                name,
                load: t["load"].as_f64().unwrap_or(f64::NAN),
                capacity: t["capacity"].as_f64().unwrap_or(0.0),
            }
        })
        .collect();
    Ok(Some(over))
}

/// Plans the ramp from `old` (the running revision's config) to `new` for `nodes`.
pub fn plan(
    old: &Config,
    new: &Config,
    nodes: Vec<Node>,
    inputs: &Inputs,
) -> Result<Result<Plan, String>, sim::Error> {
    let changes = match changes(old, new) {
        Ok(c) => c,
        Err(why) => return Ok(Err(why)),
    };
    let start_picture = Picture {
        config: old,
        set: Vec::new(),
    };
    let start: Vec<Shares> = nodes
        .iter()
        .map(|n| predict(&start_picture, n))
        .collect::<Result<_, _>>()?;
    let picture = |t: f64| Picture {
        config: new,
        set: changes.iter().map(|c| (c.name.clone(), c.at(t))).collect(),
    };
    // The fleet's moved share at `t`: the mean over the nodes.
    let fleet_moved = |t: f64| -> Result<(f64, Vec<Shares>), sim::Error> {
        let p = picture(t);
        let shares: Vec<Shares> = nodes
            .iter()
            .map(|n| predict(&p, n))
            .collect::<Result<_, _>>()?;
        let m = if nodes.is_empty() {
            0.0
        } else {
            shares
                .iter()
                .zip(&start)
                .map(|(s, b)| moved(b, s))
                .sum::<f64>()
                / nodes.len() as f64
        };
        Ok((m, shares))
    };
    let (total, _) = fleet_moved(1.0)?;
    let mut steps = Vec::new();
    let mut lo = 0.0_f64;
    for (i, &target) in inputs.steps.iter().enumerate() {
        let want = total * target / 100.0;
        let t = if target >= 100.0 {
            1.0
        } else {
            // Bisection on t in [lo, 1]: the moved share is continuous in the ratios, and
            // is `want` somewhere between the last step and the end.
            let (mut a, mut b) = (lo, 1.0_f64);
            for _ in 0..40 {
                let mid = (a + b) / 2.0;
                if fleet_moved(mid)?.0 < want {
                    a = mid;
                } else {
                    b = mid;
                }
                if b - a < 1e-9 {
                    break;
                }
            }
            b
        };
        lo = t;
        let (m, shares) = fleet_moved(t)?;
        let p = picture(t);
        steps.push(Step {
            number: i + 1,
            target,
            t,
            moved: m,
            ratios: p.set.clone(),
            shares,
            capacity: capacity(&p, inputs.scenario.as_ref())?,
        });
    }
    let start_capacity = capacity(&start_picture, inputs.scenario.as_ref())?;
    // The groups the move sends traffic to, as if every group were healthy (a group a node
    // sees down gets nothing in that node's prediction, yet it is what the ramp feeds).
    let end_picture = picture(1.0);
    let mut receiving: BTreeMap<String, f64> = BTreeMap::new();
    for n in &nodes {
        let whole = Node {
            down: Vec::new(),
            ..n.clone()
        };
        let (before, after) = (
            predict(&start_picture, &whole)?,
            predict(&end_picture, &whole)?,
        );
        for (l, gs) in &after {
            for (g, s) in gs {
                let gain = s - share_of(&before, l, g);
                if gain > 1e-9 {
                    let e = receiving.entry(format!("{l}/{g}")).or_default();
                    *e = e.max(gain);
                }
            }
        }
    }
    let mut plan = Plan {
        nodes,
        changes,
        start,
        start_capacity,
        total,
        steps,
        refusals: Vec::new(),
        receiving: receiving.keys().cloned().collect(),
    };
    plan.refusals = refusals(&plan, &receiving);
    Ok(Ok(plan))
}

/// Why the ramp may not start: a step or a way back over capacity, a receiving group a node
/// sees unhealthy now.
fn refusals(plan: &Plan, receiving: &BTreeMap<String, f64>) -> Vec<String> {
    let mut out = Vec::new();
    for s in &plan.steps {
        for o in s.capacity.iter().flatten() {
            out.push(format!(
                "step {} ({} % of the move) overflows {}: load {} over capacity {} ({:.1} %)",
                s.number,
                num(s.target),
                o.name,
                num(o.load),
                num(o.capacity),
                o.load * 100.0 / o.capacity
            ));
        }
    }
    for o in plan.start_capacity.iter().flatten() {
        out.push(format!(
            "the way back to the running revision overflows {}: load {} over capacity {} \
             ({:.1} %); every step's way back ends there",
            o.name,
            num(o.load),
            num(o.capacity),
            o.load * 100.0 / o.capacity
        ));
    }
    for node in &plan.nodes {
        for d in &node.down {
            if let Some(gain) = receiving.get(d) {
                out.push(format!(
                    "{d} receives traffic (up to {} points on a node) but {} sees it unhealthy now",
                    num(*gain),
                    node.label
                ));
            }
        }
    }
    out
}

/// A number as the plan prints it: up to 2 decimals, no trailing zeros.
pub(crate) fn num(x: f64) -> String {
    let s = format!("{x:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

/// The plan as `gtd push --ramp --dry-run` prints it.
pub fn render(plan: &Plan, running: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "ramp plan: revision {running} (running) -> the new config in {} steps of moved traffic; \
         the whole move changes the group of {} % of the fleet's decisions (mean over {} node{})",
        plan.steps.len(),
        num(plan.total),
        plan.nodes.len(),
        if plan.nodes.len() == 1 { "" } else { "s" }
    );
    let moving: Vec<String> = plan
        .changes
        .iter()
        .filter(|c| c.from != c.to)
        .map(|c| format!("{} {} -> {}", c.name, num(c.from), num(c.to)))
        .collect();
    let _ = writeln!(out, "ratios: {}", moving.join(", "));
    for n in &plan.nodes {
        let _ = writeln!(
            out,
            "node {} ({}): {}",
            n.label,
            n.region,
            if n.down.is_empty() {
                "every group healthy".to_owned()
            } else {
                format!("down {}", n.down.join(", "))
            }
        );
    }
    let _ = writeln!(
        out,
        "capacity: {}",
        match &plan.start_capacity {
            None => "not checked (no [demand]: give --scenario FILE with [demand])".to_owned(),
            Some(o) if o.is_empty() => "the running revision is within capacity".to_owned(),
            Some(o) => format!("the running revision is over capacity at {}", names(o)),
        }
    );
    for s in &plan.steps {
        let _ = writeln!(
            out,
            "\nstep {} · {} % of the move · moved {} % of decisions · t = {:.4}",
            s.number,
            num(s.target),
            num(s.moved),
            s.t
        );
        let ratios: Vec<String> = s
            .ratios
            .iter()
            .zip(&plan.changes)
            .filter(|(_, c)| c.from != c.to)
            .map(|((name, r), _)| format!("{name} {}", num(*r)))
            .collect();
        let _ = writeln!(out, "  ratios {}", ratios.join(", "));
        for ((node, shares), before) in plan.nodes.iter().zip(&s.shares).zip(&plan.start) {
            let _ = writeln!(out, "  node {} ({})", node.label, node.region);
            for (l, gs) in shares {
                let each: Vec<String> = gs
                    .iter()
                    .map(|(g, v)| format!("{g} {} (was {})", num(*v), num(share_of(before, l, g))))
                    .collect();
                let _ = writeln!(out, "    {l}: {}", each.join(", "));
            }
        }
        let _ = writeln!(out, "  capacity: {}", capacity_words(&s.capacity));
        let back = if s.number == 1 {
            format!(
                "to the running revision: {}",
                capacity_words(&plan.start_capacity)
            )
        } else {
            let worst = plan.steps[..s.number - 1]
                .iter()
                .filter(|p| p.capacity.as_ref().is_some_and(|o| !o.is_empty()))
                .map(|p| p.number.to_string())
                .collect::<Vec<_>>();
            format!(
                "down steps {}..1 then the running revision: {}; at once to the running \
                 revision: {}",
                s.number - 1,
                if plan.start_capacity.is_none() {
                    "not checked".to_owned()
                } else if worst.is_empty() {
                    "within capacity".to_owned()
                } else {
                    format!("over capacity at step {}", worst.join(", "))
                },
                capacity_words(&plan.start_capacity)
            )
        };
        let _ = writeln!(out, "  way back {back}");
    }
    if plan.refusals.is_empty() {
        out.push_str("\nthe ramp may start: every step and every way back is within capacity and every receiving group is healthy\n");
    } else {
        out.push_str("\nrefused: nothing was published\n");
        for r in &plan.refusals {
            let _ = writeln!(out, "  {r}");
        }
    }
    out
}

fn names(o: &[Overflow]) -> String {
    o.iter()
        .map(|o| o.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn capacity_words(c: &Capacity) -> String {
    match c {
        None => "not checked".to_owned(),
        Some(o) if o.is_empty() => "within capacity".to_owned(),
        Some(o) => o
            .iter()
            .map(|o| {
                format!(
                    "OVER {}: load {} of capacity {} ({:.1} %)",
                    o.name,
                    num(o.load),
                    num(o.capacity),
                    o.load * 100.0 / o.capacity
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// `--steps`: percentages of the move, increasing, each above 0 and at most 100, the last 100.
pub fn check_steps(steps: &[f64]) -> Result<(), String> {
    if steps.is_empty() {
        return Err("--steps: give at least one step, the last 100".to_owned());
    }
    let mut last = 0.0;
    for &s in steps {
        if !(s > last && s <= 100.0) {
            return Err(format!(
                "--steps: {} after {}: each step is a percentage of the move above the one \
                 before, at most 100",
                num(s),
                num(last)
            ));
        }
        last = s;
    }
    if last != 100.0 {
        return Err(format!(
            "--steps: the last step is {}: a ramp ends at 100 (the whole move)",
            num(last)
        ));
    }
    Ok(())
}

/// Runs `gtd push --ramp`: validates the config as `gtd push` does, plans the move from the
/// running revision over the registered nodes, prints the plan and refuses (status 2, nothing
/// published) when a step or a way back overflows a capacity or a receiving group is unhealthy.
/// Without `--dry-run` the ramp is stored under `PREFIX/ramp` for the fleet's nodes to drive
/// ([`drive`]), refused (status 2) while another ramp is not over; `--follow` prints its log
/// until it ends (status 0 completed, 3 went back).
pub async fn run(
    opts: &super::push::Options,
    inputs: &Inputs,
) -> Result<crate::outcome::Outcome, super::push::Error> {
    use super::push::Error;
    use crate::outcome::Outcome;
    let fail = |code: u8, err: String| Outcome {
        out: String::new(),
        err,
        code,
    };
    if let Err(why) = check_steps(&inputs.steps) {
        return Ok(fail(REFUSED, format!("{why}; nothing was published\n")));
    }
    let mut new = match gtd_core::config::load(&opts.config, opts.regions.as_deref()) {
        Ok(cfg) => cfg,
        Err(errors) => {
            return Ok(fail(
                1,
                format!("{}; nothing was published\n", errors.report(&opts.config)),
            ));
        }
    };
    let mut store = super::Store::connect(&opts.etcd, &opts.prefix)
        .await
        .map_err(Error::Store)?;
    let seen = store.current().await.map_err(Error::Store)?;
    let Some(running) = store.named(seen.number).await.map_err(Error::Store)? else {
        return Ok(fail(
            REFUSED,
            format!(
                "nothing is published under {} yet: a ramp moves traffic from a running \
                 revision; publish the first with a plain gtd push; nothing was published\n",
                store.prefix()
            ),
        ));
    };
    let file = running.config_file();
    let mut old = gtd_core::config::parse(&running.config, &file, &new.catalog).map_err(|e| {
        Error::Sim(sim::Error::Compare(Box::new(sim::Error::Config(
            e.report(&file),
        ))))
    })?;
    let (drains, _) = store.drains().await.map_err(Error::Store)?;
    super::drain::apply(&mut new, &drains);
    super::drain::apply(&mut old, &drains);
    let entries = store.nodes().await.map_err(Error::Store)?;
    let nodes = if entries.is_empty() {
        Node::catalogue(&new)
    } else {
        entries.iter().map(Node::of).collect()
    };
    let plan = match plan(&old, &new, nodes, inputs)? {
        Ok(p) => p,
        Err(why) => return Ok(fail(REFUSED, format!("{why}; nothing was published\n"))),
    };
    let mut out = render(&plan, running.revision);
    if entries.is_empty() {
        out.insert_str(
            0,
            "no node has a registry entry: the predictions are the catalogue's, per region\n",
        );
    }
    if !plan.refusals.is_empty() {
        return Ok(Outcome {
            out,
            err: format!(
                "gtd push --ramp: refused; nothing was published:\n{}",
                plan.refusals
                    .iter()
                    .map(|r| format!("  {r}\n"))
                    .collect::<String>()
            ),
            code: REFUSED,
        });
    }
    if opts.dry_run {
        if let Some((rec, _)) = record::read(&store).await.map_err(Error::Store)?
            && !rec.state.done()
        {
            out.insert_str(
                0,
                &format!(
                    "ramp {} is {}: this ramp would be refused until it ends\n",
                    rec.id,
                    rec.state.word()
                ),
            );
        }
        return Ok(Outcome {
            out: format!("dry run: nothing published\n{out}"),
            err: String::new(),
            code: 0,
        });
    }
    store_and_follow(&mut store, opts, inputs, &running, &plan, &new, out).await
}

/// The refusal of a ramp while another is not over.
fn running_refusal(rec: &record::Record) -> String {
    format!(
        "gtd push --ramp: refused: ramp {} is {} (step {}/{}, revision {}); see gtd ramp \
         status, or end it with gtd ramp abort; nothing was published\n",
        rec.id,
        rec.state.word(),
        rec.at,
        rec.steps.len(),
        rec.revision
    )
}

/// Stores the ramp under `PREFIX/ramp` for the fleet's nodes to drive; with `--follow`,
/// prints its log until it ends.
async fn store_and_follow(
    store: &mut super::Store,
    opts: &super::push::Options,
    inputs: &Inputs,
    running: &super::Revision,
    plan: &Plan,
    new: &Config,
    mut out: String,
) -> Result<crate::outcome::Outcome, super::push::Error> {
    use super::push::Error;
    use crate::outcome::Outcome;
    let refuse = |out: String, err: String| Outcome {
        out,
        err,
        code: REFUSED,
    };
    let seen = match record::read(store).await.map_err(Error::Store)? {
        Some((rec, _)) if !rec.state.done() => return Ok(refuse(out, running_refusal(&rec))),
        Some((_, m)) => m,
        None => 0,
    };
    if plan.nodes.iter().any(|n| n.label.starts_with("catalogue ")) {
        return Ok(refuse(
            out,
            "gtd push --ramp: refused: no node is registered, and a ramp is driven by the \
             fleet's nodes; nothing was published\n"
                .to_owned(),
        ));
    }
    let whole = super::draft(new).map_err(|e| Error::Read(format!("{e:#}")))?;
    let steps = match step_drafts(plan, &whole) {
        Ok(steps) => steps,
        Err(why) => return Ok(refuse(out, why)),
    };
    let now = super::now_ms();
    let rec = record::Record {
        id: format!("ramp-{}-{now}", running.revision),
        state: record::State::Running,
        phase: record::Phase::Publish { step: 1 },
        by: super::who(),
        message: opts.message.clone(),
        created_at_ms: now,
        start_revision: running.revision,
        start: running.clone(),
        receiving: plan.receiving.clone(),
        steps,
        settings: inputs.settings.clone().unwrap_or(record::Settings {
            min_wait_ms: 60_000,
            max_wait_ms: 900_000,
            bake_ms: 300_000,
            hold_limit_ms: 1_800_000,
            on_inconclusive: record::Inconclusive::Hold,
            keep: opts.keep,
        }),
        baseline: None,
        timing: None,
        capacity: capacities(new, &plan.receiving),
        at: 0,
        revision: running.revision,
        owner: None,
        abort: false,
        log: Vec::new(),
        outcome: None,
        verdict: None,
        drains: Some(drive::drain_names(
            &store.drains().await.map_err(Error::Store)?.0,
            &plan.receiving,
        )),
        drained: false,
    };
    // etcd refuses a request above 1.5 MiB (--max-request-bytes): leave room for the log.
    let size = serde_json::to_vec(&rec).map_or(0, |v| v.len());
    if size > 1024 * 1024 {
        return Ok(refuse(
            out,
            format!(
                "gtd push --ramp: refused: the ramp's record (every step's config text) is {} \
                 KiB, above the 1024 KiB it may take in etcd: ramp in fewer --steps; nothing \
                 was published\n",
                size / 1024
            ),
        ));
    }
    if !record::write(store, &rec, seen, None)
        .await
        .map_err(Error::Store)?
    {
        let now = record::read(store).await.map_err(Error::Store)?;
        return Ok(refuse(
            out,
            now.filter(|(r, _)| !r.state.done()).map_or_else(
                || {
                    "gtd push --ramp: another ramp was stored meanwhile; nothing was published\n"
                        .to_owned()
                },
                |(r, _)| running_refusal(&r),
            ),
        ));
    }
    out.push_str(&format!(
        "\nramp {} stored under {}: the fleet's nodes drive it (gtd ramp status)\n",
        rec.id,
        record::key(store)
    ));
    if !inputs.follow {
        return Ok(Outcome::ok(out));
    }
    print!("{out}");
    Ok(follow(store, &rec.id).await)
}

/// The capacity the plan assumes of each receiving group (its own, or its endpoints' sum:
/// `capacity_when` with every endpoint usable) and of each of its endpoints with one, from
/// the new config, `LISTENER/GROUP[/ENDPOINT]`: what the saturation gate holds them to.
fn capacities(new: &Config, receiving: &[String]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for l in &new.listeners {
        for g in &l.groups {
            let name = format!("{}/{}", l.name, g.name);
            if !receiving.contains(&name) {
                continue;
            }
            if let Some(c) = g.capacity_when(|_| true) {
                out.insert(name.clone(), c);
            }
            for e in &g.endpoints {
                if let Some(c) = e.capacity {
                    out.insert(format!("{name}/{}", e.address.text), c);
                }
            }
        }
    }
    out
}

/// Each planned step as the config text the ramp publishes: the new config with the step's
/// ratios set line by line, checked to validate with exactly those ratios; `Err` the refusal.
fn step_drafts(plan: &Plan, whole: &super::Revision) -> Result<Vec<record::Planned>, String> {
    let mut steps = Vec::new();
    for s in &plan.steps {
        let mut draft = whole.clone();
        if s.t < 1.0 {
            let Some(text) = text::with_ratios(&whole.config, &s.ratios) else {
                return Err(
                    "gtd push --ramp: refused: the config's layout is not one whose ratios the \
                     ramp can set line by line ([[listener.group]] blocks with name = and \
                     ratio =); nothing was published\n"
                        .to_owned(),
                );
            };
            draft.config = text;
            // The step's text must say exactly the step's ratios.
            let ok = draft.validate().is_ok_and(|cfg| {
                s.ratios.iter().all(|(name, r)| {
                    let (l, g) = name.split_once('/').unwrap_or_default();
                    cfg.listeners.iter().any(|cl| {
                        cl.name == l
                            && cl
                                .groups
                                .iter()
                                .any(|cg| cg.name == g && (cg.ratio - r).abs() < 1e-9)
                    })
                })
            });
            if !ok {
                return Err(format!(
                    "gtd push --ramp: refused: step {}'s config, the ratios set in the \
                         text, does not validate with those ratios; nothing was published\n",
                    s.number
                ));
            }
        }
        steps.push(record::Planned {
            target: s.target,
            moved: s.moved,
            draft,
            shares: plan
                .nodes
                .iter()
                .map(|n| n.label.clone())
                .zip(s.shares.iter().cloned())
                .collect(),
        });
    }
    Ok(steps)
}

/// `--follow`: prints the ramp's log as the driving node writes it, until the ramp ends: exit
/// 0 completed, 3 went back (1 when another ramp replaced it).
async fn follow(store: &mut super::Store, id: &str) -> crate::outcome::Outcome {
    use crate::outcome::Outcome;
    let mut shown = 0;
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let Ok(Some((now, _))) = record::read(store).await else {
            continue;
        };
        if now.id != id {
            return Outcome {
                out: String::new(),
                err: format!("ramp {id} was replaced by ramp {}\n", now.id),
                code: 1,
            };
        }
        for l in &now.log[shown.min(now.log.len())..] {
            println!("[step {}] {}: {}", l.step, l.by, l.text);
        }
        shown = now.log.len();
        if now.state.done() {
            let outcome = now.outcome.clone().unwrap_or_default();
            return Outcome {
                out: format!("ramp {}: {} ({outcome})\n", now.id, now.state.word()),
                err: String::new(),
                code: if now.state == record::State::Completed {
                    0
                } else {
                    3
                },
            };
        }
    }
}

/// `gtd ramp status|abort|pause|resume`.
pub async fn control(
    access: &super::Access,
    prefix: &str,
    what: &str,
    json: bool,
) -> Result<crate::outcome::Outcome, super::Error> {
    use crate::outcome::Outcome;
    let store = super::Store::connect(access, prefix).await?;
    loop {
        let Some((mut rec, seen)) = record::read(&store).await? else {
            return Ok(Outcome {
                out: String::new(),
                err: format!("no ramp under {}\n", record::key(&store)),
                code: if what == "status" { 0 } else { 1 },
            });
        };
        if what == "status" {
            let out = if json {
                let mut v = serde_json::to_value(&rec).map_err(super::Error::Encode)?;
                // The drafts' texts are the bulk of the record and say nothing of its state.
                for s in v["steps"].as_array_mut().into_iter().flatten() {
                    if let Some(o) = s.as_object_mut() {
                        o.remove("draft");
                    }
                }
                if let Some(o) = v.as_object_mut() {
                    o.remove("start");
                    o.insert("gauge".to_owned(), rec.gauge().into());
                }
                format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default())
            } else {
                rec.render()
            };
            return Ok(Outcome::ok(out));
        }
        if rec.state.done() {
            return Ok(Outcome {
                out: String::new(),
                err: format!(
                    "ramp {} is over ({}): nothing to {what}\n",
                    rec.id,
                    rec.state.word()
                ),
                code: 1,
            });
        }
        let who = super::who();
        let said = match what {
            "abort" => {
                rec.abort = true;
                // A paused ramp goes back too.
                rec.state = record::State::Running;
                "abort asked: the driving node goes back to the starting revision"
            }
            "pause" => {
                if matches!(rec.phase, record::Phase::Down { .. }) {
                    return Ok(Outcome {
                        out: String::new(),
                        err: format!(
                            "ramp {} is going back to its starting revision: it is not paused\n",
                            rec.id
                        ),
                        code: 1,
                    });
                }
                rec.state = record::State::Paused;
                "paused: the ramp neither advances nor judges until gtd ramp resume"
            }
            _ => {
                if rec.state != record::State::Paused {
                    return Ok(Outcome {
                        out: String::new(),
                        err: format!("ramp {} is not paused\n", rec.id),
                        code: 1,
                    });
                }
                rec.state = record::State::Running;
                // The window starts again: what happened while paused is not judged.
                if let record::Phase::Judging { step, revision, .. } = rec.phase {
                    rec.phase = record::Phase::Applying {
                        step,
                        revision,
                        since_ms: super::now_ms(),
                    };
                }
                "resumed: the step's window starts again"
            }
        };
        rec.log.push(record::Logged {
            at_ms: super::now_ms(),
            step: rec.at,
            by: who,
            text: format!("gtd ramp {what}: {said}"),
        });
        if record::write(&store, &rec, seen, None).await? {
            return Ok(Outcome::ok(format!("ramp {}: {said}\n", rec.id)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn root() -> PathBuf {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
    }

    fn config(ratios: (f64, f64), capacity: &str) -> Config {
        let catalog = gtd_core::config::load_catalog(&root().join("regions/catalog.toml")).unwrap();
        let text = format!(
            r#"
[[listener]]
name = "web"
protocol = "http"
port = 8080
regions = ["cn-beijing", "cn-shanghai"]
  [[listener.group]]
  name = "beijing"
  region = "cn-beijing"
  ratio = {}
    [[listener.group.endpoint]]
    address = "127.0.0.1:9001"
    {capacity}
  [[listener.group]]
  name = "shanghai"
  region = "cn-shanghai"
  ratio = {}
    [[listener.group.endpoint]]
    address = "127.0.0.1:9101"
    {capacity}
"#,
            ratios.0, ratios.1
        );
        gtd_core::config::parse(&text, Path::new("config.toml"), &catalog).unwrap()
    }

    fn inputs() -> Inputs {
        Inputs {
            steps: DEFAULT_STEPS.to_vec(),
            ..Inputs::default()
        }
    }

    #[test]
    fn each_step_moves_its_part_of_the_traffic() {
        // 50/50 -> 100/0 (Beijing first everywhere it can be): from Beijing 62.5 -> 100,
        // from Shanghai 37.5 -> 100.
        let old = config((50.0, 50.0), "");
        let new = config((100.0, 0.0), "");
        let nodes = Node::catalogue(&new);
        let plan = plan(&old, &new, nodes, &inputs()).unwrap().unwrap();
        // Beijing node moves 37.5, Shanghai node 62.5: the mean 50.
        assert!((plan.total - 50.0).abs() < 1e-9, "{}", plan.total);
        assert_eq!(plan.steps.len(), 5);
        for s in &plan.steps {
            let want = plan.total * s.target / 100.0;
            assert!(
                (s.moved - want).abs() < 1e-6,
                "step {}: {}",
                s.number,
                s.moved
            );
        }
        // Not linear in ratio points: 1 % of the move is not 1 % of the way in t.
        let s1 = &plan.steps[0];
        assert!(s1.t > 0.0 && s1.t < 1.0);
        assert_eq!(plan.steps[4].t, 1.0);
        assert!(plan.refusals.is_empty(), "{:?}", plan.refusals);
        let text = render(&plan, 7);
        assert!(
            text.contains("step 1 · 1 % of the move · moved 0.5 % of decisions"),
            "{text}"
        );
        assert!(
            text.contains("node catalogue cn-beijing (cn-beijing)"),
            "{text}"
        );
    }

    #[test]
    fn a_step_over_capacity_or_a_sick_receiver_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let scenario = dir.path().join("demand.toml");
        std::fs::write(
            &scenario,
            "[demand]\ncn-beijing = 1000\ncn-shanghai = 1000\n",
        )
        .unwrap();
        // Beijing's endpoint carries 1200: at 50/50 it takes 625 + 375 = 1000, fine; moving
        // everything to Beijing puts 2000 on it.
        let old = config((50.0, 50.0), "capacity = 1200");
        let new = config((100.0, 0.0), "capacity = 1200");
        let inputs = Inputs {
            steps: DEFAULT_STEPS.to_vec(),
            scenario: Some(scenario),
            ..Inputs::default()
        };
        let plan = plan(&old, &new, Node::catalogue(&new), &inputs)
            .unwrap()
            .unwrap();
        assert_eq!(plan.start_capacity, Some(Vec::new()));
        assert!(plan.steps[0].capacity.as_ref().unwrap().is_empty());
        let last = plan.steps[4].capacity.as_ref().unwrap();
        assert!(
            last.iter()
                .any(|o| o.name == "web/beijing" && o.load == 2000.0)
        );
        assert!(
            plan.refusals.iter().any(|r| r.starts_with(
                "step 5 (100 % of the move) overflows web/beijing: load 2000 over capacity 1200"
            )),
            "{:?}",
            plan.refusals
        );
        // A node that sees the receiving group down refuses the ramp.
        let mut nodes = Node::catalogue(&new);
        nodes[0].down.push("web/beijing".to_owned());
        let plan = plan_of(&old, &new, nodes);
        assert!(
            plan.refusals
                .iter()
                .any(|r| r.contains("web/beijing receives traffic") && r.contains("unhealthy now")),
            "{:?}",
            plan.refusals
        );
    }

    fn plan_of(old: &Config, new: &Config, nodes: Vec<Node>) -> Plan {
        plan(old, new, nodes, &inputs()).unwrap().unwrap()
    }

    #[test]
    fn removed_groups_and_bad_steps_are_named() {
        let old = config((50.0, 50.0), "");
        let mut new = old.clone();
        new.listeners[0].groups.pop();
        let why = plan(&old, &new, Vec::new(), &inputs())
            .unwrap()
            .unwrap_err();
        assert!(
            why.contains("web/shanghai is not in the new config"),
            "{why}"
        );
        assert!(check_steps(&[1.0, 5.0, 100.0]).is_ok());
        assert!(check_steps(&[5.0, 1.0, 100.0]).is_err());
        assert!(
            check_steps(&[1.0, 50.0])
                .unwrap_err()
                .contains("ends at 100")
        );
        assert!(check_steps(&[]).is_err());
    }
}
