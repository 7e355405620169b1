//! The `gtd` node binary.
//!
//! `gtd check [--config F] [--regions R]` validates a config and its region catalogue: every
//! error on stderr as `FILE:LINE:COL: path: message` and exit status 1, or a summary on stdout
//! and exit status 0.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

/// gtd — a global traffic director.
#[derive(Parser)]
#[command(name = "gtd", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a config file and its region catalogue; print every error, or a summary.
    Check {
        /// The config file.
        #[arg(long, short, default_value = "config.toml")]
        config: PathBuf,
        /// The region catalogue to use instead of the config's `catalog = ...`.
        #[arg(long)]
        regions: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<ExitCode> {
    match Cli::parse().command {
        Command::Check { config, regions } => check(config, regions),
    }
}

fn check(config: PathBuf, regions: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    match gtd::config::load(&config, regions.as_deref()) {
        Ok(cfg) => {
            let mut out = std::io::stdout().lock();
            out.write_all(cfg.summary().as_bytes())
                .context("writing the summary")?;
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => {
            let mut err = std::io::stderr().lock();
            for e in &errors.0 {
                writeln!(err, "{e}")?;
            }
            let n = errors.0.len();
            writeln!(
                err,
                "{n} {} in {}",
                if n == 1 { "error" } else { "errors" },
                config.display()
            )?;
            Ok(ExitCode::FAILURE)
        }
    }
}
