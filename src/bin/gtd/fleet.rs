//! `gtd fleet`: the fleet's live nodes, the revision each serves, and where their views of
//! group health disagree; `gtd fleet diff A B`: two kept revisions compared.

use std::process::ExitCode;

use crate::etcd::Etcd;

/// `gtd fleet`'s arguments.
#[derive(clap::Args)]
pub(crate) struct Fleet {
    #[command(flatten)]
    etcd: Etcd,
    /// Print JSON (the document `GET /fleet` serves).
    #[arg(long)]
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
}

impl Fleet {
    /// Reads the registry (or the two revisions) and prints the report.
    pub(crate) fn apply(self) -> anyhow::Result<ExitCode> {
        let (prefix, access) = self.etcd.checked()?;
        let (json, what) = (self.json, self.what);
        crate::etcd::command(|| async {
            let mut store = gtd::fleet::Store::connect(&access, &prefix).await?;
            let out = match &what {
                Some(FleetCommand::Diff { a, b }) => gtd::fleet::report::diff(&mut store, *a, *b)
                    .await
                    .map_err(|e| e.into_store())?,
                None => {
                    let f = gtd::fleet::report::Fleet::read(&mut store).await?;
                    if json {
                        format!("{:#}\n", f.json())
                    } else {
                        f.table()
                    }
                }
            };
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(gtd::fleet::push::Outcome {
                out,
                err: String::new(),
                code: 0,
            })
        })
    }
}
