//! The what-if simulator: the traffic split every gtd node will produce, before anyone deploys
//! a change.
//!
//! It takes the config the nodes load, applies what-ifs (failing groups, replayed check
//! results, measured latencies, ratio changes, client demand) and asks the library's decision
//! code — [`gtd_core::split`] and [`gtd_core::balance`], the code the node runs — what each
//! acceleration region's node would do. [`run`] is the one entry point: the `sim` program,
//! `gtd push --dry-run` and `gtd fleet diff` all call it.
//!
//! - `scenario`: what-ifs from a scenario file and flags, resolved against the config;
//! - `node`: the ranking, balancers and plan a fresh node of one region would run;
//! - `engine`: one report per listener and node region (shares, endpoints, `--verify`'s
//!   observed shares, `--compare`'s before), as the data `report` defines;
//! - `client`: `--client`'s route and explanation from each region;
//! - `capacity`: demand against `capacity` per group and endpoint;
//! - `each_down`: the N+1 check (`--each-down`);
//! - `render` (table, JSON, CSV) and `svg`: the output, a pure function of the reports.

mod capacity;
mod client;
mod each_down;
mod engine;
mod node;
mod render;
mod report;
mod scenario;
mod svg;

use std::borrow::Cow;
use std::net::IpAddr;
use std::path::PathBuf;

pub use each_down::Failures;
pub use scenario::{parse_assignment, parse_checks};

use gtd_core::config::Config;
use report::Asks;
use scenario::RawWhatIf;

/// Why the simulator could not answer (each message is what `sim` prints after `sim: `).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A config or its region catalogue failed validation: every error at `FILE:LINE:COL`
    /// and the count, as `gtd check` reports them.
    #[error("{0}")]
    Config(String),
    /// The `--compare` (older) config, or the what-ifs against it, failed.
    #[error("--compare: {0}")]
    Compare(Box<Error>),
    /// The scenario file could not be read.
    #[error("reading scenario {}: {source}", path.display())]
    ReadScenario {
        /// The scenario file.
        path: PathBuf,
        /// What reading it said.
        source: std::io::Error,
    },
    /// The scenario file is not a scenario (`FILE:LINE:COL: ...` or `FILE: [table]: ...`).
    #[error("{0}")]
    Scenario(String),
    /// A what-if names nothing in the config, or its value is out of range
    /// (`--down NAME: ...`, `ratio NAME=150 is out of range 0..=100`).
    #[error("{0}")]
    WhatIf(String),
    /// `--region` names no region a listener is served from.
    #[error(
        "--region {region}: no listener is served from that region (acceleration regions: {served})"
    )]
    Region {
        /// The region asked for.
        region: String,
        /// The acceleration regions of the config, comma-separated.
        served: String,
    },
    /// Options that do not go together, or one that needs what is not given (client demand
    /// for `--each-down` and `--fail-on-overflow`, a capacity for `--each-down`).
    #[error("{0}")]
    Usage(String),
}

/// Where a config comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A file, read and validated as `gtd check` does (with [`Request::regions`] as its
    /// catalogue when given).
    File(PathBuf),
    /// A config already validated (a fleet revision's text), and the name the SVG gives it.
    Loaded {
        /// The config.
        config: Box<Config>,
        /// Its name in the SVG's title.
        name: String,
    },
}

/// The output format.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// The terminal table.
    #[default]
    Table,
    /// The JSON document of docs/design.md §8.
    Json,
    /// One CSV row per node region and group.
    Csv,
    /// Stacked bars of each region's split (docs/design.md §8).
    Svg,
}

