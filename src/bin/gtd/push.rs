//! `gtd push`: publishes a validated config as the fleet's next revision, or an older one
//! again (`--rollback`); `--dry-run` shows what it would change.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::etcd::Etcd;

/// `gtd push`'s arguments.
#[derive(clap::Args)]
pub(crate) struct Push {
    #[command(flatten)]
    etcd: Etcd,
    /// The config file to publish.
    #[arg(long, short, default_value = "config.toml")]
    config: PathBuf,
    /// The region catalogue to publish instead of the config's `catalog = ...`.
    #[arg(long)]
    regions: Option<PathBuf>,
    /// Print the text difference and `sim --compare` of the running revision against this
    /// one; publish nothing.
    #[arg(long)]
    dry_run: bool,
    /// Publish the revision before the current one again (or revision REV) as a new
    /// revision.
    #[arg(long, value_name = "REV", num_args = 0..=1, conflicts_with_all = ["config", "regions"])]
    rollback: Option<Option<u64>>,
    /// What to say of this revision (why it was pushed), stored with it: `gtd fleet history`
    /// lists it.
    #[arg(long, short = 'm', value_name = "MESSAGE", default_value = "")]
    message: String,
    /// How many revisions to keep (the new one included).
    #[arg(long, default_value_t = gtd::fleet::DEFAULT_KEEP, value_parser = clap::value_parser!(u64).range(1..))]
    keep: u64,
    /// While a ramp runs (gtd push --ramp) a push is refused (exit 2, nothing published):
    /// with --force, stop the ramp where it is (recorded as aborted; it does not go back) and
    /// publish this revision, both in one etcd transaction.
    #[arg(long, conflicts_with = "ramp")]
    force: bool,
    /// Move in steps of moved traffic (the share of the fleet's decisions that change group)
    /// instead of at once: the plan is stored in etcd and the fleet's nodes drive it, each
    /// step judged by the nodes' own counters (gtd ramp status); with --dry-run, print the
    /// plan per step, node and group, with the capacity check of every step and way back;
    /// exit 2 when it is refused (or a ramp is already running).
    #[arg(long, conflicts_with = "rollback")]
    ramp: bool,
    /// The ramp's steps, percent of the whole move, the last 100.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,5,20,50,100",
        requires = "ramp"
    )]
    steps: Vec<f64>,
    /// A scenario with [demand] for the ramp's capacity check (sim's rules).
    #[arg(long, value_name = "FILE", requires = "ramp")]
    scenario: Option<PathBuf>,
    /// With --ramp: print each step's gates until the ramp ends; exit 0 when it completed,
    /// 3 when it went back (the fleet on the starting revision), 2 when refused.
    #[arg(long, requires = "ramp")]
    follow: bool,
    /// With --ramp: the least a step lasts.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration, requires = "ramp")]
    min_wait: Duration,
    /// With --ramp: the longest a step waits for enough traffic to judge it.
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = duration, requires = "ramp")]
    max_wait: Duration,
    /// With --ramp: the least the last step lasts.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration, requires = "ramp")]
    bake: Duration,
    /// With --ramp: a step without enough traffic by --max-wait: hold (neither advance nor go
    /// back, until --hold-limit), revert (go back) or proceed (advance on what was seen).
    #[arg(long, value_name = "WHAT", default_value = "hold", value_parser = ["hold", "revert", "proceed"], requires = "ramp")]
    on_inconclusive: String,
    /// With --ramp: how long a held step waits before the ramp goes back.
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = duration, requires = "ramp")]
    hold_limit: Duration,
}

fn duration(s: &str) -> Result<Duration, String> {
    gtd::config::parse_duration(s).map_err(|e| e.to_string())
}

impl Push {
    /// The push's options, the credentials files read.
    pub(crate) fn options(self) -> anyhow::Result<gtd::fleet::push::Options> {
        let (prefix, etcd) = self.etcd.checked()?;
        Ok(gtd::fleet::push::Options {
            prefix,
            etcd,
            config: self.config,
            regions: self.regions,
            keep: self.keep,
            dry_run: self.dry_run,
            rollback: self.rollback,
            message: self.message,
            force: self.force,
        })
    }

    /// Publishes (or shows) the revision.
    pub(crate) fn apply(self) -> anyhow::Result<ExitCode> {
        if self.ramp {
            use gtd::fleet::ramp::record::{Inconclusive, Settings};
            if self.min_wait > self.max_wait {
                anyhow::bail!("--min-wait is longer than --max-wait");
            }
            let ms = |d: Duration| d.as_millis() as u64;
            let inputs = gtd::fleet::ramp::Inputs {
                steps: self.steps.clone(),
                scenario: self.scenario.clone(),
                settings: Some(Settings {
                    min_wait_ms: ms(self.min_wait),
                    max_wait_ms: ms(self.max_wait),
                    bake_ms: ms(self.bake),
                    hold_limit_ms: ms(self.hold_limit),
                    on_inconclusive: match self.on_inconclusive.as_str() {
                        "revert" => Inconclusive::Revert,
                        "proceed" => Inconclusive::Proceed,
                        _ => Inconclusive::Hold,
                    },
                    keep: self.keep,
                }),
                follow: self.follow,
            };
            let opts = self.options()?;
            return crate::etcd::command(|| async { gtd::fleet::ramp::run(&opts, &inputs).await });
        }
        let opts = self.options()?;
        crate::etcd::command(|| async { gtd::fleet::push::run(&opts).await })
    }
}
