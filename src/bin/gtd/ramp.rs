//! `gtd ramp`: the fleet's ramp (`gtd push --ramp`) as stored in etcd: its state and every
//! decision, and the commands that stop, pause and resume it.

use std::process::ExitCode;

use crate::etcd::Etcd;

/// `gtd ramp`'s arguments.
#[derive(clap::Args)]
pub(crate) struct Ramp {
    #[command(flatten)]
    etcd: Etcd,
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// The ramp: its state, step, revision, driving node and every decision with its figures.
    Status {
        /// As JSON (the record without the steps' config texts).
        #[arg(long)]
        json: bool,
    },
    /// Go back to the starting revision at once (the driving node publishes it).
    Abort,
    /// Neither advance nor judge until `gtd ramp resume`.
    Pause,
    /// Go on after `gtd ramp pause` (the step's window starts again).
    Resume,
}

impl Ramp {
    /// Reads or changes the ramp.
    pub(crate) fn apply(self) -> anyhow::Result<ExitCode> {
        let (what, json) = match self.what {
            What::Status { json } => ("status", json),
            What::Abort => ("abort", false),
            What::Pause => ("pause", false),
            What::Resume => ("resume", false),
        };
        let (prefix, access) = self.etcd.checked()?;
        crate::etcd::command(|| gtd::fleet::ramp::control(&access, &prefix, what, json))
    }
}