/// What to simulate: `sim`'s options, one field each.
#[derive(Debug, Clone)]
pub struct Request {
    /// The config the nodes run (`--config`).
    pub config: Source,
    /// Region catalogue for configs read from files (overrides their `catalog`).
    pub regions: Option<PathBuf>,
    /// Scenario file: `[demand]`, `[health]`, `[latency]`, `[ratios]`.
    pub scenario: Option<PathBuf>,
    /// Only this acceleration region's node.
    pub region: Option<String>,
    /// Failing: `GROUP`, `LISTENER/GROUP` or `LISTENER/GROUP/ADDRESS`.
    pub down: Vec<String>,
    /// Check results replayed through the endpoints' verdicts: (name, results oldest first).
    pub checks: Vec<(String, Vec<String>)>,
    /// Measured RTT from a node: (`REGION/GROUP` or `REGION/LISTENER/GROUP`, ms).
    pub latency: Vec<(String, f64)>,
    /// Ratio overrides: (`GROUP` or `LISTENER/GROUP`, percent).
    pub set: Vec<(String, f64)>,
    /// Groups taking their share back over their listener's `failback_ramp`: (`GROUP` or
    /// `LISTENER/GROUP`, seconds since it turned healthy). The split is the one at that moment.
    pub recovering: Vec<(String, f64)>,
    /// A node's own order of groups, as its registry entry gives it: (listener, group names,
    /// highest priority first). It replaces the order the catalogue and `latency` would give
    /// that listener; groups it does not name follow in that order, names the config lacks
    /// (a listener or group added or removed since) are passed over.
    pub order: Vec<(String, Vec<String>)>,
    /// The output format.
    pub format: Format,
    /// Drive the real selectors N times per region and show observed beside expected.
    pub verify: Option<u64>,
    /// Show before/after shares against this (older) config.
    pub compare: Option<Source>,
    /// Where this client goes.
    pub client: Option<IpAddr>,
    /// The request key for `hash` methods, with `client`.
    pub key: Option<String>,
    /// With `client`: the request's Host, for forwarding rules.
    pub host: Option<String>,
    /// With `client`: the request's path (see [`parse_path`]).
    pub path: Option<String>,
    /// With `client`: request headers (see [`parse_header`]).
    pub headers: Vec<(String, String)>,
    /// The N+1 check: replay these failures against `[demand]` and capacity.
    pub each_down: Option<Failures>,
    /// Fail (`sim` exits 2) when a capacity is exceeded or demand has no route.
    pub fail_on_overflow: bool,
}

impl Request {
    /// A plain run of `config`: the table, no what-ifs.
    pub fn new(config: Source) -> Request {
        Request {
            config,
            regions: None,
            scenario: None,
            region: None,
            down: Vec::new(),
            checks: Vec::new(),
            latency: Vec::new(),
            set: Vec::new(),
            recovering: Vec::new(),
            order: Vec::new(),
            format: Format::Table,
            verify: None,
            compare: None,
            client: None,
            key: None,
            host: None,
            path: None,
            headers: Vec::new(),
            each_down: None,
            fail_on_overflow: false,
        }
    }
}

/// What a run prints.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// The output in the requested format.
    pub text: String,
    /// A group or endpoint is over its capacity, or demand has no route.
    pub overflow: bool,
    /// `overflow` under [`Request::fail_on_overflow`]: `sim` exits with status 2.
    pub fail: bool,
}

/// Runs the simulator. `warnings` receives the configs' warnings as they are loaded (also
/// when an error follows), each as `gtd check` words it.
pub fn run(request: &Request, warnings: &mut Vec<String>) -> Result<Output, Error> {
    let (text, overflow) = simulate(request, warnings)?;
    Ok(Output {
        text,
        overflow,
        fail: overflow && request.fail_on_overflow,
    })
}

pub use gtd_core::split::rules::parse_header;

/// A request's path (`--path`) as forwarding rules see it: the path, no query.
pub fn parse_path(s: &str) -> Result<String, String> {
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

/// The config of `source`, its warnings added to `warnings`.
fn load<'a>(
    source: &'a Source,
    regions: Option<&std::path::Path>,
    warnings: &mut Vec<String>,
) -> Result<Cow<'a, Config>, Error> {
    let config = match source {
        Source::File(path) => Cow::Owned(
            gtd_core::config::load(path, regions)
                .map_err(|errors| Error::Config(errors.report(path)))?,
        ),
        Source::Loaded { config, .. } => Cow::Borrowed(&**config),
    };
    warnings.extend(config.warnings.iter().map(ToString::to_string));
    Ok(config)
}

/// The name a config goes by in the SVG's title: its path as given.
fn name(source: &Source) -> String {
    match source {
        Source::File(path) => path.display().to_string(),
        Source::Loaded { name, .. } => name.clone(),
    }
}

