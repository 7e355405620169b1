//! `gtd man`: the manual page, roff written from the clap definitions: gtd(1) on stdout, or
//! with `--dir` one page per command (`gtd.1`, `gtd-fleet.1`, `gtd-fleet-history.1`, ...).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

/// `gtd man`'s arguments.
#[derive(clap::Args)]
pub(crate) struct Man {
    /// Write every page (gtd.1 and one per subcommand) into this directory instead of gtd(1)
    /// to stdout.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

impl Man {
    /// Writes the page(s).
    pub(crate) fn apply(self) -> anyhow::Result<ExitCode> {
        let mut command = crate::command();
        // NAME reads `gtd - a global traffic director...`, not `gtd - gtd — ...`.
        if let Some(about) = command
            .get_about()
            .and_then(|a| a.to_string().strip_prefix("gtd — ").map(str::to_owned))
        {
            command = command.about(about);
        }
        match self.dir {
            Some(dir) => {
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                clap_mangen::generate_to(command, &dir)
                    .with_context(|| format!("writing the pages into {}", dir.display()))?;
            }
            None => {
                let mut page = Vec::new();
                clap_mangen::Man::new(command)
                    .render(&mut page)
                    .context("writing the page")?;
                crate::print_bytes(&page)?;
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}
