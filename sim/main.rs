//! `sim` — the what-if simulator: prints the traffic split every gtd node will produce.
//!
//! A thin command line over [`gtd::sim`]: it parses the options into a [`gtd::sim::Request`],
//! runs it, prints the output (or writes it to `--out`) and exits 0, 1 on an error, or 2 on
//! an overflow under `--fail-on-overflow`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use gtd::sim::{Failures, Request, Source, parse_assignment, parse_checks};

/// Print the traffic split every gtd node will produce, before anyone deploys a change.
#[derive(Parser, Debug)]
#[command(name = "sim", version, long_about = None)]
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
    /// A group taking its share back after it recovered: GROUP=SECONDS or
    /// LISTENER/GROUP=SECONDS since it turned healthy, under its listener's failback_ramp; the
    /// split shown is the one at that moment (repeatable).
    #[arg(long, value_name = "GROUP=SECONDS", value_parser = parse_assignment)]
    recovering: Vec<(String, f64)>,
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
    #[arg(long, value_name = "PATH", requires = "client", value_parser = gtd::sim::parse_path)]
    path: Option<String>,
    /// With --client: a request header, for rules that match one (repeatable).
    #[arg(long, value_name = "NAME:VALUE", requires = "client", value_parser = gtd::sim::parse_header)]
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

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
    Csv,
    Svg,
}

impl Args {
    fn request(self) -> Request {
        Request {
            config: Source::File(self.config),
            regions: self.regions,
            scenario: self.scenario,
            region: self.region,
            down: self.down,
            checks: self.checks,
            latency: self.latency,
            set: self.set,
            recovering: self.recovering,
            order: Vec::new(),
            format: match self.format {
                Format::Table => gtd::sim::Format::Table,
                Format::Json => gtd::sim::Format::Json,
                Format::Csv => gtd::sim::Format::Csv,
                Format::Svg => gtd::sim::Format::Svg,
            },
            verify: self.verify,
            compare: self.compare.map(Source::File),
            client: self.client,
            key: self.key,
            host: self.host,
            path: self.path,
            headers: self.header,
            each_down: self.each_down,
            fail_on_overflow: self.fail_on_overflow,
        }
    }
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    let out = args.out.take();
    let mut warnings = Vec::new();
    let result = gtd::sim::run(&args.request(), &mut warnings);
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let output = match result {
        Ok(output) => output,
        Err(e) => {
            eprintln!("sim: {e}");
            return ExitCode::FAILURE;
        }
    };
    match &out {
        None => print!("{}", output.text),
        Some(path) => {
            if let Err(e) = std::fs::write(path, &output.text) {
                eprintln!("sim: --out {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        }
    }
    if output.fail {
        eprintln!(
            "sim: overflow (--fail-on-overflow): a capacity is exceeded or demand has no route"
        );
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}
