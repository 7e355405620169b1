//! `gtd fleet`: the fleet's live nodes, the revision each serves, where their views of group
//! health disagree, and the nodes missing; `gtd fleet diff A B`: two kept revisions compared;
//! `gtd fleet history`: the kept revisions and what each changed; `gtd fleet forget ID`.

use std::process::ExitCode;

use crate::etcd::Etcd;

/// `gtd fleet`'s exit status when nodes are missing (registered once, no entry now).
const MISSING: u8 = 3;

/// `gtd fleet`'s arguments.
#[derive(clap::Args)]
pub(crate) struct Fleet {
    #[command(flatten)]
    etcd: Etcd,
    /// Print JSON: the document `GET /fleet` serves, or (`history`) the kept revisions.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    what: Option<FleetCommand>,
}

#[derive(clap::Subcommand)]
enum FleetCommand {
    /// The text difference of two kept revisions and its effect on shares (`sim --compare`).
    Diff {
        /// The older revision.
        a: u64,
        /// The newer revision.
        b: u64,
    },
    /// The kept revisions, newest first: when, who pushed, the message, what changed.
    History {
        /// The newest N revisions only.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        limit: Option<u64>,
    },
    /// Stop expecting node ID (shown missing since its entry left the registry).
    Forget {
        /// The node's id, as `gtd fleet` lists it.
        id: String,
    },
}

impl Fleet {
    /// Reads the registry (or the revisions) and prints the report.
    pub(crate) fn apply(self) -> anyhow::Result<ExitCode> {
        let (prefix, access) = self.etcd.checked()?;
        let (json, what) = (self.json, self.what);
        // A report that does not serialise is the store's error (never seen).
        let encode =
            |e: serde_json::Error| gtd::fleet::report::Error::from(gtd::fleet::Error::Encode(e));
        crate::etcd::command(|| async {
            let outcome = |out: String, code: u8| gtd::fleet::outcome::Outcome {
                out,
                err: String::new(),
                code,
            };
            let o = match &what {
                Some(FleetCommand::Diff { a, b }) => {
                    let mut store = gtd::fleet::Store::connect(&access, &prefix).await?;
                    let out = gtd::fleet::report::diff(&mut store, *a, *b).await?;
                    outcome(out, 0)
                }
                Some(FleetCommand::History { limit }) => {
                    let limit = limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
                    let h = gtd::fleet::history::read_or_stale(&access, &prefix, limit).await?;
                    if json {
                        outcome(
                            format!("{:#}\n", serde_json::to_value(&h).map_err(encode)?),
                            0,
                        )
                    } else {
                        outcome(h.table(), 0)
                    }
                }
                Some(FleetCommand::Forget { id }) => {
                    let mut store = gtd::fleet::Store::connect(&access, &prefix).await?;
                    gtd::fleet::expected::forget(&mut store, id).await?
                }
                None => {
                    let f = gtd::fleet::report::Fleet::read_or_stale(&access, &prefix).await?;
                    let code = if f.missing.is_empty() { 0 } else { MISSING };
                    if json {
                        outcome(
                            format!(
                                "{}\n",
                                serde_json::to_string_pretty(&f.json()).map_err(encode)?
                            ),
                            code,
                        )
                    } else {
                        outcome(f.table(), code)
                    }
                }
            };
            Ok::<_, gtd::fleet::report::Error>(o)
        })
    }
}
