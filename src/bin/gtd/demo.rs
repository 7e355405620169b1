//! `gtd demo`: one node per acceleration region of the config on loopback, with its endpoints
//! and client load, and a live view of the split against what it should be.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use gtd::demo::Change;

/// `gtd demo`'s arguments.
#[derive(clap::Args)]
pub(crate) struct Demo {
    /// The config the nodes run.
    #[arg(long, short, default_value = "config.toml")]
    config: PathBuf,
    /// The region catalogue to use instead of the config's `catalog = ...`.
    #[arg(long)]
    regions: Option<PathBuf>,
    /// How long the load runs ("30s", "2m"); default 30s (with --backends-only: until
    /// Ctrl-C).
    #[arg(long, value_parser = duration)]
    duration: Option<Duration>,
    /// New connections, flows or requests per second, per listener and region.
    #[arg(long, default_value_t = 50, value_parser = rate)]
    rate: u32,
    /// Stop a group's endpoints mid-run: GROUP@TIME or LISTENER/GROUP@TIME (repeatable).
    #[arg(long, value_name = "GROUP@TIME")]
    stop: Vec<Change>,
    /// Start them again: GROUP@TIME (repeatable).
    #[arg(long, value_name = "GROUP@TIME")]
    start: Vec<Change>,
    /// Print the final report as JSON (and no live view).
    #[arg(long)]
    json: bool,
    /// Only serve the config's endpoints, for nodes started by hand (`gtd run --bind
    /// 127.0.0.2 --source-ip 127.0.0.2` for the first region, .3 for the next...), until
    /// Ctrl-C or --duration.
    #[arg(long)]
    backends_only: bool,
}

/// Parses `--duration`.
fn duration(s: &str) -> Result<Duration, gtd::config::DurationError> {
    gtd::config::parse_duration(s)
}

/// Parses `--rate`: at least 1.
fn rate(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("the demo needs at least one decision a second".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

impl Demo {
    /// The demo's options.
    pub(crate) fn options(self) -> gtd::demo::Options {
        let duration = self.duration.unwrap_or(if self.backends_only {
            // Serving endpoints for nodes started by hand: until Ctrl-C (a year).
            Duration::from_secs(365 * 86_400)
        } else {
            Duration::from_secs(30)
        });
        gtd::demo::Options {
            config: self.config,
            regions: self.regions,
            duration,
            rate: self.rate,
            stop: self.stop,
            start: self.start,
            json: self.json,
            backends_only: self.backends_only,
        }
    }

    /// Runs the demo and prints its report.
    pub(crate) fn apply(self) -> anyhow::Result<ExitCode> {
        let options = self.options();
        crate::raise_open_files_limit();
        let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
        match runtime.block_on(gtd::demo::run(options)) {
            Ok(text) => {
                print!("{text}");
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("gtd demo: {e:#}");
                Ok(ExitCode::from(1))
            }
        }
    }
}
