//! `sim` — the what-if simulator: prints the traffic split every gtd node will produce.
//!
//! It loads the config the nodes load, applies what-ifs (failing groups, measured latencies,
//! ratio changes, client demand) and asks the library's decision code — the same code the node
//! runs — what each acceleration region's node would do.

mod capacity;
mod each_down;
mod engine;
mod render;
mod scenario;
mod svg;

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};

use crate::each_down::Failures;
use crate::engine::Asks;
use crate::render::Output;
use crate::scenario::{RawWhatIf, parse_assignment, parse_checks};

/// Print the traffic split every gtd node will produce, before anyone deploys a change.
#[derive(Parser, Debug)]
#[command(name = "sim", version, about, long_about = None)]
struct Args {
    /// The config the nodes run.
    #[arg(long, default_value = "config.toml")]
    config: PathBuf,
    /// Region catalogue (overrides the config's `catalog`).
    #[arg(long)]
    regions: Option<PathBuf>,
    /// Scenario file: [demand], [health] down, [latency], [ratios].
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Only this acceleration region's node.
    #[arg(long)]
    region: Option<String>,
    /// Mark failing: GROUP, LISTENER/GROUP or LISTENER/GROUP/ADDRESS (repeatable).
    #[arg(long, value_name = "NAME")]
    down: Vec<String>,
    /// Replay check results through the endpoints' verdicts, oldest first:
    /// LISTENER/GROUP/ADDRESS=fail,fail,pass (or GROUP, LISTENER/GROUP: each endpoint; results
    /// pass, fail = an unexpected answer, timeout = none; repeatable).
    #[arg(long, value_name = "NAME=RESULTS", value_parser = parse_checks)]
    checks: Vec<(String, Vec<String>)>,
    /// Measured RTT from a node: REGION/GROUP=MS or REGION/LISTENER/GROUP=MS (repeatable).
    #[arg(long, value_name = "REGION/GROUP=MS", value_parser = parse_assignment)]
    latency: Vec<(String, f64)>,
    /// Ratio override: GROUP=RATIO or LISTENER/GROUP=RATIO (repeatable).
    #[arg(long, value_name = "LISTENER/GROUP=RATIO", value_parser = parse_assignment)]
    set: Vec<(String, f64)>,
    /// Output format (svg: stacked bars of each region's split, docs/design.md §8).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Write the output to FILE instead of standard output.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Drive the real selectors N times per region and print observed beside expected.
    #[arg(long, value_name = "N")]
    verify: Option<u64>,
    /// Show before/after shares against this (older) config.
    #[arg(long, value_name = "OTHER_CONFIG")]
    compare: Option<PathBuf>,
    /// Where does this client go: the group (source-ip affinity) or each group's chance (affinity
    /// none: the rotation spreads it), and the endpoint its group's method picks.
    #[arg(long, value_name = "IP")]
    client: Option<IpAddr>,
    /// The request key for `hash` methods (e.g. a URI), with --client.
    #[arg(long, value_name = "STRING", requires = "client")]
    key: Option<String>,
    /// With --client: the request's Host, for an HTTP listener's forwarding rules.
    #[arg(long, value_name = "HOST", requires = "client")]
    host: Option<String>,
    /// With --client: the request's path, for forwarding rules (default `/`).
    #[arg(long, value_name = "PATH", requires = "client", value_parser = parse_path)]
    path: Option<String>,
    /// With --client: a request header, for rules that match one (repeatable).
    #[arg(long, value_name = "NAME:VALUE", requires = "client", value_parser = parse_header)]
    header: Vec<(String, String)>,
    /// The N+1 check: replay every failure of N groups of a listener (default 1; 2: every
    /// pair) or of every group in one region (`region`) against [demand] and capacity, worst
    /// first.
    #[arg(long, value_name = "N|region", num_args = 0..=1, default_missing_value = "1",
          value_parser = Failures::parse)]
    each_down: Option<Failures>,
    /// Exit with status 2 when a group or endpoint is over its capacity or demand has no route
    /// (in the plain run with [demand], or in any --each-down case).
    #[arg(long)]
    fail_on_overflow: bool,
}

/// `NAME:VALUE` of `--header`.
fn parse_header(s: &str) -> std::result::Result<(String, String), String> {
    let (name, value) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected NAME:VALUE"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("{s:?}: the header name is empty"));
    }
    if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(format!(
            "{name:?}: not a header name (letters, digits and !#$%&'*+-.^_`|~, no spaces)"
        ));
    }
    Ok((name.to_owned(), value.trim().to_owned()))
}