/// The output, and whether a capacity is exceeded or demand has no route.
fn simulate(req: &Request, warnings: &mut Vec<String>) -> Result<(String, bool), Error> {
    let config = load(&req.config, req.regions.as_deref(), warnings)?;
    let mut raw = match &req.scenario {
        Some(path) => RawWhatIf::from_file(path)?,
        None => RawWhatIf::default(),
    };
    raw.extend(RawWhatIf {
        down: req.down.clone(),
        checks: req.checks.clone(),
        latency: req.latency.clone(),
        ratios: req.set.clone(),
        demand: Vec::new(),
        order: req.order.clone(),
        recovering: req.recovering.clone(),
    });
    let what_if = raw.resolve(&config)?;
    if req.fail_on_overflow && what_if.demand.is_empty() {
        return Err(Error::Usage(
            "--fail-on-overflow needs client demand: a scenario with [demand] (region = amount)"
                .to_owned(),
        ));
    }
    if let Some(failures) = req.each_down {
        for (given, flag) in [
            (req.verify.is_some(), "--verify"),
            (req.compare.is_some(), "--compare"),
            (req.client.is_some(), "--client"),
        ] {
            if given {
                return Err(Error::Usage(format!(
                    "--each-down prints the failure cases only; {flag} has no place in it"
                )));
            }
        }
        let report = each_down::run(&config, &raw, req.region.as_deref(), failures)?;
        let text = match req.format {
            Format::Table => each_down::table(&report),
            Format::Json => each_down::json(&report),
            Format::Csv => each_down::csv(&report),
            Format::Svg => {
                return Err(Error::Usage(
                    "--each-down prints its cases as a table, json or csv; --format svg draws \
                     one split"
                        .to_owned(),
                ));
            }
        };
        return Ok((text, report.overflows()));
    }
    let asks = Asks {
        region: req.region.clone(),
        verify: req.verify,
        client: req.client,
        key: req.key.clone(),
        host: req.host.clone(),
        path: req.path.clone(),
        headers: req.headers.clone(),
    };
    let mut reports = engine::evaluate(&config, &what_if, &asks)?;

    let mut before = None;
    if let Some(old) = &req.compare {
        let compare = |e| Error::Compare(Box::new(e));
        let old = load(old, req.regions.as_deref(), warnings).map_err(compare)?;
        // The same what-ifs, minus ratio overrides (a name may not exist in the old config).
        let old_what_if = RawWhatIf {
            ratios: Vec::new(),
            checks: Vec::new(),
            ..raw.clone()
        }
        .resolve(&old)
        .map_err(compare)?;
        let old_reports = engine::evaluate(
            &old,
            &old_what_if,
            &Asks {
                region: req.region.clone(),
                ..Asks::default()
            },
        )?;
        engine::attach_before(&mut reports, &old_reports);
        before = Some(old_reports);
    }

    let totals =
        (!what_if.demand.is_empty()).then(|| capacity::totals(&config, &reports, &what_if.demand));
    let unrouted = reports.iter().flat_map(|l| &l.regions).any(|r| {
        r.mode == gtd_core::split::Mode::NoRoute
            && what_if.demand.get(&r.region).is_some_and(|&d| d > 0.0)
    });
    let overflow = unrouted || totals.as_deref().is_some_and(capacity::any_over);
    let output = render::Output {
        reports: &reports,
        totals: totals.as_deref(),
        demand_clients: &what_if.demand_clients,
        client: req.client.map(|ip| (ip.to_string(), req.key.clone())),
        compare: req.compare.is_some(),
        request: req.host.is_some() || req.path.is_some() || !req.headers.is_empty(),
    };
    let text = match req.format {
        Format::Table => render::table(&output),
        Format::Json => render::json(&output),
        Format::Csv => render::csv(&output),
        Format::Svg => {
            let old = req.compare.as_ref().map(name);
            let before = old.as_deref().zip(before.as_deref());
            svg::svg(&output, &name(&req.config), before)
        }
    };
    Ok((text, overflow))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> PathBuf {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("config.toml")
    }

    /// A node's own order (its registry entry's) replaces the catalogue's for its listener:
    /// on the Beijing node, web's Shanghai group ranked first takes the first pass; a group
    /// name the config lacks is passed over, and a listener it lacks ignored.
    #[test]
    fn a_nodes_own_order_replaces_the_catalogues() {
        let table = |order: Vec<(String, Vec<String>)>| {
            let mut r = Request::new(Source::File(shipped()));
            r.region = Some("cn-beijing".to_owned());
            r.format = Format::Json;
            r.order = order;
            let out: serde_json::Value =
                serde_json::from_str(&run(&r, &mut Vec::new()).expect("runs").text).unwrap();
            let web = &out["listeners"][0]["regions"][0]["groups"];
            web.as_array()
                .unwrap()
                .iter()
                .map(|g| {
                    (
                        g["name"].as_str().unwrap().to_owned(),
                        g["share"].as_f64().unwrap(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let catalogue = table(Vec::new());
        assert_eq!(catalogue[0].0, "beijing");
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let measured = table(vec![
            ("web".to_owned(), names(&["gone", "shanghai"])),
            ("nowhere".to_owned(), names(&["beijing"])),
        ]);
        assert_eq!(measured[0].0, "shanghai");
        assert_eq!(measured[1].0, "beijing");
        assert_eq!(measured[0].1, catalogue[0].1, "{catalogue:?} {measured:?}");
    }

    /// A config given already validated (a fleet revision's) is simulated as its file is.
    #[test]
    fn a_loaded_config_runs_as_its_file() {
        let path = shipped();
        let config = gtd_core::config::load(&path, None).expect("the shipped config");
        for format in [Format::Table, Format::Json, Format::Csv, Format::Svg] {
            let mut from_file = Request::new(Source::File(path.clone()));
            from_file.format = format;
            from_file.compare = Some(Source::File(path.clone()));
            let mut loaded = from_file.clone();
            loaded.config = Source::Loaded {
                config: Box::new(config.clone()),
                name: path.display().to_string(),
            };
            loaded.compare = Some(Source::Loaded {
                config: Box::new(config.clone()),
                name: path.display().to_string(),
            });
            let want = run(&from_file, &mut Vec::new()).expect("runs");
            assert_eq!(run(&loaded, &mut Vec::new()).expect("runs"), want);
            assert!(!want.overflow && !want.fail);
        }
    }

    #[test]
    fn errors_are_typed_and_say_what_sim_says() {
        let mut r = Request::new(Source::File(shipped()));
        r.region = Some("nowhere".to_owned());
        let e = run(&r, &mut Vec::new()).unwrap_err();
        assert!(matches!(&e, Error::Region { region, .. } if region == "nowhere"));
        assert_eq!(
            e.to_string(),
            "--region nowhere: no listener is served from that region (acceleration regions: \
             cn-beijing, cn-shanghai)"
        );

        let mut r = Request::new(Source::File(shipped()));
        r.set.push(("web/beijing".to_owned(), 150.0));
        let e = run(&r, &mut Vec::new()).unwrap_err();
        assert!(matches!(e, Error::WhatIf(_)));
        assert_eq!(
            e.to_string(),
            "ratio web/beijing=150 is out of range 0..=100"
        );

        let mut r = Request::new(Source::File(shipped()));
        r.compare = Some(Source::File("/nonexistent/old.toml".into()));
        let e = run(&r, &mut Vec::new()).unwrap_err();
        assert!(matches!(&e, Error::Compare(inner) if matches!(**inner, Error::Config(_))));
        assert!(
            e.to_string()
                .starts_with("--compare: /nonexistent/old.toml:1:1: ")
        );

        let mut r = Request::new(Source::File(shipped()));
        r.fail_on_overflow = true;
        let e = run(&r, &mut Vec::new()).unwrap_err();
        assert!(matches!(e, Error::Usage(_)));
    }

    #[test]
    fn request_paths_and_headers() {
        assert_eq!(parse_path("/v2/users?q=1").unwrap(), "/v2/users");
        assert!(parse_path("v2").is_err() && parse_path("http://x/").is_err());
        assert_eq!(
            parse_header(" X-Tier : gold ").unwrap(),
            ("X-Tier".to_owned(), "gold".to_owned())
        );
        assert!(parse_header(":x").is_err() && parse_header("x").is_err());
    }
}
