//! `gtd check`: validates a config and its region catalogue; every error on stderr as
//! `FILE:LINE:COL: path: message` and exit status 1, or a summary on stdout and exit status 0.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

/// `gtd check`'s arguments.
#[derive(clap::Args)]
pub(crate) struct Check {
    /// The config file.
    #[arg(long, short, default_value = "config.toml")]
    config: PathBuf,
    /// The region catalogue to use instead of the config's `catalog = ...`.
    #[arg(long)]
    regions: Option<PathBuf>,
    /// Also check that a node of this acceleration region would serve something (what
    /// `gtd run --region` refuses otherwise).
    #[arg(long)]
    region: Option<String>,
}

impl Check {
    /// Validates and prints the errors or the summary.
    pub(crate) fn apply(self) -> anyhow::Result<ExitCode> {
        match gtd::config::load(&self.config, self.regions.as_deref()) {
            Ok(cfg) => {
                let mut err = std::io::stderr().lock();
                for w in &cfg.warnings {
                    writeln!(err, "warning: {w}")?;
                }
                if let Some(region) = self.region
                    && let Err(e) = cfg.serves(&region)
                {
                    writeln!(err, "{e}")?;
                    return Ok(ExitCode::FAILURE);
                }
                let mut out = std::io::stdout().lock();
                out.write_all(cfg.summary().as_bytes())
                    .context("writing the summary")?;
                Ok(ExitCode::SUCCESS)
            }
            Err(errors) => {
                writeln!(std::io::stderr().lock(), "{}", errors.report(&self.config))?;
                Ok(ExitCode::FAILURE)
            }
        }
    }
}