/// `--path`: what a request line carries, as forwarding rules see it (the path, no query).
fn parse_path(s: &str) -> std::result::Result<String, String> {
    if s.contains("://") {
        return Err(format!(
            "{s:?}: give the host with --host and the path alone (e.g. --host api.example.com --path /v1/)"
        ));
    }
    if !s.starts_with('/') {
        return Err(format!(
            "{s:?}: a path starts with / (a node answers a request target without one with 400)"
        ));
    }
    Ok(s.split_once('?').map_or(s, |(path, _)| path).to_owned())
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
    Csv,
    Svg,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok((text, overflow)) => {
            match &args.out {
                None => print!("{text}"),
                Some(path) => {
                    if let Err(e) = std::fs::write(path, text) {
                        eprintln!("sim: --out {}: {e}", path.display());
                        return ExitCode::FAILURE;
                    }
                }
            }
            if overflow && args.fail_on_overflow {
                eprintln!(
                    "sim: overflow (--fail-on-overflow): a capacity is exceeded or demand has no route"
                );
                return ExitCode::from(2);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sim: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn load(path: &std::path::Path, regions: Option<&std::path::Path>) -> Result<gtd::config::Config> {
    let config =
        gtd::config::load(path, regions).map_err(|errors| anyhow::anyhow!(errors.report(path)))?;
    for w in &config.warnings {
        eprintln!("warning: {w}");
    }
    Ok(config)
}

/// The output, and whether a capacity is exceeded or demand has no route.
fn run(args: &Args) -> Result<(String, bool)> {
    let config = load(&args.config, args.regions.as_deref())?;
    let mut raw = match &args.scenario {
        Some(path) => RawWhatIf::from_file(path)?,
        None => RawWhatIf::default(),
    };
    raw.extend(RawWhatIf {
        down: args.down.clone(),
        checks: args.checks.clone(),
        latency: args.latency.clone(),
        ratios: args.set.clone(),
        demand: Vec::new(),
    });
    let what_if = raw.resolve(&config)?;
    if args.fail_on_overflow && what_if.demand.is_empty() {
        anyhow::bail!(
            "--fail-on-overflow needs client demand: a scenario with [demand] (region = amount)"
        );
    }
    if let Some(failures) = args.each_down {
        for (given, flag) in [
            (args.verify.is_some(), "--verify"),
            (args.compare.is_some(), "--compare"),
            (args.client.is_some(), "--client"),
        ] {
            if given {
                anyhow::bail!(
                    "--each-down prints the failure cases only; {flag} has no place in it"
                );
            }
        }
        let report = each_down::run(&config, &raw, args.region.as_deref(), failures)?;
        let text = match args.format {
            Format::Table => each_down::table(&report),
            Format::Json => each_down::json(&report),
            Format::Csv => each_down::csv(&report),
            Format::Svg => anyhow::bail!(
                "--each-down prints its cases as a table, json or csv; --format svg draws one split"
            ),
        };
        return Ok((text, report.overflows()));
    }
    let asks = Asks {
        region: args.region.clone(),
        verify: args.verify,
        client: args.client,
        key: args.key.clone(),
        host: args.host.clone(),
        path: args.path.clone(),
        headers: args.header.clone(),
    };
    let mut reports = engine::evaluate(&config, &what_if, &asks)?;

    let mut before = None;
    if let Some(old_path) = &args.compare {
        let old = load(old_path, args.regions.as_deref()).context("--compare")?;
        // The same what-ifs, minus ratio overrides (a name may not exist in the old config).
        let old_what_if = RawWhatIf {
            ratios: Vec::new(),
            checks: Vec::new(),
            ..raw.clone()
        }
        .resolve(&old)
        .context("--compare")?;
        let old_reports = engine::evaluate(
            &old,
            &old_what_if,
            &Asks {
                region: args.region.clone(),
                ..Asks::default()
            },
        )?;
        engine::attach_before(&mut reports, &old_reports);
        before = Some(old_reports);
    }

    let totals =
        (!what_if.demand.is_empty()).then(|| capacity::totals(&config, &reports, &what_if.demand));
    let unrouted = reports.iter().flat_map(|l| &l.regions).any(|r| {
        r.mode == gtd::split::Mode::NoRoute
            && what_if.demand.get(&r.region).is_some_and(|&d| d > 0.0)
    });
    let overflow = unrouted || totals.as_deref().is_some_and(capacity::any_over);
    let output = Output {
        reports: &reports,
        totals: totals.as_deref(),
        demand_clients: &what_if.demand_clients,
        client: args.client.map(|ip| (ip.to_string(), args.key.clone())),
        compare: args.compare.is_some(),
        request: args.host.is_some() || args.path.is_some() || !args.header.is_empty(),
    };
    let text = match args.format {
        Format::Table => render::table(&output),
        Format::Json => render::json(&output),
        Format::Csv => render::csv(&output),
        Format::Svg => {
            let old = args.compare.as_ref().map(|p| p.display().to_string());
            let before = old.as_deref().zip(before.as_deref());
            svg::svg(&output, &args.config.display().to_string(), before)
        }
    };
    Ok((text, overflow))
}
