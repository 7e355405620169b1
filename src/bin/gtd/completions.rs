//! `gtd completions SHELL`: the shell's completion script for gtd, written from the clap
//! definitions (so every subcommand and option, and their values where clap knows them).

use std::process::ExitCode;

/// `gtd completions`' arguments.
#[derive(clap::Args)]
pub(crate) struct Completions {
    /// The shell to write the completion script for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

impl Completions {
    /// Writes the script to stdout.
    pub(crate) fn apply(self) -> anyhow::Result<ExitCode> {
        let mut command = crate::command();
        let name = command.get_name().to_owned();
        // Into a buffer first: clap_complete panics when its writer fails, as stdout does when
        // the reader goes away (`gtd completions bash | head`).
        let mut script = Vec::new();
        clap_complete::generate(self.shell, &mut command, name, &mut script);
        crate::print_bytes(&script)?;
        Ok(ExitCode::SUCCESS)
    }
}
