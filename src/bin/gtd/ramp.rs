//! `gtd ramp`: the fleet's ramp (`gtd push --ramp`) as stored in etcd: its state and every
//! decision, and the commands that stop, pause and resume it.

use std::process::ExitCode;

use crate::etcd::Etcd;

/// `gtd ramp`'s arguments.
#[derive(clap::Args)]
pub(crate) struct Ramp {
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
        #[command(flatten)]
        etcd: Etcd,
    },
    /// Go back to the starting revision at once (the driving node publishes it).
    Abort {
        #[command(flatten)]
        etcd: Etcd,
    },
    /// Neither advance nor judge until `gtd ramp resume`.
    Pause {
        #[command(flatten)]
        etcd: Etcd,
    },
    /// Go on after `gtd ramp pause` (the step's window starts again).
    Resume {
        #[command(flatten)]
        etcd: Etcd,
    },
}

impl Ramp {
    /// Reads or changes the ramp.
    pub(crate) fn apply(self) -> anyhow::Result<ExitCode> {
        let (what, json, etcd) = match self.what {
            What::Status { json, etcd } => ("status", json, etcd),
            What::Abort { etcd } => ("abort", false, etcd),
            What::Pause { etcd } => ("pause", false, etcd),
            What::Resume { etcd } => ("resume", false, etcd),
        };
        let (prefix, access) = etcd.checked()?;
        crate::etcd::command(|| gtd::fleet::ramp::control(&access, &prefix, what, json))
    }
}
