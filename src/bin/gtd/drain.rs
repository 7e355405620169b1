//! `gtd drain` and `gtd undrain`: a fleet-wide drain of an endpoint (or of every endpoint of a
//! group), published through etcd for every node to apply (docs/operations.md).

use std::process::ExitCode;

use crate::etcd::Etcd;

/// `gtd drain`'s arguments.
#[derive(clap::Args)]
pub(crate) struct Drain {
    /// What to drain: LISTENER/GROUP/ENDPOINT (the address as the config writes it), or
    /// LISTENER/GROUP for every endpoint of the group.
    target: gtd::fleet::drain::Target,
    /// Why, for `gtd fleet` and every node's /status.
    #[arg(long, short)]
    message: Option<String>,
    #[command(flatten)]
    etcd: Etcd,
}

/// `gtd undrain`'s arguments.
#[derive(clap::Args)]
pub(crate) struct Undrain {
    /// What `gtd drain` was given.
    target: gtd::fleet::drain::Target,
    #[command(flatten)]
    etcd: Etcd,
}

impl Drain {
    /// Checks the target against the current revision and writes the drain.
    pub(crate) fn apply(self) -> anyhow::Result<ExitCode> {
        run(self.etcd, self.target, self.message, true)
    }
}

impl Undrain {
    /// Deletes the drain.
    pub(crate) fn apply(self) -> anyhow::Result<ExitCode> {
        run(self.etcd, self.target, None, false)
    }
}

fn run(
    etcd: Etcd,
    target: gtd::fleet::drain::Target,
    message: Option<String>,
    drain: bool,
) -> anyhow::Result<ExitCode> {
    let (prefix, etcd) = etcd.checked()?;
    let opts = gtd::fleet::drain::Options {
        etcd,
        prefix,
        target,
        message,
        drain,
    };
    crate::etcd::command(|| gtd::fleet::drain::run(&opts))
}
